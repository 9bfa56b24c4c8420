"""toeplitz beyond the shared case list: long kernels on every band axis (1-D, 2-D with the band
on either axis, 3-D), strides, kernel dilation, asymmetric and negative pads, flip, channel
multipliers, partial channel blocks and row tiles, several configs, random depthwise problems;
what it refuses and why; the planner's threshold."""

import pytest
import torch
from cases import DEVICE
from hypothesis import given
from hypothesis import strategies as st

from ndconv import planner, testing
from ndconv.algorithms import toeplitz
from ndconv.algorithms.toeplitz import Config
from ndconv.api import make_problem

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


pytestmark = pytest.mark.usefixtures("full_fp32")  # the fp32 bounds are for exact products


CASES = [
    testing.Case("1d_k13_causal", (2, 40, 6), (6, 13, 1), {"padding": ([12], [0]), "groups": 6}),
    testing.Case("1d_k33_kdil2", (1, 70, 20), (20, 33, 1),
                 {"padding": 16, "kernel_dilation": 2, "groups": 20}),
    testing.Case("2d_9x9_two_tiles", (2, 9, 21, 8), (8, 9, 9, 1), {"padding": 4, "groups": 8}),
    testing.Case("2d_band_on_rows", (2, 30, 5, 6), (6, 11, 3, 1), {"padding": ([5, 1], [6, 1]), "groups": 6}),
    testing.Case("2d_asym_negative_flip", (1, 8, 25, 4), (4, 3, 10, 1),
                 {"padding": ([1, 7], [0, -2]), "kernel_dilation": (2, 1), "flip": True, "groups": 4}),
    testing.Case("2d_stride2", (1, 7, 37, 4), (4, 3, 9, 1), {"stride": 2, "padding": 4, "groups": 4}),
    testing.Case("2d_multiplier2", (1, 6, 20, 3), (6, 3, 9, 1), {"padding": ([1, 4], [1, 4]), "groups": 3}),
    testing.Case("2d_c40_partial_block", (1, 5, 18, 40), (40, 3, 9, 1),
                 {"padding": ([1, 4], [1, 4]), "groups": 40}),
    testing.Case("3d_k13", (1, 3, 4, 30, 4), (4, 2, 3, 13, 1),
                 {"padding": ([1, 1, 6], [0, 1, 6]), "groups": 4}),
]


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name) for c in CASES])
@pytest.mark.parametrize("pass_", ["fwd", "dgrad"])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
def test_matches_reference(case, pass_, dtype):
    p = case.problem(dtype=dtype, device=DEVICE)
    q = p if pass_ == "fwd" else p.dgrad()
    ok, reason = toeplitz.supports(q)
    if pass_ == "dgrad" and case.name in ("2d_stride2", "2d_multiplier2"):
        assert not ok  # input dilation; two input channels per group
        return
    assert ok, reason
    report = testing.check("toeplitz", q, seed=7)
    assert report.ok, f"{q}: {report}"


@pytest.mark.parametrize("config", [
    Config(tile_w=16, block_k=16, block_m=16, num_warps=4),
    Config(tile_w=16, block_k=32, block_m=32, num_warps=4),
    Config(tile_w=32, block_k=16, block_m=64, num_warps=8),
    Config(tile_w=64, block_k=32, block_m=16, num_warps=4, num_stages=2),
], ids=str)
def test_configs(config):
    """Tiles wider than the output, windows in one or several chunks, row blocks that divide the
    rows or not."""
    p = make_problem((2, 5, 23, 12), (12, 3, 15, 1), padding=([1, 9], [1, 5]), groups=12,
                     dtype=torch.bfloat16, device=DEVICE)
    for q in (p, p.dgrad()):
        report = testing.check("toeplitz", q, seed=3, config=config)
        assert report.ok, f"{config} on {q}: {report}"


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name) for c in CASES
                                  if c.name in ("1d_k13_causal", "2d_band_on_rows", "2d_asym_negative_flip",
                                                "2d_multiplier2", "3d_k13")])
def test_prepared_call_binds_its_launches_once(case, monkeypatch):
    """The prepared call (the table, the planar copies and the product bound once; the table and
    the copies made per call) on fresh operands, call after call, builds no launch after it is
    made, and its first call (Triton's own launch) computes what the later ones do."""
    p = case.problem(dtype=torch.float32, device=DEVICE)
    call = toeplitz.prepare(p, toeplitz.default_config(p))

    def rebuilt(*args, **kwargs):
        raise AssertionError("a launch was built per call")
    monkeypatch.setattr(toeplitz, "_launches", rebuilt)
    for seed in (3, 4):
        a, b = testing.random_operands(p, seed, device=DEVICE)
        testing.assert_close(call(a, b), testing.reference_result(p, a, b), testing.tolerance(p))


