"""Times the toeplitz algorithm (banded tensor-core GEMM for depthwise convolutions) on the GPU:
every config is checked against PyTorch in fp32 first, then timed next to PyTorch's fastest
formulation (cuDNN, channels last, cudnn.benchmark) and the CUDA-core `depthwise` kernel.
Prints a table per case, the crossover kernel size, and writes JSON. Never stops on a failing
config; stops starting new work at --budget-s.

    PYTHONPATH=src python3 tools/toeplitz_sweep.py --out $OUT/toeplitz.json
    PYTHONPATH=src python3 tools/toeplitz_sweep.py --cases dw31x31_56 --max-configs 30
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
import traceback
from dataclasses import asdict, replace

import torch

from ndconv import testing
from ndconv.algorithms import REGISTRY, native, toeplitz
from ndconv.algorithms.toeplitz import Config
from ndconv.api import make_problem
from ndconv.bench import runner
from ndconv.bench.timing import time_fn

# (name, x shape, w shape, padding (lo, hi) or int, passes); the most important first. Each case
# and pass gets a share of the time budget (SHARE, default 1) for its configs after the default.
SHARE = {"dw31x31_56": 3, "dw1d_k64_8192": 2, "dw13x13_56": 1.5}
CASES = [
    ("dw31x31_56", (32, 56, 56, 128), (128, 31, 31, 1), 15, ("fwd", "dgrad")),
    ("dw1d_k64_8192", (8, 8192, 512), (512, 64, 1), ([63], [0]), ("fwd", "dgrad")),
    ("dw13x13_56", (32, 56, 56, 256), (256, 13, 13, 1), 6, ("fwd", "dgrad")),
    ("dw7x7_56", (64, 56, 56, 96), (96, 7, 7, 1), 3, ("fwd", "dgrad")),
    ("dw9x9_56", (64, 56, 56, 96), (96, 9, 9, 1), 4, ("fwd",)),
    ("dw5x5_56", (64, 56, 56, 96), (96, 5, 5, 1), 2, ("fwd",)),
    ("dw3x3_56", (64, 56, 56, 96), (96, 3, 3, 1), 1, ("fwd",)),
    ("dw1d_k16_8192", (8, 8192, 512), (512, 16, 1), ([15], [0]), ("fwd",)),
    ("dw31x31_28_fp16", (32, 28, 28, 256), (256, 31, 31, 1), 15, ("fwd",)),
]
L2_BYTES = 60 << 20


def log(*args):
    print(*args, flush=True)


def sweep_configs(p, limit: int) -> list[Config]:
    """The default, then one change at a time around it (tile, window step, rows, channels,
    warps, stages), then the algorithm's own search space: at most ``limit``."""
    base = toeplitz.default_config(p)
    out = [base]
    a = toeplitz.band_axis(p)
    tiles = [tw for tw in toeplitz.TILE_WIDTHS
             if toeplitz._window(p, tw) <= toeplitz.MAX_WINDOW and tw < 2 * p.out_spatial[a] + 16]
    variants = [replace(base, tile_w=tw) for tw in tiles]
    variants += [replace(base, tile_w=tw, num_stages=1) for tw in tiles]  # plain loads: L1 reuse across taps
    variants += [replace(base, block_k=bk) for bk in (16, 32, 64)]
    variants += [replace(base, block_m=bm) for bm in (64, 256) if bm * base.tile_w <= 16384]
    variants += [replace(base, num_warps=w) for w in (4, 8)]
    variants += [replace(base, num_stages=s) for s in (2, 4)]
    variants += [replace(base, num_stages=1, block_m=bm, num_warps=w) for bm in (64, 256) for w in (4, 8)]
    variants += toeplitz.configs(p)
    for c in variants:
        if c not in out:
            out.append(c)
    return out[:limit]


def compiled_info(before: set) -> list[dict]:
    """Registers, spills, shared memory and MMA kind of the toeplitz kernels compiled since."""
    from ndconv.algorithms.toeplitz_kernels import toeplitz_fwd_kernel

    out = []
    for cache in getattr(toeplitz_fwd_kernel, "device_caches", {}).values():  # none in the interpreter
        for key, kernel in cache[0].items():
            if key in before:
                continue
            ptx = kernel.asm.get("ptx", "")
            # a kernel compiled but never loaded (its launch failed) has no register counts
            out.append({"n_regs": getattr(kernel, "n_regs", None),
                        "n_spills": getattr(kernel, "n_spills", None),
                        "shared": kernel.metadata.shared,
                        "wgmma": "wgmma.mma_async" in ptx, "mma_sync": "mma.sync" in ptx})
    return out


