"""Compiling ndconv's Triton kernels for sm_90 on any machine (no GPU needed), with the launch
arguments their own launchers produce: the helpers of tools/grouped_ptx.py and tools/tma_ptx.py.

Integers are specialised as Triton's JIT does on the GPU (1 as a constant, multiples of 16 marked
divisible) and tensors as 16-byte aligned, so the code matches what the H200 would compile.
"""

from __future__ import annotations

import os

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.tools.tensor_descriptor import TensorDescriptor

TARGET = GPUTarget("cuda", 90, 64)
BIN = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")  # ptxas, cuobjdump
_TY = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32", torch.int32: "i32"}


class Capture:
    """Stands in for a @triton.jit kernel: records each launch instead of running it."""

    def __init__(self, fn):
        self.fn, self.calls = fn, []

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.calls.append((grid, args, kwargs))


def compile_sm90(fn, args, kwargs):
    """``fn`` compiled for sm_90 as a launch ``fn[grid](*args, **kwargs)`` would compile it."""
    kwargs = dict(kwargs)
    options = {k: kwargs.pop(k) for k in ("num_warps", "num_stages", "maxnreg") if k in kwargs}
    signature, constexprs, attrs = {}, dict(kwargs), {}
    for i, (name, value) in enumerate(zip(fn.arg_names, args)):
        if fn.params[i].is_constexpr:
            constexprs[name] = value
        elif isinstance(value, TensorDescriptor):
            signature[name] = f"tensordesc<{_TY[value.base.dtype]}[{','.join(map(str, value.block_shape))}]>"
        elif isinstance(value, torch.Tensor):
            signature[name] = f"*{_TY[value.dtype]}"
            attrs[(i,)] = [["tt.divisibility", 16]]
        elif isinstance(value, bool):
            signature[name] = "i1"
        elif value == 1:
            constexprs[name] = 1
        else:
            signature[name] = "i32" if -2**31 <= value < 2**31 else "i64"
            if value % 16 == 0:
                attrs[(i,)] = [["tt.divisibility", 16]]
    for name in constexprs:
        signature[name] = "constexpr"
    return triton.compile(ASTSource(fn, signature, constexprs, attrs), target=TARGET, options=options)
