"""The planner: which algorithm runs a problem, and why.

``plan(p)`` returns the forced algorithm (``algorithm=`` or ``NDCONV_ALGORITHM``), else with
autotuning on (``autotune(True)`` or ``NDCONV_AUTOTUNE=1``; ``"gpu"`` ranks by GPU time alone)
the measured fastest correct candidate (see ``tuning``), else the first algorithm in preference
order that supports ``p``.
Plans are kept in a thread-safe LRU keyed by the problem and torch's determinism flags
(``NDCONV_PLAN_CACHE_SIZE`` entries, default 128), so a repeated problem costs one dictionary
lookup. ``explain(p)`` shows the whole decision.
"""

from __future__ import annotations

import math
import os
import threading
import warnings
from collections import OrderedDict, namedtuple
from dataclasses import dataclass, field

import torch

from . import tuning
from .algorithms import REGISTRY, prepared_call
from .problem import NATIVE_CALL_HOST_S, ConvProblem, deterministic_mode

ENV_ALGORITHM = "NDCONV_ALGORITHM"
ENV_AUTOTUNE = "NDCONV_AUTOTUNE"
ENV_PLAN_CACHE_SIZE = "NDCONV_PLAN_CACHE_SIZE"
DEFAULT_PLAN_CACHE_SIZE = 128

# Preference order per device: the first algorithm that supports a problem runs it, except
# where the benchmark measured another one faster on that kind of problem (_measured_first).
# - GPU: the direct kernel takes depthwise convolutions and channel multipliers (a dense
#   tensor-core tile would waste almost all its work there), block-diagonal packing or the
#   direct grouped kernel other small groups, the Triton implicit GEMM every other
#   fp16/bf16/fp32 problem, PyTorch's own convolution (cuDNN) the rest (float64). cuDNN's graphs
#   (the optional cudnn algorithm) come after it in the order (their host time per call outweighs
#   the GPU time they save: docs/PERFORMANCE.md); autotuning times them everywhere they build.
# - toeplitz (the banded tensor-core GEMM for long depthwise kernels) and stem (few input
#   channels, a kernel row's taps as one window) are in no list: _measured_first puts them first
#   where they were measured fastest.
# - CPU: PyTorch's own convolution (oneDNN), several times faster there than gemm.
# - gemm (unfold + matmul through torch) and the reference (the float64 oracle) stay forcible.
PREFERENCE = {
    "cuda": ("depthwise", "grouped", "implicit_gemm", "native", "cudnn", "gemm", "reference"),
    "cpu": ("native", "gemm", "reference"),
}


@dataclass(frozen=True)
class Plan:
    algorithm: object  # an algorithms module
    config: object
    reason: str
    source: str = "heuristic"  # or "tuned", "forced"
    tuned: tuning.Tuned | None = field(default=None, repr=False)  # the measurements behind "tuned"

    @property
    def name(self) -> str:
        return self.algorithm.NAME

    def runner(self, p: ConvProblem):
        """This plan's computation of ``p`` (the problem it was made for): a function of the
        pass's natural contiguous operands that returns the natural result. It is the
        algorithm's prepared call where it has one (``prepare``: the per-call work done once),
        else its ``run`` on the operands' views. Made at the first call (a race makes it twice,
        harmlessly)."""
        made = self.__dict__.get("_runner")
        if made is None:
            made = prepared_call(self.algorithm, p, self.config)
            object.__setattr__(self, "_runner", made)
        return made


CacheInfo = namedtuple("CacheInfo", "hits misses size capacity")


