"""The grouped algorithm's two kernels (direct and packed) and their configs, against the
float64 reference, in every pass (Triton's interpreter on CPUs)."""

from dataclasses import replace

import pytest
import torch
from cases import DEVICE, PASSES, conv_args, for_pass
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from ndconv import testing
from ndconv.algorithms import grouped, native, prepared_call
from ndconv.api import make_problem

Config = grouped.Config

# ResNeXt-like (4x4 groups, whole 16-lane blocks), a group count that is not a multiple of the
# block, groups of 3 in and 5 out channels (lanes padded), 8-wide groups, 2-D and 1-D and 3-D.
CASES = {
    "resnext_4x4": ((2, 6, 7, 32), (32, 3, 3, 4), {"padding": 1, "groups": 8}),
    "g6_4x4_s2": ((1, 7, 9, 24), (24, 3, 3, 4), {"stride": 2, "padding": ([1, 0], [1, 2]), "groups": 6}),
    "g3_3x5_kdil": ((2, 8, 6, 9), (15, 3, 2, 3), {"kernel_dilation": (2, 1), "padding": 2, "groups": 3}),
    "g2_8x8_flip": ((1, 5, 6, 16), (16, 2, 3, 8), {"padding": 1, "groups": 2, "flip": True}),
    "1d_g4_k5": ((2, 11, 16), (8, 5, 4), {"padding": ([4], [0]), "groups": 4}),
    "3d_g4_2x2": ((1, 4, 4, 5, 8), (8, 3, 3, 3, 2), {"padding": 1, "groups": 4}),
    "convT_g4": ((1, 4, 5, 16), (8, 4, 4, 4), {"input_dilation": 2, "padding": 2, "groups": 4, "flip": True}),
}
CONFIGS = {
    "direct": Config(),
    "direct_tiles_8": Config(tile_w=8, block_p=32),
    "direct_2x_block_chunks": Config(block_g=8, tap_lanes=32, block_p=16),
    "direct_wgrad_small_steps": Config(block_p=16, programs_per_sm=64),
    "direct_fma": Config(fma=True, block_p=32),  # CUDA cores where groups allow, else the above
    "packed": Config("packed", 2),
    "packed_by_native": Config("packed", 4, packed_by="native"),  # PyTorch's convolution, 4 groups as one
}


@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
@pytest.mark.parametrize("pass_", PASSES)
@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_kernels_match_reference(case, pass_, config):
    x, w, args = case
    for dtype in (torch.float32, torch.bfloat16) if config == CONFIGS["direct"] else (torch.float32,):
        p = for_pass(make_problem(x, w, dtype=dtype, device=DEVICE, **args), pass_)
        assert grouped.supports(p)[0]
        if config.kernel == "packed" and p.groups % config.pack:
            continue
        report = testing.check("grouped", p, seed=len(x), config=config)
        assert report.ok, f"{config} on {p}: {report}"
        # as a cached call runs it: its prepared call where it has one (the direct forward's bound
        # launch, packed by native)
        a, b = testing.random_operands(p, 1, device=DEVICE)
        out = prepared_call(grouped, p, config)(a, b)
        ref = testing.reference_result(p, a, b)
        testing.assert_close(out, ref, testing.tolerance(p), f"prepared {config}")


@settings(max_examples=30)
@given(drawn=conv_args(), pass_=st.sampled_from(PASSES), seed=st.integers(0, 2**16),
       config=st.sampled_from([CONFIGS["direct"], CONFIGS["direct_2x_block_chunks"]]))
def test_direct_kernel_matches_reference_random(drawn, pass_, seed, config):
    """Every argument (stride, padding and crops, both dilations, flip), the direct kernel forced
    (the default packs wherever groups pack, except weight gradients)."""
    x_shape, w_shape, args = drawn
    p = for_pass(make_problem(x_shape, w_shape, dtype=torch.float32, device=DEVICE, **args), pass_)
    assume(grouped.supports(p)[0])
    report = testing.check("grouped", p, seed=seed, config=config)
    assert report.ok, f"{config} on {p}: {report}"


