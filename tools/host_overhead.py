"""Host time per call of tiny cached convolutions: ndconv's path to the kernel next to
PyTorch's own (the kernels are so small that the host is the bottleneck, so the time per call
is the enqueue rate), with a cProfile of the calls when asked. On CUDA it also checks that a
call captured in a CUDA graph replays correctly.

    PYTHONPATH=src python tools/host_overhead.py [--device cuda] [--profile]
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


def per_call_us(fn, device, calls=2000, repeats=15) -> tuple[float, float]:
    """(min, median) over ``repeats`` of the mean time of ``calls`` calls, in microseconds."""
    for _ in range(200):
        fn()
    times = []
    for _ in range(repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) / calls * 1e6)
    return min(times), statistics.median(times)


def rows(device: str) -> dict:
    """Tiny channels-last problems (bf16 on CUDA), one per algorithm family."""
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    x = torch.randn(1, 8, 8, 16, device=device, dtype=dtype)
    w = torch.randn(16, 3, 3, 16, device=device, dtype=dtype)
    wd = torch.randn(16, 3, 3, 1, device=device, dtype=dtype)
    xt, wt = x.permute(0, 3, 1, 2), w.permute(0, 3, 1, 2)
    out = {
        "F.conv2d (PyTorch alone)": lambda: F.conv2d(xt, wt, padding=1),
        "ndconv.conv2d, planner's choice": lambda: ndconv.conv2d(x, w, 1, 1),
        "ndconv.conv_general, planner's choice": lambda: ndconv.conv_general(x, w, 1, 1),
        "ndconv.conv2d, algorithm=native": lambda: ndconv.conv2d(x, w, 1, 1, algorithm="native"),
    }
    if device == "cuda":
        import triton

        @triton.jit
        def touch(x_ptr):
            pass

        out["bare Triton launch, kernel[grid](x)"] = lambda: touch[(1,)](x)
        out["ndconv.conv2d, algorithm=implicit_gemm"] = (
            lambda: ndconv.conv2d(x, w, 1, 1, algorithm="implicit_gemm"))
        out["ndconv.conv2d depthwise, algorithm=depthwise"] = (
            lambda: ndconv.conv2d(x, wd, 1, 1, groups=16, algorithm="depthwise"))
        wg = w[:, :, :, :4].contiguous()
        wgt = wg.permute(0, 3, 1, 2)
        out["F.conv2d grouped (4 groups)"] = lambda: F.conv2d(xt, wgt, padding=1, groups=4)
        # the direct kernel (grouped.host_bound)
        out["ndconv.conv2d grouped (4 groups), planner's choice"] = (
            lambda: ndconv.conv2d(x, wg, 1, 1, groups=4))
        out["ndconv.conv2d grouped (4 groups), algorithm=native"] = (
            lambda: ndconv.conv2d(x, wg, 1, 1, groups=4, algorithm="native"))
        xs = torch.randn(1, 32, 32, 3, device=device, dtype=dtype)  # an RGB stem: space-to-depth copies
        ws = torch.randn(16, 7, 7, 3, device=device, dtype=dtype)
        xst, wst = xs.permute(0, 3, 1, 2), ws.permute(0, 3, 1, 2)
        out["F.conv2d 7x7 stride-2 RGB stem"] = lambda: F.conv2d(xst, wst, stride=2, padding=3)
        out["ndconv.conv2d 7x7 stride-2 RGB stem, implicit_gemm"] = (
            lambda: ndconv.conv2d(xs, ws, 2, 3, algorithm="implicit_gemm"))
        w3 = torch.randn(16, 3, 3, 3, device=device, dtype=dtype)  # a 3x3 one: the stem kernel's two copies
        w3t = w3.permute(0, 3, 1, 2)
        out["F.conv2d 3x3 RGB stem"] = lambda: F.conv2d(xst, w3t, padding=1)
        out["ndconv.conv2d 3x3 RGB stem, algorithm=stem"] = (
            lambda: ndconv.conv2d(xs, w3, 1, 1, algorithm="stem"))
        # the planner keeps a stem this small off the stem kernel (planner._host_bound)
        out["ndconv.conv2d 3x3 RGB stem, planner's choice"] = lambda: ndconv.conv2d(xs, w3, 1, 1)
    return out


def graph_check(device: str) -> None:
    """Convolutions captured in a CUDA graph (after a warm-up call) replay to the same result:
    bound launches, and the paths that build their launch per call (a strided RGB stem over
    its space-to-depth copy, a transposed convolution's output phases)."""
    cases = [  # (name, x shape, w shape, function, kwargs)
        ("implicit_gemm", (2, 8, 8, 16), (16, 3, 3, 16), ndconv.conv2d,
         dict(padding=1, algorithm="implicit_gemm")),
        ("depthwise", (2, 8, 8, 16), (16, 3, 3, 1), ndconv.conv2d,
         dict(padding=1, groups=16, algorithm="depthwise")),
        ("planner", (2, 8, 8, 16), (16, 3, 3, 16), ndconv.conv2d, dict(padding=1)),
        ("implicit_gemm, 7x7 stride-2 RGB stem", (2, 32, 32, 3), (16, 7, 7, 3), ndconv.conv2d,
         dict(stride=2, padding=3, algorithm="implicit_gemm")),
        ("implicit_gemm, stride-2 transposed", (2, 8, 8, 16), (16, 3, 3, 16), ndconv.conv_transpose2d,
         dict(stride=2, padding=1, output_padding=1, algorithm="implicit_gemm")),
        ("stem, 3x3 RGB", (2, 32, 32, 3), (16, 3, 3, 3), ndconv.conv2d, dict(padding=1, algorithm="stem")),
    ]
    for name, x_shape, w_shape, conv, kwargs in cases:
        x = torch.randn(x_shape, device=device, dtype=torch.bfloat16)
        w = torch.randn(w_shape, device=device, dtype=torch.bfloat16)
        expected = conv(x, w, **kwargs)  # the warm-up call
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.stream(stream), torch.cuda.graph(graph):
                y = conv(x, w, **kwargs)
        except RuntimeError as e:
            print(f"CUDA graph capture, {name}: FAILED ({str(e)[:120]})")
            continue
        torch.cuda.current_stream().wait_stream(stream)
        x.copy_(torch.randn_like(x))
        graph.replay()
        torch.cuda.synchronize()
        fresh = conv(x, w, **kwargs)
        same = torch.equal(y, fresh) and not torch.equal(y, expected)
        print(f"CUDA graph capture, {name}: {'replays correctly' if same else 'WRONG'}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    if args.device == "cpu":
        torch.set_num_threads(1)  # a loaded machine's thread stalls would swamp the microseconds
    with torch.no_grad():
        for name, fn in rows(args.device).items():
            lo, med = per_call_us(fn, args.device)
            print(f"{name:52} {lo:7.1f} us/call (median {med:.1f})")
    x = torch.randn(1, 8, 8, 16, device=args.device)
    w = torch.randn(16, 3, 3, 16, device=args.device, requires_grad=True)
    lo, med = per_call_us(lambda: ndconv.conv_general(x, w, 1, 1), args.device)
    print(f"{'ndconv.conv_general fp32, w needs grad':52} {lo:7.1f} us/call (median {med:.1f})")
    # a training step's convolution: forward, then both gradients
    xg, dy = x.clone().requires_grad_(), torch.randn(1, 8, 8, 16, device=args.device)
    xt, wt, dyt = (t.detach().movedim(-1, 1).requires_grad_() for t in (x, w, dy))
    steps = {
        "F.conv2d forward + backward (x, w need grad)": lambda: F.conv2d(xt, wt, padding=1).backward(dyt),
        "ndconv.conv_general forward + backward": lambda: ndconv.conv_general(xg, w, 1, 1).backward(dy),
    }
    for name, fn in steps.items():
        lo, med = per_call_us(fn, args.device, calls=500)
        print(f"{name:52} {lo:7.1f} us/call (median {med:.1f})")
    if args.device == "cuda":
        graph_check(args.device)
    if args.profile:  # the planner's path, then each Triton algorithm's, on the first row's problem
        dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
        x, w = x.to(dtype), w.detach().to(dtype)
        for name in (None, "implicit_gemm", "native") if args.device == "cuda" else (None,):
            with torch.no_grad():
                ndconv.conv_general(x, w, 1, 1, algorithm=name)
                profile = cProfile.Profile()
                profile.enable()
                for _ in range(2000):
                    ndconv.conv_general(x, w, 1, 1, algorithm=name)
                profile.disable()
            print(f"profile of 2000 calls, algorithm={name or 'the planner' + chr(39) + 's choice'}")
            pstats.Stats(profile).sort_stats("tottime").print_stats(14)


if __name__ == "__main__":
    main()
