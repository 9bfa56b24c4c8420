"""The planner: which algorithm runs a problem, and why.

``plan(p)`` filters the registry by ``supports(p)`` and takes the first algorithm in preference
order (heuristics for now; measurement comes with autotuning). ``algorithm=`` or the
``NDCONV_ALGORITHM`` variable forces one. ``explain(p)`` shows the whole decision.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache

from .algorithms import REGISTRY
from .problem import ConvProblem

ENV_ALGORITHM = "NDCONV_ALGORITHM"

# Preference order per device: the first algorithm that supports a problem runs it.
# - GPU: the direct kernel takes depthwise convolutions and channel multipliers (a tensor-core
#   tile would waste almost all its work there), block-diagonal packing other small groups, the
#   Triton implicit GEMM every other fp16/bf16/fp32 problem, PyTorch's own convolution (cuDNN)
#   the rest (float64).
# - CPU: PyTorch's own convolution (oneDNN), several times faster there than gemm.
# - gemm (unfold + matmul through torch) and the reference (the float64 oracle) stay forcible.
PREFERENCE = {
    "cuda": ("depthwise", "grouped", "implicit_gemm", "native", "gemm", "reference"),
    "cpu": ("native", "gemm", "reference"),
}


@dataclass(frozen=True)
class Plan:
    algorithm: object  # an algorithms module
    config: object
    reason: str

    @property
    def name(self) -> str:
        return self.algorithm.NAME


def algorithm_names() -> tuple[str, ...]:
    return tuple(REGISTRY)


def lookup(name: str, source: str = "algorithm="):
    """The algorithm module called ``name``; ValueError listing the valid names otherwise."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(
            f"{source}: unknown algorithm {name!r}; valid: {', '.join(REGISTRY)}"
        ) from None


def plan(p: ConvProblem, algorithm: str | None = None) -> Plan:
    """The plan for ``p``: the forced algorithm if any (ValueError if it cannot run ``p``),
    else the heuristic choice."""
    source = "algorithm="
    if algorithm is None:
        algorithm = os.environ.get(ENV_ALGORITHM) or None
        source = ENV_ALGORITHM
    if algorithm is None:
        return _choose(p)
    module = lookup(algorithm, source)
    ok, reason = module.supports(p)
    if not ok:
        raise ValueError(f"{source}: algorithm {algorithm!r} cannot run {p}: {reason}")
    return Plan(module, module.default_config(p), f"forced by {source}{algorithm}")


@lru_cache(maxsize=128)
def _choose(p: ConvProblem) -> Plan:
    for name in PREFERENCE.get(p.device, PREFERENCE["cpu"]):
        module = REGISTRY[name]
        ok, reason = module.supports(p)
        if ok:
            return Plan(module, module.default_config(p), f"first in preference order: {reason}")
    raise AssertionError(f"no algorithm supports {p}")  # the reference supports everything


@dataclass(frozen=True)
class Explanation:
    """Every algorithm's verdict on a problem's three passes, and the planner's choice."""

    problem: ConvProblem
    rows: tuple  # (pass, algorithm, supported, reason, chosen)

    def chosen(self, pass_: str = "fwd") -> str:
        return next(r[1] for r in self.rows if r[0] == pass_ and r[4])

    def __str__(self) -> str:
        lines = [f"problem: {self.problem}"]
        width = max(len(name) for name in REGISTRY)
        for pass_, name, ok, reason, chosen in self.rows:
            mark = "->" if chosen else "  "
            verdict = "yes" if ok else "no "
            lines.append(f"{mark} {pass_:5} {name:{width}}  {verdict}  {reason}")
        return "\n".join(lines)


def explain(p: ConvProblem, algorithm: str | None = None) -> Explanation:
    """Which algorithm runs each pass of forward problem ``p`` and why each other one does not."""
    rows = []
    for q in (p, p.dgrad(), p.wgrad()):
        chosen = plan(q, algorithm)
        for name, module in REGISTRY.items():
            ok, reason = module.supports(q)
            if name == chosen.name:
                reason = chosen.reason
            rows.append((q.pass_, name, ok, reason, name == chosen.name))
    return Explanation(p, tuple(rows))
