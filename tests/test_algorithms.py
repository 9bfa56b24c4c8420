"""Every algorithm against the float64 reference: every case, pass and dtype, on fresh random
operands, outputs poisoned with NaN before the call (ndconv.testing.check)."""

import zlib

import pytest
import torch
from cases import CASE_PARAMS, DEVICE, PASSES, conv_args, for_pass, poisoned
from hypothesis import assume, given
from hypothesis import strategies as st

import ndconv
from ndconv import testing
from ndconv.algorithms import REGISTRY
from ndconv.api import make_problem

CASES_BY_NAME = [c.name for c in testing.CASES]
HALF_AND_SINGLE = [torch.float32, torch.float16, torch.bfloat16]
# The dtypes each algorithm runs (the Triton kernels: no float64), and whether it covers every
# problem (the others must say why they refuse one).
ALGORITHM_DTYPES = {"gemm": [torch.float64, *HALF_AND_SINGLE], "native": [torch.float64, *HALF_AND_SINGLE],
                    "implicit_gemm": HALF_AND_SINGLE, "depthwise": HALF_AND_SINGLE,
                    "grouped": HALF_AND_SINGLE, "winograd": HALF_AND_SINGLE, "toeplitz": HALF_AND_SINGLE,
                    "stem": HALF_AND_SINGLE, "cudnn": HALF_AND_SINGLE}
COVERS_EVERY_PROBLEM = {"gemm", "native", "implicit_gemm"}
ALGORITHMS = list(ALGORITHM_DTYPES)
# hypothesis draws 1-3 channels per group, which Winograd refuses, and rarely a depthwise problem
# without input dilation, which is all toeplitz takes, or an ungrouped forward of at most 4
# channels, which is all stem takes (test_winograd, test_toeplitz, test_stem draw their own); cudnn
# runs only on CUDA with its optional package (test_cudnn draws problems for its mapping)
_CUDNN_RUNS = DEVICE == "cuda" and REGISTRY["cudnn"]._frontend()[0] is not None
RANDOM_ALGORITHMS = [name for name in ALGORITHMS
                     if name not in ("winograd", "toeplitz", "stem") and (name != "cudnn" or _CUDNN_RUNS)]
assert set(ALGORITHMS) == set(REGISTRY) - {"reference"}, "add the new algorithm's dtypes here"


def _params():
    """(case, pass, algorithm, dtype) for every combination the algorithm accepts."""
    out = []
    for case_param in CASE_PARAMS:
        case = case_param.values[0]
        for pass_ in PASSES:
            for name, dtypes in ALGORITHM_DTYPES.items():
                p = for_pass(case.problem(device=DEVICE), pass_)
                if name in COVERS_EVERY_PROBLEM or REGISTRY[name].supports(p)[0]:
                    for d in dtypes:
                        out.append(pytest.param(case, pass_, name, d,
                                                id=f"{case.name}-{pass_}-{name}-{str(d)[6:]}"))
    return out


@pytest.mark.parametrize("case,pass_,name,dtype", _params())
def test_algorithm_matches_reference(case, pass_, name, dtype):
    p = for_pass(case.problem(dtype=dtype, device=DEVICE), pass_)
    ok, reason = REGISTRY[name].supports(p)
    assert ok, reason
    report = testing.check(name, p, seed=zlib.crc32(f"{case.name} {pass_}".encode()) % 1000)
    assert report.ok, f"{name} on {p}: {report}"


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_native_input_gradient_both_ways(case):
    """native's input gradient through convolution_backward of the forward it comes from
    (forward_of_dgrad undoes ConvProblem.dgrad) and as the forward problem over dy: every
    formulation of either kind matches the reference, through run and its prepared call."""
    from ndconv.algorithms import native

    d = case.problem(dtype=torch.float32, device=DEVICE).dgrad()
    assert native.forward_of_dgrad(d).dgrad() == d
    names = native.configs(d)
    backward = [n.startswith(native.BACKWARD) for n in names]
    assert any(backward) and not all(backward) and backward[0] == (d.groups == 1)
    a, b = testing.random_operands(d, 3, device=DEVICE)
    ref = testing.reference_result(d, a, b)
    for name in names:
        report = testing.check("native", d, seed=3, config=name)
        assert report.ok, f"{name} on {d}: {report}"
        testing.assert_close(native.prepare(d, name)(a, b), ref, testing.tolerance(d), name)


