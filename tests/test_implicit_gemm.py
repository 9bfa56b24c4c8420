"""The Triton implicit GEMM beyond the shared case list: every config family, split-K, forcing it
through the public API (gradients included), what it refuses and why, and 64-bit offsets."""

import pytest
import torch
from cases import CASE_PARAMS, PASSES, for_pass

import ndconv
from ndconv import testing
from ndconv.algorithms import implicit_gemm
from ndconv.algorithms.implicit_gemm import Config
from ndconv.algorithms.triton_support import needs_int64

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.mark.parametrize("pass_", PASSES)
@pytest.mark.parametrize("case", CASE_PARAMS)
def test_other_configs(case, pass_):
    """The other reduction layout (packed <-> per tap), tiny tiles and a forced split-K."""
    p = for_pass(case.problem(dtype=torch.float32, device=DEVICE), pass_)
    default = implicit_gemm.default_config(p)
    for config in (Config(16, 16, 16, 4, 2, not default.packed, 3), Config(32, 64, 32, 4, 3, default.packed, 2)):
        report = testing.check("implicit_gemm", p, seed=3, config=config)
        assert report.ok, f"{config} on {p}: {report}"


def test_config_space_is_pruned_and_contains_the_default():
    p = testing.CASES[6].problem(device=DEVICE)  # O = 4: no wide tiles
    space = implicit_gemm.configs(p)
    assert space[0] == implicit_gemm.default_config(p) and len(space) == len(set(space)) >= 3
    assert all(c.block_n <= 32 for c in space[1:])
    wide = implicit_gemm.configs(testing.Case("wide", (1, 8, 8, 64), (256, 3, 3, 64), {}).problem(device=DEVICE))
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


def test_gpu_defaults():
    """On CUDA the direct kernel takes depthwise problems, block-diagonal packing other small
    groups and the implicit GEMM everything else."""
    from ndconv import planner

    dense = testing.CASES[6].problem(device="cuda")  # 2d_3x3
    depthwise = next(c for c in testing.CASES if c.name == "2d_dw3x3").problem(device="cuda")
    grouped = next(c for c in testing.CASES if c.name == "2d_grouped_g4").problem(device="cuda")
    if torch.cuda.is_available():
        assert planner.plan(dense).name == "implicit_gemm"
        assert planner.plan(depthwise).name == "depthwise"
        assert planner.plan(grouped).name == "grouped"
    else:
        assert planner.PREFERENCE["cuda"][:4] == ("toeplitz", "depthwise", "grouped", "implicit_gemm")


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
