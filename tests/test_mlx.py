"""ndconv against MLX itself (its CPU build, the test extra installs it): conv_general and the
named wrappers give MLX's output shapes, values and gradients on random problems, and refuse
what MLX refuses, except where the two differ on purpose (docs/DESIGN.md, "Where ndconv and MLX
differ"): ndconv takes groups in 3-D, and it refuses an axis whose padded input is shorter than
the dilated kernel or whose negative padding crops every input element, where MLX returns an
output of its own (values read beyond its padded input, or zeros). Kernels are never empty here:
ndconv refuses them, and MLX's CPU build fails inside its GEMM on them."""

import numpy as np
import pytest
import torch
from cases import conv_args
from hypothesis import assume, given
from hypothesis import strategies as st

import ndconv
from ndconv import testing

mx = pytest.importorskip("mlx.core", reason="MLX is not installed here (pip install 'mlx[cpu]' on Linux)")


def _mlx(fn, *arrays, **kwargs):
    """MLX's result of ``fn`` on torch tensors, as a float64 torch tensor, or the error it raised."""
    try:
        out = fn(*(mx.array(a.detach().numpy()) for a in arrays), **kwargs)
        mx.eval(out)
    except (ValueError, RuntimeError) as e:
        return e
    return torch.from_numpy(np.array(out)).double()