class LRU:
    """A thread-safe least-recently-used map with hit and miss counts (values are never None)."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.hits = self.misses = 0
        self._data = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key):
        with self._lock:
            value = self._data.get(key)
            if value is None:
                self.misses += 1
            else:
                self.hits += 1
                self._data.move_to_end(key)
            return value

    def put(self, key, value) -> None:
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.capacity:
                self._data.popitem(last=False)

    def info(self) -> CacheInfo:
        with self._lock:
            return CacheInfo(self.hits, self.misses, len(self._data), self.capacity)


def cache_capacity() -> int:
    """Entries of the plan cache, from NDCONV_PLAN_CACHE_SIZE (0 turns caching off)."""
    value = os.environ.get(ENV_PLAN_CACHE_SIZE)
    if value is None:
        return DEFAULT_PLAN_CACHE_SIZE
    try:
        size = int(value)
        if size < 0:
            raise ValueError
    except ValueError:
        warnings.warn(f"{ENV_PLAN_CACHE_SIZE} must be a non-negative integer, got {value!r}; "
                      f"using {DEFAULT_PLAN_CACHE_SIZE}", stacklevel=2)
        return DEFAULT_PLAN_CACHE_SIZE
    return size


_plans = LRU(cache_capacity())
_calls = LRU(cache_capacity())
_tune_lock = threading.Lock()  # one tuning at a time: concurrent timings would disturb each other


def _autotune_mode(value) -> str | None:
    """None (off), "call" or "gpu" from autotune()'s argument or NDCONV_AUTOTUNE's value."""
    if value in (None, False, "", "0"):
        return None
    if value in tuning.RANKINGS:
        return value
    if value is True or value == "1":
        return "call"
    raise ValueError(f"autotune: expected True, False, 'call' or 'gpu' ({ENV_AUTOTUNE}: 0, 1 or gpu), "
                     f"got {value!r}")


try:
    _autotune = _autotune_mode(os.environ.get(ENV_AUTOTUNE))
except ValueError as e:
    warnings.warn(f"{e}; autotuning stays off", stacklevel=1)
    _autotune = None


def autotune(enabled: bool | str = True) -> bool | str:
    """Turns autotuning on or off for this process; returns the previous setting. ``True`` (or
    ``"call"``) ranks candidates by the time of a call, the larger of its GPU time and the host
    time to issue it; ``"gpu"`` by GPU time alone, for code whose calls cost no host time
    (replayed CUDA graphs)."""
    global _autotune
    previous, _autotune = autotuning(), _autotune_mode(enabled)
    return previous


def autotuning() -> bool | str:
    """The autotuning setting: False (off), True (ranked by call time) or "gpu"."""
    return {None: False, "call": True}.get(_autotune, _autotune)


def clear_cache() -> None:
    """Empties the plan and call caches (re-reading their capacity) and forgets in-memory tuning
    results."""
    global _plans, _calls
    _plans, _calls = LRU(cache_capacity()), LRU(cache_capacity())
    tuning.reset()


def cache_info() -> CacheInfo:
    return _plans.info()


def call_cache() -> LRU:
    """The API's cache of recent calls (see ``api.conv_general``), which holds runners made
    from plans, so it is emptied with the plan cache."""
    return _calls


def lookup(name: str, source: str = "algorithm="):
    """The algorithm module called ``name``; ValueError listing the valid names otherwise."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(
            f"{source}: unknown algorithm {name!r}; valid: {', '.join(REGISTRY)}"
        ) from None


def plan(p: ConvProblem, algorithm: str | None = None) -> Plan:
    """The plan for ``p``: the forced algorithm if any (ValueError if it cannot run ``p``),
    else the tuned choice when autotuning, else the heuristic choice."""
    source = "algorithm="
    if algorithm is None:
        algorithm = os.environ.get(ENV_ALGORITHM) or None
        source = ENV_ALGORITHM
    # torch's determinism flags are part of the key: cuDNN's graphs support fewer problems under them
    mode = deterministic_mode()
    key = (p, _autotune, mode) if algorithm is None else (p, algorithm, source, mode)
    found = _plans.get(key)
    if found is None:
        if algorithm is not None:
            found = _forced(p, algorithm, source)
        else:
            found = _tuned(p) if _autotune else _choose(p)
        _plans.put(key, found)
    return found


def gradients(p: ConvProblem, algorithm: str | None = None):
    """Both gradients of forward problem ``p`` in one call, a function (x, w, dy) -> (dx, dw),
    where both passes are planned to PyTorch's plain formulations of one forward geometry
    (``native.prepare_gradients``: one convolution_backward, as PyTorch's autograd makes);
    else None, and each gradient runs its own plan. Cached with the plans."""
    forced = algorithm or os.environ.get(ENV_ALGORITHM)
    key = ("gradients", p, forced, _autotune, deterministic_mode())
    found = _plans.get(key)
    if found is None:
        from .algorithms import native

        dq, wq = p.dgrad(), p.wgrad()
        d, w = plan(dq, algorithm), plan(wq, algorithm)
        plain = d.name == w.name == native.NAME and not (dq.is_trivial or wq.is_trivial)
        both = plain and native.prepare_gradients(p, d.config, w.config)
        found = both or False  # the cache holds no None
        _plans.put(key, found)
    return found or None


