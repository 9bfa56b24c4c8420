"""Triton implicit GEMM: every conv_general problem on the GPU, forward and both gradients.

Forward (and input gradient, which is a forward problem over dy): the GEMM view per group is
M = N*prod(S_out), N = O/groups, K = prod(kernel)*C/groups; input tiles are gathered straight
from the channels-last input per kernel tap, with masks for padding, and never unfolded in
memory. Input dilation (transposed convolutions, input gradients of strided convolutions) splits
the output into phases: per axis, the output positions j = r + P*q that see the same subset of
taps (P = lcm(stride, idil)/stride), each phase a dense implicit GEMM over only its taps, so no
inserted zero is ever multiplied (the "jump" parameters of the Metal seed's general kernel).

Weight gradient: its own kernel, a GEMM per group over the long reduction N*S_out with the
reduction split across programs (split-K) into a float32 workspace that is summed afterwards,
so the result is deterministic. It gathers whichever operand makes the gather dense: x at
stride `stride` (rows over output positions) when there is no input dilation, else dy at stride
`input_dilation` (rows over input positions).

Hopper path (``Config.tma``): at stride 1 (per output phase where input-dilated), every input
tile of a tap is a box of the channels-last input shifted by the tap, so the tensor-memory
accelerator (TMA) loads it, and fills what falls outside the input with zeros, which is the
padding: no masks, no per-element addresses, loads pipelined on barriers and fed to wgmma from
shared memory. The output tile is a box of positions (e.g. 8 x 16 of one image) times a block
of output channels; optionally (``Config.tma_store``) it leaves in one TMA store. Forwards
that are GEMMs over rows of the input (1x1 at stride 1, and 1-D convolutions: ``rows_gemm``)
take their own kernel (``Config.rows``), a persistent loop over boxes of rows, one shifted box
per tap, that overlaps a tile's stores with the next tile's loads. Strided
problems fold into stride-1 ones over a view of the input where they can (``Fold``); stems
(at most 4 input channels) over a space-to-depth copy. The weight gradient at stride 1 has a TMA
kernel too: per tap, dy's box of positions and x's box shifted by the tap (split-K as above);
strided and transposed ones run as stride-1 ones per phase, a 2-D one's phases in one launch
(``PhasedWgrad``). ``tma_runner`` is the path's entry per kind of
problem. It needs TMA's alignment (16-byte strides and base); problems or tensors without it,
and GPUs before sm_90, take the gather path.

Accumulation is fp32; fp32 inputs use TF32 only when the problem allows it.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace
from functools import lru_cache

import torch

from .triton_support import (
    INTERPRET,
    BoundLaunch,
    allocating,
    bound_sum_partials,
    cdiv,
    group_channels,
    kernel_reason,
    meta_views,
    needs_int64,
    pad3,
    pow2_at_least,
    sm_count,
    spatial_strides,
    sum_partials,
)

NAME = "implicit_gemm"


@dataclass(frozen=True)
class Config:
    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int
    packed: bool = False  # reduction steps over (last-axis tap, channel) pairs (small channel counts)
    split_k: int = 0  # weight gradient: programs sharing the reduction (0: enough to fill the GPU)
    tapwise: bool = True  # weight gradient: column tiles within one tap (else (tap, channel) pairs)
    tma: bool = False  # stride 1: TMA boxes instead of gathers (see tma_reason)
    box_h: int = 0  # tma: a tile's output positions along the second-to-last spatial axis and
    box_w: int = 0  # along the last one (0, 0: the box of block_m positions that wastes least)
    tma_store: bool = False  # tma: the output tile leaves in one TMA store (else masked stores)
    persistent: int = 0  # tma: programs per SM looping over the tiles (0: one program per tile)
    taps: int = 1  # tma weight gradient: taps along the last axis per program, sharing dy's boxes
    rows: bool = False  # tma, forwards over rows of the input: rows_fwd_kernel (see rows_gemm)


def supports(p):
    reason = kernel_reason(p)
    if reason:
        return False, reason
    path = ""  # on the GPU: which loads its tiles take (explain shows it)
    if p.device == "cuda":
        tma = tma_reason(p)
        path = f"; TMA tiles{tma_route(p)}" if tma is None else f"; gathered tiles ({tma})"
    if p.pass_ == "wgrad":
        return True, "Triton weight-gradient GEMM, split-K over N*S_out, deterministic" + path
    if any(d > 1 for d in p.input_dilation):
        return True, "Triton implicit GEMM over output phases (no inserted zeros multiplied)" + path
    return True, "Triton implicit GEMM: input read per tap, nothing unfolded in memory" + path


def default_config(p) -> Config:
    """Tile shapes by the problem's shape class: the TMA path's (``tma_config``) on Hopper for
    the problems it takes, else the gather path's (``gather_config``)."""
    if p.device == "cuda" and tma_reason(p) is None:  # Hopper, stride 1: TMA boxes
        return tma_wgrad_config(p) if p.pass_ == "wgrad" else tma_config(p)
    if p.pass_ == "wgrad":
        return gather_wgrad_config(p)
    return gather_config(p)


def gather_wgrad_config(p) -> Config:
    """The gather weight-gradient kernel's tiles: the dw rows and columns the problem fills."""
    half = p.dtype != torch.float32
    rows_of_dw = p.o_per_group if _gathers_input(p) else p.batch  # O/g, or C/g when dy is gathered
    cols_per_tap = p.batch if _gathers_input(p) else p.o_per_group  # C/g, or O/g
    block_m = pow2_at_least(rows_of_dw, 16, 128)
    tapwise = cols_per_tap >= 64  # full column tiles within a tap
    block_n = min(128, pow2_at_least(cols_per_tap, 16, 128)) if tapwise else 128
    if not half:
        block_n = min(block_n, 64)
    warps = 8 if block_m * block_n >= 128 * 64 else 4
    return Config(block_m, block_n, 64 if half else 32, warps, 3 if warps == 8 else 4, tapwise=tapwise)


