"""Runs one case list entry on the GPU under several configs and precisions (debugging aid)."""
import sys

import torch

from ndconv import testing
from ndconv.algorithms import implicit_gemm
from ndconv.algorithms.implicit_gemm import Config

names = sys.argv[1:]
for case in testing.CASES:
    if names and case.name not in names:
        continue
    for dtype in (torch.float32, torch.bfloat16):
        for tf32 in (True, False):
            torch.backends.cudnn.allow_tf32 = tf32
            p = case.problem(dtype=dtype, device="cuda")
            for q in (p, p.dgrad(), p.wgrad()):
                d = implicit_gemm.default_config(q)
                for cfg in (d, Config(d.block_m, d.block_n, d.block_k, d.num_warps, 3, d.packed),
                            Config(d.block_m, d.block_n, d.block_k, d.num_warps, 1, d.packed),
                            Config(64, 32, 32, 4, 2, not d.packed)):
                    r = testing.check("implicit_gemm", q, seed=1, config=cfg)
                    if not r.ok:
                        print(f"FAIL {case.name} {q.pass_} {dtype} tf32={q.allow_tf32} {cfg}: {r}",
                              flush=True)
print("done", flush=True)
