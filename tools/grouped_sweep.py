"""Sweeps the grouped algorithm's configs on small-group convolutions (run on the GPU): the rows
kernel's strips and the direct kernel's block, tile and tap-chunk shapes next to the packed GEMM
and PyTorch's cuDNN, every
config checked against the float64 reference before it is timed. About 4 minutes on the H200.

    PYTHONPATH=src python3 tools/grouped_sweep.py --out $OUT/grouped.json
    PYTHONPATH=src python3 tools/grouped_sweep.py --cases grouped3x3_g32 --passes fwd --budget 60

Prints one table per (case, pass) (µs, speed-up over cuDNN, multiple of the memory floor) and
writes every number to the JSON file. A config that fails to compile, crashes or is wrong is
reported as such and the sweep goes on; configs past the time budget are listed as skipped.
Without a GPU it is a dry run on tiny shapes in Triton's interpreter (checks the script itself).
"""

from __future__ import annotations

import argparse
import json
import os
import time
import traceback
from dataclasses import asdict, replace

import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
if DEVICE == "cpu":  # before Triton is imported
    os.environ["TRITON_INTERPRET"] = "1"

from ndconv.algorithms import depthwise, grouped, native, prepared_call
from ndconv.api import make_problem
from ndconv.bench import runner
from ndconv.bench.timing import time_fn

C = grouped.Config
# (x, w, conv_general args), bf16
CASES = {
    "grouped3x3_g32": ((64, 56, 56, 128), (128, 3, 3, 4), {"padding": 1, "groups": 32}),  # ResNeXt-50 32x4d
    "resnext_g32x8_56": ((32, 56, 56, 256), (256, 3, 3, 8),
                         {"padding": 1, "groups": 32}),  # ResNeXt-101 32x8d
    "regnetx_g24_28": ((64, 28, 28, 168), (168, 3, 3, 24),
                       {"padding": 1, "groups": 7}),  # RegNetX-1.6GF stage 2
    "resnext_g32x8_28": ((64, 28, 28, 256), (256, 3, 3, 8),
                         {"padding": 1, "groups": 32}),  # ResNeXt-50 stage 2
    "resnext_g32x16_14": ((64, 14, 14, 512), (512, 3, 3, 16),
                          {"padding": 1, "groups": 32}),  # ResNeXt-50 stage 3
    "grouped3x3_g32_n8": ((8, 56, 56, 128), (128, 3, 3, 4), {"padding": 1, "groups": 32}),  # batch 8
    "regnet_g8_112": ((16, 112, 112, 64), (64, 3, 3, 8), {"padding": 1, "groups": 8}),  # wide rows
    # depthwise 3x3 (MobileNetV2, the public suite's): packed 16 groups at a time, a 3x3 conv over
    # 16 channels does 16x the MACs, 8.3 GFLOP on dw3x3_56, under its 27 us memory floor
    "dw3x3_56": ((64, 56, 56, 144), (144, 3, 3, 1), {"padding": 1, "groups": 144}),
    "dw3x3s2_112": ((64, 112, 112, 96), (96, 3, 3, 1), {"stride": 2, "padding": 1, "groups": 96}),
}
# The direct kernel's configs, most informative first (defaults are block_g 0 = the fewest groups
# filling 16 lanes, 128-lane tap chunks: 8 + 1 taps for 3x3).
FWD = [
    ("default", C()),
    ("p64", C(block_p=64)),
    ("p256 w8", C(block_p=256, num_warps=8)),
    ("tile 16x8", C(tile_w=8)),
    ("cuda-core fma p128", C(fma=True)),  # power-of-two groups only (else it is the default)
    ("cuda-core fma p256", C(fma=True, block_p=256)),
    ("cuda-core fma p512 w8", C(fma=True, block_p=512, num_warps=8)),
    ("tile 8x16", C(tile_w=16)),
    ("tile 8x8", C(tile_w=8, block_p=64)),
    ("lanes64", C(tap_lanes=64)),
    ("lanes32", C(tap_lanes=32)),
    ("lanes16 (per tap)", C(tap_lanes=16)),
    ("w8", C(num_warps=8)),
    ("lanes32 stages2", C(tap_lanes=32, num_stages=2)),
    ("2x groups", C(block_g=-2)),  # block_g resolved per problem: twice the default
]
# The rows kernel (forwards and input gradients at stride 1): strip 0 = as tall as keeps 4
# programs per SM, tile_w 0 = the output row up to 64 columns.
ROWS = [
    ("rows default", C("rows", num_stages=3)),
    ("rows stages2", C("rows", num_stages=2)),
    ("rows strip 8", C("rows", strip=8, num_stages=3)),
    ("rows strip 16", C("rows", strip=16, num_stages=3)),
    ("rows 32 columns", C("rows", tile_w=32, num_stages=3)),
    ("rows 2x groups", C("rows", block_g=-2, num_stages=3)),
    ("rows stages1", C("rows", num_stages=1)),
]
WGRAD = [
    ("default", C(block_p=64)),
    ("p128", C(block_p=128)),
    ("p32", C(block_p=32)),
    ("pps4", C(block_p=64, programs_per_sm=4)),
    ("pps16", C(block_p=64, programs_per_sm=16)),
    ("stages2", C(block_p=64, num_stages=2)),
    ("stages3", C(block_p=64, num_stages=3)),
    ("p128 w8", C(block_p=128, num_warps=8)),
    ("lanes64", C(block_p=64, tap_lanes=64)),
    ("2x groups", C(block_p=64, block_g=-2)),
]
SHORT = 5  # configs per pass for the cases after the first


