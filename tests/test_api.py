"""The public functions: argument forms, dtypes, devices, zero sizes, layouts, forcing, explain,
torch.compile."""

import pytest
import torch
from test_reference import _oracle

import ndconv
from ndconv import planner


def _data(*shapes, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g, dtype=dtype) for s in shapes]


@pytest.mark.parametrize(
    "padding",
    [1, [1], [1, 2], ([1, 0], [2, 1]), [[0, 1], [2, 0]], ([-1, 1], [0, -1])],
    ids=["int", "one", "per-axis", "lo-hi-tuple", "lo-hi-list", "negative"],
)
def test_padding_forms(padding):
    x, w = _data((2, 6, 7, 3), (4, 3, 2, 3))
    y = ndconv.conv_general(x, w, padding=padding)
    torch.testing.assert_close(y, _oracle(x, w, dict(padding=padding)))


def test_length_one_sequences_broadcast():
    x, w = _data((1, 7, 7, 2), (2, 3, 3, 2))
    a = ndconv.conv_general(x, w, stride=[2], padding=[1], kernel_dilation=[1], input_dilation=[2])
    b = ndconv.conv_general(x, w, stride=2, padding=1, kernel_dilation=1, input_dilation=2)
    torch.testing.assert_close(a, b)


def test_numpy_integers_are_ints():
    np = pytest.importorskip("numpy")
    x, w = _data((1, 7, 7, 4), (6, 3, 3, 2))
    a = ndconv.conv_general(x, w, stride=np.int64(2), padding=[np.int32(1), 1], groups=np.int64(2))
    b = ndconv.conv_general(x, w, stride=2, padding=1, groups=2)
    torch.testing.assert_close(a, b)


@pytest.mark.parametrize(
    "args,same",
    [
        (dict(stride=[2, 1], padding=[[1, 0], [2, 1]], kernel_dilation=2),
         dict(stride=(2, 1), padding=([1, 0], [2, 1]), kernel_dilation=2)),
        (dict(stride=[2], padding=([1, 0], [2, 1]), input_dilation=[1, 2]),
         dict(stride=2, padding=([1, 0], [2, 1]), input_dilation=(1, 2))),
        (dict(padding=[1, 2], kernel_dilation=2), dict(padding=(1, 2), kernel_dilation=2)),
    ],
    ids=["lo-hi-array", "lo-hi-pair-of-arrays", "per-axis-and-0d"],
)
def test_numpy_arrays_are_sequences(args, same):
    """MLX's bindings read a NumPy array of ints as a sequence (a 0-d one as an int); so does
    ndconv, cached calls included, and an array of floats is refused as a list of them is."""
    np = pytest.importorskip("numpy")
    x, w = _data((1, 7, 8, 2), (3, 3, 2, 2))
    arrays = {k: np.array(v) for k, v in args.items()}
    if "input_dilation" in args:  # the pair form as a tuple of two arrays
        arrays["padding"] = tuple(np.array(v) for v in args["padding"])
    expected = ndconv.conv_general(x, w, **same)
    for _ in range(2):  # the second call takes the cached path
        torch.testing.assert_close(ndconv.conv_general(x, w, **arrays), expected, rtol=0, atol=0)
    with pytest.raises(ValueError, match=r"stride must be an int or a sequence of ints, got \[2.0, 1.0\]"):
        ndconv.conv_general(x, w, stride=np.array([2.0, 1.0]))


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="autocast on CUDA needs a GPU; CPU autocast runs everywhere"))])
def test_autocast_runs_in_its_lower_precision(device):
    """As PyTorch's convolutions do: float32 operands cast to the autocast dtype, float64 kept;
    gradients come back in the operands' own dtypes."""
    x, w = (t.float().to(device).requires_grad_(True) for t in _data((2, 6, 6, 4), (5, 3, 3, 4)))
    low = torch.bfloat16 if device == "cpu" else torch.float16
    with torch.autocast(device, dtype=low):
        y = ndconv.conv2d(x, w, padding=1)
        y64 = ndconv.conv2d(x.double(), w.double(), padding=1)
    assert y.dtype == low and y64.dtype == torch.float64
    ref = _oracle(x.detach().cpu().double(), w.detach().cpu().double(), dict(padding=1))
    torch.testing.assert_close(y.cpu().double(), ref, rtol=3e-2, atol=3e-2)
    y.float().sum().backward()
    assert x.grad.dtype == torch.float32 and w.grad.dtype == torch.float32
    assert ndconv.conv2d(x, w, padding=1).dtype == torch.float32  # outside autocast: as given


