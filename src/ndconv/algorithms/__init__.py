"""The algorithm registry: one module per algorithm, each with four pieces.

``supports(p) -> (ok, reason)``, ``configs(p)``, ``default_config(p)`` and
``run(p, x, w, out, config)`` with the grouped operands of ``ConvProblem.views``; optionally
``prepare(p, config)``, the call of a cached plan with its per-call work done once. Algorithms
never parse user arguments and never call the planner. ``cudnn`` is always listed: without its
optional package its ``supports`` says so.
"""

import torch

from . import cudnn, depthwise, gemm, grouped, implicit_gemm, native, reference, stem, toeplitz, winograd

REGISTRY = {module.NAME: module for module in (
    depthwise, toeplitz, grouped, stem, implicit_gemm, winograd, native, cudnn, gemm, reference
)}


def prepared_call(algorithm, p, config):
    """``algorithm``'s computation of problem ``p`` as a function of the pass's natural
    contiguous operands that returns the natural result: its ``prepare`` where it has one (the
    per-call work done once), else its ``run`` on the operands' views. On CUDA it runs on the
    operands' GPU, whichever is current (with one GPU, the current one: no check per call)."""
    prepare = getattr(algorithm, "prepare", None)
    call = prepare(p, config) if prepare is not None else None
    if call is None:
        def call(a, b):
            out = torch.empty(p.result_shape, dtype=p.dtype, device=a.device)
            algorithm.run(p, *p.views(a, b, out), config)
            return out
    return on_operands_gpu(call) if p.device == "cuda" and torch.cuda.device_count() > 1 else call


def on_operands_gpu(call):
    """``call`` made current on its first operand's GPU while it runs, where another GPU is
    current: Triton launches (and compiles) on the current device, and PyTorch allocates there."""
    def guarded(a, *rest):
        index = a.get_device()
        if index == torch.cuda.current_device():
            return call(a, *rest)
        with torch.cuda.device(index):
            return call(a, *rest)
    return guarded
