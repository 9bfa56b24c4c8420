"""The results table of docs/PERFORMANCE.md from a bench JSON (`python -m ndconv bench --json`),
with the geometric means the issues ask for: planner over PyTorch per direction, regret. (The
JSON's host time per call, a median of three calls, is too noisy for the table:
tools/host_overhead.py measures it.)

    python tools/perf_table.py docs/bench_h200.json [MORE.json ...]   # several runs' rows in order
"""

from __future__ import annotations

import json
import math
import sys


def geomean(values) -> float:
    values = list(values)
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def main(*paths: str) -> int:
    rows = []
    for path in paths:
        with open(path) as f:
            rows += json.load(f)["rows"]
    print("| case | pass | floor µs | PyTorch µs (formulation) | best ndconv µs (algorithm) | speed-up "
          "| × floor | planner's choice | planner µs | regret |")
    print("|---|---|---:|---|---|---:|---:|---|---:|---:|")
    fwd, bwd, regrets = [], [], []
    for r in rows:
        base_name, base_ms = r["baseline"]
        best_name, best_ms = r["best"]
        planner_ms = r["planner"]["ms"]
        regret = planner_ms / best_ms
        regrets.append(regret)
        (fwd if r["pass"] == "fwd" else bwd).append(base_ms / planner_ms)
        print(f"| {r['case']} | {r['pass']} | {r['floor_ms'] * 1e3:.1f} | {base_ms * 1e3:.1f} ({base_name}) "
              f"| {best_ms * 1e3:.1f} ({best_name}) | {base_ms / best_ms:.2f}x "
              f"| {best_ms / r['floor_ms']:.2f} "
              f"| {r['planner_algorithm']} | {planner_ms * 1e3:.1f} | {regret:.2f} |")
    directions = ", ".join(f"{geomean(v):.2f}x {name} ({len(v)} rows)"
                           for name, v in (("forward", fwd), ("backward", bwd)) if v)
    print(f"\nplanner over PyTorch: {directions}; regret geometric mean {geomean(regrets):.3f}, max "
          f"{max(regrets):.2f}, {sum(g > 1.15 for g in regrets)} rows above 1.15")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
