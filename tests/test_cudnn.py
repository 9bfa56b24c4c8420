"""The cudnn algorithm without a GPU: the mapping of every problem onto one cuDNN call
(``cudnn.describe``) and its tensor binding, executed by PyTorch ops with exactly cuDNN's
semantics in place of the graph (``_launch``), against the float64 reference; and the behaviour
when the optional package is absent. Graph building and execution run in tools/cudnn_check.py."""

import sys
import types

import pytest
import torch
from cases import CASE_PARAMS, PASSES, conv_args, for_pass
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import ndconv
from ndconv import planner, testing
from ndconv.algorithms import REGISTRY
from ndconv.algorithms import cudnn as cudnn_alg
from ndconv.api import make_problem

aten = torch.ops.aten


def _emulate(call, tensors, p, config):
    """cuDNN's fprop / dgrad / wgrad on the bound tensors, in float64 (cuDNN's semantics:
    cross-correlation, or convolution with the filter reversed in CONVOLUTION mode; pre/post
    padding; Y's dims exactly those of the padded forward)."""
    X, W, Y = (tensors[r] for r in ("X", "W", "Y"))
    D = X.dim() - 2
    spatial = tuple(range(2, 2 + D))
    convolution = call.reverse and config.reverse == "mode"
    pads = []
    for lo, hi in zip(reversed(call.pre_padding), reversed(call.post_padding)):
        pads += [lo, hi]
    padded = [x + lo + hi for x, lo, hi in zip(X.shape[2:], call.pre_padding, call.post_padding)]
    span = [(k - 1) * d + 1 for k, d in zip(W.shape[2:], call.dilation)]
    expect = [(n - s) // st + 1 for n, s, st in zip(padded, span, call.stride)]
    assert list(Y.shape[2:]) == expect, ("Y dims are not the padded forward's", Y.shape, expect)
    assert W.shape[0] == Y.shape[1] and W.shape[1] * call.groups == X.shape[1]
    assert all(0 <= v for v in call.pre_padding + call.post_padding)
    args = (list(call.stride), [0] * D, list(call.dilation), False, [0] * D, call.groups)
    w64 = W.double()
    if convolution:
        w64 = w64.flip(spatial)
    if call.op == "fprop":
        y = aten.convolution(torch.nn.functional.pad(X.double(), pads), w64, None, *args)
        Y.copy_(y)
    elif call.op == "dgrad":
        like = torch.empty((X.shape[0], X.shape[1], *padded), dtype=torch.float64)
        dx = aten.convolution_backward(Y.double(), like, w64, None, *args, [True, False, False])[0]
        X.copy_(torch.nn.functional.pad(dx, [-v for v in pads]))
    else:
        dw = aten.convolution_backward(Y.double(), torch.nn.functional.pad(X.double(), pads), w64, None,
                                       *args, [False, True, False])[1]
        W.copy_(dw.flip(spatial) if convolution else dw)


@pytest.fixture
def emulated(monkeypatch):
    monkeypatch.setattr(cudnn_alg, "_launch", _emulate)


def _check(p, config, seed=0):
    report = testing.check("cudnn", p, seed, config)
    assert report.ok, f"cudnn {config} on {p}: {report}"


@pytest.mark.parametrize("pass_", PASSES)
@pytest.mark.parametrize("case", CASE_PARAMS)
def test_every_call_computes_the_pass(emulated, case, pass_):
    p = for_pass(case.problem(dtype=torch.float32), pass_)
    configs = cudnn_alg.configs(p, include_measured_wrong=True) if cudnn_alg.formulations(p) else []
    if not configs:  # stride and input dilation together
        stride, _, idil, *_ = cudnn_alg._forward_geometry(p)
        assert any(s > 1 for s in stride) and any(i > 1 for i in idil)
        pytest.skip("no cuDNN formulation (stride and input dilation both above 1)")
    for config in configs:
        _check(p, config)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_types_and_staging(emulated, dtype):
    # a transposed convolution (the dgrad formulation, a staged filter) and its gradients
    p = make_problem((2, 5, 6, 4), (6, 3, 3, 2), dtype=dtype, input_dilation=2, padding=1, groups=2,
                     flip=True)
    for q in (p, p.dgrad(), p.wgrad()):
        for config in cudnn_alg.configs(q):
            _check(q, config)


def test_unaligned_and_strided_operands_are_staged(emulated):
    """A negative pad crops the input to an odd offset (not 16-byte aligned); a non-contiguous
    output view is written through a copy."""
    p = make_problem((1, 9, 3), (2, 3, 3), padding=([-1], [0]))
    call = cudnn_alg.describe(p, "fprop")
    assert call.X.offset == 3  # one element of 3 channels, 12 bytes in
    a, b = testing.random_operands(p)
    big = torch.full((*p.result_shape[:-1], 2 * p.result_shape[-1]), float("nan"))
    out = big[..., ::2]
    x, w, y = p.views(a, b, out)
    cudnn_alg.run(p, x, w, y, cudnn_alg.default_config(p))
    report = testing.compare(out, testing.reference_result(p, a, b), testing.tolerance(p))
    assert report.ok, str(report)


@settings(max_examples=150, deadline=None)
@given(args=conv_args(), pass_=st.sampled_from(PASSES), data=st.data())
def test_random_problems(args, pass_, data):
    x_shape, w_shape, kwargs = args
    p = for_pass(make_problem(x_shape, w_shape, dtype=torch.float64, **kwargs), pass_)
    assume(cudnn_alg.formulations(p))
    config = data.draw(st.sampled_from(cudnn_alg.configs(p)))
    saved = cudnn_alg._launch
    cudnn_alg._launch = _emulate  # hypothesis and function-scoped fixtures do not mix
    try:
        _check(p, config)
    finally:
        cudnn_alg._launch = saved


def test_describe_prefers_no_copies():
    p = make_problem((1, 8, 8, 4), (4, 3, 3, 4), stride=2, padding=1)
    assert cudnn_alg.default_config(p).formulation == "fprop"
    d = p.dgrad()  # stride 1, input dilation 2: cuDNN's data gradient on the natural weight
    call = cudnn_alg.describe(d, cudnn_alg.default_config(d).formulation)
    assert (call.op, call.transpose, call.reverse) == ("dgrad", False, False)
    t = make_problem((1, 4, 4, 4), (4, 4, 4, 4), input_dilation=2, padding=2, flip=True)  # convT
    call = cudnn_alg.describe(t, cudnn_alg.default_config(t).formulation)
    assert (call.op, call.reverse) == ("dgrad", False)
    w = p.wgrad()
    call = cudnn_alg.describe(w, cudnn_alg.default_config(w).formulation)
    assert (call.op, call.transpose, call.reverse) == ("wgrad", False, False)


def test_outputs_no_tap_reaches_are_zero(emulated):
    # outputs 2 and 3 of 6 reach the 2 input elements, the others see only padding
    p = make_problem((1, 2, 1), (1, 2, 1), padding=5, stride=2)
    call = cudnn_alg.describe(p, "fprop")
    assert call.zero_fill and call.Y.dims[2:] == (2,) and call.pre_padding == (1,)
    _check(p, cudnn_alg.default_config(p))
    # no output reaches the input at all: no call
    p = make_problem((1, 2, 1), (1, 2, 1), padding=8, stride=5)
    assert cudnn_alg.describe(p, "fprop").op == "zero"
    _check(p, cudnn_alg.default_config(p))


def test_the_class_measured_wrong_on_the_h200_is_refused(monkeypatch):
    """float32 grouped 1-D weight gradients whose cuDNN filter has K/G < C/G came back wrong on
    the H200 (tiny case 1d_groups_mult through the dgrad formulation); the calls that passed
    there stay offered."""
    cases = {c.name: c for c in testing.CASES}
    w = cases["1d_groups_mult"].problem(dtype=torch.float32).wgrad()
    assert "measured wrong on the H200" in cudnn_alg.measured_wrong(w, "dgrad")
    assert cudnn_alg.measured_wrong(w, "fprop") is None
    assert cudnn_alg.default_config(w).formulation == "fprop"
    assert {c.formulation for c in cudnn_alg.configs(w)} == {"fprop"}
    assert {c.formulation for c in cudnn_alg.configs(w, include_measured_wrong=True)} == {"fprop", "dgrad"}
    for dtype in (torch.float16, torch.bfloat16):  # passed on the H200
        assert cudnn_alg.measured_wrong(cases["1d_groups_mult"].problem(dtype=dtype).wgrad(), "dgrad") is None
    for name, form in (("2d_grouped_g4", "dgrad"), ("3d_c16_grouped", "fprop"), ("1d_causal_dw", "dgrad")):
        assert cudnn_alg.measured_wrong(cases[name].problem(dtype=torch.float32).wgrad(), form) is None
    # a grouped 1-D transposed convolution's weight gradient has only the dgrad formulation
    t = make_problem((1, 5, 4), (8, 3, 2), input_dilation=2, padding=1, groups=2, flip=True,
                     device="cuda").wgrad()
    assert cudnn_alg.formulations(t) == ("dgrad",)
    monkeypatch.setattr(cudnn_alg, "_frontend", lambda: (object(), ""))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    ok, reason = cudnn_alg.supports(t)
    assert not ok and "measured wrong on the H200" in reason
    assert cudnn_alg.measured_wrong(make_problem((1, 5, 4), (8, 3, 2), input_dilation=2, padding=1, groups=2,
                                                 flip=True, dtype=torch.float16).wgrad(), "dgrad") is None


# ---------------------------------------------------------------------- without the package


@pytest.fixture
def absent(monkeypatch):
    monkeypatch.setitem(sys.modules, "cudnn", None)  # import cudnn raises ImportError
    cudnn_alg._frontend.cache_clear()
    planner.clear_cache()
    yield
    cudnn_alg._frontend.cache_clear()
    planner.clear_cache()


def test_absent_package_is_a_reason_not_an_error(absent, monkeypatch):
    p = make_problem((1, 6, 6, 4), (4, 3, 3, 4), padding=1, device="cuda")  # a problem only
    ok, reason = REGISTRY["cudnn"].supports(p)
    assert not ok and "nvidia-cudnn-frontend is not installed" in reason
    with pytest.raises(ValueError, match="nvidia-cudnn-frontend is not installed"):
        planner.plan(p, "cudnn")
    monkeypatch.setitem(planner.PREFERENCE, "cpu", ("cudnn", "native", "gemm", "reference"))
    q = make_problem((1, 6, 6, 4), (4, 3, 3, 4), padding=1)
    assert planner.plan(q).name == "native"
    x, w = torch.randn(1, 6, 6, 4), torch.randn(4, 3, 3, 4)
    e = ndconv.explain(x, w, padding=1)
    rows = [r for r in e.rows if r.algorithm == "cudnn"]
    assert len(rows) == 3 and all(not r.supported and "not installed" in r.reason for r in rows)
    with pytest.raises(ValueError, match="not installed"):
        ndconv.conv2d(x, w, padding=1, algorithm="cudnn")


def test_cpu_problems_are_refused_with_the_package():
    cudnn_alg._frontend.cache_clear()
    if cudnn_alg._frontend()[0] is None:
        pytest.skip("nvidia-cudnn-frontend is not installed here")
    ok, reason = cudnn_alg.supports(make_problem((1, 6, 6, 4), (4, 3, 3, 4), padding=1))
    assert not ok and "CUDA" in reason


# ---------------------------------------------------------------------- graph building, faked


class _FakeGraph:
    """Records what ``_build`` asks of a cuDNN graph."""

    def __init__(self, built, **kwargs):
        self.built = built

    def tensor(self, **kwargs):
        return object()

    def _result(self, **kwargs):
        result = types.SimpleNamespace()
        for name in ("set_output", "set_dim", "set_stride", "set_data_type"):
            setattr(result, name, lambda *a: result)
        return result

    conv_fprop = conv_dgrad = conv_wgrad = _result

    def deselect_numeric_notes(self, notes):
        self.built.append(set(notes))

    def build(self, modes):
        pass

    def get_workspace_size(self):
        return 0


def _names(*names):
    return types.SimpleNamespace(**{n: n for n in names})


def _fake_frontend(built):
    return types.SimpleNamespace(
        pygraph=lambda **kw: _FakeGraph(built, **kw), create_handle=object,
        data_type=_names("HALF", "BFLOAT16", "FLOAT", "DOUBLE"),
        _pybind_module=types.SimpleNamespace(convolution_mode=_names("CONVOLUTION", "CROSS_CORRELATION")),
        numerical_note=_names("DOWN_CONVERT_INPUTS", "REDUCED_PRECISION_REDUCTION", "TENSOR_CORE",
                             "NONDETERMINISTIC"),
        heur_mode=_names("A", "FALLBACK"))


def test_deterministic_mode_deselects_nondeterministic_engines(monkeypatch):
    """Under torch.use_deterministic_algorithms or cudnn.deterministic, as PyTorch's convolution,
    the graph leaves out the engines cuDNN notes as nondeterministic (atomics in weight gradients),
    and a graph built outside that mode is not reused in it."""
    built = []
    monkeypatch.setattr(cudnn_alg, "_frontend", lambda: (_fake_frontend(built), ""))
    monkeypatch.setattr(cudnn_alg, "_handles", {})
    p = make_problem((2, 6, 6, 4), (8, 3, 3, 4), padding=1).wgrad()
    config = cudnn_alg.default_config(p)
    call = cudnn_alg.describe(p, config.formulation)
    layout = tuple((o.dims, o.strides) for o in (call.X, call.W, call.Y))

    def notes_of_build():
        key = cudnn_alg._key(call, p, config, layout, -1)  # device -1: torch.cuda.device is a no-op
        assert isinstance(cudnn_alg._build(key), cudnn_alg._Built)
        return key, built[-1]

    free, notes = notes_of_build()
    assert "NONDETERMINISTIC" not in notes and "DOWN_CONVERT_INPUTS" in notes
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        strict, notes = notes_of_build()
    finally:
        torch.use_deterministic_algorithms(previous)
    assert "NONDETERMINISTIC" in notes and strict != free
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", True)
    assert notes_of_build() == (strict, notes)
