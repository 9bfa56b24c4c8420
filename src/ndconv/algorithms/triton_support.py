"""What the Triton algorithms share: the check that a kernel can run (Triton importable, and an
NVIDIA GPU of compute capability 8.0+ or Triton's interpreter for CPU tensors when
``TRITON_INTERPRET=1``), the launchers' argument helpers, and BoundLaunch, the cheap launch of a
prepared plan."""

from __future__ import annotations

import os
from functools import cache, lru_cache

import torch

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


@cache
def triton_available() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


@cache
def _cuda_capability_ok() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 0)


KERNEL_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def kernel_reason(p) -> str | None:
    """None when a Triton kernel can run problem ``p`` (its device and dtype), else why not."""
    if not triton_available():
        return "Triton is not installed"
    if p.device == "cuda":
        if not _cuda_capability_ok():
            return "needs an NVIDIA GPU of compute capability 8.0+"
    elif p.device != "cpu" or not INTERPRET:
        return f"Triton kernels need a CUDA device (or TRITON_INTERPRET=1 for CPU tensors), not {p.device}"
    if p.dtype not in KERNEL_DTYPES:
        return f"Triton kernels run float16, bfloat16 and float32, not {str(p.dtype)[6:]}"
    return None


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def pow2_at_least(n: int, lo: int = 1, hi: int | None = None) -> int:
    """The smallest power of two >= n (Triton's block shapes are powers of two), within [lo, hi]."""
    p = 1 << max(0, n - 1).bit_length()
    return max(lo, p if hi is None else min(hi, p))


def alignment_hint(values, cap: int) -> int:
    """The largest power of two, at most ``cap``, that divides every one of ``values`` (1 where
    16 divides them all). Triton learns an integer argument's divisibility only by 16, so a
    kernel told this (as a constexpr) can still load vectors where channel counts are multiples
    of 2-8 but not 16 (X3D's 54 and 108, MobileNetV3's 72 and 120)."""
    if all(v % 16 == 0 for v in values):
        return 1
    align = cap
    while align > 1 and any(v % align for v in values):
        align //= 2
    return max(1, align)


def pad3(values, fill):
    """Per-axis values padded in front to three spatial axes (kernels are written for three)."""
    values = tuple(values)
    return (fill,) * (3 - len(values)) + values


def spatial_strides(t: torch.Tensor, first: int, count: int):
    """Strides of ``t``'s ``count`` spatial dimensions from ``first``, padded to three."""
    return pad3(t.stride()[first:first + count], 0)


def needs_int64(*tensors) -> bool:
    """True when an element offset of any tensor can reach 2**31 (kernels then index in 64 bits)."""
    return any(
        sum((s - 1) * abs(st) for s, st in zip(t.shape, t.stride()) if s > 0) >= 2**31 for t in tensors
    )


def group_channels(p) -> tuple[int, int]:
    """(C/groups, O/groups) of the convolution a kernel computes for pass ``p``: the problem's
    own, except for a weight gradient, which kernels compute from the natural operands of its
    forward convolution (the rewritten problem swaps batch and channels)."""
    if p.pass_ == "wgrad":
        return p.batch, p.o_per_group
    return p.c_per_group, p.o_per_group


_SM_COUNT_FALLBACK = 132  # the H200's, for the interpreter's CPU tensors


def sm_count(device) -> int:
    """Streaming multiprocessors of ``device`` (grids are sized to fill them); for a prepared
    launch's meta tensors, the current GPU's."""
    if device.type == "meta" and torch.cuda.is_available():
        device = torch.device("cuda", torch.cuda.current_device())
    if device.type != "cuda":
        return _SM_COUNT_FALLBACK
    return torch.cuda.get_device_properties(device).multi_processor_count


