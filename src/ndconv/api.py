"""Public convolution functions with MLX's semantics, for PyTorch tensors (channels last).

Every function parses its arguments into a ConvProblem (which validates them), promotes the
dtypes as MLX does, and runs the problem through one differentiable op.
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Sequence

import numpy as np
import torch

from . import planner
from .autograd import convolve, run
from .problem import DTYPES, ConvProblem, deterministic_mode

_WRAPPER_NDIM = {"conv1d": 1, "conv2d": 2, "conv3d": 3, "conv_transpose1d": 1,
                 "conv_transpose2d": 2, "conv_transpose3d": 3}


def _int(value):
    """``value`` as an int if it is an integer (Python's or NumPy's, not a bool), else None."""
    if type(value) is int:
        return value
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    return None


def _listed(value):
    """A NumPy array as the (nested) list of its Python scalars, as MLX's bindings read one; any
    other value as it is."""
    return value.tolist() if isinstance(value, np.ndarray) else value


def _ints(op: str, name: str, value, ndim: int) -> tuple[int, ...]:
    """An int or a sequence of ints (length 1 broadcasts) as one int per spatial axis."""
    value = _listed(value)
    one = _int(value)
    if one is not None:
        return (one,) * ndim
    if isinstance(value, Sequence) and all(_int(v) is not None for v in value):
        if len(value) == 1:
            return (_int(value[0]),) * ndim
        if len(value) == ndim:
            return tuple(_int(v) for v in value)
        raise ValueError(
            f"{op}: {name} must have one entry per spatial axis ({ndim}) or a single entry, "
            f"got {list(value)}"
        )
    raise ValueError(f"{op}: {name} must be an int or a sequence of ints, got {value!r}")


def _padding(op: str, value, ndim: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """MLX padding forms: int, per-axis sequence (symmetric), or a pair (lo, hi) of sequences."""
    value = _listed(value)
    if isinstance(value, (list, tuple)) and any(isinstance(v, np.ndarray) for v in value):
        value = [_listed(v) for v in value]  # a pair of arrays
    if (
        isinstance(value, Sequence)
        and len(value) == 2
        and all(isinstance(v, Sequence) for v in value)
    ):
        return _ints(op, "padding lo", value[0], ndim), _ints(op, "padding hi", value[1], ndim)
    pad = _ints(op, "padding", value, ndim)
    return pad, pad


def _check_tensors(op: str, input, weight) -> torch.dtype:
    if not isinstance(input, torch.Tensor) or not isinstance(weight, torch.Tensor):
        raise ValueError(
            f"{op}: input and weight must be torch.Tensor, got {type(input).__name__} "
            f"and {type(weight).__name__}"
        )
    if not input.dtype.is_floating_point:
        raise ValueError(f"{op}: input must be floating point, got dtype {input.dtype}")
    if input.dtype not in DTYPES:
        raise ValueError(f"{op}: input dtype must be one of float16, bfloat16, float32, float64, "
                         f"got {input.dtype}")
    if weight.dtype not in DTYPES and (weight.dtype.is_floating_point or weight.dtype.is_complex):
        raise ValueError(
            f"{op}: weight dtype must be an integer type or one of float16, bfloat16, float32, "
            f"float64, got {weight.dtype}"
        )
    if input.device != weight.device:
        raise ValueError(
            f"{op}: input and weight must be on the same device, got {input.device} and {weight.device}"
        )
    return torch.promote_types(input.dtype, weight.dtype)


def _frozen(value):
    """An argument as a hashable key that keeps every distinction the parsers make (ints, and
    sequences of them, which lists and tuples spell alike); TypeError for anything else."""
    if type(value) is int:
        return value
    if isinstance(value, np.ndarray):
        return _frozen(value.tolist())
    if isinstance(value, (list, tuple)):
        value = tuple(value)
        for v in value:  # a flat sequence of ints is its own key (the common case, no recursion)
            if type(v) is not int:
                return tuple(map(_frozen, value))
        return value
    raise TypeError(value)


def _call_key(input, weight, stride, padding, kernel_dilation, input_dilation, groups, flip):
    """What a conv_general call's problem depends on, or None when that is not hashable (such
    calls take the uncached path, which reports their errors; the calling function's name only
    shows in errors, so it is not part of the key)."""
    if type(groups) is not int or type(flip) is not bool:
        return None
    try:
        return (
            input.shape, weight.shape, input.dtype, weight.dtype, input.device, weight.device,
            _frozen(stride), _frozen(padding), _frozen(kernel_dilation), _frozen(input_dilation),
            groups, flip, torch.backends.cudnn.allow_tf32, deterministic_mode(),
        )
    except (AttributeError, TypeError):
        return None


def make_problem(
    x_shape,
    w_shape,
    *,
    dtype=torch.float32,
    device="cpu",
    stride=1,
    padding=0,
    kernel_dilation=1,
    input_dilation=1,
    groups=1,
    flip=False,
    op="conv_general",
) -> ConvProblem:
    """The ConvProblem of ``conv_general`` on operands of these shapes (no tensors needed)."""
    if len(x_shape) not in (3, 4, 5):
        raise ValueError(
            f"{op}: input must have 3 to 5 dimensions [N, *spatial, C] (1 to 3 spatial axes), "
            f"got shape {list(x_shape)}"
        )
    ndim = len(x_shape) - 2
    lo, hi = _padding(op, padding, ndim)
    device_type = torch.device(device).type
    return ConvProblem.create(
        x_shape,
        w_shape,
        stride=_ints(op, "stride", stride, ndim),
        padding_lo=lo,
        padding_hi=hi,
        kernel_dilation=_ints(op, "kernel_dilation", kernel_dilation, ndim),
        input_dilation=_ints(op, "input_dilation", input_dilation, ndim),
        groups=_int(groups) or groups,  # a NumPy integer as an int; anything else validated by create
        flip=flip,
        dtype=dtype,
        device=device_type,
        allow_tf32=device_type == "cuda" and torch.backends.cudnn.allow_tf32,
        op=op,
    )


def conv_general(
    input: torch.Tensor,
    weight: torch.Tensor,
    stride: int | Sequence[int] = 1,
    padding: int | Sequence[int] | tuple[Sequence[int], Sequence[int]] = 0,
    kernel_dilation: int | Sequence[int] = 1,
    input_dilation: int | Sequence[int] = 1,
    groups: int = 1,
    flip: bool = False,
    *,
    algorithm: str | None = None,
    _op: str = "conv_general",
) -> torch.Tensor:
    """General N-d convolution (1 to 3 spatial axes), channels last, exactly as MLX's.

    Args:
        input: ``[N, *spatial, C]``, floating point.
        weight: ``[O, *kernel, C // groups]``; promoted with the input's dtype.
        stride: per-axis stride (int, or one entry, or one per axis).
        padding: int, per-axis sequence (symmetric), or ``(lo, hi)`` pair of sequences; a
            negative pad crops that many elements of the (undilated) input.
        kernel_dilation: spacing between kernel taps.
        input_dilation: spacing between input elements (``input_dilation - 1`` zeros inserted).
        groups: channel groups; must divide C and O.
        flip: reverse the kernel along every spatial axis (convolution instead of correlation).
        algorithm: force one algorithm by name (see ``ndconv.explain``); default: the planner's.

    Returns:
        ``[N, *spatial_out, O]`` in the promoted dtype.
    """
    if algorithm is not None:
        planner.lookup(algorithm)
    if isinstance(input, torch.Tensor):
        device_type = "cuda" if input.is_cuda else input.device.type  # is_cuda: the cheap test first
        # devices without autocast (meta: shape inference, models built empty) have none to ask about
        # (CPU's answer spelled out: torch 2.11's Dynamo cannot trace is_autocast_available)
        autocast = input.is_cuda or device_type == "cpu" or torch.amp.is_autocast_available(device_type)
        if autocast and torch.is_autocast_enabled(device_type):
            input, weight = _autocast(input, weight, device_type)
    # under torch.compile the problem is built every time (Dynamo cannot trace the cache's lock)
    compiling = torch.compiler.is_compiling()
    transformed = not compiling and torch._C._functorch.peek_interpreter_stack() is not None  # torch.func
    key = None if compiling or transformed else _call_key(
        input, weight, stride, padding, kernel_dilation, input_dilation, groups, flip)
    # Recent calls (planner.call_cache()): per distinct call, its problem (validated once) and,
    # once a call has run, the planned computation that an inference call (nothing to
    # differentiate) runs directly: [problem, runner or None]. The forced algorithm and the
    # autotune setting are part of the key.
    calls, entry = planner.call_cache(), None
    if key is not None:
        key = (*key, algorithm or os.environ.get(planner.ENV_ALGORITHM), planner.autotuning())
        entry = calls.get(key)
        if (entry is not None and entry[1] is not None and input.dtype is entry[0].dtype
                and weight.dtype is entry[0].dtype and _inference(input, weight)
                and input.is_contiguous() and weight.is_contiguous()):
            return entry[1](input, weight)  # the whole cached path: one planned call
    if entry is None:
        _check_tensors(_op, input, weight)
        p = make_problem(
            input.shape,
            weight.shape,
            dtype=torch.promote_types(input.dtype, weight.dtype),
            device=input.device,
            stride=stride,
            padding=padding,
            kernel_dilation=kernel_dilation,
            input_dilation=input_dilation,
            groups=groups,
            flip=flip,
            op=_op,
        )
        if key is not None:
            entry = [p, None]
            calls.put(key, entry)
    else:
        p = entry[0]
    if input.dtype != p.dtype:
        input = input.to(p.dtype)
    if weight.dtype != p.dtype:
        weight = weight.to(p.dtype)
    if transformed:
        return _transformable(p, input, weight, algorithm, _op)
    out = convolve(p, input, weight, algorithm)
    if entry is not None and entry[1] is None and not p.is_trivial and _inference(input, weight):
        entry[1] = planner.plan(p, algorithm).runner(p)  # planned by now: a cache hit
    return out


# Algorithms made of PyTorch's own ops only, which torch.func's transforms can transform.
_TRANSFORMABLE = ("native", "gemm", "reference")


def _transformable(p, input, weight, algorithm, op):
    """A call under a torch.func transform (vmap, grad, jvp, jacrev, ...): PyTorch's own
    convolution, which the transform batches and differentiates itself (a Triton kernel cannot
    read its wrapped tensors, and ndconv's autograd Function has none of its rules)."""
    name = algorithm or os.environ.get(planner.ENV_ALGORITHM) or "native"
    if name not in _TRANSFORMABLE:
        raise ValueError(f"{op}: algorithm {name!r} cannot run under a torch.func transform (vmap, grad, "
                         f"jvp, ...): only {', '.join(_TRANSFORMABLE)}, made of PyTorch's ops, can")
    return run(p, input.contiguous(), weight.contiguous(), name)


def _autocast(input, weight, device_type: str):
    """Under ``torch.autocast`` a convolution runs in its lower precision, as PyTorch's do:
    floating operands other than float64 are cast to the autocast dtype."""
    dtype = torch.get_autocast_dtype(device_type)

    def cast(t):
        eligible = isinstance(t, torch.Tensor) and t.dtype in (torch.float32, torch.float16, torch.bfloat16)
        return t.to(dtype) if eligible else t

    return cast(input), cast(weight)


def _inference(input, weight) -> bool:
    return not (torch.is_grad_enabled() and (input.requires_grad or weight.requires_grad))


def _check_wrapper_ndim(op: str, input, ndim: int | None = None) -> int:
    """The spatial axes of wrapper (or layer) ``op``; ValueError when the input has others."""
    ndim = ndim or _WRAPPER_NDIM[op]
    if isinstance(input, torch.Tensor) and input.dim() != ndim + 2:
        raise ValueError(
            f"{op}: input must have {ndim + 2} dimensions [N, *spatial({ndim}), C], "
            f"got shape {list(input.shape)}"
        )
    return ndim


def _conv(op, input, weight, stride, padding, dilation, groups, algorithm):
    ndim = _check_wrapper_ndim(op, input)
    return conv_general(
        input, weight, _ints(op, "stride", stride, ndim), _ints(op, "padding", padding, ndim),
        _ints(op, "dilation", dilation, ndim), 1, groups, False, algorithm=algorithm, _op=op,
    )


def conv1d(input, weight, stride=1, padding=0, dilation=1, groups=1, *, algorithm=None):
    """1-D convolution: input ``[N, L, C]``, weight ``[O, K, C // groups]``, symmetric padding."""
    return _conv("conv1d", input, weight, stride, padding, dilation, groups, algorithm)


def conv2d(input, weight, stride=1, padding=0, dilation=1, groups=1, *, algorithm=None):
    """2-D convolution: input ``[N, H, W, C]``, weight ``[O, KH, KW, C // groups]``."""
    return _conv("conv2d", input, weight, stride, padding, dilation, groups, algorithm)


def conv3d(input, weight, stride=1, padding=0, dilation=1, groups=1, *, algorithm=None):
    """3-D convolution: input ``[N, D, H, W, C]``, weight ``[O, KD, KH, KW, C // groups]``."""
    return _conv("conv3d", input, weight, stride, padding, dilation, groups, algorithm)


def _conv_transpose(op, input, weight, stride, padding, dilation, output_padding, groups, algorithm):
    ndim = _check_wrapper_ndim(op, input)
    stride = _ints(op, "stride", stride, ndim)
    padding = _ints(op, "padding", padding, ndim)
    dilation = _ints(op, "dilation", dilation, ndim)
    output_padding = _ints(op, "output_padding", output_padding, ndim)
    if isinstance(weight, torch.Tensor) and weight.dim() == ndim + 2:
        spans = [(k - 1) * d + 1 for k, d in zip(weight.shape[1:-1], dilation)]
    else:
        spans = [1] * ndim  # conv_general reports the weight's shape error
    # MLX's formula, for any padding and output_padding, negative ones too (MLX takes them); a
    # padding beyond the dilated kernel makes lo negative, and a negative output_padding can make
    # hi negative: both crop undilated input (MLX's semantics; PyTorch's conv_transpose crops the
    # output instead, and refuses negative values)
    lo = [s - 1 - p for s, p in zip(spans, padding)]
    hi = [s - 1 - p + op_ for s, p, op_ in zip(spans, padding, output_padding)]
    return conv_general(
        input, weight, 1, (lo, hi), dilation, stride, groups, True, algorithm=algorithm, _op=op
    )


def conv_transpose1d(
    input, weight, stride=1, padding=0, dilation=1, output_padding=0, groups=1, *, algorithm=None
):
    """1-D transposed convolution; weight in MLX's layout ``[O, K, C // groups]``."""
    return _conv_transpose(
        "conv_transpose1d", input, weight, stride, padding, dilation, output_padding, groups, algorithm
    )


def conv_transpose2d(
    input, weight, stride=1, padding=0, dilation=1, output_padding=0, groups=1, *, algorithm=None
):
    """2-D transposed convolution; weight in MLX's layout ``[O, KH, KW, C // groups]``."""
    return _conv_transpose(
        "conv_transpose2d", input, weight, stride, padding, dilation, output_padding, groups, algorithm
    )


def conv_transpose3d(
    input, weight, stride=1, padding=0, dilation=1, output_padding=0, groups=1, *, algorithm=None
):
    """3-D transposed convolution; weight in MLX's layout ``[O, KD, KH, KW, C // groups]``."""
    return _conv_transpose(
        "conv_transpose3d", input, weight, stride, padding, dilation, output_padding, groups, algorithm
    )


def explain(
    input,
    weight,
    stride=1,
    padding=0,
    kernel_dilation=1,
    input_dilation=1,
    groups=1,
    flip=False,
    *,
    algorithm: str | None = None,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
) -> planner.Explanation:
    """Which algorithm ``conv_general`` would run for each pass (forward, input gradient,
    weight gradient), why each algorithm can or cannot run it, and the tuned timings when the
    tuning cache has them. ``input`` and ``weight`` are tensors or shapes (shapes are of
    ``dtype`` on ``device``). Nothing is computed or tuned."""
    if isinstance(input, torch.Tensor) and isinstance(weight, torch.Tensor):
        dtype, device = _check_tensors("explain", input, weight), input.device
    p = make_problem(
        tuple(input.shape if isinstance(input, torch.Tensor) else input),
        tuple(weight.shape if isinstance(weight, torch.Tensor) else weight),
        dtype=dtype, device=device, stride=stride, padding=padding,
        kernel_dilation=kernel_dilation, input_dilation=input_dilation, groups=groups,
        flip=flip, op="explain",
    )
    return planner.explain(p, algorithm)
