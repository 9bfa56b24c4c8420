"""Depthwise convolution with large kernels on tensor cores: a banded (Toeplitz) GEMM per channel.

Along one spatial axis (the *band axis*, the one with the longest kernel), a kernel row is a
banded matrix: for channel c and taps t1, t2 on the other axes,

    y[n, j1, j2, j, c] += sum_i X[n, u1, u2, i, c] * T_{c,t1,t2}[i, j],
    T_{c,t1,t2}[i, j] = w'[c, t1, t2, (i - j*st)/kd]  when that is a tap, else 0,

with u = j*st + t*kd - lo on axes 1 and 2 and w' the weight in read order (reversed when flip).
Batched over rows (n, j1, j2, and tiles of TILE_W outputs along the band axis) this is a GEMM per
channel: M = rows, K = the window of input positions a tile reads ((TILE_W-1)*st + span), N =
TILE_W. The band multiplies zeros: K*N products per tile where the convolution needs k*N, about
(TILE_W + k - 1)/k times the useful work, which the tensor cores repay for large k.

Channels-last is kept: a program owns BLOCK_C channels (16 for 2-byte types: one 32-byte
sector per position) and BLOCK_M rows, loads its input window as [BLOCK_C, BLOCK_M, BLOCK_K]
with the channels contiguous, and runs one *batched* tl.dot with the channels as the batch axis
(the compiler moves the operands through shared memory into the MMA layout). T is never built
from the weight in the kernel: the launcher writes each kernel row along the band axis onto the
diagonals of a small table band[t1, t2, d, o] (d = i - j*st shifted to be non-negative,
channels contiguous), so a [BLOCK_C, BLOCK_K, TILE_W] slice of T is one coalesced gather from a
few KB that stay in L1, reused by all BLOCK_M rows of the program. The window is covered in
BLOCK_K chunks, so only cdiv(window, BLOCK_K) * BLOCK_K positions are multiplied, not the next
power of two.

Arithmetic for RepLKNet's dw31x31_56 (x [32, 56, 56, 128], 31x31, bf16), TILE_W = 32: window 62
-> 64 positions, 2 tiles per 56-wide row: per output and kernel row 2*64 products against 31
useful, and 56 outputs computed as 64: 2.36x the 24.7 useful GFLOP = 58 GFLOP on tensor cores.
Operand traffic: 64 window elements per 32 outputs per kernel row, 1.8 GB through L1/L2 (the
31 shifted windows overlap: 0.1 GB of distinct data per pass, 25 MB from HBM). Triton lowers a
batched (rank-3) dot to mma.sync rather than wgmma; at half of the H200's dense peak (~390
TFLOP/s) the MMAs take ~150 us, the operand traffic at ~15 TB/s from L1 ~120 us, partly
overlapped. The estimate was 0.15-0.3 ms, against 2.98 ms for the CUDA-core kernel then (1.57 ms
since its strips were tuned).

Measured slower than depthwise on the H200 (bf16, tools/toeplitz_sweep.py), in every case it
ran: dw31x31_56 input gradient 1.98 ms against depthwise's 1.43 ms (PyTorch 13.1 ms); a 1-D
k=64 sequence (x [8, 8192, 512]) 0.31 ms against 0.29 ms in both passes (dw31x31_56's forward
pass failed in the tool, unmeasured). Triton lowers its batched dot to mma.sync, and the
default tile takes 131 KB of shared memory, one program per SM. So the heuristic planner never runs it (planner.PREFERENCE); it stays forcible and an
autotune candidate.

Refused: weight gradients (a reduction over rows, not a banded product: depthwise), input
dilation (transposed convolutions and input gradients of strided ones: depthwise handles their
phases), groups with more than one input channel. Short kernels and exact fp32 (an fp32 "ieee"
dot runs on CUDA cores, multiplying the band's zeros too) run, but gain the least.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .triton_support import INTERPRET, cdiv, group_channels, kernel_reason, needs_int64, pad3, spatial_strides

NAME = "toeplitz"

# Longest window (input positions per tile) a program multiplies: the band table and the
# operand tiles grow with it. Kernels wider than this (span > 241 at TILE_W = 16) are refused.
MAX_WINDOW = 256
# The cost model that picks TILE_W and BLOCK_K (per SM and clock, H100/H200 class, to be refit
# from measurements): mma.sync products (a rank-3 dot is not lowered to wgmma) and operand
# bytes through L1, registers and shared memory.
MMA_FLOP_PER_CLK = 2048
OPERAND_BYTES_PER_CLK = 48
TILE_WIDTHS = (16, 32, 64, 128)


@dataclass(frozen=True)
class Config:
    tile_w: int  # outputs per row tile along the band axis (N of the GEMM)
    block_k: int  # window positions per tl.dot (K step)
    block_m: int  # rows per program (M)
    block_c: int  # channels per program (the dot's batch axis)
    num_warps: int = 8
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
        return False, "input dilation (transposed or strided-gradient problems): depthwise handles their phases"
    if _window(p, TILE_WIDTHS[0]) > MAX_WINDOW:
        return False, f"kernel span {max(p.span)} is wider than a {MAX_WINDOW}-position window"
    a = band_axis(p)
    return True, (f"banded GEMM on tensor cores along axis {a} (kernel {p.kernel[a]}), "
                  f"channels as the batch of a tl.dot")


def _cost(p, tile_w: int, block_k: int) -> float:
    """Modelled clocks per row, kernel row and channel: max of the MMAs and the operand traffic."""
    a = band_axis(p)
    k_eff = cdiv(_window(p, tile_w), block_k) * block_k
    tiles = cdiv(p.out_spatial[a], tile_w)
    size = torch.empty((), dtype=p.dtype).element_size()
    return max(2 * k_eff * tile_w * tiles / MMA_FLOP_PER_CLK, size * k_eff * tiles / OPERAND_BYTES_PER_CLK)


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def default_config(p) -> Config:
    """The (TILE_W, BLOCK_K) of least modelled cost (ties: the smaller tile, the longer step);
    BLOCK_C one 32-byte sector of channels; BLOCK_M so that the fp32 accumulator
    [BLOCK_C, BLOCK_M, TILE_W] holds 16K elements (64 registers a thread at 8 warps)."""
    a = band_axis(p)
    candidates = [(_cost(p, tw, bk), tw, -bk) for tw in TILE_WIDTHS for bk in (16, 32)
                  if _window(p, tw) <= MAX_WINDOW and (tw == TILE_WIDTHS[0] or tw < 2 * p.out_spatial[a])]
    _, tile_w, neg_bk = min(candidates)
    size = torch.empty((), dtype=p.dtype).element_size()
    block_c = min(32 // size, _pow2_at_least(p.out_channels))
    rows = p.batch * math.prod(p.out_spatial) // p.out_spatial[a] * cdiv(p.out_spatial[a], tile_w)
    block_m = max(16, min(128, 16384 // (block_c * tile_w), _pow2_at_least(rows)))
    warps = 8 if block_c * block_m * tile_w >= 8192 else 4
    return Config(tile_w, -neg_bk, block_m, block_c, warps)


def configs(p) -> list[Config]:
    """The search space for autotuning (the default first)."""
    base = default_config(p)
    out = [base]
    a = band_axis(p)
    for tw in TILE_WIDTHS:
        if _window(p, tw) > MAX_WINDOW or (tw > TILE_WIDTHS[0] and tw >= 2 * p.out_spatial[a]):
            continue
        for bm in (32, 64, 128):
            for bc in (8, 16):
                for warps in (4, 8):
                    c = Config(tw, base.block_k, bm, bc, warps, base.num_stages)
                    if bc * bm * tw <= 32768 and c not in out:
                        out.append(c)
    return out


def _precision(p) -> str:
    return "tf32" if p.allow_tf32 else "ieee"


def _band(p, w: torch.Tensor, order, tile_w: int, band_len: int) -> torch.Tensor:
    """band[t1*K2 + t2, (tile_w-1)*st + t3*kd, o] = w'[o, t1, t2, t3] (read order, axes in
    ``order`` with the band axis last), zero elsewhere: [K1*K2, band_len, O], O contiguous."""
    D = p.ndim
    w = w[..., 0].reshape(p.out_channels, *p.kernel)  # [O, *K]: o = g*Og + k
    if p.flip:
        w = w.flip(tuple(range(1, D + 1)))
    w = w.permute(0, *(1 + d for d in order))
    K3 = w.shape[-1]
    rows = w.reshape(p.out_channels, -1, K3).permute(1, 2, 0)  # [K1*K2, K3, O]
    a = order[-1]
    first = (tile_w - 1) * p.stride[a]
    band = torch.zeros((rows.shape[0], band_len, p.out_channels), dtype=w.dtype, device=w.device)
    band[:, first:first + (K3 - 1) * p.kernel_dilation[a] + 1:p.kernel_dilation[a], :] = rows
    return band


def run(p, x, w, out, config: Config | None = None):
    """x [N, *S, G, 1], w [G, Og, *K, 1], out [N, *S_out, G, Og] (views with any strides)."""
    config = config or default_config(p)
    from .toeplitz_kernels import toeplitz_fwd_kernel

    D = p.ndim
    a = band_axis(p)
    order = tuple(d for d in range(D) if d != a) + (a,)  # the band axis last
    x = x.permute(0, *(1 + d for d in order), D + 1, D + 2)
    out = out.permute(0, *(1 + d for d in order), D + 1, D + 2)
    S, SO, K, ST, KD, LO = (pad3([v[d] for d in order], f) for v, f in (
        (p.in_spatial, 1), (p.out_spatial, 1), (p.kernel, 1), (p.stride, 1), (p.kernel_dilation, 1),
        (p.padding_lo, 0)))
    tile_w, block_k = config.tile_w, config.block_k
    nk = cdiv((tile_w - 1) * ST[2] + (K[2] - 1) * KD[2] + 1, block_k)
    band_len = nk * block_k + (tile_w - 1) * ST[2]
    band = _band(p, w, order, tile_w, band_len)
    tiles3 = cdiv(SO[2], tile_w)
    rows = p.batch * SO[0] * SO[1] * tiles3
    sx, sy = x.stride(), out.stride()
    grid = (cdiv(rows, config.block_m), cdiv(p.out_channels, config.block_c))
    toeplitz_fwd_kernel[grid](
        x, band, out,
        p.out_channels, rows, tiles3, band_len,
        *S, *SO, K[0], K[1],
        *ST, KD[0], KD[1], *LO,
        sx[0], *spatial_strides(x, 1, D), sx[-2],
        sy[0], *spatial_strides(out, 1, D), sy[-2], sy[-1],
        OG=p.o_per_group, NK=nk,
        INT64=needs_int64(x, out), PRECISION=_precision(p), UPCAST=INTERPRET, INTERPRET=INTERPRET,
        BLOCK_M=config.block_m, BLOCK_C=config.block_c, TILE_W=tile_w, BLOCK_K=block_k,
        num_warps=config.num_warps, num_stages=config.num_stages,
    )