@pytest.mark.parametrize(
    "xd,wd,out",
    [
        (torch.float16, torch.float16, torch.float16),
        (torch.bfloat16, torch.float32, torch.float32),
        (torch.float32, torch.float64, torch.float64),
        (torch.bfloat16, torch.float16, torch.float32),
        (torch.float32, torch.int32, torch.float32),
        (torch.float16, torch.int64, torch.float16),
    ],
)
def test_dtype_promotion(xd, wd, out):
    x = torch.randn(1, 5, 5, 2).to(xd)
    w = torch.randint(-2, 3, (3, 3, 3, 2)).to(wd)
    y = ndconv.conv2d(x, w, padding=1)
    assert y.dtype == out
    ref = _oracle(x.double(), w.double(), dict(padding=1))
    torch.testing.assert_close(y.double(), ref, rtol=2e-2, atol=2e-2)


def test_half_results_accumulate_in_float32():
    """A long reduction in fp16 is as accurate as rounding its result allows."""
    x = torch.randn(1, 16, 512, dtype=torch.float16)
    w = (torch.randn(4, 3, 512) / 40).half()
    y = ndconv.conv1d(x, w, padding=1)
    ref = _oracle(x.double(), w.double(), dict(padding=1))
    assert ((y.double() - ref).abs().max() / ref.abs().max()) < 2e-3


@pytest.mark.parametrize("shape_x,shape_w", [((0, 5, 5, 4), (6, 3, 3, 4)), ((2, 5, 5, 4), (0, 3, 3, 4))])
def test_zero_size_batch_or_output_channels(shape_x, shape_w):
    x = torch.randn(shape_x, requires_grad=True)
    w = torch.randn(shape_w, requires_grad=True)
    y = ndconv.conv2d(x, w, padding=1)
    assert y.shape == (shape_x[0], 5, 5, shape_w[0])
    y.sum().backward()
    assert torch.equal(x.grad, torch.zeros_like(x)) and torch.equal(w.grad, torch.zeros_like(w))


def test_zero_input_channels_give_zeros():
    x = torch.randn(2, 5, 0)
    w = torch.randn(3, 2, 0)
    y = ndconv.conv1d(x, w)
    assert y.shape == (2, 4, 3) and torch.equal(y, torch.zeros_like(y))


def test_meta_tensors_give_shapes():
    """Meta tensors (shape inference, models built empty) have no autocast to consult: a call
    and both gradients give the shapes and dtypes the CPU gives, on the meta device."""
    args = dict(stride=2, padding=([1, -1], [0, 2]), input_dilation=2, groups=2, flip=True)
    found = {}
    for device in ("cpu", "meta"):
        operands = _data((2, 6, 6, 4), (4, 3, 3, 2), dtype=torch.float32)
        x, w = (t.to(device).requires_grad_(True) for t in operands)
        y = ndconv.conv_general(x, w, **args)
        y.sum().backward()
        found[device] = [(t.shape, t.dtype, t.device.type) for t in (y, x.grad, w.grad)]
    assert [f[:2] for f in found["meta"]] == [f[:2] for f in found["cpu"]]
    assert {f[2] for f in found["meta"]} == {"meta"}
    with torch.device("meta"), torch.no_grad():
        layer = ndconv.nn.ConvTranspose2d(4, 6, 3, stride=2)
        assert layer(torch.empty(1, 5, 5, 4)).shape == (1, 11, 11, 6)


def test_non_contiguous_inputs():
    x_base, w_base = _data((2, 3, 8, 7), (5, 4, 3, 3))
    x = x_base.permute(0, 2, 3, 1)[:, ::2]  # [2, 4, 7, 3], strided
    w = w_base.permute(0, 2, 3, 1)  # [5, 3, 3, 4] -> channels 4? keep C == 3
    w = w[:, :, :, :3]
    assert not x.is_contiguous() and not w.is_contiguous()
    y = ndconv.conv2d(x, w, padding=1)
    torch.testing.assert_close(y, _oracle(x.contiguous(), w.contiguous(), dict(padding=1)))


def test_inputs_are_not_modified():
    x, w = _data((2, 6, 6, 4), (4, 3, 3, 2))
    x0, w0 = x.clone(), w.clone()
    x.requires_grad_(True)
    w.requires_grad_(True)
    ndconv.conv_general(x, w, 2, ([1, -1], [0, 2]), 1, 2, 2, True).sum().backward()
    assert torch.equal(x.detach(), x0) and torch.equal(w.detach(), w0)


