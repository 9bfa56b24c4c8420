"""The benchmark runner: for each case and pass, the PyTorch baseline (fastest formulation),
every ndconv algorithm that supports the problem, and the planner's choice, each checked against
the float64 reference before it is timed; ratios against the baseline and the roofline floor.

One row per (case, pass); the JSON holds every number plus the environment.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import math
import platform
import subprocess
from pathlib import Path

import torch

from .. import __version__, autograd, testing
from ..algorithms import REGISTRY, native
from ..api import conv_general
from ..problem import ConvProblem
from .suites import BenchCase, category
from .timing import Roofline, dtype_key, measure_roofline, time_fn

# Largest reference computation (float64 windows) checked in full; beyond it, a slice.
_REFERENCE_LIMIT = {"cuda": 4 << 30, "cpu": 1 << 28}
_CATEGORIES = ("dense", "depthwise", "grouped", "1-D", "3-D", "transposed")


def _pass_problem(p: ConvProblem, pass_: str) -> ConvProblem:
    return p if pass_ == "fwd" else getattr(p, pass_)()


def _reference_slice(q: ConvProblem, a, b, device: str):
    """(sliced operands' reference result, how to slice a result, what was kept): the whole
    problem when its float64 reference fits the limit, else the first entries of its leading
    result axis and, when that axis alone cannot shrink enough (a depthwise weight gradient's
    leading axis is its single channel per group), the first groups too."""
    rows, _, k = q.gemm_mnk
    estimate = rows * q.groups * k * 8 * 2  # bytes of the float64 windows the reference unfolds
    limit, lead, G = _REFERENCE_LIMIT[device], q.x_shape[0], q.groups
    keep = max(1, min(lead, int(lead * limit / estimate)))
    g = max(1, min(G, int(G * limit / (estimate * keep / lead))))
    if (keep, g) == (lead, G):
        return testing.reference_result(q, a, b), lambda t: t, "full"
    sub = dataclasses.replace(
        q, x_shape=(keep, *q.x_shape[1:-1], q.x_shape[-1] // G * g),
        w_shape=(q.w_shape[0] // G * g, *q.w_shape[1:]), groups=g,
    )

    def first_groups(t, axis):
        return t.narrow(axis, 0, t.shape[axis] // G * g)

    if q.pass_ == "wgrad":  # leading axis of the equivalent problem = input channels per group
        a, b = a.unflatten(-1, (G, -1))[..., :g, :keep].flatten(-2), first_groups(b, -1)
        take, axis = (lambda t: first_groups(t, 0)[..., :keep]), "channels"
    else:
        a, b = first_groups(a[:keep], -1), first_groups(b, 0)
        take, axis = (lambda t: first_groups(t[:keep], -1)), "batch"
    kept = [f"{keep}/{lead} {axis}"] if keep < lead else []
    kept += [f"{g}/{G} groups"] if g < G else []
    return testing.reference_result(sub, a, b), take, ", ".join(kept)


def _env(device: str) -> dict:
    env = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "ndconv": __version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "device": device,
    }
    try:
        import triton

        env["triton"] = triton.__version__
    except ImportError:
        env["triton"] = None
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        env.update(gpu=props.name, sm_count=props.multi_processor_count,
                   l2_bytes=getattr(props, "L2_cache_size", 0), cuda=torch.version.cuda,
                   cudnn=torch.backends.cudnn.version())
        try:
            env["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=10,
            ).stdout.strip() or None
        except (OSError, subprocess.SubprocessError):
            env["driver"] = None
    else:
        env["cpu"] = platform.processor() or platform.machine()
        env["threads"] = torch.get_num_threads()
    try:  # "-dirty" where the tree differs from the commit (a copied tree with a stale .git)
        env["git"] = subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=7"],
                                    capture_output=True, text=True, timeout=10,
                                    cwd=Path(__file__).parent).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        env["git"] = None
    env["source"] = source_digest()
    return env


def source_digest(root: Path = Path(__file__).parents[1]) -> str:
    """A digest of the Python sources under ``root`` (the ndconv package): it names the code a
    run measured where git cannot, and the same checkout gives the same digest anywhere."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def _measure(fn, prepared_sets, check, device):
    """Checks ``fn`` on the first operand set, then times it: a dict with ms or the failure."""
    try:
        result = fn(*prepared_sets[0])
        if device == "cuda":
            torch.cuda.synchronize()
        report = check(result)
    except Exception as e:  # an algorithm that crashes is reported, not fatal to the run
        return {"error": f"{type(e).__name__}: {e}"[:300]}
    if not report.ok:
        return {"wrong": str(report), "max_rel_err": report.max_rel_err}
    t = time_fn(fn, prepared_sets, device)
    return {"ms": t.median_ms, "p20_ms": t.p20_ms, "p80_ms": t.p80_ms, "repeats": t.repeats,
            "host_us": t.host_us, "max_rel_err": report.max_rel_err}


def baseline_natural(p: ConvProblem, pass_: str, formulation, result):
    """A baseline formulation's result for forward problem ``p``'s pass in ndconv's natural
    layout. ndconv's weight-gradient pass computes the gradient of the weight as read, reversed
    when the problem flips; PyTorch's is the weight's own, so it is reversed here."""
    out = formulation.to_natural(result)
    return out.flip(tuple(range(1, 1 + p.ndim))) if pass_ == "wgrad" and p.flip else out


def bench_case(case: BenchCase, pass_: str, device: str, roofline: Roofline, algorithms,
               seed: int = 0) -> dict:
    """One row: baseline formulations, ndconv algorithms and the planner on one case and pass."""
    p = case.problem(device)
    q = _pass_problem(p, pass_)
    sets = testing.operand_sets(q, seed, device)
    ref, take, checked_on = _reference_slice(q, *sets[0], device)
    tol = testing.tolerance(q)

    def check(result):
        return testing.compare(take(result), ref, tol)

    row = {
        "case": case.name, "model": case.model, "pass": pass_, "dtype": case.spec["dtype"],
        "categories": list(category(p)), "problem": str(q), "flops": q.flops, "bytes": q.min_bytes,
        "floor_ms": roofline.floor_ms(q.flops, q.min_bytes, dtype_key(q.dtype, q.allow_tf32)),
        "checked_on": checked_on,
    }

    # PyTorch baseline: each formulation, the fastest correct one wins
    row["baseline_formulations"] = {}
    for f in native.formulations(p, pass_):

        def check_baseline(result, f=f):
            return check(baseline_natural(p, pass_, f, result))

        prepared = [f.prepare(a, b) for a, b in sets]
        row["baseline_formulations"][f.name] = _measure(f.run, prepared, check_baseline, device)
    timed = {k: v["ms"] for k, v in row["baseline_formulations"].items() if "ms" in v}
    row["baseline"] = min(timed.items(), key=lambda kv: kv[1]) if timed else None

    # ndconv algorithms, forced one by one
    row["algorithms"] = {}
    for name in algorithms:
        ok, reason = REGISTRY[name].supports(q)
        if not ok:
            row["algorithms"][name] = {"unsupported": reason}
            continue

        def fn(a, b, name=name):
            return autograd.run(q, a, b, name)

        row["algorithms"][name] = _measure(fn, sets, check, device)

    # the planner's choice, through the public entry points
    from .. import planner

    row["planner_algorithm"] = planner.plan(q).name
    if pass_ == "fwd":
        args = dict(stride=p.stride, padding=(list(case.spec["padding_lo"]), list(case.spec["padding_hi"])),
                    kernel_dilation=p.kernel_dilation, input_dilation=p.input_dilation,
                    groups=p.groups, flip=p.flip)

        def planned(a, b):
            with torch.no_grad():
                return conv_general(a, b, **args)
    else:

        def planned(a, b):
            return autograd.run(q, a, b)

    row["planner"] = _measure(planned, sets, check, device)

    timed = {k: v["ms"] for k, v in row["algorithms"].items() if "ms" in v}
    row["best"] = min(timed.items(), key=lambda kv: kv[1]) if timed else None
    base = row["baseline"][1] if row["baseline"] else None
    best = row["best"][1] if row["best"] else None
    planned_ms = row["planner"].get("ms")
    row["speedup"] = base / best if base and best else None
    row["planner_speedup"] = base / planned_ms if base and planned_ms else None
    row["best_vs_floor"] = best / row["floor_ms"] if best else None
    row["baseline_vs_floor"] = base / row["floor_ms"] if base else None
    if best:
        row["best_tflops"] = q.flops / (best * 1e-3) / 1e12
        row["best_gbs"] = q.min_bytes / (best * 1e-3) / 1e9
    return row


def geomean(values) -> float | None:
    values = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def summarize(rows) -> dict:
    """Geometric-mean speed-up over the baseline per category and overall (best algorithm and
    planner's choice)."""
    out = {}
    for cat in (*_CATEGORIES, "overall"):
        sel = [r for r in rows if cat == "overall" or cat in r["categories"]]
        if sel:
            out[cat] = {"speedup": geomean(r["speedup"] for r in sel),
                        "planner_speedup": geomean(r["planner_speedup"] for r in sel), "rows": len(sel)}
    return out


def run_suite(cases, device: str, passes=None, algorithms=None, progress=None, seed: int = 0) -> dict:
    """Benchmarks every (case, pass); returns {env, roofline, rows, summary}. By default every
    algorithm but the reference (the oracle) and native (PyTorch itself: it is the baseline)."""
    algorithms = list(algorithms or [n for n in REGISTRY if n not in ("reference", "native")])
    if device == "cuda":
        torch.backends.cudnn.benchmark = True
    dtypes = sorted({dtype_key(getattr(torch, c.spec["dtype"]), c.problem(device).allow_tf32) for c in cases})
    roofline = measure_roofline(device, dtypes)
    work = [(c, ps) for c in cases for ps in c.passes if not passes or ps in passes]
    rows = []
    for case, pass_ in work:
        if progress:
            progress(f"{case.name} {pass_}", len(rows), len(work))
        rows.append(bench_case(case, pass_, device, roofline, algorithms, seed))
    if progress:
        progress("done", len(rows), len(work))
    return {
        "env": _env(device),
        "roofline": {"peak_tflops": {k: v / 1e12 for k, v in roofline.peak_flops.items()},
                     "bandwidth_gbs": roofline.bandwidth / 1e9},
        "algorithms": algorithms,
        "rows": rows,
        "summary": summarize(rows),
    }
