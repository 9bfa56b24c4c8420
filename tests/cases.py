"""The shared case list (ndconv.testing.CASES) as pytest params, and a hypothesis strategy that
draws any valid conv_general problem of tiny size; operands poisoned with an inf or NaN."""

import pytest
import torch
from hypothesis import assume
from hypothesis import strategies as st

from ndconv import testing
from ndconv.api import make_problem
from ndconv.testing import CASES

CASE_PARAMS = [pytest.param(c, id=c.name) for c in CASES]
PASSES = ("fwd", "dgrad", "wgrad")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # where Triton kernels run (on CPUs, interpreted)


def for_pass(p, pass_):
    return {"fwd": p, "dgrad": p.dgrad() if pass_ == "dgrad" else None,
            "wgrad": p.wgrad() if pass_ == "wgrad" else None}[pass_]


@st.composite
def conv_args(draw, max_ndim=3):
    """(x_shape, w_shape, kwargs) of a valid tiny conv_general call."""
    D = draw(st.integers(1, max_ndim))
    groups = draw(st.integers(1, 3))
    cg, og = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    n = draw(st.integers(1, 2))
    small = st.integers(1, 3)
    spatial = draw(st.lists(st.integers(1, 7), min_size=D, max_size=D))
    kernel = draw(st.lists(st.integers(1, 4), min_size=D, max_size=D))
    kwargs = dict(
        stride=draw(st.lists(small, min_size=D, max_size=D)),
        padding=(draw(st.lists(st.integers(-2, 3), min_size=D, max_size=D)),
                 draw(st.lists(st.integers(-2, 3), min_size=D, max_size=D))),
        kernel_dilation=draw(st.lists(small, min_size=D, max_size=D)),
        input_dilation=draw(st.lists(small, min_size=D, max_size=D)),
        groups=groups,
        flip=draw(st.booleans()),
    )
    x_shape = (n, *spatial, cg * groups)
    w_shape = (og * groups, *kernel, cg)
    try:
        make_problem(x_shape, w_shape, dtype=torch.float64, **kwargs)
    except ValueError:
        assume(False)
    return x_shape, w_shape, kwargs


def poisoned(p, a, b, operand, value, seed):
    """Copies of operands a and b of pass ``p`` with ``value`` in one element of ``operand`` that
    some output reads (negative padding and strides leave some unread), and the outputs that
    read it (the reference over the non-finite mask)."""
    n = (a if operand == "a" else b).numel()
    for start in range(n):
        a2, b2 = a.clone(), b.clone()
        (a2 if operand == "a" else b2).view(-1)[(seed * 7919 + start) % n] = value
        masks = [(~t.isfinite()).double() for t in (a2, b2)]
        ones = [torch.ones_like(t, dtype=torch.float64) for t in (a2, b2)]
        reads = (testing.reference_result(p, masks[0], ones[1])
                 + testing.reference_result(p, ones[0], masks[1])) > 0
        if reads.any():
            return a2, b2, reads
    raise AssertionError(f"no output of {p} reads operand {operand}")
