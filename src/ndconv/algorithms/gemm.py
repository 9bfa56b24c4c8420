"""Explicit GEMM: gather the input patches (im2col) and multiply them by the weight.

Grouped convolution is one batched matmul over the groups (as the CUDA seed's grouped path).
Input dilation, flip and negative or asymmetric pads live in per-axis index tables, so the
dilated or padded input is never built. The patch matrix is built and consumed in chunks of
output rows so that it stays under ``NDCONV_WORKSPACE_LIMIT`` bytes (default 1 GiB): a full
im2col buffer is what makes large (especially transposed) convolutions run out of memory.
Runs anywhere torch runs; accumulates half types in float32.
"""

from __future__ import annotations

import math
import os
from functools import lru_cache

import torch

NAME = "gemm"
DEFAULT_WORKSPACE_LIMIT = 1 << 30


def supports(p):
    return True, "unfold + (batched) matmul through torch: every problem, any device"


def configs(p):
    return [None]


def default_config(p):
    return None


def workspace_limit() -> int:
    """Bytes the patch matrix may use, from NDCONV_WORKSPACE_LIMIT."""
    value = os.environ.get("NDCONV_WORKSPACE_LIMIT")
    if value is None:
        return DEFAULT_WORKSPACE_LIMIT
    try:
        limit = int(value)
    except ValueError:
        limit = 0
    if limit < 1:
        raise ValueError(f"NDCONV_WORKSPACE_LIMIT must be a positive number of bytes, got {value!r}")
    return limit


@lru_cache(maxsize=64)
def _index_tables(p, device):
    """Per axis: source element index [S_out, K] into the undilated input, and its validity.
    Made once per problem and device: built from host data, a table made per call would be a
    host-to-device copy each time, which a CUDA-graph capture refuses."""
    tables = []
    for u, s, idil in zip(p.tap_positions, p.in_spatial, p.input_dilation):
        u = torch.tensor(u, device=device)
        valid = (u >= 0) & (u <= (s - 1) * idil) & (u % idil == 0)
        tables.append(((u // idil).clamp_(0, s - 1), valid))
    return tables


def run(p, x, w, out, config=None):
    """x [N, *S, G, Cg], w [G, Og, *K, Cg], out [N, *S_out, G, Og] (any strides)."""
    D = p.ndim
    N, G, Cg, Og = p.batch, p.groups, p.c_per_group, p.o_per_group
    taps = math.prod(p.kernel)
    compute = torch.float64 if p.dtype == torch.float64 else torch.float32
    w_mat = w.reshape(G, Og, taps * Cg).to(compute).transpose(1, 2)  # [G, taps*Cg, Og]

    rows = N * math.prod(p.out_spatial)
    try:
        out_rows = out.view(rows, G, Og)
        direct = True
    except RuntimeError:  # a strided view (gradient passes): fill a buffer, copy once
        out_rows = torch.empty((rows, G, Og), dtype=out.dtype, device=out.device)
        direct = False

    bytes_per_row = taps * G * Cg * (x.element_size() + 2 * torch.finfo(compute).bits // 8)
    bytes_per_row += taps * 8 * (D + 2) + G * Og * 8
    chunk = max(1, workspace_limit() // bytes_per_row)

    tables = _index_tables(p, x.device)
    for r0 in range(0, rows, chunk):
        r = torch.arange(r0, min(rows, r0 + chunk), device=x.device)
        coords = []
        for so in reversed(p.out_spatial):
            coords.append(r % so)
            r = r // so
        coords.reverse()  # output position per axis, [R] each; r is now the batch index
        index = [r.view(-1, *([1] * D))]
        valid = None
        for d, ((src, ok), j) in enumerate(zip(tables, coords)):
            shape = [-1] + [1] * D
            shape[1 + d] = p.kernel[d]
            index.append(src[j].view(shape))
            v = ok[j].view(shape)
            valid = v if valid is None else valid & v
        patches = x[tuple(index)]  # [R, *K, G, Cg]
        patches = torch.where(valid[..., None, None], patches, 0).to(compute)
        a = patches.reshape(-1, taps, G, Cg).permute(2, 0, 1, 3).reshape(G, -1, taps * Cg)
        out_rows[r0 : r0 + a.shape[1]] = torch.bmm(a, w_mat).transpose(0, 1)

    if not direct:
        out.copy_(out_rows.view(out.shape))