def _resolve(q, config: C) -> C:
    if config.block_g < 0:
        return replace(config, block_g=-config.block_g * grouped._default_block_g(q))
    return config


def _bandwidth() -> float:
    nbytes = 1 << 30 if DEVICE == "cuda" else 1 << 24
    src = torch.empty(nbytes, dtype=torch.uint8, device=DEVICE).random_()
    dst = torch.empty_like(src)
    t = time_fn(dst.copy_, [(src,)], DEVICE, budget_s=0.2, max_repeats=20)
    return 2 * nbytes / (t.median_ms * 1e-3)


def _sweep_pass(name, p, pass_, bandwidth, deadline, short):
    q = p if pass_ == "fwd" else getattr(p, pass_)()
    sets = runner.testing.operand_sets(q, 0, DEVICE)
    ref, take, checked_on = runner._reference_slice(q, *sets[0], DEVICE)
    tol = runner.testing.tolerance(q)

    def check(result):
        return runner.testing.compare(take(result), ref, tol)

    floor_ms = q.min_bytes / bandwidth * 1e3
    rows = []

    def measure(label, fn, check_fn=check, prepared=sets):
        if time.monotonic() > deadline:
            rows.append({"label": label, "skipped": "time budget"})
            return
        try:
            r = runner._measure(fn, prepared, check_fn, DEVICE)
        except Exception as e:  # noqa: BLE001 (never let one config end the sweep)
            r = {"error": f"{type(e).__name__}: {e}"[:300], "trace": traceback.format_exc()[-600:]}
        rows.append(dict(label=label, **r))

    # PyTorch: every formulation (cuDNN, channels last), the fastest is the baseline
    for f in native.formulations(p, pass_):
        prepared = [f.prepare(a, b) for a, b in sets]
        measure(f"torch {f.name}", f.run, lambda r, f=f: check(runner.baseline_natural(p, pass_, f, r)),
                prepared)

    def algo(module, config):  # as a cached call runs it (its prepared call where it has one)
        return prepared_call(module, q, config)

    # packed block-diagonally: by implicit_gemm (the default's runner), then by PyTorch's convolution
    for pack in grouped._native_packs(q):  # every PyTorch formulation of the packed problem
        for formulation in native.configs(grouped.packed_problem(q, pack)):
            measure(f"packed {pack} by native {formulation}",
                    algo(grouped, C("packed", pack, tile=formulation, packed_by="native")))
    for pack in grouped._pack_factors(q):
        measure(f"packed {pack} by implicit_gemm", algo(grouped, C("packed", pack)))
    if grouped.rows_reason(q) is None:
        for label, config in ROWS:
            measure(label, algo(grouped, _resolve(q, config)))
            rows[-1]["config"] = asdict(_resolve(q, config))
    configs = WGRAD if pass_ == "wgrad" else FWD
    for label, config in configs[:short] if short else configs:
        config = _resolve(q, config)
        if config.fma and (pass_ == "wgrad" or not grouped._fma_possible(q, config)):
            continue
        measure(f"direct {label}", algo(grouped, config))
        rows[-1]["config"] = asdict(config)
    if pass_ != "wgrad":  # CUDA cores: the depthwise kernel's per-lane channel loop
        measure("cuda-core depthwise kernel", algo(depthwise, depthwise.default_config(q)))

    base = min((r["ms"] for r in rows if r["label"].startswith("torch") and "ms" in r), default=None)
    print(f"\n{name} {pass_}: {q}\n  floor {floor_ms * 1e3:.1f} µs (min bytes {q.min_bytes / 1e6:.1f} MB at "
          f"{bandwidth / 1e9:.0f} GB/s), checked on {checked_on}")
    print(f"  {'config':34} {'µs':>8} {'vs torch':>9} {'x floor':>8}")
    for r in rows:
        if "ms" in r:
            r["speedup"] = base / r["ms"] if base else None
            r["x_floor"] = r["ms"] / floor_ms
            sp = f"{r['speedup']:.2f}x" if base else "-"
            print(f"  {r['label']:34} {r['ms'] * 1e3:8.1f} {sp:>9} {r['x_floor']:8.2f}")
        else:
            what = r.get("skipped") or r.get("wrong") or r.get("error")
            print(f"  {r['label']:34} {'-':>8} {str(what)[:90]}")
    return {"case": name, "pass_": pass_, "problem": str(q), "floor_ms": floor_ms, "baseline_ms": base,
            "rows": rows}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="grouped.json")
    parser.add_argument("--cases", nargs="+", default=list(CASES))
    parser.add_argument("--passes", nargs="+", default=["fwd", "dgrad", "wgrad"])
    parser.add_argument("--budget", type=float, default=220.0, help="seconds before configs are skipped")
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True
    start = time.monotonic()
    deadline = start + args.budget
    props = torch.cuda.get_device_properties(0) if DEVICE == "cuda" else None
    bandwidth = _bandwidth()
    results = []
    for i, name in enumerate(args.cases):
        x, w, kw = CASES[name]
        if DEVICE == "cpu":  # a dry run: one image of 6x6
            x = (1, 6, 6, x[-1])
        p = make_problem(x, w, dtype=torch.bfloat16, device=DEVICE, **kw)
        for pass_ in args.passes:
            try:
                results.append(_sweep_pass(name, p, pass_, bandwidth, deadline, SHORT if i else 0))
            except Exception as e:  # noqa: BLE001 (a failing case is reported, the sweep goes on)
                print(f"{name} {pass_}: failed: {type(e).__name__}: {e}")
                results.append({"case": name, "pass_": pass_, "error": traceback.format_exc()[-1000:]})
            if DEVICE == "cuda":
                torch.cuda.empty_cache()
    env = {"gpu": props.name if props else "cpu (dry run)", "torch": torch.__version__,
               "triton": __import__("triton").__version__, "cudnn": torch.backends.cudnn.version(),
               "bandwidth_gbs": bandwidth / 1e9,
               "seconds": time.monotonic() - start}
    with open(args.out, "w") as f:
        json.dump({"env": env, "results": results}, f, indent=1, default=str)
    print(f"\n{env}\nwritten to {args.out}")


if __name__ == "__main__":
    main()
