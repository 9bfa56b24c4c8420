"""stem beyond the shared case list: RGB stems of every shape it takes (strides, kernel-row
dilation, asymmetric and negative pads, flip, 1 to 4 channels, 1-D), several configs, the
prepared call, a strided output view; what it refuses and why; the planner's rule."""

import pytest
import torch
from cases import DEVICE, poisoned
from hypothesis import given, settings
from hypothesis import strategies as st

from ndconv import planner, testing
from ndconv.algorithms import stem, triton_support
from ndconv.algorithms.stem import Config
from ndconv.api import make_problem

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


pytestmark = pytest.mark.usefixtures("full_fp32")  # the fp32 bounds are for exact products


CASES = [
    testing.Case("7x7s2_c3", (2, 13, 11, 3), (8, 7, 7, 3), {"stride": 2, "padding": 3}),
    testing.Case("3x3s1_c3_o20", (1, 9, 10, 3), (20, 3, 3, 3), {"padding": 1}),
    testing.Case("3x3s2_same_c3", (2, 9, 9, 3), (16, 3, 3, 3), {"stride": 2, "padding": ([0, 0], [1, 1])}),
    testing.Case("4x4s4_c4", (1, 12, 16, 4), (24, 4, 4, 4), {"stride": 4}),
    testing.Case("c1_asym_negative", (2, 8, 9, 1), (5, 3, 2, 1), {"padding": ([2, -1], [-1, 3])}),
    testing.Case("c2_rowdil_flip", (1, 11, 8, 2), (12, 3, 3, 2),
                 {"stride": (1, 3), "padding": ([2, 1], [1, 0]), "kernel_dilation": (2, 1), "flip": True}),
    testing.Case("1d_c1_k10s5", (2, 43, 1), (16, 10, 1), {"stride": 5}),
    testing.Case("1d_c3_causal", (1, 20, 3), (8, 4, 3), {"padding": ([3], [0])}),
]


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name) for c in CASES])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
def test_matches_reference(case, dtype):
    p = case.problem(dtype=dtype, device=DEVICE)
    ok, reason = stem.supports(p)
    assert ok, reason
    report = testing.check("stem", p, seed=5)
    assert report.ok, f"{p}: {report}"


@pytest.mark.parametrize("config", [
    Config(block_m=16, block_n=16, rows=1),
    Config(block_m=32, block_n=16, rows=2, num_warps=8),  # kernel rows padded 7 -> 8
    Config(block_m=64, block_n=32, rows=1),
], ids=str)
def test_configs(config):
    p = CASES[0].problem(dtype=torch.bfloat16, device=DEVICE)
    report = testing.check("stem", p, seed=11, config=config)
    assert report.ok, f"{config}: {report}"


@pytest.mark.parametrize("config", [Config(), Config(block_m=32, block_n=16, rows=2)], ids=str)
def test_non_finite_inputs_stay_with_the_outputs_that_read_them(config):
    """The windows' elements past the kernel and kernel rows padded 7 -> 8 read real input that
    meets the weight's zeros: an inf there must make no NaN of outputs that do not read it."""
    p = CASES[0].problem(device=DEVICE)
    a, b = testing.random_operands(p, seed=2)
    for seed in range(3):
        a2, b2, reads = poisoned(p, a, b, "a", float("inf"), seed)
        finite = testing.run_algorithm("stem", p, a2, b2, config).isfinite()
        assert (finite != reads).all(), f"seed {seed}: {int((finite == reads).sum())} outputs wrong"


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name) for c in (CASES[0], CASES[4], CASES[6])])
def test_prepared_call_and_strided_output(case):
    """The prepared call (bound launches of the copies and the kernel) on the natural operands,
    and ``run`` into a strided view of a wider result, both against the reference; the columns
    of the wider result that are not the output stay untouched."""
    p = case.problem(dtype=torch.bfloat16, device=DEVICE)
    a, b = testing.random_operands(p, 2, device=DEVICE)
    ref = testing.reference_result(p, a, b)
    call = stem.prepare(p, stem.default_config(p))
    for _ in range(2):  # the first launch compiles, the second is the bound one
        testing.assert_close(call(a, b), ref, testing.tolerance(p), "prepared")
    wide = torch.full((*p.result_shape[:-1], p.out_channels + 3), float("nan"), dtype=p.dtype, device=DEVICE)
    out = wide[..., 1:1 + p.out_channels]
    stem.run(p, *p.views(a, b, out), stem.default_config(p))
    testing.assert_close(out, ref, testing.tolerance(p), "strided output")
    assert wide[..., 0].isnan().all() and wide[..., -2:].isnan().all()


