"""Timing and the roofline: medians of many repeats after warm-up (CUDA events on the GPU, a
monotonic clock on the CPU), and the device's measured matmul peak and copy bandwidth."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch

# A GPU-side spin enqueued before each timed call, so the host runs ahead of the GPU and launch
# overhead stays out of the measured interval (about 50 us on a 2 GHz GPU).
_SPIN_CYCLES = 100_000


@dataclass(frozen=True)
class Timing:
    median_ms: float
    p20_ms: float
    p80_ms: float
    repeats: int


def time_fn(fn, arg_sets, device: str, budget_s: float = 0.25, max_repeats: int = 200) -> Timing:
    """Times ``fn(*args)``, cycling through ``arg_sets`` (rotated inputs defeat the L2 cache)."""
    cuda = device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    fn(*arg_sets[0])  # warm-up: compilation, autotuning, allocator
    sync()
    start = time.perf_counter()
    fn(*arg_sets[-1])
    sync()
    estimate = max(time.perf_counter() - start, 1e-6)
    repeats = int(min(max_repeats, max(5, budget_s / estimate)))
    times = []
    for i in range(repeats):
        args = arg_sets[i % len(arg_sets)]
        if cuda:
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(_SPIN_CYCLES)
            begin.record()
            fn(*args)
            end.record()
            times.append((begin, end))
        else:
            t0 = time.perf_counter()
            fn(*args)
            times.append((time.perf_counter() - t0) * 1e3)
    if cuda:
        torch.cuda.synchronize()
        times = [b.elapsed_time(e) for b, e in times]
    q = statistics.quantiles(times, n=5) if len(times) > 1 else times * 4
    return Timing(statistics.median(times), q[0], q[3], repeats)


@dataclass(frozen=True)
class Roofline:
    """Measured ceilings: matmul FLOP/s per dtype name and copy bandwidth in bytes/s."""

    peak_flops: dict
    bandwidth: float

    def floor_ms(self, flops: int, nbytes: int, dtype_key: str) -> float:
        return 1e3 * max(flops / self.peak_flops[dtype_key], nbytes / self.bandwidth)


def dtype_key(dtype: torch.dtype, tf32: bool) -> str:
    return "tf32" if tf32 else str(dtype).removeprefix("torch.")


def measure_roofline(device: str, dtypes=("bfloat16", "float16", "float32", "tf32", "float64")) -> Roofline:
    """Matmul peak per dtype (large square products of random data) and device-to-device copy
    bandwidth (bytes read + written), measured once."""
    cuda = device == "cuda"
    n = 8192 if cuda else 1024
    peaks = {}
    for key in dtypes:
        dtype = torch.float32 if key == "tf32" else getattr(torch, key)
        if cuda and key == "float64":
            size = 4096
        else:
            size = n
        a = torch.randn(size, size, device=device).to(dtype)
        b = torch.randn(size, size, device=device).to(dtype)
        previous = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = key == "tf32"
        try:
            t = time_fn(torch.mm, [(a, b)], device, budget_s=0.2, max_repeats=20)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = previous
        peaks[key] = 2 * size**3 / (t.median_ms * 1e-3)
    nbytes = (1 << 30) if cuda else (1 << 27)
    src = torch.empty(nbytes, dtype=torch.uint8, device=device).random_()
    dst = torch.empty_like(src)
    t = time_fn(dst.copy_, [(src,)], device, budget_s=0.2, max_repeats=20)
    return Roofline(peaks, 2 * nbytes / (t.median_ms * 1e-3))