def differentiable(p: ConvProblem, algorithm: str | None = None):
    """Forward problem ``p`` as PyTorch's differentiable convolution (``native.differentiable``),
    a function (x, w) -> y for calls that autograd will differentiate, where both gradients are
    planned as one convolution_backward (``gradients``) and the forward is planned to PyTorch's
    convolution too, or is host-bound (``_host_bound``: its GPU time is less than the Python
    autograd Function would cost); else None, and the passes run their own plans. Cached with
    the plans."""
    forced = algorithm or os.environ.get(ENV_ALGORITHM)
    key = ("differentiable", p, forced, _autotune, deterministic_mode())
    found = _plans.get(key)
    if found is None:
        from .algorithms import native

        found = False  # the cache holds no None
        if forced in (None, native.NAME):  # a pass forced elsewhere fails at its own call, if made
            forward, both = plan(p, algorithm), gradients(p, algorithm)
            if both is not None and (forward.name == native.NAME or (forced is None and _host_bound(p))):
                config = forward.config if forward.name == native.NAME else None
                found = native.differentiable(p, config) or False
        _plans.put(key, found)
    return found or None


def _forced(p: ConvProblem, algorithm: str, source: str) -> Plan:
    module = lookup(algorithm, source)
    ok, reason = module.supports(p)
    if not ok:
        raise ValueError(f"{source}: algorithm {algorithm!r} cannot run {p}: {reason}")
    how = source if source.endswith("=") else f"{source}="
    return Plan(module, module.default_config(p), f"forced by {how}{algorithm}", "forced")


def _choose(p: ConvProblem) -> Plan:
    order = PREFERENCE.get(p.device, PREFERENCE["cpu"])
    why = "first in preference order"
    first = _measured_first(p)
    if first is not None:
        order = (first, *(name for name in order if name != first))
        why = f"{first} measured fastest on this kind of problem"
    elif p.device == "cuda" and _host_bound(p):
        why = "host-bound (the GPU would finish before PyTorch's call is issued): first with a bound launch"
    for name in order:
        module = REGISTRY.get(name)  # an optional algorithm may be absent
        if module is not None:
            ok, reason = module.supports(p)
            if ok:
                return Plan(module, module.default_config(p), f"{why}: {reason}")
    raise AssertionError(f"no algorithm supports {p}")  # the reference supports everything


