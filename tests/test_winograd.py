"""Winograd beyond the shared case list: exact transform matrices, both tile sizes on every
argument kind it takes (forward and input gradient, every dtype), the error bound asserted per
dtype, what it refuses and why, and forcing it through the public API."""

import random
from fractions import Fraction

import pytest
import torch
from cases import DEVICE, for_pass
from hypothesis import given, settings
from hypothesis import strategies as st

import ndconv
from ndconv import planner, testing
from ndconv.algorithms import winograd
from ndconv.algorithms.winograd import TRANSFORMS, Config

pytestmark = pytest.mark.usefixtures("full_fp32")  # the fp32 bounds are for exact products
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# small tiles and blocks, so that the interpreter runs several programs per kernel
SMALL = {m: Config(m, 16, 16, 16, 4, 2, block_t=8, block_c=16) for m in TRANSFORMS}

CASES = [
    testing.Case("pad1", (1, 5, 6, 16), (16, 3, 3, 16), dict(padding=1)),
    testing.Case("valid_batch2_partial_tiles", (2, 9, 7, 16), (16, 3, 3, 16), dict()),
    testing.Case("asymmetric", (1, 6, 7, 16), (16, 3, 3, 16), dict(padding=([0, 2], [2, 1]))),
    testing.Case("negative", (2, 8, 7, 16), (16, 3, 3, 16), dict(padding=([-1, 1], [1, -2]))),
    testing.Case("wide_pad", (1, 4, 5, 16), (16, 3, 3, 16), dict(padding=3)),
    testing.Case("flip", (1, 7, 6, 16), (16, 3, 3, 16), dict(padding=([1, 2], [1, 0]), flip=True)),
    testing.Case("groups2", (2, 5, 5, 32), (32, 3, 3, 16), dict(padding=1, groups=2)),
    testing.Case("c24_o40", (1, 6, 5, 24), (40, 3, 3, 24), dict(padding=([2, 1], [0, 1]))),
]


@pytest.mark.parametrize("m", sorted(TRANSFORMS))
def test_transforms_are_exact(m):
    """A^T [(G g) * (B^T d)] is the correlation of d with g, exactly, and B^T and A^T are dyadic
    (the kernels apply them in fp32 without rounding the constants)."""
    t = TRANSFORMS[m]
    A = m + 2
    assert len(t.AT) == m and len(t.G) == len(t.BT) == A
    rng = random.Random(m)
    for _ in range(20):
        d = [Fraction(rng.randint(-99, 99), rng.randint(1, 9)) for _ in range(A)]
        g = [Fraction(rng.randint(-99, 99), rng.randint(1, 9)) for _ in range(3)]
        Gg = [sum(a * b for a, b in zip(row, g)) for row in t.G]
        Bd = [sum(a * b for a, b in zip(row, d)) for row in t.BT]
        y = [sum(a * u * v for a, u, v in zip(row, Gg, Bd)) for row in t.AT]
        assert y == [sum(g[k] * d[i + k] for k in range(3)) for i in range(m)]
    for name in ("AT", "BT"):
        assert all(Fraction(float(v)) == v for row in getattr(t, name) for v in row)
    assert max(sum(abs(Fraction(v)) for v in row) for row in t.BT) ** 2 <= 4  # |V| <= 4 max|d|


def _params():
    """Every case and pass in fp32; in the half types a few (the interpreter is slow)."""
    out = []
    for case in CASES:
        for pass_ in ("fwd", "dgrad"):
            for dtype in DTYPES:
                if dtype == torch.float32 or case.name in ("pad1", "negative", "groups2"):
                    out.append(pytest.param(case, pass_, dtype, id=f"{case.name}-{pass_}-{str(dtype)[6:]}"))
    return out


