"""The algorithm registry: one module per algorithm, each with four pieces.

``supports(p) -> (ok, reason)``, ``configs(p)``, ``default_config(p)`` and
``run(p, x, w, out, config)`` with the grouped operands of ``ConvProblem.views``; optionally
``prefers(p) -> (ok, reason)``, the planner's heuristic on top of ``supports`` (an algorithm that
is correct everywhere it supports but fast only on part of it). Algorithms never parse user
arguments and never call the planner.
"""

from . import depthwise, gemm, grouped, implicit_gemm, native, reference, toeplitz, winograd

REGISTRY = {module.NAME: module for module in (
    depthwise, toeplitz, grouped, implicit_gemm, winograd, native, gemm, reference
)}
