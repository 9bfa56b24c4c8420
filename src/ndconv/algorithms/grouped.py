"""Grouped convolutions with small groups (ResNeXt's 4, RegNet's 8-24 channels per group).

A group of 4x4 channels is a GEMM far narrower than a tensor-core tile: run alone, it wastes
almost the whole tile. Two kernels and a packing, picked by the config:

- ``direct`` (grouped_kernels.py): a program owns a tile of output positions and a block of
  whole groups (16 channels for 4-wide groups), contiguous in channels-last memory. Per tap it
  loads the block's input tile once (one coalesced row per position; the re-reads across taps
  come from L1) and mixes the groups with one small tensor-core product against the block's
  block-diagonal weight, built in registers. The weight gradient reduces over output
  positions, all taps of a block at once (dy loaded once per position block), into a float32
  workspace summed afterwards in a fixed order.
- ``rows`` (grouped_kernels.py; stride-1 2-D convolutions of at most 49 taps, all three
  passes): a program walks a strip of output rows, loading each input row once per column tap
  and multiplying it into the accumulators of every output row that reads it, so an input
  element is loaded and staged for the tensor cores K2 times instead of K1 * K2 (or, with
  lanes of several consecutive output columns, (K2 + cols - 1) / cols times). Its weight
  gradient multiplies each input row (all column taps in one tile) with the K1 dy rows that
  read it in one product. Rows narrower than a tensor-core tile put several images' rows side
  by side in it.
- ``packed``: ``pack`` consecutive groups become one group whose weight is block-diagonal (the
  zeros between groups make it the same convolution), run by implicit_gemm (or, with
  ``packed_by="native"``, by PyTorch's convolution: cuDNN's kernels for a few wide groups
  instead of its grouped ones for many narrow groups); its weight gradient is computed densely
  and its diagonal blocks kept. It keeps implicit_gemm's output
  phases (the direct kernel would only mask a dilated input's zeros). Measured on the H200,
  packing through PyTorch's convolution is the GPU default wherever the groups pack (1.22x,
  1.37x and 1.67x PyTorch's grouped convolution on ResNeXt's 4x4 groups, forward and both
  gradients, against 1.04x, 1.13x and 1.41x packed for implicit_gemm and 0.67-0.85x for the
  direct kernel). Elsewhere (the interpreter) the Triton kernels are the default: packed for
  implicit_gemm for forward passes and input gradients, direct for weight gradients and groups
  that do not pack.

Both multiply ``pack`` (``block_g``) times more (zero) products than the groups need; the
tensor cores have that to spare, these layers being bound by memory.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache

import torch

from ..problem import BOUND_LAUNCH_HOST_S
from . import implicit_gemm, native
from .triton_support import (
    INTERPRET,
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

NAME = "grouped"
# Groups at least this wide (C/groups or O/groups) fill tensor-core tiles alone (implicit_gemm).
TARGET_WIDTH = 32
# The direct kernel's channel blocks are at least this wide (the smallest tensor-core product).
MIN_BLOCK = 16
# The rows kernel unrolls its taps: a weight tile per tap and an accumulator per kernel row live
# in registers, and its compile time grows with them. On the H200 machine a 31x31 depthwise
# kernel compiled for minutes; 7x7 (dw7x7_56) compiled in seconds, was right and ran 2.4-4.4x
# faster than the direct kernel (160 / 160 / 129 us against 441 / 378 / 572).
ROWS_MAX_TAPS = 49


@dataclass(frozen=True)
class Config:
    kernel: str = "direct"  # "direct" or "rows" (grouped_kernels.py), or "packed" (implicit_gemm)
    pack: int = 0  # packed: consecutive groups merged into one block-diagonal group
    tile: implicit_gemm.Config | str | None = None  # packed: the packed problem's config (None: its default)
    packed_by: str = "implicit_gemm"  # packed: the algorithm that runs the packed problem, or "native"
    block_g: int = 0  # direct: whole groups per program (0: the fewest that fill MIN_BLOCK)
    block_p: int = 128  # direct: output positions per program (weight gradient: per step)
    tile_w: int = 0  # direct forward: positions along the last axis per 2-D tile (0: flat rows);
    # rows: output columns per program (0: the output row's width, 16 to 64)
    strip: int = 0  # rows: output rows per program (0: as many as leave the GPU full)
    images: int = 0  # rows: images per program, their tile_w-column rows side by side (0: 1)
    cols: int = 1  # rows forward: consecutive output columns per lane (their input tiles shared)
    num_warps: int = 4
    num_stages: int = 1  # direct: 1 keeps the tap loads plain (L1-cached), no cp.async pipeline
    programs_per_sm: int = 8  # direct weight gradient: row chunks sized to fill the GPU this much
    tap_lanes: int = 128  # direct: (tap, channel) lanes per tensor-core product (taps per chunk)
    fma: bool = False  # direct forward: CUDA cores instead (power-of-two groups, whole blocks)


def _pack_factors(p) -> list[int]:
    """Divisors d > 1 of the group count that leave packed groups at most 4x TARGET_WIDTH wide."""
    cg, og = group_channels(p)
    width = max(cg, og)
    return [d for d in range(2, p.groups + 1) if p.groups % d == 0 and d * width <= 4 * TARGET_WIDTH]


def _native_packs(p) -> list[int]:
    """The pack factors worth running through PyTorch's convolution: the least that make groups
    16, 32 and 64 channels wide (cuDNN's dense-like kernels), at most three."""
    factors, width = _pack_factors(p), max(group_channels(p))
    packs = [next((d for d in factors if d * width >= wide), None) for wide in (16, 32, 64)]
    return list(dict.fromkeys(d for d in packs if d))


def _default_pack(p) -> int:
    factors = _pack_factors(p)
    cg, og = group_channels(p)
    return next((d for d in factors if d * max(cg, og) >= TARGET_WIDTH), factors[-1])


def _default_block_g(p) -> int:
    """The fewest whole groups whose input and output channels both fill MIN_BLOCK (a power of
    two: the block widths are, so no lane is wasted on a partial group)."""
    cg, og = group_channels(p)
    return pow2_at_least(-(-MIN_BLOCK // min(cg, og)))


def supports(p):
    reason = kernel_reason(p)
    if reason:
        return False, reason
    cg, og = group_channels(p)
    if p.groups == 1:
        return False, "not a grouped convolution"
    if max(cg, og) >= TARGET_WIDTH:
        return False, f"groups of {cg}x{og} channels already fill tensor-core tiles (implicit_gemm)"
    config = default_config(p)
    if config.packed_by == "native" and config.kernel == "packed":
        return True, (f"{config.pack} groups of {cg}x{og} channels packed block-diagonally into one, "
                      "run by PyTorch's convolution (cuDNN's kernels for wider groups)")
    if config.kernel == "packed":
        return True, (f"{config.pack} groups of {cg}x{og} channels packed block-diagonally "
                      "per tensor-core tile")
    if config.kernel == "rows":
        return True, (f"rows kernel: strips of output rows, each input row loaded once per column tap "
                      f"for every kernel row, {cg}x{og}-channel groups in block-diagonal tensor-core products"
                      + (", one per input row for all taps" if p.pass_ == "wgrad" else ""))
    bg = config.block_g or _default_block_g(p)
    return True, (f"direct kernel: {bg} groups of {cg}x{og} channels per block-diagonal tensor-core "
                  "product, input tiles reused across taps from L1")


def packed_problem(p, pack: int):
    """The same convolution with ``pack`` consecutive groups merged into one."""
    if p.pass_ == "wgrad":  # its x is [C/g, *S, g*N]: the forward's channels per group grow
        Cg, *S, GN = p.x_shape
        return replace(p, x_shape=(Cg * pack, *S, GN // pack), groups=p.groups // pack)
    return replace(p, w_shape=(p.w_shape[0], *p.kernel, p.c_per_group * pack), groups=p.groups // pack)


def default_config(p) -> Config:
    """Measured on the H200 (bf16, tools/grouped_sweep.py): on a GPU, the rows kernel where it
    wins (rows_win), else wherever the groups pack the packed problem through PyTorch's
    convolution (_native_default), but for other forwards the host would wait on (host_bound),
    whose direct kernel is issued fastest; elsewhere (the interpreter) the packed GEMM
    for the forward pass and input gradient wherever the groups pack, the direct kernel for
    weight gradients and groups that do not pack.

    grouped3x3_g32 (ResNeXt-50's 32 groups of 4x4, x [64, 56, 56, 128]): forward packed
    (pack 8) 119.5 us against 144.2 for the direct kernel's default (its best of 15 shapes);
    input gradient 122.3 against 138.4; weight gradient direct 162.6 us (best 161.7) against
    252.2 packed. resnext_g32x8_56 (32 groups of 8x8): packed 111.7 / 114.7 us against direct
    146.2 / 150.0, weight gradient direct 163.0 against 251.6. regnetx_g24_28 (7 groups of 24:
    no pack factor): the direct kernel in 16x8 tiles (tile_w 8, 128 positions) 229.7 / 240.1 us
    against 539.1 / 485.7 in flat rows of 128 (PyTorch 155.7 / 244.4); its weight gradient
    402.4 us at the default, the one shape measured in time."""
    direct = Config(block_g=_default_block_g(p), block_p=128, tile_w=8 if p.ndim > 1 else 0)
    if p.device == "cuda" and rows_win(p):
        return rows_config(p)
    if host_bound(p):
        return direct
    if p.device == "cuda" and _pack_factors(p):
        return _native_default(p)
    if p.pass_ == "wgrad":
        return Config(block_g=_default_block_g(p), block_p=64)
    return Config("packed", _default_pack(p)) if _pack_factors(p) else direct


def host_bound(p) -> bool:
    """A forward whose host time is what a call costs (_tiny). The direct and rows kernels' one
    bound launch is issued fastest: 21-23 us a call against 28-32 for PyTorch's grouped
    convolution through ndconv (H200 machine, tiny bf16)."""
    return p.pass_ == "fwd" and _tiny(p)


def _tiny(p) -> bool:
    """A pass on a GPU so small that even at 8x its roofline floor (the direct kernel's worst
    measured) the GPU is done before the next call is issued."""
    return p.device == "cuda" and p.done_within(BOUND_LAUNCH_HOST_S, 8)


def _native_default(p) -> Config:
    """The packed problem through PyTorch's convolution: groups made 16 channels wide for the
    forward, 32 for the gradients, the input gradient through convolution_backward. On
    grouped3x3_g32 (H200, bf16, 2026-11-30): forward pack 4 78.5 us (pack 8 86.2, 16 81.5;
    PyTorch's grouped convolution 96.1), input gradient pack 8 through convolution_backward
    79.6 (as a forward convolution 93.9; PyTorch 108.9), weight gradient pack 8 83.1 (pack 4
    96.4; PyTorch 138.4)."""
    packs = _native_packs(p) or _pack_factors(p)[-1:]  # narrower than 16 at most: all it packs
    pack = packs[0] if p.pass_ == "fwd" else packs[min(1, len(packs) - 1)]
    tile = None
    if p.pass_ == "dgrad" and native.BACKWARD + "conv" in native.configs(packed_problem(p, pack)):
        tile = native.BACKWARD + "conv"
    return Config("packed", pack, tile, packed_by="native")


def configs(p) -> list[Config]:
    """The direct kernel's block, tile and pipeline shapes, then the packed GEMM's."""
    base = default_config(p)
    out = [base]
    bg = _default_block_g(p)
    if p.pass_ == "wgrad":
        shapes = [(bg, bp, 4, stages, pps) for bp in (64, 128, 32) for stages in (1, 2)
                  for pps in (8, 4, 16)] + [(2 * bg, 64, 4, 1, 8), (bg, 64, 8, 1, 8), (bg, 128, 8, 1, 8)]
        out += [Config(block_g=b, block_p=bp, num_warps=w, num_stages=s, programs_per_sm=pps)
                for b, bp, w, s, pps in shapes]
    else:
        tile_ws = (0,) if p.ndim == 1 else (0, 8, 16, 32)
        out += [Config(block_g=b, block_p=bp, tile_w=tw, num_warps=w, num_stages=s)
                for b in (bg, 2 * bg) for bp in (128, 64, 256) for tw in tile_ws
                for w, s in ((4, 1), (8, 1), (4, 2))]
        out += [c for c in (Config(fma=True), Config(fma=True, block_p=256),
                            Config(fma=True, block_p=512, num_warps=8)) if _fma_possible(p, c)]
    if rows_reason(p) is None:  # the rows kernel: default strips, whole height, short strips, 2 stages
        height = _rows_shape(p)[2][0]
        out[1:1] = [rows_config(p), rows_config(p, height), rows_config(p, 8),
                    replace(rows_config(p), num_stages=2), replace(rows_config(p), images=1)]
    # the packed problem through PyTorch's convolution, early (autotuning times the first configs)
    out[1:1] = [Config("packed", pack, packed_by="native") for pack in _native_packs(p)]
    if _pack_factors(p):
        for pack in [_default_pack(p)] + _pack_factors(p):
            for tile in [None, *implicit_gemm.configs(packed_problem(p, pack))[:6]]:
                out.append(Config("packed", pack, tile))
    unique = []
    for c in out:
        if c not in unique:
            unique.append(c)
    return unique


def block_diagonal(w: torch.Tensor, pack: int) -> torch.Tensor:
    """Grouped weight [G, Og, *K, Cg] as [G/pack, pack*Og, *K, pack*Cg], block-diagonal."""
    G, Og, *K, Cg = w.shape
    w6 = w.reshape(G // pack, pack, Og, math.prod(K), 1, Cg)
    return (w6 * _identity(pack, w.dtype, w.device)).reshape(G // pack, pack * Og, *K, pack * Cg)


@lru_cache(maxsize=64)
def _identity(pack: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The [pack, pack] identity shaped to mask block_diagonal's products: made once, not per
    call (a tensor made per call costs host time and a launch)."""
    return torch.eye(pack, dtype=dtype, device=device).view(1, pack, 1, 1, pack, 1)


def _merge_groups(t: torch.Tensor, pack: int) -> torch.Tensor:
    """[..., G, n] as [..., G/pack, pack*n] (a view: the groups are adjacent in memory)."""
    G, n = t.shape[-2:]
    return t.view(*t.shape[:-2], G // pack, pack * n)


def run(p, x, w, out, config: Config | None = None):
    """x [N, *S, G, Cg], w [G, Og, *K, Cg], out [N, *S_out, G, Og] (views with any strides)."""
    config = config or default_config(p)
    if config.kernel == "rows":
        if p.pass_ == "wgrad":
            return _run_rows_wgrad(p, x, w, out, config)
        return _launch_now(_rows_launch, p, x, w, out, config)
    if config.kernel == "direct":
        if p.pass_ == "wgrad":
            return _run_direct_wgrad(p, x, w, out, config)
        return _launch_now(_direct_launch, p, x, w, out, config)
    pack = config.pack
    q = packed_problem(p, pack)
    algorithm = native if config.packed_by == "native" else implicit_gemm
    tile = config.tile or algorithm.default_config(q)
    if p.pass_ == "wgrad":
        return _run_wgrad(p, q, x, w, out, pack, algorithm, tile)
    algorithm.run(q, _merge_groups(x, pack), block_diagonal(w, pack), _merge_groups(out, pack), tile)


def _run_wgrad(p, q, x_t, dy_t, dw_t, pack, algorithm, tile):
    x, dy, dw, _ = p.wgrad_natural(x_t, dy_t, dw_t)  # [N,*S,G,Cg], [N,*So,G,Og], [G,Og,*K,Cg]
    G, Og, *K, Cg = dw.shape
    dense = torch.empty((G // pack * pack * Og, *K, pack * Cg), device=dw.device, dtype=dw.dtype)
    algorithm.run(q, *q.views(x.flatten(-2), dy.flatten(-2), dense), tile)
    dw.copy_(_diagonal_blocks(dense, p.groups, pack).view(dw.shape))


def _diagonal_blocks(dense: torch.Tensor, groups: int, pack: int) -> torch.Tensor:
    """The packed weight gradient [G/pack * pack*Og, *K, pack*Cg]'s diagonal blocks: the
    grouped one, [G*Og, *K, Cg] (a new tensor)."""
    O, *K, width = dense.shape
    Og, Cg = O // groups, width // pack
    blocks = dense.view(groups // pack, pack, Og, math.prod(K), pack, Cg)
    diagonal = torch.diagonal(blocks, dim1=1, dim2=4)  # [G/pack, Og, prod(K), Cg, pack]
    return diagonal.permute(0, 4, 1, 2, 3).reshape(O, *K, Cg)


def prepare(p, config: Config | None):
    """The direct or rows kernel's call with its one launch bound once (BoundLaunch; not the
    direct weight gradient's), and the packed problem's prepared call through PyTorch's convolution
    (``packed_by="native"``), which returns PyTorch's result itself (run copies it into a
    separate output: one more pass over the 51 MB output of grouped3x3_g32); None (run) for the
    other configs."""
    config = config or default_config(p)
    if config.kernel == "rows" and p.pass_ == "wgrad":
        return _prepared_rows_wgrad(p, config)
    if config.kernel in ("direct", "rows"):
        views = meta_views(p) if p.pass_ != "wgrad" else None
        if views is None:
            return None
        launch = _rows_launch if config.kernel == "rows" else _direct_launch
        return allocating(p, BoundLaunch(*launch(p, *views, config), operands=views))
    if config.packed_by != "native":
        return None
    pack, G = config.pack, p.groups
    call = native.prepare(packed_problem(p, pack), config.tile)
    if p.pass_ == "wgrad":
        return lambda x, dy: _diagonal_blocks(call(x, dy), G, pack)

    def packed(a, b):  # b: the forward's weight [O, *K, Cg], block-diagonal per pack groups
        return call(a, block_diagonal(b.unflatten(0, (G, -1)), pack).flatten(0, 1))
    return packed


# ---------------------------------------------------------------------- direct kernel


def _blocks(p, config: Config):
    """(groups per block, input lanes, output lanes, every lane real)."""
    cg, og = group_channels(p)
    bg = config.block_g or _default_block_g(p)
    bci, bco = max(MIN_BLOCK, pow2_at_least(bg * cg)), max(MIN_BLOCK, pow2_at_least(bg * og))
    return bg, bci, bco, p.groups % bg == 0 and bci == bg * cg and bco == bg * og


def _geometry(stride, kdil, idil, lo):
    return (*pad3(stride, 1), *pad3(kdil, 1), *pad3(idil, 1), *pad3(lo, 0))


def _check_adjacent_groups(t: torch.Tensor) -> None:
    """The kernels address a [..., G, n] view's channels flat: its groups must be adjacent."""
    assert t.shape[-2] == 1 or t.stride(-2) == t.shape[-1] * t.stride(-1), (t.shape, t.stride())


def _precision(p) -> str:
    return "tf32" if p.allow_tf32 else "ieee"


def _fma_possible(p, config: Config) -> bool:
    even = _blocks(p, config)[3]
    cg, og = group_channels(p)
    return even and cg == pow2_at_least(cg) and og == pow2_at_least(og)


def _launch_now(launch, p, x, w, out, config: Config) -> None:
    """Runs the one launch that ``launch`` (_direct_launch, _rows_launch, _rows_wgrad_launch)
    describes."""
    kernel, grid, args, meta = launch(p, x, w, out, config)
    kernel[grid](*args, **meta)


def _direct_launch(p, x, w, out, config: Config):
    """(kernel, grid, args, meta) of the direct forward kernel on these operand views."""
    from .grouped_kernels import grouped_fwd_fma_kernel, grouped_fwd_kernel

    _check_adjacent_groups(x)
    _check_adjacent_groups(out)
    D, G = p.ndim, p.groups
    bg, bci, bco, even = _blocks(p, config)
    SO1, SO2, SO3 = pad3(p.out_spatial, 1)
    rows = p.batch * SO1 * SO2 * SO3
    taps = math.prod(p.kernel)
    _, K2, K3 = pad3(p.kernel, 1)
    sx, sw, sy = x.stride(), w.stride(), out.stride()
    geometry = (*pad3(p.in_spatial, 1), SO1, SO2, SO3, K2, K3,
                *_geometry(p.stride, p.kernel_dilation, p.input_dilation, p.padding_lo),
                sx[0], *spatial_strides(x, 1, D), sx[-1],
                sw[0], sw[1], *spatial_strides(w, 2, D), sw[-1],
                sy[0], *spatial_strides(out, 1, D), sy[-1])
    if config.fma and _fma_possible(p, config):
        meta = dict(CG=p.c_per_group, OG=p.o_per_group, BG=bg, FLIP=p.flip, INT64=needs_int64(x, w, out),
                    BLOCK_P=config.block_p, num_warps=config.num_warps, num_stages=config.num_stages)
        return (grouped_fwd_fma_kernel, (cdiv(rows, config.block_p) * (G // bg),),
                (x, w, out, G, rows, taps, *geometry), meta)
    tile_w = min(config.tile_w, pow2_at_least(SO3))
    tile_h = min(config.block_p // tile_w, pow2_at_least(SO2)) if tile_w else 0
    if tile_h * tile_w < MIN_BLOCK:  # flat rows (also for 1-D problems and narrow tiles)
        tile_h, tile_w = 0, config.block_p
        tiles = cdiv(rows, tile_w)
    else:
        tiles = p.batch * SO1 * cdiv(SO2, tile_h) * cdiv(SO3, tile_w)
    ta, chunks, tb = _tap_split(taps, bci, config.tap_lanes)
    meta = dict(CG=p.c_per_group, OG=p.o_per_group, BG=bg, BCI=bci, BCO=bco, TA=ta, TB=tb, EVEN=even,
                FLIP=p.flip, INT64=needs_int64(x, w, out), TILE_H=tile_h, TILE_W=tile_w,
                PRECISION=_precision(p), UPCAST=INTERPRET,
                num_warps=config.num_warps, num_stages=config.num_stages)
    return grouped_fwd_kernel, (tiles * cdiv(G, bg),), (x, w, out, G, rows, taps, chunks, *geometry), meta


def _tap_split(taps: int, bci: int, lanes: int) -> tuple[int, int, int]:
    """(TA, chunks, TB): the taps go in chunks of TA, then TB more (powers of two, TB < TA or 0),
    so that a 3x3 kernel is 8 + 1 taps and nothing is padded; a chunk's gathered input tile has
    at most ``lanes`` (tap, channel) columns."""
    most = max(1, lanes // bci)
    ta = min(1 << (taps.bit_length() - 1), 1 << (most.bit_length() - 1))
    rest = taps % ta
    return ta, taps // ta, pow2_at_least(rest) if rest else 0


def _run_direct_wgrad(p, x_t, dy_t, dw_t, config: Config):
    """Rows (output positions) split into chunks, one per program with a channel block and a
    tap chunk; each program's diagonal blocks go to a float32 workspace slice, summed
    afterwards."""
    from .grouped_kernels import grouped_wgrad_kernel

    D, G = p.ndim, p.groups
    x, dy, dw, (stride, kdil, idil, lo, out_spatial, kernel) = p.wgrad_natural(x_t, dy_t, dw_t)
    _check_adjacent_groups(x)
    _check_adjacent_groups(dy)
    cg, og = group_channels(p)
    bg, bci, bco, even = _blocks(p, config)
    taps = math.prod(kernel)
    ta, tap_chunks, tb = _tap_split(taps, bci, config.tap_lanes)
    _, K2, K3 = pad3(kernel, 1)
    rows = x.shape[0] * math.prod(out_spatial)
    other = cdiv(G, bg) * tap_chunks
    chunks = max(1, min(cdiv(rows, config.block_p), config.programs_per_sm * sm_count(x.device) // other))
    rows_per_program = cdiv(cdiv(rows, chunks), config.block_p) * config.block_p
    chunks = cdiv(rows, rows_per_program)
    ws = torch.empty((chunks, G, og, taps, cg), device=x.device, dtype=torch.float32)
    sx, sd = x.stride(), dy.stride()
    grouped_wgrad_kernel[(chunks * cdiv(G, bg), tap_chunks)](
        x, dy, ws, G, rows, rows_per_program, taps,
        *pad3(p.in_spatial, 1), *pad3(out_spatial, 1), K2, K3,
        *_geometry(stride, kdil, idil, lo),
        sx[0], *spatial_strides(x, 1, D), sx[-1],
        sd[0], *spatial_strides(dy, 1, D), sd[-1],
        CG=cg, OG=og, BG=bg, BCI=bci, BCO=bco, TA=ta, TB=tb, EVEN=even,
        INT64=needs_int64(x, dy), BLOCK_P=config.block_p,
        PRECISION=_precision(p), UPCAST=INTERPRET,
        num_warps=config.num_warps, num_stages=config.num_stages,
    )
    sum_partials(ws, dw)


# ---------------------------------------------------------------------- rows kernel


def rows_reason(p) -> str | None:
    """None where the rows kernel runs ``p``, else why not: it walks output rows at stride 1
    without dilation, in 2-D (a weight-gradient problem's stride and kernel dilation are the
    forward's kernel dilation and stride: the test is the same), with small kernels."""
    if p.ndim != 2:
        return "rows kernel: 2-D problems only"
    if any(v != 1 for v in (*p.stride, *p.kernel_dilation, *p.input_dilation)):
        return "rows kernel: stride 1 without dilation only"
    if math.prod(_rows_shape(p)[3]) > ROWS_MAX_TAPS:
        return f"rows kernel: kernels of at most {ROWS_MAX_TAPS} taps (it unrolls them)"
    return None


def rows_win(p) -> bool:
    """Where the rows kernel is the GPU default: stride-1 2-D problems with at least a block of
    16 lanes of groups. Measured on the H200 (bf16, GPU time; out/rows_cases.py,
    out/rows_images.py, tools/grouped_planner.py, docs/PERFORMANCE.md's twenty-fourth to
    twenty-sixth sessions):

    - forwards and input gradients at every row width measured, 7 to 112, with groups 4 to 24
      wide: ResNeXt's 4x4 groups at 56x56 60.8 / 60.7 us against 80.8 / 74.8 packed through
      PyTorch; 8x8 at 28x28 33.2 / 33.2 against 48.0 / 45.8 and PyTorch's 53.7 / 60.8; RegNet's
      16-wide groups at 7x7 16.2 / 16.2 against the direct kernel's 20.4 and PyTorch's 16.6 /
      25.3, 24-wide at 7x7 30.7 / 30.3 against PyTorch's 115 / 124; the direct kernel's tiny
      forwards lose too (RegNet's 16-wide groups at 14x14 11.8 against 17.1 us). It loses by
      17-47% where 24-wide groups pack into 72 or 120 channels (RegNetX-1.6GF at 56x56 145 against
      124, RegNetY-1.6GF at 28x28 60.8 against 41.3), and wins where they pack into 48 (30.0
      against 155). Input gradients of narrow rows (under 14) small enough to be host-bound
      (_tiny) stay with their weight gradient in PyTorch's one convolution_backward.
    - weight gradients of groups whose lanes are not padded (lanes_padded: 24-wide groups in 32
      lanes took 407-1331 us, against 40-147 for implicit_gemm) over output rows at least 14
      wide for groups up to 8 wide (4x4 at 56x56 71.2 us against 93.6 packed and PyTorch's 139;
      8-wide groups from 2% behind PyTorch's grouped convolution, 46.4 against 46.2 at 28x28, to
      19% ahead, 24.4 against 28.9 at 14x14, but 71.9 against 59.8 for RegNetY-400MF's 13 groups
      at 28x28) and at least 56 wide for 16-wide ones (51.8 against PyTorch's 105.8 and 61.1
      against 51.5 at 56x56; at 28x28 and below PyTorch's grouped convolution, 13.9-51.9 against
      40.2-60.1, but for one layer of 10 groups at 14x14, 116 us against the rows kernel's 36.6
      and implicit_gemm's 25.0)."""
    if rows_reason(p) is not None or p.groups < _default_block_g(p):  # a whole block of groups
        return False
    width = _rows_shape(p)[2][-1]
    if p.pass_ == "wgrad":
        return not lanes_padded(p) and width >= (14 if max(group_channels(p)) <= 8 else 56)
    return p.pass_ == "fwd" or width >= 14 or not _tiny(p)


def lanes_padded(p) -> bool:
    """Whether the default blocks pad their groups to wider lanes (groups not a power of two
    wide: 24 in 32 lanes), whose loads the rows weight gradient masks and cannot pipeline."""
    (bg, bci, bco, _), (cg, og) = _blocks(p, Config()), group_channels(p)
    return (bci, bco) != (bg * cg, bg * og)


def rows_config(p, strip: int = 0) -> Config:
    """The rows kernel's default: the fewest whole groups that fill 16 lanes, the output row in
    one tile of up to 64 lanes and as many images side by side as fill 64 lanes, 4 warps, 3
    stages (the pipeliner copies the next input tiles while the tensor cores run).

    Forwards and input gradients of groups at most 4 wide over rows at least 56 wide give each
    lane 2 consecutive output columns, which share their input tiles (K2 + 1 loads for 2
    columns, not 2 * K2). Measured on the H200 (bf16, 2026-12-02, out/s30c.py, out/s30d.py):
    grouped3x3_g32 62.0-62.2 -> 58.6-59.1 us forward and input gradient (its strip of 28 rows
    alone: 64.7-65.0); not where groups are wider or rows narrower (RegNetX-400MF's 16-wide
    groups at 56x56 19.9 -> 22.9, ResNeXt-50's 16-wide at 14x14 20.4 -> 28.2; 8-wide at 28x28
    and 112x112 within 2%), nor 4 columns a lane (81.6 on grouped3x3_g32)."""
    cols = 2 if p.pass_ != "wgrad" and max(group_channels(p)) <= 4 and _rows_shape(p)[2][-1] >= 56 else 1
    tile_w = _rows_block_w(p, cols)
    images = min(64 // tile_w, pow2_at_least(_rows_shape(p)[0]))
    return Config("rows", block_g=_default_block_g(p), tile_w=tile_w, strip=strip, images=images,
                  num_stages=3, cols=cols)


def _rows_block_w(p, cols: int = 1) -> int:
    """Lanes for an output row of the rows kernel, ``cols`` columns a lane."""
    return pow2_at_least(cdiv(_rows_shape(p)[2][-1], cols), lo=16, hi=64)


def _rows_shape(p):
    """(batch, input, output and kernel sizes) of the forward convolution whose output rows the
    rows kernel walks: a weight-gradient problem's output is the forward's kernel, its kernel dy."""
    if p.pass_ == "wgrad":
        return p.w_shape[-1], p.in_spatial, p.kernel, p.out_spatial
    return p.batch, p.in_spatial, p.out_spatial, p.kernel


def _rows_strip(p, programs: int, device) -> int:
    """Output rows per program: the whole output height where that makes about 3 programs per SM,
    else as many equal strips as do (each strip re-reads K1 - 1 input rows). Measured best
    (out/rows_cases.py): 56 rows at 512 programs (60.8 us against 64.0 for 28), 14 at 64 (12.0
    against 13.6 for 8 and 15.6 for 28), 28 of 112 at 128 (35.0 against 39.9 for 8 and 41.5
    for 56), 4 at 16 (7.3 against 8.0 for 8)."""
    strips = -(-3 * sm_count(device) // programs)
    return -(-_rows_shape(p)[2][0] // strips)


def _rows_tiling(p, config: Config, device):
    """(lanes, images per program, column tiles, strip, strips, programs per strip) of the rows
    kernel on ``p``: a program's lanes are its images' output columns side by side."""
    reason = rows_reason(p)
    if reason:
        raise ValueError(f"grouped: {reason}, not {p}")
    if p.pass_ == "wgrad" and config.cols != 1:
        raise ValueError("grouped: the rows weight gradient takes one output column a lane, "
                         f"not {config.cols}")
    batch, _, (HO, WO), _ = _rows_shape(p)
    tile_w, images = config.tile_w or _rows_block_w(p, config.cols), config.images or 1
    col_tiles = cdiv(cdiv(WO, config.cols), tile_w)
    programs = cdiv(batch, images) * col_tiles * cdiv(p.groups, _blocks(p, config)[0])
    strip = config.strip or _rows_strip(p, programs, device)
    return tile_w * images, images, col_tiles, strip, cdiv(HO, strip), programs


def _rows_launch(p, x, w, out, config: Config):
    """(kernel, grid, args, meta) of the rows kernel on these operand views."""
    from .grouped_kernels import grouped_rows_fwd_kernel

    block_w, images, col_tiles, strip, strips, programs = _rows_tiling(p, config, x.device)
    _check_adjacent_groups(x)
    _check_adjacent_groups(out)
    bg, bci, bco, even = _blocks(p, config)
    _, (H, W), (HO, WO), (K1, K2) = _rows_shape(p)
    sx, sw, sy = x.stride(), w.stride(), out.stride()
    args = (x, w, out, p.groups, p.batch, H, W, HO, WO, *p.padding_lo, strip, strips, col_tiles,
            sx[0], sx[1], sx[2], sx[-1], sw[0], sw[1], sw[2], sw[3], sw[-1], sy[0], sy[1], sy[2], sy[-1])
    meta = dict(K1=K1, K2=K2, CG=p.c_per_group, OG=p.o_per_group, BG=bg, BCI=bci, BCO=bco, EVEN=even,
                FLIP=p.flip, INT64=needs_int64(x, w, out), BLOCK_W=block_w, IMGS=images, COLS=config.cols,
                PRECISION=_precision(p), UPCAST=INTERPRET, num_warps=config.num_warps,
                num_stages=config.num_stages,
                ALIGN=alignment_hint((*sx[:3], *sy[:3]), 16 // x.element_size()))
    return grouped_rows_fwd_kernel, (programs * strips,), args, meta


def _rows_workspace(p, config: Config, device) -> tuple[int, ...]:
    """The rows weight gradient's float32 workspace: one partial sum per (images, column tile,
    strip), each laid out as the result [G * O/G, K1, K2, C/G]."""
    _, images, col_tiles, _, strips, _ = _rows_tiling(p, config, device)
    return (cdiv(_rows_shape(p)[0], images) * col_tiles * strips, *p.result_shape)


def _rows_wgrad_launch(p, x, dy, ws, config: Config):
    """(kernel, grid, args, meta) of the rows weight gradient on the natural grouped views
    x [N, H, W, G, C/G] and dy [N, HO, WO, G, O/G] (p.wgrad_natural) into ``ws``."""
    from .grouped_kernels import grouped_rows_wgrad_kernel

    block_w, images, col_tiles, strip, strips, programs = _rows_tiling(p, config, x.device)
    _check_adjacent_groups(x)
    _check_adjacent_groups(dy)
    bg, bci, bco, even = _blocks(p, config)
    batch, (H, W), (HO, WO), (K1, K2) = _rows_shape(p)
    cg, og = group_channels(p)
    sx, sd = x.stride(), dy.stride()
    args = (x, dy, ws, p.groups, batch, H, W, HO, WO, *p.padding_lo, strip, strips, col_tiles,
            sx[0], sx[1], sx[2], sx[-1], sd[0], sd[1], sd[2], sd[-1])
    meta = dict(K1=K1, K2=K2, TK=pow2_at_least(K1), TN=pow2_at_least(K2), CG=cg, OG=og, BG=bg, BCI=bci,
                BCO=bco, EVEN=even, INT64=needs_int64(x, dy), BLOCK_W=block_w, IMGS=images,
                PRECISION=_precision(p), UPCAST=INTERPRET, num_warps=config.num_warps,
                num_stages=config.num_stages,
                ALIGN=alignment_hint((*sx[:3], *sd[:3]), 16 // x.element_size()))
    return grouped_rows_wgrad_kernel, (programs * strips,), args, meta


def _run_rows_wgrad(p, x_t, dy_t, dw_t, config: Config):
    """The rows weight gradient: each program's strip sums into its own workspace slice; the
    slices are summed afterwards in a fixed order (deterministic)."""
    x, dy, dw, _ = p.wgrad_natural(x_t, dy_t, dw_t)
    ws = torch.empty(_rows_workspace(p, config, x.device), device=x.device, dtype=torch.float32)
    _launch_now(_rows_wgrad_launch, p, x, dy, ws, config)
    sum_partials(ws, dw)


def _prepared_rows_wgrad(p, config: Config):
    """The rows weight gradient as a prepared call: its launch and the sum bound once (the
    natural x and dy are the kernel's operands: their grouped views start at their first
    elements), the workspace made per call and summed straight into the natural result."""
    x, dy, _, _ = p.wgrad_natural(*meta_views(p))
    shape, dtype = _rows_workspace(p, config, x.device), p.dtype
    ws = torch.empty(shape, device="meta", dtype=torch.float32)
    launch = BoundLaunch(*_rows_wgrad_launch(p, x, dy, ws, config), operands=(x, dy, ws))
    summing = bound_sum_partials(shape, p.result_shape, dtype)

    def call(x_nat, dy_nat):
        ws = torch.empty(shape, device=x_nat.device, dtype=torch.float32)
        launch(x_nat, dy_nat, ws)
        dw = torch.empty(p.result_shape, device=x_nat.device, dtype=dtype)
        summing(ws, dw)
        return dw
    return call