@pytest.mark.parametrize("case,pass_,dtype", _params())
def test_matches_reference_within_its_bound(case, pass_, dtype):
    """Both tile sizes, on padding of every sign, flip, groups, batches and partial tiles; the
    input gradient of a 3x3 stride-1 convolution is again one (flip toggled, pads 2 - lo)."""
    p = for_pass(case.problem(dtype=dtype, device=DEVICE), pass_)
    ok, reason = winograd.supports(p)
    assert ok, reason
    for m, config in SMALL.items():
        report = testing.check("winograd", p, seed=m, config=config)
        bound = winograd.error_bound(p, config)
        assert report.n_nonfinite == 0 and report.max_rel_err <= bound, \
            f"F({m}) on {p}: {report}, bound {bound:.1e}"


def test_dgrad_of_a_3x3_stride1_conv_is_winograd_shaped():
    p = CASES[2].problem(device=DEVICE)
    q = p.dgrad()
    assert (q.kernel, q.stride, q.input_dilation, q.flip) == ((3, 3), (1, 1), (1, 1), True)
    assert q.padding_lo == (2, 0) and q.out_spatial == p.in_spatial
    assert winograd.supports(q)[0]


# measured max errors are about half of these (module docstring); the bounds are what is promised
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
def test_error_bound_per_dtype(dtype):
    """The documented error of each tile size, asserted over seeds and channel counts:
    F(2x2, 3x3) within testing.TOL for every dtype (so it is the half-precision default),
    F(4x4, 3x3) within TOL for fp32 and within its looser documented bound otherwise."""
    worst = {m: 0.0 for m in TRANSFORMS}
    for seed, (c, o) in enumerate([(16, 16), (32, 16), (64, 32)]):
        p = testing.Case("e", (1, 8, 8, c), (o, 3, 3, c), dict(padding=1)).problem(dtype=dtype, device=DEVICE)
        for m, config in SMALL.items():
            report = testing.check("winograd", p, seed=seed, config=config)
            bound = winograd.error_bound(p, config)
            assert report.n_nonfinite == 0 and report.max_rel_err <= bound, f"F({m}) {p}: {report}"
            worst[m] = max(worst[m], report.max_rel_err)
    tol = testing.TOL[dtype]
    assert worst[2] <= tol
    if dtype == torch.float32:
        assert worst[4] <= tol
    else:  # the reason the default is F(2x2, 3x3) here
        assert tol < worst[4] <= winograd.F4_TOL_FACTOR[dtype] * tol
        assert winograd.default_config(p).m == 2
    print(f"{str(dtype)[6:]}: max rel err F(2x2,3x3) {worst[2]:.2e}, F(4x4,3x3) {worst[4]:.2e} "
          f"(TOL {tol:.0e})")


@settings(max_examples=12, deadline=None)
@given(
    n=st.integers(1, 2), h=st.integers(1, 9), w=st.integers(1, 9), groups=st.integers(1, 2),
    lo=st.tuples(st.integers(-2, 3), st.integers(-2, 3)),
    hi=st.tuples(st.integers(-2, 3), st.integers(-2, 3)),
    flip=st.booleans(), m=st.sampled_from(sorted(TRANSFORMS)), pass_=st.sampled_from(["fwd", "dgrad"]),
)
def test_random_problems(n, h, w, groups, lo, hi, flip, m, pass_):
    try:
        p = testing.Case("r", (n, h, w, 16 * groups), (16 * groups, 3, 3, 16),
                         dict(padding=(list(lo), list(hi)), groups=groups, flip=flip)).problem(device=DEVICE)
    except ValueError:  # output would be empty, or the padding crops the whole input
        return
    p = for_pass(p, pass_)
    assert winograd.supports(p)[0]
    report = testing.check("winograd", p, seed=h * w, config=SMALL[m])
    assert report.ok, f"F({m}) on {p}: {report}"


