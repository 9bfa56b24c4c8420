"""Winograd F(m x m, 3x3) for dense 3x3 stride-1 2-D convolutions, forward and input gradient.

Why: each m x m output tile costs (m+2)^2 multiplies per channel pair instead of 9 m^2 (4x fewer
for F(4x4, 3x3), 2.25x for F(2x2, 3x3)), paid for with transforms on CUDA cores, intermediates
in HBM and rounding error. Pipeline, per group (groups run side by side; C/groups and O/groups
of at least 16 each, or the GEMMs waste tensor-core tiles):

- filter transform U = G g G^T -> [A*A, G, C/g, O/g] (A = m + 2), fp32 through torch (it is
  weight-sized), stored in the problem's dtype; ``flip`` reverses g first;
- input transform V = B^T d B of every A x A input patch at stride m -> [A*A, G, tiles, C/g]
  (Triton; any padding, negative included, is an index shift plus a bounds mask);
- batched GEMM M[p] = V[p] @ U[p] -> [A*A, G, tiles, O/g], fp32 accumulation, stored in fp32
  (Triton tl.dot; cuBLAS would store M in the input's half type, which costs accuracy);
- output transform Y = A^T M A, written into the strided output view, partial tiles masked.

The transforms are not fused with the GEMM: a fused program would hold A*A accumulators (36
for F(4x4, 3x3)), far more than the register file. The batch is processed in chunks so that V
and M stay under ``NDCONV_WORKSPACE_LIMIT`` (gemm.workspace_limit).

Matrices (exact rationals, Toom-Cook): F(2x2, 3x3) at points 0, 1, -1, inf (Lavin & Gray's);
F(4x4, 3x3) at 0, 1, -1, 1/2, -2, inf rather than Lavin & Gray's 0, +-1, +-2, inf, which
measured 2-3x less accurate in fp16 and bf16; its rows of B^T are scaled by powers of two
(exact; G's rows by the inverse) so that a transformed input stays within 3.1x the input's
largest value (fp16 range; 4x for F(2x2, 3x3)). B^T and A^T are dyadic, so the kernels apply
them exactly in fp32.

Error (worst max|out - ref| / max|ref| against the float64 reference, random operands scaled to
O(1) results, C = 16..256, on the CPU; tests/test_winograd.py asserts ``error_bound``):

    tile           fp32    fp16     bf16     error_bound
    F(2x2, 3x3)    2e-7    6.5e-4   5.3e-3   testing.TOL (fp32 1e-5, fp16 2e-3, bf16 1e-2)
    F(4x4, 3x3)    1e-6    3.3e-3   3.8e-2   TOL in fp32; 5x TOL in fp16 and TF32, 8x in bf16

(the fp16/bf16 error is V and U rounded to the half type before the GEMM; TF32 rounds them
alike, so fp32 with TF32 counts as fp16). So ``default_config`` takes F(4x4, 3x3) for exact fp32
only and F(2x2, 3x3) otherwise; the F(4x4, 3x3) half-precision configs are reachable through
``configs`` (tools/tune.py) and ``run(..., config)`` and are judged against ``error_bound``.
The planner does not prefer Winograd anywhere until a GPU measurement shows it faster.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from fractions import Fraction as F
from functools import lru_cache

import torch

from .gemm import workspace_limit
from .triton_support import INTERPRET, cdiv, kernel_reason, needs_int64, pow2_at_least

NAME = "winograd"
MIN_CHANNELS = 16  # per group, both C and O: smaller GEMMs waste tensor-core tiles


@dataclass(frozen=True)
class Transform:
    """Y = A^T [(G g G^T) * (B^T d B)] A for an m x m output tile and a 3x3 filter."""

    points: str
    AT: tuple  # m x A
    G: tuple  # A x 3
    BT: tuple  # A x A

    def constexpr(self, name: str) -> tuple:
        """A matrix as nested float tuples for the kernels (exact: the entries are dyadic)."""
        return tuple(tuple(float(v) for v in row) for row in getattr(self, name))


TRANSFORMS = {
    2: Transform(
        points="0, 1, -1, inf",
        AT=((1, 1, 1, 0), (0, 1, -1, -1)),
        G=((1, 0, 0), (F(1, 2), F(1, 2), F(1, 2)), (F(1, 2), F(-1, 2), F(1, 2)), (0, 0, 1)),
        BT=((1, 0, -1, 0), (0, 1, 1, 0), (0, -1, 1, 0), (0, 1, 0, -1)),
    ),
    4: Transform(
        points="0, 1, -1, 1/2, -2, inf",
        AT=(
            (1, 1, 1, 1, 1, 0),
            (0, 1, -1, F(1, 2), -2, 0),
            (0, 1, 1, F(1, 4), 4, 0),
            (0, 1, -1, F(1, 8), -8, 1),
        ),
        G=(
            (4, 0, 0),
            (F(4, 3), F(4, 3), F(4, 3)),
            (F(4, 3), F(-4, 3), F(4, 3)),
            (F(64, 15), F(32, 15), F(16, 15)),
            (F(2, 15), F(-4, 15), F(8, 15)),
            (0, 0, 4),
        ),
        BT=(
            (F(1, 4), F(-3, 8), F(-1, 2), F(3, 8), F(1, 4), 0),
            (0, F(-1, 4), F(1, 8), F(5, 8), F(1, 4), 0),
            (0, F(-1, 4), F(5, 8), F(-1, 8), F(-1, 4), 0),
            (0, F(1, 2), F(1, 4), F(-1, 2), F(-1, 4), 0),
            (0, F(1, 4), F(-1, 2), F(-1, 4), F(1, 2), 0),
            (0, F(1, 4), F(-3, 8), F(-1, 2), F(3, 8), F(1, 4)),
        ),
    ),
}

# How far beyond testing.TOL F(4x4, 3x3) may land (the measured error with about 2x to spare).
F4_TOL_FACTOR = {torch.float16: 5, torch.bfloat16: 8, "tf32": 5}


@dataclass(frozen=True)
class Config:
    m: int  # output tile: F(m x m, 3x3)
    block_m: int  # GEMM: tiles per program
    block_n: int  # GEMM: output channels per program
    block_k: int
    num_warps: int
    num_stages: int
    block_t: int = 16  # transforms: tiles per program
    block_c: int = 32  # transforms: channels per program (4 (tile, channel) pairs per thread)

    @property
    def transform_warps(self) -> int:
        """A tile's A*A values of 4 pairs per thread fit the registers (ptxas, sm_90: no spills)."""
        return max(1, self.block_t * self.block_c // 128)


def supports(p):
    reason = kernel_reason(p)
    if reason:
        return False, reason
    if p.pass_ == "wgrad":
        return False, "the weight gradient's 'kernel' is the output's size, not 3x3 (fwd and dgrad only)"
    if p.ndim != 2:
        return False, f"2-D convolutions only, not {p.ndim}-D"
    if p.kernel != (3, 3):
        return False, f"3x3 kernels only, not {'x'.join(map(str, p.kernel))}"
    if p.stride != (1, 1) or p.kernel_dilation != (1, 1) or p.input_dilation != (1, 1):
        return False, "stride, kernel dilation and input dilation must all be 1"
    if min(p.c_per_group, p.o_per_group) < MIN_CHANNELS:
        return False, (f"{p.c_per_group} input and {p.o_per_group} output channels per group: "
                       f"fewer than {MIN_CHANNELS} waste tensor-core tiles in the GEMM")
    m = default_config(p).m
    return True, (f"Winograd F({m}x{m}, 3x3): transforms + batched GEMM, "
                  f"{(m + 2) ** 2} multiplies per {m * m} outputs")


def error_bound(p, config: Config) -> float:
    """The bound asserted on max|out - ref| / max|ref| for ``config`` on ``p``: testing.TOL's
    (with its growth for long reductions), times F4_TOL_FACTOR for F(4x4, 3x3) in half types."""
    from ..testing import tolerance

    if config.m == 2:
        return tolerance(p)
    key = "tf32" if p.allow_tf32 and p.device == "cuda" else p.dtype
    return F4_TOL_FACTOR.get(key, 1) * tolerance(p)


def _tiles(p, m: int) -> int:
    return p.batch * math.prod(cdiv(s, m) for s in p.out_spatial)


def default_config(p) -> Config:
    """F(4x4, 3x3) where it is within the dtype's tolerance (exact fp32), else F(2x2, 3x3).
    GEMM tiles as the implicit GEMM's for its shape class; not yet tuned on the GPU."""
    exact_fp32 = p.dtype == torch.float32 and not p.allow_tf32
    m = 4 if exact_fp32 else 2
    half = p.dtype != torch.float32
    block_n = pow2_at_least(p.o_per_group, 16, 128 if half else 64)
    block_k = pow2_at_least(p.c_per_group, 16, 64 if half else 32)
    block_m = 128 if _tiles(p, m) >= 4096 else 64
    warps = 8 if half and block_m * block_n >= 128 * 64 else 4
    return Config(m, block_m, block_n, block_k, warps, 3)


# GEMM tiles (block_m, block_n, block_k, warps, stages) and transform blocks worth trying.
_GEMM_TILES = ((128, 128, 64, 8, 3), (128, 64, 64, 4, 4), (64, 128, 64, 4, 4), (64, 64, 32, 4, 3),
               (128, 128, 32, 8, 4), (64, 32, 32, 4, 3))
_TRANSFORM_BLOCKS = ((16, 32), (8, 64), (32, 32), (16, 64), (8, 32))


def configs(p) -> list[Config]:
    """The search space for tools/tune.py (the default first): both tile sizes, GEMM tiles
    pruned by the channel counts, transform blocks. Judge each by ``error_bound``."""
    base = default_config(p)
    out = [base, replace(base, m=6 - base.m)]
    for m in (base.m, 6 - base.m):
        for bm, bn, bk, warps, stages in _GEMM_TILES:
            c = Config(m, bm, bn, bk, warps, stages, base.block_t, base.block_c)
            if bn <= max(32, 2 * p.o_per_group) and bk <= max(16, p.c_per_group) and c not in out:
                out.append(c)
        for bt, bc in _TRANSFORM_BLOCKS:
            c = Config(m, base.block_m, base.block_n, base.block_k, base.num_warps, base.num_stages, bt, bc)
            if c not in out:
                out.append(c)
    return out


@lru_cache(maxsize=16)
def _filter_matrix(transform: Transform, device: torch.device) -> torch.Tensor:
    """G as an fp32 tensor on ``device``, made once (per call it was a host-to-device copy,
    which a CUDA-graph capture refuses)."""
    return torch.tensor([[float(v) for v in row] for row in transform.G], dtype=torch.float32, device=device)


def _filter_transform(p, w, transform: Transform) -> torch.Tensor:
    """U[a*A + b, g, c, o] = (G w[g, o, :, :, c] G^T)[a, b]: fp32, stored in the problem's dtype."""
    A = len(transform.BT)
    g = w.to(torch.float32)
    if p.flip:
        g = g.flip(2, 3)
    G = _filter_matrix(transform, w.device)
    u = torch.einsum("ak,goklc,bl->abgco", G, g, G)
    return u.reshape(A * A, p.groups, p.c_per_group, p.o_per_group).to(p.dtype).contiguous()


def run(p, x, w, out, config: Config | None = None):
    """x [N, H, W, G, Cg], w [G, Og, 3, 3, Cg], out [N, Ho, Wo, G, Og] (views with any strides)."""
    from .winograd_kernels import winograd_gemm_kernel, winograd_input_kernel, winograd_output_kernel

    config = config or default_config(p)
    transform = TRANSFORMS[config.m]
    m, A = config.m, config.m + 2
    G, Cg, Og = p.groups, p.c_per_group, p.o_per_group
    H, W = p.in_spatial
    Ho, Wo = p.out_spatial
    TH, TW = cdiv(Ho, m), cdiv(Wo, m)
    u = _filter_transform(p, w, transform)
    bytes_per_image = A * A * G * TH * TW * (Cg * u.element_size() + Og * 4)
    chunk = max(1, workspace_limit() // bytes_per_image)
    BT, AT = transform.constexpr("BT"), transform.constexpr("AT")
    precision = "tf32" if p.allow_tf32 else "ieee"
    for n0 in range(0, p.batch, chunk):
        xs, ys = x[n0:n0 + chunk], out[n0:n0 + chunk]
        T = xs.shape[0] * TH * TW
        v = torch.empty((A * A, G, T, Cg), dtype=p.dtype, device=x.device)
        mm = torch.empty((A * A, G, T, Og), dtype=torch.float32, device=x.device)
        int64 = needs_int64(xs, ys, v, mm)
        sx, sv, sm, sy = xs.stride(), v.stride(), mm.stride(), ys.stride()
        winograd_input_kernel[(cdiv(T, config.block_t), cdiv(Cg, config.block_c), G)](
            xs, v, T, TH, TW, H, W, Cg, *p.padding_lo,
            *sx, *sv[:3],
            BT=BT, TILE=m, INT64=int64, INTERPRET=INTERPRET, BLOCK_T=config.block_t, BLOCK_C=config.block_c,
            num_warps=config.transform_warps,
        )
        winograd_gemm_kernel[(cdiv(T, config.block_m) * cdiv(Og, config.block_n), A * A * G)](
            v, u, mm, T, Cg, Og,
            INT64=int64, PRECISION=precision, UPCAST=INTERPRET,
            BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k,
            num_warps=config.num_warps, num_stages=config.num_stages,
        )
        winograd_output_kernel[(cdiv(T, config.block_t), cdiv(Og, config.block_c), G)](
            mm, ys, T, TH, TW, Ho, Wo, Og,
            *sm[:3], *sy,
            AT=AT, INT64=int64, INTERPRET=INTERPRET, BLOCK_T=config.block_t, BLOCK_O=config.block_c,
            num_warps=config.transform_warps,
        )
