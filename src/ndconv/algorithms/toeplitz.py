"""Depthwise convolution with long kernels on tensor cores: a banded (Toeplitz) GEMM per channel.

Along one spatial axis (the *band axis*, the one with the longest kernel), a kernel row is a
banded matrix: for channel c and taps t1, t2 on the other axes,

    y[n, j1, j2, j, c] += sum_i X[n, u1, u2, i, c] * T_{c,t1,t2}[i, j],
    T_{c,t1,t2}[i, j] = w'[c, t1, t2, (i - j*st)/kd]  when that is a tap, else 0,

with u = j*st + t*kd - lo on axes 1 and 2 and w' the weight in read order (reversed when flip).
Batched over rows (n, j1, j2, and tiles of TILE_W outputs along the band axis) this is a GEMM per
channel: M = rows, K = the window of input positions a tile reads ((TILE_W-1)*st + span), N =
TILE_W. The band multiplies zeros: K*N products per tile where the convolution needs k*N, about
(TILE_W + k - 1)/k times the useful work, which the tensor cores repay for long kernels.

The operands are made planar first by a Triton transpose kernel (kernel_utils.planar_copy_kernel): x to
[G, N, *S] with the band axis last, shifted by its low pad and zero-filled so that every window
starts at a multiple of 16 elements (unaligned windows made Triton split the loads into 2-byte
ones: 2.5x slower), and the result computed as [O, N, *S_out] and copied into place (about
25 us each way on RepLKNet's 31x31 layer, 26 MB). One program, one channel and BLOCK_M rows,
then loads its input as [BLOCK_M, BLOCK_K] tiles of contiguous runs and runs a plain 2-D
tl.dot, which Triton lowers to wgmma. A first kernel writes each (channel, t1, t2)'s Toeplitz
block into a table [O, K1*K2, window, TILE_W] (16 MB for that layer), read by every row tile of
the channel. The four launches are bound once per plan (``prepare``).

Arithmetic for dw31x31_56 (x [32, 56, 56, 128], 31x31, bf16), TILE_W = 32: window 62 -> 64
positions, 2 tiles per 56-wide row: 58 GFLOP on tensor cores against 24.7 useful. Operand
traffic from L2: a [BLOCK_M, 64] input tile per 2 * BLOCK_M * 64 * 32 products (32 FLOP per
byte), about 1.8 GB, which bounds it. Measured on the H200: 0.32 ms (the CUDA-core depthwise
kernel 1.56, PyTorch 12.2). The first version kept channels-last operands and ran a batched
(rank-3) dot with the channels as the batch axis; Triton lowers that to mma.sync with operands
moved through shared memory, and it lost to depthwise (its input gradient 1.98 ms against
1.43).

Refused: weight gradients (a reduction over rows, not a banded product: depthwise), input
dilation (transposed convolutions and input gradients of strided ones: depthwise handles their
phases), groups with more than one input channel. Short kernels and exact fp32 (an fp32 "ieee"
dot runs on CUDA cores, multiplying the band's zeros too) run, but gain the least.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .triton_support import (
    INTERPRET,
    BoundLaunch,
    allocating,
    cdiv,
    group_channels,
    kernel_reason,
    meta_views,
    needs_int64,
    pad3,
    planar_copy_launch,
    pow2_at_least,
)

NAME = "toeplitz"

# Longest window (input positions per tile) a program multiplies: the table and the operand
# tiles grow with it. Kernels wider than this (span > 241 at TILE_W = 16) are refused.
MAX_WINDOW = 256
TILE_WIDTHS = (16, 32, 64, 128)


@dataclass(frozen=True)
class Config:
    tile_w: int  # outputs per row tile along the band axis (N of the GEMM)
    block_k: int  # window positions per tl.dot (K step)
    block_m: int  # rows per program (M)
    num_warps: int = 4
    num_stages: int = 3


def band_axis(p) -> int:
    """The spatial axis whose kernel becomes the band: the longest dilated kernel (ties: the
    last axis, the one contiguous in memory after the channels)."""
    spans = p.span
    return max(range(p.ndim), key=lambda d: (spans[d], d))


def _window(p, tile_w: int) -> int:
    """Input positions a tile of ``tile_w`` outputs reads along the band axis."""
    a = band_axis(p)
    return (tile_w - 1) * p.stride[a] + p.span[a]


def supports(p):
    reason = kernel_reason(p)
    if reason:
        return False, reason
    if p.pass_ == "wgrad":
        return False, "weight gradients are reductions over rows, not banded products (depthwise)"
    cg = group_channels(p)[0]
    if cg != 1:
        return False, f"groups of {cg} input channels: not depthwise (depthwise, grouped, implicit_gemm)"
    if any(d > 1 for d in p.input_dilation):
        return False, ("input dilation (transposed or strided-gradient problems): "
                       "depthwise handles their phases")
    if _window(p, TILE_WIDTHS[0]) > MAX_WINDOW:
        return False, f"kernel span {max(p.span)} is wider than a {MAX_WINDOW}-position window"
    a = band_axis(p)
    return True, f"banded GEMM on tensor cores along axis {a} (kernel {p.kernel[a]}), planar operands"


def _products(p, tile_w: int, block_k: int) -> int:
    """Multiply-adds per row of outputs along the band axis and kernel row: the padded window
    times the tile width, per tile."""
    a = band_axis(p)
    return cdiv(p.out_spatial[a], tile_w) * cdiv(_window(p, tile_w), block_k) * block_k * tile_w


def _fits(p, tile_w: int) -> bool:
    a = band_axis(p)
    return _window(p, tile_w) <= MAX_WINDOW and (tile_w == TILE_WIDTHS[0] or tile_w < 2 * p.out_spatial[a])


def default_config(p) -> Config:
    """The tile of fewest products with 32-wide window steps (ties: the wider tile, fewer input
    loads per product); 256 rows a program where the accumulator stays small (dw31x31_56: 0.32
    ms against 0.33 with 128 on the H200), fewer for short problems."""
    tile_w = min((tw for tw in TILE_WIDTHS if _fits(p, tw)), key=lambda tw: (_products(p, tw, 32), -tw))
    block_k = 16 if _window(p, tile_w) <= 16 else 32
    a = band_axis(p)
    rows = p.batch * math.prod(p.out_spatial) // p.out_spatial[a] * cdiv(p.out_spatial[a], tile_w)
    block_m = 256 if rows >= 2048 and tile_w <= 32 else 128 if rows >= 1024 else 64
    return Config(tile_w, block_k, block_m)


def configs(p) -> list[Config]:
    """The search space for autotuning (the default first)."""
    out = [default_config(p)]
    for tw in TILE_WIDTHS:
        if not _fits(p, tw):
            continue
        for bk in (16, 32, 64):
            for bm in (64, 128):
                for warps in (4, 8):
                    c = Config(tw, bk, bm, warps)
                    if bm * tw <= 16384 and c not in out:
                        out.append(c)
    return out


def _precision(p) -> str:
    return "tf32" if p.allow_tf32 else "ieee"


def _rows_view(t: torch.Tensor, axes, D: int) -> torch.Tensor:
    """``t``'s spatial ``axes`` (in that order, the band axis last) as a 5-D view [N, 1.., *S, C]
    of a channels-last tensor [N, *S, C]: the planar copy's [r0, r1, r2, q, c]."""
    v = t.permute(0, *(1 + d for d in axes), D + 1)
    for _ in range(3 - D):
        v = v.unsqueeze(1)
    return v


