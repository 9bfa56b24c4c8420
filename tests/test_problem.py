"""ConvProblem: sizes, costs, gradient problems, encoding."""

import math

import pytest
import torch
from cases import CASE_PARAMS

from ndconv.api import make_problem
from ndconv.problem import ConvProblem


def test_output_shape_follows_mlx():
    p = make_problem((2, 10, 9, 3), (4, 3, 2, 3), stride=(2, 1), padding=([1, -1], [2, 0]),
                     kernel_dilation=(2, 1), input_dilation=(1, 3))
    # axis 0: (10 + 1 + 2 - 5) // 2 + 1 = 5; axis 1: dilated (9-1)*3+1 = 25, crop 1 -> 22, span 2 -> 21
    assert p.out_shape == (2, 5, 21, 4)
    assert p.padding_lo == (1, -3)  # a crop of one undilated element is 3 dilated positions


def test_flops_count_useful_taps_only():
    dense = make_problem((1, 8, 8, 4), (6, 3, 3, 4))  # no padding: every tap is real
    assert dense.flops == 2 * 1 * 6 * 6 * 6 * 9 * 4
    padded = make_problem((1, 8, 8, 4), (6, 3, 3, 4), padding=1)
    assert padded.flops == 2 * 6 * 4 * (8 * 3 - 2) ** 2
    transposed = make_problem((1, 4, 4, 2), (2, 2, 2, 2), input_dilation=2, padding=1, flip=True)
    # each output position of a stride-2 transposed 2x2 conv touches exactly one real tap per axis
    assert transposed.flops == 2 * 2 * 2 * (transposed.out_spatial[0]) ** 2 * 1


def test_min_bytes_and_gemm_sizes():
    p = make_problem((2, 8, 8, 4), (6, 3, 3, 2), padding=1, groups=2, dtype=torch.bfloat16)
    assert p.min_bytes == 2 * (2 * 8 * 8 * 4 + 6 * 3 * 3 * 2 + 2 * 8 * 8 * 6)
    assert p.gemm_mnk == (2 * 64, 3, 9 * 2)


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_gradient_problems_have_the_operand_shapes(case):
    p = case.problem()
    d, w = p.dgrad(), p.wgrad()
    assert d.result_shape == p.x_shape and d.operand_shapes == (p.out_shape, p.w_shape)
    assert w.result_shape == p.w_shape and w.operand_shapes == (p.x_shape, p.out_shape)
    assert d.flops == p.flops == w.flops  # the same multiply-adds, reassociated
    assert (d.pass_, w.pass_) == ("dgrad", "wgrad")
    with pytest.raises(ValueError, match="needs a forward problem"):
        d.wgrad()


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_views_do_not_copy(case):
    p = case.problem()
    for q in (p, p.dgrad(), p.wgrad()):
        a_shape, b_shape = q.operand_shapes
        a, b, out = torch.empty(a_shape), torch.empty(b_shape), torch.empty(q.result_shape)
        x, w, y = q.views(a, b, out)
        assert (x.data_ptr() == a.data_ptr() and w.data_ptr() == b.data_ptr()
                and y.data_ptr() == out.data_ptr())
        G = q.groups
        assert x.shape == (*q.x_shape[:-1], G, q.c_per_group)
        assert w.shape == (G, q.o_per_group, *q.kernel, q.c_per_group)
        assert y.shape == (*q.out_shape[:-1], G, q.o_per_group)


@pytest.mark.parametrize("case", CASE_PARAMS)
def test_problems_are_hashable_and_encode_to_ints(case):
    p = case.problem(dtype=torch.float16)
    for q in (p, p.dgrad(), p.wgrad()):
        assert hash(q) == hash(ConvProblem.from_ints(q.to_ints(), torch.float16, "cpu"))
        assert ConvProblem.from_ints(q.to_ints(), torch.float16, "cpu") == q
        assert q.key() == q
    assert len({p, p.dgrad(), p.wgrad(), case.problem(dtype=torch.float32)}) == 4
    assert math.prod(p.out_shape) > 0 and str(p).startswith("fwd float16 cpu")