def test_tap_split_pads_no_tap_of_common_kernels():
    assert grouped._tap_split(9, 16, 128) == (8, 1, 1)  # 3x3: 8 + 1
    assert grouped._tap_split(3, 16, 128) == (2, 1, 1)
    assert grouped._tap_split(4, 16, 128) == (4, 1, 0)
    assert grouped._tap_split(1, 16, 128) == (1, 1, 0)
    assert grouped._tap_split(27, 16, 128) == (8, 3, 4)  # 3x3x3: 3 chunks of 8, then 3 of 4
    assert grouped._tap_split(49, 32, 128) == (4, 12, 1)
    assert grouped._tap_split(9, 32, 16) == (1, 9, 0)


def test_default_config_packs_fwd_and_dgrad_runs_wgrad_direct():
    """As measured on the H200: packed where the groups pack, except weight gradients; groups
    that do not pack (RegNet's 7 groups of 24) run the direct kernel in 16x8 tiles."""
    p = make_problem((64, 56, 56, 128), (128, 3, 3, 4), padding=1, groups=32, dtype=torch.bfloat16)
    s2 = make_problem((8, 56, 56, 128), (128, 3, 3, 4), stride=2, padding=1, groups=32,
                      dtype=torch.bfloat16)
    for q in (p, p.dgrad(), s2, s2.dgrad()):
        assert grouped.default_config(q) == Config("packed", 8), q
    # candidates through PyTorch's convolution: groups made 16, 32 and 64 wide, timed early
    assert grouped._native_packs(p) == [4, 8, 16]
    assert grouped.configs(p)[1:4] == [Config("packed", k, packed_by="native") for k in (4, 8, 16)]
    for q in (p.wgrad(), s2.wgrad()):
        config = grouped.default_config(q)
        assert config.kernel == "direct" and grouped._blocks(q, config)[:3] == (4, 16, 16), q
    regnet = make_problem((64, 28, 28, 168), (168, 3, 3, 24), padding=1, groups=7, dtype=torch.bfloat16)
    for q in (regnet, regnet.dgrad()):
        assert grouped.default_config(q) == Config(block_g=1, block_p=128, tile_w=8), q
    assert grouped.default_config(regnet.wgrad()) == Config(block_g=1, block_p=64)
    one_d = make_problem((2, 64, 168), (168, 3, 24), padding=1, groups=7, dtype=torch.bfloat16)
    assert grouped.default_config(one_d) == Config(block_g=1, block_p=128)  # 1-D: flat rows