def _launches(p, x, w, out, config: Config):
    """The forward on the grouped views x [N, *S, G, 1], w [G, Og, *K, 1], out [N, *S_out, G, Og]
    as four launches, and the buffers they share (new on x's device; meta ones for a prepared
    call): the weight's Toeplitz table [O, K1*K2, window, TILE_W] (per (channel, t1, t2) the
    kernel row along the band axis as a [window, TILE_W] block, flip and dilation included); x
    made planar, [G, N, *S in order] with the band axis last, shifted by its low pad and
    zero-filled to whole windows (a multiple of 16 positions: planar position q holds input
    position q - lo); y planar [O, N, *S_out in order], the band axis in whole tiles. Each
    launch as (kernel, (grid, args, meta), the tensors in args it reads and writes)."""
    from .kernel_utils import planar_copy_kernel
    from .toeplitz_kernels import toeplitz_fwd_kernel, toeplitz_table_kernel

    D = p.ndim
    a = band_axis(p)
    order = tuple(d for d in range(D) if d != a) + (a,)  # the band axis last
    S, SO, K, ST, KD, LO = (pad3([v[d] for d in order], f) for v, f in (
        (p.in_spatial, 1), (p.out_spatial, 1), (p.kernel, 1), (p.stride, 1), (p.kernel_dilation, 1),
        (p.padding_lo, 0)))
    tile_w, block_k = config.tile_w, config.block_k
    nk = cdiv(_window(p, tile_w), block_k)
    window, tiles3 = nk * block_k, cdiv(SO[2], tile_w)
    new = dict(dtype=x.dtype, device=x.device)
    table = torch.empty((p.out_channels, K[0] * K[1], window, tile_w), **new)
    length = cdiv((tiles3 - 1) * tile_w * ST[2] + window, 16) * 16
    xp = torch.empty((p.groups, p.batch, *S[:2], length), **new)
    yp = torch.empty((p.out_channels, p.batch, *SO[:2], tiles3 * tile_w), **new)

    wo = w[..., 0].flatten(0, 1)  # [O, *K], o = g*Og + k
    make_table = ((p.out_channels, K[0] * K[1]),
                  (wo, table, K[0], K[1], K[2], ST[2], KD[2], window, wo.stride(0),
                   *pad3([wo.stride(1 + d) for d in order], 0)),
                  dict(FLIP=p.flip, WINDOW_P2=pow2_at_least(window), TILE_W=tile_w))
    x_src, x_dst = _rows_view(x[..., 0], order, D), xp.permute(1, 2, 3, 4, 0)
    rows = p.batch * SO[0] * SO[1] * tiles3
    product = ((cdiv(rows, config.block_m), p.out_channels),
               (xp, table, yp, rows, tiles3, *S[:2], *SO[:2], K[0], K[1], *ST, KD[0], KD[1], *LO[:2],
                *xp.stride()[:4], *yp.stride()[:4]),
               dict(OG=p.o_per_group, NK=nk, INT64=needs_int64(xp, table, yp), PRECISION=_precision(p),
                    UPCAST=INTERPRET, INTERPRET=INTERPRET, BLOCK_M=config.block_m, TILE_W=tile_w,
                    BLOCK_K=block_k, num_warps=config.num_warps, num_stages=config.num_stages))
    # back to the caller's layout: yp [O, N, 1.., *S_out in order] -> out [N, *S_out, G, Og]
    # (ConvProblem.views splits a contiguous channel axis, so G and Og merge into one view)
    y_src, y_dst = yp.permute(1, 2, 3, 4, 0), _rows_view(out.view(*out.shape[:-2], -1), order, D)
    return (table, xp, yp), [
        (toeplitz_table_kernel, make_table, (wo, table)),
        (planar_copy_kernel, planar_copy_launch(x_src, x_dst, LO[2]), (x_src, x_dst)),
        (toeplitz_fwd_kernel, product, (xp, table, yp)),
        (planar_copy_kernel, planar_copy_launch(y_src, y_dst), (y_src, y_dst)),
    ]


def run(p, x, w, out, config: Config | None = None):
    """x [N, *S, G, 1], w [G, Og, *K, 1], out [N, *S_out, G, Og] (views with any strides)."""
    _, launches = _launches(p, x, w, out, config or default_config(p))
    for kernel, (grid, args, meta), _ in launches:
        kernel[grid](*args, **meta)


def prepare(p, config: Config):
    """The call on the pass's natural contiguous operands with its four launches bound once
    (through Triton's generic launches and the table's gather in PyTorch it cost about 370 us of
    host time per call on dw31x31_56, more than its 316 us on the H200); the table and the
    planar copies are made per call."""
    views = meta_views(p)
    if views is None:
        return None
    buffers, launches = _launches(p, *views, config)
    table, x_copy, product, y_copy = (BoundLaunch(kernel, *launch, operands=operands)
                                      for kernel, launch, operands in launches)
    shapes, dtype = [t.shape for t in buffers], p.dtype

    def launch(a, b, out):
        t, xp, yp = (torch.empty(shape, dtype=dtype, device=a.device) for shape in shapes)
        table(b, t)
        x_copy(a, xp)
        product(xp, t, yp)
        y_copy(yp, out)
    return allocating(p, launch)
