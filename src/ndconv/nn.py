"""Convolution layers with MLX's layouts and initialisation, as ``torch.nn.Module``s.

Inputs are channels last (``[N, *spatial, C]``); weights are ``[O, *kernel, C // groups]`` for
convolutions and transposed convolutions alike; weights are drawn uniformly from
``±sqrt(1 / (in_channels // groups * prod(kernel)))`` (the fan-in of one output) and biases
start at zero, as in ``mlx.nn`` (0.32.4; its transposed and 3-D layers have no groups).
``from_torch`` converts a ``torch.nn.Conv*d`` / ``ConvTranspose*d`` (channels first) into the
matching layer here. Padding is an int, one int per axis, or conv_general's ``(lo, hi)`` pair
(convolutions only: a torch layer's ``padding="same"`` converts to one).
"""

from __future__ import annotations

import math

import torch

from . import api


def _padding(op: str, value, ndim: int):
    """The layer's padding, parsed as conv_general parses it: one int per axis where symmetric,
    else the ``(lo, hi)`` pair."""
    lo, hi = api._padding(op, value, ndim)
    return lo if lo == hi else (lo, hi)


class _ConvNd(torch.nn.Module):
    _ndim: int
    _transposed: bool = False

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        dilation=1,
        groups: int = 1,
        bias: bool = True,
        *,
        output_padding=0,
        device=None,
        dtype=None,
    ):
        super().__init__()
        name = type(self).__name__
        for arg, value in (("in_channels", in_channels), ("out_channels", out_channels), ("groups", groups)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: {arg} must be a positive integer, got {value!r}")
        if in_channels % groups or out_channels % groups:
            raise ValueError(
                f"{name}: groups={groups} must divide in_channels={in_channels} and "
                f"out_channels={out_channels}"
            )
        n = self._ndim
        self.kernel_size = api._ints(name, "kernel_size", kernel_size, n)
        self.stride = api._ints(name, "stride", stride, n)
        self.padding = _padding(name, padding, n)
        self.dilation = api._ints(name, "dilation", dilation, n)
        self.output_padding = api._ints(name, "output_padding", output_padding, n)
        if any(k < 1 for k in self.kernel_size):
            raise ValueError(f"{name}: kernel_size must be positive, got {self.kernel_size}")
        if not self._transposed and any(self.output_padding):
            raise ValueError(f"{name}: output_padding is only for transposed convolutions")
        if self._transposed and isinstance(self.padding[0], tuple):
            raise ValueError(f"{name}: a transposed layer's padding is symmetric, got {padding!r}")
        self.groups = groups
        scale = math.sqrt(1.0 / (in_channels // groups * math.prod(self.kernel_size)))
        shape = (out_channels, *self.kernel_size, in_channels // groups)
        self.weight = torch.nn.Parameter(torch.empty(shape, device=device, dtype=dtype))
        self.bias = (torch.nn.Parameter(torch.zeros(out_channels, device=device, dtype=dtype)) if bias
                     else None)
        with torch.no_grad():
            self.weight.uniform_(-scale, scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self._transposed:
            y = getattr(api, f"conv_transpose{self._ndim}d")(
                x, self.weight, self.stride, self.padding, self.dilation, self.output_padding, self.groups
            )
        else:
            api._check_wrapper_ndim(type(self).__name__, x, self._ndim)
            y = api.conv_general(x, self.weight, self.stride, self.padding, self.dilation, 1, self.groups,
                                 _op=type(self).__name__)
        return y if self.bias is None else y + self.bias.to(y.dtype)  # autocast's dtype, as torch.nn's

    def extra_repr(self) -> str:
        out_channels, in_per_group = self.weight.shape[0], self.weight.shape[-1]
        s = (
            f"{in_per_group * self.groups}, {out_channels}, kernel_size={self.kernel_size}, "
            f"stride={self.stride}, padding={self.padding}, dilation={self.dilation}"
        )
        if self._transposed:
            s += f", output_padding={self.output_padding}"
        return s + f", groups={self.groups}, bias={self.bias is not None}"


class Conv1d(_ConvNd):
    """1-D convolution layer: ``[N, L, C_in] -> [N, L_out, C_out]``."""

    _ndim = 1


class Conv2d(_ConvNd):
    """2-D convolution layer: ``[N, H, W, C_in] -> [N, H_out, W_out, C_out]``."""

    _ndim = 2


class Conv3d(_ConvNd):
    """3-D convolution layer: ``[N, D, H, W, C_in] -> [N, D_out, H_out, W_out, C_out]``."""

    _ndim = 3


class ConvTranspose1d(_ConvNd):
    """1-D transposed convolution layer; weight ``[C_out, K, C_in // groups]``."""

    _ndim, _transposed = 1, True


class ConvTranspose2d(_ConvNd):
    """2-D transposed convolution layer; weight ``[C_out, KH, KW, C_in // groups]``."""

    _ndim, _transposed = 2, True


class ConvTranspose3d(_ConvNd):
    """3-D transposed convolution layer; weight ``[C_out, KD, KH, KW, C_in // groups]``."""

    _ndim, _transposed = 3, True


_FROM_TORCH = {
    torch.nn.Conv1d: Conv1d,
    torch.nn.Conv2d: Conv2d,
    torch.nn.Conv3d: Conv3d,
    torch.nn.ConvTranspose1d: ConvTranspose1d,
    torch.nn.ConvTranspose2d: ConvTranspose2d,
    torch.nn.ConvTranspose3d: ConvTranspose3d,
}


def from_torch(module: torch.nn.Module) -> _ConvNd:
    """The ndconv layer computing the same function as a PyTorch convolution layer, for
    channels-last inputs. Weights are copied into MLX's layout."""
    cls = _FROM_TORCH.get(type(module))
    if cls is None:
        raise ValueError("from_torch: expected a torch.nn.Conv*d or ConvTranspose*d, "
                         f"got {type(module).__name__}")
    if module.padding_mode != "zeros":
        raise ValueError(f"from_torch: only zero padding converts, got padding_mode={module.padding_mode!r}")
    padding = module.padding
    if padding == "valid":
        padding = 0
    elif padding == "same":  # as torch: the odd one of an odd total at the high end
        total = [d * (k - 1) for d, k in zip(module.dilation, module.kernel_size)]
        padding = (tuple(t // 2 for t in total), tuple(t - t // 2 for t in total))
    g = module.groups
    w = module.weight.detach()
    if cls._transposed:  # torch [C_in, O/g, *K] -> [O, *K, C_in/g]
        _check_transposed_padding(module)
        w = w.unflatten(0, (g, -1)).movedim(1, -1).flatten(0, 1)
    else:  # torch [O, C/g, *K] -> [O, *K, C/g]
        w = w.movedim(1, -1)
    layer = cls(
        module.in_channels, module.out_channels, module.kernel_size, module.stride, padding,
        module.dilation, g, module.bias is not None,
        output_padding=module.output_padding if cls._transposed else 0,
        device=w.device, dtype=w.dtype,
    )
    with torch.no_grad():
        layer.weight.copy_(w)
        if module.bias is not None:
            layer.bias.copy_(module.bias.detach())
    return layer


def _check_transposed_padding(module: torch.nn.Module) -> None:
    """A transposed layer's padding beyond ``dilation * (kernel_size - 1)`` crops: PyTorch crops
    its output (the dilated input), MLX the input before dilation. On strided axes these differ
    and no layer here computes PyTorch's function, so the conversion refuses it (at stride 1
    they are the same)."""
    axes = [d for d, (k, dil, p, s) in enumerate(zip(module.kernel_size, module.dilation, module.padding,
                                                       module.stride)) if p > dil * (k - 1) and s > 1]
    if axes:
        raise ValueError(
            f"from_torch: {type(module).__name__}'s padding {tuple(module.padding)} exceeds dilation * "
            f"(kernel_size - 1) on strided spatial axes {axes}: PyTorch crops its output there, MLX's "
            f"transposed convolution (ndconv's) crops the input before dilation, so no ndconv layer "
            f"computes the same function")
