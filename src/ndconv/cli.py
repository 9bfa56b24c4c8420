"""``python -m ndconv bench | check | explain``."""

from __future__ import annotations

import argparse
import sys

import torch

_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
           "float64": torch.float64}


def _default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def _check(args) -> int:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from . import testing
    from .algorithms import REGISTRY

    device = args.device or _default_device()
    names = args.algorithm or [n for n in REGISTRY if n != "reference"]
    cases = [c for c in testing.CASES if not args.case or c.name in args.case]
    table = Table(title=f"ndconv check on {device}: every algorithm against the float64 reference")
    for column in ("case", "pass", "dtype", "algorithm", "max rel err", "tol", "result"):
        table.add_column(column, justify="right" if column in ("max rel err", "tol") else "left")
    failures = 0
    for case in cases:
        for dtype_name in args.dtype:
            fwd = case.problem(dtype=_DTYPES[dtype_name], device=device)
            for p in (fwd, fwd.dgrad(), fwd.wgrad()):
                for name in names:
                    ok, reason = REGISTRY[name].supports(p)
                    if not ok:
                        table.add_row(case.name, p.pass_, dtype_name, name, "-", "-",
                                      f"skipped: {escape(reason)}")
                        continue
                    report = testing.check(name, p)
                    failures += not report.ok
                    result = "[green]pass[/]" if report.ok else f"[red]FAIL[/] {escape(str(report))}"
                    table.add_row(case.name, p.pass_, dtype_name, name, f"{report.max_rel_err:.1e}",
                                  f"{report.tol:.0e}", result)
    console = Console(width=None if sys.stdout.isatty() else 160)
    console.print(table)
    console.print(f"{failures} failure(s)" if failures else "all checks passed")
    return 1 if failures else 0


def _bench(args) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from .bench import report, runner, suites

    device = args.device or _default_device()
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA device is available")
    suite = args.suite or ("public" if device == "cuda" else "cpu")
    cases = suites.load_suite(suite)
    if args.case:
        unknown = sorted(set(args.case) - {c.name for c in cases})
        if unknown:
            raise ValueError(f"--case: no case {', '.join(unknown)} in suite {suite}")
        cases = [c for c in cases if c.name in args.case]
    console = Console(width=None if sys.stdout.isatty() else 220)
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), console=console, transient=True) as bar:
        task = bar.add_task("starting", total=None)

        def progress(what, done, total):
            bar.update(task, description=f"bench {what}", completed=done, total=total)

        result = runner.run_suite(cases, device, args.passes, args.algorithm, progress, args.seed)
    result["suite"] = suite
    report.print_result(result, console)
    if args.json:
        report.write_json(result, args.json)
        console.print(f"wrote {args.json}")
    if args.plot:
        report.plot(result, args.plot)
        console.print(f"wrote {args.plot}")
    wrong = any(report.failures(r) for r in result["rows"])
    return 1 if wrong else 0


def _explain(args) -> int:
    from . import planner
    from .api import explain

    x = [int(s) for s in args.x.split(",")]
    w = [int(s) for s in args.w.split(",")]
    ints = lambda s: [int(v) for v in s.split(",")]  # noqa: E731
    padding = ints(args.padding)
    if args.padding_hi is not None:
        padding = (padding, ints(args.padding_hi))
    if args.autotune:
        planner.autotune(True)
    print(explain(x, w, ints(args.stride), padding, ints(args.kernel_dilation),
                  ints(args.input_dilation), args.groups, args.flip, algorithm=args.algorithm,
                  dtype=_DTYPES[args.dtype], device=args.device or _default_device()))
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ndconv", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    bench = sub.add_parser("bench",
                           help="time ndconv against PyTorch and the roofline on model-derived cases")
    bench.add_argument("--device", choices=["cpu", "cuda"], help="default: cuda if available")
    bench.add_argument("--suite", help="public, cpu, stems, depthwise, or a JSON file of cases (default: "
                       "public on cuda, cpu on cpu)")
    bench.add_argument("--case", nargs="+", help="only these case names")
    bench.add_argument("--passes", nargs="+", choices=["fwd", "dgrad", "wgrad"], help="only these passes")
    bench.add_argument("--algorithm", nargs="+",
                       help="algorithms to time (default: all but the reference and native, the baseline)")
    bench.add_argument("--json", help="write every number to this JSON file")
    bench.add_argument("--plot", help="write a PNG bar chart of speed-ups to this file")
    bench.add_argument("--seed", type=int, default=0)
    bench.set_defaults(func=_bench)

    check = sub.add_parser("check", help="every algorithm against the reference on built-in cases")
    check.add_argument("--device", choices=["cpu", "cuda"], help="default: cuda if available")
    check.add_argument("--dtype", nargs="+", choices=list(_DTYPES), default=["float32", "bfloat16"])
    check.add_argument("--algorithm", nargs="+",
                       help="algorithms to check (default: all but the reference, the oracle)")
    check.add_argument("--case", nargs="+", help="case names (default: all)")
    check.set_defaults(func=_check)

    ex = sub.add_parser("explain", help="which algorithm runs a problem, and why")
    ex.add_argument("--x", required=True, help="input shape, e.g. 8,56,56,64")
    ex.add_argument("--w", required=True, help="weight shape, e.g. 64,3,3,64")
    ex.add_argument("--stride", default="1")
    ex.add_argument("--padding", default="0", help="per-axis (or lo when --padding-hi is given)")
    ex.add_argument("--padding-hi", help="per-axis high padding")
    ex.add_argument("--kernel-dilation", default="1")
    ex.add_argument("--input-dilation", default="1")
    ex.add_argument("--groups", type=int, default=1)
    ex.add_argument("--flip", action="store_true")
    ex.add_argument("--dtype", choices=list(_DTYPES), default="float32")
    ex.add_argument("--device", choices=["cpu", "cuda"], help="default: cuda if available")
    ex.add_argument("--algorithm", help="show this algorithm forced")
    ex.add_argument("--autotune", action="store_true",
                    help="show the tuning cache's choices (as NDCONV_AUTOTUNE=1; nothing is tuned)")
    ex.set_defaults(func=_explain)

    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