class BoundLaunch:
    """One kernel launch with everything fixed except its operand tensors.

    Why: ``kernel[grid](...)`` binds, specialises and hashes every argument on every call, about
    15 µs of host time for our kernels' ~50 arguments. A prepared plan knows them all already:
    after the first launch (through Triton's own path, which compiles) it calls the compiled
    kernel's launcher directly, on the current device and stream. Triton specialises pointers on
    16-byte alignment, so an operand whose alignment differs from the compiled kernel's takes
    Triton's path again (as does every launch in the interpreter, or with a launch hook set).
    Triton's launcher encodes each TMA descriptor on every launch (cuTensorMapEncode); here the
    encoding of a descriptor is kept per base address (``_RawLaunch``), since its shape, strides
    and box never change.

    ``args`` are the kernel's positional arguments, in which ``operands`` (tensors, by identity,
    or the base of a tensor descriptor) are placeholders for the tensors each call passes (a
    descriptor is copied with the new base; its shape and strides were validated when it was
    made); ``meta`` the keyword arguments (every parameter has a value, defaults are not looked
    up).
    """

    def __init__(self, kernel, grid, args, meta, operands):
        self.values = list(args) + [meta[name] for name in kernel.arg_names[len(args):]]  # all given
        self.slots = tuple((i, k) for i, a in enumerate(self.values) for k, o in enumerate(operands)
                           if a is o)
        self.descriptors = tuple((i, k, a) for i, a in enumerate(self.values) for k, o in enumerate(operands)
                                 if not isinstance(a, torch.Tensor) and getattr(a, "base", None) is o)
        self.kernel, self.meta, self.positional = kernel, meta, len(args)
        self.grid = tuple(grid) + (1,) * (3 - len(grid))
        self._compiled = {}  # device index -> (compiled kernel, operands' 16-byte alignment, _RawLaunch)
        self._values = {}  # device index -> values with their constant tensors on that GPU
        if not INTERPRET:
            from triton import knobs
            from triton.runtime import driver

            self._hooks, self._stream = knobs.runtime, driver.active.get_current_stream

    def _with_descriptors(self, values, operands):
        for i, k, template in self.descriptors:
            values[i] = descriptor = object.__new__(type(template))
            descriptor.__dict__.update(template.__dict__, base=operands[k])

    def _on_device(self, device: int) -> list:
        """The values with each constant tensor (a table made when the launch was prepared, on
        the GPU current then) on GPU ``device``, copied there once."""
        found = self._values.get(device)
        if found is None:
            slots = {i for i, _ in self.slots}
            found = [v.to(torch.device("cuda", device)) if isinstance(v, torch.Tensor) and i not in slots
                     and v.is_cuda and v.get_device() != device else v for i, v in enumerate(self.values)]
            self._values[device] = found
        return found

    def __call__(self, *operands) -> None:
        if INTERPRET:
            values = self.values.copy()
            for i, k in self.slots:
                values[i] = operands[k]
            self._with_descriptors(values, operands)
            self.kernel[self.grid](*values[:self.positional], **self.meta)
            return
        device = operands[0].get_device()
        values = self._on_device(device).copy()
        for i, k in self.slots:
            values[i] = operands[k]
        aligned = tuple(t.data_ptr() % 16 == 0 for t in operands)
        hit = self._compiled.get(device)
        if hit is None or hit[1] != aligned or _hooked(self._hooks.launch_enter_hook):
            self._with_descriptors(values, operands)
            compiled = self.kernel[self.grid](*values[:self.positional], **self.meta)
            self._compiled[device] = (compiled, aligned, _RawLaunch.of(compiled, self.descriptors))
            return
        compiled, _, raw = hit
        stream = self._stream(device)
        if raw is not None:
            raw(self.grid, stream, compiled, values, operands)
            return
        self._with_descriptors(values, operands)
        compiled.run(*self.grid, stream, compiled.function, compiled.packed_metadata, None, None, None,
                     *values)


def _hooked(hook) -> bool:
    """Whether a launch hook is set: Triton 3.6 keeps a HookChain, empty by default (so testing
    ``is not None`` would always send launches down Triton's path); older Tritons None."""
    return bool(getattr(hook, "calls", hook))


