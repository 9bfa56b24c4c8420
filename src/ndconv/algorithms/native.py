"""PyTorch's own convolution (cuDNN on the GPU, oneDNN on the CPU): the benchmark's baseline and
an algorithm of its own (the fast path on the CPU).

A formulation is what a PyTorch user would write for a problem: one ``aten.convolution`` on
channels-last views, plus the steps it needs around it, which it pays for:

- asymmetric or negative padding, through ``F.pad``, or through a symmetric pad with the output
  cropped (the causal-conv idiom);
- input dilation, through ``conv_transpose`` (with flip) or explicit zero insertion;
- 1-D, both as conv1d and as a 2-D conv with H = 1.

Weights are parameters, so their re-arrangement (layout, flip) is done once, untimed. The
gradient passes are ``aten.convolution_backward`` of the same formulation; the weight gradient
reuses the forward's pre-processed input (a training step computed it already).

As an algorithm, ``native`` runs a problem's first formulation (``configs`` lists them all).
The weight gradient runs through ``convolution_backward`` of the forward geometry. The input
gradient has both: ``convolution_backward`` of the forward it comes from (what PyTorch's
autograd runs; first for ungrouped problems, where cuDNN's backward-data kernels measured
faster on the H200: r50_3x3_56 40 against 52 us, r50_3x3_14 31 against 43), or the forward
problem it is, over dy (first for grouped and depthwise ones: dw7x7_56 148 against 336 us,
grouped3x3_g32 102 against 116). Where both gradients run plain formulations of one forward
geometry, autograd takes them from one ``convolution_backward`` (``prepare_gradients``), and
where the forward is PyTorch's convolution too, the call is PyTorch's own differentiable op
(``differentiable``), so that PyTorch's C++ node runs the backward.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cached_property, lru_cache

import torch
import torch.nn.functional as F

from ..problem import ConvProblem

NAME = "native"


@dataclass(frozen=True)
class Formulation:
    name: str
    prepare: Callable  # (a, b) -> operands for run; untimed (weight layout, saved activations)
    run: Callable  # timed: the user's code for this pass
    to_natural: Callable  # untimed: run's result in ndconv's natural layout, for checking


def channels_first(t: torch.Tensor, contiguous_unit: bool = False) -> torch.Tensor:
    """``[N, *S, C]`` as ``[N, C, *S]`` with canonical channels-last strides, without copying
    (PyTorch's CPU convolution mishandles odd strides on size-1 axes, so none are left); with
    ``contiguous_unit`` a channel axis of size 1 gets the contiguous stride, which describes the
    same memory (see ``_one_cpu_channel``)."""
    return t.as_strided(*_channels_first_geometry(t.shape, contiguous_unit))


@lru_cache(maxsize=1024)
def _channels_first_geometry(shape, contiguous_unit: bool = False) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(shape, strides) of channels_first's view (cached: computing them is most of a call's
    host time on tiny problems)."""
    spatial = shape[1:-1]
    strides = [shape[-1] * math.prod(spatial), 1]
    for d in range(len(spatial)):
        strides.append(shape[-1] * math.prod(spatial[d + 1:]))
    if contiguous_unit and shape[-1] == 1:
        strides[1] = math.prod(spatial)
    return (shape[0], shape[-1], *spatial), tuple(strides)


def _one_cpu_channel(p: ConvProblem) -> bool:
    """Whether forward problem ``p`` convolves one input channel on a CPU. There PyTorch's
    convolution (oneDNN, torch 2.13) reads garbage when an operand has channels-last strides:
    a batch of two or more and a strided last axis with one output column (found against MLX;
    [2, 7, 1, 1] by [1, 3, 3, 1] at stride (1, 3)). Contiguous strides, the same memory for one
    channel, take its other path, so its operands get those."""
    return p.device == "cpu" and p.in_channels == 1


def channels_last(t: torch.Tensor) -> torch.Tensor:
    """``[N, C, *S]`` as ``[N, *S, C]`` (a view)."""
    return t.movedim(1, -1)


def _torch_pads(lo, hi):
    """F.pad's argument (last axis first) for per-axis (lo, hi); negative values crop."""
    pads = []
    for a, b in zip(reversed(lo), reversed(hi)):
        pads += [a, b]
    return pads


def _conv_weight(w: torch.Tensor, flip: bool, contiguous_unit: bool) -> torch.Tensor:
    """MLX weight [O, *K, C/g] as torch's [O, C/g, *K], channels last, flipped if asked."""
    D = w.dim() - 2
    if flip:
        w = w.flip(tuple(range(1, 1 + D)))
    return channels_first(w.contiguous(), contiguous_unit)


def _swap_channels(t: torch.Tensor, reverse: bool) -> torch.Tensor:
    """``t`` [G, A, T, B] as a contiguous [G, B, T, A], its taps T reversed if ``reverse``: one
    tiled Triton copy on a GPU, PyTorch's elsewhere. PyTorch's copy of the permuted view (and
    its flip, a second copy) cost convT_4x4s2's passes 3-7 us on the H200 more than the tiled
    copy's 2-3 us (native 123.8 / 108.2 / 124.5 -> 121.0 / 105.4 / 117.5 us)."""
    if t.is_cuda:
        from .triton_support import swap_channels

        return swap_channels(t, reverse)
    return (t.flip(2) if reverse else t).permute(0, 3, 2, 1).contiguous()


def _transposed_weight(w: torch.Tensor, groups: int, flip: bool, contiguous_unit: bool) -> torch.Tensor:
    """MLX weight [O, *K, C/g] as conv_transpose's [C, O/g, *K], channels last (conv_transpose
    flips itself: the taps are reversed where the problem does not flip)."""
    out_channels, *K, Cg = w.shape
    grouped = w.reshape(groups, out_channels // groups, -1, Cg)
    swapped = _swap_channels(grouped, reverse=not flip)  # [G, C/g, T, O/g]
    return channels_first(swapped.view(groups * Cg, *K, out_channels // groups), contiguous_unit)


def _identity(t):
    return t


@dataclass(frozen=True)
class _Conv:
    """One aten.convolution with its pre- and post-steps, for one forward problem."""

    name: str
    p: ConvProblem
    pre: Callable  # natural x -> [N, C, *S] input of the convolution
    conv: dict  # stride, padding, dilation, transposed, output_padding, groups
    weight: Callable  # natural MLX weight -> torch weight
    crop: tuple | None  # per axis (start, length) of the convolution's output kept, or None
    unpre: Callable  # gradient of pre's output -> dx (natural layout)
    flipped_weight: bool  # True when weight() reversed the kernel (undone for checking)
    lift: Callable = _identity  # adds an H = 1 axis (1-D as 2-D) to the output gradient
    lower: Callable = _identity  # removes it from outputs and weight gradients

    @property
    def contiguous_unit(self) -> bool:
        return _one_cpu_channel(self.p)

    def _empty(self, shape, like):
        """An uninitialised tensor of torch layout ``shape``: channels last, or contiguous for
        one channel where ``_one_cpu_channel`` asks for it."""
        unit = self.contiguous_unit and shape[1] == 1
        return torch.empty(shape, dtype=like.dtype, device=like.device,
                           memory_format=torch.contiguous_format if unit else _memory_format(len(shape)))

    def _args(self):
        c = self.conv
        return (c["stride"], c["padding"], c["dilation"], c["transposed"], c["output_padding"], c["groups"])

    def _crop(self, y):
        if self.crop is None:
            return y
        for d, (start, length) in enumerate(self.crop):
            y = y.narrow(2 + d, start, length)
        return y

    @cached_property
    def _geometry(self):
        """((shape, strides) of pre(x), (shape, strides) of the torch weight, shape of the
        uncropped output): what a call needs besides the operands' values, found once on meta
        tensors (a meta convolution per call cost 65 us of host time on a CPU)."""
        x = self.pre(torch.empty(self.p.x_shape, device="meta"))
        w = self.weight(torch.empty(self.p.w_shape, device="meta"))
        full_shape = torch.convolution(x, w, None, *self._args()).shape
        return (x.shape, x.stride()), (w.shape, w.stride()), full_shape

    def formulations(self) -> dict[str, Formulation]:
        def fwd_run(x, w):
            return self.lower(self._crop(torch.convolution(self.pre(x), w, None, *self._args())))

        def dgrad_prepare(dy, w):
            (x_shape, _), _, full_shape = self._geometry
            x_like = self._empty(x_shape, dy)  # shape and layout only
            return channels_first(dy, self.contiguous_unit), self.weight(w), x_like, full_shape

        def wgrad_prepare(x, dy):
            _, w_geometry, full_shape = self._geometry
            w_like = torch.empty_strided(*w_geometry, device=x.device, dtype=x.dtype)  # shape and layout only
            # the forward computed pre(x) too
            return channels_first(dy, self.contiguous_unit), self.pre(x), w_like, full_shape

        def full_dy(dy, full_shape):
            """The uncropped convolution's output gradient (zeros where the crop cut)."""
            dy = self.lift(dy)
            if self.crop is None:
                return dy
            full = self._empty(full_shape, dy).zero_()
            self._crop(full).copy_(dy)
            return full

        def dgrad_run(dy, wt, x_like, full_shape):
            g = torch.ops.aten.convolution_backward(
                full_dy(dy, full_shape), x_like, wt, None, *self._args(), [True, False, False]
            )[0]
            return self.unpre(g)

        def wgrad_run(dy, xp, w_like, full_shape):
            return torch.ops.aten.convolution_backward(
                full_dy(dy, full_shape), xp, w_like, None, *self._args(), [False, True, False]
            )[1]

        return {
            "fwd": Formulation(self.name, lambda x, w: (x, self.weight(w)), fwd_run, channels_last),
            "dgrad": Formulation(self.name, dgrad_prepare, dgrad_run, _identity),
            "wgrad": Formulation(self.name, wgrad_prepare, wgrad_run, self._natural_weight_grad),
        }

    def _natural_weight_grad(self, g):
        p = self.p
        g = self.lower(g).movedim(1, -1)  # [O, *K, C/g], or [C, *K, O/g] when transposed
        if self.conv["transposed"]:  # one copy, the flip in it
            C, *K, Og = g.shape
            swapped = _swap_channels(g.reshape(p.groups, C // p.groups, -1, Og), reverse=self.flipped_weight)
            return swapped.view(p.out_channels, *K, C // p.groups)
        if self.flipped_weight:
            g = g.flip(tuple(range(1, 1 + p.ndim)))
        return g


def _memory_format(ndim: int):
    return {4: torch.channels_last, 5: torch.channels_last_3d}.get(ndim, torch.contiguous_format)


def _convs(p: ConvProblem) -> list[_Conv]:
    """Every PyTorch formulation of forward problem ``p``."""
    D = p.ndim
    idil = p.input_dilation
    out = []
    common = dict(dilation=list(p.kernel_dilation), groups=p.groups)
    unit = _one_cpu_channel(p)
    first = lambda x: channels_first(x, unit)  # noqa: E731

    def direct(name, pre, unpre, lo, hi):
        """A direct convolution of pre(x), whose pads are (lo, hi) in pre(x)'s coordinates."""
        weight = lambda w: _conv_weight(w, p.flip, unit)  # noqa: E731
        conv = dict(stride=list(p.stride), transposed=False, output_padding=[0] * D, **common)
        if lo == hi and min(lo) >= 0:
            out.append(_Conv(name, p, pre, dict(padding=list(lo), **conv), weight, None, unpre, p.flip))
            return
        # pads first, crops after: a crop larger than the axis is fine once the other side is padded
        pads = _torch_pads(lo, hi)
        grow, cut = [max(v, 0) for v in pads], [min(v, 0) for v in pads]
        out.append(_Conv(
            f"{name}+F.pad", p, lambda x: F.pad(F.pad(pre(x), grow), cut), dict(padding=[0] * D, **conv),
            weight, None, lambda g: unpre(F.pad(F.pad(g, [-v for v in cut]), [-v for v in grow])), p.flip,
        ))
        sym = [max(a, b) for a, b in zip(lo, hi)]
        if min(lo) >= 0 and min(hi) >= 0 and all((s - a) % st == 0 for s, a, st in zip(sym, lo, p.stride)):
            crop = tuple(((s - a) // st, so) for s, a, st, so in zip(sym, lo, p.stride, p.out_spatial))
            out.append(_Conv(f"{name}+sym-pad-crop", p, pre, dict(padding=sym, **conv), weight, crop, unpre,
                             p.flip))

    if all(i == 1 for i in idil):  # pads in dilated coordinates are the input's own
        direct("conv", first, channels_last, list(p.padding_lo), list(p.padding_hi))
    else:
        # conv_transpose: lo = span-1-P, hi = lo + output_padding, stride 1 only
        P = [sp - 1 - a for sp, a in zip(p.span, p.padding_lo)]
        op = [b - a for a, b in zip(p.padding_lo, p.padding_hi)]
        if (
            all(s == 1 for s in p.stride)
            and min(P) >= 0
            and all(0 <= o < max(i, kd) for o, i, kd in zip(op, idil, p.kernel_dilation))
        ):
            conv = dict(stride=list(idil), padding=P, transposed=True, output_padding=op, **common)
            out.append(_Conv(
                "conv_transpose", p, first, conv, lambda w: _transposed_weight(w, p.groups, p.flip, unit),
                None, channels_last, not p.flip,
            ))

        # explicit zero insertion, then a direct convolution (pads now in dilated coordinates)
        def insert_zeros(x):
            z = x.new_zeros((x.shape[0], *p.dilated_in, x.shape[-1]))
            z[(slice(None), *(slice(None, None, i) for i in idil))] = x
            return first(z)

        def remove_zeros(g):
            return channels_last(g)[(slice(None), *(slice(None, None, i) for i in idil))]

        direct("zero-insert+conv", insert_zeros, remove_zeros, list(p.padding_lo), list(p.padding_hi))

    if D == 1:  # the same, as a 2-D convolution with H = 1: first on CUDA, where cuDNN's 2-D
        # kernels measured faster on the H200 (conv1d_k3s2_768 129 against 609 us, conv1d_k3_80
        # 55 against 95, the causal conv1d's input gradient 308 against 982)
        flat = [_as_2d(c) for c in out]
        out = flat + out if p.device == "cuda" else out + flat
    return out


def _as_2d(c: _Conv) -> _Conv:
    """Formulation ``c`` of a 1-D problem as a 2-D convolution with H = 1."""

    def up(t):  # [N, C, L] -> [N, C, 1, L], canonical channels-last strides when possible
        N, C, L = t.shape
        if t.stride(1) == 1 and t.stride(2) == C:
            return t.as_strided((N, C, 1, L), (C * L, 1, C * L, C))
        return t.unsqueeze(2)

    conv = dict(c.conv)
    for k, fill in (("stride", 1), ("padding", 0), ("dilation", 1), ("output_padding", 0)):
        conv[k] = [fill] + list(conv[k])
    crop = None if c.crop is None else ((0, 1), *c.crop)
    return _Conv(
        f"{c.name} (as 2-D)", c.p, lambda x: up(c.pre(x)), conv, lambda w: up(c.weight(w)), crop,
        lambda g: c.unpre(g.squeeze(2)), c.flipped_weight, up, lambda t: t.squeeze(2),
    )


@lru_cache(maxsize=256)
def formulations(p: ConvProblem, pass_: str) -> tuple[Formulation, ...]:
    """The PyTorch formulations of pass ``pass_`` of forward problem ``p``."""
    return tuple(c.formulations()[pass_] for c in _convs(p))


# ---------------------------------------------------------------------- the algorithm


def supports(p):
    return True, "PyTorch's own convolution (cuDNN / oneDNN) through its fastest formulation"


BACKWARD = "backward of "  # an input gradient's formulations through convolution_backward


def configs(p) -> list[str]:
    """Formulation names for this pass (the weight gradient's are its forward geometry's; an
    input gradient's also its forward's backward-data ones, named BACKWARD + name)."""
    names = [f.name for f in formulations(*_forward_of(p))]
    if p.pass_ != "dgrad":
        return names
    backward = [BACKWARD + f.name for f in formulations(forward_of_dgrad(p), "dgrad")]
    return backward + names if p.groups == 1 else names + backward


def forward_of_dgrad(d: ConvProblem) -> ConvProblem:
    """The forward problem whose input gradient is ``d`` (``ConvProblem.dgrad`` undone), with a
    high padding that gives its output size (_high_padding): the input gradient does not depend
    on it."""
    lo = tuple(sp - 1 - a for sp, a in zip(d.span, d.padding_lo))
    stride, idil = d.input_dilation, d.stride
    hi = _high_padding(d.in_spatial, stride, d.span, d.out_spatial, idil, lo)
    return ConvProblem(
        (d.batch, *d.out_spatial, d.out_channels), (d.in_channels, *d.kernel, d.out_channels // d.groups),
        stride, lo, hi, d.kernel_dilation, idil, d.groups, not d.flip, d.dtype, d.device, d.allow_tf32, "fwd",
    )


def _high_padding(out_spatial, stride, span, in_spatial, idil, lo) -> tuple[int, ...]:
    """Per axis, a high padding that gives a convolution these output sides: the low one where
    it does (a stride s leaves s choices), so that PyTorch gets one symmetric padding, else the
    least. The least alone made a strided convolution's symmetric padding asymmetric, which
    PyTorch pads a copy for: r50's 3x3 stride-2 weight gradient (56 -> 28, 128 channels) 162
    against 64 us on the H200, a Whisper-style conv1d k3 s2 690 against 182."""
    out = []
    for so, st, sp, s, i, a in zip(out_spatial, stride, span, in_spatial, idil, lo):
        least = (so - 1) * st + sp - ((s - 1) * i + 1) - a
        out.append(a if least <= a < least + st else least)
    return tuple(out)


def default_config(p) -> str:
    return configs(p)[0]


def pads_a_copy(p) -> bool:
    """Whether PyTorch computes ``p`` over a padded copy of an operand (its padding asymmetric,
    after _high_padding)."""
    forward = forward_of_dgrad(p) if p.pass_ == "dgrad" and p.groups == 1 else _forward_of(p)[0]
    return forward.padding_lo != forward.padding_hi


def _forward_of(p):
    """(forward problem, pass) that PyTorch computes for pass problem ``p``: the problem itself
    for the forward and the input gradient (a forward problem over dy), the forward geometry
    behind a weight-gradient problem; either with a high padding that gives its outputs
    (_high_padding: a padding no output reads is dropped, e.g. a "SAME" pad of one row and
    column on a stride-2 convolution of an odd side, so PyTorch pads no copy)."""
    if p.pass_ != "wgrad":
        hi = _high_padding(p.out_spatial, p.stride, p.span, p.in_spatial, p.input_dilation, p.padding_lo)
        return replace(p, padding_hi=hi, pass_="fwd"), "fwd"
    stride, kdil, idil, lo = p.kernel_dilation, p.stride, p.input_dilation, p.padding_lo
    out_spatial, kernel = p.kernel, p.out_spatial
    N, G, Cg = p.x_shape[-1] // p.groups, p.groups, p.batch
    span = [(k - 1) * d + 1 for k, d in zip(kernel, kdil)]
    hi = _high_padding(out_spatial, stride, span, p.in_spatial, idil, lo)
    forward = ConvProblem(
        (N, *p.in_spatial, G * Cg), (p.out_channels, *kernel, Cg), stride, lo, hi, kdil, idil, G,
        False, p.dtype, p.device, p.allow_tf32, "fwd",
    )
    return forward, "wgrad"


def _source(p, config: str | None):
    """(forward problem, its pass, formulation name, whether it takes the forward's weight) of
    ``config`` (a ``configs`` name)."""
    name = config or default_config(p)
    if name.startswith(BACKWARD):
        return forward_of_dgrad(p), "dgrad", name[len(BACKWARD):], True
    return (*_forward_of(p), name, False)


def _formulation(p, config: str | None):
    """(formulation, whether it takes the forward's weight) of ``config`` (a ``configs`` name)."""
    forward, pass_, name, forward_weight = _source(p, config)
    return next(f for f in formulations(forward, pass_) if f.name == name), forward_weight


def _in_float32(p) -> bool:
    """Whether ``p`` is computed in float32: on the CPU PyTorch's half-precision convolutions
    round partial sums to the half type (a 3x3x3 input gradient in fp16: 5x the error of one
    final rounding, at the edge of fp16's tolerance), where the contract accumulates in fp32."""
    return p.device == "cpu" and p.dtype in (torch.float16, torch.bfloat16)


def run(p, x, w, out, config: str | None = None):
    """x [N, *S, G, Cg], w [G, Og, *K, Cg], out [N, *S_out, G, Og] (views with any strides)."""
    f, forward_weight = _formulation(p, config)
    if _in_float32(p):
        x, w = x.float(), w.float()
    if p.pass_ == "wgrad":
        x, dy, dw, _ = p.wgrad_natural(x, w, out)
        a, b, target = x.flatten(-2), dy.flatten(-2), dw.flatten(0, 1)
    else:  # an input gradient's w [G, C/G, *K, O/G] is the forward's [G, O/G, *K, C/G] transposed
        a, b, target = x.flatten(-2), (w.transpose(1, -1) if forward_weight else w).flatten(0, 1), out
    result = f.to_natural(f.run(*f.prepare(a, b)))
    target.copy_(result.reshape(target.shape))


def prepare(p, config: str | None):
    """``p``'s call on the pass's natural operands, returning PyTorch's result itself (no copy
    into a separate output: it already has the natural layout, channels last)."""
    call = _prepare(p, config)
    if _in_float32(p):
        return lambda a, b: call(a.float(), b.float()).to(p.dtype)
    return call


def _prepare(p, config: str | None):
    plain = _plain(p, config)
    if plain is not None:
        return plain
    (f, forward_weight), shape, G = _formulation(p, config), p.result_shape, p.groups

    def call(a, b):
        if p.pass_ == "dgrad" and not forward_weight:  # forward weight [O, *K, C/G] as dgrad's [C, *K, O/G]
            b = b.unflatten(0, (G, -1)).transpose(1, -1).flatten(0, 1)
        return f.to_natural(f.run(*f.prepare(a, b))).reshape(shape).contiguous()
    return call


# Direct formulations whose operands are views of the natural ones: no pad, crop or zero insertion.
_PLAIN = ("conv", "conv (as 2-D)")


@dataclass(frozen=True)
class _PlainGeometry:
    """A plain formulation's convolution between views of the natural operands: their
    (shape, strides) as PyTorch's x, weight and y, the convolution's arguments, the kernel axes
    to flip (or None), and whether a 1-D problem runs as 2-D."""

    x: tuple
    w: tuple
    y: tuple
    args: tuple
    flip: tuple | None
    lifted: bool

    def weight(self, b):
        """The natural weight [O, *K, C/G] as PyTorch's (flipped first when the problem flips)."""
        return (b.flip(self.flip) if self.flip else b).as_strided(*self.w)

    def to_last(self, r):
        """PyTorch's [N, C, *S] or [O, C/G, *K] result as channels last."""
        return r.permute(0, *range(2, r.dim()), 1)


def _plain_geometry(forward: ConvProblem, name: str) -> _PlainGeometry:
    c = next(c for c in _convs(forward) if c.name == name)
    x_geometry, w_geometry, _ = c._geometry  # the weight's: flipped, then made contiguous
    y = c.lift(channels_first(torch.empty((forward.batch, *forward.out_spatial, forward.out_channels),
                                          device="meta"), c.contiguous_unit))
    flip = tuple(range(1, 1 + forward.ndim)) if forward.flip else None
    return _PlainGeometry(x_geometry, w_geometry, (y.shape, y.stride()), c._args(), flip,
                          len(x_geometry[0]) > forward.ndim + 2)


def _not_natural(p, *operands) -> ValueError:
    """The error for operands whose shapes are not ``p``'s natural ones (as_strided would read
    them wrong, silently, so the plain calls check the shapes first)."""
    shapes = (*p.operand_shapes, p.result_shape)[:len(operands)]
    return ValueError(f"native: operands {[list(t.shape) for t in operands]} are not the natural "
                      f"{[list(shape) for shape in shapes]} of {p}")


def _plain(p, config: str | None):
    """The prepared call of a _PLAIN formulation (the forward, the input gradient through
    convolution_backward, the weight gradient), None for other formulations. The operands' view
    geometry, the convolution's arguments and the flip are found once, so that a call is one
    PyTorch convolution between views (on a CPU the general call's closures cost 9 to 13 us of
    host time against a 10 to 14 us convolution)."""
    forward, _, name, forward_weight = _source(p, config)
    if name not in _PLAIN or (p.pass_ == "dgrad" and not forward_weight):  # dgrad: its backward only
        return None
    g, shape = _plain_geometry(forward, name), p.result_shape
    backward = torch.ops.aten.convolution_backward.default

    if p.pass_ == "fwd":
        def result(x, w):
            return torch.convolution(x.as_strided(*g.x), g.weight(w), None, *g.args)
    elif p.pass_ == "dgrad":
        def result(dy, w):  # the forward's weight; x_like gives dx's shape and layout only
            x_like = torch.empty_strided(*g.x, dtype=dy.dtype, device=dy.device)
            return backward(dy.as_strided(*g.y), x_like, g.weight(w), None, *g.args, (True, False, False))[0]
    else:
        def result(x, dy):  # w_like gives dw's shape and layout only
            w_like = torch.empty_strided(*g.w, dtype=x.dtype, device=x.device)
            return backward(dy.as_strided(*g.y), x.as_strided(*g.x), w_like, None, *g.args,
                            (False, True, False))[1]

    a_shape, b_shape = p.operand_shapes

    def call(a, b):
        if a.shape != a_shape or b.shape != b_shape:
            raise _not_natural(p, a, b)
        r = g.to_last(result(a, b))  # channels last: [N, *S, C] or [O, *K, C/G]
        return (r.reshape(shape) if g.lifted else r).contiguous()
    return call


def differentiable(p: ConvProblem, config: str | None):
    """Forward problem ``p`` as PyTorch's own differentiable convolution between permuted views
    of the natural operands, a function (x, w) -> y, where its plain formulation ``config`` is
    one (else None): autograd then runs PyTorch's backward node, in C++, which computes what
    ``prepare_gradients``' one convolution_backward does, without a Python autograd Function
    (whose round trip costs about 70 us of host time on the H200 machine)."""
    forward, _, name, _ = _source(p, config)
    if p.pass_ != "fwd" or name not in _PLAIN:
        return None
    g, shape = _plain_geometry(forward, name), p.result_shape

    def views(x, w):
        x, w = x.movedim(-1, 1), (w.flip(g.flip) if g.flip else w).movedim(-1, 1)
        return (x.unsqueeze(2), w.unsqueeze(2)) if g.lifted else (x, w)

    x_meta, w_meta = views(*(torch.empty(s, device="meta") for s in (p.x_shape, p.w_shape)))
    if ((x_meta.shape, x_meta.stride()) != g.x or (w_meta.shape, w_meta.stride()) != g.w
            or x_meta.storage_offset()):
        return None  # not the views the plain call reads (a crop, a lift with other strides)

    def call(x, w):
        y = g.to_last(torch.convolution(*views(x, w), None, *g.args))
        return (y.reshape(shape) if g.lifted else y).contiguous()

    if _in_float32(p):
        return lambda x, w: call(x.float(), w.float()).to(p.dtype)
    return call


def prepare_gradients(p: ConvProblem, dgrad_config: str | None, wgrad_config: str | None):
    """Both gradients of forward problem ``p`` from one convolution_backward, as PyTorch's
    autograd computes them (two calls cost a second call's host time: about 20 us on a CPU),
    where the input gradient's formulation is the plain backward of the forward geometry that
    the weight gradient's formulation convolves over; a function (x, w, dy) -> (dx, dw) of the
    natural operands, or None. Its results are those of the two prepared calls, computed by the
    same kernels."""
    dgrad_config = dgrad_config or default_config(p.dgrad())
    wgrad_config = wgrad_config or default_config(p.wgrad())
    if p.pass_ != "fwd" or wgrad_config not in _PLAIN or dgrad_config != BACKWARD + wgrad_config:
        return None
    g = _plain_geometry(forward_of_dgrad(p.dgrad()), wgrad_config)  # the input gradient's own
    backward = torch.ops.aten.convolution_backward.default
    upcast = _in_float32(p)
    shapes = (p.x_shape, p.w_shape, p.result_shape)

    def call(x, w, dy):
        if (x.shape, w.shape, dy.shape) != shapes:
            raise _not_natural(p, x, w, dy)
        if upcast:
            x, w, dy = x.float(), w.float(), dy.float()
        dx, dw, _ = backward(dy.as_strided(*g.y), x.as_strided(*g.x), g.weight(w), None, *g.args,
                             (True, True, False))
        dx, dw = g.to_last(dx), g.to_last(dw)
        if g.lifted:
            dx, dw = dx.reshape(p.x_shape), dw.reshape(p.w_shape)
        if g.flip:  # the gradient of the flipped weight, flipped back
            dw = dw.flip(g.flip)
        return dx.contiguous().to(p.dtype), dw.contiguous().to(p.dtype)
    return call
