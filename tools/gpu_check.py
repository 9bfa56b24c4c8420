"""GPU tests on real shapes (run on the H200, not in CI): every Triton algorithm on the public
suite's cases (or another suite's) in fp16, bf16 and fp32 and all their passes against the
float64 reference (on a slice where the full case is too big), the shared tiny case list on
CUDA, a convolution whose operands exceed 2**31 elements, and what the compiler made of the
kernels (wgmma, registers, spills).

    PYTHONPATH=src python3 tools/gpu_check.py [--out DIR] [--algorithms implicit_gemm ...]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from ndconv import autograd, testing
from ndconv.algorithms import REGISTRY
from ndconv.bench import runner, suites


def check_pass(name, q, seed=0):
    a, b = testing.random_operands(q, seed)
    ref, take, where = runner._reference_slice(q, a, b, "cuda")
    out = testing.run_algorithm(name, q, a, b)
    return testing.compare(take(out), ref, testing.tolerance(q)), where


def suite_checks(names, dtypes, log, only=None, suite="public"):
    rows = []
    for case in suites.load_suite(suite):
        if only and case.name not in only:
            continue
        for dtype in dtypes:
            spec = dict(case.spec, dtype=dtype)
            p = suites.BenchCase(case.name, case.model, spec).problem("cuda")
            for pass_ in case.passes:
                q = p if pass_ == "fwd" else getattr(p, pass_)()
                for name in names:
                    ok, reason = REGISTRY[name].supports(q)
                    if not ok:
                        continue
                    t = time.perf_counter()
                    report, where = check_pass(name, q)
                    rows.append(dict(case=case.name, pass_=pass_, dtype=dtype, algorithm=name, ok=report.ok,
                                     report=str(report), checked_on=where, seconds=time.perf_counter() - t))
                    log(f"{'ok  ' if report.ok else 'FAIL'} {case.name:18} {pass_:5} {dtype:8} {name:14} "
                        f"{report} [{where}]")
    return rows


def tiny_checks(names, log):
    rows = []
    for case in testing.CASES:
        for dtype in (torch.bfloat16, torch.float32):
            p = case.problem(dtype=dtype, device="cuda")
            for q in (p, p.dgrad(), p.wgrad()):
                for name in names:
                    if not REGISTRY[name].supports(q)[0]:
                        continue
                    report = testing.check(name, q, seed=1)
                    rows.append(dict(case=case.name, pass_=q.pass_, dtype=str(dtype), algorithm=name,
                                     ok=report.ok, report=str(report)))
                    if not report.ok:
                        log(f"FAIL tiny {case.name} {q.pass_} {dtype} {name}: {report}")
    log(f"tiny cases on CUDA: {sum(r['ok'] for r in rows)}/{len(rows)} passed")
    return rows


def large_check(name, log):
    """A 3x3 convolution whose input has more than 2**31 elements: the last rows of the last
    image (offsets beyond 2**31) against the float64 reference of that slice, and the weight
    gradient against PyTorch's (cuDNN, fp32) since a float64 reference of it would not fit."""
    from ndconv.api import make_problem

    N, H, W, C, O = 4, 4096, 4096, 40, 16  # x: 2.7e9 elements (5.4 GB bf16), 80-byte rows: TMA on sm_90
    p = make_problem((N, H, W, C), (O, 3, 3, C), dtype=torch.bfloat16, device="cuda", padding=1)
    from ndconv.algorithms import implicit_gemm

    log(f">2^31 elements: TMA path {implicit_gemm.tma_reason(p) or 'taken'} (forward), "
        f"{implicit_gemm.tma_reason(p.wgrad()) or 'taken'} (weight gradient)")
    x, w = testing.random_operands(p, seed=5)
    y = autograd.run(p, x, w, name)
    rows = 4
    xs = x[-1:, H - rows:]
    ps = make_problem(xs.shape, w.shape, dtype=torch.bfloat16, device="cuda", padding=([0, 1], [1, 1]))
    ref = testing.reference_result(ps, xs, w)
    fwd = testing.compare(y[-1:, H - rows + 1:], ref, testing.tolerance(p))
    log(f"{'ok  ' if fwd.ok else 'FAIL'} >2^31 elements fwd ({x.numel():.3g} input elements): {fwd}")
    dy = torch.randn(p.out_shape, device="cuda", dtype=torch.bfloat16) / 1000
    dw = autograd.run(p.wgrad(), x, dy, name)
    ref_dw = torch.ops.aten.convolution_backward(
        dy.permute(0, 3, 1, 2).float(), x.permute(0, 3, 1, 2).float(), w.permute(0, 3, 1, 2).float(),
        None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [False, True, False])[1].permute(0, 2, 3, 1)
    wgrad = testing.compare(dw, ref_dw.double(), 2e-2)
    log(f"{'ok  ' if wgrad.ok else 'FAIL'} >2^31 elements wgrad vs cuDNN fp32: {wgrad}")
    return dict(fwd=str(fwd), fwd_ok=fwd.ok, wgrad=str(wgrad), wgrad_ok=wgrad.ok)


