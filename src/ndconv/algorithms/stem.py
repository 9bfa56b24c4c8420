"""Convolutions with few input channels (RGB stems, audio models' first layers): a kernel row's
taps over all channels read as one window.

With at most 4 input channels, zero-padded to 4 in a copy that also pads the borders, a row of
the input holds its positions' channels back to back. The inputs an output reads through one
kernel row (its taps along the last axis times the channels) are then one contiguous run of
span*4 elements, and the next output's run starts stride*4 elements later. So the GEMM's
reduction is (kernel row, window element): per kernel row, the A tile is a [BLOCK_M, WINDOW]
strided view of the copy (16-byte loads, no per-element index arithmetic) against the weight
rearranged to [O, kernel rows, WINDOW] (zero past the kernel). The windows overlap (a 3x3
stride-1 stem's 16-element windows start 4 elements apart): the kernel's loads are plain ones,
which L1 serves, where the TMA and cp.async loads of implicit_gemm come from L2.

Measured on the H200 (bf16, us of GPU time with the copies; ``python -m ndconv bench --suite
stems``, docs/PERFORMANCE.md):

| layer | stem | implicit_gemm | PyTorch |
|---|---:|---:|---:|
| EfficientNet stem, 64x224x224x3 -> 32, 3x3 s2 (pad 0, 1) | 49.5 | 66.0 | 174.8 |
| ConvNeXt stem, 64x224x224x3 -> 96, 4x4 s4 | 48.0 | 58.4 | 132.4 |
| SD VAE conv_in, 8x256x256x3 -> 128, 3x3 | 58.8 | 117.4 | 167.6 |
| grayscale, 32x256x256x1 -> 32, 3x3 | 74.3 | 581.6 | 246.9 |
| ResNet stem, 64x224x224x3 -> 64, 7x7 s2 | 128.2 | 102.7 | 456.2 |
| wav2vec2 conv0, 8x16000x1 -> 512, k10 s5 | 19.6 | 62.2 | 58.0 |
| DAC conv0, 8x44100x1 -> 64, k7 | 25.1 | 101.2 | 77.1 |

The 7x7 stem's reduction (7 kernel rows of 32-element windows) is too long for a kernel whose
loads are barely overlapped (each issued one product early): 97 us for the GEMM alone, where
implicit_gemm's TMA pipeline takes 88. ``wins`` holds the measured rule (reductions of at most 64 elements).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import torch

from .implicit_gemm import padded_blocks_launch
from .triton_support import (
    INTERPRET,
    BoundLaunch,
    allocating,
    cdiv,
    kernel_reason,
    meta_views,
    needs_int64,
    pow2_at_least,
)

NAME = "stem"
CHANNELS = 4  # input channels are padded to this many: 8-byte positions, 16-byte windows
MAX_WINDOW = 64  # elements of a kernel row's window (16 positions)
MAX_REDUCTION = 64  # wins: the longest reduction (kernel rows x window) measured faster


@dataclass(frozen=True)
class Config:
    block_m: int = 64  # output positions per program
    block_n: int = 64  # output channels per program
    rows: int = 1  # kernel rows per tensor-core product
    num_warps: int = 4


def _window(p) -> int:
    """Elements of a kernel row's window: its span along the last axis times the padded channels,
    rounded up to a power of two (at least 16, the tensor cores' smallest reduction)."""
    return max(16, pow2_at_least(p.span[-1] * CHANNELS))


def _two_d(values, fill):
    """Per-axis values of a 1-D or 2-D problem as (rows axis, last axis)."""
    values = tuple(values)
    return (fill,) * (2 - len(values)) + values


def _kernel_rows(p) -> int:
    """Kernel rows: taps along the first axis of a 2-D problem (1 for a 1-D one)."""
    return _two_d(p.kernel, 1)[0]


def supports(p):
    reason = kernel_reason(p)
    if reason:
        return False, reason
    if p.pass_ != "fwd":
        return False, "computes forward passes (a stem's gradients are wide problems: implicit_gemm)"
    if p.ndim > 2:
        return False, "1-D and 2-D problems only"
    if p.groups != 1 or p.in_channels > CHANNELS:
        return False, (f"for ungrouped inputs of at most {CHANNELS} channels "
                       f"(groups {p.groups}, C {p.in_channels})")
    if any(d > 1 for d in p.input_dilation):
        return False, "input dilation (transposed convolutions): implicit_gemm's output phases"
    if p.kernel_dilation[-1] != 1:
        return False, "a dilated last axis leaves gaps in the window"
    if p.span[-1] * CHANNELS > MAX_WINDOW:
        return False, (f"kernel spans {p.span[-1]} positions along the last axis, "
                       f"more than {MAX_WINDOW // CHANNELS}")
    return True, (f"each kernel row's taps over the {p.in_channels} channel(s), padded to {CHANNELS}, as one "
                  f"{_window(p)}-element window of a padded copy")


def wins(p) -> bool:
    """Whether the H200 measured this kernel faster than the others on problems like ``p``
    (module docstring): reductions of at most MAX_REDUCTION elements (1-D and 2-D, 1 to 4 input
    channels measured)."""
    return _kernel_rows(p) * _window(p) <= MAX_REDUCTION


def default_config(p) -> Config:
    """4 warps; all output channels a program up to 128 (SD VAE's conv_in: 53 against 57 us in
    64 x 64 tiles); 128 positions for narrow outputs (EfficientNet's 32 channels: 30 against 32
    us), else 64; two kernel rows a product where they fill it exactly (ConvNeXt's 4x4: 30
    against 35 us). The GEMM alone on the H200, before the loads were issued early."""
    block_n = pow2_at_least(p.out_channels, 16, 128)
    rows = 2 if _kernel_rows(p) % 2 == 0 and 2 * _window(p) <= MAX_WINDOW else 1
    return Config(128 if block_n <= 32 else 64, block_n, rows)


def configs(p) -> list[Config]:
    """The search space for autotuning (the default first)."""
    out = [default_config(p)]
    widths = sorted({pow2_at_least(p.out_channels, 16, 128), 64, 32})
    for block_m in (64, 128, 256):
        for block_n in widths:
            for rows in (1, 2) if _kernel_rows(p) > 1 and 2 * _window(p) <= MAX_WINDOW else (1,):
                for warps in (4, 8):
                    c = Config(block_m, block_n, rows, warps)
                    if block_m * block_n <= 256 * 64 and c not in out:
                        out.append(c)
    return out


@lru_cache(maxsize=256)
def _geometry(p, rows: int):
    """(kernel rows padded to a multiple of ``rows``, the copy's rows and positions per row, the
    alignment of every window in elements). The copy holds exactly what the outputs read, its
    rows padded so that every window starts at a multiple of ``align`` elements."""
    (kh, _), (sh, sw), (dh, _) = (_two_d(v, 1) for v in (p.kernel, p.stride, p.kernel_dilation))
    oh, ow = _two_d(p.out_spatial, 1)
    kh_padded = cdiv(kh, rows) * rows
    per_16_bytes = 16 // p.dtype.itemsize
    align = math.gcd(sw * CHANNELS, per_16_bytes)
    row_quantum = per_16_bytes // math.gcd(per_16_bytes, CHANNELS)  # positions per aligned row
    width = cdiv((ow - 1) * sw + _window(p) // CHANNELS, row_quantum) * row_quantum
    return kh_padded, (oh - 1) * sh + (kh_padded - 1) * dh + 1, width, align


def _launches(p, x, w, out, config: Config):
    """The copies of x [N, H, W, C] and w [O, KH, KW, C] (read order: flipped already) the kernel
    reads, new, and the (grid, args, meta) of the two copies' launches and of the kernel's
    (out [N, OH, OW, O], any strides)."""
    kh_padded, height, width, align = _geometry(p, config.rows)
    window = _window(p)
    xp, copy_x = padded_blocks_launch(x, (height, width), (1, 1), _two_d(p.padding_lo, 0), CHANNELS)
    wp, copy_w = padded_blocks_launch(w, (kh_padded, window // CHANNELS), (1, 1), (0, 0), CHANNELS)
    N, OH, OW, O = out.shape
    M = N * OH * OW
    (sh, sw), dh = _two_d(p.stride, 1), _two_d(p.kernel_dilation, 1)[0]
    precision = "tf32" if p.allow_tf32 else "ieee"
    args = (xp, wp, out, M, OW, OH * OW, O, xp.stride(0) // align, xp.stride(1) // align, *out.stride())
    meta = dict(SH=sh, SW=sw, DH=dh, CP=CHANNELS, KH=_kernel_rows(p), DOTS=kh_padded // config.rows,
                ROWS=config.rows, WINDOW=window, USED=p.span[-1] * CHANNELS, ALIGN=align,
                INT64=needs_int64(xp, wp, out), PRECISION=precision,
                UPCAST=INTERPRET, INTERPRET=INTERPRET, BLOCK_M=config.block_m, BLOCK_N=config.block_n,
                num_warps=config.num_warps)
    grid = (cdiv(M, config.block_m), cdiv(O, config.block_n))
    return (xp, copy_x), (wp, copy_w), (grid, args, meta)


def _natural(p, x, w, out):
    """The grouped views (groups 1) as [N, H, W, C], [O, KH, KW, C] in read order, [N, OH, OW, O]
    (a 1-D problem's with one row)."""
    x, w, out = x[..., 0, :], w[0], out[..., 0, :]
    if p.flip:
        w = w.flip(tuple(range(1, p.ndim + 1)))
    if p.ndim == 1:
        x, w, out = x.unsqueeze(1), w.unsqueeze(1), out.unsqueeze(1)
    return x, w, out


def run(p, x, w, out, config: Config | None = None):
    """x [N, *S, 1, C], w [1, O, *K, C], out [N, *S_out, 1, O] (views with any strides)."""
    from .implicit_gemm_kernels import padded_blocks_kernel
    from .stem_kernels import stem_fwd_kernel

    config = config or default_config(p)
    x, w, out = _natural(p, x, w, out)
    if x.stride(-1) != 1:
        x = x.contiguous()
    if w.stride(-1) != 1:
        w = w.contiguous()
    (_, copy_x), (_, copy_w), (grid, args, meta) = _launches(p, x, w, out, config)
    for grid_, args_, meta_ in (copy_x, copy_w):
        padded_blocks_kernel[grid_](*args_, **meta_)
    stem_fwd_kernel[grid](*args, **meta)


def prepare(p, config: Config):
    """``p``'s call on the natural contiguous operands with its three launches (the two copies and
    the kernel) bound once; None for flipped weights (``run`` flips a copy per call)."""
    from .implicit_gemm_kernels import padded_blocks_kernel
    from .stem_kernels import stem_fwd_kernel

    views = meta_views(p)
    if p.flip or views is None:
        return None
    x, w, out = _natural(p, *views)  # share the natural operands' data pointers
    (xp, copy_x), (wp, copy_w), launch = _launches(p, x, w, out, config)
    bound_x = BoundLaunch(padded_blocks_kernel, *copy_x, operands=(x, xp))
    bound_w = BoundLaunch(padded_blocks_kernel, *copy_w, operands=(w, wp))
    bound = BoundLaunch(stem_fwd_kernel, *launch, operands=(xp, wp, out))
    dtype = p.dtype

    def launch_all(a, b, result):
        a_copy = torch.empty(xp.shape, dtype=dtype, device=a.device)
        b_copy = torch.empty(wp.shape, dtype=dtype, device=a.device)
        bound_x(a, a_copy)
        bound_w(b, b_copy)
        bound(a_copy, b_copy, result)
    return allocating(p, launch_all)