def test_gpu_default_packs_through_pytorch():
    """On a GPU the rows kernel runs stride-1 2-D forwards and input gradients (but tiny input
    gradients of rows under 14 wide) and the weight gradients of whole lanes of groups over rows
    at least 14 wide (groups up to 8 wide) or 56 (16 wide); elsewhere groups that pack become 16
    channels wide for the forward, 32 for the gradients, run by PyTorch's convolution (the input
    gradient through convolution_backward); groups that do not pack keep the direct kernel."""
    p = make_problem((64, 56, 56, 128), (128, 3, 3, 4), padding=1, groups=32, dtype=torch.bfloat16,
                     device="cuda")
    assert grouped.default_config(p) == grouped.rows_config(p)  # wide rows: the rows kernel
    assert grouped.default_config(p.dgrad()) == grouped.rows_config(p.dgrad())
    assert grouped.default_config(p.wgrad()) == grouped.rows_config(p.wgrad())
    narrow = replace(p, x_shape=(256, 14, 14, 128))  # 14-wide rows: four images a tile
    assert grouped.default_config(narrow) == grouped.rows_config(narrow)
    assert grouped.rows_config(narrow).images == 4 and grouped.rows_config(p.wgrad()).images == 1
    assert grouped.rows_config(p).images == 2  # two columns a lane: 28 lanes a row, two images a tile
    assert grouped.default_config(narrow.wgrad()) == grouped.rows_config(narrow.wgrad())
    assert grouped.default_config(replace(p, x_shape=(64, 28, 28, 128)).wgrad()).kernel == "rows"
    sixteen = make_problem((64, 28, 28, 512), (512, 3, 3, 16), padding=1, groups=32, dtype=torch.bfloat16,
                           device="cuda")  # 16-wide groups: weight gradients on rows from 56 columns
    assert grouped.default_config(sixteen.wgrad()).packed_by == "native"
    assert grouped.default_config(replace(sixteen, x_shape=(64, 56, 56, 512)).wgrad()).kernel == "rows"
    narrower = replace(p, x_shape=(1024, 7, 7, 128))  # 7-wide rows: forwards and input gradients too
    assert grouped.default_config(narrower) == grouped.rows_config(narrower)
    assert grouped.default_config(narrower.dgrad()) == grouped.rows_config(narrower.dgrad())
    tiny_rows = replace(p, x_shape=(2, 7, 7, 128))  # tiny: the input gradient pairs with the weight's
    assert grouped.default_config(tiny_rows) == grouped.rows_config(tiny_rows)
    assert grouped.default_config(tiny_rows.dgrad()) == Config("packed", 8, native.BACKWARD + "conv",
                                                               packed_by="native")
    strided = replace(p, stride=(2, 2))
    assert grouped.default_config(strided) == Config("packed", 4, packed_by="native")
    regnet = make_problem((64, 28, 28, 168), (168, 3, 3, 24), padding=1, groups=7, dtype=torch.bfloat16,
                          device="cuda")
    assert grouped.default_config(regnet) == grouped.rows_config(regnet)  # groups that do not pack
    assert grouped.lanes_padded(regnet.wgrad()) and not grouped.lanes_padded(p.wgrad())
    assert grouped.default_config(regnet.wgrad()).kernel == "direct"  # 24 wide: lanes padded to 32
    assert grouped.default_config(replace(regnet, stride=(2, 2))).kernel == "direct"
    large = make_problem((32, 56, 56, 128), (128, 31, 31, 1), padding=15, groups=128, dtype=torch.bfloat16,
                         device="cuda")  # 961 taps: more than the rows kernel unrolls
    assert all(grouped.default_config(q).kernel != "rows" for q in (large, large.dgrad(), large.wgrad()))
    narrow = make_problem((256, 56, 56, 6), (6, 3, 3, 2), padding=1, groups=3, dtype=torch.bfloat16,
                          device="cuda")
    assert grouped.default_config(narrow) == Config("packed", 3, packed_by="native")  # 6 wide: all three
    # a forward the host would wait on: the direct kernel, whose bound launch is issued fastest
    tiny = replace(narrow, x_shape=(2, 8, 8, 6))
    assert (grouped.host_bound(tiny) and not grouped.host_bound(narrow)
            and not grouped.host_bound(tiny.dgrad()))
    assert grouped.default_config(tiny) == Config(block_g=8, block_p=128, tile_w=8)
    assert grouped.default_config(tiny.dgrad()).packed_by == "native"


