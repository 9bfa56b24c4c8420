"""Compiles the direct grouped kernels for sm_90 without a GPU and prints what the compiler made
of them: registers, spills, shared memory, and counts of the instructions that matter (wide
loads, tensor-core ops, shared-memory traffic, barriers). The launch arguments come from the
real launcher (grouped.py) on CPU tensors, specialised as Triton would on the GPU.

    PYTHONPATH=src python3 tools/grouped_ptx.py                 # grouped3x3_g32, all passes
    PYTHONPATH=src python3 tools/grouped_ptx.py --sass          # also dump SASS to /tmp
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import tempfile

import torch
from sm90 import BIN, Capture, compile_sm90

from ndconv.algorithms import grouped, grouped_kernels
from ndconv.api import make_problem


def _resources(cubin: bytes) -> str:
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([os.path.join(BIN, "cuobjdump"), "-res-usage", f.name],
                             capture_output=True, text=True, check=True).stdout
    m = re.search(r"REG:(\d+) STACK:(\d+) SHARED:(\d+)", out)
    return f"regs {m[1]} stack {m[2]}" if m else out.strip()[-200:]


def _sass(cubin: bytes) -> str:
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        return subprocess.run([os.path.join(BIN, "cuobjdump"), "-sass", f.name],
                              capture_output=True, text=True, check=True).stdout


SASS_OPS = ("LDG.E.128", "LDG.E.64", "LDG.E ", "LDG.E.U16", "STG", "HMMA", "HGMMA", "LDSM", "STS", "LDS",
            "BAR", "SHFL", "FFMA", "LDGSTS")


def report(name, q, config, dump=None):
    captured = {}
    for kname in ("grouped_fwd_kernel", "grouped_fwd_fma_kernel", "grouped_wgrad_kernel"):
        captured[kname] = Capture(getattr(grouped_kernels, kname))
        setattr(grouped_kernels, kname, captured[kname])
    try:
        a, b = (torch.empty(shape, dtype=q.dtype) for shape in q.operand_shapes)
        out = torch.empty(q.result_shape, dtype=q.dtype)
        grouped.run(q, *q.views(a, b, out), config)
    finally:
        for kname, cap in captured.items():
            setattr(grouped_kernels, kname, cap.fn)
    for kname, cap in captured.items():
        for grid, args, kwargs in cap.calls:
            k = compile_sm90(cap.fn, args, kwargs)
            sass = _sass(k.asm["cubin"])
            counts = " ".join(f"{op.strip()}={sass.count(op)}" for op in SASS_OPS)
            print(f"{name} {q.pass_} {kname} grid {grid} {config}\n  {_resources(k.asm['cubin'])} "
                  f"smem {k.metadata.shared} | {counts}")
            if dump:
                path = f"/tmp/{name}_{q.pass_}.sass"
                with open(path, "w") as f:
                    f.write(sass)
                with open(path.replace(".sass", ".ptx"), "w") as f:
                    f.write(k.asm["ptx"])
                print("  SASS and PTX in", path)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sass", action="store_true")
    parser.add_argument("--passes", nargs="+", default=["fwd", "dgrad", "wgrad"])
    args = parser.parse_args()
    p = make_problem((64, 56, 56, 128), (128, 3, 3, 4), padding=1, groups=32, dtype=torch.bfloat16,
                     device="cuda")
    for pass_ in args.passes:
        q = p if pass_ == "fwd" else getattr(p, pass_)()
        # fwd/dgrad default packs
        direct = grouped.default_config(q) if pass_ == "wgrad" else grouped.Config()
        report("grouped3x3_g32", q, direct, args.sass)


if __name__ == "__main__":
    main()