def _operands(x_shape, w_shape, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(x_shape, generator=g), torch.randn(w_shape, generator=g)


def _close(ours, theirs, what):
    assert ours.shape == theirs.shape, f"{what}: shape {list(ours.shape)}, MLX's {list(theirs.shape)}"
    testing.assert_close(ours, theirs, 1e-4, what)  # two float32 computations of the same sums


@given(drawn=conv_args(), seed=st.integers(0, 2**16))
def test_conv_general_matches_mlx(drawn, seed):
    """Outputs, and gradients where MLX's vjp is right (no input dilation)."""
    x_shape, w_shape, args = drawn
    assume(args["groups"] == 1 or len(x_shape) < 5)  # MLX refuses groups in 3-D
    x, w = _operands(x_shape, w_shape, seed)
    theirs = _mlx(mx.conv_general, x, w, **args)
    assert not isinstance(theirs, Exception), theirs
    x.requires_grad_(), w.requires_grad_()
    ours = ndconv.conv_general(x, w, **args)
    _close(ours, theirs, "output")
    if max(args["input_dilation"]) > 1:
        return
    dy = torch.randn(ours.shape, generator=torch.Generator().manual_seed(seed + 1))
    ours.backward(dy)
    _, (mx_dx, mx_dw) = mx.vjp(lambda a, b: mx.conv_general(a, b, **args),
                               [mx.array(x.detach().numpy()), mx.array(w.detach().numpy())],
                               [mx.array(dy.numpy())])
    _close(x.grad, torch.from_numpy(np.array(mx_dx)).double(), "input gradient")
    _close(w.grad, torch.from_numpy(np.array(mx_dw)).double(), "weight gradient")


def _deliberate_difference(x_shape, w_shape, args) -> bool:
    """Whether ndconv refuses this conv_general call on purpose where MLX computes something: an
    axis whose negative padding crops every input element, or whose padded input is shorter
    than the dilated kernel by less than the stride (MLX's integer division truncates toward
    zero there)."""
    D = len(x_shape) - 2
    per_axis = {k: [args[k]] * D if isinstance(args[k], int) else list(args[k])
                for k in ("stride", "kernel_dilation", "input_dilation")}
    lo, hi = args["padding"]
    for d in range(D):
        s, k = x_shape[1 + d], w_shape[1 + d]
        kept = s - max(0, -lo[d]) - max(0, -hi[d])
        dilated = (kept - 1) * per_axis["input_dilation"][d] + 1 + max(0, lo[d]) + max(0, hi[d])
        short = (k - 1) * per_axis["kernel_dilation"][d] + 1 - dilated
        if kept < 1 or 0 < short < per_axis["stride"][d]:
            return True
    return False


def _as_conv_general(name, D, kernel, args) -> dict:
    """A wrapper's arguments as MLX's conv_general takes them (MLX's ops.cpp: a transposed
    convolution is conv_general with input_dilation = stride, lo = dilation * (k - 1) - padding,
    hi = lo + output_padding, flipped)."""
    stride, padding, dilation = args["stride"], args["padding"], args["dilation"]
    if "transpose" not in name:
        return dict(stride=stride, padding=([padding] * D, [padding] * D), kernel_dilation=dilation,
                    input_dilation=1)
    lo = [dilation * (k - 1) - padding for k in kernel[:D]]
    return dict(stride=1, padding=(lo, [v + args["output_padding"] for v in lo]), kernel_dilation=dilation,
                input_dilation=stride)


@given(
    D=st.integers(1, 3), groups=st.integers(1, 3), c=st.integers(1, 4), o=st.integers(1, 4),
    spatial=st.integers(1, 5), kernel=st.integers(1, 5), stride=st.integers(0, 3),
    lo=st.integers(-3, 3), hi=st.integers(-3, 3), kdil=st.integers(0, 3), idil=st.integers(0, 3),
)
def test_arguments_mlx_refuses_raise_value_error(D, groups, c, o, spatial, kernel, stride, lo, hi, kdil,
                                                 idil):
    """Arguments drawn without a validity filter: where MLX refuses them, ndconv raises
    ValueError; where ndconv refuses them, MLX does too, or it is a deliberate difference."""
    x_shape, w_shape = (2, *[spatial] * D, c), (o, *[kernel] * D, max(1, c // groups))
    args = dict(stride=stride, padding=([lo] * D, [hi] * D), kernel_dilation=kdil, input_dilation=idil,
                groups=groups, flip=False)
    x, w = torch.randn(x_shape), torch.randn(w_shape)
    theirs = _mlx(mx.conv_general, x, w, **args)
    try:
        ours = ndconv.conv_general(x, w, **args)
    except ValueError as e:
        assert isinstance(theirs, Exception) or _deliberate_difference(x_shape, w_shape, args), (
            f"ndconv refused ({e}) what MLX computed")
        return
    if isinstance(theirs, Exception):
        assert groups > 1 and D == 3, f"ndconv computed what MLX refused ({theirs})"
        return
    _close(ours, theirs, "output")


@pytest.mark.parametrize(
    "args",
    [dict(stride=np.array([2, 1]), padding=np.array([[1, 0], [2, 1]]), kernel_dilation=np.array(2)),
     dict(padding=(np.array([1, 0]), np.array([0, 2])), input_dilation=np.array([1, 2]), flip=True),
     dict(stride=1.5), dict(padding="same"), dict(stride=np.array([2.0, 1.0])), dict(flip=1), dict(flip=None),
     dict(flip=np.bool_(True))],
    ids=["arrays", "pair-of-arrays", "float", "string", "float-array", "int-flip", "none-flip",
         "numpy-bool-flip"],
)
def test_argument_types_as_mlx(args):
    """NumPy arrays of ints are sequences to both (a 0-d one an int); what MLX's bindings refuse
    (TypeError there: floats, strings, a flip that is not a Python bool), ndconv refuses with
    ValueError."""
    x, w = torch.randn(1, 7, 8, 2), torch.randn(3, 3, 2, 2)
    try:
        theirs = _mlx(mx.conv_general, x, w, **args)
    except TypeError:
        with pytest.raises(ValueError):
            ndconv.conv_general(x, w, **args)
        return
    _close(ndconv.conv_general(x, w, **args), theirs, "output")


@given(
    D=st.integers(1, 3), transposed=st.booleans(), groups=st.integers(1, 2), cg=st.integers(1, 3),
    og=st.integers(1, 3), spatial=st.lists(st.integers(1, 6), min_size=3, max_size=3),
    kernel=st.lists(st.integers(1, 4), min_size=3, max_size=3), stride=st.integers(1, 3),
    padding=st.integers(-2, 3), dilation=st.integers(1, 2), output_padding=st.integers(-2, 2),
    seed=st.integers(0, 2**16),
)
def test_wrappers_match_mlx(D, transposed, groups, cg, og, spatial, kernel, stride, padding, dilation,
                            output_padding, seed):
    """conv1d/2d/3d and conv_transpose1d/2d/3d (MLX's weight layout, output_padding, negative
    paddings, which MLX takes): the same outputs as MLX's functions of the same name, or both
    refuse the arguments."""
    name = f"conv{'_transpose' if transposed else ''}{D}d"
    x, w = _operands((2, *spatial[:D], groups * cg), (groups * og, *kernel[:D], cg), seed)
    args = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    if transposed:
        args["output_padding"] = output_padding
    theirs = _mlx(getattr(mx, name), x, w, **args)
    try:
        ours = getattr(ndconv, name)(x, w, **args)
    except ValueError as e:
        general = _as_conv_general(name, D, kernel, args)
        assert isinstance(theirs, Exception) or _deliberate_difference(x.shape, w.shape, general), (
            f"{name} refused ({e}) what MLX computed")
        return
    if isinstance(theirs, Exception):
        assert groups > 1 and D == 3, f"{name} computed what MLX refused ({theirs})"
        return
    _close(ours, theirs, name)


LAYERS = [  # (name, ndim, MLX keyword arguments besides the channels and kernel)
    ("Conv1d", 1, dict(stride=2, padding=1, dilation=2, groups=2)),
    ("Conv2d", 2, dict(stride=(2, 1), padding=(1, 0), dilation=(1, 2), groups=2)),
    ("Conv3d", 3, dict(stride=2, padding=1)),
    ("ConvTranspose1d", 1, dict(stride=2, padding=1, dilation=2, output_padding=1)),
    ("ConvTranspose2d", 2, dict(stride=(2, 3), padding=(1, 2), output_padding=(1, 0))),
    ("ConvTranspose3d", 3, dict(stride=2, padding=1, output_padding=1)),
]


@pytest.mark.parametrize("name,ndim,kwargs", LAYERS, ids=[layer[0] for layer in LAYERS])
def test_layers_match_mlx_nn(name, ndim, kwargs):
    """ndconv.nn's layers hold MLX's parameters (same shapes, same initialisation bound, zero
    bias) and, given MLX's weights and a bias, compute what mlx.nn's layers compute."""
    mlx_nn = pytest.importorskip("mlx.nn")
    theirs = getattr(mlx_nn, name)(4, 6, 3, **kwargs)
    ours = getattr(ndconv.nn, name)(4, 6, 3, **kwargs)
    weight = torch.from_numpy(np.array(theirs.weight))
    assert ours.weight.shape == weight.shape and ours.bias.shape == (6,)
    bound = (4 // kwargs.get("groups", 1) * 3**ndim) ** -0.5
    assert ours.weight.abs().max() <= bound and weight.abs().max() <= bound and not ours.bias.any()
    bias = torch.randn(6)
    theirs.bias = mx.array(bias.numpy())
    with torch.no_grad():
        ours.weight.copy_(weight), ours.bias.copy_(bias)
    x = torch.randn(2, *[7, 6, 5][:ndim], 4)
    _close(ours(x).detach(), torch.from_numpy(np.array(theirs(mx.array(x.numpy())))).double(), name)
