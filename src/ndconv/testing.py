"""Checking algorithms against the float64 reference: one tolerance table, one comparison with
a readable report, random operands scaled so results are O(1), and the built-in case list that
``python -m ndconv check`` and the tests share.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .algorithms import REGISTRY, reference
from .api import make_problem
from .problem import ConvProblem

# Tolerance on max|out - ref| / max|ref| for a reduction of up to 4096 terms; it grows with
# sqrt(reduction / 4096) beyond that, as rounding errors of long sums do. (Where every output
# is a sum that cancels, max|ref| is too small a scale: `check` floors it, see `magnitude`.)
TOL = {
    torch.float64: 1e-12,
    torch.float32: 1e-5,
    "tf32": 2e-3,
    torch.float16: 2e-3,
    torch.bfloat16: 1e-2,
}


def tolerance(p: ConvProblem) -> float:
    base = TOL["tf32"] if p.allow_tf32 and p.device == "cuda" else TOL[p.dtype]
    return base * max(1.0, math.sqrt(p.gemm_mnk[2] / 4096))


@dataclass(frozen=True)
class Report:
    """How an output compares with the reference."""

    max_rel_err: float  # max|out - ref| / scale, the scale max|ref| (or the floor given)
    rmse_rel: float  # ||out - ref|| / ||ref||
    tol: float
    n_bad: int  # elements off by more than tol * scale, NaN or inf
    n_nonfinite: int
    first_bad: tuple  # indices of the first few bad elements

    @property
    def ok(self) -> bool:
        return self.n_bad == 0

    def __str__(self) -> str:
        s = f"max rel err {self.max_rel_err:.2e} (tol {self.tol:.1e}), rel rmse {self.rmse_rel:.2e}"
        if self.n_nonfinite:
            s += f", {self.n_nonfinite} NaN/inf"
        if self.n_bad:
            s += f", {self.n_bad} bad elements, first at {list(self.first_bad)}"
        return s


def compare(out: torch.Tensor, ref: torch.Tensor, tol: float, floor: float = 0.0) -> Report:
    """Compares ``out`` with the float64 ``ref`` (same shape), errors relative to max|ref|, or
    to ``floor`` where that is larger."""
    if out.shape != ref.shape:
        raise AssertionError(f"shape {list(out.shape)} != reference shape {list(ref.shape)}")
    out, ref = out.detach().to(torch.float64), ref.detach().to(torch.float64)
    if ref.numel() == 0:
        return Report(0.0, 0.0, tol, 0, 0, ())
    err = (out - ref).abs()
    scale = max(ref.abs().max().item(), floor) or 1.0
    nonfinite = ~torch.isfinite(out)
    bad = nonfinite | (err > tol * scale)
    finite_err = torch.where(nonfinite, 0.0, err)
    norm = ref.norm().item() or 1.0
    first = tuple(tuple(i) for i in bad.nonzero()[:3].tolist())
    return Report(
        max_rel_err=float("inf") if nonfinite.any() else finite_err.max().item() / scale,
        rmse_rel=finite_err.norm().item() / norm,
        tol=tol,
        n_bad=int(bad.sum()),
        n_nonfinite=int(nonfinite.sum()),
        first_bad=first,
    )


def assert_close(out: torch.Tensor, ref: torch.Tensor, tol: float, what: str = "output") -> None:
    report = compare(out, ref, tol)
    if not report.ok:
        raise AssertionError(f"{what}: {report}")


def random_operands(p: ConvProblem, seed: int = 0, device=None):
    """Fresh random natural operands of pass ``p``, drawn on ``device`` (default the problem's);
    the second is scaled by 1/sqrt(reduction) so that results are O(1)."""
    device = torch.device(device or p.device)
    g = torch.Generator(device=device).manual_seed(seed)
    a_shape, b_shape = p.operand_shapes
    a = torch.randn(a_shape, generator=g, device=device)
    b = torch.randn(b_shape, generator=g, device=device) / math.sqrt(max(1, p.gemm_mnk[2]))
    return a.to(p.dtype), b.to(p.dtype)


def operand_sets(p: ConvProblem, seed: int = 0, device=None) -> list:
    """Independent random operand sets of pass ``p``, enough (up to 16) that a timing loop
    cycling through them reads its operands from HBM, not from the GPU's L2 cache, as a model
    does; one set off the GPU."""
    device = torch.device(device or p.device)
    l2_bytes = torch.cuda.get_device_properties(device).L2_cache_size if device.type == "cuda" else 0
    count = max(1, min(16, math.ceil(3 * l2_bytes / max(1, p.min_bytes))))
    return [random_operands(p, seed + i, device=device) for i in range(count)]


def run_algorithm(name: str, p: ConvProblem, a: torch.Tensor, b: torch.Tensor, config=None):
    """Runs one algorithm directly on pass ``p`` into a NaN-poisoned result (no planner)."""
    module = REGISTRY[name]
    out = torch.full(p.result_shape, float("nan"), dtype=p.dtype, device=a.device)
    x, w, y = p.views(a, b, out)
    module.run(p, x, w, y, module.default_config(p) if config is None else config)
    return out


def reference_result(p: ConvProblem, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The float64 result of pass ``p`` on these operands."""
    out = torch.empty(p.result_shape, dtype=torch.float64, device=a.device)
    x, w, y = p.views(a, b, out)
    reference.run(p, x, w, y)
    return out


def magnitude(p: ConvProblem, a: torch.Tensor, b: torch.Tensor) -> float:
    """The size a result of pass ``p`` on these operands has without cancellation beyond a
    random walk's: the largest sum of |products| over sqrt(reduction) (K random products of size
    m sum to about sqrt(K) m). A correct sum's rounding error is relative to its terms, not to
    its result, so where a handful of outputs all cancel (a few products of opposite signs),
    this, not max|ref|, is the scale their errors are measured on."""
    terms = reference_result(p, a.abs(), b.abs())
    return terms.max().item() / math.sqrt(max(1, p.gemm_mnk[2])) if terms.numel() else 0.0


def check(name: str, p: ConvProblem, seed: int = 0, config=None) -> Report:
    """Algorithm ``name`` (with ``config``, default its own) against the reference on fresh
    random operands of ``p``, errors relative to max|ref| floored at ``magnitude``."""
    a, b = random_operands(p, seed)
    return compare(run_algorithm(name, p, a, b, config), reference_result(p, a, b), tolerance(p),
                   magnitude(p, a, b))


@dataclass(frozen=True)
class Case:
    """A named convolution: operand shapes and ``conv_general`` arguments."""

    name: str
    x: tuple[int, ...]
    w: tuple[int, ...]
    args: dict

    def problem(self, dtype=torch.float32, device="cpu") -> ConvProblem:
        return make_problem(self.x, self.w, dtype=dtype, device=device, **self.args)


# Tiny shapes (they also run in Triton's interpreter) covering every argument kind.
CASES = (
    Case("1d_k3", (2, 9, 5), (6, 3, 5), dict(padding=1)),
    Case("1d_s2_kdil2", (2, 13, 4), (3, 3, 4), dict(stride=2, kernel_dilation=2, padding=2)),
    Case("1d_causal_dw", (2, 10, 6), (6, 4, 1), dict(padding=([3], [0]), groups=6)),
    Case("1d_idil3_flip", (1, 5, 3), (4, 3, 3), dict(input_dilation=3, padding=2, flip=True)),
    Case("1d_negpad", (2, 12, 3), (2, 3, 3), dict(padding=([-2], [1]))),
    Case("1d_groups_mult", (1, 7, 4), (8, 2, 2), dict(groups=2, padding=([1], [0]))),
    Case("2d_3x3", (2, 6, 7, 5), (4, 3, 3, 5), dict(padding=1)),
    Case("2d_1x1_batch1", (1, 4, 5, 8), (16, 1, 1, 8), dict()),
    Case("2d_same_s2", (2, 7, 7, 3), (5, 3, 3, 3), dict(stride=2, padding=([0, 0], [1, 1]))),
    Case("2d_stem_7x7s2_c3", (1, 11, 11, 3), (4, 7, 7, 3), dict(stride=2, padding=3)),
    Case("2d_dw3x3", (2, 6, 6, 8), (8, 3, 3, 1), dict(padding=1, groups=8)),
    Case("2d_dw5x5_s2_mult2", (1, 9, 9, 4), (8, 5, 5, 1), dict(stride=2, padding=2, groups=4)),
    Case("2d_grouped_g4", (2, 5, 5, 8), (12, 3, 3, 2), dict(padding=1, groups=4)),
    Case("2d_dilated_d2", (1, 9, 8, 4), (3, 3, 3, 4), dict(kernel_dilation=2, padding=2)),
    Case("2d_convT_4x4s2", (1, 4, 5, 6), (3, 4, 4, 6), dict(input_dilation=2, padding=2, flip=True)),
    Case("2d_convT_3x3s2_asym", (2, 4, 4, 3), (5, 3, 3, 3),
         dict(input_dilation=2, padding=([1, 1], [2, 2]), flip=True)),
    Case("2d_mixed_everything", (2, 7, 6, 6), (4, 3, 2, 3),
         dict(stride=(2, 1), padding=([2, -1], [0, 3]), kernel_dilation=(1, 2), input_dilation=(2, 1),
              groups=2, flip=True)),
    Case("2d_negpad_idil", (1, 8, 8, 2), (2, 2, 2, 2), dict(input_dilation=2, padding=([-1, 0], [1, -2]))),
    Case("3d_3x3x3", (1, 4, 5, 4, 3), (4, 3, 3, 3, 3), dict(padding=1)),
    Case("3d_causal_t", (1, 5, 4, 4, 4), (2, 3, 3, 3, 4), dict(padding=([2, 1, 1], [0, 1, 1]))),
    Case("3d_grouped_strided", (2, 5, 6, 5, 4), (6, 2, 3, 2, 2),
         dict(stride=(1, 2, 2), groups=2, kernel_dilation=(2, 1, 1))),
    Case("3d_convT_s2", (1, 3, 3, 3, 4), (2, 2, 2, 2, 4), dict(input_dilation=2, padding=1, flip=True)),
    # channel counts of 16 and more (kernels take their per-tap, vectorised path)
    Case("2d_c24_3x3", (1, 5, 6, 24), (20, 3, 3, 24), dict(padding=1)),
    Case("1d_c32_convT", (2, 6, 32), (16, 4, 32), dict(input_dilation=2, padding=([2], [3]), flip=True)),
    Case("3d_c16_grouped", (1, 3, 4, 4, 32), (18, 3, 3, 3, 16), dict(padding=1, groups=2, stride=(1, 2, 1))),
)
