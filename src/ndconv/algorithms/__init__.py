"""The algorithm registry: one module per algorithm, each with four pieces.

``supports(p) -> (ok, reason)``, ``configs(p)``, ``default_config(p)`` and
``run(p, x, w, out, config)`` with the grouped operands of ``ConvProblem.views``. Algorithms
never parse user arguments and never call the planner. ``cudnn`` is always listed: without its
optional package its ``supports`` says so.
"""

from . import cudnn, depthwise, gemm, grouped, implicit_gemm, native, reference, winograd

REGISTRY = {module.NAME: module for module in (depthwise, grouped, implicit_gemm, winograd, native, cudnn, gemm, reference)}
