"""The GPU-only launch path of a prepared plan (BoundLaunch's direct launch, _RawLaunch) with
stand-ins for Triton's compiled kernel and C launcher: CI has no GPU and the interpreter never
takes this path, so its argument handling is checked here."""

import types

import pytest
import torch
from cases import DEVICE
from triton.knobs import HookChain
from triton.tools.tensor_descriptor import TensorDescriptor

from ndconv.algorithms.triton_support import _hooked, _RawLaunch, sum_partials, swap_channels


def test_launch_hooks_count_only_when_set():
    """Triton 3.6 keeps an empty HookChain by default: that is no hook (the direct launch
    runs); a chain with a hook, or a plain function (older Tritons), is one."""
    chain = HookChain()
    assert not _hooked(chain) and not _hooked(None)
    chain.add(print)
    assert _hooked(chain) and _hooked(print)


def _stand_ins(n_descriptors=2):
    """A compiled kernel whose launcher wraps a recording C launcher the way Triton 3.6's
    CudaLauncher does (a closure), and an encoder that counts its calls."""
    launched, encoded = [], []

    def c_launch(*args):  # stands in for the compiled C launcher (a builtin in Triton)
        launched.append(args)

    def encode(descriptor, meta):
        encoded.append((descriptor.base.data_ptr(), meta))
        return [("tensormap", descriptor.base.data_ptr()), *descriptor.shape, *descriptor.strides]

    run = types.SimpleNamespace(launch_cooperative_grid=False, launch_pdl=False, global_scratch_size=0,
                                profile_scratch_size=0)
    compiled = types.SimpleNamespace(function=1234, packed_metadata=("meta",), run=run,
                                     metadata=types.SimpleNamespace(tensordesc_meta=[{"i": i} for i in
                                                                                     range(n_descriptors)]))
    return compiled, run, c_launch, encode, launched, encoded


def test_raw_launch_encodes_each_descriptor_once_per_base_and_expands_it_in_place():
    x, w, y = torch.zeros(4, 8), torch.zeros(2, 8), torch.zeros(4, 2)
    x_desc, w_desc = TensorDescriptor(x, [4, 8], [8, 1], [2, 8]), TensorDescriptor(w, [2, 8], [8, 1], [2, 8])
    values = [x_desc, w_desc, y, 7, True]  # the kernel's arguments, descriptors first
    descriptors = ((0, 0, x_desc), (1, 1, w_desc))  # (argument index, operand index, template)
    compiled, run, c_launch, encode, launched, encoded = _stand_ins()
    raw = _RawLaunch(c_launch, encode, run, descriptors, compiled.metadata.tensordesc_meta)

    for _ in range(3):  # the same operands: encoded once
        raw((2, 1, 1), 99, compiled, list(values), (x, w, y))
    assert len(encoded) == 2 and len(launched) == 3
    args = launched[-1]
    assert args[:13] == (2, 1, 1, 99, 1234, False, False, None, None, ("meta",), None, None, None)
    assert args[13:] == (("tensormap", x.data_ptr()), 4, 8, 8, 1, ("tensormap", w.data_ptr()), 2, 8, 8, 1,
                         y, 7, True)

    x2 = torch.ones(4, 8)  # a new input: its descriptor is encoded for its own address
    raw((2, 1, 1), 99, compiled, list(values), (x2, w, y))
    assert encoded[-1] == (x2.data_ptr(), {"i": 0}) and len(encoded) == 3
    assert launched[-1][13] == ("tensormap", x2.data_ptr())


def test_raw_launch_keeps_few_encodings():
    x = torch.zeros(4, 8)
    desc = TensorDescriptor(x, [4, 8], [8, 1], [2, 8])
    compiled, run, c_launch, encode, launched, encoded = _stand_ins(1)
    raw = _RawLaunch(c_launch, encode, run, ((0, 0, desc),), compiled.metadata.tensordesc_meta)
    buffers = [torch.zeros(4, 8) for _ in range(_RawLaunch._MAX_BASES + 3)]
    for b in buffers:
        raw((1, 1, 1), 0, compiled, [desc], (b,))
    assert len(raw.encoded[0]) <= _RawLaunch._MAX_BASES
    assert launched[-1][13] == ("tensormap", buffers[-1].data_ptr())