def _measured_first(p: ConvProblem) -> str | None:
    """The algorithm that the H200 benchmark (docs/PERFORMANCE.md, bf16, 2026-11-29/30) measured
    fastest on ``p``'s kind of problem where that is not the preference order's first, else
    None.

    PyTorch's cuDNN (native) wins: weight gradients (the TMA kernel is within 0-25% of it on the
    dense ones, the gather kernel 1.2-4.9x slower), except 1-D depthwise ones (causal conv1d:
    depthwise 64 us against 1.47 ms), 3-D depthwise ones and strided 2-D depthwise ones of 3x3
    kernels, or of 5x5 and more over 14- to 28-row inputs (depthwise.wgrad_wins: X3D's 3x3x3
    layers 36-373 us against 0.24-3.4 ms, EfficientNet-B0's 5x5 stride 2 at 14x14 28.9 against
    290 us, MobileNetV2's 3x3 stride 2 at 112x112 94.3 against 108.4; on the walking kernel,
    stride-1 ones of 25-49 taps whose output rows fit 16 columns, depthwise.walk_wins:
    ConvNeXt-T's 7x7 at 14x14 and 7x7 38.0 and 25.4 against 46.5 and 31.5 us) and 2-D and 3-D
    ones of at most 64 output channels with 3 taps along the last axis, which the TMA kernel
    computes in 64 x 64 tiles of 128 positions a step (implicit_gemm.long_step_wgrad:
    r50_3x3_56 39.5 against 50 us, conv3d_3x3x3 197 against 204; at 256 channels, in 128 x 128
    tiles, 36.6-36.9 against PyTorch's 37.9-38.1: PyTorch kept), and 2-D transposed ones whose
    phases run in one launch (a 3x3 stride-2 decoder layer's 37 against 43 us, convT_4x4s2 118
    against 117-120; strided forwards' in one launch lose: r50's 3x3 stride 2
    47 against 45, 43 against 41, 46 against 37), and pointwise ones whose reduction is at least
    4x their weight's size (ResNet-50's 1x1 layers at 56x56: 44.5 against 49.9 and 58.8 us; at
    28x28 and below PyTorch's is faster or within 3%, 17-31 against 22-34); small groups that
    do not pack, outside the rows kernel (against the direct kernel: 1.0-1.1x); forwards with
    symmetric padding (r50_3x3_56, r50_1x1_56, vae, conv3d, 1-D ones through a 2-D
    convolution: within 0-15%), except with more than 128 output channels that 128 does not
    divide (SD UNet's 320 run on the persistent TMA kernel: 97 against 110 us, fp16 98 against
    107) and mid-sized ones whose TMA tiles run as one wave at 3 CTAs an SM
    (implicit_gemm.one_wave: r50_3x3_14 26.6 against 31.7 us, r50_3x3_28 28.0 against 30.0);
    the ungrouped input gradients the TMA kernel takes, through cuDNN's backward-data kernels
    (native.forward_of_dgrad: r50_3x3_56 40 against 45.5 us, r50_1x1_56 38 against 36, conv3d
    199 against 213; tiny ones too, which autograd then issues as one convolution_backward
    with the weight gradient), but not one-wave ones (r50_3x3_14 26.4 against 31.4) nor
    those of strided convolutions over several taps, which the TMA kernel runs over output
    phases (r50's 3x3 stride 2 at 56x56 49 against 69 us, at 28x28 39 against 51, ConvNeXt's
    2x2 downsampling 53 against 59 and 32 against 43, a Whisper-style conv1d 162 against 177;
    not 1x1 ones, 108 against 109 and 73 against 69, nor r50's at 14x14, 55 against 44); and
    strided problems the TMA kernel does not take. Small groups run on grouped's rows kernel
    where it wins (grouped.rows_win: stride-1 2-D forwards and input gradients, weight
    gradients of groups a power of two wide over rows at least 14 wide (groups up to 8 wide)
    or 56 (16 wide); grouped3x3_g32 60.8 / 60.7 / 71 us against PyTorch's 95-97 / 108-109 /
    140; ResNeXt's 8x8 groups at 28x28 32.4 / 32.7 against 53.9 / 60.2); the other stride-1
    2-D weight gradients on PyTorch's grouped convolution (16-wide groups at 28x28 and below:
    13.9-51.9 us against the rows kernel's 40.2-60.1), but those of groups padded to wider
    lanes (24 wide) on implicit_gemm's (RegNet's: 40-147 us against PyTorch's 105-369 and the
    rows kernel's 413-1331; tools/grouped_planner.py, docs/PERFORMANCE.md's twenty-sixth
    session); else, where they pack, as fewer, wider groups through PyTorch's convolution.

    The banded tensor-core GEMM (toeplitz) wins depthwise kernels of 64 taps or more in half
    precision (or TF32): dw31x31_56 0.33 ms against depthwise's 1.56, dw13x13 0.32 against
    0.54, 1-D k=64 0.16 against 0.75; it loses at 49 taps (dw7x7_56 0.17 against 0.11) and 16
    (1-D k=16 0.13 against 0.09). The TMA kernel keeps asymmetric padding and input-dilated
    forwards (transposed convolutions, over output phases: convT_3x3s2 38.9 against 45.1 us,
    convT_4x4s2 126.7 against 131.1) and strided ones with at most 4 input channels, over a
    space-to-depth copy (r50_stem_7x7s2 103 against 456 us, the stem kernel 128), but the stem
    kernel takes 2-D forwards of at most 4 input channels with short reductions (stem.wins: SD
    VAE's 3x3 conv_in 59 against implicit_gemm's 117 and PyTorch's 168 us, EfficientNet's 3x3
    stride-2 stem 50 against 66, ConvNeXt's 4x4 stride-4 one 48 against 58; audio models' first
    1-D layers 14-26 us against implicit_gemm's 32-101 and PyTorch's 30-81), except where the
    host would wait on its three launches (``_host_bound``: 62 us per call on a tiny stem,
    against PyTorch's 19), the other algorithms' GPU time taken as 3x the floor for 1-D ones
    (they ran those layers at 3-12x: wav2vec2's, 6 us at its floor, 58-62); the gather kernel strided ones
    whose asymmetric padding PyTorch would pad a copy for (native.pads_a_copy: a 3x3 stride-2
    layer padded (0, 1) on a 56-wide input 56 against 156 us). A high pad that no output reads
    is no asymmetry (native._high_padding drops it): same_pad_s2's (0, 1) on a 57-wide input
    runs as PyTorch's plain convolution, 25.5 against the gather kernel's 35.9 us.

    cuDNN's frontend graphs (the cudnn algorithm) are never chosen here, though they measured
    fastest on several dense problems (by 1-10% of GPU time): issuing one costs about 250 us of
    host time (the frontend's Python per execution), against 20-110 us for the others, so a
    model of such layers would wait on the host. Autotuning weighs that too (tuning.tune). For
    the same reason, problems so small that the GPU finishes them faster than PyTorch's call is
    issued (``_host_bound``) keep the TMA kernel's forward, whose bound launch costs half the
    host time, and grouped ones the direct kernel (grouped.host_bound: 21-23 us a call against
    28-32 for PyTorch's grouped convolution, packing would add a weight copy)."""
    from .algorithms import depthwise, grouped, implicit_gemm, native, stem, toeplitz

    if p.device != "cuda" or not implicit_gemm.supports(p)[0]:  # no Triton kernel runs here
        return None
    if grouped.supports(p)[0] and not depthwise.supports(p)[0]:  # packed through cuDNN, unless tiny
        if grouped.host_bound(p):  # the rows or direct kernel's bound launch
            return None
        config = grouped.default_config(p)
        if config.kernel == "rows":
            return None
        if p.pass_ == "wgrad" and grouped.rows_reason(p) is None:  # outside the rows kernel's wins
            return "implicit_gemm" if grouped.lanes_padded(p) else "native"
        ours = config.packed_by == "native" and not _host_bound(p)
        return None if ours else "native"
    if p.pass_ == "wgrad":
        if depthwise.supports(p)[0] and (p.ndim == 1 or depthwise.wgrad_wins(p)):
            return None
        if implicit_gemm.tma_reason(p) is None and not _host_bound(p):
            if implicit_gemm.long_step_wgrad(p):  # 64 x 64 tiles, 128 positions a step
                return None
            if any(d > 1 for d in p.input_dilation) and implicit_gemm.phases_in_one_launch(p):  # transposed
                return None
            if (implicit_gemm.pointwise_wgrad(p)  # long reductions into small dw
                    and implicit_gemm.wgrad_positions(p) >= 4 * p.out_channels * p.x_shape[0]):
                return None
        return "native"
    if depthwise.supports(p)[0]:
        if math.prod(p.kernel) >= TOEPLITZ_MIN_TAPS and toeplitz.supports(p)[0] and (
                p.dtype != torch.float32 or p.allow_tf32):
            return "toeplitz"
        # the direct kernel, 3x3 too: dw3x3_56 56.2 against 57.4 us, dw3x3s2_112 65.7 against 73.7
        return None
    if stem.supports(p)[0] and stem.wins(p) and not _host_bound(p, 3.0 if p.ndim == 1 else 1.0):
        return "stem"
    asymmetric, strided = native.pads_a_copy(p), any(s > 1 for s in p.stride)
    if strided and asymmetric:  # PyTorch pads a copy first
        return None
    if strided and implicit_gemm.takes_space_to_depth(p):  # stems
        return None
    if implicit_gemm.tma_reason(p) is None:
        one_wave = not strided and implicit_gemm.one_wave(p)
        if p.pass_ == "dgrad":  # cuDNN's backward-data kernels (native.forward_of_dgrad), but a
            # strided convolution's (input-dilated) over several taps (the TMA kernel's phases) and
            # one-wave layers'; tiny ones too, as one convolution_backward with the weight gradient
            phases = any(d > 1 for d in p.input_dilation) and p.kernel != (1,) * p.ndim
            ours = not _host_bound(p) and (phases or one_wave)
            return "native" if p.groups == 1 and not ours else None
        ragged = p.o_per_group > 128 and p.o_per_group % 128  # e.g. 320 output channels
        pytorch = (p.pass_ == "fwd" and not asymmetric and not _host_bound(p) and not ragged
                   and not any(d > 1 for d in p.input_dilation) and not one_wave)
        return "native" if pytorch else None
    return None if implicit_gemm.default_config(p).packed else "native"


