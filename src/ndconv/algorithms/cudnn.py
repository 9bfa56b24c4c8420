"""cuDNN through its frontend's Python graph API (the optional package ``nvidia-cudnn-frontend``,
module ``cudnn``; ``pip install 'ndconv[cudnn]'``): the path MLX's CUDA backend takes.

Two halves:

- ``describe(p, formulation)`` maps a problem onto one cuDNN operation, a ``Call``: which
  operation (``fprop``, ``dgrad``, ``wgrad``, or ``zero`` when no tap reaches a real input
  element), the dims and strides of X, W and Y in cuDNN's convention (``[N, C, *S]`` /
  ``[K, C/G, *R]`` dims with channels-last strides), where each lives in the pass's natural
  operands (an element offset: a crop is a view), pre/post padding, stride, dilation, groups,
  whether the filter must be reversed (cuDNN cross-correlates) or transposed per group (a copy),
  and whether the result must be zeroed first because the call writes only part of it.
  ``_bind`` turns a call into tensors (views, or copies where a view cannot say it).
- ``_launch`` builds the graph (cached) and executes it on the current stream.

The formulations, one axis, ``y[j] = sum_t w'[t] X[j*st + t*kd - lo]`` with X the input
dilated by idil and w' the weight as read (reversed when flip):

- ``fprop`` (idil == 1 on every axis): cuDNN's forward convolution, pre padding lo.
- ``dgrad`` (stride == 1 on every axis): ``y[i] = sum_{j*S + t*kd - P == i} x[j] wc[t]`` with
  ``S = idil``, ``P = span-1-lo`` and ``wc`` = w' reversed: cuDNN's data gradient of a forward
  convolution whose output is x. A transposed convolution (flip) needs no reversal this way.

A problem with stride > 1 and input dilation > 1 (on one axis or on two) is neither, and is
refused. The input gradient of a strided forward problem (stride 1, input dilation = the stride)
is the dgrad formulation with the natural weight as cuDNN's filter; the weight gradient is
cuDNN's weight gradient of the forward geometry's formulation. Pads are made non-negative and
at most span-1 by cropping the operands to the elements a tap reaches (negative pads, pads
beyond the kernel); outputs no tap reaches are zero.

A filter reversal is done by ``Config.reverse``: ``"copy"`` (the default: a reversed copy of
the filter, or of the weight gradient) or ``"mode"`` (cuDNN's CONVOLUTION mode instead of
CROSS_CORRELATION, no copy).

What is proven where: ``describe``, ``_bind`` and the staging are tested in CI on the CPU
(tests/test_cudnn.py replaces ``_launch`` by PyTorch ops with cuDNN's semantics and compares
every case, pass and hypothesis-drawn problem with the float64 reference). ``_graph`` and
``_launch`` (graph building, engine filters, execution) need a GPU: tools/cudnn_check.py runs
them. On the H200 they were right everywhere but in one class of call, refused (``measured_wrong``).

Half types compute in float32, float32 in TF32 only when ``p.allow_tf32``; engines that
down-convert inputs or reduce in reduced precision are deselected (as MLX does), and so are
those cuDNN notes as nondeterministic (atomics) while ``torch.use_deterministic_algorithms`` or
``torch.backends.cudnn.deterministic`` is on, as PyTorch's convolution then does. Every operand
cuDNN sees is 16-byte aligned (the alignment the frontend declares to the backend): one that is
not is staged through an aligned copy. Built graphs sit in an LRU (``NDCONV_PLAN_CACHE_SIZE``)
keyed by device, dtype, TF32, determinism, the call's dims, strides, paddings, stride,
dilation, groups and convolution mode; a graph cuDNN refuses is cached as refused. ``supports``
builds the default config's graph (on CUDA), so a refusal is a reason, never an exception in the
planner.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from functools import lru_cache

import torch

from ..problem import ConvProblem, deterministic_mode

NAME = "cudnn"
INSTALL_HINT = "pip install 'ndconv[cudnn]'"
ALIGNMENT = 16  # bytes, what the frontend declares for every tensor


@dataclass(frozen=True)
class Config:
    formulation: str = "fprop"  # "fprop" or "dgrad" (of the forward geometry for a weight gradient)
    reverse: str = "copy"  # how a reversed filter is applied: "copy" or "mode" (CONVOLUTION mode)


@dataclass(frozen=True)
class Operand:
    """Where a cuDNN tensor lives: ``source`` ("a", "b" or "out": the pass's natural operands
    and result, contiguous) at element ``offset``, with cuDNN ``dims`` and ``strides``."""

    source: str
    offset: int
    dims: tuple[int, ...]
    strides: tuple[int, ...]


@dataclass(frozen=True)
class Call:
    """One cuDNN operation computing a pass (see the module docstring)."""

    op: str  # "fprop" | "dgrad" | "wgrad" | "zero"
    X: Operand | None  # image (fprop, wgrad input) or data gradient (dgrad output)
    W: Operand | None  # filter [K, C/G, *R]
    Y: Operand | None  # output (fprop) or output gradient (dgrad, wgrad input)
    pre_padding: tuple[int, ...] = ()
    post_padding: tuple[int, ...] = ()
    stride: tuple[int, ...] = ()
    dilation: tuple[int, ...] = ()
    groups: int = 1
    reverse: bool = False  # the filter is reversed along every spatial axis
    transpose: bool = False  # the filter is the natural one with its O and C swapped per group
    zero_fill: bool = False  # the result is zeroed first (the call writes only part of it)

    @property
    def output(self) -> str:
        return {"fprop": "Y", "dgrad": "X", "wgrad": "W"}[self.op]


# ---------------------------------------------------------------------- describing a problem


def _channels_last(shape):
    """cuDNN dims and strides of a contiguous ``[N, *S, C]`` (or ``[K, *R, C]``) tensor."""
    N, *S, C = shape
    strides_s = [C * math.prod(S[d + 1:]) for d in range(len(S))]
    return (N, C, *S), (C * math.prod(S), 1, *strides_s)


def _operand(source, shape, box):
    """Operand of a contiguous ``[N, *S, C]`` tensor cropped to per-axis ``(start, length)``."""
    dims, strides = _channels_last(shape)
    offset = sum(start * st for (start, _), st in zip(box, strides[2:]))
    return Operand(source, offset, (dims[0], dims[1], *(n for _, n in box)), strides)


def _window(image, span, stride, pre, count):
    """One axis of a forward geometry (image length, dilated kernel span, stride, pre padding,
    ``count`` outputs): the outputs ``[j0, j1]`` that reach a real image element, the image
    elements ``[a, b]`` they reach, and the pre and post padding of that cropped geometry
    (both in ``[0, span-1]``); None when no output reaches the image."""
    j0 = max(0, -((span - 1 - pre) // stride))  # first j with j*stride - pre + span - 1 >= 0
    j1 = min(count - 1, (image - 1 + pre) // stride)  # last j with j*stride - pre <= image - 1
    if j0 > j1:
        return None
    a = max(0, j0 * stride - pre)
    b = min(image - 1, j1 * stride - pre + span - 1)
    lo = pre + a - j0 * stride
    hi = (j1 - j0) * stride + span - (b - a + 1) - lo
    assert 0 <= lo < span and 0 <= hi < span, (image, span, stride, pre, count)
    return j0, j1, a, b, lo, hi


def _forward_geometry(p: ConvProblem):
    """(stride, kdil, idil, lo, input spatial, output spatial, kernel, flip) of the forward
    convolution pass ``p`` computes (for a weight gradient, the forward it belongs to)."""
    if p.pass_ == "wgrad":
        return (p.kernel_dilation, p.stride, p.input_dilation, p.padding_lo, p.in_spatial,
                p.kernel, p.out_spatial, False)
    return (p.stride, p.kernel_dilation, p.input_dilation, p.padding_lo, p.in_spatial,
            p.out_spatial, p.kernel, p.flip)


def formulations(p: ConvProblem) -> tuple[str, ...]:
    """The formulations that express ``p`` (possibly none)."""
    stride, _, idil, *_ = _forward_geometry(p)
    out = []
    if all(i == 1 for i in idil):
        out.append("fprop")
    if all(s == 1 for s in stride):
        out.append("dgrad")
    return tuple(out)


def describe(p: ConvProblem, formulation: str) -> Call:
    """The cuDNN call that computes pass ``p`` through ``formulation`` (see ``formulations``)."""
    if formulation not in formulations(p):
        raise ValueError(f"formulation {formulation!r} does not express {p}")
    stride, kdil, idil, lo, s_in, s_out, kernel, flip = _forward_geometry(p)
    span = tuple((k - 1) * d + 1 for k, d in zip(kernel, kdil))
    G = p.groups
    if p.pass_ == "wgrad":  # natural operands x [N, *S, C], dy [N, *S_out, O], dw [O, *K, C/G]
        N, C, O = p.w_shape[-1], G * p.x_shape[0], p.w_shape[0]
        x, y = ("a", (N, *s_in, C)), ("b", (N, *s_out, O))
        forward_w = (O, *kernel, C // G)
    else:  # x (or dy), y (or dx); the problem's forward weight [O, *K, C/G]
        x, y = ("a", p.x_shape), ("out", p.out_shape)
        forward_w = (p.out_channels, *kernel, p.c_per_group)
    if formulation == "fprop":  # cuDNN X = the input, Y = the output, W = the forward weight
        geo = (s_in, span, stride, lo, s_out)
        X, Y, filt, reverse = x, y, forward_w, flip
    else:  # cuDNN Y (dy) = the input, X (dx) = the output, W = the forward weight transposed
        geo = (s_out, span, idil, tuple(sp - 1 - v for sp, v in zip(span, lo)), s_in)
        X, Y, filt, reverse = y, x, (forward_w[-1] * G, *kernel, forward_w[0] // G), not flip
    # The natural weight of an input gradient is its forward weight transposed; dw is the
    # forward weight's layout.
    transpose = (formulation == "dgrad") != (p.pass_ == "dgrad")
    op = "wgrad" if p.pass_ == "wgrad" else formulation
    windows = [_window(*axis) for axis in zip(*geo)]
    if any(w is None for w in windows):
        return Call("zero", None, None, None)
    image_box = tuple((a, b - a + 1) for _, _, a, b, _, _ in windows)
    out_box = tuple((j0, j1 - j0 + 1) for j0, j1, *_ in windows)
    zero_fill = {
        "fprop": out_box != tuple((0, n) for n in geo[4]),
        "dgrad": image_box != tuple((0, n) for n in geo[0]),
        "wgrad": False,
    }[op]
    return Call(
        op,
        X=_operand(*X, image_box),
        W=Operand("out" if p.pass_ == "wgrad" else "b", 0, *_channels_last(filt)),
        Y=_operand(*Y, out_box),
        pre_padding=tuple(w[4] for w in windows),
        post_padding=tuple(w[5] for w in windows),
        stride=tuple(geo[2]),
        dilation=tuple(kdil),
        groups=G,
        reverse=reverse,
        transpose=transpose,
        zero_fill=zero_fill,
    )


# ---------------------------------------------------------------------- configs


def _copies(p: ConvProblem, formulation: str) -> int:
    """Staged filter copies a formulation needs with reversal by copy (0, 1: one copy does both)."""
    call = describe(p, formulation)
    return int(call.transpose or call.reverse)


def measured_wrong(p: ConvProblem, formulation: str) -> str | None:
    """Why cuDNN computed ``p`` through ``formulation`` wrongly when measured, or None.

    On an H200 (cuDNN 9.19, frontend 1.32; tools/cudnn_check.py) one class of call came back
    wrong while its emulation (tests/test_cudnn.py) and the same call in float16 and bfloat16
    were right: the weight gradient of tiny case ``1d_groups_mult`` (x [1, 7, 4], w [8, 2, 2],
    groups 2, padding (1, 0)) through the dgrad formulation in float32, both with the filter
    reversed by copy and by CONVOLUTION mode: cuDNN wgrad of X [1, 8, 7], Y [1, 4, 7], W [4, 4, 2],
    groups 2, padding (0, 1): 16 of the 32 elements wrong (max rel err 0.50), by the first bad
    indices reported those of one tap (cuDNN's tap 0, the one that reads no padding). The mapping
    is the same in every dtype and its emulation is exact, so the fault is in the float32 engine
    cuDNN picks, not isolated further (there was no GPU to bisect it on). Refused: float32 (TF32 allowed or
    not) cuDNN weight gradients on one spatial axis with groups > 1 whose filter has fewer
    output than input channels per group (K/G < C/G; through the dgrad formulation, a channel
    multiplier of the forward problem). Every other grouped float32 wgrad call measured passed:
    1-D ones with K/G >= C/G (the same case through the fprop formulation, K/G 4 > C/G 2;
    ``1d_causal_dw``), and K/G < C/G ones on 2 and 3 axes (``2d_grouped_g4`` through the dgrad
    formulation, ``3d_c16_grouped`` through fprop, unequal pre/post padding included)."""
    if p.dtype != torch.float32:
        return None
    call = describe(p, formulation)
    if call.op != "wgrad" or call.groups == 1:
        return None
    k_per_group, c_per_group = call.W.dims[0] // call.groups, call.W.dims[1]
    if k_per_group >= c_per_group:
        return None
    if len(call.pre_padding) != 1:
        return None
    return (f"cuDNN's float32 grouped 1-D weight gradient (groups {call.groups}, filter K/G {k_per_group} < "
            f"C/G {c_per_group}, {formulation} formulation) was measured wrong on the H200 "
            f"(cuDNN 9.19, frontend 1.32)")


def default_config(p) -> Config:
    """The formulation with the fewest filter copies; on a tie the pass's own operation; one
    measured wrong only where no other formulation expresses ``p``."""
    forms = formulations(p)
    if not forms:
        return Config()
    own = "dgrad" if p.pass_ == "dgrad" else "fprop"
    best = min(forms, key=lambda f: (measured_wrong(p, f) is not None, _copies(p, f), f != own))
    return Config(best)


def configs(p, include_measured_wrong: bool = False) -> list[Config]:
    """Every formulation, and CONVOLUTION mode where it reverses the filter; the default first.
    Formulations ``measured_wrong`` are left out unless ``include_measured_wrong`` (the CPU
    emulation still checks their mapping); the default stays first even when it is one."""
    out = [default_config(p)]
    for f in formulations(p):
        if measured_wrong(p, f) is not None and not include_measured_wrong:
            continue
        modes = ("copy", "mode") if describe(p, f).reverse else ("copy",)
        out += [Config(f, m) for m in modes if Config(f, m) not in out]
    return out


# ---------------------------------------------------------------------- binding tensors


def _grouped_transpose(t: torch.Tensor, groups: int) -> torch.Tensor:
    """``[G*A, *R, B]`` -> ``[G*B, *R, A]`` (O and C swapped within each group), a view."""
    return t.unflatten(0, (groups, -1)).transpose(1, -1).flatten(0, 1)


def _cudnn_view(t: torch.Tensor) -> torch.Tensor:
    """A contiguous ``[N, *S, C]`` tensor as cuDNN's ``[N, C, *S]`` dims (a view)."""
    return t.movedim(-1, 1)


def _aligned(t: torch.Tensor) -> bool:
    return t.data_ptr() % ALIGNMENT == 0


def _naturals(p: ConvProblem, x, w, out):
    """The pass's natural operands (contiguous) and its result's grouped view and natural shape."""
    if p.pass_ == "wgrad":
        x, dy, dw, _ = p.wgrad_natural(x, w, out)
        return (x.flatten(-2).contiguous(), dy.flatten(-2).contiguous(), dw,
                (dw.shape[0] * dw.shape[1], *dw.shape[2:]))
    b = w.transpose(1, -1) if p.pass_ == "dgrad" else w  # back to the natural weight
    return (x.flatten(-2).contiguous(), b.flatten(0, 1).contiguous(), out,
            (*out.shape[:-2], out.shape[-2] * out.shape[-1]))


def _bind(call: Call, p: ConvProblem, x, w, out, config: Config):
    """cuDNN's X, W and Y tensors of a call (views where possible, else aligned copies) and a
    function that completes the result once the call has run."""
    a, b, target, shape = _naturals(p, x, w, out)
    result = None
    try:
        candidate = target.view(shape)
        if candidate.is_contiguous():
            result = candidate
    except RuntimeError:
        pass
    staged_result = result is None
    if staged_result:
        result = torch.empty(shape, dtype=target.dtype, device=target.device)
    finishers = []

    def finish():
        for f in finishers:
            f()
        if staged_result:
            target.copy_(result.view(target.shape))

    if call.op == "zero":
        result.zero_()
        return {}, finish
    if call.zero_fill:
        result.zero_()
    sources = {"a": a, "b": b, "out": result}
    tensors = {}
    for role in ("X", "Y"):
        o = getattr(call, role)
        src = sources[o.source]
        view = src.as_strided(o.dims, o.strides, src.storage_offset() + o.offset)
        if not _aligned(view):  # stage through an aligned channels-last copy
            staged = torch.empty((o.dims[0], *o.dims[2:], o.dims[1]), dtype=src.dtype, device=src.device)
            staged = _cudnn_view(staged)
            if role == call.output:
                finishers.append(lambda staged=staged, view=view: view.copy_(staged))
            else:
                staged.copy_(view)
            view = staged
        tensors[role] = view
    reverse_copy = call.reverse and config.reverse == "copy"
    spatial = tuple(range(1, p.ndim + 1))
    natural_w = sources[call.W.source]
    if call.output == "W":
        if call.transpose or reverse_copy or not _aligned(natural_w):
            staged = torch.empty((call.W.dims[0], *call.W.dims[2:], call.W.dims[1]), dtype=natural_w.dtype,
                                 device=natural_w.device)

            def unstage(staged=staged, dw=natural_w):
                g = _grouped_transpose(staged, call.groups) if call.transpose else staged
                dw.copy_(g.flip(spatial) if reverse_copy else g)

            finishers.insert(0, unstage)
            natural_w = staged
    else:
        filt = _grouped_transpose(natural_w, call.groups) if call.transpose else natural_w
        natural_w = (filt.flip(spatial) if reverse_copy else filt).contiguous()
        if not _aligned(natural_w):
            natural_w = natural_w.clone()
    tensors["W"] = natural_w.as_strided(call.W.dims, call.W.strides, natural_w.storage_offset())
    for role, t in tensors.items():
        assert tuple(t.shape) == getattr(call, role).dims, (role, t.shape, getattr(call, role))
    return tensors, finish


# ---------------------------------------------------------------------- the frontend


@lru_cache(maxsize=1)
def _frontend():
    """(the ``cudnn`` module, "") or (None, why it cannot be used)."""
    try:
        if torch.cuda.is_available():
            torch.backends.cudnn.version()  # PyTorch loads its libcudnn; the frontend then finds it
        import cudnn
    except ImportError:
        return None, f"nvidia-cudnn-frontend is not installed ({INSTALL_HINT})"
    except Exception as e:  # noqa: BLE001 - any failure to import means it cannot run
        return None, f"nvidia-cudnn-frontend failed to import: {type(e).__name__}: {e}"
    if not hasattr(cudnn, "pygraph") or not hasattr(cudnn._pybind_module, "convolution_mode"):
        return None, (f"nvidia-cudnn-frontend {getattr(cudnn, '__version__', '?')} lacks the graph API "
                      f"used here (pygraph, convolution_mode); {INSTALL_HINT}")
    if torch.cuda.is_available():
        try:
            cudnn.backend_version()
        except Exception as e:  # noqa: BLE001
            return None, f"nvidia-cudnn-frontend found no usable libcudnn: {e}"
    return cudnn, ""


@dataclass(frozen=True)
class _GraphKey:
    """What a built graph depends on (MLX's ConvCacheKey; alignment is always ALIGNMENT)."""

    device: int
    dtype: torch.dtype
    tf32: bool
    deterministic: bool  # nondeterministic engines deselected
    op: str
    tensors: tuple  # ((dims, strides) of X, W, Y)
    pre_padding: tuple
    post_padding: tuple
    stride: tuple
    dilation: tuple
    groups: int
    convolution: bool  # CONVOLUTION mode (the filter reversed) rather than CROSS_CORRELATION


@dataclass(frozen=True)
class _Built:
    graph: object
    tensors: dict  # role -> the graph's tensor
    workspace: int


@dataclass(frozen=True)
class _Refused:
    reason: str


_graphs = None
_graphs_lock = threading.Lock()
_handles = {}
_handle_lock = threading.Lock()


def clear_cache() -> None:
    """Forgets every built graph (the capacity is re-read from NDCONV_PLAN_CACHE_SIZE)."""
    global _graphs
    with _graphs_lock:
        _graphs = None


def _cache():
    global _graphs
    with _graphs_lock:
        if _graphs is None:
            from .. import planner  # the planner imports the registry, which imports this module

            _graphs = planner.LRU(planner.cache_capacity())
        return _graphs


def _key(call: Call, p: ConvProblem, config: Config, layout: tuple, device: int) -> _GraphKey:
    """``layout``: (dims, strides) of X, W and Y as bound."""
    return _GraphKey(device, p.dtype, p.allow_tf32, deterministic_mode(), call.op, layout, call.pre_padding,
                     call.post_padding, call.stride, call.dilation, call.groups,
                     call.reverse and config.reverse == "mode")


def _handle(cudnn, device: int):
    with _handle_lock:
        h = _handles.get(device)
        if h is None:
            with torch.cuda.device(device):
                h = _handles[device] = cudnn.create_handle()
        return h


def _build(key: _GraphKey):
    """The graph of ``key``, built, or _Refused with cuDNN's reason."""
    cudnn, reason = _frontend()
    if cudnn is None:
        return _Refused(reason)
    types = {torch.float16: cudnn.data_type.HALF, torch.bfloat16: cudnn.data_type.BFLOAT16,
             torch.float32: cudnn.data_type.FLOAT, torch.float64: cudnn.data_type.DOUBLE}
    io = types[key.dtype]
    compute = cudnn.data_type.DOUBLE if key.dtype == torch.float64 else cudnn.data_type.FLOAT
    modes = cudnn._pybind_module.convolution_mode
    try:
        with torch.cuda.device(key.device):
            g = cudnn.pygraph(io_data_type=io, intermediate_data_type=compute, compute_data_type=compute,
                              handle=_handle(cudnn, key.device))
            made = {}
            out_role = {"fprop": "Y", "dgrad": "X", "wgrad": "W"}[key.op]
            for role, (dims, strides) in zip(("X", "W", "Y"), key.tensors):
                if role != out_role:
                    made[role] = g.tensor(name=role, dim=list(dims), stride=list(strides), data_type=io)
            options = {
                "pre_padding": list(key.pre_padding), "post_padding": list(key.post_padding),
                "stride": list(key.stride), "dilation": list(key.dilation), "compute_data_type": compute,
                "convolution_mode": modes.CONVOLUTION if key.convolution else modes.CROSS_CORRELATION,
            }
            if key.op == "fprop":
                result = g.conv_fprop(image=made["X"], weight=made["W"], **options)
            elif key.op == "dgrad":
                result = g.conv_dgrad(loss=made["Y"], filter=made["W"], **options)
            else:
                result = g.conv_wgrad(image=made["X"], loss=made["Y"], **options)
            dims, strides = key.tensors[("X", "W", "Y").index(out_role)]
            result.set_output(True).set_dim(list(dims)).set_stride(list(strides)).set_data_type(io)
            made[out_role] = result
            notes = [cudnn.numerical_note.DOWN_CONVERT_INPUTS,
                     cudnn.numerical_note.REDUCED_PRECISION_REDUCTION]
            if key.dtype == torch.float32 and not key.tf32:
                notes.append(cudnn.numerical_note.TENSOR_CORE)
            if key.deterministic:
                notes.append(cudnn.numerical_note.NONDETERMINISTIC)
            g.deselect_numeric_notes(notes)
            g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
            return _Built(g, made, int(g.get_workspace_size()))
    except Exception as e:  # noqa: BLE001 - cuDNN's refusals come as several exception types
        why = " (deterministic mode: nondeterministic engines deselected)" if key.deterministic else ""
        return _Refused(f"{type(e).__name__}: {e}".strip() + why)


def _graph(key: _GraphKey):
    """The cached graph of ``key`` (built once; a refusal is cached too)."""
    cache = _cache()
    found = cache.get(key)
    if found is None:
        found = _build(key)
        cache.put(key, found)
    return found


def _launch(call: Call, tensors: dict, p: ConvProblem, config: Config) -> None:
    """Runs ``call`` on cuDNN, on the current stream of the operands' device."""
    device = tensors["X"].device.index
    layout = tuple((tuple(tensors[r].shape), tuple(tensors[r].stride())) for r in ("X", "W", "Y"))
    built = _graph(_key(call, p, config, layout, device))
    if isinstance(built, _Refused):
        raise RuntimeError(f"cuDNN cannot build a graph for {p} ({call.op}): {built.reason}")  # noqa: TRY004
    cudnn, _ = _frontend()
    workspace = torch.empty(max(built.workspace, 1), dtype=torch.uint8, device=tensors["X"].device)
    handle = _handle(cudnn, device)
    with _handle_lock:
        cudnn.set_stream(handle, torch.cuda.current_stream(device).cuda_stream)
        built.graph.execute({built.tensors[r]: tensors[r] for r in ("X", "W", "Y")}, workspace, handle=handle)


# ---------------------------------------------------------------------- the algorithm


def supports(p):
    cudnn, reason = _frontend()
    if cudnn is None:
        return False, reason
    if p.device != "cuda" or not torch.cuda.is_available():
        return False, "cuDNN runs CUDA tensors only"
    if not formulations(p):
        return False, ("stride > 1 with input dilation > 1: neither cuDNN's forward convolution (no input "
                       "dilation) nor its data gradient (output stride 1) computes it")
    if p.is_trivial:
        return False, "an empty problem: nothing for cuDNN to compute"
    config = default_config(p)
    wrong = measured_wrong(p, config.formulation)
    if wrong is not None:
        return False, wrong
    call = describe(p, config.formulation)
    if call.op != "zero":
        layout = tuple((o.dims, o.strides) for o in (call.X, call.W, call.Y))  # as bound when aligned
        built = _graph(_key(call, p, config, layout, torch.cuda.current_device()))
        if isinstance(built, _Refused):
            return False, f"cuDNN cannot build the {call.op} graph: {built.reason}"
    how = "reversed filter, " if call.reverse else ""
    return True, f"cuDNN {call.op} ({how}{config.formulation} formulation)"


def run(p, x, w, out, config: Config | None = None):
    """x [N, *S, G, Cg], w [G, Og, *K, Cg], out [N, *S_out, G, Og] (views with any strides)."""
    config = config or default_config(p)
    call = describe(p, config.formulation)
    tensors, finish = _bind(call, p, x, w, out, config)
    if call.op != "zero":
        _launch(call, tensors, p, config)
    finish()
