"""ConvProblem: one convolution, validated and normalised once, then read by everything downstream.

A problem is a *forward* convolution geometry (MLX ``conv_general`` semantics, channels last)
plus the pass it plays in training. The input-gradient and weight-gradient of a forward problem
are themselves forward convolutions (``dgrad()`` / ``wgrad()``), so every algorithm that computes
forward convolutions also computes gradients; ``views()`` maps a pass's natural operands (``dy``,
``w``, ``x``) onto the grouped forward operands without copying.

Padding is stored in *dilated-input coordinates*: a non-negative pad is MLX's pad; a negative MLX
pad ``p`` (which crops ``-p`` elements of the undilated input) is stored as ``p * input_dilation``.
In these coordinates cropping and padding are the same index shift, which is what the gradient
algebra needs (a gradient problem may crop part of a dilation gap, which no MLX pad can say).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from functools import lru_cache

import numpy as np
import torch

PASSES = ("fwd", "dgrad", "wgrad")
DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
# Host time to issue one cached call (tools/host_overhead.py, H200 machine, tiny bf16 conv2d):
# a Triton kernel's bound launch 21-23 us, PyTorch's convolution through ndconv 46 us.
BOUND_LAUNCH_HOST_S = 20e-6
NATIVE_CALL_HOST_S = 46e-6


def deterministic_mode() -> bool:
    """Whether torch asks for deterministic algorithms (``torch.use_deterministic_algorithms`` or
    ``torch.backends.cudnn.deterministic``): what a plan depends on besides its problem, as cuDNN's
    graphs then leave out nondeterministic engines (the Triton kernels are deterministic always)."""
    return torch.are_deterministic_algorithms_enabled() or torch.backends.cudnn.deterministic


@dataclass(frozen=True)
class ConvProblem:
    """One convolution: shapes, arguments per spatial axis, dtype, device and pass.

    Layouts: input ``[N, *S, C]``, weight ``[O, *K, C // groups]``, output ``[N, *S_out, O]``.
    ``padding_lo`` / ``padding_hi`` are in dilated-input coordinates (see the module docstring).
    """

    x_shape: tuple[int, ...]
    w_shape: tuple[int, ...]
    stride: tuple[int, ...]
    padding_lo: tuple[int, ...]
    padding_hi: tuple[int, ...]
    kernel_dilation: tuple[int, ...]
    input_dilation: tuple[int, ...]
    groups: int = 1
    flip: bool = False
    dtype: torch.dtype = torch.float32
    device: str = "cpu"
    allow_tf32: bool = False
    pass_: str = "fwd"

    # Derived sizes, computed once in __post_init__ (not part of equality or the hash).
    dilated_in: tuple[int, ...] = field(init=False, repr=False, compare=False)
    """Length of each spatial axis after input dilation, before padding."""
    span: tuple[int, ...] = field(init=False, repr=False, compare=False)
    """Extent of the dilated kernel on each spatial axis."""
    out_spatial: tuple[int, ...] = field(init=False, repr=False, compare=False)
    out_shape: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        dilated_in = tuple((s - 1) * d + 1 for s, d in zip(self.x_shape[1:-1], self.input_dilation))
        span = tuple((k - 1) * d + 1 for k, d in zip(self.w_shape[1:-1], self.kernel_dilation))
        out_spatial = tuple(
            (di + lo + hi - sp) // st + 1
            for di, lo, hi, sp, st in zip(dilated_in, self.padding_lo, self.padding_hi, span, self.stride)
        )
        object.__setattr__(self, "dilated_in", dilated_in)
        object.__setattr__(self, "span", span)
        object.__setattr__(self, "out_spatial", out_spatial)
        object.__setattr__(self, "out_shape", (self.x_shape[0], *out_spatial, self.w_shape[0]))

    def __hash__(self) -> int:
        """The fields' hash, computed once (every cached call hashes its problem)."""
        value = self.__dict__.get("_hash")
        if value is None:
            value = hash(tuple(getattr(self, f.name) for f in fields(self) if f.compare))
            object.__setattr__(self, "_hash", value)
        return value

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}  # hashes are per process

    # ------------------------------------------------------------------ construction

    @classmethod
    def create(
        cls,
        x_shape,
        w_shape,
        *,
        stride,
        padding_lo,
        padding_hi,
        kernel_dilation,
        input_dilation,
        groups=1,
        flip=False,
        dtype=torch.float32,
        device="cpu",
        allow_tf32=False,
        op="conv_general",
    ) -> ConvProblem:
        """Validates a user's convolution (MLX pads, per-axis tuples) and returns its problem.

        Raises ValueError naming ``op``, the argument, its value and the rule it breaks.
        """
        x_shape, w_shape = tuple(int(s) for s in x_shape), tuple(int(s) for s in w_shape)
        if dtype not in DTYPES:
            raise ValueError(
                f"{op}: dtype must be one of float16, bfloat16, float32, float64, got {dtype}"
            )
        if len(x_shape) not in (3, 4, 5):
            raise ValueError(
                f"{op}: input must have 3 to 5 dimensions [N, *spatial, C] (1 to 3 spatial axes), "
                f"got shape {list(x_shape)}"
            )
        if len(w_shape) != len(x_shape):
            raise ValueError(
                f"{op}: weight must have as many dimensions as the input ({len(x_shape)}, "
                f"[O, *kernel, C/groups]), got shape {list(w_shape)}"
            )
        ndim = len(x_shape) - 2
        per_axis = dict(
            stride=stride,
            padding_lo=padding_lo,
            padding_hi=padding_hi,
            kernel_dilation=kernel_dilation,
            input_dilation=input_dilation,
        )
        for name, value in per_axis.items():
            if len(value) != ndim:
                raise ValueError(
                    f"{op}: {name} must have one entry per spatial axis ({ndim}), got {list(value)}"
                )
        for name in ("stride", "kernel_dilation", "input_dilation"):
            if any(v < 1 for v in per_axis[name]):
                raise ValueError(f"{op}: {name} must be positive on every axis, got {list(per_axis[name])}")
        if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
            raise ValueError(f"{op}: groups must be a positive integer, got {groups!r}")
        if not isinstance(flip, bool):  # as MLX, which takes no int, None or NumPy bool for it
            raise ValueError(f"{op}: flip must be a bool, got {flip!r}")
        C, O = x_shape[-1], w_shape[0]
        if C % groups:
            raise ValueError(f"{op}: groups={groups} must divide the input channels C={C}")
        if O % groups:
            raise ValueError(f"{op}: groups={groups} must divide the output channels O={O}")
        if w_shape[-1] * groups != C:
            raise ValueError(
                f"{op}: weight's last dimension must be C/groups = {C}/{groups} = {C // groups}, "
                f"got weight shape {list(w_shape)} for input shape {list(x_shape)}"
            )
        if any(k < 1 for k in w_shape[1:-1]):
            raise ValueError(f"{op}: kernel sizes must be at least 1, got weight shape {list(w_shape)}")
        if any(s < 1 for s in x_shape[1:-1]):
            raise ValueError(f"{op}: spatial sizes must be at least 1, got input shape {list(x_shape)}")
        lo, hi = [], []
        for d, (s, p_lo, p_hi, idil) in enumerate(zip(x_shape[1:-1], padding_lo, padding_hi, input_dilation)):
            kept = s - max(0, -p_lo) - max(0, -p_hi)
            if kept < 1:
                raise ValueError(
                    f"{op}: padding ({p_lo}, {p_hi}) on spatial axis {d} crops all {s} input elements"
                )
            lo.append(p_lo if p_lo >= 0 else p_lo * idil)
            hi.append(p_hi if p_hi >= 0 else p_hi * idil)
        p = cls(
            x_shape=x_shape,
            w_shape=w_shape,
            stride=tuple(stride),
            padding_lo=tuple(lo),
            padding_hi=tuple(hi),
            kernel_dilation=tuple(kernel_dilation),
            input_dilation=tuple(input_dilation),
            groups=groups,
            flip=bool(flip),
            dtype=dtype,
            device=device,
            allow_tf32=bool(allow_tf32 and dtype == torch.float32),
        )
        for d, size in enumerate(p.out_spatial):
            if size < 1:
                raise ValueError(
                    f"{op}: output would be empty on spatial axis {d}: padded input "
                    f"{p.dilated_in[d] + p.padding_lo[d] + p.padding_hi[d]} is shorter than the "
                    f"dilated kernel {p.span[d]} (input {x_shape[1 + d]}, kernel {w_shape[1 + d]}, "
                    f"padding ({padding_lo[d]}, {padding_hi[d]}), kernel_dilation "
                    f"{kernel_dilation[d]}, input_dilation {input_dilation[d]})"
                )
        return p

    # ------------------------------------------------------------------ derived sizes

    @property
    def ndim(self) -> int:
        return len(self.x_shape) - 2

    @property
    def batch(self) -> int:
        return self.x_shape[0]

    @property
    def in_channels(self) -> int:
        return self.x_shape[-1]

    @property
    def out_channels(self) -> int:
        return self.w_shape[0]

    @property
    def in_spatial(self) -> tuple[int, ...]:
        return self.x_shape[1:-1]

    @property
    def kernel(self) -> tuple[int, ...]:
        return self.w_shape[1:-1]

    @property
    def c_per_group(self) -> int:
        return self.w_shape[-1]

    @property
    def o_per_group(self) -> int:
        return self.w_shape[0] // self.groups

    @property
    def result_shape(self) -> tuple[int, ...]:
        """Shape of this pass's natural result: y, dx, or dw (``[O, *K, C/groups]``)."""
        if self.pass_ == "wgrad":
            out = self.out_shape
            return (out[-1], *out[1:-1], out[0])
        return self.out_shape

    @property
    def operand_shapes(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Natural shapes of this pass's two operands: (x, w), (dy, w) or (x, dy)."""
        G = self.groups
        if self.pass_ == "dgrad":
            return self.x_shape, (self.in_channels, *self.kernel, self.w_shape[0] // G)
        if self.pass_ == "wgrad":
            x = (self.in_channels // G, *self.in_spatial, self.x_shape[0] * G)
            dy = (self.w_shape[-1], *self.kernel, self.w_shape[0])
            return x, dy
        return self.x_shape, self.w_shape

    @property
    def is_trivial(self) -> bool:
        """True when the result is empty or all zeros (zero batch, channels or reduction)."""
        return math.prod(self.out_shape) == 0 or self.c_per_group == 0

    @property
    def tap_positions(self) -> tuple[np.ndarray, ...]:
        """Per axis, ``[S_out, K]`` positions ``j*stride + t*kdil - lo`` in the dilated input
        that output j reads through weight tap t (t counted in weight order, so flip applies)."""
        return _tap_positions(self.out_spatial, self.kernel, self.stride, self.kernel_dilation,
                              self.padding_lo, self.flip)

    @property
    def valid_taps(self) -> tuple[int, ...]:
        """Per axis, the number of (output, tap) pairs that land on a real input element."""
        counts = []
        for u, di, idil in zip(self.tap_positions, self.dilated_in, self.input_dilation):
            counts.append(int(((u >= 0) & (u < di) & (u % idil == 0)).sum()))
        return tuple(counts)

    @property
    def flops(self) -> int:
        """Useful floating-point operations: 2 per multiply-add that touches a real input
        element (taps on padding or on inserted zeros are not counted)."""
        return 2 * self.batch * self.out_channels * self.c_per_group * math.prod(self.valid_taps)

    @property
    def min_bytes(self) -> int:
        """Bytes a perfect kernel moves: each operand read once, the result written once."""
        a, b = self.operand_shapes
        elems = math.prod(a) + math.prod(b) + math.prod(self.result_shape)
        return elems * torch.empty((), dtype=self.dtype).element_size()

    @property
    def h200_floor_s(self) -> float:
        """Seconds an H200 needs at least (tensor cores at 790 TFLOP/s, HBM at 4.25 TB/s): what
        the heuristics weigh against the host's time to issue a call."""
        return max(self.flops / 790e12, self.min_bytes / 4.25e12)

    def done_within(self, host_s: float, times_floor: float) -> bool:
        """True when an H200 running this problem at ``times_floor`` times its floor is done
        within ``host_s`` (the host time to issue a call, e.g. BOUND_LAUNCH_HOST_S): such a call
        is host-bound, and the path that issues it fastest wins."""
        return times_floor * self.h200_floor_s < host_s

    @property
    def gemm_mnk(self) -> tuple[int, int, int]:
        """Per-group GEMM view: M = N*prod(S_out), N = O/groups, K = prod(kernel)*C/groups."""
        return (
            self.batch * math.prod(self.out_spatial),
            self.o_per_group,
            math.prod(self.kernel) * self.c_per_group,
        )

    def key(self) -> ConvProblem:
        """The plan-cache key: the problem itself (frozen, hashable)."""
        return self

    def __str__(self) -> str:
        fields = [
            f"x={list(self.x_shape)}",
            f"w={list(self.w_shape)}",
            f"stride={list(self.stride)}",
            f"pad=({list(self.padding_lo)}, {list(self.padding_hi)})",
        ]
        if any(d != 1 for d in self.kernel_dilation):
            fields.append(f"kdil={list(self.kernel_dilation)}")
        if any(d != 1 for d in self.input_dilation):
            fields.append(f"idil={list(self.input_dilation)}")
        if self.groups != 1:
            fields.append(f"groups={self.groups}")
        if self.flip:
            fields.append("flip")
        dtype = str(self.dtype).removeprefix("torch.") + ("/tf32" if self.allow_tf32 else "")
        return f"{self.pass_} {dtype} {self.device} " + " ".join(fields)

    # ------------------------------------------------------------------ gradients as convolutions
    #
    # One spatial axis, one channel; X is x dilated by `idil` (zero outside the data and between
    # its elements), w' is the weight read in tap order (reversed when flip):
    #
    #     y[j] = sum_t w'[t] * X[j*st + t*kd - lo]
    #
    # Input gradient: dx[i] = sum_{j,t} dy[j] w'[t] [j*st + t*kd - lo == i*idil]. With v = j*st
    # (dy dilated by st) and t = K-1-t2 this is a convolution of dy with the weight reversed:
    #     stride idil, kernel_dilation kd, input_dilation st, flip = not flip,
    #     lo2 = span-1-lo,  hi2 = (s-1)*idil - (S_out-1)*st + lo   (so that S_out2 == s exactly);
    # channels: weight [O, K, C/g] becomes [C, K, O/g] (O and C swapped within each group).
    #
    # Weight gradient: dw'[t] = sum_j dy[j] X[t*kd + j*st - lo]: a convolution of X with dy as the
    # kernel: stride kd, kernel_dilation st, input_dilation idil, lo2 = lo,
    #     hi2 = (span-1) + (S_out-1)*st - (s-1)*idil - lo   (so that S_out2 == K exactly);
    # channels: batch and channels swap roles (x as [C/g, S, g*N], dy as [O, S_out, N], result
    # [C/g, K, O]); when flip, dw is dw' reversed along the spatial axes.
    #
    # (MLX's vjp uses the forward hi in its dgrad hi2 and applies the crop of negative pads to the
    # undilated operand, which is wrong whenever input_dilation > 1; these are the true gradients,
    # tested against float64 autograd of plain ops.)

    def dgrad(self) -> ConvProblem:
        """The input gradient of this forward problem, as a forward problem over dy."""
        return self._gradient("dgrad")

    def wgrad(self) -> ConvProblem:
        """The weight gradient of this forward problem, as a forward problem over x with dy as
        the kernel. Its result is the gradient of the weight as read (reversed when flip)."""
        return self._gradient("wgrad")

    def _gradient(self, pass_: str) -> ConvProblem:
        """A gradient problem, built once per problem (every backward call asks for it)."""
        self._require_forward(pass_)
        made = self.__dict__.get("_" + pass_)
        if made is None:
            made = self._dgrad() if pass_ == "dgrad" else self._wgrad()
            object.__setattr__(self, "_" + pass_, made)
        return made

    def _dgrad(self) -> ConvProblem:
        hi = tuple(
            (s - 1) * idil - (so - 1) * st + lo
            for s, idil, so, st, lo in zip(
                self.in_spatial, self.input_dilation, self.out_spatial, self.stride, self.padding_lo
            )
        )
        return replace(
            self,
            x_shape=self.out_shape,
            w_shape=(self.in_channels, *self.kernel, self.o_per_group),
            stride=self.input_dilation,
            padding_lo=tuple(sp - 1 - lo for sp, lo in zip(self.span, self.padding_lo)),
            padding_hi=hi,
            input_dilation=self.stride,
            flip=not self.flip,
            pass_="dgrad",
        )

    def _wgrad(self) -> ConvProblem:
        hi = tuple(
            (sp - 1) + (so - 1) * st - (s - 1) * idil - lo
            for sp, so, st, s, idil, lo in zip(
                self.span, self.out_spatial, self.stride, self.in_spatial,
                self.input_dilation, self.padding_lo,
            )
        )
        G = self.groups
        return replace(
            self,
            x_shape=(self.c_per_group, *self.in_spatial, G * self.batch),
            w_shape=(self.out_channels, *self.out_spatial, self.batch),
            stride=self.kernel_dilation,
            padding_hi=hi,
            kernel_dilation=self.stride,
            flip=False,
            pass_="wgrad",
        )

    def _require_forward(self, what: str) -> None:
        if self.pass_ != "fwd":
            raise ValueError(f"{what}() needs a forward problem, this one is a {self.pass_} problem")

    def views(self, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor):
        """Grouped forward operands of this pass, as views of its natural operands (no copies).

        Returns ``x [N, *S, G, C/G]``, ``w [G, O/G, *K, C/G]`` and ``y [N, *S_out, G, O/G]``
        of the forward problem this pass is; ``a, b, out`` are (x, w, y), (dy, w, dx) or
        (x, dy, dw) in their natural layouts.
        """
        G, D = self.groups, self.ndim
        if self.pass_ == "fwd":
            return a.unflatten(-1, (G, -1)), b.unflatten(0, (G, -1)), out.unflatten(-1, (G, -1))
        if self.pass_ == "dgrad":
            w = b.unflatten(0, (G, -1)).transpose(1, -1)
            return a.unflatten(-1, (G, -1)), w, out.unflatten(-1, (G, -1))
        spatial = tuple(range(1, D + 1))
        x = a.unflatten(-1, (G, -1)).transpose(0, -1)
        dy = b.unflatten(-1, (G, -1)).permute(D + 1, D + 2, *spatial, 0)
        dw = out.unflatten(0, (G, -1)).permute(D + 2, *(s + 1 for s in spatial), 0, 1)
        return x, dy, dw

    def wgrad_natural(self, x_t: torch.Tensor, dy_t: torch.Tensor, dw_t: torch.Tensor):
        """For a weight-gradient problem: its grouped views (from ``views``) back in natural
        grouped layouts, ``x [N, *S, G, C/G]``, ``dy [N, *S_out, G, O/G]``,
        ``dw [G, O/G, *K, C/G]``, and the forward geometry they belong to as a tuple
        ``(stride, kernel_dilation, input_dilation, padding_lo, out_spatial, kernel)`` (a kernel
        that computes the weight gradient directly needs these, not the rewritten problem)."""
        assert self.pass_ == "wgrad"
        D = self.ndim
        spatial = tuple(range(1, D + 1))
        x = x_t.permute(D + 2, *spatial, D + 1, 0)
        dy = dy_t.permute(D + 2, *(s + 1 for s in spatial), 0, 1)
        dw = dw_t.permute(D + 1, D + 2, *spatial, 0)
        geometry = (self.kernel_dilation, self.stride, self.input_dilation, self.padding_lo,
                    self.kernel, self.out_spatial)
        return x, dy, dw, geometry

    # ------------------------------------------------------------------ compact encoding

    def to_ints(self) -> list[int]:
        """All integer fields in one flat list (the custom op's argument); see from_ints."""
        return [
            self.ndim,
            *self.x_shape,
            *self.w_shape,
            *self.stride,
            *self.padding_lo,
            *self.padding_hi,
            *self.kernel_dilation,
            *self.input_dilation,
            self.groups,
            int(self.flip),
            int(self.allow_tf32),
            PASSES.index(self.pass_),
        ]

    @classmethod
    def from_ints(cls, ints, dtype: torch.dtype, device: str) -> ConvProblem:
        D = ints[0]
        it = iter(ints[1:])
        take = lambda n: tuple(next(it) for _ in range(n))  # noqa: E731
        x_shape, w_shape = take(D + 2), take(D + 2)
        stride, lo, hi, kd, idil = take(D), take(D), take(D), take(D), take(D)
        groups, flip, tf32, pass_ = take(4)
        return cls(
            x_shape, w_shape, stride, lo, hi, kd, idil, groups, bool(flip), dtype, device,
            bool(tf32), PASSES[pass_],
        )


@lru_cache(maxsize=256)
def _tap_positions(out_spatial, kernel, stride, kernel_dilation, padding_lo, flip):
    out = []
    for so, k, st, kd, lo in zip(out_spatial, kernel, stride, kernel_dilation, padding_lo):
        taps = np.arange(k)[::-1] if flip else np.arange(k)
        positions = np.arange(so)[:, None] * st + taps[None, :] * kd - lo
        positions.flags.writeable = False
        out.append(positions)
    return tuple(out)