@pytest.mark.parametrize("x,w,args,why", [
    ((1, 6, 6, 16), (16, 3, 3, 16), dict(padding=1), "weight gradient"),
    ((1, 8, 16), (16, 3, 16), dict(padding=1), "2-D"),
    ((1, 4, 4, 4, 16), (16, 3, 3, 3, 16), dict(padding=1), "2-D"),
    ((1, 8, 8, 16), (16, 5, 5, 16), dict(padding=2), "3x3 kernels"),
    ((1, 8, 8, 16), (16, 3, 1, 16), dict(padding=1), "3x3 kernels"),
    ((1, 8, 8, 16), (16, 3, 3, 16), dict(stride=2, padding=1), "stride"),
    ((1, 8, 8, 16), (16, 3, 3, 16), dict(kernel_dilation=2, padding=2), "dilation"),
    ((1, 8, 8, 16), (16, 3, 3, 16), dict(input_dilation=2, padding=2, flip=True), "dilation"),
    ((1, 8, 8, 8), (16, 3, 3, 8), dict(padding=1), "tensor-core"),
    ((1, 8, 8, 16), (8, 3, 3, 16), dict(padding=1), "tensor-core"),
    ((1, 8, 8, 32), (32, 3, 3, 4), dict(padding=1, groups=8), "tensor-core"),
])
def test_refuses_with_a_reason(x, w, args, why):
    p = testing.Case("r", x, w, args).problem(device=DEVICE)
    if why == "weight gradient":
        p = p.wgrad()
    ok, reason = winograd.supports(p)
    assert not ok and why in reason, reason


def test_refuses_float64_and_strided_gradients():
    p = CASES[0].problem(dtype=torch.float64, device=DEVICE)
    ok, reason = winograd.supports(p)
    assert not ok and "float64" in reason
    strided = testing.Case("s", (1, 8, 8, 16), (16, 3, 3, 16), dict(stride=2, padding=1))
    strided = strided.problem(device=DEVICE)
    ok, reason = winograd.supports(strided.dgrad())  # input dilation 2
    assert not ok and "dilation" in reason


def test_configs_cover_both_tiles_and_start_with_the_default():
    for dtype in DTYPES:
        p = CASES[6].problem(dtype=dtype, device=DEVICE)
        space = winograd.configs(p)
        assert space[0] == winograd.default_config(p) and len(space) == len(set(space))
        assert {c.m for c in space} == set(TRANSFORMS)
        assert space[0].m == (4 if dtype == torch.float32 else 2)
        assert all(c.block_n <= 32 for c in space)  # 16 output channels per group: no wide tiles


def test_batch_chunks_under_the_workspace_limit(monkeypatch):
    """V and M for one image exceed the limit: images go one at a time, same result."""
    monkeypatch.setenv("NDCONV_WORKSPACE_LIMIT", "1000")
    p = CASES[1].problem(device=DEVICE)  # batch 2
    for q in (p, p.dgrad()):
        assert testing.check("winograd", q, config=SMALL[4]).ok


def test_forced_through_the_api_with_the_input_gradient():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 6, 5, 16, generator=g).to(DEVICE).requires_grad_(True)
    w = (torch.randn(24, 3, 3, 16, generator=g) / 12).to(DEVICE)
    y = ndconv.conv2d(x, w, padding=1, algorithm="winograd")
    dy = torch.randn(y.shape, generator=g).to(DEVICE)
    (dx,) = torch.autograd.grad(y, (x,), dy)
    xr = x.detach().requires_grad_(True)
    yr = ndconv.conv2d(xr, w, padding=1, algorithm="reference")
    (dxr,) = torch.autograd.grad(yr, (xr,), dy)
    testing.assert_close(y, yr, 1e-5)
    testing.assert_close(dx, dxr, 1e-5)
    y = ndconv.conv2d(x, w.requires_grad_(True), padding=1, algorithm="winograd")
    with pytest.raises(ValueError, match="winograd.*weight gradient"):
        torch.autograd.grad(y.sum(), (w,))


def test_not_preferred_until_measured():
    assert all("winograd" not in order for order in planner.PREFERENCE.values())
