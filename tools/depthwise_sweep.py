"""Times the depthwise kernels' configs on the public suite's depthwise cases, next to
PyTorch's fastest formulation (cuDNN, channels last, cudnn.benchmark), on the GPU. Every config
is checked against PyTorch's result in float32 (operands upcast, TF32 off) before it is timed; a
config that fails or raises is reported and skipped. Prints a table, writes JSON.

    PYTHONPATH=src python3 tools/depthwise_sweep.py --out dw.json
    PYTHONPATH=src python3 tools/depthwise_sweep.py --cases dw7x7_56:fwd --max 9
    PYTHONPATH=src python3 tools/depthwise_sweep.py --cases dw3x3_56:fwd \\
        --where 'c == base or c.channels_fastest'
    PYTHONPATH=src python3 tools/depthwise_sweep.py --suite depthwise --cases mbv2_dw3x3_7_c960:fwd \\
        --where 'c.flat'
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import torch
import triton

from ndconv import testing
from ndconv.algorithms import depthwise, native
from ndconv.bench import runner, suites
from ndconv.bench.timing import time_fn

# (case, pass, configs to time: how many of depthwise.configs, which start with the default, or
# a filter); the input gradients last (the same kernel, flipped), so a slow compile skips them
# first. 31x31 (slow to compile): the default, shorter strips, smaller tap chunks.
SWEEP = [
    ("dw3x3_56", "fwd", 7), ("dw3x3s2_112", "fwd", 7), ("dw7x7_56", "fwd", 7), ("causal_dw1d_k4", "fwd", 7),
    ("dw31x31_56", "fwd", lambda c, base: c == base or c.unroll < base.unroll or c.cols < base.cols),
    ("dw7x7_56", "dgrad", 4), ("causal_dw1d_k4", "dgrad", 4),
]
BANDWIDTH = 4.254e12  # the H200's measured copy bandwidth (docs/PERFORMANCE.md), bytes/s


def _reference(q, a, b):
    """PyTorch's result on the operands upcast to float32, without TF32."""
    q32 = dataclasses.replace(q, dtype=torch.float32, allow_tf32=False)
    with torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=False, allow_tf32=False):
        return testing.run_algorithm("native", q32, a.float(), b.float())


def _time_checked(fn, sets, check, budget_s):
    """(median ms, p20, p80, max_rel_err) or raises; the result is checked before timing."""
    report = check(fn(*sets[0]))
    torch.cuda.synchronize()
    if not report.ok:
        raise ValueError(f"wrong: {report}")
    t = time_fn(fn, sets, "cuda", budget_s=budget_s)
    return t.median_ms, t.p20_ms, t.p80_ms, report.max_rel_err


def _baseline(p, pass_, sets, check):
    """The fastest correct PyTorch formulation: (name, ms)."""
    best = None
    for f in native.formulations(p, pass_):
        prepared = [f.prepare(a, b) for a, b in sets]
        try:
            ms = _time_checked(f.run, prepared, lambda r, f=f: check(runner.baseline_natural(p, pass_, f, r)),
                               0.2)[0]
        except Exception as e:  # noqa: BLE001 - a formulation that fails is reported, not fatal
            print(f"    baseline {f.name}: {type(e).__name__}: {str(e)[:120]}", flush=True)
            continue
        if best is None or ms < best[1]:
            best = (f.name, ms)
    return best


