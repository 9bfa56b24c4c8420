"""Gradients: float64 gradcheck, and agreement with autograd through PyTorch's own ops, including
the input-dilated (transposed, stride > 1) cases where MLX's own vjp is wrong."""

import pytest
import torch
from cases import CASE_PARAMS, DEVICE, conv_args
from hypothesis import given
from hypothesis import strategies as st
from test_reference import _oracle

import ndconv

ALGORITHMS = ["reference", "gemm", "native"]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("case", CASE_PARAMS)
def test_gradcheck(case, algorithm):
    g = torch.Generator().manual_seed(4)
    x = torch.randn(case.x, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(case.w, generator=g, dtype=torch.float64, requires_grad=True)
    fn = lambda x, w: ndconv.conv_general(x, w, algorithm=algorithm, **case.args)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (x, w), eps=1e-6, atol=1e-7, fast_mode=x.numel() > 500)


def _grads_match(x_shape, w_shape, args, algorithm, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(x_shape, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(w_shape, generator=g, dtype=torch.float64, requires_grad=True)
    ours = ndconv.conv_general(x, w, algorithm=algorithm, **args)
    theirs = _oracle(x, w, args)
    dy = torch.randn(ours.shape, generator=g, dtype=torch.float64)
    gx, gw = torch.autograd.grad(ours, (x, w), dy)
    rx, rw = torch.autograd.grad(theirs, (x, w), dy)
    assert gx.shape == x.shape and gw.shape == w.shape
    torch.testing.assert_close(gx, rx, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(gw, rw, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("case", CASE_PARAMS)
def test_gradients_match_torch_autograd(case, algorithm):
    _grads_match(case.x, case.w, case.args, algorithm, seed=5)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@given(drawn=conv_args(), seed=st.integers(0, 2**16))
def test_gradients_match_torch_autograd_random(algorithm, drawn, seed):
    _grads_match(*drawn, algorithm, seed)


@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_transposed_gradients_with_stride(ndim):
    """conv_transpose with stride 2 and output_padding: gradients have the operands' shapes and
    match PyTorch's conv_transpose autograd."""
    fn = {1: torch.nn.functional.conv_transpose1d, 2: torch.nn.functional.conv_transpose2d,
          3: torch.nn.functional.conv_transpose3d}[ndim]
    g = torch.Generator().manual_seed(6)
    x = torch.randn(2, *[4] * ndim, 3, generator=g, dtype=torch.float64, requires_grad=True)
    w_torch = torch.randn(3, 4, *[3] * ndim, generator=g, dtype=torch.float64, requires_grad=True)
    w = w_torch.detach().movedim(0, -1).clone().requires_grad_(True)  # [O, *K, C]
    ours = getattr(ndconv, f"conv_transpose{ndim}d")(x, w, stride=2, padding=1, output_padding=1)
    theirs = fn(x.movedim(-1, 1), w_torch, stride=2, padding=1, output_padding=1).movedim(1, -1)
    torch.testing.assert_close(ours, theirs)
    dy = torch.randn(ours.shape, generator=g, dtype=torch.float64)
    gx, gw = torch.autograd.grad(ours, (x, w), dy)
    rx, rw = torch.autograd.grad(theirs, (x, w_torch), dy)
    torch.testing.assert_close(gx, rx)
    torch.testing.assert_close(gw, rw.movedim(0, -1))


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("case", CASE_PARAMS)
def test_gradgradcheck(case, algorithm):
    """Second derivatives (gradient penalties, Hessian-vector products): the gradients are
    convolutions again, differentiable like the forward."""
    g = torch.Generator().manual_seed(7)
    x = torch.randn(case.x, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(case.w, generator=g, dtype=torch.float64, requires_grad=True)
    fn = lambda x, w: ndconv.conv_general(x, w, algorithm=algorithm, **case.args)  # noqa: E731
    assert torch.autograd.gradgradcheck(fn, (x, w), eps=1e-6, atol=1e-7, fast_mode=True)


@pytest.mark.parametrize("name", ["2d_mixed_everything", "2d_convT_3x3s2_asym", "1d_groups_mult"])
def test_third_derivatives(name):
    """The input gradient as a function of (x, w), differentiated twice more."""
    case = next(c for c in ndconv.testing.CASES if c.name == name)
    g = torch.Generator().manual_seed(8)
    x = torch.randn(case.x, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(case.w, generator=g, dtype=torch.float64, requires_grad=True)
    v = torch.randn(ndconv.conv_general(x, w, **case.args).shape, generator=g, dtype=torch.float64)

    def dx_dw(x, w):
        y = ndconv.conv_general(x, w, **case.args)
        return torch.autograd.grad(y, (x, w), v * y, create_graph=True)  # v * y: dx, dw depend on x and w

    assert torch.autograd.gradgradcheck(dx_dw, (x, w), eps=1e-6, atol=1e-7, fast_mode=True)


@pytest.mark.parametrize("name", ["2d_mixed_everything", "2d_convT_4x4s2", "3d_grouped_strided"])
def test_compiled_op_second_derivatives(name):
    """The custom op that torch.compile traces carries the same derivative formulas (checked
    eagerly: the op is differentiable outside compile too)."""
    from ndconv.autograd import _conv_op

    case = next(c for c in ndconv.testing.CASES if c.name == name)
    p = case.problem(torch.float64)
    g = torch.Generator().manual_seed(9)
    x = torch.randn(case.x, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(case.w, generator=g, dtype=torch.float64, requires_grad=True)
    fn = lambda x, w: _conv_op(x, w, p.to_ints(), "fwd", "")  # noqa: E731
    assert torch.autograd.gradgradcheck(fn, (x, w), eps=1e-6, atol=1e-7, fast_mode=True)


@pytest.mark.parametrize(("name", "algorithm"), [("2d_3x3", "implicit_gemm"),
                                                 ("2d_convT_3x3s2_asym", "implicit_gemm"),
                                                 ("2d_dw5x5_s2_mult2", "depthwise"),
                                                 ("2d_grouped_g4", "grouped")])
def test_second_derivatives_on_triton_kernels(name, algorithm):
    """A gradient penalty's derivatives run every pass on the forced kernel (in the interpreter
    on a CPU): compared with the float64 reference's."""
    case = next(c for c in ndconv.testing.CASES if c.name == name)
    g = torch.Generator().manual_seed(10)
    x0 = torch.randn(case.x, generator=g, dtype=torch.float64)
    w0 = torch.randn(case.w, generator=g, dtype=torch.float64) / case.w[-1] ** 0.5
    v0 = torch.randn(ndconv.conv_general(x0, w0, **case.args).shape, generator=g, dtype=torch.float64)

    def penalty_grads(dtype, algorithm):
        x, w, v = (t.to(DEVICE, dtype).requires_grad_(True) for t in (x0, w0, v0))
        y = ndconv.conv_general(x, w, algorithm=algorithm, **case.args)
        dx, dw = torch.autograd.grad(y, (x, w), v, create_graph=True)
        return torch.autograd.grad(dx.square().sum() + dw.square().sum(), (x, w, v))

    # two passes deep (TF32 on a GPU)
    tol = ndconv.testing.tolerance(case.problem(torch.float32, DEVICE)) * 10
    for ours, ref, what in zip(penalty_grads(torch.float32, algorithm),
                               penalty_grads(torch.float64, "reference"), ("x", "w", "dy")):
        ndconv.testing.assert_close(ours.cpu(), ref.cpu(), tol, f"{name} {algorithm} d/d{what}")


def test_only_needed_gradients_are_computed():
    x = torch.randn(1, 5, 5, 2, dtype=torch.float64, requires_grad=True)
    w = torch.randn(3, 3, 3, 2, dtype=torch.float64)
    ndconv.conv2d(x, w).sum().backward()
    assert x.grad is not None and w.grad is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("case", CASE_PARAMS)
def test_both_gradients_in_one_call_match_the_separate_calls(case, dtype):
    """Where both gradients are planned to PyTorch's plain formulations of one forward geometry,
    autograd computes them in one convolution_backward (planner.gradients), as PyTorch does; it
    computes what the separate calls do (the same kernels), against the float64 reference, and
    is not used elsewhere."""
    from ndconv import planner, testing
    from ndconv.algorithms import native

    p = case.problem(dtype, DEVICE)
    both = planner.gradients(p, "native")
    d_plain = native._plain(p.dgrad(), None) is not None
    w_plain = native._plain(p.wgrad(), None) is not None
    assert (both is not None) == (d_plain and w_plain and not p.is_trivial and not p.dgrad().is_trivial
                                  and not p.wgrad().is_trivial), case
    if both is None:
        return
    x, w = testing.random_operands(p, 5)
    dy = testing.random_operands(p.wgrad(), 6)[1]
    dx, dw = both(x, w, dy)
    d, g = p.dgrad(), p.wgrad()
    testing.assert_close(dx, testing.reference_result(d, dy, w), testing.tolerance(d), "dx")
    expected_dw = testing.reference_result(g, x, dy)  # the gradient of the weight as read
    expected_dw = expected_dw.flip(tuple(range(1, 1 + p.ndim))) if p.flip else expected_dw
    testing.assert_close(dw, expected_dw, testing.tolerance(g), "dw")
    with pytest.raises(ValueError, match="not the natural"):
        both(x, w, dy[..., :-1])


def test_one_call_for_both_gradients_only_where_both_plans_are_plain():
    from ndconv import planner
    from ndconv.api import make_problem

    plain = make_problem((2, 6, 6, 4), (5, 3, 3, 4), padding=1, dtype=torch.float64)
    assert planner.gradients(plain) is not None  # on a CPU both passes run native
    assert planner.gradients(plain, "gemm") is None  # forced elsewhere
    assert planner.gradients(make_problem((2, 6, 6, 4), (5, 3, 3, 4), padding=([0, 1], [1, 1]),
                                          dtype=torch.float64)) is None  # asymmetric: F.pad first


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("case", CASE_PARAMS)
def test_pytorch_autograd_path_computes_what_the_passes_do(case, dtype):
    """Where the planner hands a differentiable call to PyTorch's own op (planner.differentiable:
    both gradients one convolution_backward, the forward PyTorch's convolution), its result and
    gradients equal the planned calls' (on a CPU exactly) and the reference's within tolerance,
    and only there is it used."""
    from ndconv import planner
    from ndconv.algorithms import native

    p = case.problem(dtype, DEVICE)
    direct = planner.differentiable(p)
    forward_native = planner.plan(p).name == "native"
    plain = native._plain(p, planner.plan(p).config) is not None if forward_native else False
    if planner.gradients(p) is None or not (forward_native or planner._host_bound(p)):
        assert direct is None, case
        return
    if not plain and forward_native:
        assert direct is None, case
        return
    if direct is None:  # host-bound: the views must be plain ones
        assert native.differentiable(p, None) is None
        return
    _same_as_the_passes(p, direct)


def _same_as_the_passes(p, direct):
    from ndconv import autograd, planner

    x, w = (t.requires_grad_(True) for t in ndconv.testing.random_operands(p, 11))
    y = direct(x, w)
    assert "ConvolutionBackward" in _graph_nodes(y)
    dy = ndconv.testing.random_operands(p.wgrad(), 12)[1]
    dx, dw = torch.autograd.grad(y, (x, w), dy)
    xd, wd = x.detach(), w.detach()
    torch.testing.assert_close(y, autograd.compute(p, "fwd", xd, wd, "native"), rtol=0, atol=0)
    d, g = p.dgrad(), p.wgrad()
    both = planner.gradients(p)(xd, wd, dy)  # one convolution_backward, as PyTorch's node calls it
    if p.device == "cpu":  # the same kernels (on a GPU cuDNN may pick another algorithm: round-off)
        torch.testing.assert_close(dx, both[0], rtol=0, atol=0)
        torch.testing.assert_close(dw, both[1], rtol=0, atol=0)
    ndconv.testing.assert_close(dx, ndconv.testing.reference_result(d, dy, wd), ndconv.testing.tolerance(d),
                                "dx")
    expected_dw = ndconv.testing.reference_result(g, xd, dy)  # the gradient of the weight as read
    expected_dw = expected_dw.flip(tuple(range(1, 1 + p.ndim))) if p.flip else expected_dw
    ndconv.testing.assert_close(dw, expected_dw, ndconv.testing.tolerance(g), "dw")
    assert "PyTorch's own differentiable convolution" in str(planner.explain(p))


def test_pytorch_autograd_path_only_unforced(monkeypatch):
    from ndconv import planner
    from ndconv.api import make_problem

    p = make_problem((2, 6, 6, 4), (5, 3, 3, 4), padding=1, dtype=torch.float32)
    assert planner.differentiable(p) is not None  # on a CPU every pass runs native
    assert planner.differentiable(p, "gemm") is None and planner.differentiable(p, "reference") is None
    monkeypatch.setenv(planner.ENV_ALGORITHM, "gemm")
    assert planner.differentiable(p) is None
    monkeypatch.delenv(planner.ENV_ALGORITHM)
    asymmetric = make_problem((2, 6, 6, 4), (5, 3, 3, 4), padding=([0, 1], [1, 1]), dtype=torch.float32)
    assert planner.differentiable(asymmetric) is None
    flipped = make_problem((2, 6, 7, 4), (5, 3, 2, 4), padding=1, flip=True, dtype=torch.float32)
    _same_as_the_passes(flipped, planner.differentiable(flipped))
    from ndconv.algorithms import native  # 1-D as 2-D (the GPU's first formulation)
    conv1d = make_problem((2, 9, 4), (5, 3, 4), padding=1, stride=2, dtype=torch.float32)
    _same_as_the_passes(conv1d, native.differentiable(conv1d, "conv (as 2-D)"))
    x = torch.randn(2, 6, 6, 4, requires_grad=True)
    y = ndconv.conv2d(x, torch.randn(5, 3, 3, 4), padding=1)
    assert "ConvolutionBackward0" in _graph_nodes(y) and "_Convolution" not in _graph_nodes(y)


def _graph_nodes(y) -> str:
    """The names of the autograd nodes behind ``y``."""
    names, todo = [], [y.grad_fn]
    while todo:
        node = todo.pop()
        if node is not None:
            names.append(type(node).__name__)
            todo += [n for n, _ in node.next_functions]
    return " ".join(names)