# Stride-1 2-D problems the rows kernel takes: 4x4 groups in whole 16-lane blocks, groups of 3 in
# and 5 out (lanes padded, a partial block), flip, asymmetric padding with a crop, a kernel of 5
# rows, and rows wider than one 16-column tile.
ROWS_CASES = {
    "resnext_4x4": ((2, 6, 7, 32), (32, 3, 3, 4), {"padding": 1, "groups": 8}),
    "g3_3x5": ((2, 8, 6, 9), (15, 3, 2, 3), {"padding": 2, "groups": 3}),
    "g2_8x8_flip": ((1, 5, 6, 16), (16, 2, 3, 8), {"padding": 1, "groups": 2, "flip": True}),
    "g6_crop": ((1, 7, 9, 24), (24, 3, 3, 4), {"padding": ([1, 0], [2, -1]), "groups": 6}),
    "k5x3_wide": ((1, 9, 40, 32), (32, 5, 3, 4), {"padding": ([2, 1], [1, 1]), "groups": 8}),
}
ROWS_CONFIGS = {
    "default": None,  # grouped.rows_config(p): strips sized to the GPU, one 64-column tile
    "strips_of_2": 2,
    "narrow_tiles_2x_groups": Config("rows", block_g=8, tile_w=16, strip=3, num_stages=3),
    # a partial block of images
    "images_side_by_side": Config("rows", tile_w=8, images=4, strip=3, num_stages=3),
}


@pytest.mark.parametrize("config", ROWS_CONFIGS.values(), ids=ROWS_CONFIGS.keys())
@pytest.mark.parametrize("pass_", ["fwd", "dgrad", "wgrad"])
@pytest.mark.parametrize("case", ROWS_CASES.values(), ids=ROWS_CASES.keys())
def test_rows_kernel_matches_reference(case, pass_, config):
    x, w, args = case
    for dtype in (torch.float32, torch.bfloat16):
        p = for_pass(make_problem(x, w, dtype=dtype, device=DEVICE, **args), pass_)
        assert grouped.rows_reason(p) is None
        forced = config if isinstance(config, Config) else grouped.rows_config(p, config or 0)
        report = testing.check("grouped", p, seed=len(x), config=forced)
        assert report.ok, f"{forced} on {p}: {report}"
        a, b = testing.random_operands(p, 2, device=DEVICE)
        out = prepared_call(grouped, p, forced)(a, b)  # its bound launch, as a cached call runs it
        testing.assert_close(out, testing.reference_result(p, a, b), testing.tolerance(p),
                             f"prepared {forced}")


SEVERAL_COLUMNS = [pytest.param(case, 2, id=f"{name}-2") for name, case in ROWS_CASES.items()] + [
    pytest.param(ROWS_CASES[name], 3, id=f"{name}-3") for name in ("g3_3x5", "k5x3_wide")]


@pytest.mark.parametrize("pass_", ["fwd", "dgrad"])
@pytest.mark.parametrize("case,cols", SEVERAL_COLUMNS)
def test_rows_kernel_with_several_columns_a_lane(case, cols, pass_):
    """Each lane computes ``cols`` consecutive output columns from K2 + cols - 1 shared input
    tiles (the default for 4-wide groups over rows at least 56 wide: rows_config); the last
    lane's columns past the row are masked."""
    x, w, args = case
    for dtype in (torch.float32, torch.bfloat16):
        p = for_pass(make_problem(x, w, dtype=dtype, device=DEVICE, **args), pass_)
        config = Config("rows", tile_w=4, images=2, strip=3, num_stages=3, cols=cols)
        report = testing.check("grouped", p, seed=cols, config=config)
        assert report.ok, f"{config} on {p}: {report}"
    a, b = testing.random_operands(p, 2, device=DEVICE)
    out = prepared_call(grouped, p, config)(a, b)  # its bound launch, as a cached call runs it
    testing.assert_close(out, testing.reference_result(p, a, b), testing.tolerance(p), f"prepared {config}")