def sweep_case(case, pass_, max_configs, deadline):
    p = case.problem("cuda")
    q = p if pass_ == "fwd" else getattr(p, pass_)()
    sets = testing.operand_sets(q, 0, "cuda")
    ref = _reference(q, *sets[0])
    tol = testing.tolerance(q)

    def check(result):
        return testing.compare(result, ref, tol)

    floor_ms = 1e3 * q.min_bytes / BANDWIDTH
    base = _baseline(p, pass_, sets, check)
    print(f"{case.name} {pass_}: {q}\n  floor {floor_ms * 1e3:.1f} us, PyTorch "
          f"{f'{base[1] * 1e3:.1f} us ({base[0]})' if base else 'failed'}", flush=True)
    rows = []
    out = torch.empty(q.result_shape, device="cuda", dtype=q.dtype)
    every = depthwise.configs(q)
    if isinstance(max_configs, int):
        picked = every[:max_configs]
    else:
        picked = [c for c in every if max_configs(c, every[0])]
    for config in picked:
        row = {"case": case.name, "pass": pass_, "config": dataclasses.asdict(config),
               "tile": depthwise._fwd_tile(q, config), "floor_us": floor_ms * 1e3,
               "pytorch_us": base[1] * 1e3 if base else None, "pytorch": base[0] if base else None}
        if time.monotonic() > deadline:
            row["skipped"] = "time budget spent"
            print(f"  skipped (time budget): {config}", flush=True)
            rows.append(row)
            continue

        def fn(a, b, config=config):
            depthwise.run(q, *q.views(a, b, out), config)
            return out
        start = time.monotonic()
        out.fill_(float("nan"))  # poisoned: a config that leaves outputs unwritten fails its check
        try:
            ms, p20, p80, err = _time_checked(fn, sets, check, 0.1)
        except Exception as e:  # noqa: BLE001 - one failing config must not end the sweep
            row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
            print(f"  FAILED {config}: {row['error']}", flush=True)
            rows.append(row)
            continue
        row.update(us=ms * 1e3, p20_us=p20 * 1e3, p80_us=p80 * 1e3, max_rel_err=err,
                   seconds=time.monotonic() - start)
        speedup = f"{base[1] / ms:5.2f}x" if base else "   - "
        print(f"  {ms * 1e3:8.1f} us  {speedup} PyTorch  {ms / floor_ms:5.2f}x floor  "
              f"tile (h, strips, cols) {row['tile']}  {config}  [{row['seconds']:.0f} s]", flush=True)
        rows.append(row)
    return rows


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="depthwise_sweep.json")
    parser.add_argument("--suite", default="public",
                        help="the suite the cases come from (public, depthwise, ...)")
    parser.add_argument("--cases", nargs="+", help="CASE:PASS entries (default: the built-in sweep)")
    parser.add_argument("--max", type=int, help="configs per case (default: per case)")
    parser.add_argument("--budget", type=float, default=220, help="seconds before the rest is skipped")
    parser.add_argument("--where", help="a Python expression of c (a config) and base (the default): "
                                        "only the configs for which it is true, "
                                        "e.g. 'c == base or c.unroll < 8'")
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True
    cases = {c.name: c for c in suites.load_suite(args.suite)}
    plan = SWEEP
    if args.cases:
        plan = [(*entry.split(":"), 7) for entry in args.cases]
    if args.where:
        where = compile(args.where, "--where", "eval")
        plan = [(name, pass_, lambda c, base: eval(where, {"c": c, "base": base})) for name, pass_, _ in plan]
    deadline = time.monotonic() + args.budget
    rows = []
    for name, pass_, count in plan:
        try:
            rows += sweep_case(cases[name], pass_, count if args.where else args.max or count, deadline)
        except Exception as e:  # noqa: BLE001 - e.g. the reference itself failing
            print(f"{name} {pass_}: FAILED {type(e).__name__}: {str(e)[:300]}", flush=True)
            rows.append({"case": name, "pass": pass_, "error": f"{type(e).__name__}: {str(e)[:300]}"})
        torch.cuda.empty_cache()
    print("\nbest per case:")
    for name, pass_, _ in plan:
        mine = [r for r in rows if r["case"] == name and r["pass"] == pass_]
        timed = [r for r in mine if "us" in r]
        if timed:
            best = min(timed, key=lambda r: r["us"])
            vs = f"{best['pytorch_us'] / best['us']:.2f}x PyTorch" if best["pytorch_us"] else ""
            default = f"{mine[0]['us']:.1f} us" if "us" in mine[0] else "failed"
            print(f"  {name:15} {pass_:5} {best['us']:8.1f} us  {vs}  "
                  f"{best['us'] / best['floor_us']:.2f}x floor  (default {default})  {best['config']}")
    env = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__}
    Path(args.out).write_text(json.dumps({"env": env, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
