"""The shared case list (ndconv.testing.CASES) as pytest params, and a hypothesis strategy that
draws any valid conv_general problem of tiny size."""

import pytest
import torch
from hypothesis import assume
from hypothesis import strategies as st

from ndconv.api import make_problem
from ndconv.testing import CASES

CASE_PARAMS = [pytest.param(c, id=c.name) for c in CASES]
PASSES = ("fwd", "dgrad", "wgrad")


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