def test_rows_kernel_two_columns_a_lane_by_default_on_4_wide_groups_over_wide_rows():
    def config(x_shape, w_shape, groups, pass_="fwd"):
        p = for_pass(make_problem(x_shape, w_shape, padding=1, groups=groups, dtype=torch.bfloat16,
                                  device=DEVICE), pass_)
        return grouped.rows_config(p)

    g32 = config((64, 56, 56, 128), (128, 3, 3, 4), 32)  # grouped3x3_g32: 28 lanes of pairs, 2 images
    assert (g32.cols, g32.tile_w, g32.images) == (2, 32, 2)
    assert config((64, 56, 56, 128), (128, 3, 3, 4), 32, "dgrad").cols == 2
    assert config((64, 56, 56, 128), (128, 3, 3, 4), 32, "wgrad").cols == 1  # its own kernel
    assert config((64, 28, 28, 128), (128, 3, 3, 4), 32).cols == 1  # narrower rows
    assert config((64, 56, 56, 256), (256, 3, 3, 8), 32).cols == 1  # wider groups
    p = make_problem((1, 6, 7, 16), (16, 3, 3, 4), padding=1, groups=4, dtype=torch.float32, device=DEVICE)
    with pytest.raises(ValueError, match="one output column a lane"):
        testing.check("grouped", p.wgrad(), seed=0, config=Config("rows", cols=2))


def test_rows_kernel_vectors_where_channels_are_not_multiples_of_16():
    """The rows kernels are told the power of two dividing the position strides (ALIGN; Triton
    learns divisibility only by 16): on the H200 RegNetX-1.6GF's 72 channels in 24-wide groups
    at 56x56 ran 146 us forward before, 65 after (PyTorch's 173, packed 125); ALIGN is 1 where
    16 divides them (one compiled kernel, as before). ROWS_CASES' g6_crop (24 channels) runs it."""
    def align(x_shape, w_shape, groups, pass_):
        p = for_pass(make_problem(x_shape, w_shape, padding=1, groups=groups, dtype=torch.bfloat16,
                                  device=DEVICE), pass_)
        config = grouped.rows_config(p)
        a, b = testing.random_operands(p, 0, device=DEVICE)
        out = torch.empty(p.result_shape, dtype=p.dtype, device=DEVICE)
        views = p.views(a, b, out)
        if pass_ == "wgrad":
            x, dy, _, _ = p.wgrad_natural(*views)
            ws = torch.empty(grouped._rows_workspace(p, config, x.device))
            return grouped._rows_wgrad_launch(p, x, dy, ws, config)[3]["ALIGN"]
        return grouped._rows_launch(p, *views, config)[3]["ALIGN"]

    assert [align((2, 6, 7, 72), (72, 3, 3, 24), 3, pass_)
            for pass_ in ("fwd", "dgrad", "wgrad")] == [8, 8, 8]
    assert align((2, 6, 7, 20), (20, 3, 3, 4), 5, "fwd") == 4
    assert align((2, 6, 7, 32), (32, 3, 3, 4), 8, "fwd") == 1


def test_rows_kernel_refuses_what_it_does_not_walk():
    p = make_problem((1, 6, 7, 16), (16, 3, 3, 4), padding=1, groups=4, dtype=torch.float32, device=DEVICE)
    assert all(grouped.rows_reason(q) is None for q in (p, p.dgrad(), p.wgrad()))
    nine = replace(p, w_shape=(16, 9, 9, 4), padding_lo=(4, 4), padding_hi=(4, 4))  # 81 taps, unrolled
    others = {
        "stride": replace(p, stride=(1, 2)),
        "stride's weight gradient": replace(p, stride=(2, 1)).wgrad(),
        "kernel dilation": replace(p, kernel_dilation=(2, 1)),
        "input dilation": replace(p, input_dilation=(2, 2)),
        "1-D": make_problem((1, 7, 16), (16, 3, 4), padding=1, groups=4, dtype=torch.float32, device=DEVICE),
        "a 9x9 kernel": nine,
        "a 9x9 kernel's weight gradient": nine.wgrad(),
    }
    for what, q in others.items():
        reason = grouped.rows_reason(q)
        assert reason and reason.startswith("rows kernel"), what
        with pytest.raises(ValueError, match="rows kernel"):
            testing.check("grouped", q, seed=0, config=grouped.rows_config(q))
