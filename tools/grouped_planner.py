"""The planner's choice on the small-group layers of real models (ResNeXt, RegNet), every pass,
against each algorithm that takes them: grouped's rows kernel, its groups packed through
PyTorch's convolution, PyTorch's grouped convolution (native) and implicit_gemm. Every
candidate is checked against the float64 reference before it is timed (GPU time, the bench's
timing). About a minute per 10 cases on the H200.

    PYTHONPATH=src python3 tools/grouped_planner.py --out $OUT/grouped_planner.json
    PYTHONPATH=src python3 tools/grouped_planner.py --cases regnetx16_w24_28 --passes wgrad

Prints one line per (case, pass): µs per candidate and the planner's regret (its time over the
best). Without a GPU it is a dry run of one case on tiny shapes in Triton's interpreter (checks
the script, a few minutes).
"""

from __future__ import annotations

import argparse
import json
import os

import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
if DEVICE == "cpu":  # before Triton is imported
    os.environ["TRITON_INTERPRET"] = "1"

from ndconv import autograd, planner
from ndconv.algorithms import grouped, prepared_call
from ndconv.api import make_problem
from ndconv.bench import runner

# name: (x shape, groups); 3x3 kernels, padding 1, stride 1, bf16. Group width = C / groups.
CASES = {
    "grouped3x3_g32": ((64, 56, 56, 128), 32),  # ResNeXt-50 32x4d stage 1 (the public suite's)
    "resnext50_w8_28": ((64, 28, 28, 256), 32),  # stage 2
    "resnext50_w16_14": ((64, 14, 14, 512), 32),  # stage 3
    "resnext101_w8_56": ((32, 56, 56, 256), 32),  # ResNeXt-101 32x8d stage 1
    "resnext101_w16_28": ((32, 28, 28, 512), 32),  # stage 2
    "regnetx400_w16_56": ((64, 56, 56, 32), 2),  # RegNetX-400MF (16-wide groups)
    "regnetx400_w16_28": ((64, 28, 28, 64), 4),
    "regnetx400_w16_14": ((64, 14, 14, 160), 10),
    "regnetx800_w16_56": ((64, 56, 56, 64), 4),  # RegNetX-800MF (16-wide groups)
    "regnetx800_w16_28": ((64, 28, 28, 128), 8),
    "regnetx800_w16_14": ((64, 14, 14, 288), 18),
    "regnetx800_w16_7": ((64, 7, 7, 672), 42),
    "regnety400_w8_56": ((64, 56, 56, 48), 6),  # RegNetY-400MF (8-wide groups)
    "regnety400_w8_28": ((64, 28, 28, 104), 13),
    "regnety400_w8_14": ((64, 14, 14, 208), 26),
    "regnet_w8_112": ((16, 112, 112, 64), 8),  # 8-wide groups on wide rows
    "regnetx16_w24_56": ((64, 56, 56, 72), 3),  # RegNetX-1.6GF (24-wide groups)
    "regnetx16_w24_28": ((64, 28, 28, 168), 7),
    "regnetx16_w24_14": ((64, 14, 14, 408), 17),
    "regnetx16_w24_7": ((64, 7, 7, 912), 38),
    "regnety16_w24_28": ((64, 28, 28, 120), 5),  # RegNetY-1.6GF (24-wide groups)
    "regnety16_w24_14": ((64, 14, 14, 336), 14),
}


def candidates(q):
    """(label, function of the natural operands) per algorithm that takes ``q``, as a cached call
    runs it."""
    plan = planner.plan(q)
    config = getattr(plan.config, "kernel", "") if plan.name == grouped.NAME else ""
    out = [(f"planner: {plan.name} {config}".strip(), lambda a, b: autograd.run(q, a, b))]
    out += [(name, lambda a, b, name=name: autograd.run(q, a, b, name))
            for name in ("native", "implicit_gemm")]
    if grouped.rows_reason(q) is None:
        out.append(("grouped rows", prepared_call(grouped, q, grouped.rows_config(q))))
    if grouped._native_packs(q):
        out.append(("grouped packed by native", prepared_call(grouped, q, grouped._native_default(q))))
    return out


def measure(name, p, pass_):
    q = p if pass_ == "fwd" else getattr(p, pass_)()
    sets = runner.testing.operand_sets(q, 0, DEVICE)
    ref, take, _ = runner._reference_slice(q, *sets[0], DEVICE)
    tol = runner.testing.tolerance(q)
    row = {}
    for label, fn in candidates(q):
        r = runner._measure(fn, sets, lambda result: runner.testing.compare(take(result), ref, tol), DEVICE)
        row[label] = r["ms"] * 1e3 if "ms" in r else str(r.get("wrong") or r.get("error"))[:120]
    times = [v for v in row.values() if isinstance(v, float)]
    planned = next(iter(row.values()))
    regret = planned / min(times) if isinstance(planned, float) else None
    cells = ", ".join(f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items())
    print(f"{name} {pass_}: {cells}; regret {regret:.2f}" if regret else f"{name} {pass_}: {cells}",
          flush=True)
    return {"case": name, "pass_": pass_, "problem": str(q), "us": row, "regret": regret}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="grouped_planner.json")
    parser.add_argument("--cases", nargs="+",
                        default=list(CASES) if DEVICE == "cuda" else ["regnety16_w24_28"])
    parser.add_argument("--passes", nargs="+", default=["fwd", "dgrad", "wgrad"])
    args = parser.parse_args()
    results = []
    for name in args.cases:
        x, groups = CASES[name]
        if DEVICE == "cpu":  # a dry run: one image of 6x6
            x = (1, 6, 6, x[-1])
        p = make_problem(x, (x[-1], 3, 3, x[-1] // groups), padding=1, groups=groups, dtype=torch.bfloat16,
                         device=DEVICE)
        results += [measure(name, p, pass_) for pass_ in args.passes]
    env = {"gpu": torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu (dry run)",
           "torch": torch.__version__, "triton": __import__("triton").__version__}
    with open(args.out, "w") as f:
        json.dump({"env": env, "results": results}, f, indent=1)
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