def test_algorithm_keyword_and_environment_force(monkeypatch):
    x, w = _data((1, 5, 5, 2), (2, 3, 3, 2))
    calls = []
    reference = planner.REGISTRY["reference"]
    original = reference.run
    monkeypatch.setattr(reference, "run", lambda *a: (calls.append(1), original(*a))[1])
    ndconv.conv2d(x, w, algorithm="reference")
    assert calls == [1]
    monkeypatch.setenv("NDCONV_ALGORITHM", "reference")
    ndconv.conv2d(x, w)
    assert calls == [1, 1]
    monkeypatch.setenv("NDCONV_ALGORITHM", "nope")
    with pytest.raises(ValueError, match="NDCONV_ALGORITHM: unknown algorithm 'nope'; valid: depthwise, "
                       "toeplitz, grouped, stem, implicit_gemm, winograd, native, cudnn, gemm, reference"):
        ndconv.conv2d(x, w)


def test_unknown_algorithm_keyword():
    x, w = _data((1, 5, 5, 2), (2, 3, 3, 2))
    with pytest.raises(ValueError, match="unknown algorithm 'fast'"):
        ndconv.conv2d(x, w, algorithm="fast")


def test_forcing_an_unsupporting_algorithm_says_why(monkeypatch):
    gemm = planner.REGISTRY["gemm"]
    monkeypatch.setattr(gemm, "supports", lambda p: (False, "gemm is on holiday"))
    x, w = _data((1, 5, 5, 2), (2, 3, 3, 2))
    with pytest.raises(ValueError, match="gemm is on holiday"):
        ndconv.conv2d(x, w, algorithm="gemm")


def test_explain_lists_every_algorithm_and_pass():
    e = ndconv.explain(torch.randn(2, 8, 8, 4), torch.randn(4, 3, 3, 4), padding=1)
    text = str(e)
    assert e.chosen("fwd") == "native" and e.chosen("dgrad") == "native" and e.chosen("wgrad") == "native"
    assert {(r[0], r[1]) for r in e.rows} == {(p, n) for p in ("fwd", "dgrad", "wgrad")
                                              for n in planner.REGISTRY}
    assert text.count("->") == 3 and "native" in text and "reference" in text and "x=[2, 8, 8, 4]" in text
    shapes = ndconv.explain((2, 8, 8, 4), (4, 3, 3, 4), padding=1)
    assert shapes.problem == e.problem


def test_torch_compile_traces_one_op():
    x, w = _data((2, 6, 6, 3), (4, 3, 3, 3), dtype=torch.float32)
    x.requires_grad_(True)
    w.requires_grad_(True)

    def f(x, w):
        return ndconv.conv2d(x, w, stride=2, padding=1).square().sum()

    compiled = torch.compile(f, backend="aot_eager", fullgraph=True)
    out = compiled(x, w)
    gx, gw = torch.autograd.grad(out, (x, w))
    ref = f(x, w)
    rx, rw = torch.autograd.grad(ref, (x, w))
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(gx, rx)
    torch.testing.assert_close(gw, rw)


def test_calls_run_on_the_operands_gpu(monkeypatch):
    """A CUDA plan's call makes its operands' GPU current while it runs (Triton launches on the
    current device), and only when another one is current (checked with stand-ins on a CPU)."""
    from ndconv.algorithms import on_operands_gpu

    current, seen = [0], []

    class Device:
        def __init__(self, index):
            self.index = index

        def __enter__(self):
            self.saved, current[0] = current[0], self.index

        def __exit__(self, *exc):
            current[0] = self.saved

    class Operand:
        def __init__(self, index):
            self.index = index

        def get_device(self):
            return self.index

    monkeypatch.setattr(torch.cuda, "current_device", lambda: current[0])
    monkeypatch.setattr(torch.cuda, "device", Device)
    call = on_operands_gpu(lambda a, b: seen.append(current[0]) or "result")
    assert call(Operand(1), None) == "result" and call(Operand(0), None) == "result"
    assert seen == [1, 0] and current[0] == 0


