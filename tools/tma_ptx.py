"""Compiles the TMA implicit-GEMM kernel for sm_90 on any machine (no GPU needed) for public-suite
cases and prints what the compiler made of it: registers, shared memory, wgmma and TMA
instructions, pipeline barriers, store width.

    PYTHONPATH=src python tools/tma_ptx.py [CASE ...] [--config BM,BN,BK,WARPS,STAGES,BOX_W] [--wgrad]

--wgrad compiles the TMA weight-gradient kernel instead (config: O-tile, C-tile, positions, ...).

The launch arguments come from ndconv's own launcher (run on empty CPU tensors of the case's
shapes, the kernel call intercepted; run it without TRITON_INTERPRET); integers are specialised
as Triton's JIT does (1 as a constant, multiples of 16 marked divisible), so the code matches
what the GPU would compile.
"""

import argparse
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import torch
import triton
from sm90 import Capture, compile_sm90

from ndconv.algorithms import implicit_gemm, implicit_gemm_kernels
from ndconv.algorithms.implicit_gemm import Config
from ndconv.bench import suites

DENSE = ["r50_3x3_56", "r50_3x3_28", "r50_3x3_14", "r50_3x3_7", "r50_1x1_56", "unet_3x3_64",
         "vae_3x3_256", "dilated3x3_d2", "conv3d_3x3x3", "conv1d_k3_80"]
def launch_args(p, config, kernel_name):
    a, b = (torch.empty(s, dtype=p.dtype) for s in p.operand_shapes)
    out = torch.empty(p.result_shape, dtype=p.dtype)
    real = getattr(implicit_gemm_kernels, kernel_name)
    capture = Capture(real)
    setattr(implicit_gemm_kernels, kernel_name, capture)
    try:
        ok = implicit_gemm.tma_runner(p)(p, *p.views(a, b, out), config)
    finally:
        setattr(implicit_gemm_kernels, kernel_name, real)
    return capture.calls[0] if ok else None


def describe(kernel) -> str:
    ptx, ttgir = kernel.asm["ptx"], kernel.asm["ttgir"]
    cubin = Path("/tmp/ndconv_tma.cubin")
    cubin.write_bytes(kernel.asm["cubin"])
    tool = Path(triton.__file__).parent / "backends/nvidia/bin/cuobjdump"
    usage = subprocess.run([str(tool), "--dump-resource-usage", str(cubin)], capture_output=True, text=True,
                           check=False).stdout
    regs = re.search(r"REG:(\d+)", usage)
    stores = sorted(set(re.findall(r"st\.global[.a-z0-9]*", ptx)))
    stages = re.search(r"local_alloc : \(\) -> !ttg.memdesc<(\d+)x", ttgir)
    return (f"regs {regs.group(1) if regs else '?'} smem {kernel.metadata.shared} "
            f"wgmma {ptx.count('wgmma.mma_async')} tma-loads {ptx.count('.shared::cluster.global')} "
            f"tma-stores {ptx.count('.global.shared::cta')} "
            f"buffers {stages.group(1) if stages else '?'} mbarrier-waits {ptx.count('mbarrier.try_wait')} "
            f"A-in-registers {'local_load %' in ttgir and 'ldmatrix' in ptx} stores {stores}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cases", nargs="*", default=DENSE)
    ap.add_argument("--config", help="BM,BN,BK,WARPS,STAGES,BOX_W (default: the heuristic's)")
    ap.add_argument("--ttgir", help="write the last kernel's TTGIR here")
    ap.add_argument("--wgrad", action="store_true", help="the weight-gradient kernel")
    a = ap.parse_args()
    cases = {c.name: c for c in suites.load_suite("public")}
    for name in a.cases:
        p = cases[name].problem("cpu")
        p = p.wgrad() if a.wgrad else p
        if p.dtype == torch.float32:  # as on the GPU with PyTorch's default (TF32 convolutions)
            p = replace(p, allow_tf32=True)
        if a.config:
            bm, bn, bk, warps, stages, box_w = (int(v) for v in a.config.split(","))
            config = Config(bm, bn, bk, warps, stages, tma=True, box_w=box_w)
        else:
            config = implicit_gemm.tma_wgrad_config(p) if a.wgrad else implicit_gemm.tma_config(p)
        kernel_name = "conv_wgrad_tma_kernel" if a.wgrad else "conv_fwd_tma_kernel"
        call = launch_args(p, config, kernel_name)
        if call is None:
            print(f"{name}: the TMA path refuses {config}")
            continue
        grid, args, kw = call
        kernel = compile_sm90(getattr(implicit_gemm_kernels, kernel_name), args, kw)
        box = "x".join(str(kw[k]) for k in ("BB", "B1", "B2", "B3"))
        tile = (f"BO {kw['BLOCK_O']} BC {kw['BLOCK_C']}" if a.wgrad
                else f"BN {kw['BLOCK_N']} BK {kw['BLOCK_K']}")
        print(f"{name}: box {box} {tile} warps {kw['num_warps']} "
              f"stages {kw['num_stages']} grid {grid}: {describe(kernel)}")
        if a.ttgir:
            Path(a.ttgir).write_text(kernel.asm["ttgir"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
