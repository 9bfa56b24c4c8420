"""Direct convolution for small groups: depthwise (groups == C), channel multipliers
(O = m*C), their input gradients (C/groups = m, O/groups = 1) and tiny groups.

A tensor-core GEMM wastes almost all of its tile on these: a depthwise group is a 1x1 "GEMM"
per tap. These kernels run on CUDA cores instead. Output channels are the vector lanes
(channels-last loads, contiguous along C), a block of output positions is the other axis, and
the taps and the group's few input channels are loops. Every input element comes from HBM
about once; the re-reads across taps are served by L1/L2. The weight gradient reduces over
blocks of output positions into a float32 workspace, summed afterwards in a fixed order
(deterministic).

Status: correct on every problem it accepts (tests run the kernels in Triton's interpreter);
not yet measured or tuned on the GPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .triton_support import cdiv, kernel_reason, needs_int64, pad3, spatial_strides

NAME = "depthwise"
# Largest (C/groups) * (O/groups) handled on CUDA cores; wider groups belong to tensor cores.
MAX_GROUP_PRODUCT = 16


@dataclass(frozen=True)
class Config:
    block_p: int  # output positions per program
    block_o: int  # output channels per program
    num_warps: int


def _group_sizes(p):
    """(C/groups, O/groups) of the convolution the kernel runs: for a weight gradient, the
    forward's (the rewritten problem swaps batch and channels)."""
    if p.pass_ == "wgrad":
        return p.batch, p.o_per_group
    return p.c_per_group, p.o_per_group


def supports(p):
    reason = kernel_reason(p)
    if reason:
        return False, reason
    cg, og = _group_sizes(p)
    if cg * og > MAX_GROUP_PRODUCT:
        return False, f"groups of {cg}x{og} channels are GEMMs for tensor cores (limit {MAX_GROUP_PRODUCT})"
    return True, f"direct kernel on CUDA cores for {cg}x{og}-channel groups (depthwise and tiny groups)"


def default_config(p) -> Config:
    return Config(block_p=64 if p.pass_ != "wgrad" else 128, block_o=64, num_warps=4)


def configs(p) -> list[Config]:
    base = default_config(p)
    out = [base]
    for bp in (32, 64, 128, 256):
        for bo in (32, 64, 128):
            for warps in (4, 8):
                c = Config(bp, bo, warps)
                if c not in out:
                    out.append(c)
    return out


def _geometry(stride, kdil, idil, lo):
    return (*pad3(stride, 1), *pad3(kdil, 1), *pad3(idil, 1), *pad3(lo, 0))


def run(p, x, w, out, config: Config | None = None):
    """x [N, *S, G, Cg], w [G, Og, *K, Cg], out [N, *S_out, G, Og] (views with any strides)."""
    config = config or default_config(p)
    if p.pass_ == "wgrad":
        return _run_wgrad(p, x, w, out, config)
    from .depthwise_kernels import direct_fwd_kernel

    D = p.ndim
    O, Cg, Og = p.out_channels, p.c_per_group, p.o_per_group
    rows = p.batch * math.prod(p.out_spatial)
    sx, sw, sy = x.stride(), w.stride(), out.stride()
    grid = (cdiv(rows, config.block_p), cdiv(O, config.block_o))
    direct_fwd_kernel[grid](
        x, w, out, rows, O,
        *pad3(p.in_spatial, 1), *pad3(p.out_spatial, 1), *pad3(p.kernel, 1),
        *_geometry(p.stride, p.kernel_dilation, p.input_dilation, p.padding_lo),
        sx[0], *spatial_strides(x, 1, D), sx[-2], sx[-1],
        sw[0], sw[1], *spatial_strides(w, 2, D), sw[-1],
        sy[0], *spatial_strides(out, 1, D), sy[-2], sy[-1],
        CG=Cg, OG=Og, FLIP=p.flip, INT64=needs_int64(x, w, out),
        BLOCK_P=config.block_p, BLOCK_O=config.block_o, num_warps=config.num_warps,
    )


def _run_wgrad(p, x_t, dy_t, dw_t, config: Config):
    from .depthwise_kernels import direct_wgrad_kernel

    D = p.ndim
    x, dy, dw, (stride, kdil, idil, lo, out_spatial, kernel) = p.wgrad_natural(x_t, dy_t, dw_t)
    Cg, Og = _group_sizes(p)
    O = p.out_channels
    taps = math.prod(kernel)
    rows = x.shape[0] * math.prod(out_spatial)
    blocks = cdiv(rows, config.block_p)
    ws = torch.empty((blocks, taps, Cg, O), device=x.device, dtype=torch.float32)
    sx, sd = x.stride(), dy.stride()
    grid = (blocks, cdiv(O, config.block_o))
    direct_wgrad_kernel[grid](
        x, dy, ws, rows, O,
        *pad3(p.in_spatial, 1), *pad3(out_spatial, 1), *pad3(kernel, 1),
        *_geometry(stride, kdil, idil, lo),
        sx[0], *spatial_strides(x, 1, D), sx[-2], sx[-1],
        sd[0], *spatial_strides(dy, 1, D), sd[-2], sd[-1],
        CG=Cg, OG=Og, INT64=needs_int64(x, dy),
        BLOCK_P=config.block_p, BLOCK_O=config.block_o, num_warps=config.num_warps,
    )
    # [taps, Cg, G*Og] -> dw [G, Og, *K, Cg]
    total = ws.sum(0).view(*kernel, Cg, p.groups, Og)
    dw.copy_(total.permute(D + 1, D + 2, *range(D), D))