@st.composite
def _depthwise_args(draw):
    """(x_shape, w_shape, kwargs) of a small depthwise problem without input dilation."""
    D = draw(st.integers(1, 3))
    c = draw(st.integers(1, 5))
    mult = draw(st.integers(1, 2))
    spatial = draw(st.lists(st.integers(1, 12), min_size=D, max_size=D))
    kernel = draw(st.lists(st.integers(1, 12), min_size=D, max_size=D))
    kwargs = {
        "stride": draw(st.lists(st.integers(1, 2), min_size=D, max_size=D)),
        "padding": (draw(st.lists(st.integers(-2, 8), min_size=D, max_size=D)),
                 draw(st.lists(st.integers(-2, 8), min_size=D, max_size=D))),
        "kernel_dilation": draw(st.lists(st.integers(1, 2), min_size=D, max_size=D)),
        "groups": c,
        "flip": draw(st.booleans()),
    }
    return (draw(st.integers(1, 2)), *spatial, c), (c * mult, *kernel, 1), kwargs


@given(drawn=_depthwise_args(), pass_=st.sampled_from(["fwd", "dgrad"]), seed=st.integers(0, 2**16))
def test_random_depthwise_problems(drawn, pass_, seed):
    x_shape, w_shape, kwargs = drawn
    try:
        p = make_problem(x_shape, w_shape, dtype=torch.float32, device=DEVICE, **kwargs)
    except ValueError:
        return  # an empty output or a crop of everything: not a problem
    q = p if pass_ == "fwd" else p.dgrad()
    if not toeplitz.supports(q)[0]:
        assert pass_ == "dgrad" and (q.c_per_group > 1 or max(q.input_dilation) > 1)
        return
    report = testing.check("toeplitz", q, seed=seed)
    assert report.ok, f"{q}: {report}"


def test_refusals_say_why():
    p = make_problem((2, 9, 20, 4), (4, 3, 9, 1), padding=4, groups=4, device=DEVICE)
    ok, reason = toeplitz.supports(p.wgrad())
    assert not ok and "weight gradients" in reason
    strided = make_problem((2, 9, 20, 4), (4, 3, 9, 1), stride=2, padding=4, groups=4, device=DEVICE)
    ok, reason = toeplitz.supports(strided.dgrad())
    assert not ok and "input dilation" in reason
    dense = make_problem((2, 9, 20, 4), (4, 3, 9, 4), padding=4, device=DEVICE)
    ok, reason = toeplitz.supports(dense)
    assert not ok and "not depthwise" in reason
    huge = make_problem((1, 300, 2), (2, 250, 1), groups=2, device=DEVICE)
    ok, reason = toeplitz.supports(huge)
    assert not ok and "window" in reason


def test_band_axis_is_the_longest_kernel():
    p = make_problem((1, 40, 40, 2), (2, 15, 5, 1), groups=2)
    assert toeplitz.band_axis(p) == 0
    assert toeplitz.band_axis(make_problem((1, 40, 40, 2), (2, 7, 7, 1), groups=2)) == 1
    assert toeplitz.band_axis(make_problem((1, 40, 40, 2), (2, 5, 3, 1), kernel_dilation=(1, 3),
                                           groups=2)) == 1


def test_default_tiles_for_the_benchmark_shapes():
    """The picks for RepLKNet's 31x31 (window 62 -> 64 for 32 outputs: fewest products) and a
    long 1-D k=64 sequence (bf16)."""
    p = make_problem((32, 56, 56, 128), (128, 31, 31, 1), padding=15, groups=128, dtype=torch.bfloat16)
    c = toeplitz.default_config(p)
    assert (c.tile_w, c.block_k, c.block_m) == (32, 32, 256)
    p = make_problem((8, 8192, 512), (512, 64, 1), padding=([63], [0]), groups=512, dtype=torch.bfloat16)
    assert toeplitz.default_config(p).tile_w in (32, 64)
    assert all(c.block_m * c.tile_w <= 16384 for c in toeplitz.configs(p))


def test_planner_picks_toeplitz_for_long_kernels(monkeypatch):
    """Measured faster than depthwise on the H200 from 64 taps (planner._measured_first): the
    heuristic planner runs 31x31 and 1-D k=64 forwards and input gradients as banded GEMMs, and
    leaves 7x7, short 1-D kernels and exact fp32 to depthwise (weight gradients: not toeplitz)."""
    from ndconv.algorithms import depthwise, implicit_gemm
    for module in (toeplitz, depthwise, implicit_gemm):
        monkeypatch.setattr(module, "kernel_reason", lambda p: None)  # as if on an H200
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *args: (9, 0))
    def dw(x, k, **kwargs):
        return make_problem(x, (x[-1], *k, 1), groups=x[-1], device="cuda", **kwargs)
    long2d = dw((2, 56, 56, 64), (31, 31), padding=15, dtype=torch.bfloat16)
    long1d = dw((2, 512, 64), (64,), padding=([63], [0]), dtype=torch.float16)
    for q in (long2d, long2d.dgrad(), long1d, long1d.dgrad()):
        assert planner.plan(q).name == "toeplitz", q
    short = dw((2, 56, 56, 64), (7, 7), padding=3, dtype=torch.bfloat16)
    exact = dw((2, 56, 56, 64), (31, 31), padding=15, dtype=torch.float32)  # TF32 off (fixture)
    for q in (short, short.dgrad(), exact, dw((2, 512, 64), (16,), dtype=torch.bfloat16)):
        assert planner.plan(q).name == "depthwise", q
    assert planner.plan(long2d.wgrad()).name != "toeplitz"
    assert planner.plan(short, algorithm="toeplitz").name == "toeplitz"
