"""Layers: MLX layouts and initialisation, bias, gradients, conversion from torch.nn."""

import math

import numpy as np
import pytest
import torch

import ndconv
from ndconv import nn


@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_conv_layer_shapes_init_and_bias(ndim):
    layer = getattr(nn, f"Conv{ndim}d")(4, 6, 3, stride=2, padding=1, groups=2)
    assert layer.weight.shape == (6, *[3] * ndim, 2)
    bound = math.sqrt(1 / (2 * 3**ndim))  # the fan-in of one output: 2 channels a group
    assert math.sqrt(1 / (4 * 3**ndim)) < layer.weight.abs().max() <= bound and layer.weight.std() > bound / 4
    assert torch.equal(layer.bias, torch.zeros(6))
    x = torch.randn(2, *[7] * ndim, 4)
    y = layer(x)
    assert y.shape == (2, *[4] * ndim, 6)
    with torch.no_grad():
        layer.bias.fill_(0.5)
    expected = ndconv.conv_general(x, layer.weight, 2, 1, 1, 1, 2) + 0.5
    torch.testing.assert_close(layer(x), expected)
    layer(x).sum().backward()
    assert layer.weight.grad.shape == layer.weight.shape and layer.bias.grad.shape == (6,)
    assert "kernel_size=" in repr(layer) and "groups=2" in repr(layer)


def test_layer_under_autocast_keeps_autocast_dtype():
    """The bias is added in the convolution's dtype, as torch.nn's layers return autocast's."""
    layer = nn.Conv2d(3, 4, 3, padding=1)
    with torch.no_grad():
        layer.bias.uniform_(-1, 1)
    x = torch.randn(2, 5, 5, 3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = layer(x)
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(y.float(), layer(x), rtol=3e-2, atol=3e-2)


def test_layer_with_asymmetric_padding():
    """conv_general's (lo, hi) padding: a causal 1-D layer."""
    layer = nn.Conv1d(3, 5, 4, padding=([3], [0]))
    x = torch.randn(2, 9, 3)
    torch.testing.assert_close(layer(x),
                               ndconv.conv_general(x, layer.weight, padding=([3], [0])) + layer.bias)
    assert layer(x).shape == (2, 9, 5) and "padding=((3,), (0,))" in repr(layer)


def test_layer_arguments_parse_as_the_functions_do():
    """NumPy integers and one-entry sequences, as conv_general takes them; a symmetric pair is
    the plain padding."""
    layer = nn.Conv2d(2, 3, np.int64(3), stride=[np.int32(2)], padding=([1, 1], [1, 1]), dilation=(1,))
    assert layer.kernel_size == (3, 3) and layer.stride == (2, 2) and layer.padding == (1, 1)
    x = torch.randn(1, 7, 7, 2)
    torch.testing.assert_close(layer(x), ndconv.conv2d(x, layer.weight, 2, 1) + layer.bias)


@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_transposed_layer(ndim):
    layer = getattr(nn, f"ConvTranspose{ndim}d")(4, 6, 3, stride=2, padding=1, output_padding=1, bias=False)
    assert layer.weight.shape == (6, *[3] * ndim, 4) and layer.bias is None
    x = torch.randn(1, *[4] * ndim, 4)
    assert layer(x).shape == (1, *[8] * ndim, 6)
    assert "output_padding=(1" in repr(layer)


@pytest.mark.parametrize(
    "module",
    [
        torch.nn.Conv1d(4, 6, 3, stride=2, padding=1, dilation=2, groups=2),
        torch.nn.Conv2d(3, 8, (3, 5), stride=(1, 2), padding=(1, 2)),
        torch.nn.Conv3d(4, 4, 3, padding=1, groups=4, bias=False),
        torch.nn.ConvTranspose1d(4, 6, 4, stride=2, padding=1, groups=2),
        torch.nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1),
        torch.nn.ConvTranspose3d(2, 4, 3, stride=2, padding=1, output_padding=1, groups=2, dilation=1),
        torch.nn.ConvTranspose2d(4, 6, 3, stride=(1, 2), padding=(3, 1)),  # beyond k - 1 at stride 1: a crop
        torch.nn.Conv1d(4, 6, 4, padding="same", dilation=3),
        torch.nn.Conv2d(3, 8, (4, 3), padding="same"),
        torch.nn.Conv3d(2, 4, (2, 3, 1), padding="valid"),
    ],
    ids=lambda m: f"{type(m).__name__}-{m.padding}",
)
def test_from_torch_computes_the_same_function(module):
    module = module.double()
    layer = nn.from_torch(module)
    ndim = module.weight.dim() - 2
    x = torch.randn(2, *[6] * ndim, module.in_channels, dtype=torch.float64)
    expected = module(x.movedim(-1, 1).contiguous()).movedim(1, -1)
    torch.testing.assert_close(layer(x), expected)


@pytest.mark.parametrize("module", [torch.nn.ConvTranspose2d(4, 6, 3, stride=2, padding=3),
                                    torch.nn.ConvTranspose1d(4, 6, 2, stride=3, padding=2, dilation=1)])
def test_from_torch_refuses_transposed_padding_that_crops_a_strided_axis(module):
    """PyTorch crops the output there, MLX the undilated input: not the same function."""
    with pytest.raises(ValueError, match="crops its output"):
        nn.from_torch(module)