# Depthwise kernels with at least this many taps run as banded GEMMs on tensor cores (toeplitz):
# the crossover measured on the H200 lies between 49 (7x7) and 64 (1-D k=64) taps.
TOEPLITZ_MIN_TAPS = 64

def _host_bound(p: ConvProblem, times_floor: float = 1.0) -> bool:
    """True when the GPU would finish ``p`` (at 4 x ``times_floor`` times its roofline floor)
    before the host has issued PyTorch's call for it: the Triton kernels' cheaper launch wins."""
    return p.done_within(NATIVE_CALL_HOST_S, 4 * times_floor)


def _tuned_plan(tuned: tuning.Tuned) -> Plan:
    n = sum(len(t) for t in tuned.timings_ms.values())
    reason = f"fastest of {n} correct candidates: {tuned.best_ms:.4g} ms"
    return Plan(REGISTRY[tuned.algorithm], tuned.config, reason, "tuned", tuned)


def _tuned(p: ConvProblem) -> Plan:
    """The tuned plan of ``p``: from memory or the persistent cache, else measured now."""
    store, rank = tuning.store(), _autotune
    tuned = store.get(p, rank)
    if tuned is None:
        with _tune_lock:
            tuned = store.get(p, rank)  # another thread may have tuned it meanwhile
            if tuned is None:
                heuristic = _choose(p)
                tuned = tuning.tune(p, heuristic.name, rank)
                if tuned is None:
                    warnings.warn(f"autotune: no candidate computed {p} correctly; using the heuristic "
                                  "choice", stacklevel=4)
                    return heuristic
                store.put(p, tuned, rank)
    return _tuned_plan(tuned)


