"""Grouped convolutions with small groups (ResNeXt's 4, RegNet's 8-24 channels per group) on
tensor cores, by block-diagonal packing.

A group of 4x4 channels is a GEMM far narrower than a tensor-core tile: run alone, it wastes
almost the whole tile. Here ``pack`` consecutive groups become one group whose weight is
block-diagonal (the zeros between groups make it the same convolution), so one implicit-GEMM
tile covers ``pack`` groups at once. It multiplies ``pack`` times more (zero) products, but
the tensor cores have that to spare: these layers are bound by memory, not by FLOPs.

- Forward and input gradient: the packed problem runs through implicit_gemm with the
  block-diagonal weight, built per call (the weight is small).
- Weight gradient: the packed problem's weight gradient is computed densely (every block of
  the block-diagonal weight), and its diagonal blocks are the groups' gradients.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch

from . import implicit_gemm
from .triton_support import group_channels, kernel_reason

NAME = "grouped"
# Packed groups are at least this wide (C/groups or O/groups, whichever is wider).
TARGET_WIDTH = 32


@dataclass(frozen=True)
class Config:
    pack: int  # consecutive groups packed into one block-diagonal group
    tile: implicit_gemm.Config | None = None  # the packed problem's config (None: its default)


def _pack_factors(p) -> list[int]:
    """Divisors d > 1 of the group count that leave packed groups at most 4x TARGET_WIDTH wide."""
    cg, og = group_channels(p)
    width = max(cg, og)
    return [d for d in range(2, p.groups + 1) if p.groups % d == 0 and d * width <= 4 * TARGET_WIDTH]


def _default_pack(p) -> int:
    factors = _pack_factors(p)
    cg, og = group_channels(p)
    return next((d for d in factors if d * max(cg, og) >= TARGET_WIDTH), factors[-1])


def supports(p):
    reason = kernel_reason(p)
    if reason:
        return False, reason
    cg, og = group_channels(p)
    if p.groups == 1:
        return False, "not a grouped convolution"
    if max(cg, og) >= TARGET_WIDTH:
        return False, f"groups of {cg}x{og} channels already fill tensor-core tiles (implicit_gemm)"
    if not _pack_factors(p):
        return False, f"no group count divides {p.groups} into packs of useful width"
    return True, f"{_default_pack(p)} groups of {cg}x{og} channels packed block-diagonally per tensor-core tile"


def packed_problem(p, pack: int):
    """The same convolution with ``pack`` consecutive groups merged into one."""
    if p.pass_ == "wgrad":  # its x is [C/g, *S, g*N]: the forward's channels per group grow
        return replace(p, x_shape=(p.x_shape[0] * pack, *p.x_shape[1:]), groups=p.groups // pack)
    return replace(p, w_shape=(p.w_shape[0], *p.kernel, p.c_per_group * pack), groups=p.groups // pack)


def default_config(p) -> Config:
    return Config(_default_pack(p))


def configs(p) -> list[Config]:
    out = []
    for pack in [_default_pack(p)] + _pack_factors(p):
        for tile in implicit_gemm.configs(packed_problem(p, pack))[:6]:
            c = Config(pack, tile)
            if c not in out:
                out.append(c)
    return out


def block_diagonal(w: torch.Tensor, pack: int) -> torch.Tensor:
    """Grouped weight [G, Og, *K, Cg] as [G/pack, pack*Og, *K, pack*Cg], block-diagonal."""
    G, Og, *K, Cg = w.shape
    w6 = w.reshape(G // pack, pack, Og, math.prod(K), 1, Cg)
    eye = torch.eye(pack, dtype=w.dtype, device=w.device).view(1, pack, 1, 1, pack, 1)
    return (w6 * eye).reshape(G // pack, pack * Og, *K, pack * Cg)


def _merge_groups(t: torch.Tensor, pack: int) -> torch.Tensor:
    """[..., G, n] as [..., G/pack, pack*n] (a view: the groups are adjacent in memory)."""
    G, n = t.shape[-2:]
    return t.view(*t.shape[:-2], G // pack, pack * n)


def run(p, x, w, out, config: Config | None = None):
    """x [N, *S, G, Cg], w [G, Og, *K, Cg], out [N, *S_out, G, Og] (views with any strides)."""
    config = config or default_config(p)
    pack = config.pack
    q = packed_problem(p, pack)
    tile = config.tile or implicit_gemm.default_config(q)
    if p.pass_ == "wgrad":
        return _run_wgrad(p, q, x, w, out, pack, tile)
    implicit_gemm.run(q, _merge_groups(x, pack), block_diagonal(w, pack), _merge_groups(out, pack), tile)


def _run_wgrad(p, q, x_t, dy_t, dw_t, pack, tile):
    x, dy, dw, _ = p.wgrad_natural(x_t, dy_t, dw_t)  # [N,*S,G,Cg], [N,*So,G,Og], [G,Og,*K,Cg]
    G, Og, *K, Cg = dw.shape
    dense = torch.empty((G // pack * pack * Og, *K, pack * Cg), device=dw.device, dtype=dw.dtype)
    implicit_gemm.run(q, *q.views(x.flatten(-2), dy.flatten(-2), dense), tile)
    blocks = dense.view(G // pack, pack, Og, math.prod(K), pack, Cg)
    diagonal = torch.diagonal(blocks, dim1=1, dim2=4)  # [G/pack, Og, prod(K), Cg, pack]
    dw.copy_(diagonal.permute(0, 4, 1, 2, 3).reshape(dw.shape))
