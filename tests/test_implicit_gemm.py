"""The Triton implicit GEMM beyond the shared case list: every config family, split-K, forcing it
through the public API (gradients included), what it refuses and why, and 64-bit offsets."""

import itertools
from dataclasses import replace

import pytest
import torch
from cases import CASE_PARAMS, DEVICE, PASSES, for_pass

import ndconv
from ndconv import testing
from ndconv.algorithms import grouped, implicit_gemm
from ndconv.algorithms.implicit_gemm import Config
from ndconv.algorithms.triton_support import needs_int64


@pytest.mark.parametrize("pass_", PASSES)
@pytest.mark.parametrize("case", CASE_PARAMS)
def test_other_configs(case, pass_):
    """The other reduction layout (packed <-> per tap), tiny tiles and a forced split-K."""
    p = for_pass(case.problem(dtype=torch.float32, device=DEVICE), pass_)
    default = implicit_gemm.default_config(p)
    for config in (Config(16, 16, 16, 4, 2, not default.packed, 3),
                   Config(32, 64, 32, 4, 3, default.packed, 2)):
        report = testing.check("implicit_gemm", p, seed=3, config=config)
        assert report.ok, f"{config} on {p}: {report}"


def test_config_space_is_pruned_and_contains_the_default():
    p = testing.CASES[6].problem(device=DEVICE)  # O = 4: no wide tiles
    space = implicit_gemm.configs(p)
    assert space[0] == implicit_gemm.default_config(p) and len(space) == len(set(space)) >= 3
    assert all(c.block_n <= 32 for c in space[1:])
    wide = implicit_gemm.configs(
        testing.Case("wide", (1, 8, 8, 64), (256, 3, 3, 64), {}).problem(device=DEVICE))
    assert len(wide) > len(space) and any(c.block_n == 256 for c in wide)


def test_forced_through_the_api_with_gradients(monkeypatch):
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)  # on a GPU: full fp32 products
    monkeypatch.setenv("NDCONV_ALGORITHM", "implicit_gemm")
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 7, 6, 4, generator=g).to(DEVICE).requires_grad_(True)
    w = torch.randn(6, 3, 3, 2, generator=g).to(DEVICE).requires_grad_(True)
    args = dict(stride=(2, 1), padding=([1, 0], [2, 1]), input_dilation=(1, 2), groups=2, flip=True)
    y = ndconv.conv_general(x, w, **args)
    dy = torch.randn(y.shape, generator=g).to(DEVICE)
    gx, gw = torch.autograd.grad(y, (x, w), dy)
    monkeypatch.setenv("NDCONV_ALGORITHM", "reference")
    ry = ndconv.conv_general(x, w, **args)
    rx, rw = torch.autograd.grad(ry, (x, w), dy)
    for ours, ref in ((y, ry), (gx, rx), (gw, rw)):
        testing.assert_close(ours, ref, 1e-5)


def test_refuses_float64_with_a_reason():
    p = testing.CASES[0].problem(dtype=torch.float64, device=DEVICE)
    ok, reason = implicit_gemm.supports(p)
    assert not ok and "float64" in reason
    with pytest.raises(ValueError, match="cannot run .* float64"):
        ndconv.conv1d(torch.randn(2, 9, 5, dtype=torch.float64, device=DEVICE),
                      torch.randn(6, 3, 5, dtype=torch.float64, device=DEVICE), algorithm="implicit_gemm")


def test_needs_int64_detects_large_offsets():
    small = torch.empty(4, 4)
    broadcast = torch.empty(1, 1).expand(2**16, 2**16)  # 2**32 elements, zero strides: small offsets
    assert not needs_int64(small, broadcast)
    assert not needs_int64(torch.empty(2**31, dtype=torch.uint8, device="meta"))
    assert needs_int64(small, torch.empty(2**31 + 1, dtype=torch.uint8, device="meta"))