def test_native_keeps_the_symmetric_padding_of_strided_convolutions():
    """The forward geometry native computes a pass through keeps symmetric padding where a
    high pad among the stride's choices allows it (the result does not depend on which):
    the least one made a strided convolution's padding asymmetric, which PyTorch pads a copy
    for (r50's 3x3 stride-2 weight gradient 2.5x slower on the H200). The results still match
    the reference."""
    from ndconv.algorithms import native

    for x, w, args, hi in (((2, 8, 8, 4), (4, 3, 3, 4), dict(stride=2, padding=1), (1, 1)),
                           # 0: 4 outputs too
                           ((2, 9, 4), (4, 3, 4), dict(stride=2, padding=([0], [1])), (0,)),
                           # 3: 6, the least
                           ((2, 9, 4), (4, 3, 4), dict(stride=2, padding=([3], [0])), (-1,))):
        p = make_problem(x, w, device=DEVICE, **args)
        assert native._forward_of(p.wgrad())[0].padding_hi == hi
        assert native.forward_of_dgrad(p.dgrad()).padding_hi == hi
        for q in (p.wgrad(), p.dgrad()):
            report = testing.check("native", q, seed=2)
            assert report.ok, f"{q}: {report}"
    # a "SAME" pad that no output reads is dropped (odd side), one that an output reads is kept
    odd = make_problem((2, 9, 9, 4), (4, 3, 3, 4), stride=2, padding=([0, 0], [1, 1]), device=DEVICE)
    even = make_problem((2, 8, 8, 4), (4, 3, 3, 4), stride=2, padding=([0, 0], [1, 1]), device=DEVICE)
    assert [native.pads_a_copy(q) for q in (odd, odd.dgrad(), odd.wgrad())] == [False] * 3
    assert native.configs(odd)[0] == "conv" and native.pads_a_copy(even)
    for q in (odd, even):
        report = testing.check("native", q, seed=4)
        assert report.ok, f"{q}: {report}"


FLIPPED_PLAIN = [  # flipped kernels with symmetric padding: the plain formulations flip the weight
    pytest.param(((2, 5, 6, 3), (4, 3, 2, 3), dict(padding=1, flip=True)), id="2d_flip"),
    pytest.param(((2, 9, 4), (6, 3, 2), dict(padding=2, kernel_dilation=2, flip=True, groups=2)),
                 id="1d_flip_groups"),
]


@pytest.mark.parametrize("case", CASE_PARAMS + FLIPPED_PLAIN)
def test_native_prepared_calls_match_reference(case):
    """native's prepared calls of every pass (the plain direct formulations: one convolution or
    convolution_backward between views whose geometry was found once) and every other
    formulation's, on fresh operands."""
    from ndconv.algorithms import native

    if isinstance(case, tuple):
        x_shape, w_shape, args = case
        p = make_problem(x_shape, w_shape, dtype=torch.float32, device=DEVICE, **args)
        assert "conv" in native.configs(p)
    else:
        p = case.problem(dtype=torch.float32, device=DEVICE)
    for pass_ in PASSES:
        q = for_pass(p, pass_)
        for seed in (4, 5):
            a, b = testing.random_operands(q, seed, device=DEVICE)
            ref = testing.reference_result(q, a, b)
            for name in native.configs(q):
                out = native.prepare(q, name)(a, b)
                testing.assert_close(out, ref, testing.tolerance(q), f"{pass_} {name}")


def test_native_prepared_call_refuses_operands_of_other_shapes():
    """The plain formulations view their operands with strides found once: other shapes raise
    instead of being read wrong."""
    from ndconv.algorithms import native

    p = make_problem((2, 6, 6, 4), (8, 3, 3, 4), dtype=torch.float32, device=DEVICE, padding=1)
    for q in (p, p.dgrad(), p.wgrad()):
        call = native.prepare(q, None)
        a, b = testing.random_operands(q, 0, device=DEVICE)
        call(a, b)
        with pytest.raises(ValueError, match="not the natural"):
            call(a[:1], b)


