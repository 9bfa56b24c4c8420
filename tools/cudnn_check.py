"""The cudnn algorithm on a GPU (not in CI): every tiny case of ndconv.testing.CASES in fp32,
fp16 and bf16 and every config, then the public suite's cases in their dtype, all three passes,
against the float64 reference (on a slice where a case is too big for it), each suite case and
pass timed with CUDA events next to `native`. One failure never stops the run: it is printed
and counted.

    pip install --no-deps .whl/nvidia_cudnn_frontend-*.whl
    PYTHONPATH=src python3 tools/cudnn_check.py [--out DIR] [--case NAME ...] [--no-time]
"""

from __future__ import annotations

import argparse
import json
import time
import traceback
from pathlib import Path

import torch

from ndconv import autograd, testing
from ndconv.algorithms import cudnn as cudnn_alg
from ndconv.bench import runner, suites
from ndconv.bench.timing import time_fn

PASSES = ("fwd", "dgrad", "wgrad")


def _pass(p, pass_):
    return p if pass_ == "fwd" else getattr(p, pass_)()


def _try(fn):
    """(result, None) or (None, the error's text)."""
    try:
        return fn(), None
    except Exception as e:  # noqa: BLE001 - report every failure, keep going
        return None, (f"{type(e).__name__}: {e}".replace("\n", " ")[:400] + "\n"
                      + traceback.format_exc(limit=3))


def check(q, config, seed=0):
    """(ok, text) of cudnn with ``config`` on pass ``q`` against the float64 reference."""
    ok, reason = cudnn_alg.supports(q)
    if not ok:
        return None, f"unsupported: {reason}"
    a, b = testing.random_operands(q, seed)
    ref, take, where = runner._reference_slice(q, a, b, "cuda")
    out = testing.run_algorithm("cudnn", q, a, b, config)
    torch.cuda.synchronize()
    report = testing.compare(take(out), ref, testing.tolerance(q))
    return report.ok, f"{report} [{where}]"


def timed(q, name) -> float:
    """Median ms of pass ``q`` through algorithm ``name`` (CUDA events, ndconv.bench.timing)."""
    a, b = testing.random_operands(q, 0)
    return time_fn(lambda a, b: autograd.run(q, a, b, name), [(a, b)], "cuda").median_ms


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="directory for cudnn_check.json")
    ap.add_argument("--case", nargs="*", default=None, help="only these suite cases")
    ap.add_argument("--no-time", action="store_true")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA device: this script checks the cudnn algorithm on a GPU")
        return 2
    frontend, why = cudnn_alg._frontend()
    print(f"torch {torch.__version__}, cuDNN (torch) {torch.backends.cudnn.version()}, "
          f"GPU {torch.cuda.get_device_name()}")
    if frontend is None:
        print(f"cudnn algorithm unusable: {why}")
        return 2
    print(f"nvidia-cudnn-frontend {frontend.__version__}, libcudnn {frontend.backend_version()}")
    rows, counts = [], {"ok": 0, "FAIL": 0, "ERROR": 0, "unsupported": 0}

    def record(kind, name, q, config, ok, text, **extra):
        status = "unsupported" if ok is None and text.startswith("unsupported") else (
            "ERROR" if ok is None else "ok" if ok else "FAIL")
        counts[status] += 1
        label = f"{config.formulation}/{config.reverse}" if config is not None else "-"
        print(f"{status:11} {kind:5} {name:22} {q.pass_:5} {str(q.dtype)[6:]:8} {label:12} "
              f"{text.splitlines()[0]}")
        if status == "ERROR":
            print("            " + "\n            ".join(text.splitlines()[1:]))
        rows.append({"kind": kind, "case": name, "pass": q.pass_, "dtype": str(q.dtype), "config": label,
                     "status": status, "text": text, **extra})

    t0 = time.perf_counter()
    for case in testing.CASES:  # every tiny case, every config
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            p = case.problem(dtype=dtype, device="cuda")
            for pass_ in PASSES:
                q = _pass(p, pass_)
                configs = cudnn_alg.configs(q) if cudnn_alg.formulations(q) else [None]
                for config in configs:
                    result, err = _try(lambda q=q, config=config: check(q, config, seed=1))
                    ok, text = result if err is None else (None, err)
                    record("tiny", case.name, q, config, ok, text)

    for case in suites.load_suite("public"):  # real shapes, checked and timed
        if args.case and case.name not in args.case:
            continue
        p = case.problem("cuda")
        for pass_ in PASSES:
            q = _pass(p, pass_)
            config = cudnn_alg.default_config(q)
            result, err = _try(lambda q=q, config=config: check(q, config))
            ok, text = result if err is None else (None, err)
            extra = {}
            if ok and not args.no_time:
                for name in ("cudnn", "native"):
                    t, terr = _try(lambda q=q, name=name: timed(q, name))
                    extra[f"{name}_ms"] = t if terr is None else terr.splitlines()[0]
                if isinstance(extra.get("cudnn_ms"), float) and isinstance(extra.get("native_ms"), float):
                    text += (f"  cudnn {extra['cudnn_ms']:.4f} ms, native {extra['native_ms']:.4f} ms "
                             f"({extra['native_ms'] / extra['cudnn_ms']:.2f}x)")
                else:
                    text += f"  timing: {extra}"
            record("suite", case.name, q, config, ok, text, **extra)
            torch.cuda.empty_cache()

    print(f"\nsummary ({time.perf_counter() - t0:.0f} s): "
          + ", ".join(f"{k} {v}" for k, v in counts.items()))
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "cudnn_check.json").write_text(json.dumps(rows, indent=1, default=str))
    return 0 if counts["FAIL"] == counts["ERROR"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