def cache_keys() -> set:
    from ndconv.algorithms.toeplitz_kernels import toeplitz_fwd_kernel

    return {k for cache in getattr(toeplitz_fwd_kernel, "device_caches", {}).values() for k in cache[0]}


def measure(fn, sets, check, budget_s=0.1, device="cuda") -> dict:
    """Checks ``fn`` on the first set, then times it (median ms); never raises."""
    try:
        result = fn(*sets[0])
        if device == "cuda":
            torch.cuda.synchronize()
        report = check(result)
    except Exception as e:  # noqa: BLE001 (a config that does not compile or launch is reported)
        return {"error": f"{type(e).__name__}: {e}"[:400]}
    if not report.ok:
        return {"wrong": str(report)}
    if device != "cuda":  # --smoke: checked, not timed (the interpreter's times mean nothing)
        return {"ms": 1.0, "max_rel_err": report.max_rel_err}
    try:
        t = time_fn(fn, sets, device, budget_s=budget_s, max_repeats=100)
    except Exception as e:  # noqa: BLE001
        return {"error": f"timing: {type(e).__name__}: {e}"[:400]}
    return {"ms": t.median_ms, "p20_ms": t.p20_ms, "p80_ms": t.p80_ms, "max_rel_err": report.max_rel_err}


def run_case(name, x_shape, w_shape, padding, pass_, dtype, args, deadline) -> dict:
    device = args.device
    p = make_problem(x_shape, w_shape, padding=padding, groups=x_shape[-1], dtype=dtype, device=device)
    q = p if pass_ == "fwd" else p.dgrad()
    row = {"case": name, "pass": pass_, "problem": str(q), "useful_gflop": q.flops / 1e9,
           "min_mb": q.min_bytes / 1e6}
    a0, b0 = testing.random_operands(q, seed=0, device=device)
    n_sets = max(1, min(6, math.ceil(3 * L2_BYTES / (a0.numel() * a0.element_size()))))
    sets = [(a0, b0)] + [testing.random_operands(q, seed=s, device=device) for s in range(1, n_sets)]
    # the reference: PyTorch in fp32 on the same operands (TF32 off)
    q32 = replace(q, dtype=torch.float32, allow_tf32=False)
    ref = testing.run_algorithm("native", q32, a0.float(), b0.float()).double()
    tol = testing.tolerance(q)
    row["tolerance"] = tol

    def check(result):
        return testing.compare(result, ref, tol)

    # PyTorch: each formulation, the fastest correct one is the baseline
    row["pytorch"] = {}
    for f in native.formulations(p, pass_):
        prepared = [f.prepare(a, b) for a, b in sets]
        row["pytorch"][f.name] = measure(
            f.run, prepared, lambda r, f=f: check(runner.baseline_natural(p, pass_, f, r)), 0.2, device)
    timed = {k: v["ms"] for k, v in row["pytorch"].items() if "ms" in v}
    row["pytorch_ms"] = min(timed.values()) if timed else None

    def algorithm(module, config):
        def fn(a, b):
            out = torch.empty(q.result_shape, dtype=q.dtype, device=device)
            module.run(q, *q.views(a, b, out), config)
            return out
        return fn

    dw = REGISTRY["depthwise"]
    row["depthwise"] = measure(algorithm(dw, dw.default_config(q)), sets, check, device=device)
    ok, reason = toeplitz.supports(q)
    row["toeplitz_supported"] = reason
    row["toeplitz"] = []
    if ok:
        for i, config in enumerate(sweep_configs(q, args.max_configs)):
            if time.monotonic() > deadline and i > 0:
                row["toeplitz"].append({"config": asdict(config), "skipped": "time budget"})
                continue
            before = cache_keys()
            result = measure(algorithm(toeplitz, config), sets, check, device=device)
            result["config"] = asdict(config)
            result["default"] = i == 0
            result["compiled"] = compiled_info(before)
            row["toeplitz"].append(result)
    timed = [r for r in row["toeplitz"] if "ms" in r]
    row["toeplitz_default_ms"] = next((r["ms"] for r in timed if r["default"]), None)
    best = min(timed, key=lambda r: r["ms"]) if timed else None
    row["toeplitz_best_ms"] = best["ms"] if best else None
    row["toeplitz_best_config"] = best["config"] if best else None
    return row


