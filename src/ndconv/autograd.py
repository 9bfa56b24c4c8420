"""The one differentiable convolution op: forward, input gradient and weight gradient are all
ConvProblems run through the planner.

Eager calls go through a ``torch.autograd.Function`` (cheap); under ``torch.compile`` the same
computation is the custom op ``ndconv::conv`` with a fake implementation, so the compiled graph
sees one node per convolution.
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from . import planner
from .problem import ConvProblem


def run(p: ConvProblem, a: torch.Tensor, b: torch.Tensor, algorithm: str | None = None) -> torch.Tensor:
    """Computes pass ``p`` from its natural operands (see ConvProblem.views) into a new tensor.

    Trivial problems (empty result, or an empty reduction giving zeros) launch nothing.
    """
    if p.is_trivial:
        return torch.zeros(p.result_shape, dtype=p.dtype, device=a.device)
    return planner.plan(p, algorithm).runner(p)(a, b)


def _gradients(p, x, w, dy, needs, algorithm, op):
    """(dx, dw) of forward problem ``p`` for output gradient ``dy``, each only if needed (both
    from one call where the planner has one for them)."""
    dy = dy.contiguous()
    if needs[0] and needs[1] and op is run:
        both = planner.gradients(p, algorithm)
        if both is not None:
            return both(x, w, dy)
    dx = op(p.dgrad(), dy, w, algorithm) if needs[0] else None
    dw = None
    if needs[1]:
        dw = op(p.wgrad(), x, dy, algorithm)
        if p.flip:  # the weight gradient problem computes the gradient of the weight as read
            dw = dw.flip(tuple(range(1, 1 + p.ndim)))
    return dx, dw


class _Convolution(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, p, algorithm):
        ctx.save_for_backward(x, w)
        ctx.problem, ctx.algorithm = p, algorithm
        return run(p, x, w, algorithm)

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        dx, dw = _gradients(ctx.problem, x, w, dy, ctx.needs_input_grad[:2], ctx.algorithm, run)
        return dx, dw, None, None


@torch.library.custom_op("ndconv::conv", mutates_args=())
def _conv_op(a: torch.Tensor, b: torch.Tensor, problem: list[int], algorithm: str) -> torch.Tensor:
    p = ConvProblem.from_ints(problem, a.dtype, a.device.type)
    return run(p, a, b, algorithm or None)


@_conv_op.register_fake
def _conv_op_fake(a, b, problem, algorithm):
    p = ConvProblem.from_ints(problem, a.dtype, a.device.type)
    return a.new_empty(p.result_shape)


def _conv_op_setup(ctx, inputs, output):
    a, b, problem, algorithm = inputs
    ctx.save_for_backward(a, b)
    ctx.problem, ctx.algorithm = problem, algorithm


def _conv_op_backward(ctx, dy):
    x, w = ctx.saved_tensors
    p = ConvProblem.from_ints(ctx.problem, x.dtype, x.device.type)

    def op(q, a, b, algorithm):
        return _conv_op(a, b, q.to_ints(), algorithm)

    dx, dw = _gradients(p, x, w, dy, ctx.needs_input_grad[:2], ctx.algorithm, op)
    return dx, dw, None, None


_conv_op.register_autograd(_conv_op_backward, setup_context=_conv_op_setup)


def convolve(p: ConvProblem, x: torch.Tensor, w: torch.Tensor, algorithm: str | None = None) -> torch.Tensor:
    """The differentiable forward convolution ``p`` of ``x`` and ``w`` (already promoted)."""
    x, w = x.contiguous(), w.contiguous()
    if torch.compiler.is_compiling():
        return _conv_op(x, w, p.to_ints(), algorithm or "")
    if torch.is_grad_enabled() and (x.requires_grad or w.requires_grad):
        return _Convolution.apply(x, w, p, algorithm)
    return run(p, x, w, algorithm)  # nothing to differentiate: skip autograd's bookkeeping
