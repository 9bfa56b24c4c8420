"""Runs implicit_gemm on public-suite problems and prints what the compiler made of every
Triton kernel those runs compiled: wgmma or not, registers, spills, shared memory (on the GPU).

    PYTHONPATH=src python3 tools/kernel_info.py r50_3x3_56:fwd conv1d_k3_80:fwd r50_3x3_56:wgrad
"""

import sys

import torch
from gpu_check import compiled_kernels

from ndconv import testing
from ndconv.bench import suites

if len(sys.argv) < 2:
    sys.exit(__doc__)
cases = {c.name: c for c in suites.load_suite("public")}
for name, pass_ in (arg.split(":") for arg in sys.argv[1:]):
    p = cases[name].problem("cuda")
    q = p if pass_ == "fwd" else getattr(p, pass_)()
    a, b = testing.random_operands(q)
    testing.run_algorithm("implicit_gemm", q, a, b)
    torch.cuda.synchronize()
for k in compiled_kernels(print):
    print(f"{k['kernel']} ({'/'.join(k['dtypes'])}): warps {k['num_warps']} stages {k['num_stages']} "
          f"regs {k['n_regs']} spills {k['n_spills']} smem {k['shared']} wgmma {k['wgmma']} "
          f"mma.sync {k['mma']} cp.async {k['cp_async']} ld.global.v4 {k['ld_v4']} bar.sync {k['bar_sync']}")
