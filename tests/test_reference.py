"""The oracle anchored to an independent implementation: ndconv's float64 reference against
PyTorch's own convolutions, composed with crop / zero insertion / pad / flip where needed."""

import pytest
import torch
import torch.nn.functional as F
from cases import CASE_PARAMS, conv_args
from hypothesis import given
from torch_oracle import dense, torch_conv_general

import ndconv
from ndconv.api import _ints, _padding


def _oracle(x, w, args):
    D = x.dim() - 2
    lo, hi = _padding("t", args.get("padding", 0), D)
    return torch_conv_general(
        x, w, _ints("t", "s", args.get("stride", 1), D), lo, hi,
        _ints("t", "k", args.get("kernel_dilation", 1), D),
        _ints("t", "i", args.get("input_dilation", 1), D),
        args.get("groups", 1), args.get("flip", False),
    )


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_reference_matches_torch_composition(case):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(case.x, generator=g, dtype=torch.float64)
    w = torch.randn(case.w, generator=g, dtype=torch.float64)
    y = ndconv.conv_general(x, w, algorithm="reference", **case.args)
    torch.testing.assert_close(y, _oracle(x, w, case.args), rtol=1e-12, atol=1e-12)


@given(conv_args())
def test_reference_matches_torch_composition_random(drawn):
    x_shape, w_shape, args = drawn
    x = torch.randn(x_shape, dtype=torch.float64)
    w = torch.randn(w_shape, dtype=torch.float64)
    y = ndconv.conv_general(x, w, algorithm="reference", **args)
    torch.testing.assert_close(y, _oracle(x, w, args), rtol=1e-12, atol=1e-12)


_TORCH_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
_TORCH_CONVT = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}


@pytest.mark.parametrize("ndim", [1, 2, 3])
@pytest.mark.parametrize("stride,padding,dilation,groups",
                         [(1, 0, 1, 1), (2, 1, 1, 2), (3, 2, 2, 1), (1, 1, 2, 3)])
def test_wrappers_match_torch_conv(ndim, stride, padding, dilation, groups):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(2, *[9 - ndim] * ndim, 6, generator=g, dtype=torch.float64)
    w = torch.randn(6, *[3] * ndim, 6 // groups, generator=g, dtype=torch.float64)
    ours = getattr(ndconv, f"conv{ndim}d")(x, w, stride, padding, dilation, groups, algorithm="reference")
    theirs = _TORCH_CONV[ndim](dense(x.movedim(-1, 1)), dense(w.movedim(-1, 1)), None, stride, padding,
                               dilation, groups)
    torch.testing.assert_close(ours, theirs.movedim(1, -1), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("ndim", [1, 2, 3])
@pytest.mark.parametrize(
    "stride,padding,dilation,output_padding,groups",
    [(1, 0, 1, 0, 1), (2, 1, 1, 1, 1), (3, 2, 2, 2, 1), (2, 0, 1, 0, 2), (2, 1, 2, 1, 3)],
)
def test_transposed_wrappers_match_torch(ndim, stride, padding, dilation, output_padding, groups):
    """MLX's transposed weight [O, *K, C/g] is torch's [C, O/g, *K] with axes moved."""
    g = torch.Generator().manual_seed(3)
    C, O = 6, 6
    x = torch.randn(2, *[5 - ndim] * ndim, C, generator=g, dtype=torch.float64)
    w_torch = torch.randn(C, O // groups, *[3] * ndim, generator=g, dtype=torch.float64)
    w_mlx = w_torch.unflatten(0, (groups, -1)).movedim(1, -1).flatten(0, 1)
    ours = getattr(ndconv, f"conv_transpose{ndim}d")(
        x, w_mlx, stride, padding, dilation, output_padding, groups, algorithm="reference"
    )
    theirs = _TORCH_CONVT[ndim](
        dense(x.movedim(-1, 1)), w_torch, None, stride, padding, output_padding, groups, dilation
    )
    torch.testing.assert_close(ours, theirs.movedim(1, -1), rtol=1e-12, atol=1e-12)