@st.composite
def _stems(draw):
    """A random problem stem takes: 1-D or 2-D, 1-4 channels, strides, row dilation, pads
    (asymmetric, negative), flip."""
    ndim = draw(st.sampled_from([1, 2]))
    c, o, n = draw(st.integers(1, 4)), draw(st.integers(1, 20)), draw(st.integers(1, 2))
    kernel = [draw(st.integers(1, 5)) for _ in range(ndim)]
    stride = [draw(st.integers(1, 3)) for _ in range(ndim)]
    dilation = [draw(st.integers(1, 2)) for _ in range(ndim - 1)] + [1]
    lo = [draw(st.integers(-1, 3)) for _ in range(ndim)]
    hi = [draw(st.integers(-1, 3)) for _ in range(ndim)]
    size = [(k - 1) * d + 1 + draw(st.integers(3, 8)) for k, d in zip(kernel, dilation)]
    return ((n, *size, c), (o, *kernel, c),
            dict(stride=stride, padding=(lo, hi), kernel_dilation=dilation, flip=draw(st.booleans())))


@settings(max_examples=25, deadline=None)
@given(drawn=_stems(), seed=st.integers(0, 2**16))
def test_random_stems_match_reference(drawn, seed):
    x, w, args = drawn
    p = make_problem(x, w, dtype=torch.float32, device=DEVICE, **args)
    ok, reason = stem.supports(p)
    assert ok, f"{p}: {reason}"
    report = testing.check("stem", p, seed=seed)
    assert report.ok, f"{p}: {report}"


def test_prepare_leaves_flipped_weights_to_run():
    assert stem.prepare(CASES[5].problem(device=DEVICE), Config()) is None


def test_refusals_say_why():
    def reason(x, w, **args):
        ok, why = stem.supports(make_problem(x, w, device=DEVICE, **args))
        assert not ok
        return why

    assert "at most 4 channels" in reason((1, 8, 8, 5), (4, 3, 3, 5))
    assert "at most 4 channels" in reason((1, 8, 8, 4), (4, 3, 3, 2), groups=2)
    assert "1-D and 2-D" in reason((1, 4, 8, 8, 3), (4, 3, 3, 3, 3))
    assert "input dilation" in reason((1, 8, 8, 3), (4, 3, 3, 3), input_dilation=2)
    assert "gaps in the window" in reason((1, 8, 8, 3), (4, 3, 3, 3), kernel_dilation=(1, 2))
    assert "more than 16" in reason((1, 8, 40, 3), (4, 1, 17, 3))
    p = make_problem((1, 8, 8, 3), (4, 3, 3, 3), device=DEVICE)
    assert "forward" in stem.supports(p.dgrad())[1] and "forward" in stem.supports(p.wgrad())[1]
    assert "kernel row's taps" in stem.supports(p)[1]


def test_planner_takes_short_stems_only(monkeypatch):
    """On an H200 (faked where there is none) the planner runs stems with reductions of at most
    64 elements here (3x3, 4x4 stride 4, 1-D audio layers), not ResNet's 7x7 (implicit_gemm's
    space-to-depth copy) nor tiny 2-D ones (the host would wait on its three launches)."""
    if not torch.cuda.is_available():
        h200 = type("Properties", (), {"multi_processor_count": 132, "name": "NVIDIA H200"})()
        monkeypatch.setattr(triton_support, "_cuda_capability_ok", lambda: True)
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *device: (9, 0))
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda *device: h200)

    def chosen(x, w, **args):
        return planner._choose(make_problem(x, w, dtype=torch.bfloat16, device="cuda", **args)).name

    assert chosen((8, 256, 256, 3), (128, 3, 3, 3), padding=1) == "stem"
    assert chosen((64, 224, 224, 3), (32, 3, 3, 3), stride=2, padding=([0, 0], [1, 1])) == "stem"
    assert chosen((64, 224, 224, 3), (96, 4, 4, 3), stride=4) == "stem"
    assert chosen((64, 224, 224, 3), (64, 7, 7, 3), stride=2, padding=3) == "implicit_gemm"
    assert chosen((8, 16000, 1), (512, 10, 1), stride=5) == "stem"  # wav2vec2: host-bound, but 1-D
    # host-bound: its three launches cost more
    assert chosen((1, 32, 32, 3), (16, 3, 3, 3), padding=1) != "stem"
    assert chosen((1, 2000, 1), (16, 7, 1), padding=3) != "stem"
    assert chosen((32, 256, 256, 1), (32, 3, 3, 1), padding=1) == "stem"  # one channel: no depthwise kernel
