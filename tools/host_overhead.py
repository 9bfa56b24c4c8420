"""Host time per call of a tiny cached convolution on the CPU (PyTorch's own convolution does
the work, so the rest is ndconv's overhead), with a cProfile of the calls when asked.

    PYTHONPATH=src python tools/host_overhead.py [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import time

import torch
import torch.nn.functional as F

import ndconv


def per_call_us(fn, calls=2000, repeats=15) -> tuple[float, float]:
    """(min, median) over ``repeats`` of the mean time of ``calls`` calls, in microseconds."""
    for _ in range(200):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t0) / calls * 1e6)
    return min(times), statistics.median(times)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)  # a loaded machine's thread stalls would swamp the microseconds
    x, w = torch.randn(1, 4, 4, 2), torch.randn(2, 3, 3, 2)
    xt, wt = x.movedim(-1, 1), w.movedim(-1, 1)
    rows = {
        "ndconv.conv_general, no grad": lambda: ndconv.conv_general(x, w, 1, 1),
        "ndconv.conv2d, no grad": lambda: ndconv.conv2d(x, w, 1, 1),
        "F.conv2d (PyTorch alone)": lambda: F.conv2d(xt, wt, padding=1),
    }
    with torch.no_grad():
        for name, fn in rows.items():
            lo, med = per_call_us(fn)
            print(f"{name:32} {lo:7.1f} us/call (median {med:.1f})")
    w.requires_grad_(True)
    lo, med = per_call_us(lambda: ndconv.conv_general(x, w, 1, 1))
    print(f"{'ndconv.conv_general, w needs grad':32} {lo:7.1f} us/call (median {med:.1f})")
    if args.profile:
        with torch.no_grad():
            profile = cProfile.Profile()
            profile.enable()
            for _ in range(2000):
                ndconv.conv_general(x, w.detach(), 1, 1)
            profile.disable()
        pstats.Stats(profile).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