class _RawLaunch:
    """A compiled kernel's C launcher, called with its TMA descriptors encoded once per base
    address (Triton 3.6's launcher encodes every descriptor on every launch, a few µs each).
    ``of`` returns None where the launcher is not the one this was written for (no descriptors,
    scratch memory to allocate, or another Triton's wrapper): Triton's own launch then runs."""

    _MAX_BASES = 16  # encodings kept per descriptor (a loop cycles through few buffers)

    def __init__(self, launch, encode, run, descriptors, metadata):
        self.launch, self.encode, self.run = launch, encode, run
        ordered = sorted(descriptors, key=lambda d: d[0])  # Triton's metadata is in argument order
        self.descriptors = tuple((i, k, template, meta) for (i, k, template), meta in zip(ordered, metadata))
        self.encoded = {i: {} for i, _, _, _ in self.descriptors}

    @classmethod
    def of(cls, compiled, descriptors):
        try:
            from triton.backends.nvidia.driver import make_tensordesc_arg
        except ImportError:
            return None
        run = compiled.run
        metadata = getattr(compiled.metadata, "tensordesc_meta", None)
        if (not descriptors or not metadata or len(metadata) != len(descriptors)
                or getattr(run, "global_scratch_size", 1) or getattr(run, "profile_scratch_size", 1)):
            return None
        # Triton wraps the C launcher in a closure that encodes the descriptors: take the C one
        cells = getattr(getattr(run, "launch", None), "__closure__", None) or ()
        launchers = [c.cell_contents for c in cells
                     if type(c.cell_contents).__name__ == "builtin_function_or_method"]
        if len(launchers) != 1:
            return None
        return cls(launchers[0], make_tensordesc_arg, run, descriptors, metadata)

    def __call__(self, grid, stream, compiled, values, operands):
        args, start = [], 0  # values with each descriptor (in argument order) expanded in place
        for i, k, template, meta in self.descriptors:
            base = operands[k]
            known = self.encoded[i]
            expanded = known.get(base.data_ptr())
            if expanded is None:
                descriptor = object.__new__(type(template))
                descriptor.__dict__.update(template.__dict__, base=base)
                expanded = self.encode(descriptor, meta)
                if len(known) >= self._MAX_BASES:
                    known.clear()
                known[base.data_ptr()] = expanded
            args += values[start:i]
            args += expanded
            start = i + 1
        args += values[start:]
        self.launch(*grid, stream, compiled.function, self.run.launch_cooperative_grid, self.run.launch_pdl,
                    None, None, compiled.packed_metadata, None, None, None, *args)


