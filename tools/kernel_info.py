"""Compiles the implicit-GEMM kernels on a few public-suite problems and prints what the
compiler made of them: wgmma or not, registers, spills, shared memory (run on the GPU)."""

import sys

import torch

from ndconv import testing
from ndconv.algorithms import implicit_gemm_kernels as K
from ndconv.bench import suites

cases = {c.name: c for c in suites.load_suite("public")}
for name, pass_ in [(n.split(":")[0], n.split(":")[1]) for n in sys.argv[1:]]:
    p = cases[name].problem("cuda")
    q = p if pass_ == "fwd" else getattr(p, pass_)()
    a, b = testing.random_operands(q)
    testing.run_algorithm("implicit_gemm", q, a, b)
    torch.cuda.synchronize()
for fn in (K.conv_fwd_kernel, K.conv_wgrad_kernel):
    for cache in fn.device_caches.values():
        for kernel in cache[0].values():
            ptx = kernel.asm.get("ptx", "")
            m = kernel.metadata
            print(f"{fn.__name__}: warps {m.num_warps} stages {m.num_stages} regs {kernel.n_regs} "
                  f"spills {kernel.n_spills} smem {m.shared} wgmma {'wgmma.mma_async' in ptx} "
                  f"mma.sync {'mma.sync' in ptx} cp.async {'cp.async' in ptx} "
                  f"ld.global.v4 {ptx.count('ld.global.v4')} bar.sync {ptx.count('bar.sync')}")
