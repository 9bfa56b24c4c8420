"""Showing benchmark results: a terminal table with the summary line, the JSON file, and a PNG
bar chart of speed-up over the PyTorch baseline (log scale) with the roofline limit marked."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console
from rich.table import Table


def _ms(v) -> str:
    return "-" if v is None else (f"{v:.3f}" if v < 10 else f"{v:.1f}")


def _ratio(v) -> str:
    return "-" if v is None else f"{v:.2f}x"


def failures(row) -> list[str]:
    """Algorithms (and baseline formulations) that gave a wrong result or crashed."""
    bad = []
    for source in (row["algorithms"], row["baseline_formulations"], {"planner": row["planner"]}):
        for name, r in source.items():
            if "wrong" in r:
                bad.append(f"{name} WRONG ({r['wrong']})")
            elif "error" in r:
                bad.append(f"{name} ERROR ({r['error']})")
    return bad


def table(result) -> Table:
    env = result["env"]
    where = env.get("gpu") or env.get("cpu") or env["device"]
    roof = result["roofline"]
    title = (f"ndconv bench on {where}: times in ms (median), speed-up = PyTorch baseline / ndconv; "
             f"floor from {', '.join(f'{k} {v:.3g}' for k, v in roof['peak_tflops'].items())} TFLOP/s, "
             f"{roof['bandwidth_gbs']:.3g} GB/s")
    t = Table(title=title, title_justify="left")
    for col in ("case", "pass", "floor", "PyTorch", "best ndconv", "speed-up", "x floor", "TFLOP/s", "GB/s",
                "planner", "planner speed-up", "notes"):
        t.add_column(col, justify="left" if col in ("case", "pass", "best ndconv", "planner", "notes")
                     else "right")
    for r in result["rows"]:
        base = r["baseline"]
        best = r["best"]
        notes = failures(r)
        if r["checked_on"] != "full":
            notes.append(f"checked on {r['checked_on']}")
        t.add_row(
            r["case"], r["pass"], _ms(r["floor_ms"]),
            f"{_ms(base[1])} ({base[0]})" if base else "-",
            f"{_ms(best[1])} {best[0]}" if best else "-",
            _ratio(r["speedup"]), _ratio(r["best_vs_floor"]),
            f"{r.get('best_tflops', 0):.3g}" if best else "-", f"{r.get('best_gbs', 0):.3g}" if best else "-",
            f"{_ms(r['planner'].get('ms'))} {r['planner_algorithm']}", _ratio(r["planner_speedup"]),
            "; ".join(notes),
        )
    return t


def summary_line(result) -> str:
    parts = []
    for cat, s in result["summary"].items():
        if s["speedup"]:
            parts.append(f"{cat} {s['speedup']:.2f}x")
    return "geometric-mean speed-up over PyTorch (best ndconv algorithm): " + ", ".join(parts)


def print_result(result, console: Console | None = None) -> None:
    console = console or Console()
    console.print(table(result))
    console.print(summary_line(result))
    if any(failures(r) for r in result["rows"]):
        console.print("[red]some results were wrong or crashed: see notes[/]")


def write_json(result, path) -> None:
    Path(path).write_text(json.dumps(result, indent=1, default=str) + "\n")


def plot(result, path) -> None:
    """Bar per (case, pass): speed-up of the best ndconv algorithm over PyTorch (log scale);
    a tick above each bar marks the speed-up the roofline floor would allow."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in result["rows"] if r["speedup"]]
    labels = [f"{r['case']} {r['pass']}" for r in rows]
    speedups = [r["speedup"] for r in rows]
    limits = [r["baseline"][1] / r["floor_ms"] for r in rows]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.42 * len(rows) + 2), 4.8))
    xs = range(len(rows))
    colors = ["tab:green" if s >= 1 else "tab:red" for s in speedups]
    ax.bar(xs, speedups, color=colors, label="best ndconv vs PyTorch")
    ax.scatter(xs, limits, marker="_", s=200, color="black", label="roofline limit (PyTorch / floor)")
    ax.axhline(1.0, color="gray", linewidth=1)
    ax.set_yscale("log")
    ax.set_xticks(list(xs), labels, rotation=70, ha="right", fontsize=8)
    ax.set_ylabel("speed-up over PyTorch (x)")
    env = result["env"]
    ax.set_title(f"ndconv on {env.get('gpu') or env.get('cpu') or env['device']} ({env['date'][:10]})",
                 fontsize=10)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
