"""Times an algorithm's configs on public-suite cases (run on the GPU): which tile shapes win
for each shape class, to set default_config by measurement. Writes tune.json.

    PYTHONPATH=src python3 tools/tune.py --cases r50_3x3_56 vae_3x3_256 --passes fwd wgrad --max 12
    PYTHONPATH=src python3 tools/tune.py --algorithm winograd --cases r50_3x3_56 r50_3x3_14 --max 24
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from ndconv import testing
from ndconv.algorithms import REGISTRY
from ndconv.bench import runner, suites
from ndconv.bench.timing import time_fn


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--algorithm", default="implicit_gemm")
    parser.add_argument("--cases", nargs="+")
    parser.add_argument("--passes", nargs="+", default=["fwd", "dgrad", "wgrad"])
    parser.add_argument("--max", type=int, default=12, help="configs per problem (the default first)")
    parser.add_argument("--out", default=".")
    args = parser.parse_args()
    module = REGISTRY[args.algorithm]
    results = []
    for case in suites.load_suite("public"):
        if args.cases and case.name not in args.cases:
            continue
        p = case.problem("cuda")
        for pass_ in case.passes:
            if pass_ not in args.passes:
                continue
            q = p if pass_ == "fwd" else getattr(p, pass_)()
            ok, reason = module.supports(q)
            if not ok:
                print(f"{case.name:18} {pass_:5} unsupported: {reason}", flush=True)
                continue
            sets = testing.operand_sets(q, 0, "cuda")
            ref, take, _ = runner._reference_slice(q, *sets[0], "cuda")
            timings = []
            for config in module.configs(q)[: args.max]:
                out = torch.empty(q.result_shape, device="cuda", dtype=q.dtype)

                def fn(a, b, config=config, out=out):
                    module.run(q, *q.views(a, b, out), config)
                    return out
                # an algorithm may promise a looser bound for some configs (winograd.error_bound)
                bound = getattr(module, "error_bound", lambda q, config: testing.tolerance(q))(q, config)
                try:
                    report = testing.compare(take(fn(*sets[0])), ref, bound)
                    if not report.ok:
                        timings.append((config, None, f"wrong: {report}"))
                        continue
                    note = "" if report.max_rel_err <= testing.tolerance(q) else f"beyond TOL: {report}"
                    timings.append((config, time_fn(fn, sets, "cuda", budget_s=0.1).median_ms, note))
                except Exception as e:  # e.g. out of shared memory for a large tile
                    timings.append((config, None, f"{type(e).__name__}: {str(e)[:120]}"))
            default_ms = timings[0][1]
            best = min((t for t in timings if t[1]), key=lambda t: t[1], default=None)
            floor = 1e3 * max(q.flops / 790e12, q.min_bytes / 4.3e12)
            print(f"{case.name:18} {pass_:5} default {default_ms} ms, best {best[1] if best else None} ms "
                  f"{best[0] if best else ''} (floor {floor:.4f} ms)", flush=True)
            for config, ms, note in timings:
                print(f"    {ms!s:24} {config} {note}")
            results.append(dict(case=case.name, pass_=pass_, floor_ms=floor,
                                timings=[(repr(c), ms, note) for c, ms, note in timings]))
    (Path(args.out) / "tune.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