Row = namedtuple("Row", "pass_ algorithm supported reason chosen best_ms")


@dataclass(frozen=True)
class Explanation:
    """Every algorithm's verdict on a problem's three passes, and the planner's choice."""

    problem: ConvProblem
    rows: tuple  # of Row: (pass, algorithm, supported, reason, chosen, best tuned ms or None)
    plans: dict  # pass -> Plan
    notes: dict  # pass -> a remark on where the choice came from (may be empty)
    deterministic: bool = False  # planned under torch's determinism flags

    def chosen(self, pass_: str = "fwd") -> str:
        return self.plans[pass_].name

    def __str__(self) -> str:
        lines = [f"problem: {self.problem}"]
        if self.deterministic:
            lines.append("deterministic mode (torch's flags): cudnn leaves out nondeterministic engines")
        width = max(len(r.algorithm) for r in self.rows)
        for pass_, chosen in self.plans.items():
            note = f"; {self.notes[pass_]}" if self.notes[pass_] else ""
            lines.append(f"{pass_}: {chosen.name} ({chosen.source}){note}")
        timed = any(r.best_ms is not None for r in self.rows)  # a column of tuned times
        for r in self.rows:
            mark = "->" if r.chosen else "  "
            verdict = "yes" if r.supported else "no "
            ms = "" if not timed else f"{r.best_ms:9.4g} ms  " if r.best_ms is not None else " " * 14
            lines.append(f"{mark} {r.pass_:5} {r.algorithm:{width}}  {verdict}  {ms}{r.reason}")
        return "\n".join(lines)


def explain(p: ConvProblem, algorithm: str | None = None) -> Explanation:
    """Which algorithm runs each pass of forward problem ``p`` and why each other one does not,
    with the tuned timings where the tuning cache has them. Nothing is tuned or computed: with
    autotuning on, an untuned pass shows the heuristic choice that tuning would start from."""
    rows, plans, notes = [], {}, {}
    for q in (p, p.dgrad(), p.wgrad()):
        tuned = tuning.store().get(q, _autotune or "call")
        note = ""
        if algorithm is not None or os.environ.get(ENV_ALGORITHM):
            chosen = plan(q, algorithm)
        elif _autotune and tuned is not None:
            chosen = _tuned_plan(tuned)
        else:
            chosen = _choose(q)
            if _autotune:
                note = "autotune on: not tuned yet, tuned at its first call"
            elif tuned is not None:
                note = f"tuned choice {tuned.algorithm} ({tuned.best_ms:.4g} ms) is used with autotune on"
        if tuned is not None and tuned.rejected:
            rejected = f"{len(tuned.rejected)} candidate(s) rejected as wrong or failing"
            note = f"{note}; {rejected}" if note else rejected
        if q is p and not _autotune and differentiable(p, algorithm) is not None:
            direct = ("with autograd: PyTorch's own differentiable convolution (its backward one "
                      "convolution_backward, in C++, not a Python autograd Function)")
            note = f"{note}; {direct}" if note else direct
        plans[q.pass_], notes[q.pass_] = chosen, note
        for name, module in REGISTRY.items():
            ok, reason = module.supports(q)
            if name == chosen.name:
                reason = chosen.reason
            times = tuned.timings_ms.get(name) if tuned is not None else None
            best_ms = min(times.values()) if times else None
            rows.append(Row(q.pass_, name, ok, reason, name == chosen.name, best_ms))
    return Explanation(p, tuple(rows), plans, notes, deterministic_mode())