def print_row(row):
    def ms(v):
        return f"{v:9.4f}" if v else "        -"

    dw = row["depthwise"].get("ms")
    base = row["pytorch_ms"]
    best = row["toeplitz_best_ms"]
    log(f"{row['case']:18} {row['pass']:5} pytorch {ms(base)}  depthwise {ms(dw)}  "
        f"toeplitz default {ms(row['toeplitz_default_ms'])} best {ms(best)}"
        + (f"  x{base / best:.2f} vs pytorch, x{dw / best:.2f} vs depthwise" if best and base and dw else ""))
    for r in row["toeplitz"]:
        c = r["config"]
        what = (f"{r['ms']:.4f} ms" if "ms" in r else r.get("wrong") or r.get("error") or r.get("skipped"))
        regs = r.get("compiled") or []
        info = " ".join(f"regs={k['n_regs']} spills={k['n_spills']} smem={k['shared']} "
                        f"{'wgmma' if k['wgmma'] else 'mma.sync' if k['mma_sync'] else 'fma'}" for k in regs)
        log(f"    tw={c['tile_w']:3} bk={c['block_k']:2} bm={c['block_m']:3} "
            f"w={c['num_warps']} s={c['num_stages']}  {str(what)[:140]}  {info}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="toeplitz.json")
    parser.add_argument("--cases", nargs="+", help="case names (default: all)")
    parser.add_argument("--max-configs", type=int, default=14, help="toeplitz configs per case and pass")
    parser.add_argument("--budget-s", type=float, default=140.0,
                        help="seconds for the config sweeps, shared among the cases "
                             "(default configs always run)")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny shapes on the CPU in Triton's interpreter (TRITON_INTERPRET=1): "
                             "checks the script")
    args = parser.parse_args()
    args.device = "cpu" if args.smoke else "cuda"
    if not args.smoke and not torch.cuda.is_available():
        log("needs a CUDA GPU (or --smoke with TRITON_INTERPRET=1)")
        return 1
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    start = time.monotonic()
    deadline = start + args.budget_s
    env = {"gpu": "cpu (smoke)" if args.smoke else torch.cuda.get_device_name(),
           "torch": torch.__version__, "python": platform.python_version()}
    try:
        import triton
        env["triton"] = triton.__version__
    except ImportError:
        pass
    log(f"toeplitz sweep on {env}")
    rows = []
    todo = [(case, pass_) for case in CASES for pass_ in case[4] if not args.cases or case[0] in args.cases]
    for i, ((name, x_shape, w_shape, padding, _), pass_) in enumerate(todo):
        share = SHARE.get(name, 1) / sum(SHARE.get(c[0], 1) for c, _ in todo[i:])
        case_deadline = time.monotonic() + max(0.0, deadline - time.monotonic()) * share
        dtype = torch.float16 if name.endswith("_fp16") else torch.bfloat16
        if args.smoke:  # one image, a few channels, short axes
            x_shape = (1, *(min(s, 24) for s in x_shape[1:-1]), 4)
            w_shape = (4, *(min(k, 11) for k in w_shape[1:-1]), 1)  # depthwise is slow there
            k = w_shape[-2]
            padding = k // 2 if isinstance(padding, int) else ([k - 1], [0])
        if time.monotonic() > deadline + 20:  # the defaults of later cases still run, briefly
            rows.append({"case": name, "pass": pass_, "skipped": "time budget"})
            log(f"{name} {pass_}: skipped (time budget)")
            continue
        try:
            row = run_case(name, x_shape, w_shape, padding, pass_, dtype, args, case_deadline)
        except Exception as e:  # noqa: BLE001 (a case that fails as a whole, e.g. out of memory, is reported)
            row = {"case": name, "pass": pass_, "error": f"{type(e).__name__}: {e}"[:400],
                   "traceback": traceback.format_exc()[-2000:]}
            log(f"{name} {pass_}: {row['error']}")
        else:
            print_row(row)
        row["seconds"] = time.monotonic() - start
        rows.append(row)
        if not args.smoke:
            torch.cuda.empty_cache()
        with open(args.out, "w") as f:  # after every row: a killed run keeps what it measured
            json.dump({"env": env, "rows": rows}, f, indent=1)
    log("\nsummary (ms):")
    crossover = []
    for row in rows:
        if "pytorch_ms" not in row:
            continue
        dw, best = row["depthwise"].get("ms"), row["toeplitz_best_ms"]
        log(f"  {row['case']:18} {row['pass']:5} pytorch {row['pytorch_ms'] or float('nan'):8.4f}  "
            f"depthwise {dw or float('nan'):8.4f}  "
            f"toeplitz {row['toeplitz_default_ms'] or float('nan'):8.4f} "
            f"(best {best or float('nan'):8.4f})")
        if dw and best and row["case"].startswith("dw") and "x" in row["case"][2:5] and row["pass"] == "fwd":
            crossover.append((int(row["case"][2:].split("x")[0]), best < dw))
    wins = sorted(k for k, won in crossover if won)
    log(f"toeplitz beats depthwise (fwd, 2-D) from kernel {wins[0] if wins else 'none'}: {sorted(crossover)}")
    log(f"total {time.monotonic() - start:.0f} s; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