def compiled_kernels(log):
    """Registers, spills, shared memory and what the PTX uses (wgmma, cp.async, vector loads,
    barriers), per compiled Triton kernel of every ndconv kernel module (what this process has
    compiled so far), with the element types of its pointers and tensor descriptors."""
    import importlib
    import pkgutil
    import re

    import triton

    from ndconv import algorithms

    out = []
    for info in pkgutil.iter_modules(algorithms.__path__):
        if not info.name.endswith(("_kernels", "kernel_utils")):
            continue
        module = importlib.import_module(f"ndconv.algorithms.{info.name}")
        for fn in vars(module).values():
            if not isinstance(fn, triton.runtime.jit.JITFunction) or fn.__module__ != module.__name__:
                continue
            for cache in fn.device_caches.values():
                for kernel in cache[0].values():
                    ptx = kernel.asm.get("ptx", "")
                    meta = kernel.metadata
                    signature = getattr(kernel.src, "signature", {})
                    dtypes = sorted({t for v in signature.values()
                                     for t in re.findall(r"(?:\*|tensordesc<)(\w+)", str(v))})
                    out.append(dict(kernel=f"{info.name}.{fn.__name__}", dtypes=dtypes,
                                    num_warps=meta.num_warps,
                                    num_stages=meta.num_stages, n_regs=kernel.n_regs,
                                    n_spills=kernel.n_spills, shared=meta.shared,
                                    wgmma="wgmma.mma_async" in ptx, mma="mma.sync" in ptx,
                                    cp_async="cp.async" in ptx, ld_v4=ptx.count("ld.global.v4"),
                                    bar_sync=ptx.count("bar.sync")))
    n_wgmma = sum(k["wgmma"] for k in out)
    spills = [k for k in out if k["n_spills"]]
    log(f"compiled kernels: {len(out)}, with wgmma: {n_wgmma}, with mma.sync only: "
        f"{sum(k['mma'] and not k['wgmma'] for k in out)}, spilling: {len(spills)}")
    for k in spills:
        log(f"  spills {k['n_spills']:4d}: {k['kernel']} ({'/'.join(k['dtypes'])}, {k['num_warps']} warps, "
            f"{k['n_regs']} registers, {k['shared']} B shared)")
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=".")
    parser.add_argument("--algorithms", nargs="+",
                        default=[n for n in REGISTRY if n not in ("reference", "gemm")])
    parser.add_argument("--skip-large", action="store_true")
    parser.add_argument("--skip-tiny", action="store_true")
    parser.add_argument("--suite", default="public", help="public, stems, or a JSON file of cases")
    parser.add_argument("--cases", nargs="+", help="the suite's cases to check (default: all)")
    parser.add_argument("--dtypes", nargs="+", default=["float16", "float32"])
    args = parser.parse_args()
    out = Path(args.out)
    lines = []

    def log(s):
        print(s, flush=True)
        lines.append(s)

    props = torch.cuda.get_device_properties(0)
    log(f"{props.name}, torch {torch.__version__}, date {time.strftime('%Y-%m-%d')}")
    result = {}
    if not args.skip_large and "implicit_gemm" in args.algorithms:
        result["large"] = large_check("implicit_gemm", log)
    result["tiny"] = [] if args.skip_tiny else tiny_checks(args.algorithms, log)
    result["suite"] = suite_checks(args.algorithms, args.dtypes, log, args.cases, args.suite)
    result["kernels"] = compiled_kernels(log)
    failures = [r for r in result["tiny"] + result["suite"] if not r["ok"]]
    if "large" in result and not (result["large"]["fwd_ok"] and result["large"]["wgrad_ok"]):
        failures.append(result["large"])
    log(f"{len(failures)} failure(s)")
    (out / "gpu_check.json").write_text(json.dumps(result, indent=1))
    (out / "gpu_check.txt").write_text("\n".join(lines) + "\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
