"""The TMA implicit GEMM on the dense public-suite cases: correctness first, then a focused sweep
of its tiles next to PyTorch (cuDNN, channels last, cudnn.benchmark) and the gather path.

    PYTHONPATH=src python3 tools/tma_sweep.py --out $OUT/tma.json      # on the H200, ~5 minutes
    PYTHONPATH=src python3 tools/tma_sweep.py --tiny                   # CPU smoke test (interpreter)

Every result is checked against the float64 reference (the bench's slice of it for large cases)
before it is timed; a wrong or failing config is reported and skipped, never fatal. Times are
GPU medians of CUDA events after warm-up (ndconv.bench.timing), inputs rotated past the L2. The
JSON is rewritten after every case, so a run cut short keeps what it measured. Past the time
budget the remaining TMA configs are skipped (the baselines are still measured).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import time

if "--tiny" in sys.argv:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402

from ndconv import testing  # noqa: E402
from ndconv.algorithms import implicit_gemm as ig  # noqa: E402
from ndconv.algorithms import native  # noqa: E402
from ndconv.bench import runner, suites  # noqa: E402
from ndconv.bench.timing import time_fn  # noqa: E402

# (case, pass) in priority order: the dense forward targets of issue 4 first
CASES = [
    ("r50_3x3_56", "fwd"), ("r50_3x3_28", "fwd"), ("r50_3x3_14", "fwd"), ("r50_3x3_7", "fwd"),
    ("r50_1x1_56", "fwd"), ("unet_3x3_64", "fwd"), ("unet_3x3_64_fp16", "fwd"), ("vae_3x3_256", "fwd"),
    ("dilated3x3_d2", "fwd"), ("conv3d_3x3x3", "fwd"), ("conv3d_causal_vae", "fwd"), ("conv1d_k3_80", "fwd"),
    ("r50_3x3_14_fp32", "fwd"),
    ("r50_3x3_56", "dgrad"), ("r50_3x3_14", "dgrad"), ("r50_1x1_56", "dgrad"), ("conv3d_3x3x3", "dgrad"),
    ("convT_3x3s2", "fwd"), ("convT_4x4s2", "fwd"),
    ("r50_3x3_56", "wgrad"), ("r50_3x3_14", "wgrad"), ("r50_1x1_56", "wgrad"), ("conv3d_3x3x3", "wgrad"),
]
# extra output boxes (box_h, box_w) tried with the heuristic's tile on 2-D problems
BOXES = ((8, 16), (16, 16), (4, 32))


def label(c: ig.Config) -> str:
    tiles = f"{c.block_m}x{c.block_n}x{c.block_k} w{c.num_warps} s{c.num_stages}"
    return tiles + (f" box {f'{c.box_h}x{c.box_w}' if c.box_w else 'auto'}"
                    f"{' tma-store' if c.tma_store else ''}"
                    f"{f' persistent {c.persistent}/SM' if c.persistent else ''}" if c.tma else "")


def candidates(q, max_configs: int) -> list[ig.Config]:
    if q.pass_ == "wgrad":
        return ig.tma_wgrad_configs(q)[:max_configs]
    out = ig.tma_configs(q)[:max_configs]
    if q.c_per_group % 64:  # the last channel block is partly zero-filled: other steps
        out += [dataclasses.replace(out[0], block_k=bk) for bk in (16, 32, 64)
                if bk != out[0].block_k and (bk * q.dtype.itemsize <= 128)]
    if not out[0].tma_store:
        out.append(dataclasses.replace(out[0], tma_store=True))
    if q.ndim == 2:
        base = out[0]
        for h, w in BOXES:
            if h * w <= base.block_m:
                out.append(dataclasses.replace(base, box_h=h, box_w=w))
    return out


def measure(fn, sets, check, device: str, budget_s: float) -> dict:
    """Checks ``fn`` on the first operand set, then times it; failures are returned, not raised."""
    try:
        report = check(fn(*sets[0]))
        if not report.ok:
            return {"wrong": str(report)}
        t = time_fn(fn, sets, device, budget_s=budget_s)
    except Exception as e:  # a config that does not compile or run is reported, not fatal
        return {"error": f"{type(e).__name__}: {e}"[:300]}
    return {"ms": t.median_ms, "p20_ms": t.p20_ms, "p80_ms": t.p80_ms, "repeats": t.repeats,
            "max_rel_err": report.max_rel_err}


def tiny(p):
    """A small problem of the same kind (for --tiny): batch 2, spatial sizes at most 6,
    channels 16 or 32, the same kernel, pads, dilation and dtype."""
    C, O = min(p.in_channels, 32), min(p.out_channels, 32)
    x = (2, *(min(s, 6) for s in p.in_spatial), C)
    w = (O, *p.kernel, C)
    p2 = dataclasses.replace(p, x_shape=x, w_shape=w, device="cpu")
    return p2 if all(s >= 1 for s in p2.out_spatial) else None


def sweep_case(case, pass_, device, args, deadline, log) -> dict:
    p = case.problem(device)
    if args.tiny:
        p = tiny(p)
    q = runner._pass_problem(p, pass_)
    row = {"case": case.name, "pass": pass_, "problem": str(q), "flops": q.flops}
    reason = ig.tma_reason(q)
    if reason:
        row["tma_refused"] = reason
        log(f"{case.name} {pass_}: the TMA path refuses it: {reason}")
        return row
    sets = testing.operand_sets(q, 0, device)
    ref, take, checked_on = runner._reference_slice(q, *sets[0], device)
    tol = testing.tolerance(q)
    row["checked_on"] = checked_on

    def check(result):
        return testing.compare(take(result), ref, tol)

    def report(name, m):
        shown = f"{1e3 * m['ms']:8.1f} us" if "ms" in m else m.get("wrong") or m.get("error")
        log(f"  {name:42} {shown}")

    log(f"{case.name} {pass_}: {q}")
    baselines = {}
    for f in native.formulations(p, pass_):
        def check_baseline(result, f=f):
            return check(runner.baseline_natural(p, pass_, f, result))

        prepared = [f.prepare(a, b) for a, b in sets]
        baselines[f.name] = measure(f.run, prepared, check_baseline, device, args.repeat_budget)
        report(f"PyTorch {f.name}", baselines[f.name])
    row["pytorch"] = baselines
    timed = {k: v["ms"] for k, v in baselines.items() if "ms" in v}
    row["pytorch_ms"] = min(timed.values()) if timed else None

    gather_config = ig.gather_wgrad_config(q) if q.pass_ == "wgrad" else ig.gather_config(q)
    run_tma_path = ig.tma_runner(q)

    def gather(a, b):
        out = torch.empty(q.result_shape, dtype=q.dtype, device=device)
        ig.run(q, *q.views(a, b, out), gather_config)
        return out

    row["gather_config"] = repr(gather_config)
    row["gather"] = measure(gather, sets, check, device, args.repeat_budget)
    report(f"gather {label(gather_config)}", row["gather"])

    row["tma"] = {}
    for i, config in enumerate(candidates(q, args.max_configs)):
        name = label(config)
        if i > 0 and time.monotonic() > deadline:
            row["tma"][name] = {"skipped": "time budget"}
            continue

        def run_tma(a, b, config=config):
            out = torch.empty(q.result_shape, dtype=q.dtype, device=device)
            if not (ig._run_rows if config.rows else run_tma_path)(q, *q.views(a, b, out), config):
                raise RuntimeError("the TMA path refused these tensors")
            return out

        row["tma"][name] = measure(run_tma, sets, check, device, args.repeat_budget)
        row["tma"][name]["config"] = repr(config)
        report(("default " if i == 0 else "") + f"TMA {name}", row["tma"][name])
    timed = {k: v["ms"] for k, v in row["tma"].items() if "ms" in v}
    if timed:
        row["tma_default_ms"] = row["tma"][label(candidates(q, 1)[0])].get("ms")
        row["tma_best"] = min(timed, key=timed.get)
        row["tma_best_ms"] = timed[row["tma_best"]]
    return row


def table(rows, log):
    def us(v):
        return f"{1e3 * v:7.1f}" if v else "    -  "

    log("")
    log(f"{'case':18} {'pass':5} {'PyTorch':>8} {'gather':>8} {'TMA dflt':>8} {'TMA best':>8} "
        f"{'best/PT':>7} {'dflt/PT':>7}  best TMA config")
    ratios = {"best": [], "default": []}
    for r in rows:
        pt, best, dflt = r.get("pytorch_ms"), r.get("tma_best_ms"), r.get("tma_default_ms")
        g = r.get("gather", {}).get("ms")
        sb = pt / best if pt and best else None
        sd = pt / dflt if pt and dflt else None
        if r["pass"] == "fwd":
            ratios["best"] += [sb] if sb else []
            ratios["default"] += [sd] if sd else []
        log(f"{r['case']:18} {r['pass']:5} {us(pt)}  {us(g)}  {us(dflt)}  {us(best)}  "
            f"{f'{sb:6.2f}x' if sb else '   -   '} {f'{sd:6.2f}x' if sd else '   -   '}  "
            f"{r.get('tma_best', r.get('tma_refused', ''))}")
    for k, v in ratios.items():
        if v:
            log(f"forward geometric-mean speed-up over PyTorch, TMA {k}: "
                f"{math.exp(sum(map(math.log, v)) / len(v)):.2f}x (min {min(v):.2f}x, {len(v)} cases)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="JSON results file")
    ap.add_argument("--cases", nargs="*", help="CASE or CASE:PASS (default: the dense list)")
    ap.add_argument("--budget-s", type=float, default=220.0, help="stop trying TMA configs after this")
    ap.add_argument("--max-configs", type=int, default=6, help="TMA tiles per case (plus box variants)")
    ap.add_argument("--repeat-budget", type=float, default=0.15, help="seconds of timed repeats per config")
    ap.add_argument("--tiny", action="store_true", help="tiny shapes on the CPU in Triton's interpreter")
    args = ap.parse_args()
    device = "cpu" if args.tiny else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        sys.exit("no CUDA device (use --tiny for a CPU smoke test)")
    start = time.monotonic()
    deadline = start + args.budget_s

    def log(s):
        print(s, flush=True)

    env = {"torch": torch.__version__, "triton": __import__("triton").__version__}
    if device == "cuda":
        torch.backends.cudnn.benchmark = True
        props = torch.cuda.get_device_properties(0)
        env.update(gpu=props.name, sms=props.multi_processor_count, cudnn=torch.backends.cudnn.version())
    log(f"tma_sweep on {env.get('gpu', 'CPU (interpreter)')}: {env}")
    cases = {c.name: c for c in suites.load_suite("public")}
    wanted = CASES if not args.cases else [tuple(c.split(":")) if ":" in c else (c, "fwd")
                                           for c in args.cases]
    rows = []
    for name, pass_ in wanted:
        try:
            rows.append(sweep_case(cases[name], pass_, device, args, deadline, log))
        except Exception as e:  # one case that cannot even be set up is reported, the rest still run
            log(f"{name} {pass_}: FAILED {type(e).__name__}: {e}")
            rows.append({"case": name, "pass": pass_, "error": f"{type(e).__name__}: {e}"[:300]})
        if device == "cuda":
            torch.cuda.empty_cache()
        if args.out:
            with open(args.out, "w") as f:
                json.dump({"env": env, "elapsed_s": time.monotonic() - start, "rows": rows}, f, indent=1)
    table(rows, log)
    log(f"elapsed {time.monotonic() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
