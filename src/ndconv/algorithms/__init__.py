"""The algorithm registry: one module per algorithm, each with four pieces.

``supports(p) -> (ok, reason)``, ``configs(p)``, ``default_config(p)`` and
``run(p, x, w, out, config)`` with the grouped operands of ``ConvProblem.views``; optionally
``prepare(p, config)``, the call of a cached plan with its per-call work done once. Algorithms
never parse user arguments and never call the planner. ``cudnn`` is always listed: without its
optional package its ``supports`` says so.
"""

from . import cudnn, depthwise, gemm, grouped, implicit_gemm, native, reference, toeplitz, winograd

REGISTRY = {module.NAME: module for module in (
    depthwise, toeplitz, grouped, implicit_gemm, winograd, native, cudnn, gemm, reference
)}