def sum_partials_launch(partial: torch.Tensor, out: torch.Tensor, transpose: bool = False):
    """(grid, args, meta) of kernel_utils.sum_partials_kernel: ``out`` (contiguous) = the sum
    over the first axis of the float32 partial sums ``partial`` [S, ...] (contiguous), in a
    fixed order, in partial's element order or, with ``transpose``, partial's trailing [A, B]
    transposed. One launch, where PyTorch's sum and cast into the result were two (and the sum
    over the first axis alone took 3.3-5.7 us on the H200 for the public suite's weight
    gradients; not torch.sum(..., out=): it rounds each partial sum to out's dtype first)."""
    if not out.is_contiguous() or out.numel() != partial[0].numel():
        raise ValueError(f"sum_partials: out {list(out.shape)} must be contiguous with the elements of "
                         f"one of the partial sums {list(partial.shape)}")
    M = out.numel()
    splits = min(16, pow2_at_least(partial.shape[0]))
    block = max(32, 2048 // splits)
    meta = dict(TRANSPOSE=transpose, INT64=needs_int64(partial), INTERPRET=INTERPRET, SPLITS=splits,
                BLOCK=block, num_warps=4)
    return (cdiv(M, block),), (partial, out, partial.shape[0], M, partial.shape[-1]), meta


def sum_partials(partial: torch.Tensor, out: torch.Tensor, transpose: bool = False) -> None:
    """``out`` (any view) = the sum over the first axis of ``partial`` (sum_partials_launch)."""
    from .kernel_utils import sum_partials_kernel

    target = out if out.is_contiguous() else torch.empty(out.shape, dtype=out.dtype, device=out.device)
    grid, args, meta = sum_partials_launch(partial, target, transpose)
    sum_partials_kernel[grid](*args, **meta)
    if target is not out:
        out.copy_(target)


def bound_sum_partials(workspace_shape, result_shape, dtype, transpose: bool = False) -> BoundLaunch:
    """The sum (sum_partials_launch) of a float32 workspace of ``workspace_shape`` into a new
    result of ``result_shape`` and ``dtype`` as a BoundLaunch, called with (workspace, result):
    the last launch of a prepared weight gradient."""
    from .kernel_utils import sum_partials_kernel

    ws = torch.empty(workspace_shape, device="meta", dtype=torch.float32)
    out = torch.empty(result_shape, device="meta", dtype=dtype)
    return BoundLaunch(sum_partials_kernel, *sum_partials_launch(ws, out, transpose), operands=(ws, out))


def planar_copy_launch(src: torch.Tensor, dst: torch.Tensor, shift: int = 0, reverse: bool = False):
    """(grid, args, meta) of kernel_utils.planar_copy_kernel: dst[r0, r1, r2, q, c] =
    src[r0, r1, r2', q - shift, c] (5-D views; zero outside src), r2' reversed if ``reverse``."""
    R0, R1, R2, Q, C = dst.shape
    block_q, block_c = 64, 64
    return ((R0 * R1 * R2 * cdiv(Q, block_q), cdiv(C, block_c)),
            (src, dst, R1, R2, Q, C, src.shape[3], shift, *src.stride(), *dst.stride()),
            dict(REVERSE=reverse, INT64=needs_int64(src, dst), BLOCK_Q=block_q, BLOCK_C=block_c))


def swap_channels(src: torch.Tensor, reverse: bool = False) -> torch.Tensor:
    """``src`` [G, A, T, B] (any strides) as a new contiguous [G, B, T, A], its T axis reversed
    if ``reverse``, in one tiled copy (planar_copy_kernel, its launch bound once per geometry): a
    weight's layout between MLX's [O, *K, C/G] and PyTorch's transposed convolutions' [C, *K, O/G]
    (PyTorch's copy of the permuted view reads or writes 2 bytes a sector)."""
    G, A, T, B = src.shape
    dst = torch.empty((G, B, T, A), dtype=src.dtype, device=src.device)
    _bound_swap(tuple(src.shape), src.stride(), src.dtype, reverse)(src, dst)
    return dst


@lru_cache(maxsize=256)
def _bound_swap(shape, strides, dtype, reverse) -> BoundLaunch:
    from .kernel_utils import planar_copy_kernel

    G, A, T, B = shape
    src = torch.empty_strided(shape, strides, dtype=dtype, device="meta")
    dst = torch.empty((G, B, T, A), dtype=dtype, device="meta")
    # as [r0, r1, r2, q, c] = [G, 1, T, A, B] on both sides
    src_view, dst_view = src.unsqueeze(1).transpose(2, 3), dst.unsqueeze(1).permute(0, 1, 3, 4, 2)
    return BoundLaunch(planar_copy_kernel, *planar_copy_launch(src_view, dst_view, reverse=reverse),
                       operands=(src_view, dst_view))


def meta_views(p):
    """The pass's grouped operand views (``p.views``) of meta tensors of its natural shapes, from
    which a prepared launch takes its strides; None when a view does not start at its tensor's
    first element (a BoundLaunch passes the natural tensors themselves)."""
    views = p.views(*(torch.empty(s, device="meta", dtype=p.dtype)
                      for s in (*p.operand_shapes, p.result_shape)))
    return None if any(v.storage_offset() for v in views) else views


def allocating(p, launch):
    """A prepared call: the natural operands to a new result, which ``launch(a, b, out)`` fills."""
    shape, dtype = p.result_shape, p.dtype

    def call(a, b):
        out = torch.empty(shape, dtype=dtype, device=a.device)
        launch(a, b, out)
        return out
    return call
