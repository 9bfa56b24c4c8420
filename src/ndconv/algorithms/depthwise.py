"""Direct convolution for small groups: depthwise (groups == C), channel multipliers
(O = m*C), their input gradients (C/groups = m, O/groups = 1) and tiny groups.

A tensor-core GEMM wastes almost all of its tile on these: a depthwise group is a 1x1 "GEMM"
per tap. These kernels run on CUDA cores instead. Output channels are the vector lanes
(channels-last loads, contiguous along C). In the forward kernel (which also computes the input
gradient) each thread owns a strip of consecutive outputs along the last axis, on one or a
few rows: every input column the strip's taps read is loaded and converted once and used for
all of them (on every row that reads it), so a kernel row costs about one FMA per tap plus
(cols + taps - 1) loads instead of a load per tap. The other kernel axes are loops whose
re-reads hit L1. Input-dilated problems with kernels longer than 3 (input gradients of strided
5x5 layers) run as one stride-1 launch per output phase, so no tap meets an inserted zero
(``Config.phases``: EfficientNet-B0's 5x5 stride-2 layer at 56x56 55 against 146 us in one
launch; 3x3 ones lose, 46-115 against 46-99). The weight gradient uses the same
strips (each strip's dy columns kept in registers, each input column loaded once for all the
taps that read it) and reduces over them into a float32 workspace, summed afterwards in a
fixed order (deterministic). A second weight-gradient kernel (``Config.walk``) has each
thread walk one channel of an output row with all of its taps' accumulators in registers, its
loads unmasked away from the padding: the default for stride-1 kernels of 25 to 49 taps over
rows of at most 16 columns (``walk_wins``: ConvNeXt's 7x7 at 14x14, 38 against PyTorch's 47
us), an autotuning candidate elsewhere (slower on wider rows and short kernels, bound by its
2-byte loads and their latency at a quarter occupancy: docs/PERFORMANCE.md). Channel counts
that 16 does not divide still load vectors: the launchers tell the kernels the power of two that
divides them (``alignment_hint``), which Triton cannot learn itself (MobileNetV3's 72 channels
at 56x56: 28.5 against 50.0 us).

Status: correct on every problem it accepts (tests run the kernels in Triton's interpreter);
both kernels' tiles measured on the H200 (tools/depthwise_sweep.py): causal conv1d 55 us
forward and 64 us weight gradient (1.2x and 1.35x the HBM floor), dw3x3_56 45 us forward
(PyTorch 58), dw7x7_56 102 us forward and 136 us weight gradient (PyTorch 143 and 129),
X3D's 3x3x3 layers 7-16x PyTorch in all three passes.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import NamedTuple

import torch

from .triton_support import (
    BoundLaunch,
    alignment_hint,
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

NAME = "depthwise"
# Widest group handled on CUDA cores (C/groups or O/groups, the other being 1).
MAX_GROUP_WIDTH = 16
# Most kernel rows (taps of all axes but the last) a config may unroll: compile time grows with them.
_UNROLLED_ROWS_MAX = 9
# The walking weight gradient: most taps (its accumulators, in registers), its chunk of columns
# where a config gives none, and the fewest taps and widest output rows of its default (walk_wins).
WALK_MAX_TAPS = 49
WALK_COLS = 8
WALK_MIN_TAPS = 25
WALK_ROW_MAX = 16
# Registers per thread at which three CTAs of 4 warps fit an SM's 64K (168 x 128 x 3 = 64512).
THREE_CTAS_OF_4_WARPS = 168
# 2-D forwards: strips of 3 rows become 4 where the tiles of 3 hold fewer useful outputs than
# FOUR_ROWS_BELOW_SHARE; 2-D and 3-D: tiles of one image become flat strips below
# FLAT_BELOW_SHARE (_tile_share).
FOUR_ROWS_BELOW_SHARE = 0.95
FLAT_BELOW_SHARE = 0.9


@dataclass(frozen=True)
class Config:
    block_p: int  # forward: strips per program; weight gradient: strips per step of its loop
    block_o: int  # output channels per program
    num_warps: int
    programs_per_sm: int = 4  # weight gradient: how many strip chunks (and workspace slices)
    tile_w: int = 0  # forward: strips along the last axis per tile (0: fit the axis)
    unroll: int = 8  # taps along the last axis per chunk (one input window per chunk)
    cols: int = 0  # consecutive outputs along the last axis per strip (0: fit the axis)
    channels_fastest: bool = False  # forward: a tile's channel blocks are consecutive programs
    rows_unrolled: bool = False  # forward: the kernel rows (all axes but the last) unrolled
    vector: int = 8  # forward: consecutive channels per thread (at most a 16-byte vector)
    rows: int = 1  # forward: output rows per strip along the next-to-last axis (sharing input rows)
    max_registers: int = 0  # forward: a cap on registers per thread (Triton's maxnreg;
                            # 0: the compiler's choice)
    phases: bool = False  # input-dilated: one stride-1 launch per output phase (phases_reason)
    flat: bool = False  # forward: a program's strips are consecutive in one order over all images' strips
    walk: bool = False  # weight gradient: threads walk output rows, every tap in registers (walk kernel)


def supports(p):
    reason = kernel_reason(p)
    if reason:
        return False, reason
    cg, og = group_channels(p)
    if min(cg, og) > 1:
        return False, f"groups of {cg}x{og} channels: a GEMM per group (grouped, implicit_gemm)"
    if max(cg, og) > MAX_GROUP_WIDTH:
        return False, f"groups of {cg}x{og} channels are GEMMs for tensor cores (limit {MAX_GROUP_WIDTH})"
    return True, f"direct kernel on CUDA cores for {cg}x{og}-channel groups (depthwise, channel multipliers)"


def wgrad_wins(p) -> bool:
    """Whether the direct kernel is the GPU's choice for 2-D or 3-D weight gradient ``p`` over
    PyTorch's: every 3-D one, 2-D strided ones with kernels of at most 9 taps, and those of at
    least 25 taps over inputs 14 to 28 rows tall. Measured on the H200 (bf16): 2-D at batch 64,
    144-960 channels (2026-12-01, out/dw_wgrad_probe.py): 5x5 stride 2 at 14x14 17-34 us
    against PyTorch's 108-363 (EfficientNet-B0's 672 channels: 28.9 against 290), at 28x28
    30-75 against 29-107; at 7x7 0.8-1.3x PyTorch's time, at 56x56 79.1 against 60.8 (the
    depthwise suite); stride 1 0.59-1.15x (PyTorch's kept). 3x3 stride 2, MobileNetV2's four
    layers (the depthwise suite, 2026-12-04, two processes): 94.3-94.7, 43.9-44.8, 20.7 and
    16.1-16.2 us against 107.9-108.4, 45.5-46.0, 22.4-22.5 and 18.5 (docs/PERFORMANCE.md,
    thirty-fifth session). 3-D: X3D-M's 3x3x3 layers (the depthwise suite, 2026-12-02), 36-373
    us against PyTorch's 243-3387, 6.9-12.2x."""
    if p.pass_ != "wgrad" or p.ndim == 1:
        return False
    if p.ndim == 3 or walk_wins(p):
        return True
    stride, kernel, size = p.kernel_dilation, p.out_spatial, p.in_spatial  # the forward's
    taps = math.prod(kernel)
    return any(s > 1 for s in stride) and (taps <= 9 or taps >= 25 and all(14 <= s <= 28 for s in size))


def walk_wins(p) -> bool:
    """Whether 2-D or 3-D weight gradient ``p`` runs on the walking kernel by default (its first
    config, chunks of 16 columns): stride 1, no dilation, 25 to 49 taps and output rows of at
    most 16 columns (one chunk a row). Measured on the H200 (bf16, the depthwise suite,
    2026-12-03; docs/PERFORMANCE.md, thirty-fourth session), against the strip kernel and
    PyTorch: ConvNeXt-T's 7x7 at 14x14 38.0 against 45.4 and 46.5 us, at 7x7 25.4 against 30.8
    and 31.5; EfficientNet-B0's 5x5 at 14x14 39.9 against 43.5 and 51.9; X3D-M's 3x3x3 at 14x14
    34.8 against 48.5, at 7x7 27.1 against 32.6. It loses on 3x3 kernels (MobileNetV2's at 14x14
    and 7x7: 59.0 and 28.9 against 31.6 and 20.9), strided ones (EfficientNet-B0's 5x5 stride 2
    to 7x7: 36.4 against 24.4; X3D-M's to 28x28-7x7: 45.7-151.9 against 40.3-130.8) and on wider
    rows at 2-D (ConvNeXt-T's 7x7 at 28x28 and 56x56, the thirty-second session) and at 28x28 in
    3-D (113.7 against 92.3); X3D-M's 56x56 layer, where it wins (143.0 against 190.7), is left
    to autotuning."""
    if p.pass_ != "wgrad" or p.ndim == 1:
        return False
    undilated = all(d == 1 for d in (*p.kernel_dilation, *p.stride, *p.input_dilation))  # the forward's
    return (undilated and WALK_MIN_TAPS <= math.prod(p.out_spatial) <= WALK_MAX_TAPS
            and p.kernel[-1] <= WALK_ROW_MAX)


def _pow2_divisor(n: int, limit: int) -> int:
    """The largest power of two <= limit dividing n, or the next power of two above a small n
    without one (the lanes of a channel block: whole blocks where the channel count allows)."""
    best = n & -n
    if best >= 16 or best >= n:
        return min(best, limit)
    return pow2_at_least(n, hi=limit)


def _wgrad_cols(width: int) -> int:
    """The weight gradient's outputs per strip along an axis of ``width``: 4 to 8 (its dy
    columns stay in registers), the longest that pads the axis least."""
    if width <= 8:
        return width
    return min(range(4, 9), key=lambda cols: (cdiv(width, cols) * cols - width, -cols))


def _strip_cols(width: int, strips: int, target: int) -> int:
    """Outputs per strip along an axis of ``width``: of the lengths from ``target`` up to twice
    it (at most the width), the one whose tiles of at most ``strips`` strips pad the axis least
    (ties: the shortest). For a 56-wide axis: target 3 -> 4, 6 -> 7, 14 -> 14."""
    def padded(cols):
        per_tile = min(strips, pow2_at_least(cdiv(width, cols))) * cols
        return cdiv(width, per_tile) * per_tile
    lo = max(1, min(target, width))
    return min(range(lo, max(lo + 1, min(2 * target, width + 1))), key=lambda cols: (padded(cols), cols))


def _cols_target(p, unroll: int) -> int:
    """The strip length to aim at: about two kernel widths of outputs per stride where a kernel
    row is one unrolled chunk (the input window, cols*stride + K3 - 1 loads, then costs at most
    1.5 loads per output for stride 1); 4 (i.e. 4-7) where it takes several chunks."""
    K3, ST3 = pad3(p.kernel, 1)[2], pad3(p.stride, 1)[2]
    return cdiv(2 * K3, ST3) if K3 <= unroll else 4


def _default_cols(p, strips: int, unroll: int = 8) -> int:
    return _strip_cols(pad3(p.out_spatial, 1)[2], strips, _cols_target(p, unroll))


def default_config(p) -> Config:
    """Measured on the H200 (bf16; tools/depthwise_sweep.py, tools/tune.py, docs/PERFORMANCE.md).

    Forward kernel (and input gradient): 4 warps. 2-D and 3-D: each thread one strip times 4
    channels (an 8-byte vector; Triton gives a thread at most ``vector`` contiguous lanes),
    32-channel blocks of 16 strips, even where 32 lanes pad the channels (dw3x3_56's 144
    channels). 16-byte vectors (8 channels, 32 strips) were the default until the eleventh
    session: 4 cut the registers (dw3x3_56 168 -> 127 a thread) and ran dw3x3s2_112 66.8 ->
    57.0 us, dw3x3_56 56.3 -> 54.1, dw7x7_56 110.1 -> 108.6 (2 channels: more loads per FMA,
    slower everywhere). 1-D: 128-channel blocks of 4 strips of 8 channels (half the threads'
    worth; causal_dw1d_k4, 1536 channels: 55 us, against 56-59 us for 8 or 16 strips;
    memory-bound there, 1.2x the HBM floor). Strips of about 2*K3/stride outputs, fitted to
    the width (_strip_cols), the best of 4, 7 and 14 outputs on every 56-wide case measured:
    dw3x3_56 7; dw3x3s2_112 4 (7: 72 us, 14: 115); dw7x7_56 14 (7: 123, 4: 152); dw31x31_56,
    whose rows take several 8-tap chunks, 7 (1569 us, 4: 2597). 1-D: 8 (2*K3 for k4).
    Kernels of at most 3 taps per axis (2-D, 3-D) launch a tile's channel blocks as
    consecutive programs, so that whole channel rows of the input are read from HBM together
    (dw3x3_56 71 -> 61 us; dw7x7_56, bound by FMA issue, 110 -> 128, so not there), unroll
    their kernel rows (rows_unrolled: the loads of later rows are issued early; dw3x3_56 60.3
    -> 56.2 us, dw3x3s2_112 68.4 -> 65.7; dw7x7_56 108.6 -> 103.8, but 44 s to compile), and
    give each strip 3 output rows where the stride along that axis is 1, so that each input
    row is loaded once for 3 of them: dw3x3_56 54.1 -> **44.8 us** (2 rows 49.4, 4 rows
    45.2). On dw7x7_56 (rows a runtime loop) several rows were slower (114.8 us for 2 rows,
    180 for 3: the rows past the kernel multiply zero weights, and registers spill). Strided
    rows share input rows too once unrolled (dw3x3s2_112: 4 rows read 9 input rows, not 12):
    4 rows a strip there, 56.9 -> 55.6 us (3 rows 58.6, 2 rows 61.1, 8 rows spill: 136);
    only timed in 2-D, so 3-D strided problems keep 1. 2-D kernels of more than 3 taps an axis
    (rows a runtime loop) cap registers at 168 a thread (3 CTAs an SM instead of 2, a few
    spills; thirteenth session): dw7x7_56 109 -> 101.6 us forward, 108.7 -> 101.9 input
    gradient, dw7x7 at 28 and 14: 63.7 -> 62.2, 35.5 -> 34.0; 5x5 at 28 and 14: 58.8 -> 49.0,
    28.0 -> 24.5 (caps of 200, 184, 152, 136: no better; on 3x3 and 1-D kernels every cap was
    slower: dw3x3s2_112 55.9 -> 88 us at 168).

    Small maps (twenty-eighth session, the depthwise suite): a tile's strips are powers of two
    along both axes of one image, so 14x14 and 7x7 maps were covered by tiles of 24 rows (58% of
    the work useful) and 7x7 ones by [4, 32] tiles of 4 warps (3 of them duplicates). 2-D
    forwards whose tiles hold less than 90% useful outputs (_tile_share) now take flat strips:
    strips numbered over all images, 16 consecutive ones a program, with 2 rows a strip where
    rows are consecutive (5% faster than 3 there on all five layers) and 1 where strided (1-4 us
    faster than 4), each pair timed in one process: MobileNetV2's 3x3 at 7x7 16.9 -> 9.1 us
    (PyTorch 12.2), at 14x14 13.6 -> 11.6, EfficientNet-B0's 5x5 at 7x7 21.9 -> 17.5, stride 2
    at 28x28 13.9 -> 11.9, dw3x3s2_112 (16 strips of 4 padding 56 columns to 64) 56.5 -> 54.2
    and 57.0 -> 54.5 (two runs); the big maps' tiles stay (flat: dw7x7_56 103.4 against 101.8,
    MobileNetV2's 112x112 40.4 against 37.6). And 3 rows a strip become 4 where that pads the
    map less (dw3x3_56: 60 rows of 56 -> 56, 46.2 -> 44.2 us forward, 45.2 -> 44.1 input
    gradient, in two runs of one process; on 112 rows, padded 2% by 3, 4 rows measured slower,
    39.1 against 37.0).

    3-D (X3D-M's 3x3x3 layers in the depthwise suite, twenty-ninth session; each against the
    old default in one process): strips of 2 rows where rows are consecutive, not 3 (three
    kernel planes' rows unrolled for 3 rows took 255 registers and spilled: 56x56 108.7 against
    144.2 us), flat strips by the 2-D rule (28x28 51.3 against 76.8 us, 14x14 25.0 against
    48.8, strided to 28x28 89.4 against 98.3), and input gradients of strided ones by output
    phase, 3x3x3 too (359 against 535 us from 112x112, 37.3 against 69.6 at 14x14; in 2-D
    phases lose on 3x3 kernels, above): 7.6-15.6x PyTorch's cuDNN forward and input gradient
    (its 3-D depthwise kernels are slow: 0.13-2.9 ms).

    Weight gradient: channel blocks of up to 64 (the largest power of two dividing the
    channels) and 1024 / block strips per step, so that each thread holds one 16-byte vector of
    channels per strip; strips of 4-8 outputs (_wgrad_cols). causal_dw1d_k4: 64 us (16 strips
    of 64 channels; 32 of 32: 65, 128-channel blocks 76-141, 8 warps 76-84); dw7x7_56: 136 us
    (32 strips of 32 channels; 16 or 64 channels 171-213). Where walk_wins, the walking kernel
    (its first config) instead."""
    one_d = p.ndim == 1
    if p.pass_ == "wgrad":
        strips = _strip_wgrad_config(p)
        return _walk_configs(p, strips)[0] if walk_wins(p) else strips
    if one_d:
        block_o = _pow2_divisor(p.out_channels, 128)
        strips = max(1, min(128, 2 * 32 * 8 // block_o))
        return Config(strips, block_o, 4, cols=_default_cols(p, strips))
    block_o = min(32, pow2_at_least(p.out_channels))
    strips = max(1, min(128, 4 * 32 * 4 // block_o))
    short = max(p.kernel) <= 3
    capped = not short and p.ndim == 2
    config = Config(strips, block_o, 4, cols=_default_cols(p, strips), channels_fastest=short,
                    rows_unrolled=short, vector=4, rows=_short_kernel_rows(p) if short else 1,
                    max_registers=THREE_CTAS_OF_4_WARPS if capped else 0,
                    phases=(p.ndim == 3 or not short) and phases_reason(p) is None)
    consecutive = short and _consecutive_rows(p)
    undilated = all(d == 1 for d in p.input_dilation)
    share = _tile_share(p, config)
    if p.ndim == 2 and consecutive and undilated and share < FOUR_ROWS_BELOW_SHARE:
        four = replace(config, rows=4)
        if _tile_share(p, four) > share:
            config, share = four, _tile_share(p, four)
    if share < FLAT_BELOW_SHARE:
        config = replace(config, flat=True, rows=2 if consecutive else 1)
    return config


def configs(p) -> list[Config]:
    base = default_config(p)
    if p.pass_ == "wgrad":
        # the strip kernel's default and walking rows first (within autotuning's first configs),
        # then more strips in flight, other channel blocks, other strip lengths, more chunks,
        # then the other walks
        base = _strip_wgrad_config(p)
        walks = _walk_configs(p, base)
        variants = walks[:3]
        variants += [replace(base, block_p=max(1, int(base.block_p * scale_p)), num_warps=warps,
                             block_o=min(128, max(8, int(base.block_o * scale_o))))
                     for scale_p in (1, 2, 0.5) for scale_o in (1, 0.5, 2) for warps in (4, 8)]
        variants += [replace(base, cols=cols) for cols in (4, 6, 8)]
        variants += [replace(base, programs_per_sm=more) for more in (2, 8)]
        variants += walks[3:]
    else:  # strips of other lengths, two strips per thread, narrower or wider channel blocks
        two = 2 * base.block_p
        variants = [replace(base, cols=min(16, 2 * base.cols)), replace(base, cols=(base.cols + 1) // 2),
                    replace(base, block_p=two), replace(base, block_p=two, num_warps=8),
                    replace(base, block_p=two, cols=_default_cols(p, two)),
                    replace(base, block_o=max(8, base.block_o // 2), block_p=min(128, two)),
                    replace(base, block_o=min(128, 2 * base.block_o), block_p=max(1, base.block_p // 2)),
                    replace(base, unroll=4)]
        variants += [replace(c, channels_fastest=not base.channels_fastest) for c in (base, *variants)]
        if p.ndim > 1 and math.prod(p.kernel[:-1]) <= _UNROLLED_ROWS_MAX:
            variants += [replace(c, rows_unrolled=not base.rows_unrolled) for c in (base, *variants)]
        # more or fewer channels per thread (one strip per thread); strips of other row counts
        variants += [replace(base, vector=vector,
                             block_p=max(1, vector * 32 * base.num_warps // base.block_o))
                     for vector in (8, 4, 2) if vector != base.vector]
        if p.ndim > 1:  # strips of other row counts, in tiles of one image and flat
            variants += [replace(base, rows=rows) for rows in (1, 2, 3, 4) if rows != base.rows]
            variants += [replace(base, rows=rows, flat=not base.flat) for rows in (1, 2, 3, 4)]
        variants.append(replace(base, max_registers=0 if base.max_registers else THREE_CTAS_OF_4_WARPS))
    out = [default_config(p)]
    for c in (base, *variants):
        if c not in out:
            out.append(c)
    return out


def _strip_wgrad_config(p) -> Config:
    """The strip kernel's weight-gradient config (default_config's docstring)."""
    block_o = _pow2_divisor(p.out_channels, 64)
    return Config(max(1, 1024 // block_o), block_o, 4)


def _walk_configs(p, base: Config) -> list[Config]:
    """Walking weight-gradient configs (walk_wgrad_kernel), the ones measured fastest first
    (chunks of 16 columns, 32-channel blocks, 4 or 8 programs an SM); none past WALK_MAX_TAPS
    taps (its accumulators, one a tap, are registers)."""
    if p.pass_ != "wgrad" or math.prod(p.out_spatial) > WALK_MAX_TAPS:
        return []
    walk = replace(base, walk=True, block_o=32, vector=1, num_warps=4, cols=16, programs_per_sm=4)
    return [walk, replace(walk, cols=8, programs_per_sm=8), replace(walk, cols=8),
            replace(walk, programs_per_sm=8), replace(walk, cols=8, programs_per_sm=16),
            replace(walk, programs_per_sm=16), replace(walk, cols=4),
            replace(walk, cols=8, programs_per_sm=2),
            replace(walk, cols=8, block_o=16), replace(walk, cols=8, block_o=64, vector=2),
            replace(walk, cols=8, num_warps=8)]


def _consecutive_rows(p) -> bool:
    """Whether consecutive output rows along the next-to-last axis read consecutive input rows
    (stride and kernel dilation 1 there)."""
    axis = 1  # of the three padded spatial axes
    return pad3(p.stride, 1)[axis] == 1 and pad3(p.kernel_dilation, 1)[axis] == 1


def _short_kernel_rows(p) -> int:
    """Output rows per strip for kernels of at most 3 taps an axis (their rows unrolled): where
    consecutive output rows read consecutive input rows 3 in 2-D and 2 in 3-D (whose strips of
    3 spill: three kernel planes' rows unrolled), 4 for 2-D strided rows, else 1."""
    if _consecutive_rows(p):
        return 3 if p.ndim == 2 else 2
    return 4 if p.ndim == 2 else 1


def _strip_rows(p, config: Config) -> int:
    """Output rows per strip: ``config.rows`` where the kernel rows are unrolled (each row's taps
    resolved at compile time) or the rows read consecutive input rows, else 1."""
    SO2 = pad3(p.out_spatial, 1)[1]
    return max(1, min(config.rows, SO2)) if config.rows_unrolled or _consecutive_rows(p) else 1


def _tile_share(p, config: Config) -> float:
    """The share of useful outputs among those the forward's tiles of one image cover (masked
    strips past the map's last row or column still take their threads' time)."""
    SO2, SO3 = pad3(p.out_spatial, 1)[1:]
    tile_h, strips, cols, rows = _fwd_tile(p, replace(config, flat=False))
    return SO2 * SO3 / (cdiv(SO2, tile_h * rows) * tile_h * rows * cdiv(SO3, strips * cols) * strips * cols)


def _fwd_tile(p, config: Config):
    """(TILE_H, STRIPS, COLS, RH): strips along the next-to-last and the last axis per program,
    and each strip's outputs: RH rows of COLS. Flat strips: (1, strips per program, COLS, RH)."""
    SO2, SO3 = pad3(p.out_spatial, 1)[1:]
    rows = _strip_rows(p, config)
    cols = config.cols or _default_cols(p, config.block_p, config.unroll)
    if config.flat:
        return 1, config.block_p, cols, rows
    strips = min(config.block_p, config.tile_w or pow2_at_least(cdiv(SO3, cols)))
    return min(config.block_p // strips, pow2_at_least(cdiv(SO2, rows))), strips, cols, rows


def _geometry(stride, kdil, idil, lo):
    return (*pad3(stride, 1), *pad3(kdil, 1), *pad3(idil, 1), *pad3(lo, 0))


def run(p, x, w, out, config: Config | None = None):
    """x [N, *S, G, Cg], w [G, Og, *K, Cg], out [N, *S_out, G, Og] (views with any strides)."""
    config = config or default_config(p)
    if p.pass_ == "wgrad":
        return _run_wgrad(p, x, w, out, config)
    from .depthwise_kernels import direct_fwd_kernel

    if config.phases:
        _require_phases(p)
        for launch in _phase_launches(p, x, w, out):
            if launch is None:  # a phase no tap reaches
                continue
            grid, args, meta = launch
            direct_fwd_kernel[grid](*args, **meta)
        return
    grid, args, meta = _forward_launch(p, x, w, out, config)
    direct_fwd_kernel[grid](*args, **meta)


def _phase_launches(p, x, w, out):
    """(grid, args, meta) of the forward kernel per output phase of input-dilated ``p`` on
    these views (None for a phase no tap reaches, whose outputs are zeroed here): each phase's
    weight and output views passed as w and out with their element offsets."""
    launches = []
    for q, w_q, out_q in _phase_views(p, w, out):
        if q is None:
            out_q.zero_()
            launches.append(None)
            continue
        offsets = (w_q.storage_offset() - w.storage_offset(), out_q.storage_offset() - out.storage_offset())
        grid, args, meta = _forward_launch(q, x, w_q, out_q, default_config(q), offsets)
        launches.append((grid, (x, w, out, *args[3:]), meta))
    return launches


def _require_phases(p):
    reason = phases_reason(p)
    if reason:
        raise ValueError(f"depthwise: {reason}, not {p}")


def phases_reason(p) -> str | None:
    """None where an input-dilated problem splits into stride-1 phases (_phase_views)."""
    if p.pass_ == "wgrad" or all(d == 1 for d in p.input_dilation):
        return "phases: forwards and input gradients with input dilation only"
    if any(v != 1 for v in (*p.stride, *p.kernel_dilation)):
        return "phases: stride 1 without kernel dilation only"
    return None


class _AxisPhase(NamedTuple):
    outputs: slice  # the phase's outputs along the axis
    weights: slice  # the weights of its taps, in memory order
    taps: int
    lo: int  # the stride-1 convolution's padding
    hi: int


def _axis_phases(p, d) -> list[_AxisPhase]:
    """Axis d's output phases: the outputs j = r + D*q read the taps t = t0 + D*m only (t0 =
    (lo - r) mod D), input q + m + (r + t0 - lo) / D (D the input dilation)."""
    idil, lo, k, s, so = p.input_dilation[d], p.padding_lo[d], p.kernel[d], p.in_spatial[d], p.out_spatial[d]
    phases = []
    for r in range(min(idil, so)):
        t0 = (lo - r) % idil
        taps, count = len(range(t0, k, idil)), len(range(r, so, idil))
        lo_r = -((r + t0 - lo) // idil)
        first = k - 1 - t0 - idil * (taps - 1) if p.flip else t0  # flip reads the weights reversed
        phases.append(_AxisPhase(slice(r, None, idil), slice(first, first + idil * (taps - 1) + 1, idil),
                                 taps, lo_r, count - s - lo_r + taps - 1))
    return phases


def _phase_views(p, w, out):
    """(phase problem or None, weight view, output view) per output phase of input-dilated ``p``
    (stride 1): a stride-1 convolution with the phase's taps (a strided view of w) into a strided
    view of out; None where no tap reaches the phase (its outputs are zero)."""
    for phase in itertools.product(*(_axis_phases(p, d) for d in range(p.ndim))):
        out_view = out[(slice(None), *(a.outputs for a in phase))]
        if any(a.taps == 0 for a in phase):
            yield None, None, out_view
            continue
        q = replace(p, w_shape=(p.w_shape[0], *(a.taps for a in phase), p.w_shape[-1]),
                    padding_lo=tuple(a.lo for a in phase), padding_hi=tuple(a.hi for a in phase),
                    input_dilation=(1,) * p.ndim)
        yield q, w[(slice(None), slice(None), *(a.weights for a in phase))], out_view


def prepare(p, config: Config):
    """The call on the pass's natural contiguous operands with its launch (one per output phase
    with ``phases``) bound once (BoundLaunch: the operands' views share their data pointers; a
    phase's views are offsets from them; the weight gradient's workspace is made per call)."""
    views = meta_views(p)
    if views is None:
        return None
    if p.pass_ == "wgrad":
        return _prepared_wgrad(p, config, views)
    from .depthwise_kernels import direct_fwd_kernel

    if config.phases:
        _require_phases(p)
        launches = _phase_launches(p, *views)
        if None in launches:  # zeroed phases: the run path
            return None
        bound = [BoundLaunch(direct_fwd_kernel, *launch, operands=views) for launch in launches]

        def phases(a, b, out):
            for launch in bound:
                launch(a, b, out)
        return allocating(p, phases)
    return allocating(p, BoundLaunch(direct_fwd_kernel, *_forward_launch(p, *views, config), operands=views))


def _forward_launch(p, x, w, out, config: Config, offsets=(0, 0)):
    """(grid, args, meta) of the forward kernel on these operand views, the weight and the
    output starting ``offsets`` elements past them."""
    D = p.ndim
    O, Cg, Og = p.out_channels, p.c_per_group, p.o_per_group
    SO1, SO2, SO3 = pad3(p.out_spatial, 1)
    K1, K2, K3 = pad3(p.kernel, 1)
    ST1, ST2, ST3, KD1, KD2, KD3, ID1, ID2, ID3, LO1, LO2, LO3 = _geometry(
        p.stride, p.kernel_dilation, p.input_dilation, p.padding_lo)
    tile_h, strips, cols, rows = _fwd_tile(p, config)
    sx, sw, sy = x.stride(), w.stride(), out.stride()
    if config.flat:
        tiles = cdiv(p.batch * SO1 * cdiv(SO2, rows) * cdiv(SO3, cols), strips)
    else:
        tiles = p.batch * SO1 * cdiv(SO2, tile_h * rows) * cdiv(SO3, strips * cols)
    grid = (tiles, cdiv(O, config.block_o))
    if config.channels_fastest:
        grid = (grid[0] * grid[1],)
    args = (
        x, w, out, *offsets, p.batch, O,
        *pad3(p.in_spatial, 1), SO1, SO2, SO3, K1, K2,
        ST1, ST2, KD1, KD2, ID1, ID2, ID3, LO1, LO2, LO3,
        sx[0], *spatial_strides(x, 1, D), sx[-2], sx[-1],
        sw[0], sw[1], *spatial_strides(w, 2, D), sw[-1],
        sy[0], *spatial_strides(out, 1, D), sy[-2], sy[-1],
    )
    meta = dict(
        K3=K3, ST3=ST3, KD3=KD3, U=min(K3, config.unroll), CG=Cg, OG=Og, FLIP=p.flip,
        INT64=needs_int64(x, w, out), TILE_H=tile_h, STRIPS=strips, COLS=cols, BLOCK_O=config.block_o,
        CHANNELS_FASTEST=config.channels_fastest, ROWS_UNROLLED=config.rows_unrolled,
        K1C=K1 if config.rows_unrolled else 1, K2C=K2 if config.rows_unrolled else 1,
        ST2C=ST2 if config.rows_unrolled else 1, KD2C=KD2 if config.rows_unrolled else 1,
        VEC=config.vector, RH=rows, FLAT=config.flat, num_warps=config.num_warps,
        ALIGN=alignment_hint((O, offsets[1], sx[0], *spatial_strides(x, 1, D), sy[0],
                              *spatial_strides(out, 1, D)),
                             config.vector),
    )
    if config.max_registers:
        meta["maxnreg"] = config.max_registers
    return grid, args, meta


def _run_wgrad(p, x_t, dy_t, dw_t, config: Config):
    """The positions split into chunks, one per program along the grid's last axis; each
    program's partial weight gradient goes to a float32 workspace slice, summed afterwards."""
    x, dy, dw, _ = p.wgrad_natural(x_t, dy_t, dw_t)
    ws = torch.empty(_wgrad_workspace(p, config, x.device), device=x.device, dtype=torch.float32)
    grid, args, meta = _wgrad_launch(p, x, dy, ws, config)
    _wgrad_kernel(config)[grid](*args, **meta)
    sum_partials(ws, dw, transpose=True)


def _wgrad_kernel(config: Config):
    from .depthwise_kernels import direct_wgrad_kernel, walk_wgrad_kernel

    return walk_wgrad_kernel if config.walk else direct_wgrad_kernel


def _prepared_wgrad(p, config: Config, views):
    """The weight gradient as a prepared call: its launch and the sum bound once (the natural x
    and dy are the kernel's operands), the workspace made per call and summed into the natural
    result."""
    x, dy, _, _ = p.wgrad_natural(*views)
    shape = _wgrad_workspace(p, config, x.device)
    ws = torch.empty(shape, device="meta", dtype=torch.float32)
    launch = BoundLaunch(_wgrad_kernel(config), *_wgrad_launch(p, x, dy, ws, config), operands=(x, dy, ws))
    summing = bound_sum_partials(shape, p.result_shape, p.dtype, transpose=True)

    def call(x_nat, dy_nat):
        ws = torch.empty(shape, device=x_nat.device, dtype=torch.float32)
        launch(x_nat, dy_nat, ws)
        dw = torch.empty(p.result_shape, device=x_nat.device, dtype=p.dtype)
        summing(ws, dw)
        return dw
    return call


def _wgrad_chunks(p, config: Config, device):
    """(strips of outputs, strips per program, programs along the grid's last axis); with
    ``walk``, output rows (a program walks ``_walkers`` of them side by side) instead of strips."""
    Cg = group_channels(p)[0]
    K1, K2, _ = pad3(p.out_spatial, 1)  # the forward's kernel
    SO = pad3(p.kernel, 1)  # the forward's output
    if config.walk:
        strips, step = p.w_shape[-1] * SO[0] * SO[1], _walkers(config)
        other = cdiv(p.out_channels, config.block_o) * Cg
    else:
        cols = config.cols or _wgrad_cols(SO[2])
        strips, step = p.w_shape[-1] * SO[0] * SO[1] * cdiv(SO[2], cols), config.block_p
        other = cdiv(p.out_channels, config.block_o) * K1 * K2 * Cg
    chunks = max(1, min(cdiv(strips, step), config.programs_per_sm * sm_count(device) // other))
    per_program = cdiv(cdiv(strips, chunks), step) * step
    return strips, per_program, cdiv(strips, per_program)


def _walk_peeled(cols, S3, SO3, K3, ST3, KD3, ID3, LO3) -> bool:
    """Whether walk_wgrad_kernel can run its rows peeled (its middle chunks unmasked): every
    chunk of ``cols`` outputs but the first and the last reads its whole window inside x."""
    last = (SO3 - 1) // cols * cols
    if last <= cols:
        return True
    window = (cols - 1) * ST3 + (K3 - 1) * KD3 + 1
    return ID3 == 1 and cols * ST3 - LO3 >= 0 and (last - cols) * ST3 - LO3 + window <= S3


@lru_cache(maxsize=64)
def _zeros(numel: int, dtype: torch.dtype, device: str) -> torch.Tensor:
    """A read-only row of zeros, where a walking weight gradient points the rows and channels
    that hold no data (so that its loads need no masks): made once per size and device."""
    return torch.zeros(numel, dtype=dtype, device=device)


def _walkers(config: Config) -> int:
    """Output rows a walking weight-gradient program walks side by side: one thread per
    ``vector`` channels of each."""
    return max(1, 32 * config.num_warps * config.vector // config.block_o)


def _wgrad_workspace(p, config: Config, device) -> tuple:
    """[programs along the grid's last axis, taps, Cg, O]: one partial sum per program (each the
    natural result [O, taps, Cg] transposed)."""
    return (_wgrad_chunks(p, config, device)[2], math.prod(p.out_spatial), group_channels(p)[0],
            p.out_channels)


def _wgrad_launch(p, x, dy, ws, config: Config):
    """(grid, args, meta) of the weight-gradient kernel on the natural views of p.wgrad_natural."""
    if config.walk:
        return _walk_launch(p, x, dy, ws, config)
    D = p.ndim
    stride, kdil, idil, lo = p.kernel_dilation, p.stride, p.input_dilation, p.padding_lo  # the forward's
    out_spatial, kernel = p.kernel, p.out_spatial
    Cg, Og = group_channels(p)
    O = p.out_channels
    K1, K2, K3 = pad3(kernel, 1)
    ST1, ST2, ST3, KD1, KD2, KD3, ID1, ID2, ID3, LO1, LO2, LO3 = _geometry(stride, kdil, idil, lo)
    SO = pad3(out_spatial, 1)
    strips, per_program, chunks = _wgrad_chunks(p, config, x.device)
    sx, sd = x.stride(), dy.stride()
    args = (
        x, dy, ws, strips, per_program, O,
        *pad3(p.in_spatial, 1), *SO, K1, K2,
        ST1, ST2, KD1, KD2, ID1, ID2, ID3, LO1, LO2, LO3,
        sx[0], *spatial_strides(x, 1, D), sx[-2], sx[-1],
        sd[0], *spatial_strides(dy, 1, D), sd[-2], sd[-1],
    )
    meta = dict(K3=K3, ST3=ST3, KD3=KD3, U=min(K3, config.unroll), CG=Cg, OG=Og, INT64=needs_int64(x, dy),
                COLS=config.cols or _wgrad_cols(SO[2]), BLOCK_S=config.block_p, BLOCK_O=config.block_o,
                ALIGN=alignment_hint((O, sx[0], *spatial_strides(x, 1, D), sd[0], *spatial_strides(dy, 1, D)),
                                     16 // x.element_size()),
                num_warps=config.num_warps)
    return (K1 * K2 * Cg, cdiv(O, config.block_o), chunks), args, meta


def _walk_launch(p, x, dy, ws, config: Config):
    """(grid, args, meta) of walk_wgrad_kernel on the natural views of p.wgrad_natural."""
    D = p.ndim
    stride, kdil, idil, lo = p.kernel_dilation, p.stride, p.input_dilation, p.padding_lo  # the forward's
    Cg, Og = group_channels(p)
    O = p.out_channels
    (S1, S2, S3), (SO1, SO2, SO3) = pad3(p.in_spatial, 1), pad3(p.kernel, 1)
    K1, K2, K3 = pad3(p.out_spatial, 1)  # the forward's kernel
    ST1, ST2, ST3, KD1, KD2, KD3, ID1, ID2, ID3, LO1, LO2, LO3 = _geometry(stride, kdil, idil, lo)
    rows, per_program, chunks = _wgrad_chunks(p, config, x.device)
    (sx1, sx2, sx3), (sd1, sd2, sd3) = spatial_strides(x, 1, D), spatial_strides(dy, 1, D)
    sx, sd = x.stride(), dy.stride()
    cols = config.cols or WALK_COLS
    peeled = _walk_peeled(cols, S3, SO3, K3, ST3, KD3, ID3, LO3)
    device = p.device if x.device.type == "meta" else str(x.device)  # meta: a prepared launch
    zeros = _zeros(max(S3 * sx3, SO3 * sd3), p.dtype, device)
    args = (x, dy, ws, zeros, rows, per_program, O, S1, S2, SO1, SO2,
            ST1, ST2, KD1, KD2, ID1, ID2, LO1, LO2,
            sx[0], sx1, sx2, sx[-2], sx[-1], sd[0], sd1, sd2, sd[-2], sd[-1])
    meta = dict(S3=S3, SO3=SO3, K1=K1, K2=K2, K3=K3, ST3=ST3, KD3=KD3, ID3=ID3, LO3=LO3, SX3=sx3, SD3=sd3,
                CG=Cg, OG=Og, INT64=needs_int64(x, dy), CW=cols, WALKERS=_walkers(config),
                BLOCK_O=config.block_o, VEC=config.vector, PEELED=peeled,
                ALIGN=alignment_hint((O, sx[0], sx1, sx2, sd[0], sd1, sd2), config.vector),
                num_warps=config.num_warps)
    return (Cg, cdiv(O, config.block_o), chunks), args, meta
