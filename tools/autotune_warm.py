"""Compiles every autotuning candidate of a bench suite in parallel processes (into Triton's disk
cache), so that an autotuned bench then times the candidates without compiling them one after
another (run on the GPU machine; timings taken here are discarded: the processes share the GPU,
each tunes into a throwaway cache).

    python tools/autotune_warm.py --processes 14 && NDCONV_AUTOTUNE=gpu python -m ndconv bench \\
        --algorithm depthwise toeplitz grouped implicit_gemm native cudnn --json autotuned.json

On the H200 machine (16 cores) the public suite's 41 rows warm in 85-118 s; the bench then takes
about 2 minutes (serially, compiling as it goes: more than 10).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import tempfile
import time
import warnings


def _init():
    os.environ["NDCONV_CACHE_DIR"] = tempfile.mkdtemp(prefix="ndconv-warm-")
    os.environ["NDCONV_AUTOTUNE"] = "gpu"
    warnings.simplefilter("ignore")


def _tune(item):
    suite, name, pass_ = item
    from ndconv import planner
    from ndconv.bench import runner, suites

    start = time.perf_counter()
    case = next(c for c in suites.load_suite(suite) if c.name == name)
    try:
        chosen = planner.plan(runner._pass_problem(case.problem("cuda"), pass_)).name
    except Exception as e:  # noqa: BLE001 - reported, the other rows go on
        chosen = f"failed: {type(e).__name__}: {e}"[:200]
    return f"{name} {pass_}: {chosen} ({time.perf_counter() - start:.0f} s)"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--suite", default="public")
    parser.add_argument("--processes", type=int, default=max(1, (os.cpu_count() or 2) - 2))
    args = parser.parse_args()
    from ndconv.bench import suites

    cases = suites.load_suite(args.suite)
    # grouped and depthwise rows compile the most configs: first, so that none starts last
    cases.sort(key=lambda c: c.spec["groups"] == 1)
    items = [(args.suite, c.name, p) for c in cases for p in c.passes]
    start = time.perf_counter()
    with multiprocessing.get_context("spawn").Pool(args.processes, initializer=_init) as pool:
        for line in pool.imap_unordered(_tune, items):
            print(f"{time.perf_counter() - start:5.0f} s  {line}", flush=True)
    print(f"{len(items)} rows warmed in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