def test_gpu_defaults(monkeypatch):
    """On CUDA the planner follows the H200 benchmark (planner._measured_first); on a machine
    without a GPU, for a pretended H200 (the heuristics read only its capability and SM count;
    _choose: nothing cached)."""
    from ndconv import planner
    from ndconv.algorithms import triton_support
    from ndconv.api import make_problem
    from ndconv.bench.suites import load_suite

    if not torch.cuda.is_available():
        assert planner.PREFERENCE["cuda"][:3] == ("depthwise", "grouped", "implicit_gemm")
        h200 = type("Properties", (), {"multi_processor_count": 132, "name": "NVIDIA H200"})()
        monkeypatch.setattr(triton_support, "_cuda_capability_ok", lambda: True)
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *device: (9, 0))
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda *device: h200)
    cases = {c.name: c for c in load_suite("public")}
    expected = {  # cudnn's graphs are never the heuristic's choice (their host cost)
        ("r50_3x3_56", "fwd"): "native", ("r50_3x3_56", "dgrad"): "native",
        ("r50_3x3_56", "wgrad"): "implicit_gemm", ("r50_3x3_14", "wgrad"): "native",
        ("conv1d_k3_80", "fwd"): "native", ("conv1d_k3s2_768", "fwd"): "native",
        ("conv3d_causal_vae", "fwd"): "implicit_gemm", ("r50_stem_7x7s2", "fwd"): "implicit_gemm",
        ("dw7x7_56", "fwd"): "depthwise", ("dw3x3_56", "fwd"): "depthwise", ("dw31x31_56", "fwd"): "toeplitz",
        ("causal_dw1d_k4", "wgrad"): "depthwise", ("grouped3x3_g32", "fwd"): "grouped",
        ("grouped3x3_g32", "dgrad"): "grouped", ("grouped3x3_g32", "wgrad"): "grouped",
        ("convT_3x3s2", "fwd"): "implicit_gemm", ("r50_1x1s2_down", "fwd"): "native",
        ("same_pad_s2", "fwd"): "native", ("unet_3x3_64", "fwd"): "implicit_gemm",
        ("vae_3x3_256", "fwd"): "native", ("convT_4x4s2", "wgrad"): "implicit_gemm",  # phases in one launch
        ("conv3d_3x3x3", "wgrad"): "implicit_gemm",  # 128 positions a step
        ("r50_1x1_56", "wgrad"): "implicit_gemm",  # pointwise, a reduction 12x its weight
        ("r50_3x3_14", "fwd"): "implicit_gemm", ("r50_3x3_28", "fwd"): "implicit_gemm",  # one wave
        ("r50_3x3_14", "dgrad"): "implicit_gemm", ("r50_1x1_56", "fwd"): "native",
    }
    for (name, pass_), algorithm in expected.items():
        p = cases[name].problem("cuda")
        q = p if pass_ == "fwd" else getattr(p, pass_)()
        assert planner._choose(q).name == algorithm, (name, pass_, planner._choose(q).reason)
    g32 = cases["grouped3x3_g32"].problem("cuda")
    assert all("rows kernel" in planner._choose(q).reason for q in (g32, g32.dgrad(), g32.wgrad()))
    # tiny problems, where the host's time per call decides: the TMA forward's and the grouped
    # direct forward's bound launches; PyTorch's gradients (one convolution_backward for both)
    tiny = make_problem((1, 8, 8, 16), (16, 3, 3, 16), padding=1, dtype=torch.bfloat16, device="cuda")
    tiny_grouped = make_problem((1, 8, 8, 16), (16, 3, 3, 4), padding=1, groups=4, dtype=torch.bfloat16,
                                device="cuda")
    for q, algorithm in ((tiny, "implicit_gemm"), (tiny.dgrad(), "native"), (tiny.wgrad(), "native"),
                         (tiny_grouped, "grouped"), (tiny_grouped.dgrad(), "native"),
                         (tiny_grouped.wgrad(), "native")):
        assert planner._choose(q).name == algorithm, (q, planner._choose(q).reason)
    assert planner._choose(tiny_grouped).config.kernel == "rows" and grouped.host_bound(tiny_grouped)
    assert all(planner._choose(q).reason.startswith("host-bound") for q in (tiny, tiny_grouped))
    batch_one = cases["grouped3x3_g32"].problem("cuda")  # at batch 1 too: 0.4 us at its floor
    batch_one = replace(batch_one, x_shape=(1, *batch_one.x_shape[1:]))
    assert (grouped.host_bound(batch_one)
            and not grouped.host_bound(replace(batch_one, x_shape=(8, 56, 56, 128))))
    # small groups' weight gradients outside the rows kernel (tools/grouped_planner.py): PyTorch's
    # grouped convolution, but implicit_gemm's where the groups' lanes would be padded (24 wide)
    def regnet(x_shape, groups):
        C = x_shape[-1]
        return make_problem(x_shape, (C, 3, 3, C // groups), padding=1, groups=groups, dtype=torch.bfloat16,
                            device="cuda")

    for x_shape, groups, algorithm, kernel in (
            ((64, 28, 28, 168), 7, "implicit_gemm", None), ((64, 7, 7, 912), 38, "implicit_gemm", None),
            ((64, 28, 28, 128), 8, "native", None), ((64, 56, 56, 32), 2, "grouped", "rows"),
            ((64, 14, 14, 208), 26, "grouped", "rows"), ((64, 28, 28, 104), 13, "grouped", "rows")):
        chosen = planner._choose(regnet(x_shape, groups).wgrad())
        assert (chosen.name, getattr(chosen.config, "kernel", None)) == (algorithm, kernel), (
            x_shape, chosen.reason)
    # depthwise weight gradients: PyTorch's, but strided 3x3 ones (PyTorch's 1.02-1.15x slower), strided
    # 5x5 ones over 14-28 rows (cuDNN's 10x slower), 3-D ones (7-12x slower) and, on the walking
    # kernel, stride-1 ones of 25-49 taps whose output rows fit one chunk (depthwise.walk_wins)
    depthwise_cases = {c.name: c for c in load_suite("depthwise")}
    for name, algorithm, walk in (
            ("effb0_dw5x5s2_14_c672", "depthwise", False), ("effb0_dw5x5s2_56_c144", "native", False),
            ("mbv2_dw3x3s2_28_c192", "depthwise", False), ("mbv2_dw3x3s2_112_c96", "depthwise", False),
            ("mbv2_dw3x3_14_c576", "native", False), ("mnv3_dw5x5s2_56_c72", "native", False),
            ("effb0_dw5x5_14_c672", "depthwise", True), ("convnext_dw7x7_14_c384", "depthwise", True),
            ("convnext_dw7x7_7_c768", "depthwise", True), ("convnext_dw7x7_28_c192", "native", False),
            ("x3d_dw3x3x3_14_c216", "depthwise", True), ("x3d_dw3x3x3_7_c432", "depthwise", True),
            ("x3d_dw3x3x3_28_c108", "depthwise", False), ("x3d_dw3x3x3s2_14_c432", "depthwise", False),
            ("x3d_dw3x3x3s2_112_c54", "depthwise", False)):
        chosen = planner._choose(depthwise_cases[name].problem("cuda").wgrad())
        assert (chosen.name, getattr(chosen.config, "walk", False)) == (algorithm, walk), name
    narrow_rows = regnet((64, 7, 7, 912), 38)  # 7-wide rows, 24-wide groups: the rows kernel
    assert all(planner._choose(q).config.kernel == "rows" for q in (narrow_rows, narrow_rows.dgrad()))
    # strided weight gradients: PyTorch's with symmetric padding (native._high_padding), though the
    # TMA kernel takes them too (1x1: over a strided view of x, 43 against 50 us at 56x56)
    shortcut = cases["r50_1x1s2_down"].problem("cuda").wgrad()
    assert planner._choose(shortcut).name == "native" and implicit_gemm.tma_route(shortcut) == (
        " in 1 stride-1 phase over views of the operands")
    # "SAME" padding on an even side pads a copy in PyTorch: the gather kernel (an odd side's
    # unread high pad is dropped: same_pad_s2 above is PyTorch's plain convolution)
    even = make_problem((8, 56, 56, 64), (64, 3, 3, 64), stride=2, padding=([0, 0], [1, 1]),
                        dtype=torch.bfloat16, device="cuda")
    assert planner._choose(even).name == "implicit_gemm"
    # strided convolutions' input gradients: the TMA kernel's output phases over several taps
    r50_down = make_problem((64, 56, 56, 128), (128, 3, 3, 128), stride=2, padding=1, dtype=torch.bfloat16,
                            device="cuda")
    assert planner._choose(r50_down.dgrad()).name == "implicit_gemm"
    assert planner._choose(r50_down.wgrad()).name == "native"  # its phases in one launch lose to cuDNN
    assert implicit_gemm.tma_route(r50_down.wgrad()) == (
        " in 4 stride-1 phases over views of the operands, in one launch")
    assert planner._choose(cases["r50_1x1s2_down"].problem("cuda").dgrad()).name == "native"


def _recording(tma_runner, taken):
    """tma_runner whose runners append what they return (False: the tensors were refused)."""
    def runner_of(p):
        def run(*args):
            taken.append(tma_runner(p)(*args))
            return taken[-1]
        return run
    return runner_of


@pytest.mark.parametrize("case", testing.CASES, ids=lambda c: c.name)
def test_shared_cases_on_the_tma_path_the_gpu_takes(case, monkeypatch):
    """The shared tiny cases in float32 with TF32 allowed (the GPU's default), every pass the
    TMA path takes, with the GPU's default tiles, against the reference. A CPU's defaults take
    the gather kernel (and its float32 no TF32), so without this CI would not reach these
    paths: an input gradient's fold once raised a view error only on the H200. Where the
    operands break TMA's rules (a 12-byte weight row), the gather kernel runs, as on the GPU."""
    p = replace(case.problem(dtype=torch.float32, device=DEVICE), allow_tf32=True)
    for q in (p, p.dgrad(), p.wgrad()):
        q = replace(q, allow_tf32=True)
        if not implicit_gemm.supports(q)[0] or implicit_gemm.tma_reason(q) is not None:
            continue
        config = implicit_gemm.tma_wgrad_config(q) if q.pass_ == "wgrad" else implicit_gemm.tma_config(q)
        taken = []
        with monkeypatch.context() as m:
            m.setattr(implicit_gemm, "tma_runner", _recording(implicit_gemm.tma_runner, taken))
            report = testing.check("implicit_gemm", q, seed=3, config=config)
        assert len(taken) == 1 and report.ok, (q, config, taken, report)  # tried (False: its tensors refused)


def test_phases_of_an_input_dilated_problem():
    """dgrad of a stride-2, dilation-2 conv: odd outputs see no tap (they are zero) and even
    outputs read every tap; the table holds only the phases with taps."""
    p = next(c for c in testing.CASES if c.name == "1d_s2_kdil2").problem().dgrad()
    axes = tuple(zip((1, 1, *p.out_spatial), (1, 1, *p.kernel), (1, 1, *p.stride), (1, 1, *p.kernel_dilation),
                     (1, 1, *p.input_dilation), (0, 0, *p.padding_lo)))
    table, rows, empty = implicit_gemm._phases(axes, "cpu")
    assert empty == ((2, 1),)
    assert table.tolist() == [[0, 1, 0, 0, 1, 0, 1, 0, 0, 1, 0, 7, -1, 0, 3]]  # r, count, base, t0, taps
    assert rows == 7


# ---------------------------------------------------------------------------- the TMA path
# The same kernel runs on the H200 and in Triton's interpreter (host-side tensor descriptors;
# the interpreter zero-fills a box's out-of-bounds elements as TMA does, negative coordinates too).

TMA_CASES = [  # (x, w, conv_general arguments): tiny, channel rows of 16 bytes at least
    pytest.param((2, 5, 7, 16), (8, 3, 3, 16), dict(padding=1), id="2d_3x3"),
    pytest.param((2, 6, 7, 8), (16, 3, 2, 8), dict(padding=([2, 0], [0, 3])), id="2d_asym_pad"),
    pytest.param((1, 9, 8, 16), (8, 3, 3, 16), dict(padding=([-1, 2], [1, -2])), id="2d_crop"),
    pytest.param((2, 7, 6, 16), (8, 3, 3, 16), dict(kernel_dilation=(2, 1), padding=2, flip=True),
                 id="2d_kdil_flip"),
    pytest.param((2, 5, 5, 32), (32, 3, 3, 16), dict(padding=1, groups=2), id="2d_groups"),
    pytest.param((2, 5, 6, 24), (20, 1, 1, 24), dict(), id="2d_1x1_gemm"),
    pytest.param((2, 13, 16), (8, 3, 16), dict(padding=([2], [0]), kernel_dilation=2), id="1d_causal_kdil"),
    pytest.param((1, 4, 5, 4, 8), (8, 3, 3, 3, 8), dict(padding=([2, 1, 1], [0, 1, 1])), id="3d_causal"),
]
def test_stems_over_pairs_of_outputs_where_the_reduction_stays():
    from ndconv.api import make_problem

    def pairs(x, w, dtype=torch.bfloat16, **args):
        return implicit_gemm._output_pairs(make_problem(x, w, dtype=dtype, device="cpu", **args))

    stem = make_problem((64, 224, 224, 3), (64, 7, 7, 3), dtype=torch.bfloat16, device="cpu",
                        stride=2, padding=3)
    r = implicit_gemm._output_pairs(stem)  # windows of 5 blocks of 12 channels, 60 of 64, every 24 elements
    assert (r.x_shape == (64, 115, 56, 64) and r.w_shape == (128, 4, 1, 64)
            and r.out_shape == (64, 112, 56, 128))
    assert implicit_gemm.tma_route(stem) == (
        " over a space-to-depth copy of the input, pairs of outputs along the last axis as one row")
    assert implicit_gemm._space_to_depth_copies(stem, True) == (  # two weight copies, one block apart
        ((115, 116), (2, 2), (3, 3), 3), ((4, 16), (2, 2), (0, 0), 3, 2, 2))  # rows of 384 bytes: whole lines
    assert pairs((2, 17, 20, 3), (8, 7, 7, 3), stride=2, padding=3) is not None  # SPACE_TO_DEPTH_CASES' pairs
    assert pairs((2, 32, 32, 1), (8, 7, 7, 1), stride=2, padding=3).w_shape == (16, 4, 1, 32)  # 20 of 32
    assert pairs((64, 224, 224, 3), (64, 7, 7, 3), torch.float32, stride=2, padding=3) is None  # 64 > 4 x 12
    assert pairs((2, 32, 32, 3), (8, 3, 3, 3), stride=2, padding=1) is None  # 3 blocks of 12 (64) > 2 x 16
    assert pairs((2, 32, 32, 4), (8, 7, 7, 4), stride=2, padding=3) is None  # 5 x 16 (128) > 4 x 16
    assert pairs((2, 32, 29, 3), (8, 7, 7, 3), stride=2, padding=3) is None  # 15 outputs wide: no pairs
    assert pairs((2, 32, 31, 3), (8, 7, 7, 3), stride=2, padding=3).out_shape == (2, 16, 8, 16)


TMA_CONFIGS = (Config(32, 16, 16, 4, 2, tma=True, tma_store=True),
               Config(16, 32, 16, 4, 3, tma=True, box_h=2, box_w=4))


def _problem_for_tma(x_shape, w_shape, args, dtype, pass_="fwd"):
    from ndconv.api import make_problem

    p = make_problem(x_shape, w_shape, dtype=dtype, device=DEVICE, **args)
    p = p if pass_ == "fwd" else p.dgrad()
    if dtype == torch.float32:  # the TMA path feeds tensor cores: fp32 as TF32 (exact in the interpreter)
        p = replace(p, allow_tf32=True)
    return p


def _check_tma(p, config, monkeypatch, path="_run_tma", seed=7, taken=True):
    """``p`` with ``config`` against the reference, and that ``path`` (the TMA path's runner
    for the kind of problem) took it (or, ``taken=False``, refused it for the gather kernel)."""
    launched = []
    real = getattr(implicit_gemm, path)
    monkeypatch.setattr(implicit_gemm, path, lambda *a: launched.append(real(*a)) or launched[-1])
    report = testing.check("implicit_gemm", p, seed=seed, config=config)
    assert launched == [taken], f"{path} {'did not run' if taken else 'ran'} {p} with {config}"
    assert report.ok, f"{config} on {p}: {report}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("x_shape,w_shape,args", TMA_CASES)
def test_tma_path_matches_reference(x_shape, w_shape, args, dtype, monkeypatch):
    p = _problem_for_tma(x_shape, w_shape, args, dtype)
    assert implicit_gemm.tma_reason(p) is None
    for config in TMA_CONFIGS:
        _check_tma(p, config, monkeypatch)


@pytest.mark.parametrize("x_shape,w_shape,args", TMA_CASES[:5])
def test_tma_path_input_gradient(x_shape, w_shape, args, monkeypatch):
    """The input gradient of a stride-1 convolution is one too (its weight view is copied to
    give TMA unit-stride channels)."""
    p = _problem_for_tma(x_shape, w_shape, args, torch.bfloat16, "dgrad")
    _check_tma(p, TMA_CONFIGS[0], monkeypatch)


ROWS_CASES = [  # GEMMs over rows: ragged rows, channels not multiples of a step or tile
    pytest.param((2, 5, 6, 24), (20, 1, 1, 24), {}, id="1x1_2d"),
    pytest.param((3, 37, 40), (72, 1, 40), {}, id="1x1_1d"),
    pytest.param((1, 3, 4, 5, 16), (8, 1, 1, 1, 16), {}, id="1x1_3d"),
    pytest.param((2, 30, 32), (24, 3, 32), dict(stride=2, padding=1), id="k3s2"),
    pytest.param((3, 27, 16), (40, 4, 16), dict(stride=3, padding=([4], [2]), flip=True), id="k4s3_flip"),
    pytest.param((2, 33, 40), (16, 3, 40), dict(padding=([3], [-2]), kernel_dilation=2), id="k3_dil_crop"),
    pytest.param((2, 20, 32), (16, 5, 32), dict(stride=2, padding=([-3], [1])), id="k5s2_crop_lo"),
    pytest.param((1, 9, 48), (8, 2, 48), dict(padding=([1], [0])), id="causal_k2"),
    pytest.param((3, 7, 3, 16), (8, 1, 1, 16), dict(stride=(1, 1)), id="1x1_short_rows"),
    pytest.param((5, 4, 48), (24, 3, 48), dict(stride=2, padding=1), id="short_samples"),
    pytest.param((2, 12, 16), (8, 1, 16), dict(stride=3), id="1x1s3_1d"),
]
ROWS_CONFIGS = (Config(32, 16, 16, 4, 2, tma=True, rows=True),
                Config(16, 32, 32, 4, 3, tma=True, rows=True))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("x_shape,w_shape,args", ROWS_CASES)
def test_rows_kernel_matches_reference(x_shape, w_shape, args, dtype, monkeypatch):
    """1x1 stride-1 forwards as one GEMM and 1-D ones as a GEMM per sample with a shifted box
    of rows per tap (rows_fwd_kernel), through run and a prepared call."""
    p = _problem_for_tma(x_shape, w_shape, args, dtype)
    assert implicit_gemm.rows_gemm(p)
    launches = []
    real = implicit_gemm._rows_launch
    monkeypatch.setattr(implicit_gemm, "_rows_launch", lambda *a: launches.append(real(*a)) or launches[-1])
    for config in ROWS_CONFIGS:
        if p.stride[0] > 1 and p.in_channels % config.block_k:
            config = replace(config, block_k=implicit_gemm._rows_block_k(p))
        _check_tma(p, config, monkeypatch, "_run_rows")
        assert launches and launches[-1] is not None, f"rows_fwd_kernel did not run {p} with {config}"
        call = implicit_gemm.prepare(p, config)
        for seed in (1, 2):
            a, b = testing.random_operands(p, seed)
            testing.assert_close(call(a, b), testing.reference_result(p, a, b), testing.tolerance(p))


def test_rows_launch_refuses_what_it_cannot_read(monkeypatch):
    """A strided 1-D problem whose rows are not contiguous, or whose channels a step would
    straddle, is refused (nothing launched) and run falls back to the gather kernel."""
    p = _problem_for_tma((2, 30, 32), (24, 3, 32), dict(stride=2, padding=1), torch.bfloat16)
    x, w = testing.random_operands(p, 3)
    out = torch.empty(p.result_shape, dtype=p.dtype, device=DEVICE)
    strided = torch.zeros((2, 30, 64), dtype=p.dtype, device=DEVICE)[..., :32]
    strided.copy_(x)
    views = p.views(strided, w, out)
    assert implicit_gemm._rows_launch(p, *views, ROWS_CONFIGS[1]) is None  # rows 64 apart, 32 channels
    assert implicit_gemm._rows_launch(p, *p.views(x, w, out), replace(ROWS_CONFIGS[1], block_k=64)) is None
    implicit_gemm.run(p, *views, ROWS_CONFIGS[1])
    testing.assert_close(out, testing.reference_result(p, strided, w), testing.tolerance(p))


def test_rows_gemm_is_only_what_its_kernel_reads():
    from ndconv.api import make_problem

    def rows(x, w, dtype=torch.bfloat16, **args):
        return implicit_gemm.rows_gemm(make_problem(x, w, dtype=dtype, device="cpu", **args))

    assert rows((2, 5, 6, 24), (20, 1, 1, 24))
    assert rows((16, 3000, 768), (768, 3, 768), stride=2, padding=1)  # conv1d_k3s2_768
    assert rows((16, 3000, 80), (768, 3, 80), padding=1)  # conv1d_k3_80
    assert not rows((2, 5, 6, 24), (20, 1, 1, 24), dtype=torch.float32)  # TF32: the convolution kernel
    assert not rows((64, 56, 56, 256), (512, 1, 1, 256), stride=2)  # r50_1x1s2_down: rows 2 apart in a row
    assert rows((2, 12, 16), (8, 1, 16), stride=3)  # 1-D: strided rows folded into one
    assert not rows((2, 5, 6, 24), (20, 1, 1, 24), padding=1)
    assert not rows((2, 5, 6, 24), (20, 3, 3, 24), padding=1)
    assert not rows((2, 5, 6, 24), (20, 1, 1, 24), input_dilation=2)
    assert not rows((2, 5, 6, 24), (24, 1, 1, 12), groups=2)
    assert not rows((2, 9, 32), (16, 3, 32), stride=2)  # the stride does not divide the length
    assert not rows((2, 10, 24), (16, 3, 24), stride=2)  # 24 channels: no whole steps of 16
    assert not rows((2, 10, 12), (16, 3, 12))  # 24-byte rows
    assert not rows((2, 10, 32), (16, 3, 32), input_dilation=2)
    assert not implicit_gemm.rows_gemm(
        make_problem((2, 5, 6, 24), (20, 1, 1, 24), dtype=torch.bfloat16, device="cpu").dgrad())


TMA_WGRAD_CASES = [  # output sides with power-of-two factors, so that exact boxes exist
    pytest.param((2, 4, 8, 16), (16, 3, 3, 16), dict(padding=1), id="2d_3x3"),
    pytest.param((4, 6, 6, 8), (16, 3, 3, 8), dict(padding=([2, 0], [0, 2])), id="2d_asym_pad"),
    pytest.param((1, 10, 10, 16), (8, 3, 3, 16), dict(padding=([-1, 2], [1, -2])), id="2d_crop"),
    pytest.param((2, 7, 6, 16), (8, 3, 3, 16), dict(kernel_dilation=(2, 1), padding=2, flip=True),
                 id="2d_kdil_flip"),
    pytest.param((2, 4, 4, 32), (32, 3, 3, 16), dict(padding=1, groups=2), id="2d_groups"),
    pytest.param((2, 4, 6, 24), (32, 1, 1, 24), dict(), id="2d_1x1_gemm"),
    pytest.param((2, 16, 16), (8, 3, 16), dict(padding=([4], [0]), kernel_dilation=2), id="1d_causal_kdil"),
    pytest.param((1, 4, 4, 4, 8), (8, 3, 3, 3, 8), dict(padding=([2, 1, 1], [0, 1, 1])), id="3d_causal"),
]
TMA_WGRAD_CONFIGS = (Config(16, 16, 16, 4, 2, tma=True), Config(32, 16, 32, 4, 3, split_k=3, tma=True),
                     # a ragged last chunk when K3 is odd
                     Config(16, 16, 16, 4, 2, split_k=2, tma=True, taps=2),
                     Config(16, 16, 16, 4, 3, tma=True, taps=3))  # the defaults' 3 taps (2-D and 3-D)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("x_shape,w_shape,args", TMA_WGRAD_CASES)
def test_tma_weight_gradient_matches_reference(x_shape, w_shape, args, dtype, monkeypatch):
    """The TMA weight-gradient kernel, unsplit and split-K, always through float32 partial sums
    (its 16-bit stores straight into dw were intermittently wrong on the H200)."""
    from ndconv.api import make_problem

    p = make_problem(x_shape, w_shape, dtype=dtype, device=DEVICE, **args).wgrad()
    assert implicit_gemm.tma_reason(p) is None
    for config in TMA_WGRAD_CONFIGS:
        _check_tma(p, config, monkeypatch, "_run_tma_wgrad", seed=5)
        a, b = testing.random_operands(p, 1)
        out = torch.empty(p.result_shape, dtype=p.dtype, device=a.device)
        target = implicit_gemm._tma_wgrad_launch(p, *p.views(a, b, out), config)[-1]
        assert target.dtype == torch.float32 and target.dim() == p.ndim + 4, config  # [split, G, Og, *K, Cg]


@pytest.mark.parametrize("x_shape,w_shape,args", [TMA_WGRAD_CASES[i] for i in (0, 4, 5, 7)])
def test_prepared_weight_gradient_binds_the_launch(x_shape, w_shape, args, monkeypatch):
    """A stride-1 weight gradient's prepared call (its TMA launch bound once), unsplit and
    split-K: after its first call no launch is built again, and it
    computes exactly what run computes, call after call on fresh operands (an unaligned one too)."""
    from ndconv.api import make_problem

    p = make_problem(x_shape, w_shape, dtype=torch.bfloat16, device=DEVICE, **args).wgrad()
    _check_prepared_weight_gradient(p, "_tma_wgrad_launch", monkeypatch)


def _check_prepared_weight_gradient(p, launcher: str, monkeypatch):
    """``p``'s prepared call per config: equal to run's result bitwise (the same sums, rounded
    once, on the GPU too) and to the reference; no launch built (``launcher``) after its first
    call; an unaligned operand through run."""
    for config in TMA_WGRAD_CONFIGS[:2]:
        call = implicit_gemm.prepare(p, config)
        assert call is not None
        a, b = testing.random_operands(p, 1)
        got, ran = call(a, b), torch.empty(p.result_shape, dtype=p.dtype, device=a.device)
        implicit_gemm.run(p, *p.views(a, b, ran), config)
        assert torch.equal(got, ran), config
        testing.assert_close(got, testing.reference_result(p, a, b), testing.tolerance(p), str(config))
        with monkeypatch.context() as m:
            m.setattr(implicit_gemm, launcher, lambda *args: pytest.fail("a launch was built per call"))
            a, b = testing.random_operands(p, 2)
            testing.assert_close(call(a, b), testing.reference_result(p, a, b), testing.tolerance(p),
                                 str(config))
        shifted = torch.empty(a.numel() + 1, dtype=a.dtype, device=a.device)[1:].view(a.shape)
        shifted.copy_(a)
        testing.assert_close(call(shifted, b), testing.reference_result(p, a, b), testing.tolerance(p))


def test_tma_weight_gradient_refusals(monkeypatch):
    """What the TMA weight gradient does not take goes to the gather kernel, still correct:
    fp32 (TF32 wgmma needs K-major operands), 40-byte channel rows, outputs with no exact box,
    channel blocks wider than 128 (wrong on the H200)."""
    from ndconv.api import make_problem

    def wgrad(x, w, dtype=torch.bfloat16, **args):
        return make_problem(x, w, dtype=dtype, device=DEVICE, **args).wgrad()

    fp32 = wgrad((1, 8, 8, 16), (8, 3, 3, 16), dtype=torch.float32)
    assert "K-major" in implicit_gemm.tma_reason(replace(fp32, allow_tf32=True))
    assert "O/groups = 20" in implicit_gemm.tma_reason(wgrad((2, 4, 6, 24), (20, 1, 1, 24)))
    both = wgrad((1, 8, 8, 16), (8, 3, 3, 16), stride=2, input_dilation=(2, 1))
    assert "both strided and input-dilated" in implicit_gemm.tma_reason(both)
    p = wgrad((2, 5, 7, 16), (8, 3, 3, 16), padding=1)  # 5 x 7 outputs, batch 2: no exact box of 16
    assert implicit_gemm.tma_reason(p) is None
    _check_tma(p, TMA_WGRAD_CONFIGS[0], monkeypatch, "_run_tma_wgrad", seed=2, taken=False)
    wide = wgrad((1, 4, 4, 256), (16, 1, 1, 256))
    assert implicit_gemm.tma_reason(wide) is None
    _check_tma(wide, Config(16, 256, 16, 4, 2, tma=True), monkeypatch, "_run_tma_wgrad", seed=3, taken=False)


TMA_WGRAD_PHASE_CASES = [  # strided and input-dilated weight gradients: stride-1 phases over views
    # (x, w, args, phases, TMA by default, 2-D phases in one launch)
    pytest.param((2, 8, 8, 16), (16, 3, 3, 16), dict(stride=2, padding=1), 4, True, True, id="2d_3x3s2"),
    pytest.param((2, 7, 8, 16), (16, 3, 3, 16), dict(stride=2, padding=1), 4, False, False,
                 id="2d_3x3s2_odd_side"),  # x's rows do not divide into phases: one launch per phase
    pytest.param((2, 4, 4, 16), (16, 4, 4, 16), dict(input_dilation=2, padding=2, flip=True), 4, True, True,
                 id="2d_convT_4x4s2"),
    pytest.param((2, 4, 6, 16), (16, 3, 3, 16), dict(input_dilation=2, padding=([1, 1], [2, 2]), flip=True),
                 4, True, True, id="2d_convT_3x3s2"),  # phases of 1 and 2 taps per axis
    pytest.param((2, 6, 8, 16), (8, 3, 3, 16), dict(stride=(1, 2), padding=([1, 0], [1, 1])), 2, True, True,
                 id="stride_1x2"),
    pytest.param((2, 8, 8, 32), (16, 3, 3, 16), dict(stride=2, padding=1, groups=2), 4, False, False,
                 id="2d_3x3s2_groups"),
    pytest.param((2, 8, 8, 16), (16, 1, 1, 16), dict(stride=2), 1, True, True, id="1x1s2"),
    pytest.param((2, 16, 16), (8, 3, 16), dict(stride=2, kernel_dilation=2, padding=2), 1, True, False,
                 id="1d_kdil_stride_one_phase"),
    pytest.param((2, 8, 16), (8, 5, 16), dict(input_dilation=2, kernel_dilation=3, padding=([3], [2])), 2,
                 True, False, id="1d_idil2_kdil3"),
    pytest.param((2, 8, 32), (16, 3, 16), dict(input_dilation=3, padding=([2], [0]), groups=2), 3,
                 True, False, id="1d_idil3_groups"),
    pytest.param((16, 2, 16), (8, 4, 16), dict(input_dilation=3, padding=([0], [0])), 3, True, False,
                 id="1d_idil_phase_without_outputs"),
]


@pytest.mark.parametrize("x_shape,w_shape,args,phases,default,together", TMA_WGRAD_PHASE_CASES)
def test_tma_weight_gradient_of_strided_and_transposed_convolutions(x_shape, w_shape, args, phases, default,
                                                                    together, monkeypatch):
    """Split into stride-1 weight gradients over views of x, dy and dw (one per phase; taps
    that no product reaches are zeroed), each run by the TMA kernel where its views allow; 2-D
    ungrouped ones whose phased operand's sides divide by the periods in one launch. By
    default only where that was measured to pay: strided ones of more than 2 phases that do
    not run in one launch take the gather kernel (a TMA config still runs them in phases)."""
    from ndconv.api import make_problem

    p = make_problem(x_shape, w_shape, dtype=torch.bfloat16, device=DEVICE, **args).wgrad()
    assert (implicit_gemm.tma_reason(p) is None) == default, implicit_gemm.tma_reason(p)
    assert implicit_gemm.tma_runner(p) is implicit_gemm._run_tma_wgrad_phases
    assert len(implicit_gemm._wgrad_phases(p)) == phases
    taps = sorted(t for ph in implicit_gemm._wgrad_phases(p)
                  for t in itertools.product(*(range(a, a + s * n, s) for a, s, n in ph.taps)))
    assert taps == sorted(itertools.product(*(range(k) for k in p.out_spatial)))  # each tap once
    per_phase, one_launch = [], []
    real_phase, real_together = implicit_gemm._run_tma_wgrad, implicit_gemm._phased_wgrad_launch

    def run_phase(q, x, dy, dw, config, partial=None):
        per_phase.append((real_phase(q, x, dy, dw, config, partial), partial is not None))
        return per_phase[-1][0]

    def run_together(*args):
        one_launch.append(real_together(*args))
        return one_launch[-1]

    monkeypatch.setattr(implicit_gemm, "_run_tma_wgrad", run_phase)
    monkeypatch.setattr(implicit_gemm, "_phased_wgrad_launch", run_together)
    on_tma = []
    for config in TMA_WGRAD_CONFIGS:
        per_phase.clear()
        one_launch.clear()
        report = testing.check("implicit_gemm", p, seed=11, config=config)
        assert report.ok, f"{config} on {p}: {report}"
        assert (len(one_launch) == 1 and one_launch[0] is not None) == together, config
        if together:
            assert not per_phase
        else:  # one workspace of partial sums for all phases
            assert all(shared for _, shared in per_phase), (config, per_phase)
        on_tma += [ran for ran, _ in per_phase] + [launch is not None for launch in one_launch]
    assert any(on_tma), "no phase ran on the TMA kernel"


@pytest.mark.parametrize("x_shape,w_shape,args", [case.values[:3] for case in TMA_WGRAD_PHASE_CASES
                                                  if case.id in ("2d_3x3s2", "2d_convT_3x3s2", "1x1s2")])
def test_prepared_phased_weight_gradient_binds_the_launch(x_shape, w_shape, args, monkeypatch):
    """A weight gradient whose phases run in one launch has a prepared call (the launch bound
    once): equal to run's result bitwise, no launch built after its first call, an unaligned
    operand through run; phases in several launches have none."""
    from ndconv.api import make_problem

    p = make_problem(x_shape, w_shape, dtype=torch.bfloat16, device=DEVICE, **args).wgrad()
    _check_prepared_weight_gradient(p, "_phased_wgrad_launch", monkeypatch)
    odd = make_problem((2, 7, 8, 16), (16, 3, 3, 16), dtype=torch.bfloat16, device=DEVICE,
                       stride=2, padding=1)
    assert implicit_gemm.prepare(odd.wgrad(), TMA_WGRAD_CONFIGS[0]) is None


def test_tma_weight_gradient_defaults_one_tap_a_program_and_long_steps_for_small_tiles():
    """Weight gradients default to one tap per program (sharing dy across 3 taps measured slower
    on the H200 since the thirty-third session; it stays an autotuning candidate), 64 x 64 tiles
    with 128 positions a step, 128 x 128 ones with 64; pointwise ones in 64 x 64 tiles and 6
    stages (faster on all of ResNet-50's 1x1 layers)."""
    from ndconv.api import make_problem

    def config(x, w, **args):
        return implicit_gemm.tma_wgrad_config(
            make_problem(x, w, dtype=torch.bfloat16, device="cpu", **args).wgrad())

    assert config((64, 56, 56, 64), (64, 3, 3, 64), padding=1) == Config(64, 64, 128, 4, 4, tma=True)
    assert config((8, 16, 56, 56, 64), (64, 3, 3, 3, 64), padding=1) == Config(64, 64, 128, 4, 4, tma=True)
    assert config((64, 14, 14, 256), (256, 3, 3, 256), padding=1) == Config(128, 128, 64, 8, 4, tma=True)
    assert config((64, 28, 28, 512), (128, 1, 1, 512)) == Config(64, 64, 64, 4, 6, tma=True)  # pointwise
    shared = [c for c in implicit_gemm.tma_wgrad_configs(make_problem(
        (64, 56, 56, 64), (64, 3, 3, 64), padding=1, dtype=torch.bfloat16, device="cpu").wgrad())
        if c.taps == 3]
    assert shared  # still tried by autotuning


def test_exact_boxes_divide_the_output():
    assert implicit_gemm._exact_box((1, 56, 56), 64) == (1, 1, 8, 8)
    assert implicit_gemm._exact_box((1, 14, 14), 64) == (16, 1, 2, 2)
    assert implicit_gemm._exact_box((16, 56, 56), 128) == (1, 2, 8, 8)
    assert implicit_gemm._exact_box((1, 1, 3000), 64) == (8, 1, 1, 8)
    assert implicit_gemm._exact_box((1, 7, 7), 64) == (64, 1, 1, 1)


TMA_PHASE_CASES = [  # input-dilated forwards (transposed convolutions): one TMA grid row per output phase
    pytest.param((2, 4, 5, 16), (8, 3, 3, 16), dict(input_dilation=2, padding=([1, 1], [2, 2]), flip=True),
                 id="convT_3x3s2"),
    pytest.param((2, 4, 4, 16), (16, 4, 4, 16), dict(input_dilation=2, padding=2, flip=True),
                 id="convT_4x4s2"),
    pytest.param((1, 5, 5, 16), (8, 3, 3, 16), dict(input_dilation=2, kernel_dilation=3, padding=2),
                 id="idil2_kdil3"),
    pytest.param((2, 7, 16), (8, 3, 16), dict(input_dilation=3, padding=([0], [1])), id="1d_idil3"),
]
TMA_STRIDED_CASES = [  # strided forwards, whose input gradients are input-dilated and take TMA
    pytest.param((2, 9, 8, 16), (8, 3, 3, 16), dict(stride=2, padding=1), id="3x3s2"),
    pytest.param((2, 8, 8, 16), (16, 2, 2, 16), dict(stride=2), id="2x2s2"),
    pytest.param((2, 11, 16), (8, 4, 16), dict(stride=3, padding=([1], [2])), id="1d_s3"),
    pytest.param((2, 8, 8, 16), (16, 1, 1, 16), dict(stride=2), id="1x1s2_zero_phases"),  # 3 of 4 phases zero
    pytest.param((2, 9, 8, 16), (8, 1, 3, 16), dict(stride=(3, 2), padding=([0, 1], [1, 1])),
                 id="1x3_zero_rows"),
]


@pytest.mark.parametrize("x_shape,w_shape,args", TMA_PHASE_CASES)
def test_tma_path_over_output_phases(x_shape, w_shape, args, monkeypatch):
    p = _problem_for_tma(x_shape, w_shape, args, torch.bfloat16)
    assert implicit_gemm.tma_reason(p) is None
    for config in TMA_CONFIGS:
        _check_tma(p, config, monkeypatch)


@pytest.mark.parametrize("x_shape,w_shape,args", TMA_STRIDED_CASES)
def test_tma_path_input_gradient_of_strided_convolutions(x_shape, w_shape, args, monkeypatch):
    p = _problem_for_tma(x_shape, w_shape, args, torch.float16, "dgrad")
    assert implicit_gemm.tma_reason(p) is None
    _check_tma(p, TMA_CONFIGS[1], monkeypatch)


@pytest.mark.parametrize("x_shape,w_shape,args", TMA_CASES + TMA_PHASE_CASES)
def test_tma_path_persistent(x_shape, w_shape, args, monkeypatch):
    """Programs looping over the tiles (Config.persistent; here two programs for all of them)
    compute what one program per tile does."""
    monkeypatch.setattr(implicit_gemm, "sm_count", lambda device: 1)
    p = _problem_for_tma(x_shape, w_shape, args, torch.bfloat16)
    for config in TMA_CONFIGS:
        _check_tma(p, replace(config, persistent=2), monkeypatch)


@pytest.mark.parametrize("groups", [1, 2])
def test_tma_input_gradient_reads_the_forward_weight_transposed(groups, monkeypatch):
    """The input gradient's weight is the forward's with O and C swapped: its boxes are read
    from the forward's weight as [C, O] and transposed in the kernel (W_T), with no copy, so its
    launch binds once (prepare)."""
    from ndconv.algorithms.triton_support import meta_views

    p = _problem_for_tma((2, 5, 7, 64), (32, 3, 3, 64 // groups), dict(padding=1, groups=groups),
                         torch.bfloat16, "dgrad")
    (_, _, meta), _ = implicit_gemm._tma_launch(p, *meta_views(p), TMA_CONFIGS[0])
    assert meta["W_T"]
    _check_tma(p, TMA_CONFIGS[0], monkeypatch)
    call = implicit_gemm.prepare(p, TMA_CONFIGS[0])
    a, b = testing.random_operands(p, 3)
    testing.assert_close(call(a, b), testing.reference_result(p, a, b), testing.tolerance(p))


TMA_FOLD_CASES = [  # strided problems, folded into stride-1 ones over a free view of the input
    pytest.param((2, 12, 16), (8, 3, 16), dict(stride=2, padding=1), id="1d_k3s2"),
    pytest.param((2, 15, 8), (8, 4, 8), dict(stride=3, padding=([2], [1])), id="1d_k4s3_asym"),
    pytest.param((1, 14, 8), (8, 3, 8), dict(stride=2, padding=([-1], [0]), flip=True), id="1d_crop_flip"),
    pytest.param((2, 8, 8, 16), (16, 1, 1, 16), dict(stride=2), id="1x1s2_steps"),
    pytest.param((2, 9, 9, 16), (16, 1, 1, 16), dict(stride=2, padding=([-1, 0], [0, 0])),
                 id="1x1s2_cropped"),
    pytest.param((2, 6, 8, 16), (8, 3, 3, 16), dict(stride=(1, 2), padding=1), id="stride_1x2"),
    pytest.param((1, 3, 4, 8, 8), (8, 3, 3, 3, 8), dict(stride=(1, 1, 2), padding=1),
                 id="3d_last_axis_strided"),
    pytest.param((2, 16, 16), (8, 3, 16), dict(stride=4, padding=([0], [1])), id="1d_k3s4_one_folded_tap"),
    # strided axes before the last step their rows (box side 1 along them)
    pytest.param((2, 9, 8, 16), (16, 3, 3, 16), dict(stride=2, padding=1), id="3x3s2_rows_stepped"),
    pytest.param((2, 8, 8, 16), (24, 4, 4, 16), dict(stride=2, padding=([1, 1], [2, 1])), id="4x4s2_asym"),
    pytest.param((1, 11, 6, 16), (8, 3, 1, 16), dict(stride=(3, 2), padding=([2, 0], [-1, 0]),
                                                    kernel_dilation=(2, 1), flip=True),
                 id="rows_dilated_flip"),
    pytest.param((2, 6, 9, 8, 16), (8, 3, 3, 3, 16), dict(stride=2, padding=1), id="3d_rows_stepped"),
    pytest.param((2, 7, 8, 16), (16, 1, 1, 16), dict(stride=2, padding=([1, 0], [0, 0])),
                 id="1x1s2_padded_rows"),
]


@pytest.mark.parametrize("x_shape,w_shape,args", TMA_FOLD_CASES)
def test_tma_path_folds_strided_problems(x_shape, w_shape, args, monkeypatch):
    p = _problem_for_tma(x_shape, w_shape, args, torch.bfloat16)
    assert implicit_gemm.tma_reason(p) is None, implicit_gemm.tma_reason(p)
    for config in TMA_CONFIGS:
        _check_tma(p, config, monkeypatch, "_run_folded", seed=4)


@pytest.mark.parametrize("x_shape,w_shape,args,pass_", [
    pytest.param((2, 8, 8, 16), (24, 4, 4, 16), dict(stride=2, padding=([1, 1], [2, 1])), "fwd",
                 id="4x4s2_asym"),
    pytest.param((2, 4, 4, 16), (16, 4, 4, 16), dict(input_dilation=2, padding=2, flip=True), "dgrad",
                 id="convT_dgrad"),  # a transposed convolution's input gradient: a strided forward
    pytest.param((2, 4, 5, 16), (8, 2, 2, 16), dict(input_dilation=2, padding=1, flip=True), "dgrad",
                 id="convT_2x2s2_dgrad"),  # its weight, a transposed view, copied to fold (unpadded)
    pytest.param((2, 9, 9, 16), (16, 1, 1, 16), dict(stride=2, padding=([-1, 0], [0, 0])), "fwd",
                 id="1x1s2_cropped"),  # the input's view starts past its first element; the weight as given
    pytest.param((1, 11, 6, 16), (8, 3, 1, 16), dict(stride=(3, 2), padding=([2, 0], [-1, 0]),
                                                    kernel_dilation=(2, 1), flip=True), "fwd",
                 id="rows_dilated_flip"),
])
def test_prepared_folded_call_binds_the_launch(x_shape, w_shape, args, pass_, monkeypatch):
    """A strided problem's prepared call (the launch bound once; per call only the weight's
    flip or padding) equals run's result bitwise and the reference, call after call, without
    building its operands' views again; an unaligned input takes run."""
    p = _problem_for_tma(x_shape, w_shape, args, torch.bfloat16, pass_)
    assert implicit_gemm.tma_runner(p) is implicit_gemm._run_folded
    call = implicit_gemm.prepare(p, TMA_CONFIGS[0])
    assert call is not None
    for seed in (1, 2):
        a, b = testing.random_operands(p, seed)
        ran = testing.run_algorithm("implicit_gemm", p, a, b, TMA_CONFIGS[0])
        with monkeypatch.context() as m:
            m.setattr(implicit_gemm, "_folded_operands", lambda *args: pytest.fail("views built per call"))
            got = call(a, b)
        assert torch.equal(got, ran)
        testing.assert_close(got, testing.reference_result(p, a, b), testing.tolerance(p))
    shifted = torch.empty(a.numel() + 1, dtype=a.dtype, device=a.device)[1:].view(a.shape)
    shifted.copy_(a)
    testing.assert_close(call(shifted, b), testing.reference_result(p, a, b), testing.tolerance(p))


@pytest.mark.parametrize("x_shape,w_shape,args,last_taps", [
    ((2, 12, 16), (8, 3, 16), dict(stride=2, padding=1), (16, 32)),  # first folded tap: phase 1 only
    ((2, 15, 8), (8, 4, 8), dict(stride=3, padding=([2], [1])), (8, 16)),  # last folded tap: phases 0-1
    ((2, 16, 16), (8, 3, 16), dict(stride=4), (0, 48)),  # one folded tap: phases 0-2
])
def test_folded_taps_skip_the_channels_of_zero_weights(x_shape, w_shape, args, last_taps, monkeypatch):
    """The folded kernel's outer taps reduce only over the row phases that hold weights
    (conv1d_k3s2_768: 36 steps of 64 channels, not 48); the result still matches the reference."""
    seen = []
    real = implicit_gemm._run_tma
    monkeypatch.setattr(implicit_gemm, "_run_tma", lambda *a: seen.append(a[5]) or real(*a))
    p = _problem_for_tma(x_shape, w_shape, args, torch.bfloat16)
    report = testing.check("implicit_gemm", p, seed=5, config=TMA_CONFIGS[0])
    assert seen == [last_taps] and report.ok, (seen, report)


@pytest.mark.parametrize("x_shape,w_shape,args", [
    pytest.param((2, 6, 16), (16, 4, 16), dict(input_dilation=2, padding=2, flip=True), id="1d_k4s2"),
    # kernels spanning whole strides: the folded weight is the input gradient's transposed view
    # itself, unpadded (once a view error on the GPU)
    pytest.param((2, 5, 16), (16, 3, 16), dict(input_dilation=3, padding=2, flip=True), id="1d_k3s3"),
    pytest.param((2, 4, 5, 16), (8, 2, 2, 16), dict(input_dilation=2, padding=1, flip=True), id="2x2s2"),
])
def test_tma_path_folds_the_input_gradient_of_a_transposed_convolution(x_shape, w_shape, args, monkeypatch):
    p = _problem_for_tma(x_shape, w_shape, args, torch.float16, "dgrad")
    assert all(s > 1 for s in p.stride) and implicit_gemm.tma_reason(p) is None
    _check_tma(p, TMA_CONFIGS[0], monkeypatch, "_run_folded", seed=6)


TAP_FOLD_CASES = [  # stride 1, channel counts whose taps fold into at most half the reduction steps
    pytest.param((2, 13, 40), (40, 3, 40), dict(padding=1), id="1d_k3"),
    pytest.param((2, 5, 7, 24), (24, 3, 4, 24), dict(padding=([2, 0], [1, 2]), flip=True), id="2d_asym_flip"),
    pytest.param((1, 7, 9, 24), (24, 2, 4, 24), dict(padding=([1, -1], [0, 2]), kernel_dilation=(2, 1)),
                 id="2d_crop_kdil"),
    pytest.param((2, 3, 4, 6, 24), (24, 3, 3, 4, 24), dict(padding=([2, 1, 0], [0, 1, 0])),
                 id="3d_unpadded_last"),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("x_shape,w_shape,args", TAP_FOLD_CASES)
def test_tma_path_folds_last_axis_taps_into_the_reduction(x_shape, w_shape, args, dtype, monkeypatch):
    p = _problem_for_tma(x_shape, w_shape, args, dtype)
    q = implicit_gemm._tap_fold(p)
    assert q is not None and q.kernel[-1] == 1 and q.in_channels == p.kernel[-1] * p.in_channels
    assert q.out_shape == p.out_shape
    for config in TMA_CONFIGS:
        _check_tma(p, config, monkeypatch, "_run_tap_folded", seed=8)
    _check_tma(p.dgrad(), TMA_CONFIGS[0], monkeypatch, "_run_tap_folded", seed=9)


def test_tap_fold_only_where_it_halves_the_reduction_steps():
    from ndconv.api import make_problem

    def fold(x, w, **args):
        return implicit_gemm._tap_fold(make_problem(x, w, dtype=torch.bfloat16, device="cpu", **args))

    q = fold((16, 3000, 80), (768, 3, 80), padding=1)  # conv1d_k3_80: 9 steps of 32 -> 4 of 64
    assert "rows_fwd_kernel" in implicit_gemm.tma_route(make_problem((16, 3000, 80), (768, 3, 80),
                                                                     dtype=torch.bfloat16, device="cpu",
                                                                     padding=1))  # half types
    assert q.x_shape == (16, 3000, 240) and q.w_shape == (768, 1, 240) and q.padding_lo == (0,)
    assert fold((64, 56, 56, 64), (64, 3, 3, 64), padding=1) is None  # r50_3x3_56: 3 steps per row either way
    assert fold((2, 9, 32), (16, 3, 32), padding=1) is None  # 3 steps of 32 -> 3 of 32
    # 9 steps of 16 per row -> 5 of 32: not halved
    assert fold((2, 9, 9, 48), (16, 3, 3, 48), padding=1) is None
    assert fold((2, 9, 16), (16, 3, 16), stride=2, padding=1) is None  # strided: Fold's
    assert fold((2, 9, 9, 32), (32, 3, 3, 16), padding=1, groups=2) is None


SPACE_TO_DEPTH_CASES = [  # strided, at most 4 input channels: stride-1 problems over a space-to-depth copy
    pytest.param((2, 9, 10, 3), (16, 3, 3, 3), dict(stride=2, padding=1), id="3x3s2_stem"),
    pytest.param((1, 13, 12, 3), (16, 7, 7, 3), dict(stride=2, padding=([3, 2], [3, -1]), flip=True),
                 id="7x7s2_stem_asym_flip"),  # in half precision over pairs of outputs (_output_pairs)
    pytest.param((2, 17, 20, 3), (8, 7, 7, 3), dict(stride=2, padding=3), id="7x7s2_stem_pairs"),
    pytest.param((1, 11, 9, 1), (8, 7, 7, 1), dict(stride=2, padding=3), id="7x7s2_gray_odd_width"),
    pytest.param((2, 8, 8, 3), (16, 4, 4, 3), dict(stride=4), id="patchify"),
    pytest.param((2, 11, 4), (16, 4, 4), dict(stride=2, padding=([2], [1])), id="1d_k4s2"),
    pytest.param((1, 4, 6, 5, 2), (16, 4, 4, 4, 2), dict(stride=2, padding=1), id="3d"),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("x_shape,w_shape,args", SPACE_TO_DEPTH_CASES)
def test_tma_path_runs_strided_stems_by_space_to_depth(x_shape, w_shape, args, dtype, monkeypatch):
    p = _problem_for_tma(x_shape, w_shape, args, dtype)
    assert implicit_gemm.tma_reason(p) is None, implicit_gemm.tma_reason(p)
    for config in TMA_CONFIGS:
        _check_tma(p, config, monkeypatch, "_run_space_to_depth", seed=3)


def test_calls_without_a_bound_launch_copy_no_table_to_the_device(monkeypatch):
    """A stem over its space-to-depth copy is launched afresh per call, but builds no tensor from
    host data after its first call (its output phase table, made per call, was a host-to-device
    copy and a stream sync every time, which a CUDA-graph capture refuses)."""
    p = _problem_for_tma((2, 9, 10, 3), (16, 3, 3, 3), dict(stride=2, padding=1), torch.float32)
    assert implicit_gemm.takes_space_to_depth(p)
    a, b = testing.random_operands(p, 0, device=DEVICE)
    out = torch.empty(p.result_shape, device=DEVICE, dtype=p.dtype)
    implicit_gemm.run(p, *p.views(a, b, out), TMA_CONFIGS[0])
    made, tensor = [], torch.tensor
    monkeypatch.setattr(torch, "tensor", lambda *args, **kwargs: made.append(args) or tensor(*args, **kwargs))
    out.fill_(float("nan"))
    implicit_gemm.run(p, *p.views(a, b, out), TMA_CONFIGS[0])
    monkeypatch.undo()
    assert not made, made
    testing.assert_close(out, testing.reference_result(p, a, b), testing.tolerance(p))


@pytest.mark.parametrize("shape,blocks,stride,lo,channels", [
    ((2, 9, 10, 3), (5, 6), (2, 2), (1, 2), 4),  # a stem: pads, blocks, channels 3 -> 4
    ((1, 7, 5), (4,), (2,), (-1,), 5),  # a crop on the low side, zeros past the end
    ((2, 3, 4, 6, 2), (3, 4, 9), (1, 1, 1), (0, 0, 2), 2),  # the tap fold's pad: last axis only
    ((1, 4, 5, 3, 3), (2, 3, 2), (2, 2, 2), (0, 1, 1), 4),
])
def test_padded_blocks_matches_pad_then_permute(shape, blocks, stride, lo, channels):
    x = torch.randn(shape, device=DEVICE).to(torch.bfloat16)
    D = len(blocks)
    pad = [0, channels - shape[-1]]  # F.pad's order, last dimension first; negative pads crop
    for d in reversed(range(D)):
        pad += [lo[d], blocks[d] * stride[d] - lo[d] - shape[1 + d]]
    xp = torch.nn.functional.pad(x, pad)
    expected = xp.reshape(shape[0], *(n for b, s in zip(blocks, stride) for n in (b, s)), channels)
    expected = expected.permute(0, *range(1, 2 * D, 2), *range(2, 2 * D + 1, 2), 2 * D + 1)
    got = implicit_gemm.padded_blocks(x, blocks, stride, lo, channels)
    assert torch.equal(got, expected.reshape(shape[0], *blocks, -1))


def test_padded_blocks_makes_copies_shifted_along_the_last_axis():
    """A stem's weight for pairs of outputs: copy k with its last axis's low pad grown by k * shift."""
    x = torch.randn(3, 7, 7, 3, device=DEVICE).to(torch.bfloat16)
    got = implicit_gemm.padded_blocks(x, (4, 6), (2, 2), (1, -1), 3, copies=3, shift=2)
    expected = [implicit_gemm.padded_blocks(x, (4, 6), (2, 2), (1, -1 + 2 * k), 3) for k in range(3)]
    assert got.shape == (9, 4, 6, 12) and torch.equal(got, torch.cat(expected))
    # the stem's: two copies a block apart
    got = implicit_gemm.padded_blocks(x, (4, 6), (2, 2), (1, 0), 3, copies=2, shift=2)
    expected = [implicit_gemm.padded_blocks(x, (4, 6), (2, 2), (1, 2 * k), 3) for k in range(2)]
    assert torch.equal(got, torch.cat(expected))
    assert expected[1][:, :, 1:].equal(expected[0][:, :, :-1]) and expected[1][:, :, 0].count_nonzero() == 0


def test_space_to_depth_shapes_and_refusals():
    from ndconv.api import make_problem

    def s2d(x, w, **args):
        return implicit_gemm._space_to_depth(make_problem(x, w, dtype=torch.bfloat16, device="cpu", **args))

    q = s2d((64, 224, 224, 3), (64, 7, 7, 3), stride=2, padding=3)  # r50_stem_7x7s2
    assert (q.x_shape == (64, 115, 115, 16) and q.w_shape == (64, 4, 4, 16)
            and q.out_shape == (64, 112, 112, 64))
    assert implicit_gemm._tap_fold(q).x_shape == (64, 115, 112, 64)  # then 4 row taps of 64 channels
    # ViT patches: a GEMM
    assert s2d((2, 224, 224, 3), (768, 16, 16, 3), stride=16).w_shape == (768, 1, 1, 768)
    assert implicit_gemm.tma_route(make_problem((64, 224, 224, 4), (64, 7, 7, 4), dtype=torch.bfloat16,
                                                device="cpu", stride=2, padding=3)) == (  # RGBA: no pairs
        " over a space-to-depth copy of the input, the last axis's taps folded into the channels")
    assert "at most 4" in s2d((1, 8, 8, 16), (16, 3, 3, 16), stride=2, padding=1)
    assert "triple" in s2d((1, 9, 9, 1), (16, 3, 3, 1), stride=2)  # 1 channel padded to 8 of 16-byte rows
    assert "dilation" in s2d((1, 9, 9, 3), (16, 3, 3, 3), stride=2, kernel_dilation=2)


def test_fold_refusals():
    """What does not fold takes the gather kernel (tma_reason says why)."""
    from ndconv.api import make_problem

    def reason(x, w, **args):
        return implicit_gemm.fold_reason(make_problem(x, w, dtype=torch.bfloat16, device="cpu", **args))

    assert "groups" in reason((1, 8, 8, 32), (32, 3, 3, 16), stride=2, groups=2)
    assert "16-byte" in reason((64, 56, 56, 6), (64, 3, 3, 6), stride=2, padding=1)
    assert "divisible" in reason((1, 9, 16), (16, 3, 16), stride=2)
    assert "16-byte" in reason((1, 8, 6), (16, 3, 6), stride=2)
    assert "padding" in reason((1, 8, 8, 16), (16, 1, 1, 16), stride=2, padding=1)
    rows = make_problem((64, 64, 64, 128), (256, 4, 4, 128), dtype=torch.bfloat16, device="cpu",
                        stride=2, padding=1)
    fold = implicit_gemm._fold(rows)  # convT_4x4s2's input gradient: rows stepped, columns folded
    assert fold.axes == (("row", 2), ("fold", 2, 1, 3)) and fold.row_steps == (2, 1)
    assert fold.q.x_shape == (64, 64, 32, 256) and fold.q.out_spatial == (32, 32)
    assert implicit_gemm.tma_route(rows) == (" over a view folding the stride into the channels, "
                                             "stepping rows by the stride")
    p = make_problem((16, 3000, 768), (768, 3, 768), dtype=torch.bfloat16, device="cpu", stride=2, padding=1)
    assert implicit_gemm.tma_route(p) == " over rows of the input, a box of them per tap (rows_fwd_kernel)"
    fold = implicit_gemm._fold(p)  # where the rows kernel is refused (e.g. rows not contiguous)
    assert fold.q.x_shape == (16, 1500, 1536) and fold.q.w_shape == (768, 2, 1536)  # conv1d_k3s2_768
    assert fold.q.padding_lo == (1,) and fold.axes == (("fold", 2, 1, 2),)


def test_tma_path_falls_back_on_unaligned_tensors(monkeypatch):
    """An input whose base is not 16-byte aligned takes the gather path, with the same tiles."""
    p = _problem_for_tma((2, 5, 7, 16), (8, 3, 3, 16), dict(padding=1), torch.float16)
    a, b = testing.random_operands(p, 0)
    shifted = torch.empty(a.numel() + 1, dtype=a.dtype, device=a.device)[1:].view(a.shape)
    shifted.copy_(a)
    launched = []
    real = implicit_gemm._run_tma
    monkeypatch.setattr(implicit_gemm, "_run_tma", lambda *args: launched.append(real(*args)) or launched[-1])
    out = testing.run_algorithm("implicit_gemm", p, shifted, b, TMA_CONFIGS[0])
    assert launched == [False]
    testing.assert_close(out, testing.reference_result(p, a, b), testing.tolerance(p))


def test_tma_reasons():
    from ndconv.api import make_problem

    def reason(x, w, dtype=torch.bfloat16, **args):
        return implicit_gemm.tma_reason(make_problem(x, w, dtype=dtype, device="cpu", **args))

    assert reason((1, 8, 8, 16), (8, 3, 3, 16), padding=1) is None
    assert reason((1, 8, 8, 16), (8, 3, 3, 16), stride=2) is None  # rows stepped, columns folded
    assert reason((1, 8, 16), (8, 3, 16), stride=2) is None  # folded into 32 channels (_fold)
    assert "groups" in reason((1, 8, 8, 32), (32, 3, 3, 16), stride=2, groups=2)
    assert reason((1, 8, 8, 16), (8, 3, 3, 16), input_dilation=2) is None  # per output phase
    assert "16-byte" in reason((1, 8, 8, 12), (8, 3, 3, 12))
    assert "float32" in reason((1, 8, 8, 16), (8, 3, 3, 16), dtype=torch.float32)  # exact fp32
    assert "groups" in reason((1, 8, 8, 48), (8, 3, 3, 24), groups=2)  # 24 = 16 + 8: a tile would straddle


def test_tma_boxes_waste_little():
    assert implicit_gemm._tma_box((1, 56, 56), 64, 256) == (4, 1, 8, 8)  # 56 = 7 x 8: nothing wasted
    assert implicit_gemm._tma_box((1, 256, 256), 1, 128) == (1, 1, 1, 128)
    assert implicit_gemm._tma_box((1, 1, 3000), 16, 128) == (1, 1, 1, 128)  # 2% waste: long rows
    assert implicit_gemm._tma_box((16, 56, 56), 8, 256) == (1, 4, 8, 8)
    assert implicit_gemm._tma_box((1, 56, 56), 64, 128, box_h=8, box_w=16) == (1, 1, 8, 16)
    assert implicit_gemm._tma_box((1, 7, 7), 64, 128, box_h=8, box_w=8) == (2, 1, 8, 8)


def test_tma_config_tiles():
    from ndconv.api import make_problem

    def config(x, w, **args):
        return implicit_gemm.tma_config(make_problem(x, w, dtype=torch.bfloat16, device="cpu", **args))

    assert config((64, 56, 56, 64), (64, 3, 3, 64), padding=1) == Config(128, 64, 64, 4, 3,
                                                                         tma=True)  # 3 CTAs an SM
    assert config((1, 256, 256, 256), (256, 3, 3, 256), padding=1) == Config(256, 128, 64, 8, 3, tma=True)
    assert config((8, 64, 64, 320), (320, 3, 3, 320), padding=1) == Config(256, 64, 64, 4, 4, tma=True,
                                                                           persistent=1)
    assert config((64, 14, 14, 256), (256, 3, 3, 256), padding=1) == Config(128, 64, 64, 4, 3,
                                                                            tma=True)  # 392 tiles
    assert config((64, 28, 28, 128), (128, 3, 3, 128), padding=1) == Config(128, 128, 64, 4, 2,
                                                                            tma=True)  # one wave
    assert config((64, 56, 56, 64), (256, 1, 1, 64)) == Config(256, 128, 64, 8, 3, tma=True, rows=True)
    assert config((64, 56, 56, 256), (64, 1, 1, 256)) == Config(128, 64, 64, 4, 4, tma=True, rows=True)
    assert not config((64, 14, 14, 1024), (256, 1, 1, 1024)).rows  # 98 tiles on 132 SMs
    assert config((16, 3000, 768), (768, 3, 768), stride=2, padding=1) == Config(128, 128, 64, 4, 5, tma=True,
                                                                                rows=True)  # 85% full waves
    assert config((64, 32, 32, 256), (128, 4, 4, 256), stride=1, padding=2, input_dilation=2,
                  flip=True) == Config(128, 128, 64, 8, 3, tma=True)  # long phases over many tiles
    assert config((2, 8, 8, 96), (64, 3, 3, 48), groups=2).block_k == 16  # never straddles a group
    assert config((2, 8, 80), (64, 1, 80)).block_k == 32  # 96 of 80 channels: the last block zero-filled
    # one tile: its taps folded (240 channels)
    assert config((2, 8, 80), (64, 3, 80), padding=1).block_k == 64
    assert config((16, 3000, 80), (768, 3, 80), padding=1) == Config(128, 256, 32, 8, 3, tma=True,
                                                                     rows=True)  # conv1d_k3_80: 3 steps a tap
    assert config((16, 3000, 768), (768, 3, 768), padding=1) == Config(128, 256, 64, 8, 3, tma=True,
                                                                       rows=True)
    assert config((2, 8, 8, 80), (64, 3, 3, 80), padding=1).block_k == 64  # its taps folded: 240 channels
    config((1, 9, 9, 1), (16, 3, 3, 1), stride=2)  # neither folds nor takes space-to-depth: its own tiles
    stem = config((64, 224, 224, 3), (64, 7, 7, 3), stride=2, padding=3)  # space-to-depth, pairs of outputs
    assert (stem.block_m, stem.block_n, stem.block_k, stem.num_stages, stem.persistent) == (
        128, 128, 64, 2, 0)


@pytest.mark.parametrize("config", [TMA_CONFIGS[0], Config(32, 16, 16, 4, 2)], ids=["tma", "gather"])
def test_prepared_call_binds_the_launch(config):
    """A plan's prepared call (its launch bound once, BoundLaunch) computes what run computes,
    call after call on fresh operands; an unaligned operand takes run (the gather kernel)."""
    p = _problem_for_tma((2, 5, 7, 16), (8, 3, 3, 16), dict(padding=(1, 2)), torch.bfloat16)
    call = implicit_gemm.prepare(p, config)
    assert call is not None
    for seed in (1, 2):
        a, b = testing.random_operands(p, seed)
        testing.assert_close(call(a, b), testing.reference_result(p, a, b), testing.tolerance(p))
    shifted = torch.empty(a.numel() + 1, dtype=a.dtype, device=a.device)[1:].view(a.shape)
    shifted.copy_(a)
    testing.assert_close(call(shifted, b), testing.reference_result(p, a, b), testing.tolerance(p))


COPYING_CASES = [c for c in SPACE_TO_DEPTH_CASES + TAP_FOLD_CASES if not c.values[2].get("flip")]


@pytest.mark.parametrize("x_shape,w_shape,args", COPYING_CASES)
def test_prepared_call_binds_the_copies_and_the_kernel(x_shape, w_shape, args, monkeypatch):
    """A stem over its space-to-depth copies, or a tap-folded problem over its padded input: the
    prepared call binds each launch once, so after its first call no launch is built again, and
    it computes what run computes, call after call on fresh operands (an unaligned input too)."""
    p = _problem_for_tma(x_shape, w_shape, args, torch.bfloat16)
    call = implicit_gemm.prepare(p, TMA_CONFIGS[0])
    assert call is not None
    a, b = testing.random_operands(p, 1)
    testing.assert_close(call(a, b), testing.reference_result(p, a, b), testing.tolerance(p))

    def rebuilt(*args, **kwargs):
        raise AssertionError("a launch was built per call")
    for name in ("_tma_launch", "padded_blocks_launch", "padded_blocks"):
        monkeypatch.setattr(implicit_gemm, name, rebuilt)
    a, b = testing.random_operands(p, 2)
    testing.assert_close(call(a, b), testing.reference_result(p, a, b), testing.tolerance(p))
    monkeypatch.undo()
    shifted = torch.empty(a.numel() + 1, dtype=a.dtype, device=a.device)[1:].view(a.shape)
    shifted.copy_(a)
    testing.assert_close(call(shifted, b), testing.reference_result(p, a, b), testing.tolerance(p))


def test_tiny_dense_problems_keep_the_cheap_launch():
    """A problem the GPU finishes before PyTorch's call is even issued is host-bound: the
    planner's heuristics keep the Triton kernel (half the host time per call) there."""
    from ndconv import planner
    from ndconv.api import make_problem

    tiny = make_problem((1, 8, 8, 16), (16, 3, 3, 16), dtype=torch.bfloat16, device="cpu", padding=1)
    big = make_problem((64, 56, 56, 64), (64, 3, 3, 64), dtype=torch.bfloat16, device="cpu", padding=1)
    assert planner._host_bound(tiny) and not planner._host_bound(big)
