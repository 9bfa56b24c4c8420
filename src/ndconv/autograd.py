"""The one differentiable convolution op: forward, input gradient and weight gradient are all
ConvProblems run through the planner, and each is differentiable again (to any order: the
gradients of a pass are passes of the same problem, as in PyTorch's convolution double backward).

Eager calls go through a ``torch.autograd.Function`` (cheap); under ``torch.compile`` the same
computation is the custom op ``ndconv::conv`` with a fake implementation, so the compiled graph
sees one node per convolution.
"""

from __future__ import annotations

import torch

from . import planner
from .problem import ConvProblem


def run(p: ConvProblem, a: torch.Tensor, b: torch.Tensor, algorithm: str | None = None) -> torch.Tensor:
    """Computes pass ``p`` from its natural operands (see ConvProblem.views) into a new tensor.

    Trivial problems (empty result, or an empty reduction giving zeros) launch nothing.
    """
    if p.is_trivial:
        return torch.zeros(p.result_shape, dtype=p.dtype, device=a.device)
    return planner.plan(p, algorithm).runner(p)(a, b)


def compute(p: ConvProblem, mode: str, a: torch.Tensor, b: torch.Tensor,
            algorithm: str | None = None) -> torch.Tensor:
    """Pass ``mode`` of forward problem ``p`` from its natural operands: y from (x, w) for
    "fwd", dx from (dy, w) for "dgrad", dw (the gradient of the weight as given) from (x, dy)
    for "wgrad"."""
    if mode == "fwd":
        return run(p, a, b, algorithm)
    if mode == "dgrad":
        return run(p.dgrad(), a, b, algorithm)
    dw = run(p.wgrad(), a, b, algorithm)  # the gradient of the weight as read
    return dw.flip(tuple(range(1, 1 + p.ndim))) if p.flip else dw


# Each pass is bilinear in its operands (a, b), so its gradients for an upstream gradient g are
# passes of the same forward problem again: (pass, first operand, second operand) for a and b.
_ADJOINTS = {
    "fwd": (("dgrad", "g", "b"), ("wgrad", "a", "g")),
    "dgrad": (("fwd", "g", "b"), ("wgrad", "g", "a")),
    "wgrad": (("dgrad", "b", "g"), ("fwd", "a", "g")),
}


def _gradients(p, mode, a, b, g, needs, algorithm, op):
    """The gradients of pass ``mode``'s operands (a, b) for upstream gradient ``g``, each only if
    needed; ``op(p, mode, a, b, algorithm)`` computes a pass (differentiably when a higher
    derivative is being built). Both first-order gradients come from one call where the planner
    has one for them."""
    g = g.contiguous()
    if mode == "fwd" and needs[0] and needs[1] and op is compute:
        both = planner.gradients(p, algorithm)
        if both is not None:
            return both(a, b, g)
    operands = {"a": a, "b": b, "g": g}
    return tuple(op(p, m, operands[u], operands[v], algorithm) if need else None
                 for need, (m, u, v) in zip(needs, _ADJOINTS[mode]))


class _Convolution(torch.autograd.Function):
    """One pass of a convolution; differentiable to any order (its backward is passes too)."""

    @staticmethod
    def forward(ctx, a, b, p, mode, algorithm):
        ctx.save_for_backward(a, b)
        ctx.problem, ctx.mode, ctx.algorithm = p, mode, algorithm
        return compute(p, mode, a, b, algorithm)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        op = _recorded if torch.is_grad_enabled() else compute  # create_graph: a graph of passes
        ga, gb = _gradients(ctx.problem, ctx.mode, a, b, g, ctx.needs_input_grad[:2], ctx.algorithm, op)
        return ga, gb, None, None, None


def _recorded(p, mode, a, b, algorithm):
    """A pass recorded for autograd (a gradient computed while building a higher derivative)."""
    a, b = a.contiguous(), b.contiguous()
    if a.requires_grad or b.requires_grad:
        return _Convolution.apply(a, b, p, mode, algorithm)
    return compute(p, mode, a, b, algorithm)


@torch.library.custom_op("ndconv::conv", mutates_args=())
def _conv_op(a: torch.Tensor, b: torch.Tensor, problem: list[int], mode: str, algorithm: str) -> torch.Tensor:
    p = ConvProblem.from_ints(problem, a.dtype, a.device.type)
    return compute(p, mode, a, b, algorithm or None)


@_conv_op.register_fake
def _conv_op_fake(a, b, problem, mode, algorithm):
    p = ConvProblem.from_ints(problem, a.dtype, a.device.type)
    return a.new_empty({"fwd": p.result_shape, "dgrad": p.x_shape, "wgrad": p.w_shape}[mode])


def _conv_op_setup(ctx, inputs, output):
    a, b, problem, mode, algorithm = inputs
    ctx.save_for_backward(a, b)
    ctx.problem, ctx.mode, ctx.algorithm = problem, mode, algorithm


def _conv_op_backward(ctx, g):
    a, b = ctx.saved_tensors
    p = ConvProblem.from_ints(ctx.problem, a.dtype, a.device.type)

    def op(q, mode, a, b, algorithm):
        return _conv_op(a.contiguous(), b.contiguous(), q.to_ints(), mode, algorithm)

    ga, gb = _gradients(p, ctx.mode, a, b, g, ctx.needs_input_grad[:2], ctx.algorithm, op)
    return ga, gb, None, None, None


_conv_op.register_autograd(_conv_op_backward, setup_context=_conv_op_setup)


def convolve(p: ConvProblem, x: torch.Tensor, w: torch.Tensor, algorithm: str | None = None) -> torch.Tensor:
    """The differentiable forward convolution ``p`` of ``x`` and ``w`` (already promoted)."""
    x, w = x.contiguous(), w.contiguous()
    if torch.compiler.is_compiling():
        return _conv_op(x, w, p.to_ints(), "fwd", algorithm or "")
    if torch.is_grad_enabled() and (x.requires_grad or w.requires_grad):
        direct = planner.differentiable(p, algorithm)  # PyTorch's own op, its backward in C++
        if direct is not None:
            return direct(x, w)
        return _Convolution.apply(x, w, p, "fwd", algorithm)
    return run(p, x, w, algorithm)  # nothing to differentiate: skip autograd's bookkeeping