@pytest.mark.skipif(DEVICE != "cpu", reason="cuDNN accumulates half types in fp32 itself")
@pytest.mark.parametrize("pass_", PASSES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_native_accumulates_half_types_in_float32_on_the_cpu(pass_, dtype):
    """PyTorch's CPU convolutions round half-precision partial sums (a 3x3x3 input gradient in
    fp16 failed fp16's tolerance): native's half results there are its float32 results rounded
    once, through run and through its prepared calls."""
    from ndconv.algorithms import native

    case = next(c for c in testing.CASES if c.name == "3d_3x3x3")
    p = for_pass(case.problem(dtype=dtype, device=DEVICE), pass_)
    p32 = for_pass(case.problem(dtype=torch.float32, device=DEVICE), pass_)
    a, b = testing.random_operands(p, 0, device=DEVICE)
    for name in native.configs(p):
        expected = native.prepare(p32, name)(a.float(), b.float()).to(dtype)
        assert torch.equal(native.prepare(p, name)(a, b), expected), name
        assert torch.equal(testing.run_algorithm("native", p, a, b, name), expected), name


ONE_CHANNEL = [  # one input channel, a batch of 2, a strided last axis with one output column
    pytest.param(((2, 7, 1, 1), (1, 3, 3, 1), dict(stride=(1, 3), padding=1, kernel_dilation=(3, 1))),
                 id="2d"),
    pytest.param(((2, 5, 3, 1), (2, 2, 3, 1), dict(stride=(1, 3), input_dilation=2)), id="2d_input_dilated"),
    pytest.param(((2, 6, 3, 1), (2, 3, 3, 1), dict(stride=(1, 2), padding=((0, 0), (2, 1)), flip=True)),
                 id="2d_asym"),
    pytest.param(((2, 3, 5, 4, 1), (2, 2, 3, 3, 1), dict(stride=(1, 1, 3))), id="3d"),
]


@pytest.mark.parametrize("case", ONE_CHANNEL)
def test_native_one_input_channel(case):
    """One input channel with channels-last strides sent PyTorch's CPU convolution (oneDNN,
    torch 2.13) reading garbage (1e35) in these forwards, found against MLX: native gives it
    contiguous strides there. Every pass and formulation, run and prepared, and autograd."""
    from ndconv.algorithms import native

    x_shape, w_shape, args = case
    p = make_problem(x_shape, w_shape, dtype=torch.float32, device=DEVICE, **args)
    for q in (p, p.dgrad(), p.wgrad()):
        a, b = testing.random_operands(q, 1, device=DEVICE)
        ref = testing.reference_result(q, a, b)
        tol = testing.tolerance(q)
        for name in native.configs(q):
            testing.assert_close(testing.run_algorithm("native", q, a, b, name), ref, tol, name)
            testing.assert_close(native.prepare(q, name)(a, b), ref, tol, name)
    x, w = (t.requires_grad_() for t in testing.random_operands(p, 2, device=DEVICE))
    y = ndconv.conv_general(x, w, **args)
    dy = torch.randn_like(y)
    y.backward(dy)
    x64, w64 = (t.detach().double().requires_grad_() for t in (x, w))
    y64 = ndconv.conv_general(x64, w64, algorithm="reference", **args)
    y64.backward(dy.double())
    for out, ref, what in ((y, y64, "output"), (x.grad, x64.grad, "dx"), (w.grad, w64.grad, "dw")):
        testing.assert_close(out, ref, testing.tolerance(p), what)


def test_small_group_algorithms_take_their_problems_and_say_why_they_refuse_others():
    from ndconv.algorithms import depthwise, grouped

    taken = {"depthwise": 0, "grouped": 0}
    for case in testing.CASES:
        p = case.problem(device=DEVICE)
        for q in (p, p.dgrad(), p.wgrad()):
            cg, og = (q.batch, q.o_per_group) if q.pass_ == "wgrad" else (q.c_per_group, q.o_per_group)
            ok, reason = depthwise.supports(q)
            assert ok == (min(cg, og) == 1 and max(cg, og) <= depthwise.MAX_GROUP_WIDTH), (q, reason)
            assert ok or "GEMM" in reason
            taken["depthwise"] += ok
            ok, reason = grouped.supports(q)
            assert ok == (q.groups > 1 and max(cg, og) < grouped.TARGET_WIDTH), (q, reason)
            assert ok or "grouped" in reason or "tensor-core" in reason
            taken["grouped"] += ok
    assert taken["depthwise"] >= 9 and taken["grouped"] >= 10, taken


@pytest.mark.parametrize("name", RANDOM_ALGORITHMS)
@given(drawn=conv_args(), pass_=st.sampled_from(PASSES), seed=st.integers(0, 2**16))
def test_algorithm_matches_reference_random(name, drawn, pass_, seed):
    x_shape, w_shape, args = drawn
    p = for_pass(make_problem(x_shape, w_shape, dtype=torch.float32, device=DEVICE, **args), pass_)
    assume(name in COVERS_EVERY_PROBLEM or REGISTRY[name].supports(p)[0])
    report = testing.check(name, p, seed=seed)
    assert report.ok, f"{name} on {p}: {report}"


def test_sums_that_cancel_are_measured_on_their_terms():
    """One output, six products that cancel to 6e-4 of their size (hypothesis found it): a
    correct float32 sum's rounding is then 1e-5 of the output itself, which max|ref| alone calls
    wrong. testing.check measures it on the terms (testing.magnitude) and still catches an error
    far below a product's size."""
    p = make_problem((1, 3, 3), (1, 4, 3), padding=([2], [2]), kernel_dilation=[2], device=DEVICE)
    a, b = testing.random_operands(p, 0)
    ref, floor, tol = testing.reference_result(p, a, b), testing.magnitude(p, a, b), testing.tolerance(p)
    assert ref.abs().max() < 1e-2 * floor  # it cancels
    rounded, wrong = ref + 1e-6 * floor, ref + 1e-4 * floor
    assert not testing.compare(rounded, ref, tol).ok  # on max|ref|: 5e-4 of the output
    assert testing.compare(rounded, ref, tol, floor).ok and not testing.compare(wrong, ref, tol, floor).ok
    for name in COVERS_EVERY_PROBLEM:
        report = testing.check(name, p)
        assert report.ok, f"{name}: {report}"


# Algorithms that multiply an operand by structural zeros (DESIGN.md section 1): an inf there makes
# NaN of outputs that do not read it. On a GPU, native and cudnn run cuDNN's engines (Winograd and
# FFT ones among them) and implicit_gemm's strided forwards add zero taps (stride folds,
# space-to-depth copies).
SPREADS_NON_FINITES = {"grouped", "toeplitz", "winograd"}


def _keeps_non_finites_local(name, p):
    if p.pass_ == "wgrad" or name in SPREADS_NON_FINITES:
        return False
    if p.device == "cuda":
        return name not in ("native", "cudnn") and not (name == "implicit_gemm" and max(p.stride) > 1)
    return True


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_non_finite_operands_are_never_hidden(case):
    """An inf or NaN in an activation operand (the input, the output gradient; both operands of
    a weight gradient) makes every output element that reads it non-finite, on every algorithm;
    on the forward and input gradient the algorithms that multiply no structural zeros keep it
    to those elements. Which elements read it: the reference over the operands' non-finite mask."""
    i = CASES_BY_NAME.index(case.name)
    for pass_ in PASSES:
        p = for_pass(case.problem(device=DEVICE), pass_)
        a, b = testing.random_operands(p, seed=i)
        for operand in ("a", "b") if pass_ == "wgrad" else ("a",):
            a2, b2, reads = poisoned(p, a, b, operand, (float("inf"), -float("inf"), float("nan"))[i % 3], i)
            for name in ALGORITHMS + ["reference"]:
                if not REGISTRY[name].supports(p)[0]:
                    continue
                finite = testing.run_algorithm(name, p, a2, b2).isfinite()
                assert not (finite & reads).any(), f"{name} hides a non-finite {operand} on {p}"
                if _keeps_non_finites_local(name, p):
                    assert (finite | reads).all(), f"{name} spreads a non-finite {operand} on {p}"


def test_check_catches_a_wrong_result(monkeypatch):
    """The harness must fail an algorithm that is off by a little, or leaves outputs unwritten."""
    p = testing.CASES[6].problem()
    gemm = REGISTRY["gemm"]
    original = gemm.run

    def off_by_a_bit(p, x, w, out, config=None):
        original(p, x, w, out, config)
        out.view(-1)[0] += 1e-3

    monkeypatch.setattr(gemm, "run", off_by_a_bit)
    assert not testing.check("gemm", p).ok

    def leaves_one_unwritten(p, x, w, out, config=None):
        original(p, x, w, out, config)
        out.view(-1)[-1] = float("nan")

    monkeypatch.setattr(gemm, "run", leaves_one_unwritten)
    report = testing.check("gemm", p)
    assert not report.ok and report.n_nonfinite == 1


def test_gemm_chunks_under_the_workspace_limit(monkeypatch):
    """A limit smaller than one chunk row still computes the right result, chunk by chunk."""
    monkeypatch.setenv("NDCONV_WORKSPACE_LIMIT", "1000")
    for case in testing.CASES[::5]:
        p = case.problem()
        for q in (p, p.dgrad(), p.wgrad()):
            assert testing.check("gemm", q).ok


def test_gemm_rejects_a_bad_workspace_limit(monkeypatch):
    monkeypatch.setenv("NDCONV_WORKSPACE_LIMIT", "lots")
    with pytest.raises(ValueError, match="NDCONV_WORKSPACE_LIMIT"):
        testing.check("gemm", testing.CASES[0].problem())


# The depthwise kernels' strips and chunks of taps along the last axis (forward, input and
# weight gradient): taps in several chunks (the last one partial), strides and dilations that
# leave window columns unused, channel multipliers (two input channels per lane in the input
# gradient), input dilation, flip, crops, and channel counts that are not a multiple of the
# block; strips in tiles of one image or in one order over all images.
DEPTHWISE_STRIPS = [
    pytest.param((2, 5, 13, 6), (6, 2, 11, 1), {"padding": ([1, 5], [0, 4]), "groups": 6},
                 id="2d_k11_chunks"),
    pytest.param((1, 4, 17, 4), (8, 3, 5, 1),
                 {"stride": 2, "kernel_dilation": 2, "padding": 3, "groups": 4},
                 id="2d_s2_kdil2_mult2"),
    pytest.param((1, 9, 11, 5), (5, 3, 3, 1), {"stride": 2, "padding": 1, "groups": 5},
                 id="2d_3x3_s2_row_strips"),
    pytest.param((1, 3, 9, 5), (5, 2, 6, 1),
                 {"input_dilation": (2, 2), "padding": ([1, 4], [0, 2]), "flip": True, "groups": 5},
                 id="2d_idil2_flip"),
    pytest.param((2, 19, 3), (3, 9, 1), {"stride": 3, "padding": ([-1], [4]), "groups": 3},
                 id="1d_s3_crop"),
    pytest.param((1, 3, 4, 6, 2), (2, 2, 3, 7, 1), {"padding": ([1, 0, 3], [0, 2, 3]), "groups": 2},
                 id="3d_k7"),
    pytest.param((1, 3, 7, 6, 6), (6, 3, 3, 3, 1), {"stride": (1, 2, 2), "padding": 1, "groups": 6},
                 id="3d_3x3x3_s2_c6"),  # X3D's strided layers; 6 channels: vectors of 2 (ALIGN)
]


@pytest.mark.parametrize("pass_", ["fwd", "dgrad", "wgrad"])
@pytest.mark.parametrize("x_shape,w_shape,args", DEPTHWISE_STRIPS)
def test_depthwise_strips_and_tap_chunks(x_shape, w_shape, args, pass_):
    from dataclasses import replace

    from ndconv.algorithms import depthwise

    p = for_pass(make_problem(x_shape, w_shape, dtype=torch.float32, device=DEVICE, **args), pass_)
    assert depthwise.supports(p)[0]
    base = depthwise._strip_wgrad_config(p) if pass_ == "wgrad" else depthwise.default_config(p)
    small = replace(base, block_p=4, block_o=8) if pass_ == "wgrad" else replace(base, tile_w=1)
    flipped_order = replace(base, channels_fastest=not base.channels_fastest)  # the grid's other order
    unrolled = replace(base, rows_unrolled=True, cols=3)  # kernel rows unrolled (forward passes)
    configs = [base, replace(base, unroll=4, cols=3), replace(small, unroll=3, cols=5), flipped_order,
               unrolled]
    if pass_ != "wgrad":  # 2 channels per thread; strips of several rows (any stride once unrolled)
        configs += [replace(base, vector=2, block_p=4), replace(base, rows=3, cols=2),
                    replace(unrolled, rows=2),
                    replace(base, max_registers=depthwise.THREE_CTAS_OF_4_WARPS),  # spills (on a GPU)
                    # strips in one order over all images (a program's strips cross rows and images)
                    replace(base, flat=True, block_p=4), replace(unrolled, flat=True, rows=2, block_p=8)]
    for config in configs:
        report = testing.check("depthwise", p, seed=7, config=config)
        assert report.ok, f"{config} on {p}: {report}"


# The walking weight gradient (walk_wgrad_kernel) on those and on rows long enough for middle
# chunks: rows peeled (first and last chunks unrolled, the middle ones unmasked, rows and
# channels without data pointing at zeros) or masked throughout (input dilation along the last
# axis, windows past the input), channel blocks full and partial, one or two channels a thread.
WALK_ROWS = [
    pytest.param((2, 12, 21, 8), (8, 3, 3, 1), {"padding": 1, "groups": 8}, id="2d_3x3_middle_chunks"),
    pytest.param((1, 14, 30, 8), (8, 5, 5, 1), {"stride": 2, "padding": 2, "groups": 8},
                 id="2d_5x5_s2_middle_chunks"),
    pytest.param((1, 3, 9, 17, 8), (8, 3, 3, 3, 1), {"padding": 1, "groups": 8}, id="3d_middle_chunks"),
]


@pytest.mark.parametrize("x_shape,w_shape,args", DEPTHWISE_STRIPS + WALK_ROWS)
def test_depthwise_walking_weight_gradient(x_shape, w_shape, args):
    from dataclasses import replace

    from ndconv.algorithms import depthwise

    p = make_problem(x_shape, w_shape, dtype=torch.float32, device=DEVICE, **args).wgrad()
    walk = replace(depthwise._strip_wgrad_config(p), walk=True, num_warps=1)
    for config in [replace(walk, block_o=8, vector=1, cols=3), replace(walk, block_o=16, vector=1, cols=4),
                   replace(walk, block_o=4, vector=2, cols=4, programs_per_sm=1)]:
        report = testing.check("depthwise", p, seed=7, config=config)
        assert report.ok, f"{config} on {p}: {report}"


def test_depthwise_weight_gradient_walks_by_default_where_it_wins():
    """depthwise.walk_wins (measured on the H200): stride-1 2-D and 3-D weight gradients of 25-49
    taps whose output rows fit one 16-column chunk take the walking kernel's first config by
    default, which computes them right; 3x3 kernels, strides and wider rows keep the strips."""
    from ndconv.algorithms import depthwise

    def problem(x, w, **args):
        return make_problem(x, w, groups=x[-1], dtype=torch.float32, device=DEVICE, **args).wgrad()

    walked = [problem((2, 7, 7, 8), (8, 5, 5, 1), padding=2),
              problem((1, 3, 5, 6, 8), (8, 3, 3, 3, 1), padding=1)]
    for p in walked:
        config = depthwise.default_config(p)
        assert config.walk and config == depthwise.configs(p)[0] and depthwise.wgrad_wins(p)
        report = testing.check("depthwise", p, seed=5)
        assert report.ok, f"{config} on {p}: {report}"
    kept = [problem((2, 7, 7, 8), (8, 3, 3, 1), padding=1),
            problem((2, 14, 14, 8), (8, 5, 5, 1), stride=2, padding=2),
            problem((2, 17, 17, 8), (8, 7, 7, 1), padding=3), problem((2, 7, 7, 8), (8, 7, 7, 1), padding=6,
                                                                   kernel_dilation=2)]
    assert not any(depthwise.default_config(p).walk for p in kept)


def test_depthwise_walk_peels_rows_whose_middle_chunks_read_inside_the_input():
    """The rows the tests above walk both ways: peeled (3x3 and strided 5x5 over 21-30 columns
    in chunks of 3-4, every row of up to two chunks) and masked (input dilation with middle
    chunks; windows of the middle chunks that reach past the input)."""
    from ndconv.algorithms.depthwise import _walk_peeled

    assert _walk_peeled(4, 21, 21, 3, 1, 1, 1, 1) and _walk_peeled(3, 30, 15, 5, 2, 1, 1, 2)
    assert _walk_peeled(4, 6, 6, 3, 1, 1, 1, 1)  # no middle chunk
    assert not _walk_peeled(4, 9, 18, 6, 1, 1, 2, 1)  # input dilation (2d_idil2_flip)
    assert not _walk_peeled(3, 13, 12, 11, 1, 1, 1, 1)  # the middle windows pass the input's end


def test_depthwise_caps_registers_only_for_long_2d_kernels():
    """Measured on the H200: a register cap of 3 CTAs an SM speeds up 2-D kernels longer than 3
    taps (rows a runtime loop: 5x5, 7x7) and slows down 3x3 and 1-D ones."""
    from ndconv.algorithms import depthwise

    def cap(x, w, **args):
        p = make_problem(x, w, groups=x[-1], dtype=torch.bfloat16, device=DEVICE, **args)
        return depthwise.default_config(p).max_registers

    assert cap((64, 56, 56, 96), (96, 7, 7, 1), padding=3) == depthwise.THREE_CTAS_OF_4_WARPS
    assert cap((64, 28, 28, 240), (240, 5, 5, 1), padding=2) == depthwise.THREE_CTAS_OF_4_WARPS
    assert cap((64, 56, 56, 144), (144, 3, 3, 1), padding=1) == 0
    assert cap((8, 4096, 1536), (1536, 4, 1), padding=([3], [0])) == 0


def test_depthwise_strips_fit_small_maps():
    """Measured on the H200 (depthwise suite, bf16): a 2-D forward whose tiles of one image pad
    its map by more than 10% takes flat strips (14x14 and 7x7 maps: 9.0 against 16.9 us on 960
    channels at 7x7), 2 rows a strip where rows are consecutive, else 1; 3 rows become 4 where
    that pads a 56-row map less (dw3x3_56 44.2 against 46.2 us), not on 112 rows (39.1 against
    37.0)."""
    from ndconv.algorithms import depthwise

    def strips(x, w, **args):
        p = make_problem(x, w, groups=x[-1], dtype=torch.bfloat16, device=DEVICE, **args)
        config = depthwise.default_config(p)
        return config.flat, config.rows

    assert strips((64, 7, 7, 960), (960, 3, 3, 1), padding=1) == (True, 2)
    assert strips((64, 14, 14, 384), (384, 3, 3, 1), padding=1) == (True, 2)
    assert strips((64, 28, 28, 192), (192, 3, 3, 1), stride=2, padding=1) == (True, 1)
    assert strips((64, 14, 14, 672), (672, 5, 5, 1), padding=2) == (True, 1)
    assert strips((64, 56, 56, 144), (144, 3, 3, 1), padding=1) == (False, 4)
    assert strips((64, 112, 112, 32), (32, 3, 3, 1), padding=1) == (False, 3)
    assert strips((64, 56, 56, 96), (96, 7, 7, 1), padding=3) == (False, 1)
    # 3-D (X3D-M's 3x3x3 layers): strips of 2 rows (3 spill: 111.7 against 144.2 us at 56x56),
    # flat by the same rule (28x28: 51.3 against 59.2 us in tiles)
    assert strips((8, 16, 56, 56, 54), (54, 3, 3, 3, 1), padding=1) == (False, 2)
    assert strips((8, 16, 28, 28, 108), (108, 3, 3, 3, 1), padding=1) == (True, 2)
    assert strips((8, 16, 56, 56, 108), (108, 3, 3, 3, 1), stride=(1, 2, 2), padding=1) == (True, 1)


def test_depthwise_vectors_where_channels_are_not_multiples_of_16():
    """Triton learns an argument's divisibility only by 16, so the launchers pass ALIGN, the power
    of two (up to a thread's lanes) dividing the channel count, the position strides and the
    output's offset: MobileNetV3's 72 channels load 8-byte vectors (28.5 against 50.0 us on the
    H200 at 56x56; X3D's 54: 4-byte ones, 144 against 257 us). Where 16 divides them all
    Triton knows it, and ALIGN stays 1 (one compiled kernel, as before)."""
    from ndconv.algorithms import depthwise
    from ndconv.algorithms.triton_support import alignment_hint

    assert alignment_hint((72, 0, 72 * 56, 72), 4) == 4 and alignment_hint((54, 54 * 7), 4) == 2
    assert alignment_hint((144, 144 * 56, 0), 4) == 1 and alignment_hint((9, 16), 8) == 1

    def meta(x_shape, w_shape, pass_="fwd", **args):
        p = make_problem(x_shape, w_shape, groups=x_shape[-1], dtype=torch.bfloat16, device=DEVICE, **args)
        q = p if pass_ == "fwd" else getattr(p, pass_)()
        a, b = testing.random_operands(q, 0, device=DEVICE)
        out = torch.empty(q.result_shape, dtype=q.dtype, device=DEVICE)
        x, w, y = q.views(a, b, out)
        if pass_ == "wgrad":
            x, dy, _, _ = q.wgrad_natural(x, w, y)
            ws = torch.empty(depthwise._wgrad_workspace(q, depthwise.default_config(q), x.device))
            return [depthwise._wgrad_launch(q, x, dy, ws, depthwise.default_config(q))[2]]
        if depthwise.default_config(q).phases:  # each phase's output offset is a multiple of ALIGN
            launches = depthwise._phase_launches(q, x, w, y)
            assert all(args[4] % meta["ALIGN"] == 0 for _, args, meta in launches)
            return [meta for _, _, meta in launches]
        return [depthwise._forward_launch(q, x, w, y, depthwise.default_config(q))[2]]

    assert [m["ALIGN"] for m in meta((2, 9, 9, 72), (72, 3, 3, 1), padding=1)] == [4]
    assert [m["ALIGN"] for m in meta((2, 9, 9, 144), (144, 3, 3, 1), padding=1)] == [1]
    assert [m["ALIGN"] for m in meta((2, 9, 9, 54), (54, 3, 3, 1), "wgrad", padding=1)] == [2]
    assert [m["ALIGN"] for m in meta((2, 9, 9, 72), (72, 3, 3, 1), "wgrad", padding=1)] == [8]
    # the phases' outputs are strided views (12-element steps), their offsets 6-element ones
    phases = meta((1, 8, 8, 6), (6, 5, 5, 1), "dgrad", stride=2, padding=2)
    assert len(phases) == 4 and {m["ALIGN"] for m in phases} == {2}


@pytest.mark.parametrize("pass_", ["fwd", "dgrad", "wgrad", "wgrad_walk"])
def test_depthwise_prepared_call_matches_the_reference(pass_):
    """depthwise's prepared call (its launch bound once; the weight gradient's workspace made per
    call; the walking one's row of zeros made once) on fresh operands, call after call."""
    from dataclasses import replace

    from ndconv.algorithms import depthwise

    p = make_problem((2, 6, 7, 8), (8, 3, 3, 1), padding=([2, 0], [1, 1]), groups=8,
                         dtype=torch.float32, device=DEVICE)
    p = p if pass_ == "fwd" else getattr(p, pass_.split("_")[0])()
    config = depthwise.default_config(p)
    if pass_ == "wgrad_walk":
        config = replace(config, walk=True, block_o=8, vector=1, num_warps=1, cols=3)
    call = depthwise.prepare(p, config)
    for seed in (3, 4):
        a, b = testing.random_operands(p, seed, device=DEVICE)
        testing.assert_close(call(a, b), testing.reference_result(p, a, b), testing.tolerance(p))


# Input gradients of strided depthwise convolutions, as forwards over dy with input dilation:
# 5x5 (the default splits it into output phases), asymmetric padding, a stride of 3 with flip and a
# channel multiplier (two input channels per lane), a 1x1 kernel (3 of 4 phases no tap reaches),
# 1-D and 3-D.
DEPTHWISE_PHASES = [
    pytest.param((1, 9, 11, 5), (5, 5, 5, 1), {"stride": 2, "padding": ([2, 0], [1, 3]), "groups": 5},
                 id="5x5_s2"),
    pytest.param((1, 10, 9, 4), (8, 3, 4, 1), {"stride": (3, 2), "padding": ([1, 0], [1, 2]), "groups": 4,
                                               "flip": True}, id="s3_flip_mult2"),
    pytest.param((1, 8, 8, 4), (4, 1, 1, 1), {"stride": 2, "groups": 4}, id="1x1_empty_phases"),
    pytest.param((2, 13, 6), (6, 4, 1), {"stride": 2, "padding": ([3], [0]), "groups": 6}, id="1d"),
    pytest.param((1, 4, 5, 6, 2), (2, 3, 3, 3, 1), {"stride": 2, "padding": 1, "groups": 2}, id="3d"),
]


@pytest.mark.parametrize("x_shape,w_shape,args", DEPTHWISE_PHASES)
def test_depthwise_input_gradients_by_output_phase(x_shape, w_shape, args):
    """One stride-1 launch per output phase (Config.phases), run into a poisoned output and as the
    prepared call (bound launches with the phases' offsets), against the reference."""
    from dataclasses import replace

    from ndconv.algorithms import depthwise, prepared_call

    p = make_problem(x_shape, w_shape, dtype=torch.float32, device=DEVICE, **args).dgrad()
    assert depthwise.phases_reason(p) is None
    config = replace(depthwise.default_config(p), phases=True)
    assert testing.check("depthwise", p, seed=5, config=config).ok
    call = prepared_call(depthwise, p, config)
    for seed in (3, 4):
        a, b = testing.random_operands(p, seed, device=DEVICE)
        testing.assert_close(call(a, b), testing.reference_result(p, a, b), testing.tolerance(p))
    assert depthwise.default_config(p).phases == (p.ndim == 3 or p.ndim == 2 and max(p.kernel) > 3)
    assert depthwise.phases_reason(replace(p, input_dilation=(1,) * p.ndim))  # nothing to split
    strided = make_problem(x_shape, w_shape, dtype=torch.float32, device=DEVICE, **args)
    with pytest.raises(ValueError, match="phases: forwards and input gradients with input dilation"):
        testing.check("depthwise", strided, config=replace(depthwise.default_config(strided), phases=True))


@pytest.mark.parametrize("name", ["gemm", "winograd"])
def test_calls_build_no_tensor_from_host_data_after_the_first(name, monkeypatch):
    """Tables and transform matrices built from host data are made once per problem and
    device: per call each was a host-to-device copy, which a CUDA-graph capture refuses."""
    p = make_problem((1, 6, 6, 4), (4, 3, 3, 4), padding=1, dtype=torch.float32, device=DEVICE)
    a, b = testing.random_operands(p, 0, device=DEVICE)
    testing.run_algorithm(name, p, a, b)
    made, tensor = [], torch.tensor
    monkeypatch.setattr(torch, "tensor", lambda *args, **kwargs: made.append(args) or tensor(*args, **kwargs))
    out = testing.run_algorithm(name, p, a, b)
    monkeypatch.undo()
    assert not made, made
    testing.assert_close(out, testing.reference_result(p, a, b), testing.tolerance(p))