def test_raw_launch_takes_the_c_launcher_from_tritons_wrapper():
    x = torch.zeros(4, 8)
    desc = TensorDescriptor(x, [4, 8], [8, 1], [2, 8])
    compiled, run, *_ = _stand_ins(1)

    def wrap(launcher):  # the shape of triton.backends.nvidia.driver.wrap_handle_tensordesc
        def inner(*args):
            return launcher(*args)
        return inner

    run.launch = wrap(len)  # a builtin, as the compiled C launcher is
    raw = _RawLaunch.of(compiled, ((0, 0, desc),))
    assert raw is not None and raw.launch is len


def test_raw_launch_is_refused_where_the_launcher_is_not_triton_36s():
    x = torch.zeros(4, 8)
    desc = TensorDescriptor(x, [4, 8], [8, 1], [2, 8])
    compiled, run, *_ = _stand_ins(1)
    run.launch = lambda *args: None  # no C launcher in its closure
    assert _RawLaunch.of(compiled, ((0, 0, desc),)) is None
    assert _RawLaunch.of(compiled, ()) is None  # no descriptors: Triton's own launch is as cheap
    run.global_scratch_size = 64
    assert _RawLaunch.of(compiled, ((0, 0, desc),)) is None  # scratch memory to allocate per launch


@pytest.mark.parametrize("splits", [1, 5, 37])
@pytest.mark.parametrize("transpose", [False, True])
def test_sum_partials_sums_in_a_fixed_order_and_rounds_once(splits, transpose):
    """The weight gradients' partial sums: summed over the first axis in float32, rounded once to
    the result's dtype (rounded to nearest even, in the interpreter too), in the workspace's
    element order or transposed; a result that is not contiguous gets the same values; the same
    workspace gives the same bits every time."""
    partial = torch.randn(splits, 6, 35, generator=torch.Generator().manual_seed(splits)).to(DEVICE)
    expected = partial.double().sum(0)
    expected = (expected.t() if transpose else expected).reshape(-1)
    out = torch.full((expected.numel(),), float("nan"), dtype=torch.bfloat16, device=DEVICE)
    sum_partials(partial, out, transpose=transpose)
    half_ulp = torch.ldexp(torch.ones_like(expected), torch.frexp(expected).exponent - 9)  # bfloat16's
    assert ((out.double() - expected).abs() <= half_ulp * 1.001 + 1e-6).all()  # rounded once, to nearest
    again = torch.empty_like(out)
    sum_partials(partial, again, transpose=transpose)
    assert torch.equal(out.view(torch.int16), again.view(torch.int16))
    strided = torch.full((2 * expected.numel(),), float("nan"), dtype=torch.float32, device=DEVICE)[::2]
    sum_partials(partial, strided, transpose=transpose)
    torch.testing.assert_close(strided, expected.float(), rtol=1e-6, atol=1e-5)
    with pytest.raises(ValueError, match="must be contiguous with the elements of one of the partial sums"):
        sum_partials(partial, out[1:])


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize(("shape", "strided"), [((1, 70, 3, 65), False), ((2, 5, 9, 3), False),
                                                ((3, 4, 16, 8), True), ((1, 1, 1, 1), False)])
def test_swap_channels_swaps_the_channel_axes_and_reverses_the_taps(shape, strided, reverse):
    """The weight relayout of PyTorch's transposed convolutions: [G, A, T, B] -> [G, B, T, A]
    exactly (a copy), the T axis reversed when asked, from contiguous and strided sources,
    across tile edges (70 and 65 against 64-wide tiles); the launch, bound once per geometry,
    is reused with new tensors."""
    g = torch.Generator().manual_seed(sum(shape))
    for _ in range(2):  # the second call runs the bound launch on fresh tensors
        src = torch.randn(shape, generator=g).to(DEVICE, torch.bfloat16)
        if strided:  # every other element of a wider source, T and B axes swapped in memory
            wide = (shape[0], shape[1], shape[3], 2 * shape[2])
            src = torch.randn(wide, generator=g).to(DEVICE, torch.bfloat16)
            src = src[..., ::2].transpose(2, 3)
        expected = (src.flip(2) if reverse else src).permute(0, 3, 2, 1)
        out = swap_channels(src, reverse)
        assert out.is_contiguous() and out.shape == expected.shape
        assert torch.equal(out, expected)