def test_calls_check_the_current_gpu_only_where_there_are_several(monkeypatch):
    """With one GPU every CUDA operand is on the current GPU: a plan's call skips the check (a
    few µs of host time per call); with several it makes the operands' GPU current."""
    import types

    from ndconv.algorithms import prepared_call
    from ndconv.api import make_problem

    p = make_problem((1, 4, 4, 2), (2, 3, 3, 2), device="cuda")
    call = lambda a, b: None  # noqa: E731
    algorithm = types.SimpleNamespace(prepare=lambda p, config: call)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert prepared_call(algorithm, p, None) is call
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert prepared_call(algorithm, p, None).__name__ == "guarded"


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
@pytest.mark.parametrize("first", [0, 1], ids=["planned-on-gpu0", "planned-on-gpu1"])
def test_second_gpu_while_the_first_is_current(first):
    """Each GPU's tensors run on that GPU, whichever was current when the plan was made (its
    prepared launches hold tables made then): forward, transposed (a phase table) and both
    gradients."""
    calls = [("conv2d", None, 1), ("conv2d", "implicit_gemm", 1), ("conv2d", "depthwise", 16),
             ("conv_transpose2d", "implicit_gemm", 1), ("conv2d", "grouped", 4)]
    for op, algorithm, groups in calls:
        x, w = _data((2, 9, 9, 16), (16, 3, 3, 16 // groups))
        kwargs = dict(stride=2, padding=1, output_padding=1) if op == "conv_transpose2d" else dict(padding=1)
        fn = getattr(ndconv, op)
        x.requires_grad_(True)
        w.requires_grad_(True)
        ref = fn(x, w, groups=groups, **kwargs)
        dy = torch.randn(ref.shape, dtype=torch.float64)
        ref_dx, ref_dw = torch.autograd.grad(ref, (x, w), dy)
        for index in (first, 1 - first):
            xd, wd = (t.detach().to(f"cuda:{index}", torch.bfloat16).requires_grad_(True) for t in (x, w))
            with torch.cuda.device(1 - index):
                y = fn(xd, wd, groups=groups, algorithm=algorithm, **kwargs)
                dx, dw = torch.autograd.grad(y, (xd, wd), dy.to(y))
                torch.cuda.synchronize(index)
            assert y.device == dx.device == dw.device == torch.device("cuda", index)
            for got, want, what in ((y, ref, "y"), (dx, ref_dx, "dx"), (dw, ref_dw, "dw")):
                ndconv.testing.assert_close(got.cpu(), want, ndconv.testing.TOL[torch.bfloat16],
                                            f"{op} {algorithm} on cuda:{index}: {what}")


@pytest.mark.parametrize("args", [dict(padding=1), dict(padding=([0, 1], [1, 2]), stride=2),
                                  dict(input_dilation=2, padding=1, flip=True), dict(padding=1, groups=3)],
                         ids=["plain", "asymmetric-strided", "transposed", "grouped"])
def test_torch_func_transforms(args):
    """vmap, grad (per-sample gradients), jvp and jacrev run PyTorch's own ops under ndconv's
    semantics, against the same transforms of the oracle."""
    from torch.func import grad, jacrev, jvp, vmap

    x, w, t = _data((2, 6, 5, 3), (6, 3, 2, 3 // args.get("groups", 1)),
                    (6, 3, 2, 3 // args.get("groups", 1)))

    def loss(fn):
        return lambda w, xi: fn(xi[None], w, args).square().sum()

    ours = lambda x, w, a: ndconv.conv_general(x, w, **a)  # noqa: E731
    per_sample = vmap(grad(loss(ours)), in_dims=(None, 0))(w, x)
    expected = torch.stack([grad(loss(_oracle))(w, x[i]) for i in range(2)])
    torch.testing.assert_close(per_sample, expected)
    torch.testing.assert_close(jvp(lambda w: ours(x, w, args), (w,), (t,))[1],
                               jvp(lambda w: _oracle(x, w, args), (w,), (t,))[1])
    torch.testing.assert_close(jacrev(lambda x: ours(x, w, args))(x[:1]),
                               jacrev(lambda x: _oracle(x, w, args))(x[:1]))


def test_torch_func_refuses_triton_algorithms():
    from torch.func import vmap

    x, w = _data((2, 6, 5, 3), (4, 3, 3, 3))
    with pytest.raises(ValueError,
                       match="conv2d: algorithm 'implicit_gemm' cannot run under a torch.func transform"):
        vmap(lambda xi: ndconv.conv2d(xi, w, algorithm="implicit_gemm"))(x[:, None])
