"""Timing and the roofline: medians of many repeats after warm-up (CUDA events on the GPU, a
monotonic clock on the CPU), and the device's measured matmul peak and copy bandwidth."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch

# Before each timed call a GPU-side spin, longer than the call's host time, lets the host run
# ahead so that launch overhead stays out of the measured interval (GPU time only; the host time
# per call is reported separately). Cycles per second of the spin (an approximate SM clock):
_SPIN_HZ = 2.0e9


@dataclass(frozen=True)
class Timing:
    median_ms: float
    p20_ms: float
    p80_ms: float
    repeats: int
    host_us: float  # host time to issue one call (median)


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
    host = []
    for args in arg_sets[:3]:
        t0 = time.perf_counter()
        fn(*args)
        host.append(time.perf_counter() - t0)
    host_s = statistics.median(host)
    sync()
    spin = int((2 * host_s + 20e-6) * _SPIN_HZ)
    times = []
    for i in range(repeats):
        args = arg_sets[i % len(arg_sets)]
        if cuda:
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(spin)
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
    return Timing(statistics.median(times), q[0], q[3], repeats, host_s * 1e6)


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
    n = 8192 if cuda else 2048
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