def gather_config(p) -> Config:
    """The gather path's tiles for a forward or input-gradient problem, set from tools/tune.py
    runs on the H200 (bf16: docs/PERFORMANCE.md): the widest output-channel tile the problem
    fills, 8 warps from 128x64 up, a 256-row tile only for long reductions over many rows."""
    half = p.dtype != torch.float32
    M, N, K = p.gemm_mnk
    packed = p.c_per_group < 16
    # the widest output-channel tile that wastes at most a quarter of the columns it covers
    block_n = next(bn for bn in (256, 128, 64, 32, 16) if bn <= (256 if half else 64) and
                   (bn == 16 or -(-N // bn) * bn <= 1.25 * N))
    if (block_n == 128 and half and K >= 1024 or packed and half and N <= 64) and M >= 65536:
        block_m = 256
    else:
        block_m = 128 if M >= 4096 else 64
    short = K <= 128 and not packed  # few reduction steps: smaller steps, deeper pipeline
    block_k = 16 if packed else 32 if short or not half else min(64, pow2_at_least(p.c_per_group, 16, 64))
    # fp32: 8 warps measured 40% slower; packed (stems): 4 warps with 256-row tiles, 16-wide steps
    warps = 8 if half and not packed and block_m * block_n >= 128 * 64 else 4
    stages = 4 if short else 3 if half else 2
    return Config(block_m, block_n, block_k, warps, stages, packed)


# Tile shapes worth trying (block_m, block_n, block_k, warps, stages), most promising first.
_TILES = (
    (128, 128, 64, 8, 3), (128, 128, 64, 8, 4), (128, 64, 64, 4, 4), (128, 64, 64, 8, 3),
    (64, 128, 64, 4, 4), (128, 256, 64, 8, 3), (256, 128, 64, 8, 3), (64, 64, 64, 4, 4),
    (128, 128, 32, 8, 4), (64, 64, 32, 4, 3), (128, 32, 64, 4, 4), (64, 32, 32, 4, 3),
)


def configs(p) -> list[Config]:
    """The search space for autotuning (the default first), pruned by the problem's sizes."""
    base = default_config(p)
    out = [base]
    if p.pass_ == "wgrad":
        if base.tma:
            out += [c for c in tma_wgrad_configs(p) if c not in out]
        rows_of_dw = p.o_per_group if _gathers_input(p) else p.batch
        for bm, bn, bk, warps, stages in _TILES:
            for tapwise in (True, False):
                c = Config(bm, bn, bk, warps, stages, tapwise=tapwise)
                if bm <= max(16, 2 * rows_of_dw) and c not in out:
                    out.append(c)
        return out
    if base.tma:
        out += [c for c in tma_configs(p) if c not in out]
        base = gather_config(p)
        out.append(base)
    N = p.gemm_mnk[1]
    for bm, bn, bk, warps, stages in _TILES:
        c = Config(bm, bn, bk, warps, stages, base.packed)
        if bn <= max(32, 2 * N) and c not in out:
            out.append(c)
    return out


def _gathers_input(p) -> bool:
    """Weight-gradient orientation: gather x (dense when the forward has no input dilation)."""
    return all(d == 1 for d in p.input_dilation) or any(s > 1 for s in p.kernel_dilation)


def _precision(p) -> str:
    return "tf32" if p.allow_tf32 else "ieee"


def run(p, x, w, out, config: Config | None = None):
    """x [N, *S, G, Cg], w [G, Og, *K, Cg], out [N, *S_out, G, Og] (views with any strides)."""
    config = config or default_config(p)
    if config.tma:  # the Hopper path, when these tensors allow it; else the gather kernels below
        if (_run_rows if config.rows else tma_runner(p))(p, x, w, out, config):
            return
        if p.pass_ == "wgrad":
            config = gather_wgrad_config(p)
        elif any(s > 1 for s in p.stride):  # the tiles were the folded problem's
            config = gather_config(p)
        else:
            config = replace(config, tma=False)
    if p.pass_ == "wgrad":
        return _run_wgrad(p, x, w, out, config)
    from .implicit_gemm_kernels import conv_fwd_kernel

    launch, empty = _forward_launch(p, x, w, out, config)
    for index in empty:  # outputs that no tap reaches are zero
        out[index].zero_()
    if launch is not None:
        grid, args, meta = launch
        conv_fwd_kernel[grid](*args, **meta)


def prepare(p, config: Config):
    """``p``'s call as a function of the pass's natural contiguous operands, with its one kernel
    launch bound once (BoundLaunch: the operands' views share their data pointers), or None
    where a call needs more than that launch. A TMA launch (whose descriptors take the operands'
    addresses, made per call) needs 16-byte aligned operands: others take ``run``, which falls
    back to the gather kernel."""
    if p.pass_ == "wgrad":
        if not config.tma:
            return None
        return _prepare_wgrad(p, config) if _plain_wgrad(p) else _prepare_phased_wgrad(p, config)
    from .implicit_gemm_kernels import conv_fwd_kernel, conv_fwd_tma_kernel, rows_fwd_kernel

    views = meta_views(p)
    if views is None:
        return None
    if not config.tma:
        launch, empty = _forward_launch(p, *views, config)
        if launch is None or empty:
            return None
        return allocating(p, BoundLaunch(conv_fwd_kernel, *launch, operands=views))
    if config.rows:
        launch = _rows_launch(p, *views, config)
        if launch is None:
            return None
        bound = BoundLaunch(rows_fwd_kernel, *launch, operands=views)
    elif tma_runner(p) in (_run_space_to_depth, _run_tap_folded):  # copies first
        return _prepare_copying(p, config)
    elif tma_runner(p) is _run_folded:
        return _prepare_folded(p, config)
    else:
        launch, empty = _tma_launch(p, *views, config)
        # not TMA, zeros, or the weight copied
        if launch is None or empty or launch[1][1].base is not views[1]:
            return None
        bound = BoundLaunch(conv_fwd_tma_kernel, *launch, operands=views)

    def tma_or_gather(a, b, out):
        if a.data_ptr() % 16 or b.data_ptr() % 16:
            run(p, *p.views(a, b, out), config)
        else:
            bound(a, b, out)
    return allocating(p, tma_or_gather)


def _forward_launch(p, x, w, out, config: Config):
    """(grid, args, meta) of the forward kernel on these operand views, or None when no tap
    reaches any output; and the index of each output slice that no tap reaches."""
    D = p.ndim
    S, K = pad3(p.in_spatial, 1), pad3(p.kernel, 1)
    ST, KD, ID = pad3(p.stride, 1), pad3(p.kernel_dilation, 1), pad3(p.input_dilation, 1)
    PJ = tuple(math.lcm(s, i) // s for s, i in zip(ST, ID))  # output phase period
    PT = tuple(math.lcm(k, i) // k for k, i in zip(KD, ID))  # tap period within a phase
    QS = tuple(math.lcm(s, i) // i for s, i in zip(ST, ID))  # input step per phase row
    US = tuple(math.lcm(k, i) // i for k, i in zip(KD, ID))  # input step per phase tap
    axes = tuple(zip(pad3(p.out_spatial, 1), K, ST, KD, ID, pad3(p.padding_lo, 0)))
    table, rows, empty = _phases(axes, p.device if x.device.type == "meta" else str(x.device))
    empty = _empty_slices(empty, PJ, D)
    if table is None:
        return None, empty
    G, Cg, Og = p.groups, p.c_per_group, p.o_per_group
    sx, sw, sy = x.stride(), w.stride(), out.stride()
    nphase = table.shape[0]
    grid = (cdiv(p.batch * rows, config.block_m) * cdiv(Og, config.block_n), G * nphase)
    args = (
        x, w, out, table,
        p.batch, Cg, Og, nphase,
        *S, *K, *PJ, *PT, *QS, *US,
        sx[0], *spatial_strides(x, 1, D), sx[-2], sx[-1],
        sw[0], sw[1], *spatial_strides(w, 2, D), sw[-1],
        sy[0], *spatial_strides(out, 1, D), sy[-2], sy[-1],
    )
    meta = dict(
        FLIP=p.flip, PACKED=config.packed, INT64=needs_int64(x, w, out),
        PRECISION=_precision(p), UPCAST=INTERPRET,
        BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k,
        num_warps=config.num_warps, num_stages=config.num_stages,
    )
    return (grid, args, meta), empty


@lru_cache(maxsize=1024)
def _empty_slices(empty, period, D: int):
    """The output index [N, *S_out, ...] of each (axis, r) phase of ``_phases`` that no tap
    reaches (axes padded to three; ``period``: the output phase period per padded axis)."""
    return [(slice(None),) * (1 + d - (3 - D)) + (slice(r, None, period[d]),) for d, r in empty]


@lru_cache(maxsize=1024)
def _phases(axes, device: str):
    """The output phases of a problem, computed exactly on the host, once per problem and
    device: a table built per call would cost a host-to-device copy and a stream
    synchronisation each time (and cannot be made under CUDA-graph capture).

    ``axes``: per axis (S_out, K, stride, kdil, idil, lo). Per axis, output j = r + P*q (P =
    lcm(stride, idil)/stride) reads input (j*stride + t'*kdil - lo)/idil through the read-order
    taps t' = t0 + T*u (T = lcm(kdil, idil)/kdil) for which that is an integer. Returns the
    device table of non-empty phases (one row per combination of per-axis phases: (r, count,
    base, t0, taps) per axis), the most output rows any of them has, and the (axis, r) phases
    that no tap reaches (their outputs are zero)."""
    per_axis, empty = [], []
    for d, (so, k, st, kd, idil, lo) in enumerate(axes):
        pj, pt = math.lcm(st, idil) // st, math.lcm(kd, idil) // kd
        phases = []
        for r in range(min(pj, so)):
            t0 = next((t for t in range(min(pt, k)) if (r * st + t * kd - lo) % idil == 0), None)
            if t0 is None:
                empty.append((d, r))
                continue
            count = -(-(so - r) // pj)
            phases.append((r, count, (r * st + t0 * kd - lo) // idil, t0, -(-(k - t0) // pt)))
        per_axis.append(phases)
    rows = [list(a) + list(b) + list(c) for a in per_axis[0] for b in per_axis[1] for c in per_axis[2]]
    if not rows:
        return None, 0, tuple(empty)
    most = max(r[1] * r[6] * r[11] for r in rows)
    return torch.tensor(rows, dtype=torch.int32, device=device), most, tuple(empty)


def _run_wgrad(p, x_t, dy_t, dw_t, config: Config):
    """The weight-gradient problem's views back in natural layouts, then one split-K GEMM."""
    from .implicit_gemm_kernels import conv_wgrad_kernel

    D = p.ndim
    x, dy, dw, (stride, kdil, idil, lo, out_spatial, kernel) = p.wgrad_natural(x_t, dy_t, dw_t)
    in_spatial = p.in_spatial
    G, N = p.groups, x.shape[0]
    if _gathers_input(p):  # rows over output positions, x gathered at (j*st + t*kd - lo) / idil
        dense, gathered, rows_spatial, gathered_spatial = dy, x, out_spatial, in_spatial
        A, T, F, V = stride, kdil, tuple(-v for v in lo), idil
        out_view = dw  # [G, Og, *K, Cg]: m = o, columns (tap, c)
    else:  # rows over input positions, dy gathered at (i*idil - t*kd + lo) / stride
        dense, gathered, rows_spatial, gathered_spatial = x, dy, in_spatial, out_spatial
        A, T, F, V = idil, tuple(-k for k in kdil), lo, stride
        out_view = dw.transpose(1, -1)  # [G, Cg, *K, Og]: m = c, columns (tap, o)
    MD, ND = dense.shape[-1], gathered.shape[-1]
    taps = math.prod(kernel)
    rows = N * math.prod(rows_spatial)
    bm, bn, bk = config.block_m, config.block_n, config.block_k
    tapwise = config.tapwise and ND >= 16  # column tiles within one tap: index math per row
    n_tiles = taps * cdiv(ND, bn) if tapwise else cdiv(taps * ND, bn)
    base_programs = cdiv(MD, bm) * n_tiles * G
    split = config.split_k or max(1, min(4 * sm_count(x.device) // base_programs, cdiv(rows, 8 * bk)))
    rows_per_split = cdiv(cdiv(rows, split), bk) * bk
    split = cdiv(rows, rows_per_split)
    if split == 1:  # write the result directly: out_view [G, MD, *K, ND]
        target = out_view
        so = (0, target.stride(0), target.stride(1), *spatial_strides(target, 2, D), target.stride(-1))
    else:  # partial sums per split, summed in a fixed order afterwards (deterministic)
        target = torch.empty((split, G, MD, *kernel, ND), device=x.device, dtype=torch.float32)
        st = target.stride()
        so = (st[0], st[1], st[2], *spatial_strides(target, 3, D), st[-1])
    sd, ss = dense.stride(), gathered.stride()
    grid = (cdiv(MD, bm), n_tiles, G * split)
    conv_wgrad_kernel[grid](
        dense, gathered, target,
        rows_per_split, N, MD, ND, split,
        *pad3(rows_spatial, 1), *pad3(gathered_spatial, 1), *pad3(kernel, 1),
        *pad3(A, 0), *pad3(T, 0), *pad3(F, 0), *pad3(V, 1),
        sd[0], *spatial_strides(dense, 1, D), sd[-2], sd[-1],
        ss[0], *spatial_strides(gathered, 1, D), ss[-2], ss[-1],
        *so,
        TAPWISE=tapwise, DENSE=all(v == 1 for v in V), INT64=needs_int64(dense, gathered, target),
        PRECISION=_precision(p), UPCAST=INTERPRET,
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=config.num_warps, num_stages=config.num_stages,
    )
    if split > 1:
        sum_partials(target, out_view)


# ---------------------------------------------------------------------------- the TMA path

TMA_BOX_MAX = 256  # elements per box dimension (the tensor-memory accelerator's limit)


# The shortest reduction step: Triton 3.6's tl.dot asserts K >= 16 for every dtype (TF32's
# instruction would take 8).
MIN_BLOCK_K = 16


def tma_reason(p) -> str | None:
    """None when problem ``p`` can take the TMA path (given aligned tensors), else why not."""
    if p.pass_ == "wgrad":  # its kernel dilation is its forward's stride (problem.py)
        phases = _wgrad_phases(p)
        if isinstance(phases, str):
            return phases
        if any(s > 1 for s in p.kernel_dilation) and len(phases) > 2 and _phased_wgrad(p) is None:
            return (f"a strided weight gradient splits into {len(phases)} phases of few tiles each, "
                    "not in one launch: measured slower than the gather kernel (r50's 3x3 stride 2: 99 "
                    "against 88 us)")
    elif any(s != 1 for s in p.stride):
        return fold_reason(p)
    if p.device == "cuda" and torch.cuda.get_device_capability() < (9, 0):
        return "TMA needs compute capability 9.0+"
    if p.dtype == torch.float32 and not p.allow_tf32:
        return "exact float32 has no tensor-core path to feed"
    esize = p.dtype.itemsize
    if p.pass_ == "wgrad":
        if p.dtype == torch.float32:
            return ("the weight gradient's boxes are position-major, and TF32 wgmma takes only "
                    "K-major operands (16-bit types only)")
        for name, n in zip(("C/groups", "O/groups"), group_channels(p)):
            if (n * esize) % 16:
                return f"TMA needs 16-byte channel rows: {name} = {n} is not a multiple of {16 // esize}"
        return None
    if (p.c_per_group * esize) % 16:
        return (f"TMA needs 16-byte channel rows: C/groups = {p.c_per_group} "
                f"is not a multiple of {16 // esize}")
    if p.groups > 1 and p.c_per_group % MIN_BLOCK_K:
        return (f"with groups, a channel block must not straddle two: C/groups = {p.c_per_group} "
                f"is not a multiple of {MIN_BLOCK_K}")
    return None


@lru_cache(maxsize=1024)
def _tma_box(out_spatial, batch: int, block_m: int, box_h: int = 0, box_w: int = 0, rows=(False,) * 3):
    """The output box (batch, axis 1, axis 2, axis 3) of ``block_m`` positions (a search over
    the boxes: a few hundred microseconds of host time, found once per shape); side 1 on the
    axes ``rows`` marks.

    Given ``box_h`` x ``box_w`` on the last two axes, the rest of block_m goes to axis 1, then to
    the batch. Else, of the boxes that waste at most 3% more positions than the best, the one
    with the longest rows (one contiguous run of the input each)."""
    def fit(n, b):  # the fraction of a tiling of n by b that is real
        return n / (-(-n // b) * b)

    so1, so2, so3 = out_spatial
    if box_w:
        b3 = min(box_w, block_m)
        b2 = min(box_h or pow2_at_least(so2, 1, TMA_BOX_MAX), block_m // b3)
        rest = block_m // (b3 * b2)
        b1 = min(rest, pow2_at_least(so1, 1, TMA_BOX_MAX))
        return rest // b1, b1, b2, b3
    boxes = []
    pow2 = [1 << i for i in range(block_m.bit_length())]
    for b3 in pow2:
        for b2 in pow2:
            for b1 in pow2:
                bb = block_m // (b3 * b2 * b1)
                if bb < 1 or bb * b1 * b2 * b3 != block_m or any(
                        b > (1 if row else pow2_at_least(n, 1, TMA_BOX_MAX))
                        for b, n, row in zip((b1, b2, b3), (so1, so2, so3), rows)):
                    continue
                boxes.append((fit(batch, bb) * fit(so1, b1) * fit(so2, b2) * fit(so3, b3), (bb, b1, b2, b3)))
    best = max(f for f, _ in boxes)
    return max((box[::-1] for f, box in boxes if f >= best - 0.03))[::-1]  # widest rows within 3%


_SM_COUNT_H200 = 132  # the GPU the tiles were measured on


def tma_config(p) -> Config:
    """The TMA path's tiles: rows_fwd_kernel's for forwards over rows of the input
    (``rows_gemm``) whose tiles fill their waves, else the convolution kernel's
    (``conv_tma_config``).

    rows_fwd_kernel runs one program an SM. Measured on the H200 (bf16; nineteenth session,
    the convolution kernel's tiles, then PyTorch's, in parentheses; 4 warps were the eighteenth
    session's): 128 positions x 256 output channels on 8 warps in 3 stages for 1-D layers of at
    least 256 output channels (Whisper's 3000-long 768 -> 768 k3 231 us (259, 232),
    conv1d_k3_80 56 in steps of 32 (59 over its folded taps, 54), wav2vec2's k3s2 and k2s2 at
    512 channels 77 and 31 (89, 74; 34, 32), a k4s2 256 -> 512 108 (122, 102)), unless their
    waves would be less than 90% full: 128 x 128 on 4 warps in 5 stages then (conv1d_k3s2_768's
    564 tiles on 132 SMs: 123 (151, 129; 133 in 128 x 256)); 256 x 128 on 8 warps in 3 stages
    otherwise (r50_1x1_56 40.7 (48.8, 42.2; 128 x 128 on 4 warps 41.8-43.4), ResNet-50's 28x28
    128 -> 512 26.6 (31.2, 25.5), EnCodec's causal k7 at 128 channels 75 (85, 68)); 128 x 64
    on 4 warps in 4 stages for at most 64 (56x56 64 -> 64 17.5 (20.0, 17.8)). Persistent
    programs finish with their slowest SM, so where the waves of tiles would be less than 3/4
    full the convolution kernel's smaller, several CTAs an SM keep the GPU fuller (14x14 1024 ->
    256 in 128 x 128 tiles: 196 tiles on 132 SMs, 19.1 against 15.9 us)."""
    sms = _SM_COUNT_H200

    def fill(config):  # the fraction of the waves' program slots that have a tile
        tiles = _tile_count(p, config.block_m, config.block_n)
        return tiles / (cdiv(tiles, sms) * sms)

    if rows_gemm(p):
        O, bk = p.out_channels, _rows_block_k(p)
        if O <= 64:
            config = Config(128, 64, bk, 4, 4, tma=True, rows=True)
        elif p.ndim == 1 and not _pointwise(p) and cdiv(O, 256) * 256 <= 1.25 * O:
            config = Config(128, 256, bk, 8, 3, tma=True, rows=True)
            if fill(config) < 0.9:
                config = Config(128, 128, bk, 4, 5, tma=True, rows=True)
        else:
            config = Config(256, 128, bk, 8, 3, tma=True, rows=True)
        if fill(config) >= 0.75:
            return config
    return conv_tma_config(p)


def conv_tma_config(p) -> Config:
    """The TMA convolution kernel's tiles. The product is computed as [output channels,
    positions], so block_n is wgmma's M (64 per warpgroup) and block_m its N. The kernel is not
    warp-specialised (on Hopper, Triton 3.6's warp-specialised loop over these boxes faults or
    computes wrong results, with descriptors made on the host or in the kernel: PERFORMANCE.md),
    so a CTA's pipeline fill and epilogue overlap only other CTAs' main loops: the tiles are chosen
    for CTAs per SM as much as for the tile's own rate. Measured on the H200 (tools/tma_sweep.py,
    bf16):

    - 128 positions x 64 channels on 4 warps in 3 stages (72 KB of shared memory: 3 CTAs an SM;
      4 stages fit 2): r50_3x3_56 49.8 -> 46.0 us, the stem's space-to-depth problem 120 ->
      102, convT_3x3s2 38.2 -> 34.9, conv3d_3x3x3 217 -> 212, input gradients alike.
    - 128 x 128 on one warpgroup in 2 stages (64 KB, 3 CTAs an SM) where the reduction is short
      (at most 256: one to four steps, the epilogue is most of a tile) or where 2 CTAs an SM
      would take two waves and 3 take one: r50_1x1_56 56 -> 48.5 us, conv1d_k3_80 63 -> 58,
      r50_3x3_28 (392 tiles) 34.1 -> 28.3. On long reductions over more tiles 2 stages starve
      the loop (r50_3x3_14 29.5 -> 38.8): 8 warps in 3 stages there.
    - 128 x 64 where 128 x 128 tiles would not give every SM two: r50_3x3_14 29.5 -> 26.9 us.
    - 256 positions pay on long reductions over many positions (vae_3x3_256 117 -> 115 us with
      128 channels) and with channel counts that 128 does not divide (unet_3x3_64, 320
      channels: 138 -> 103 us with 64) or when 128 x 128 tiles would not give every SM one
      (r50_3x3_7, 3136 x 512 outputs: 48 -> 33 us). Those 256 x 64 tiles (one warpgroup, one
      CTA an SM) run as one persistent program per SM, whose flattened loop overlaps a tile's
      epilogue with the next tile's loads: unet_3x3_64 103 -> 95-97 us, r50_3x3_7 34 -> 31
      (other tiles: within 2% or slower that way)."""
    p = _stride1_problem(p)  # the tiles of the problem it runs as
    half = p.dtype != torch.float32
    M, _, K = p.gemm_mnk
    K //= math.prod(p.input_dilation)  # a phase's reduction: about one tap in idil per axis
    Og = p.o_per_group
    block_n = 64 if Og <= 64 or -(-Og // 128) * 128 > 1.25 * Og else 128
    block_k = _tma_block_k(p)
    block_m = 128
    sms = _SM_COUNT_H200
    if half and Og > 64 and (Og % 128 or M * Og < sms * 128 * 128):
        block_m, block_n = 256, 64
    elif half and block_n == 128 and M * Og < 2 * sms * 128 * 128:
        block_n = 64
    elif half and block_n == 128 and K >= 2048 and M >= 65536:
        block_m = 256
    if (block_m, block_n) == (256, 64):
        return Config(256, 64, block_k, 4, 4, tma=True, persistent=1)
    if block_n == 64:
        return Config(block_m, 64, block_k, 4, 3, tma=True)
    if block_m == 128 and half and (K <= 256 or 2 * sms < _tile_count(p, 128, 128) <= 3 * sms):
        return Config(128, 128, block_k, 4, 2, tma=True)
    return Config(block_m, 128, block_k, 8, 3, tma=True)


def _tile_count(q, block_m: int, block_n: int) -> int:
    """The output tiles of stride-1 problem ``q`` in block_m positions x block_n channels."""
    return cdiv(q.gemm_mnk[0], block_m) * cdiv(q.o_per_group, block_n) * q.groups


def one_wave(p) -> bool:
    """Whether the TMA path's forward on ``p`` has more than 2 tiles an SM and at most 3 (one
    wave at 3 CTAs an SM, two at 2): the mid-sized layers whose tiles ``tma_config`` picks for
    that, where the kernel beats cuDNN (H200, bf16: r50_3x3_14 26.6-27.5 against 31.7-32.4 us,
    r50_3x3_28 28.0 against 30.0-30.2; r50_3x3_7's 104 persistent tiles: 31-35 against 32)."""
    config = tma_config(p)
    tiles = _tile_count(_stride1_problem(p), config.block_m, config.block_n)
    return 2 * _SM_COUNT_H200 < tiles <= 3 * _SM_COUNT_H200


def _tma_block_k(p) -> int:
    """The TMA path's reduction step over ``p``'s channels."""
    Cg = p.c_per_group
    widest = 128 // p.dtype.itemsize  # one 128-byte swizzled row of shared memory
    if p.groups > 1:  # a block never straddles two groups (tma_reason: Cg is a multiple of the least)
        return next(bk for bk in (widest, widest // 2, widest // 4) if Cg % bk == 0)
    # the last block is zero-filled past C: the widest step that wastes at most a quarter
    return next(bk for bk in (widest, widest // 2, widest // 4)
                if bk == MIN_BLOCK_K or -(-Cg // bk) * bk <= 1.25 * Cg)


# TMA tiles worth trying (block_m, block_n, warps, stages): positions x output channels
_TMA_TILES = ((128, 128, 8, 3), (128, 128, 4, 2), (128, 64, 4, 3), (256, 64, 4, 4), (256, 128, 8, 3),
              (128, 256, 8, 3), (128, 64, 4, 4), (64, 128, 4, 3))


# rows_fwd_kernel's tiles worth trying (block_m, block_n, warps, stages): 128 x 256 on 4 warps
# spills (3-8x slower on the H200)
_ROWS_TILES = ((256, 128, 8, 3), (128, 256, 8, 3), (128, 128, 4, 4), (128, 128, 4, 5), (128, 64, 4, 4),
               (128, 64, 4, 6))


def tma_configs(p) -> list[Config]:
    """TMA tiles for autotuning (tma_config's first, then its persistent and TMA-store
    variants), pruned by the output channels; for forwards over rows of the input
    rows_fwd_kernel's tiles too."""
    out = _conv_tma_configs(p)
    if rows_gemm(p):
        bk = _rows_block_k(p)
        out += [Config(bm, bn, bk, warps, st, tma=True, rows=True) for bm, bn, warps, st in _ROWS_TILES
                if bn <= max(64, 2 * p.out_channels)]
        base = tma_config(p)
        out = [base] + [c for c in out if c != base]
    return out


def _conv_tma_configs(p) -> list[Config]:
    """The convolution kernel's tiles for autotuning."""
    base = conv_tma_config(p)
    tiles = [base]
    for bm, bn, warps, stages in _TMA_TILES:
        c = replace(base, block_m=bm, block_n=bn, num_warps=warps, num_stages=stages, persistent=0)
        if bn <= max(64, 2 * p.o_per_group) and c not in tiles:
            tiles.append(c)
    variants = [replace(base, persistent=programs, tma_store=store)
                for store in (False, True) for programs in (0, 1, 2)]
    out = []
    for c in (base, *variants, *tiles, *(replace(c, tma_store=True) for c in tiles[1:3])):
        if c not in out:
            out.append(c)
    return out


def _mergeable(t: torch.Tensor, first: int, last: int) -> bool:
    """True when dims first..last of ``t`` are one strided axis (each steps over the next)."""
    return all(t.stride(d) == t.shape[d + 1] * t.stride(d + 1) or t.shape[d] == 1 for d in range(first, last))


def _desc_strides(shape, strides):
    """Strides for a tensor descriptor: a size-1 dimension's stride is free, so it is given the
    contiguous one (keeps TMA's 16-byte rule without constraining the caller's view)."""
    out = list(strides)
    for d in range(len(shape) - 2, -1, -1):
        if shape[d] == 1:
            out[d] = shape[d + 1] * out[d + 1]
    return out


def _descriptor(t: torch.Tensor, shape, strides, box):
    """A TMA descriptor of ``t`` as ``shape`` with ``strides`` (elements) and ``box``, or None
    where TMA cannot take it (its base or a stride not a multiple of 16 bytes)."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    strides = _desc_strides(shape, strides)
    if t.data_ptr() % 16 or any((s * t.element_size()) % 16 for s in strides[:-1]):
        return None
    return TensorDescriptor(t, list(shape), strides, list(box))


def tma_runner(p):
    """The TMA path's entry for problem ``p``: a function (p, x, w, out, config) of the grouped
    views that launches and returns True, or returns False (nothing launched) where these
    tensors do not meet TMA's rules."""
    if p.pass_ == "wgrad":
        return _run_tma_wgrad if _plain_wgrad(p) else _run_tma_wgrad_phases
    if any(s > 1 for s in p.stride):
        return _run_folded if isinstance(_fold(p), Fold) else _run_space_to_depth
    return _run_tap_folded if _tap_fold(p) is not None else _run_tma


def _run_tma(p, x, w, out, config: Config, last_taps=None, row_steps=None) -> bool:
    """The TMA kernel on x [N, *S, G, Cg], w [G, Og, *K, Cg], out [N, *S_out, G, Og]; False
    (nothing launched) when these tensors do not meet TMA's rules. ``last_taps``: the channels
    (lo, hi) that the last axis's first and last taps reduce over; ``row_steps``: the input row
    step per output row on each axis (_tma_launch)."""
    from .implicit_gemm_kernels import conv_fwd_tma_kernel

    launch, empty = _tma_launch(p, x, w, out, config, last_taps, row_steps)
    if launch is None:
        return False
    for index in empty:  # outputs that no tap reaches are zero
        out[index].zero_()
    grid, args, meta = launch
    conv_fwd_tma_kernel[grid](*args, **meta)
    return True


def _run_rows(p, x, w, out, config: Config) -> bool:
    """rows_fwd_kernel on the grouped views (``rows_gemm`` problems); False (nothing launched)
    where these tensors do not meet its or TMA's rules."""
    from .implicit_gemm_kernels import rows_fwd_kernel

    launch = _rows_launch(p, x, w, out, config)
    if launch is None:
        return False
    grid, args, meta = launch
    rows_fwd_kernel[grid](*args, **meta)
    return True


def _rows_launch(p, x, w, out, config: Config):
    """(grid, args, meta) of rows_fwd_kernel on these views (x [N, *S, 1, C], w [1, O, *K, C],
    out [N, *SO, 1, O]), or None where they do not meet its or TMA's rules: a 1x1 problem as one
    GEMM over its N*S rows (x's and out's rows one strided axis), a 1-D one over each sample's
    rows with ``stride`` of them folded into one (x's rows contiguous where strided); the weight
    as [O, K*C]. One program an SM."""
    D, esize = p.ndim, x.element_size()
    bm, bn, bk = config.block_m, config.block_n, config.block_k
    C, O, K = p.in_channels, p.out_channels, math.prod(p.kernel)
    if (max(bm, bn) > TMA_BOX_MAX or bk * esize > 128 or x.stride(-1) != 1 or out.stride(-1) != 1
            or w.stride(-1) != 1 or not _mergeable(w, 2, D + 2)):
        return None
    if _flat_rows(p):  # one GEMM over the N*S rows
        if not (_mergeable(x, 0, D) and _mergeable(out, 0, D)):
            return None
        NB, R, s, lo, batched = 1, p.batch * math.prod(p.in_spatial), 1, 0, False
        x_desc = _descriptor(x, [R, C], [x.stride(D), 1], [bm, bk])
        syb, syr = 0, out.stride(D)
    else:  # 1-D: stride s rows folded into one, each tap a box of them
        s, lo, L = p.stride[0], p.padding_lo[0], p.in_spatial[0]
        if L % s or (s > 1 and (x.stride(1) != C or C % bk)):
            return None
        NB, R, batched = p.batch, p.out_spatial[0], True
        x_desc = _descriptor(x, [NB, L // s, s * C], [x.stride(0), s * x.stride(1), 1], [1, bm, bk])
        syb, syr = out.stride(0), out.stride(1)
    w_desc = _descriptor(w, [O, K * C], [w.stride(1), 1], [bn, bk])
    if x_desc is None or w_desc is None:
        return None
    grid = (min(NB * cdiv(R, bm) * cdiv(O, bn), sm_count(x.device)),)
    args = (x_desc, w_desc, out, R, O, C, NB, p.kernel_dilation[0], lo, max(0, cdiv(lo, s)), syb, syr)
    meta = dict(TAPS=K, ST=s, FLIP=p.flip, BATCHED=batched, INT64=needs_int64(out), PRECISION=_precision(p),
                UPCAST=INTERPRET, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=config.num_warps,
                num_stages=config.num_stages)
    return grid, args, meta


def _tma_launch(p, x, w, out, config: Config, last_taps=None, row_steps=None):
    """(grid, args, meta) of the TMA kernel on these views (its descriptors hold x and w, read
    transposed where w is an input gradient's view of the forward's weight, else a copy of w
    where its channels are not unit-stride), or None when these tensors do not meet TMA's rules
    or no tap reaches any output; and the index of each output slice that no tap reaches (as
    _forward_launch's: the caller zeroes them; e.g. the input gradient of a 1x1 stride-2
    convolution, 3 of whose 4 output phases are zero). ``last_taps`` = (lo, hi): the last axis's first tap
    reduces over channels lo.. only and its last tap over ..hi (one phase; the rest of their
    channels meet zero weights), widened to whole reduction steps. ``row_steps`` (per axis,
    before the last): output row j of such an axis reads input rows step*j + t*kd - lo (a Fold's
    "row" axes; the tiles hold one output row along them)."""
    if any(s > 1 for s in p.stride) or tma_reason(p) is not None:  # strided: folded first (_run_folded)
        return None, ()
    D, G, Cg, Og = p.ndim, p.groups, p.c_per_group, p.o_per_group
    esize = x.element_size()
    bk, bn = config.block_k, config.block_n
    if bk * esize > 128 or bn > TMA_BOX_MAX or (G > 1 and Cg % bk):
        return None, ()  # a 128-byte swizzle row at most; a channel block never straddles groups
    if x.stride(-1) != 1 or (G > 1 and x.stride(-2) != Cg):
        return None, ()
    # the weight as boxes of [output, input] channels, or (the input gradient's view of the
    # forward's weight, O and C swapped: w_t) of [input, output] channels, transposed in the kernel
    w_t = w.stride(1) == 1 and w.stride(-1) != 1 and (G == 1 or w.stride(0) == Cg * w.stride(-1))
    if not w_t and (w.stride(-1) != 1 or (G > 1 and w.stride(0) != Og * w.stride(1))):
        w = w.contiguous()
    N = p.batch
    S, SO = pad3(p.in_spatial, 1), pad3(p.out_spatial, 1)
    K, KD, ID, LO = (pad3(p.kernel, 1), pad3(p.kernel_dilation, 1), pad3(p.input_dilation, 1),
                     pad3(p.padding_lo, 0))
    x_shape = [N, *S, G * Cg]
    x_strides = [x.stride(0), *spatial_strides(x, 1, D), 1]
    y_strides = [out.stride(0), *spatial_strides(out, 1, D)]
    if _pointwise(p) and _mergeable(x, 0, D) and _mergeable(out, 0, D):  # a plain GEMM over N*S rows
        rows = N * math.prod(S)
        x_shape, x_strides = [1, 1, 1, rows, G * Cg], [0, 0, 0, x.stride(D), 1]
        y_strides = [0, 0, 0, out.stride(D)]
        N, S, SO = 1, (1, 1, rows), (1, 1, rows)
    # at stride 1 the output phase period is the input dilation (one phase without it)
    table, _, empty = _phases(tuple(zip(SO, K, (1, 1, 1), KD, ID, LO)), p.device if x.device.type == "meta"
                              else str(x.device))
    empty = _empty_slices(empty, ID, D)
    if table is None:
        return None, empty
    Q = tuple(cdiv(so, i) for so, i in zip(SO, ID))  # the most rows of a phase, per axis
    ST = pad3(row_steps or (1,) * D, 1)
    rows = tuple(s > 1 for s in ST)  # one output row per tile along the axes that step rows
    box_hw = (0, 0) if any(rows) else (config.box_h, config.box_w)
    bb, b1, b2, b3 = _tma_box(Q, N, config.block_m, *box_hw, rows=rows)
    if max(bb, b1, b2, b3) > TMA_BOX_MAX:
        return None, ()
    w_shape = [*K, G * Cg, Og] if w_t else [*K, G * Og, Cg]
    w_strides = [*spatial_strides(w, 2, D), w.stride(-1) if w_t else w.stride(1), 1]
    x_desc = _descriptor(x, x_shape, x_strides, [bb, b1, b2, b3, bk])
    w_desc = _descriptor(w, w_shape, w_strides, [1, 1, 1, bk, bn] if w_t else [1, 1, 1, bn, bk])
    if x_desc is None or w_desc is None:
        return None, ()
    y_desc = None  # one phase: the output box in one TMA store, where no box crosses into another group
    if (config.tma_store and ID == (1, 1, 1) and out.stride(-1) == 1
            and (G == 1 or out.stride(-2) == Og and Og % bn == 0)):
        y_desc = _descriptor(out, [N, *SO, G * Og], [*y_strides, 1], [bb, b1, b2, b3, bn])
    m_tiles = cdiv(N, bb) * cdiv(Q[0], b1) * cdiv(Q[1], b2) * cdiv(Q[2], b3)
    nphase = table.shape[0]
    tiles = m_tiles * cdiv(Og, bn) * G * nphase
    grid = (min(tiles, config.persistent * sm_count(x.device)) if config.persistent else tiles,)
    PT = tuple(math.lcm(kd, i) // kd for kd, i in zip(KD, ID))  # tap period within a phase
    US = tuple(math.lcm(kd, i) // i for kd, i in zip(KD, ID))  # input step per phase tap
    lo, hi = last_taps or (0, Cg)
    lo, hi = lo // bk * bk, min(Cg, cdiv(hi, bk) * bk)
    args = (x_desc, w_desc, y_desc or out, table, N, G, Cg, Og, nphase, *Q, *K, *ID, *PT, *US, ST[0], ST[1],
            *y_strides, out.stride(-2), out.stride(-1), lo, hi)
    meta = dict(
        FLIP=p.flip, W_T=w_t, Y_TMA=y_desc is not None, INT64=needs_int64(out), PRECISION=_precision(p),
        UPCAST=INTERPRET,
        BB=bb, B1=b1, B2=b2, B3=b3, BLOCK_N=bn, BLOCK_K=bk, PERSISTENT=config.persistent > 0,
        num_warps=config.num_warps, num_stages=config.num_stages,
    )
    return (grid, args, meta), empty


# ------------------------------------------------------------- the TMA weight gradient

# Most taps of the TMA weight gradient per program (one fp32 accumulator tile each).
WGRAD_TAPS_MAX = 3


def tma_wgrad_config(p) -> Config:
    """The TMA weight-gradient kernel's tiles: block_m x block_n of dw (output x input channels
    of one tap; wgmma's M and N), block_k output positions per reduction step (one box).

    One tap per program: 128 x 128 tiles on 8 warps, 64 x 64 ones (64-channel layers) with 128
    positions a step, 4 stages. Measured on the H200 (bf16, thirty-third session, two autotuned
    runs): r50_3x3_56 39.4-39.6 us against 43.7-44.2 with its 3 last-axis taps in one program
    sharing dy's boxes (the fifteenth session's default, now an autotuning candidate) and 45.8
    with 64 positions a step; r50_3x3_14 36.6-36.9 against 45.1 with 3 taps; conv3d_3x3x3
    197-198 against 200-212.

    Pointwise ones (1x1, stride 1: one GEMM over N*S rows) in 64 x 64 tiles and 6 stages, on all
    eight of ResNet-50's 1x1 layers (batch 64) faster than the tiles below: 45.7 -> 44.5 us at
    56x56 (both), 39.0 -> 30.0 and 33.8 at 28x28, 33.2 -> 25.6 and 30.3 at 14x14, 31.9 -> 21.7
    and 33.4 -> 23.3 at 7x7."""
    Cg, Og = group_channels(p)
    block_o = 128 if Og >= 128 else 64
    block_c = pow2_at_least(Cg, 16, 128)
    if pointwise_wgrad(p):
        return Config(64, min(block_c, 64), 64, 4, 6, tma=True)
    small = block_o * block_c <= 64 * 64
    warps = 8 if block_o * block_c >= 128 * 128 else 4
    return Config(block_o, block_c, 128 if small else 64, warps, 4, tma=True)


def long_step_wgrad(p) -> bool:
    """Whether weight-gradient problem ``p`` is a stride-1 2-D or 3-D one with 3 taps along the
    last axis (3x3, 3x3x3) in 64 x 64 tiles, which tma_wgrad_config steps 128 positions at a
    time: measured faster than PyTorch's on the H200 (r50_3x3_56 39.5 against 50 us, conv3d_3x3x3
    197 against 204; thirty-third session)."""
    return p.ndim >= 2 and _plain_wgrad(p) and p.out_spatial[-1] == 3 and tma_wgrad_config(p).block_k == 128


# TMA weight-gradient tiles worth trying (block_o, block_c, positions, warps, stages)
_TMA_WGRAD_TILES = ((128, 128, 64, 8, 4), (64, 64, 64, 4, 4), (128, 64, 64, 4, 4), (64, 128, 64, 4, 4),
                    (128, 128, 32, 8, 5), (128, 128, 128, 8, 3), (64, 64, 128, 4, 4))
# Widest channel block of the TMA weight-gradient kernel: a 256-channel block computed wrong
# results on the H200 (r50_3x3_14's weight gradient, 128 x 256 x 64 tile, bf16, Triton 3.6:
# max rel err 7e-2 in channels 128-255, in two runs; autotune's spot-check rejected it).
_TMA_WGRAD_BLOCK_MAX = 128


def tma_wgrad_configs(p) -> list[Config]:
    """TMA weight-gradient tiles for autotuning (tma_wgrad_config's first), pruned by the
    channels."""
    Cg, Og = group_channels(p)
    out = [tma_wgrad_config(p)]
    tiles = [Config(bo, bc, bk, warps, stages, tma=True) for bo, bc, bk, warps, stages in _TMA_WGRAD_TILES]
    taps = min(WGRAD_TAPS_MAX, p.out_spatial[-1])  # the forward's taps along the last axis
    tiles += [replace(c, num_stages=3, taps=taps) for c in tiles[1:4] if taps > 1]  # sharing dy's boxes
    for c in tiles:
        if c.block_m <= max(64, 2 * Og) and c.block_n <= max(16, 2 * Cg) and c not in out:
            out.append(c)
    return out


def _exact_box(out_spatial, positions: int):
    """A box (batch, axis 1, axis 2, axis 3) of ``positions`` output positions whose spatial
    sides divide the output's (the largest powers of two that do, last axis first; the batch
    takes the rest), so that a tiling by it covers no position past an axis's end."""
    box, left = [], positions
    for n in reversed(out_spatial):
        side = min(left, n & -n)  # the largest power of two dividing n, at most what is left
        box.append(side)
        left //= side
    return (left, *box[::-1])


def _run_tma_wgrad(p, x_t, dy_t, dw_t, config: Config, partial=None) -> bool:
    """The TMA weight-gradient kernel on the wgrad problem's views; False (nothing launched)
    where the tensors do not meet TMA's rules or no exact box wastes less than half a tile.
    ``partial``: see _tma_wgrad_launch (the caller sums it)."""
    from .implicit_gemm_kernels import conv_wgrad_tma_kernel

    made = _tma_wgrad_launch(p, x_t, dy_t, dw_t, config, partial)
    if made is None:
        return False
    (grid, args, meta), _, dw, target = made
    conv_wgrad_tma_kernel[grid](*args, **meta)
    if partial is None:
        sum_partials(target, dw)
    return True


def _taps3(config: Config, k3: int) -> int:
    """The weight gradient's taps along the last axis per program (sharing each dy box), of k3."""
    return max(1, min(config.taps, k3))


def _wgrad_split(p, config: Config, device, taps: int = 0) -> int:
    """How many programs share weight-gradient problem ``p``'s reduction over the forward's
    output positions (config.split_k where set): each at least 8 steps, and as many as make two
    per SM, not more (a last wave of a few programs costs a whole program's time; on the H200's
    132 SMs convT_4x4s2's phases in one launch took 172 µs at 288 programs, 118 at 256, and
    conv3d_3x3x3 261 at 270, 231 at 243).
    ``taps``: the programs per output-channel tile where not p's kernel (TAPS3 taps each)."""
    if config.split_k:
        return config.split_k
    Cg, Og = group_channels(p)
    kernel, positions = p.out_spatial, wgrad_positions(p)  # the forward's kernel (swapped)
    taps = taps or math.prod(kernel[:-1]) * cdiv(kernel[-1], _taps3(config, kernel[-1]))
    tiles = taps * cdiv(Og, config.block_m) * cdiv(Cg, config.block_n) * p.groups
    return max(1, min(2 * sm_count(device) // tiles, cdiv(positions, config.block_k) // 8))


def _tma_wgrad_launch(p, x_t, dy_t, dw_t, config: Config, partial=None):
    """((grid, args, meta), (x, dy) the natural views its descriptors hold, dw the natural
    grouped [G, Og, *K, Cg] view, target) of the TMA weight-gradient kernel, or None where the
    tensors do not meet TMA's rules or no exact box wastes less than half a tile. ``target`` is
    a new float32 workspace [split, *dw.shape] of partial sums for the caller to sum
    (triton_support.sum_partials), or ``partial`` where given (such a workspace, its split the
    caller's: programs past the last step store zeros). Never dw itself, even unsplit: bf16
    stored by the kernel was intermittently wrong on the H200 (r50_3x3_7's weight gradient in
    128 x 128 tiles: 2 of 6 seeds at 4 stages, 6 of 6 at 3; through float32, 0 of 30 runs)."""
    if tma_reason(p) is not None:
        return None
    x, dy, dw, (_, kdil, _, lo, out_spatial, kernel) = p.wgrad_natural(x_t, dy_t, dw_t)
    D, G, N = p.ndim, p.groups, x.shape[0]
    Cg, Og = group_channels(p)
    bo, bc, bk = config.block_m, config.block_n, config.block_k
    if x.stride(-1) != 1 or dy.stride(-1) != 1 or (G > 1 and (x.stride(-2) != Cg or dy.stride(-2) != Og)):
        return None
    S, SO = pad3(x.shape[1:1 + D], 1), pad3(out_spatial, 1)
    K, KD, LO = pad3(kernel, 1), pad3(kdil, 1), pad3(lo, 0)
    x_strides = [x.stride(0), *spatial_strides(x, 1, D), 1]
    dy_strides = [dy.stride(0), *spatial_strides(dy, 1, D), 1]
    if all(k == 1 for k in K) and not any(LO) and SO == S and _mergeable(x, 0, D) and _mergeable(dy, 0, D):
        rows = N * math.prod(S)  # pointwise: one GEMM over N*S rows, x's rows are dy's
        N, S, SO = 1, (1, 1, rows), (1, 1, rows)
        x_strides, dy_strides = [0, 0, 0, x.stride(D), 1], [0, 0, 0, dy.stride(D), 1]
        box = (1, 1, 1, bk)
    else:
        box = _wgrad_box(SO, N, bk)
    taps3 = _taps3(config, K[2])
    meta = _wgrad_meta(p, box, taps3, config, phased=False)
    if meta is None:
        return None
    dy_desc = _descriptor(dy, [N, *SO, G * Og], dy_strides, [*box, bo])
    x_desc = _descriptor(x, [N, *S, G * Cg], x_strides, [*box, bc])
    if dy_desc is None or x_desc is None:
        return None
    bb, b1, b2, b3 = box
    steps = cdiv(N, bb) * cdiv(SO[0], b1) * cdiv(SO[1], b2) * cdiv(SO[2], b3)
    tiles = K[0] * K[1] * cdiv(K[2], taps3) * cdiv(Og, bo) * cdiv(Cg, bc) * G
    if partial is None:
        per_split = cdiv(steps, _wgrad_split(p, config, x.device))
        split = cdiv(steps, per_split)
        target = torch.empty((split, *dw.shape), device=x.device, dtype=torch.float32)
    else:
        target, split = partial, partial.shape[0]
        per_split = cdiv(steps, split)
    st = target.stride()
    args = (dy_desc, x_desc, target, target,  # no phase table: any pointer
            N, Cg, Og, split, per_split, 1,
            *SO, *K, *KD, *LO,
            st[0], st[1], st[2], *spatial_strides(target, 3, D), st[-1])
    return ((tiles // G, G * split), args, meta), (x, dy), dw, target


def _wgrad_box(out_spatial, batch: int, positions: int):
    """The TMA weight gradient's box of ``positions`` output positions (_exact_box over 3 axes
    of ``batch`` images), or None where its batch side wastes half a tile."""
    box = _exact_box(out_spatial, positions)
    return None if box[0] > 1 and batch / (cdiv(batch, box[0]) * box[0]) < 0.5 else box


def _wgrad_meta(p, box, taps3: int, config: Config, phased: bool):
    """The TMA weight-gradient kernel's compile-time arguments, or None where there is no box
    or it or the channel tiles exceed TMA's or the kernel's limits."""
    if box is None or max(box) > TMA_BOX_MAX or max(config.block_m, config.block_n) > _TMA_WGRAD_BLOCK_MAX:
        return None
    return dict(PHASED=phased, PRECISION=_precision(p), UPCAST=INTERPRET,
                BB=box[0], B1=box[1], B2=box[2], B3=box[3], BLOCK_O=config.block_m, BLOCK_C=config.block_n,
                TAPS3=taps3, num_warps=config.num_warps, num_stages=config.num_stages)


def _prepare_wgrad(p, config: Config):
    """The prepared call of a stride-1 weight gradient on the TMA kernel, its launch bound once
    (through Triton's generic launch it cost 180-360 µs of host time per call on r50's 3x3
    layers, for 40 µs on the GPU): a new workspace of partial sums, then their sum into a new dw.
    Operands TMA cannot take (unaligned) go through ``run``; None where the kernel does not take
    the problem."""
    from .implicit_gemm_kernels import conv_wgrad_tma_kernel

    views = meta_views(p)
    made = _tma_wgrad_launch(p, *views, config) if views is not None else None
    if made is None:
        return None
    launch, (x, dy), _, target = made
    return _summing_call(p, BoundLaunch(conv_wgrad_tma_kernel, *launch, operands=(x, dy, target)),
                         target.shape, config)


def _summing_call(p, bound: BoundLaunch, workspace, config: Config):
    """A prepared weight-gradient call: ``bound(x, dy, partial)`` into a new float32 workspace,
    then its sum into a new dw (bound too; the workspace's [1:] in dw's element order).
    Operands TMA cannot take (unaligned) go through ``run``."""
    shape, dtype = p.result_shape, p.dtype
    summing = bound_sum_partials(workspace, shape, dtype)

    def call(a, b):
        out = torch.empty(shape, dtype=dtype, device=a.device)
        if a.data_ptr() % 16 or b.data_ptr() % 16:  # TMA's rule: run's other paths
            run(p, *p.views(a, b, out), config)
            return out
        partial = torch.empty(workspace, dtype=torch.float32, device=a.device)
        bound(a, b, partial)
        summing(partial, out)
        return out
    return call


# ------------------------- strided and input-dilated weight gradients: stride-1 ones over views

def _plain_wgrad(p) -> bool:
    """Whether weight-gradient problem ``p``'s forward has stride 1 and no input dilation (its
    kernel dilation is the forward's stride): one phase, the TMA kernel on the operands."""
    return all(s == 1 for s in p.kernel_dilation) and all(d == 1 for d in p.input_dilation)


def _pointwise(p) -> bool:
    """Whether problem ``p`` reads, per output position, only one input row (1x1 kernel, no
    padding or input dilation): at stride 1 (``_flat_rows``) a GEMM over the N*S rows (per group)."""
    return (all(k == 1 for k in p.kernel) and all(d == 1 for d in p.input_dilation)
            and not any(p.padding_lo) and not any(p.padding_hi))


def _flat_rows(p) -> bool:
    """Whether ``p`` is one GEMM over its N*S input rows, output row i reading input row i (a
    strided 1x1 problem is not: its output rows step over input rows)."""
    return _pointwise(p) and all(s == 1 for s in p.stride)


def rows_gemm(p) -> bool:
    """Whether forward problem ``p`` runs in ``rows_fwd_kernel``: one GEMM over its N*S rows (1x1
    kernel, stride 1, no padding), or a 1-D convolution whose stride divides its length (the
    kernel reads ``stride`` rows as one) and, where strided, whose channels are whole reduction
    steps; no groups or input dilation; half types (TF32 stays with the convolution kernel)."""
    if p.pass_ != "fwd" or p.groups > 1 or p.dtype == torch.float32 or any(d != 1 for d in p.input_dilation):
        return False
    if _flat_rows(p):
        return True
    if p.ndim != 1 or (p.in_channels * p.dtype.itemsize) % 16:
        return False
    s = p.stride[0]
    return p.in_spatial[0] % s == 0 and (s == 1 or p.in_channels % MIN_BLOCK_K == 0)


def _rows_block_k(p) -> int:
    """rows_fwd_kernel's reduction step: the TMA path's, or where strided the widest that divides
    the channels (a step never reads into the next row's)."""
    if all(s == 1 for s in p.stride):
        return _tma_block_k(p)
    return next(bk for bk in (64, 32, MIN_BLOCK_K)
                if p.in_channels % bk == 0 and bk * p.dtype.itemsize <= 128)


def pointwise_wgrad(p) -> bool:
    """Whether weight-gradient problem ``p`` is a 1x1 stride-1 forward's: one GEMM over N*S rows."""
    return _plain_wgrad(p) and all(k == 1 for k in p.out_spatial)  # the forward's kernel (swapped)


def wgrad_positions(p) -> int:
    """The forward's output positions N*S_out that weight-gradient problem ``p`` reduces over
    (ConvProblem.wgrad swaps the batch into x's channels and the forward's output into w's taps)."""
    return p.x_shape[-1] * math.prod(p.kernel)


@dataclass(frozen=True)
class WgradPhase:
    """One stride-1 weight gradient of a phase-split one: per spatial axis, x's positions
    (start, step, count), dy's positions (start, step, count) and the taps (t0, step, count) of
    dw it computes; ``q`` its weight-gradient problem over those views (None: no product
    reaches these taps, which are zero)."""

    x: tuple
    dy: tuple
    taps: tuple
    q: object


def _axis_phases(st, kd, idil, lo, so, k, s):
    """One axis of a weight gradient dw[t] = sum_j dy[j] * x_dil[j*st + t*kd - lo] split into
    stride-1 products: [(x (start, step, count), dy (start, step, count), taps (t0, step,
    count), kernel dilation, low pad)], or None where the axis is both strided and dilated.

    Input dilation d: output j = d*q + rho reads x only through the taps t with d | rho + t*kd
    - lo, at x position q + (rho + t*kd - lo)/d. Stride s: the taps with t*kd - lo = s*a + r read
    x's positions r, r + s, .. (a view) at j + a."""
    if st > 1 and idil > 1:
        return None
    out = []
    for phase in range(max(st, idil)):
        if idil > 1:
            taps = [t for t in range(k) if (phase + t * kd - lo) % idil == 0]
            shift = [(phase + t * kd - lo) // idil for t in taps]
            x, dy = (0, 1, s), (phase, idil, len(range(phase, so, idil)))
        else:
            taps = [t for t in range(k) if (t * kd - lo) % st == phase]
            shift = [(t * kd - lo - phase) // st for t in taps]
            x, dy = (phase, st, len(range(phase, s, st))), (0, 1, so)
        if taps:
            step = taps[1] - taps[0] if len(taps) > 1 else 1
            dil = shift[1] - shift[0] if len(taps) > 1 else 1
            out.append((x, dy, (taps[0], step, len(taps)), dil, -shift[0]))
    return out


@lru_cache(maxsize=256)
def _wgrad_phases(p):
    """Weight-gradient problem ``p`` as stride-1 weight gradients over views of its operands
    (a tuple of WgradPhase), or a string saying why not. Every tap of dw belongs to exactly
    one phase, so the phases write disjoint parts of dw (no sums across launches)."""
    stride, kdil = p.kernel_dilation, p.stride  # the forward's (ConvProblem.wgrad swaps them)
    idil, lo, G = p.input_dilation, p.padding_lo, p.groups
    N, O, Cg = p.w_shape[-1], p.out_channels, p.x_shape[0]
    axes = []
    for d in range(p.ndim):
        split = _axis_phases(stride[d], kdil[d], idil[d], lo[d], p.kernel[d], p.out_spatial[d],
                             p.in_spatial[d])
        if split is None:
            return "an axis both strided and input-dilated has no stride-1 phases"
        axes.append(split)
    phases = []
    for combo in itertools.product(*axes):
        xs, dys, taps, dils, los = zip(*combo)
        if any(c == 0 for _, _, c in (*xs, *dys)):
            phases.append(WgradPhase(xs, dys, taps, None))  # no product reaches these taps
            continue
        spans = [(t[2] - 1) * dil + 1 for t, dil in zip(taps, dils)]
        his = [dy[2] - 1 + span - x[2] - low for dy, span, x, low in zip(dys, spans, xs, los)]
        q = replace(p, x_shape=(N, *(x[2] for x in xs), G * Cg), w_shape=(O, *(t[2] for t in taps), Cg),
                    stride=(1,) * p.ndim, padding_lo=los, padding_hi=tuple(his), kernel_dilation=dils,
                    input_dilation=(1,) * p.ndim, flip=False, pass_="fwd")
        assert q.out_spatial == tuple(dy[2] for dy in dys), (p, q)
        phases.append(WgradPhase(xs, dys, taps, q.wgrad()))
    return tuple(phases)


def _positions(t: torch.Tensor, first: int, ranges) -> torch.Tensor:
    """``t`` viewed at positions (start, step, count) per axis from dim ``first``."""
    index = [slice(None)] * t.dim()
    for d, (start, step, count) in enumerate(ranges):
        index[first + d] = slice(start, start + step * (count - 1) + 1, step)
    return t[tuple(index)]


def _run_tma_wgrad_phases(p, x_t, dy_t, dw_t, config: Config) -> bool:
    """A strided or input-dilated weight gradient as its stride-1 phases (_wgrad_phases): 2-D
    ones in one launch where their views allow (_phased_wgrad_launch), else each phase on the
    TMA kernel where its views meet TMA's rules, else on the gather kernel; False (nothing
    launched) where ``p`` does not split or dw is not one [O, *K, C/g] view.

    The phases share one workspace of partial sums (each phase its own taps, one split count)
    summed once at the end. On the H200 (convT_4x4s2): a sum and a copy per phase cost 8
    launches and 31 of 151 µs of kernels; shared, 173 -> 158 µs; in one launch, 118 µs."""
    from .implicit_gemm_kernels import conv_wgrad_tma_kernel

    phases = _wgrad_phases(p)
    operands = _phase_operands(p, x_t, dy_t, dw_t)
    if isinstance(phases, str) or operands is None:
        return False
    x, dy, dw = operands
    G, Og = p.groups, group_channels(p)[1]
    separate = [phase for phase in phases if phase.q is not None]  # a launch each
    together = _phased_wgrad(p)
    partial = torch.empty((_phases_split(p, config, x.device), *dw.shape), device=x.device,
                          dtype=torch.float32)
    direct = [(phase, None) for phase in phases if phase.q is None]  # written after the partial sums
    if together is not None:
        launch = _phased_wgrad_launch(p, together, x, dy, partial, config)
        if launch is not None:
            grid, args, meta = launch
            conv_wgrad_tma_kernel[grid](*args, **meta)
            separate = []
    for phase in separate:
        views = phase.q.views(_positions(x, 1, phase.x), _positions(dy, 1, phase.dy),
                              _positions(dw, 1, phase.taps))
        taps = _positions(partial, 2, phase.taps).unflatten(1, (G, Og))
        if not _run_tma_wgrad(phase.q, *views, config, taps):
            direct.append((phase, views))
    sum_partials(partial, dw)
    for phase, views in direct:
        if views is None:  # no product reaches these taps
            _positions(dw, 1, phase.taps).zero_()
        else:
            _run_wgrad(phase.q, *views, gather_wgrad_config(phase.q))
    return True


def _phase_operands(p, x_t, dy_t, dw_t):
    """Weight-gradient problem ``p``'s views as x [N, *S, C], dy [N, *SO, O], dw [O, *K, Cg]
    (natural, groups merged), or None where one does not merge."""
    x, dy, dw, _ = p.wgrad_natural(x_t, dy_t, dw_t)
    if not (_mergeable(x, p.ndim + 1, p.ndim + 2) and _mergeable(dy, p.ndim + 1, p.ndim + 2)
            and _mergeable(dw, 0, 1)):
        return None
    return x.flatten(-2), dy.flatten(-2), dw.flatten(0, 1)


def _phases_split(p, config: Config, device) -> int:
    """The split of phase-split weight gradient ``p``'s reduction, one for all its phases: in one
    launch (_phased_wgrad) counting the programs that have taps, else the most any phase takes."""
    together = _phased_wgrad(p)
    if together is None:
        return max((_wgrad_split(phase.q, config, device)
                    for phase in _wgrad_phases(p) if phase.q is not None),
                   default=1)
    taps3 = _taps3(config, together.taps[1])
    programs = sum(k1 * cdiv(k3, taps3) for k1, k3 in together.phase_taps)  # per channel tile
    return _wgrad_split(together.q, config, device, programs)


def phases_in_one_launch(p) -> bool:
    """Whether weight-gradient problem ``p``'s phases run in one launch on the TMA path."""
    return tma_reason(p) is None and _phased_wgrad(p) is not None


def _prepare_phased_wgrad(p, config: Config):
    """The prepared call of a weight gradient whose phases run in one launch (_phased_wgrad),
    the launch bound once; None where ``run`` must do it (phases in several launches, or taps
    that no phase reaches)."""
    from .implicit_gemm_kernels import conv_wgrad_tma_kernel

    form, views = _phased_wgrad(p), meta_views(p)
    operands = _phase_operands(p, *views) if views is not None else None
    if form is None or operands is None or form.phases != len(_wgrad_phases(p)):
        return None
    x, dy, dw = operands
    partial = torch.empty((_phases_split(p, config, x.device), *dw.shape), device=x.device,
                          dtype=torch.float32)
    launch = _phased_wgrad_launch(p, form, x, dy, partial, config)
    if launch is None:
        return None
    return _summing_call(p, BoundLaunch(conv_wgrad_tma_kernel, *launch, operands=(x, dy, partial)),
                         partial.shape, config)


@dataclass(frozen=True)
class PhasedWgrad:
    """The live phases of a 2-D weight gradient as one launch: one of x and dy (``phased``) is
    viewed [N, Q1, P1, Q2, P2*C] (a phase is a coordinate on axis 2 and a channel offset), the
    other [N, A, 1, B, C]; ``rows`` the phase table (conv_wgrad_tma_kernel's PHASED rows)."""

    phased: str  # "x" or "dy"
    periods: tuple  # (P1, P2)
    taps: tuple  # the most taps of any phase, per axis (the grid's)
    phase_taps: tuple  # each phase's taps per axis
    q: object  # the weight-gradient problem of the phase of the most taps
    rows: tuple

    @property
    def phases(self) -> int:
        return len(self.rows)


@lru_cache(maxsize=256)
def _phased_wgrad(p):
    """Strided or transposed weight-gradient problem ``p``'s live phases as one launch
    (PhasedWgrad), or None where they are not 2-D and ungrouped, or have no common form: one
    operand phased, its sides divisible by the periods."""
    phases = _wgrad_phases(p)
    live = [phase for phase in phases if phase.q is not None] if not isinstance(phases, str) else []
    if p.ndim != 2 or p.groups != 1 or not live:
        return None
    stride, idil = p.kernel_dilation, p.input_dilation  # the forward's stride (ConvProblem.wgrad swaps them)
    phased = "dy" if any(d > 1 for d in idil) else "x"
    if phased == "dy" and any(s > 1 for s in stride):
        return None
    periods = tuple(idil) if phased == "dy" else tuple(stride)
    sides = p.kernel if phased == "dy" else p.in_spatial  # the forward's output (swapped) or input
    if any(n % period for n, period in zip(sides, periods)):
        return None
    C, O = p.x_shape[0], p.w_shape[0]
    rows = []
    for phase in live:
        start = [r[0] for r in (phase.dy if phased == "dy" else phase.x)]
        coords = (start[0], start[1] * O, 0, 0) if phased == "dy" else (0, 0, start[0], start[1] * C)
        per_axis = [(t[2], kd, lo, t[0], t[1])
                    for t, kd, lo in zip(phase.taps, phase.q.stride, phase.q.padding_lo)]
        rows.append((*coords, *per_axis[0], *per_axis[1]))
    phase_taps = tuple(phase.q.out_spatial for phase in live)  # the forward's kernel (swapped)
    taps = tuple(max(t[d] for t in phase_taps) for d in range(2))
    return PhasedWgrad(phased, periods, taps, phase_taps,
                       max(live, key=lambda ph: math.prod(ph.q.out_spatial)).q, tuple(rows))


def _phased_wgrad_launch(p, form: PhasedWgrad, x, dy, target, config: Config):
    """(grid, args, meta) of the TMA weight-gradient kernel running ``form``'s phases of ``p``
    in one launch (x [N, H, W, C], dy [N, SO1, SO2, O] natural; ``target`` the float32
    workspace [split, O, K1, K2, C] of partial sums), or None where TMA cannot take
    the views or no exact box wastes less than half a tile."""
    bo, bc, bk = config.block_m, config.block_n, config.block_k
    N, C, O = x.shape[0], x.shape[-1], dy.shape[-1]
    P1, P2 = form.periods
    positions = ((dy.shape[1] // P1, 1, dy.shape[2] // P2) if form.phased == "dy"
                 else (dy.shape[1], 1, dy.shape[2]))
    box = _wgrad_box(positions, N, bk)
    taps3 = _taps3(config, form.taps[1])
    meta = _wgrad_meta(p, box, taps3, config, phased=True)
    if meta is None:
        return None

    def view(t, phased, block):  # [N, Q1, P1, Q2, P2*C] or [N, A, 1, B, C]
        n, a, b, c = t.shape
        if phased:
            shape, strides = ([n, a // P1, P1, b // P2, P2 * c],
                              [t.stride(0), P1 * t.stride(1), t.stride(1), P2 * c, 1])
        else:
            shape, strides = [n, a, 1, b, c], [t.stride(0), t.stride(1), t.stride(1), t.stride(2), 1]
        return _descriptor(t, shape, strides, [*box, block])

    phased = dy if form.phased == "dy" else x
    if x.stride(-1) != 1 or dy.stride(-1) != 1 or phased.stride(-2) != phased.shape[-1]:
        return None  # unit-stride channels, and the phased operand's merge with its last axis
    dy_desc, x_desc = view(dy, form.phased == "dy", bo), view(x, form.phased == "x", bc)
    if dy_desc is None or x_desc is None:
        return None
    split = target.shape[0]
    steps = cdiv(N, box[0]) * cdiv(positions[0], box[1]) * cdiv(positions[2], box[3])
    per_split = cdiv(steps, split)
    tiles = form.taps[0] * cdiv(form.taps[1], taps3) * cdiv(O, bo) * cdiv(C, bc)
    table = _phase_rows(form.rows, p.device if x.device.type == "meta" else str(x.device))  # meta: prepared
    st = target.stride()
    args = (dy_desc, x_desc, target, table,
            N, C, O, split, per_split, form.phases,
            *positions, form.taps[0], 1, form.taps[1], 1, 1, 1, 0, 0, 0,
            st[0], 0, st[1], st[2], 0, st[3], st[4])
    return (tiles, form.phases * split), args, meta


@lru_cache(maxsize=64)
def _phase_rows(rows, device: str) -> torch.Tensor:
    """The phase table of a PhasedWgrad as an int32 tensor on ``device`` (kept: made once)."""
    return torch.tensor(rows, dtype=torch.int32, device=device)


# ------------------------------------------------- strided problems on the TMA path: folding

@dataclass(frozen=True)
class Fold:
    """A strided problem as the stride-1 problem ``q`` over a free view of its input. On the
    last axis, stride s: input position s*j + t - lo is row j + (t + e)//s - lo' of the input
    viewed as [S/s, s*C] (lo' = ceil(lo/s), e = s*lo' - lo), channel block (t + e) % s, so the
    problem is a stride-1 one of K' = ceil((K + e)/s) taps over s*C channels, its weight
    rearranged to match (taps past the kernel are zero; a small copy per call). The kernel skips
    the reduction steps of the first and last folded taps whose row phases meet only those
    zeros (conv1d_k3s2_768: 36 steps of 64 channels instead of 48, 183.6 -> 149.3 us on the
    H200). On an axis with a single tap and no padding the view just steps by s. Any other
    strided axis before the last keeps its taps and steps its rows: the kernel's tiles hold one
    output row along it (box side 1), whose input rows s*j + t*kd - lo are each one TMA box
    coordinate, so no zero tap is multiplied (``q`` has that axis at stride 1 over the real input,
    its high padding set to give the real output size; the kernel scales the output row by s).
    A phase axis instead (the input viewed [S/s, s, ...], a dense kernel over it) multiplied
    zero taps: measured slower than the gather kernel on the H200 (convT_4x4s2's input gradient
    209 against 153 us)."""

    q: object  # the stride-1 ConvProblem (its "row" axes scaled by the stride in the kernel)
    axes: tuple  # per axis: ("fold", s, e, K') | ("step", s, offset) | ("row", s) | ("keep",)

    @property
    def row_steps(self) -> tuple:
        """The input row step per output row on each axis (the stride on "row" axes, else 1)."""
        return tuple(a[1] if a[0] == "row" else 1 for a in self.axes)


def fold_reason(p) -> str | None:
    """None when strided problem ``p`` folds (``_fold``, else ``_space_to_depth``) into one the
    TMA path takes, else why not."""
    fold = _fold(p)
    if isinstance(fold, Fold):
        return tma_reason(fold.q)
    s2d = _space_to_depth(p)
    return f"{fold}; {s2d}" if isinstance(s2d, str) else tma_reason(s2d)


def _stride1_problem(p):
    """The stride-1 problem the TMA path runs for forward-kind ``p``: its Fold's, else its
    space-to-depth one, with the last axis's taps folded where that pays (``_tap_fold``); ``p``
    itself where the TMA path does not take it."""
    if p.pass_ == "wgrad":
        return p
    if any(s > 1 for s in p.stride):
        fold = _fold(p)
        q = fold.q if isinstance(fold, Fold) else _output_pairs(p) or _space_to_depth(p)
        if isinstance(q, str):
            return p
        p = q
    return _tap_fold(p) or p


@lru_cache(maxsize=256)
def _fold(p):
    """``p``'s Fold, or a string saying why it has none."""
    if p.groups > 1:
        return "folding the stride into the channels needs groups == 1"
    if any(d != 1 for d in p.input_dilation):
        return "folding needs no input dilation"
    D, C = p.ndim, p.in_channels
    esize = p.dtype.itemsize
    x_shape, w_shape, lo, hi, kdil, axes = [p.batch], [p.out_channels], [], [], [], []
    channels = C
    for d, (s, k, kd, pad_lo, so, S) in enumerate(zip(p.stride, p.kernel, p.kernel_dilation,
                                                       p.padding_lo, p.out_spatial, p.in_spatial)):
        if s == 1:
            axes.append(("keep",))
            x_shape.append(S)
            w_shape.append(k)
            lo.append(pad_lo)
            hi.append(p.padding_hi[d])
            kdil.append(kd)
        elif k == 1 and pad_lo <= 0:  # one tap: output j reads s*j - lo, a view stepping by s from -lo
            axes.append(("step", s, -pad_lo))
            x_shape.append(so)
            w_shape.append(1)
            lo.append(0)
            hi.append(0)
            kdil.append(1)
        elif d < D - 1:  # its rows step by s in the kernel; stride 1 over the real input here
            if C <= SPACE_TO_DEPTH_MAX_CHANNELS:
                return "stems (few input channels) take a space-to-depth copy, measured faster"
            axes.append(("row", s))
            x_shape.append(S)
            w_shape.append(k)
            lo.append(pad_lo)
            hi.append(so - S - pad_lo + (k - 1) * kd)
            kdil.append(kd)
        elif k == 1:
            return "a one-tap strided last axis with padding"
        elif kd != 1 or S % s or (s * C * esize) % 16:
            return (f"folding the last axis needs kernel dilation 1, a side divisible by the stride "
                    f"and 16-byte rows of stride x channels (kdil {kd}, side {S}, stride {s}, C {C})")
        else:
            lo_f = -(-pad_lo // s)
            e = s * lo_f - pad_lo
            kf = -(-(k + e) // s)
            axes.append(("fold", s, e, kf))
            x_shape.append(S // s)
            w_shape.append(kf)
            lo.append(lo_f)
            hi.append(so - S // s - lo_f + kf - 1)
            kdil.append(1)
            channels = s * C
    ones = (1,) * D
    q = replace(p, x_shape=(*x_shape, channels), w_shape=(*w_shape, channels), stride=ones,
                padding_lo=tuple(lo), padding_hi=tuple(hi), kernel_dilation=tuple(kdil), input_dilation=ones,
                flip=False, pass_="fwd")
    assert q.out_spatial == p.out_spatial, (p, q)
    return Fold(q, tuple(axes))


def _run_folded(p, x, w, out, config: Config) -> bool:
    """Strided ``p`` (grouped views, groups == 1) as its Fold's stride-1 problem on the TMA
    path; False (nothing launched) where that does not take these tensors."""
    fold = _fold(p)
    if isinstance(fold, str):
        return False
    q, views, last_taps = _folded_operands(p, fold, x, w, out)
    return _run_tma(q, *views, config, last_taps, fold.row_steps)


def _folded_operands(p, fold: Fold, x, w, out):
    """(q, q's grouped views of x, of the rearranged weight (a new tensor) and of out,
    last_taps) of strided ``p``'s views as its Fold's problem."""
    x, w, out = x.squeeze(-2), w[0], out.squeeze(-2)  # natural [N, *S, C], [O, *K, C], [N, *SO, O]
    C, q = p.in_channels, fold.q
    if fold.axes[-1][0] == "fold" and not (x.stride(-1) == 1 and x.stride(-2) == C):
        x = x.contiguous()  # the last axis's rows must hold s*C channels
    wp = _folded_weight(p, fold, w)
    for d, (a, so) in enumerate(zip(fold.axes, p.out_spatial)):  # one-tap axes: a view stepping by s
        if a[0] == "step":
            x = x.narrow(1 + d, a[2], (so - 1) * a[1] + 1)[
                (slice(None),) * (1 + d) + (slice(None, None, a[1]),)]
    last_taps = None
    if fold.axes[-1][0] == "fold":  # the folded taps' row phases past the kernel meet zero weights: skipped
        _, s, e, kf = fold.axes[-1]
        last_taps = (e * C, min(s, e + p.kernel[-1] - s * (kf - 1)) * C)
    return q, q.views(x.view(q.x_shape), wp.view(q.w_shape), out), last_taps


def _folded_weight(p, fold: Fold, w):
    """The weight of strided ``p``'s Fold from its natural [O, *K, C]: flipped where ``p``
    flips, and where the last axis folds, its taps padded with zero taps to s*K' (e before the
    kernel's, the rest after) and contiguous, so that the taps merge into the channels (an input
    gradient's weight is a transposed view, and padding by nothing, where the kernel spans whole
    strides, copies nothing). ``w`` itself where neither (the kernel reads it in place)."""
    if p.flip:
        w = w.flip(tuple(range(1, p.ndim + 1)))
    kind, *fold_last = fold.axes[-1]
    if kind == "fold":
        s, e, kf = fold_last
        w = torch.nn.functional.pad(w, (0, 0, e, s * kf - e - p.kernel[-1])).contiguous()
    return w


def _prepare_folded(p, config: Config):
    """The prepared call of a strided problem over its Fold's view: the kernel's launch bound
    once (through Triton's generic launch and descriptors made per call, convT_4x4s2's input
    gradient cost 255-277 µs of host time per call for 115 on the GPU), and per call only the
    weight's flip or padding (_folded_weight): the bound launch needs only the operands' base
    addresses, which the views share with the natural tensors (but an input view's offset). None
    where ``run`` must do it."""
    from .implicit_gemm_kernels import conv_fwd_tma_kernel

    fold, views = _fold(p), meta_views(p)
    if isinstance(fold, str) or views is None:
        return None
    q, q_views, last_taps = _folded_operands(p, fold, *views)
    launch, empty = _tma_launch(q, *q_views, config, last_taps, fold.row_steps)
    if launch is None or empty or launch[1][1].base is not q_views[1] or q_views[2].storage_offset():
        return None
    bound = BoundLaunch(conv_fwd_tma_kernel, *launch, operands=q_views)
    x_offset = q_views[0].storage_offset()  # a one-tap axis's view stepping from -lo
    dgrad = p.pass_ == "dgrad"  # its weight is the forward's with O and C swapped (p.views)

    def tma_or_gather(a, b, out):
        x = a.view(-1)[x_offset:] if x_offset else a
        w = _folded_weight(p, fold, b.transpose(0, -1) if dgrad else b)
        if x.data_ptr() % 16 or w.data_ptr() % 16:  # TMA's rule: run's other paths
            run(p, *p.views(a, b, out), config)
        else:
            bound(x, w, out)
    return allocating(p, tma_or_gather)


# ------------------------------------- stride 1: the last axis's taps folded into the reduction

@lru_cache(maxsize=256)
def _tap_fold(p):
    """Stride-1 ``p`` as the problem whose last axis has one tap over K3*C channels, or None
    where that would not shorten its reduction.

    The input padded along its last axis, viewed with overlapping windows (element [.., j, t*C +
    c] is input position j + t, channel c), holds each output position's K3 taps as one
    contiguous run of K3*C channels; the weight [O, .., K3, C] is that run already. A channel
    count the widest reduction step does not divide wastes part of every tap's last step
    (conv1d_k3_80: 80 channels in steps of 32, 9 steps of which 20% zeros); folded, the K3*C
    channels take fewer, fuller steps (4 steps of 64). The cost is one padded copy of the input
    per call where the last axis is padded, so it folds only where that halves the steps."""
    if (p.pass_ == "wgrad" or p.groups > 1 or any(s != 1 for s in p.stride) or p.kernel[-1] == 1
            or any(d != 1 for d in p.input_dilation) or p.kernel_dilation[-1] != 1
            or tma_reason(p) is not None):
        return None
    C, K3 = p.in_channels, p.kernel[-1]
    q = replace(p, x_shape=(p.batch, *p.in_spatial[:-1], p.out_spatial[-1], K3 * C),
                   w_shape=(p.out_channels, *p.kernel[:-1], 1, K3 * C),
                   padding_lo=(*p.padding_lo[:-1], 0), padding_hi=(*p.padding_hi[:-1], 0),
                   kernel_dilation=(*p.kernel_dilation[:-1], 1), pass_="fwd")
    if 2 * cdiv(K3 * C, _tma_block_k(q)) > K3 * cdiv(C, _tma_block_k(p)):  # at least halved
        return None
    return q


# ------------------------------------- strided, few input channels: space-to-depth (stems)

SPACE_TO_DEPTH_MAX_CHANNELS = 4  # RGB(A) inputs: the copy is small next to the convolution


@lru_cache(maxsize=256)
def _space_to_depth(p):
    """Strided ``p`` with few input channels as a stride-1 problem over a space-to-depth copy
    of its padded input, or a string saying why not.

    Per axis of stride s, block a of the padded input (rows a*s .. a*s + s - 1) becomes one
    position whose channels are the s rows' channels, so output j reads blocks j .. j +
    ceil(K/s) - 1: a stride-1 problem of ceil(K/s) taps over prod(s)*C' channels (C' the
    channels zero-padded to 16-byte rows; the weight rearranged to match, zero past the
    kernel). r50_stem_7x7s2: [64, 224, 224, 3] -> [64, 115, 115, 16], 4x4 taps, whose last
    axis's taps then fold into 64-channel steps (``_tap_fold``). The kernel's zero taps and
    channels cost MACs (at most 3x the problem's; the 7x7 stem's 1.74x, a 3x3 stem's 2.4x);
    the copy reads the input once and writes it about once."""
    if p.groups > 1 or p.in_channels > SPACE_TO_DEPTH_MAX_CHANNELS:
        return (f"space-to-depth is for ungrouped inputs of at most {SPACE_TO_DEPTH_MAX_CHANNELS} "
                f"channels (groups {p.groups}, C {p.in_channels})")
    if any(d != 1 for d in (*p.input_dilation, *p.kernel_dilation)):
        return "space-to-depth needs no dilation"
    esize = p.dtype.itemsize
    blocks = math.prod(p.stride)
    channels = next(c for c in range(p.in_channels, p.in_channels + 16) if (blocks * c * esize) % 16 == 0)
    taps = tuple(cdiv(k, s) for k, s in zip(p.kernel, p.stride))
    if math.prod(taps) * blocks * channels > 3 * math.prod(p.kernel) * p.in_channels:
        return ("space-to-depth would more than triple the MACs "
                f"({taps} taps over {blocks * channels} channels)")
    ones = (1,) * p.ndim
    return replace(p, x_shape=(p.batch, *(so + t - 1 for so, t in zip(p.out_spatial, taps)),
                               blocks * channels),
                   w_shape=(p.out_channels, *taps, blocks * channels), stride=ones, padding_lo=(0,) * p.ndim,
                   padding_hi=(0,) * p.ndim, flip=False, pass_="fwd")


def tma_route(p) -> str:
    """How the TMA path runs ``p`` (which it takes), for explain: the rewrites on the way."""
    runner, taps = tma_runner(p), ", the last axis's taps folded into the channels"
    if p.pass_ == "fwd" and rows_gemm(p) and tma_config(p).rows:
        return " over rows of the input, a box of them per tap (rows_fwd_kernel)"
    if runner is _run_tma_wgrad_phases:
        n = len(_wgrad_phases(p))
        together = ", in one launch" if n > 1 and _phased_wgrad(p) is not None else ""
        return f" in {n} stride-1 phase{'s' if n > 1 else ''} over views of the operands{together}"
    if runner is _run_folded:
        fold = _fold(p)
        folds = any(a[0] in ("fold", "step") for a in fold.axes)
        parts = ["folding the stride into the channels"] if folds else []
        parts += ["stepping rows by the stride"] if any(a[0] == "row" for a in fold.axes) else []
        return " over a view " + ", ".join(parts)
    if runner is _run_space_to_depth:
        if _output_pairs(p):
            return " over a space-to-depth copy of the input, pairs of outputs along the last axis as one row"
        return " over a space-to-depth copy of the input" + (taps if _tap_fold(_space_to_depth(p)) else "")
    return taps + " (a padded copy)" if runner is _run_tap_folded else ""


def takes_space_to_depth(p) -> bool:
    """True when the TMA path runs strided ``p`` over a space-to-depth copy of its input."""
    return tma_runner(p) is _run_space_to_depth and fold_reason(p) is None


def padded_blocks(x: torch.Tensor, blocks, stride, lo, channels: int, copies: int = 1,
                  shift: int = 0) -> torch.Tensor:
    """x [N, *S, C] padded by ``lo`` per axis (negative crops) and with zeros past its end, its
    channels zero-padded to ``channels``, as [N, *blocks, prod(stride)*channels]: position b of
    an axis of stride s holds the padded rows b*s .. b*s + s - 1, channels ordered (row phase
    per axis, channel). With ``copies`` > 1, that many such copies one after the other
    ([copies * N, ...]), the k-th with its last axis's low pad grown by k * ``shift`` (a stem's
    weight for pairs of outputs: one launch, not one per copy). One Triton pass: on the stem's
    19 MB input, F.pad took 41 us and F.pad then the permuted copy 80 us on the H200; this
    copy, 13.4 us, runs at the speed of a plain clone of the input (12.8 us)."""
    from .implicit_gemm_kernels import padded_blocks_kernel

    if x.stride(-1) != 1:
        x = x.contiguous()
    y, (grid, args, meta) = padded_blocks_launch(x, blocks, stride, lo, channels, copies, shift)
    padded_blocks_kernel[grid](*args, **meta)
    return y


def padded_blocks_launch(x: torch.Tensor, blocks, stride, lo, channels: int, copies: int = 1, shift: int = 0):
    """padded_blocks' result (new, on x's device: meta for a prepared launch) and the (grid,
    args, meta) of its copy of x (channels contiguous)."""
    D, C, N = len(stride), x.shape[-1], x.shape[0]
    y = torch.empty((copies * N, *blocks, math.prod(stride) * channels), dtype=x.dtype, device=x.device)
    rows = copies * N * math.prod(blocks)
    cols = pow2_at_least(y.shape[-1])
    block_r = max(1, min(128, 4096 // cols))
    args = (x, y, rows, N, shift, *pad3(blocks, 1), *pad3(x.shape[1:-1], 1), *pad3(lo, 0), C,
            x.stride(0), *spatial_strides(x, 1, D), *pad3(stride, 1), channels, cols, block_r,
            needs_int64(x, y))
    return y, ((cdiv(rows, block_r),), args, dict(num_warps=4))


@lru_cache(maxsize=256)
def _output_pairs(p):
    """Stem ``p``'s space-to-depth problem with each pair of outputs along the last axis as one
    output row of twice the channels, or None where that would lengthen its reduction.

    Over a copy whose channels are not padded (12 for RGB at stride 2x2), the output pair j
    reads the blocks 2j .. 2j + taps of the last axis: (taps + 1) * 12 contiguous elements, a
    window starting every 2 * 12 (48 bytes in half precision: TMA's 16-byte rule), padded to a
    power of two (the weight zero there). Where that power of two is no longer than today's
    folded taps (``_tap_fold``: r50_stem_7x7s2's 4 taps of 16 channels, 64; its pair, 5 blocks
    of 12, 64) the MACs are the same over half the rows and twice the output channels, so each
    window is read from L2 once for two outputs (H200, bf16: the stem 100.6-103.1 -> 92.5-92.9
    us with its three copies, the GEMM alone 75 us). The output [N, *SO, O] is [N, *SO[:-1],
    SO[-1] / 2, 2 * O] as a view: the weight's rows are (output of the pair, o), the second's
    taps shifted by one block."""
    q = _space_to_depth(p)
    fold = None if isinstance(q, str) else _tap_fold(q)
    if fold is None or p.out_spatial[-1] % 2:
        return None
    block = math.prod(p.stride) * p.in_channels
    width = pow2_at_least((q.kernel[-1] + 1) * block)
    if width > fold.in_channels or (2 * block * p.dtype.itemsize) % 16:
        return None
    return replace(q, x_shape=(p.batch, *q.in_spatial[:-1], p.out_spatial[-1] // 2, width),
                   w_shape=(2 * p.out_channels, *q.kernel[:-1], 1, width))


def _space_to_depth_copies(p, pairs: bool):
    """padded_blocks' arguments after the operand of the input's copy for stem ``p`` (blocks,
    stride, lo, channels) and of the weight's (the same, then copies and shift). Without pairs
    the channels are padded to 16-byte rows and the weight's taps past the kernel are zero;
    with them the channels are the input's, the input has enough blocks for the last window
    and the weight is two copies, one per output of a pair: each row the blocks of its window
    (the second's shifted by one block), zero past them to a multiple of 128 bytes: rows of 72
    elements (6 blocks of 12), which the kernel's 128-byte boxes read across two L2 lines, made
    r50_stem_7x7s2 17 us slower (H200)."""
    C, stride, D = p.in_channels, p.stride, p.ndim
    if pairs:
        r = _output_pairs(p)
        block = math.prod(stride) * C
        span = cdiv(r.in_channels, block)  # blocks a window touches
        x_blocks = (*r.in_spatial[:-1], 2 * (r.in_spatial[-1] - 1) + span)
        line = 128 // math.gcd(128, block * p.dtype.itemsize)  # blocks in a whole number of 128-byte lines
        w_blocks = (*r.kernel[:-1], cdiv(span, line) * line)
        return (x_blocks, stride, p.padding_lo, C), (w_blocks, stride, (0,) * D, C, 2, stride[-1])
    q = _space_to_depth(p)
    channels = q.in_channels // math.prod(stride)
    return (q.in_spatial, stride, p.padding_lo, channels), (q.kernel, stride, (0,) * D, channels)


def _last_axis_padded(p):
    """padded_blocks' (blocks, stride, lo, channels) of ``p``'s input padded (or cropped) along
    its last axis only: the rows a tap-folded problem's windows read."""
    D, lo, hi = p.ndim, p.padding_lo[-1], p.padding_hi[-1]
    return (*p.in_spatial[:-1], p.in_spatial[-1] + lo + hi), (1,) * D, (0,) * (D - 1) + (lo,), p.in_channels


def _tap_windows(x: torch.Tensor, shape) -> torch.Tensor:
    """x [N, *S, C] (rows C-strided) as the windows of a ``_tap_fold`` problem's input ``shape``:
    position j of the last axis holds the rows j, j + 1, ... (overlapping, no copy)."""
    return x.as_strided(shape, (*x.stride()[:-2], x.shape[-1], 1))


def _space_to_depth_operands(p, pairs: bool, xs: torch.Tensor, ws: torch.Tensor, out: torch.Tensor):
    """The problem the TMA kernel runs for stem ``p`` and its natural operands (x, w, out) over
    the copies xs, ws (``_space_to_depth_copies``) and the output [N, *SO, O]: with ``pairs``
    the windows of pairs of outputs, the weight's rows (the copies' rows one after the other)
    and the output as ``_output_pairs`` says; else the space-to-depth problem, its last axis's
    taps folded into the channels where that pays (it has no padding, so the windows need no
    copy)."""
    if pairs:
        r = _output_pairs(p)
        x = xs.as_strided(r.x_shape, (*xs.stride()[:-2], 2 * xs.shape[-1], 1))
        w = ws.view(r.out_channels, *r.kernel[:-1], -1)[..., :r.in_channels].unsqueeze(-2)
        return r, x, w, out.as_strided(r.out_shape, (*out.stride()[:-2], 2 * out.stride(-2), out.stride(-1)))
    q = _space_to_depth(p)
    f = _tap_fold(q)
    if f is None:
        return q, xs, ws, out
    return f, _tap_windows(xs, f.x_shape), ws.view(f.w_shape), out


def _takes_pairs(p, out: torch.Tensor) -> bool:
    """Whether stem ``p`` runs as ``_output_pairs`` into ``out`` [N, *SO, O] (its pairs of
    positions one row of 2 * O: channels contiguous after positions)."""
    return _output_pairs(p) is not None and out.stride(-2) == p.out_channels * out.stride(-1)


def _run_space_to_depth(p, x, w, out, config: Config) -> bool:
    """Strided ``p`` (grouped views, groups == 1) as its ``_space_to_depth`` problem on the TMA
    path (stride 1; pairs of outputs, or taps folded, where that pays); False (nothing
    launched) where that does not take these tensors."""
    if isinstance(_space_to_depth(p), str):
        return False
    x, w, out = x.squeeze(-2), w[0], out.squeeze(-2)  # natural [N, *S, C], [O, *K, C], [N, *SO, O]
    pairs = _takes_pairs(p, out)
    x_copy, w_copy = _space_to_depth_copies(p, pairs)
    wf = w.flip(tuple(range(1, p.ndim + 1))) if p.flip else w
    r, *views = _space_to_depth_operands(p, pairs, padded_blocks(x, *x_copy), padded_blocks(wf, *w_copy), out)
    return _run_tma(r, *r.views(*views), config)


def _run_tap_folded(p, x, w, out, config: Config) -> bool:
    """Stride-1 ``p`` (grouped views, groups == 1) as its ``_tap_fold`` problem on the TMA path;
    False (nothing launched) where that does not take these tensors."""
    q = _tap_fold(p)
    x, w, out = x.squeeze(-2), w[0], out.squeeze(-2)  # natural [N, *S, C], [O, *K, C], [N, *SO, O]
    C, D = p.in_channels, p.ndim
    lo, hi = p.padding_lo[-1], p.padding_hi[-1]
    if lo or hi or x.stride(-1) != 1 or x.stride(-2) != C:  # the windows need C-strided rows
        x = padded_blocks(x, *_last_axis_padded(p))
    windows = _tap_windows(x, q.x_shape)
    if p.flip:  # q flips the other axes; the taps folded into the channels are flipped here
        w = w.flip(D)
    return _run_tma(q, *q.views(windows, w.contiguous().view(q.w_shape), out), config)


def _prepare_copying(p, config: Config):
    """The prepared call of a forward that copies operands before the TMA kernel: a stem's
    space-to-depth copies of its input and weight, a tap-folded problem's input padded along
    its last axis. Each launch is bound once: through Triton's generic launches and descriptors
    made per call, the stem cost about 0.5 ms of host time per call for 0.12 ms on the GPU.
    None where ``run`` must do it (flipped weights, other passes, refused problems)."""
    from .implicit_gemm_kernels import conv_fwd_tma_kernel, padded_blocks_kernel

    if p.pass_ != "fwd" or p.flip:
        return None

    def meta(shape):
        return torch.empty(shape, device="meta", dtype=p.dtype)

    x, w, out = meta(p.x_shape), meta(p.w_shape), meta(p.result_shape)
    copies = []  # (operand 0 or 1, its copy, (grid, args, meta) of the launch writing it)
    if tma_runner(p) is _run_space_to_depth:
        if isinstance(_space_to_depth(p), str):
            return None
        pairs = _takes_pairs(p, out)
        x_copy, w_copy = _space_to_depth_copies(p, pairs)
        copies = [(0, *padded_blocks_launch(x, *x_copy)), (1, *padded_blocks_launch(w, *w_copy))]
        r, *views = _space_to_depth_operands(p, pairs, copies[0][1], copies[1][1], out)
    else:
        r, xs = _tap_fold(p), x
        if p.padding_lo[-1] or p.padding_hi[-1]:
            copies = [(0, *padded_blocks_launch(x, *_last_axis_padded(p)))]
            xs = copies[0][1]
        views = _tap_windows(xs, r.x_shape), w.view(r.w_shape), out
    views = r.views(*views)
    launch, empty = _tma_launch(r, *views, config)
    if launch is None or empty or launch[1][1].base is not views[1]:
        return None
    gemm = BoundLaunch(conv_fwd_tma_kernel, *launch, operands=views)
    # each launch bound to its source and its copy
    copies = [(i, y.shape, BoundLaunch(padded_blocks_kernel, *c, operands=c[1][:2])) for i, y, c in copies]
    shape, dtype = p.result_shape, p.dtype

    def call(a, b):
        out = torch.empty(shape, dtype=dtype, device=a.device)
        operands = [a, b]
        for i, copy_shape, launch in copies:
            operands[i] = torch.empty(copy_shape, dtype=dtype, device=a.device)
            launch((a, b)[i], operands[i])
        if operands[0].data_ptr() % 16 or operands[1].data_ptr() % 16:  # TMA's rule: run's gather path
            run(p, *p.views(a, b, out), config)
        else:
            gemm(*operands, out)
        return out
    return call
