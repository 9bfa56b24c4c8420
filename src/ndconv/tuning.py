"""Autotuning: time every candidate (algorithm, config) of a problem once, keep the fastest whose
result is right, and remember the choice across processes.

Candidates are every registered algorithm that supports the problem except the reference (the
oracle), each with up to ``MAX_CONFIGS`` of its configs, the default first. Each is timed on
random operands (CUDA events on the GPU, ``time.perf_counter`` around the synchronous call on the
CPU; median after warm-up) and its result compared with the float64 reference, or with the
heuristic choice's result when the reference would be too large to compute.

Results persist in ``$NDCONV_CACHE_DIR/ndconv-tune-v1.json`` (default ``$XDG_CACHE_HOME/ndconv``
or ``~/.cache/ndconv``)::

    {"version": 1, "entries": {KEY: {"algorithm": NAME, "config": CONFIG,
                                     "timings_ms": {NAME: {CONFIG_LABEL: MS}}, "rejected": {...}}}}

KEY names the device, the torch / Triton / ndconv versions, the problem and the ranking, so
results of another GPU or another version are never used. Candidates are ranked (``RANKINGS``)
by the time of a call, the larger of its GPU time and the host time to issue it ("call": a
call cannot finish before it is issued), or by GPU time alone ("gpu": for calls replayed from
CUDA graphs, which cost no host time). A config is stored as its dataclass fields (or as itself
when it is a string or None) and rebuilt through the algorithm's ``default_config``. Writers merge
with the file's current content under a lock file and replace the file atomically, so concurrent
processes neither corrupt it nor lose each other's entries. A corrupt or foreign file, or an
entry that no longer rebuilds, is ignored with a warning.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import tempfile
import threading
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path

import torch

from .algorithms import REGISTRY, prepared_call
from .problem import ConvProblem, deterministic_mode

VERSION = 1
FILE_NAME = f"ndconv-tune-v{VERSION}.json"
ENV_CACHE_DIR = "NDCONV_CACHE_DIR"
MAX_CONFIGS = 8
RANKINGS = ("call", "gpu")
# Largest im2col (rows x reduction x groups) the float64 reference may build for a spot-check;
# beyond it candidates are compared with the heuristic choice's result instead.
REFERENCE_ELEMENTS = 1 << 24
_BUDGET_S = 0.05  # timing budget per candidate
_MAX_REPEATS = 25
# The fastest config of each algorithm within this factor of the best is timed again, longer, in
# interleaved rounds on operands allocated anew each round (the median of the rounds' medians):
# a 25-call median differs by a few percent between two runs on the H200, timings taken one
# after another drift, and some kernels' times depend on where their operands lie
# (docs/PERFORMANCE.md).
_CLOSE = 1.05
_FINAL_ROUNDS, _FINAL_BUDGET_S, _FINAL_MAX_REPEATS = 4, 0.25, 200

try:
    import fcntl
except ImportError:  # Windows: writes stay atomic, concurrent writers may drop each other's entries
    fcntl = None


class TuningCacheWarning(UserWarning):
    """The persistent tuning cache (or one of its entries) was unusable and is ignored."""


@dataclass(frozen=True)
class Tuned:
    """The outcome of tuning one problem."""

    algorithm: str
    config: object
    timings_ms: dict  # algorithm -> {config label: median ms}, correct candidates only
    rejected: dict  # "algorithm[config label]" -> why it was not timed (wrong result, error)

    @property
    def best_ms(self) -> float:
        return self.timings_ms[self.algorithm][config_label(self.config)]


def config_label(config) -> str:
    """A short readable name for a config: its fields, or itself."""
    if dataclasses.is_dataclass(config):
        return ",".join(f"{f.name}={getattr(config, f.name)}" for f in dataclasses.fields(config))
    return "default" if config is None else str(config)


# ---------------------------------------------------------------------- measuring


def candidates(p: ConvProblem) -> list[tuple[str, object]]:
    """(algorithm name, config) pairs worth timing for ``p``, default configs first."""
    out = []
    for name, module in REGISTRY.items():
        if name == "reference" or not module.supports(p)[0]:
            continue
        out += [(name, config) for config in list(module.configs(p))[:MAX_CONFIGS]]
    return out


def tune(p: ConvProblem, heuristic_name: str, rank: str = "call") -> Tuned | None:
    """Times every candidate of ``p`` and returns the fastest correct one by ``rank`` (one of
    RANKINGS), or None if none is correct."""
    from . import testing  # testing imports the public API, which imports the planner
    from .bench.timing import time_fn

    # operands rotated as the bench does: a layer in a model reads them from HBM, not from L2
    sets = testing.operand_sets(p, seed=0)
    a, b = sets[0]
    im2col = p.gemm_mnk[0] * p.gemm_mnk[2] * p.groups
    if im2col <= REFERENCE_ELEMENTS:
        expected, tol = testing.reference_result(p, a, b), testing.tolerance(p)
    else:  # two rounded results differ by up to twice the tolerance
        expected, tol = testing.run_algorithm(heuristic_name, p, a, b), 2 * testing.tolerance(p)
    timings, rejected, fastest = {}, {}, {}  # fastest: algorithm -> (ms, config, call)

    def measure(call, budget_s, max_repeats, operands=sets):
        ms = time_fn(call, operands, p.device, budget_s=budget_s, max_repeats=max_repeats).median_ms
        return max(ms, _host_ms(call, a, b)) if rank == "call" else ms

    with torch.no_grad():
        for name, config in candidates(p):
            label = config_label(config)
            try:
                report = testing.compare(testing.run_algorithm(name, p, a, b, config), expected, tol)
                if not report.ok:
                    rejected[f"{name}[{label}]"] = f"wrong result: {report}"
                    continue
                # timed as a cached call runs it (prepared_call); ranked "call", host time
                # included: a call cannot run faster than it is issued
                call = prepared_call(REGISTRY[name], p, config)
                ms = measure(call, _BUDGET_S, _MAX_REPEATS)
            except Exception as e:  # a config that does not compile or run is a rejected candidate
                rejected[f"{name}[{label}]"] = f"{type(e).__name__}: {e}"[:200]
                continue
            timings.setdefault(name, {})[label] = ms
            if name not in fastest or ms < fastest[name][0]:
                fastest[name] = (ms, config, call)
        if not fastest:
            return None
        least = min(ms for ms, _, _ in fastest.values())
        close = {name: f for name, f in fastest.items() if f[0] <= _CLOSE * least}
        if len(close) > 1:  # a near tie between algorithms: measured again, longer, interleaved
            rounds = {name: [] for name in close}
            for operands in _placements(p, sets, _FINAL_ROUNDS):
                for name, (_, _, call) in close.items():
                    rounds[name].append(measure(call, _FINAL_BUDGET_S / _FINAL_ROUNDS,
                                                _FINAL_MAX_REPEATS // _FINAL_ROUNDS, operands))
            for name, (_, config, call) in close.items():
                ms = statistics.median(rounds[name])
                timings[name][config_label(config)] = ms
                fastest[name] = (ms, config, call)
    name = min(fastest, key=lambda n: fastest[n][0])
    return Tuned(name, fastest[name][1], timings, rejected)


def _placements(p: ConvProblem, sets: list, rounds: int) -> list:
    """Operand sets for the final rounds: ``sets``, then sets drawn anew and all kept alive, so
    that each round's operands lie elsewhere in memory (on the H200 a TMA kernel's time on
    r50_3x3_7 moved between 30.7 and 37.7 us with where its operands lay, PyTorch's by 1%:
    docs/PERFORMANCE.md, thirty-third session); ``sets`` every round off the GPU, or where the
    new sets would take more than a quarter of the GPU's free memory."""
    from . import testing

    device = sets[0][0].device
    nbytes = sum(t.nbytes for pair in sets for t in pair)
    if device.type != "cuda" or (rounds - 1) * nbytes > torch.cuda.mem_get_info(device)[0] // 4:
        return [sets] * rounds
    return [sets] + [testing.operand_sets(p, seed=1000 * r, device=device) for r in range(1, rounds)]


def _host_ms(call, a, b, calls: int = 5) -> float:
    """The host time to issue one ``call(a, b)``: the least of a few calls issued back to back
    on an idle device (a single sample was measured 2-3x too high on the H200 machine, where a
    stall of the first call after a sync is common; the least is the steady cost)."""
    if a.device.type == "cuda":
        torch.cuda.synchronize(a.device)
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        call(a, b)
        times.append(time.perf_counter() - t0)
    return 1e3 * min(times)


# ---------------------------------------------------------------------- the persistent cache


def cache_path() -> Path:
    base = os.environ.get(ENV_CACHE_DIR)
    if not base:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ndconv"
    return Path(base) / FILE_NAME


@cache
def _versions() -> str:
    from . import __version__

    try:
        triton = metadata.version("triton")
    except metadata.PackageNotFoundError:
        triton = "none"
    return f"torch {torch.__version__} | triton {triton} | ndconv {__version__}"


@cache
def _cuda_name(index: int) -> str:
    return torch.cuda.get_device_name(index)


def cache_key(p: ConvProblem, rank: str = "call") -> str | None:
    """The persistent key of ``p`` tuned by ``rank``: device name, library versions, the problem
    and the ranking (None when the problem's device is absent, e.g. a CUDA problem explained on
    a machine without a GPU)."""
    if p.device == "cuda":
        if not torch.cuda.is_available():
            return None
        device = _cuda_name(torch.cuda.current_device())
    else:
        device = p.device
    mode = " | deterministic" if deterministic_mode() else ""  # cuDNN's graphs then have fewer engines
    return f"{device} | {_versions()} | {p}{mode}" + ("" if rank == "call" else f" | ranked by {rank} time")


def _encode(config):
    if dataclasses.is_dataclass(config):
        return dataclasses.asdict(config)
    if config is None or isinstance(config, (str, int, float, bool)):
        return config
    raise TypeError(f"config {config!r} is not serialisable")


def _decode(p: ConvProblem, entry) -> Tuned:
    """The Tuned of a stored entry; raises if it does not describe a current candidate of ``p``."""
    module = REGISTRY[entry["algorithm"]]
    default = module.default_config(p)
    value = entry["config"]
    config = type(default)(**value) if dataclasses.is_dataclass(default) else value
    if config != default and config not in module.configs(p):
        raise ValueError(f"{config!r} is not a config of {module.NAME} for this problem")
    timings = {str(n): {str(k): float(v) for k, v in t.items()} for n, t in entry["timings_ms"].items()}
    if config_label(config) not in timings.get(module.NAME, {}):
        raise ValueError("the choice has no timing")
    return Tuned(module.NAME, config, timings, dict(entry.get("rejected", {})))


def _read(path: Path) -> tuple[dict, str | None]:
    """The file's entries, and why it was ignored (None when it was fine or absent)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}, None
    except (OSError, UnicodeDecodeError) as e:
        return {}, f"unreadable ({e})"
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        return {}, f"corrupt ({e})"
    entries = data.get("entries") if isinstance(data, dict) and data.get("version") == VERSION else None
    if not isinstance(entries, dict):
        return {}, f"not an ndconv tuning cache of version {VERSION}"
    return entries, None


@contextmanager
def _file_lock(path: Path):
    with open(path.with_name(path.name + ".lock"), "a") as f:
        if fcntl:
            fcntl.flock(f, fcntl.LOCK_EX)
        yield  # closing the file releases the lock


class Store:
    """The tuning results of this process, backed by the persistent file (read once, at first
    use; written through on every new result). Thread-safe."""

    def __init__(self, path: Path):
        self.path = path
        self._lock = threading.Lock()
        self._raw = None  # the file's entries, by key
        self._tuned = {}  # decoded results, by key

    def _entries(self) -> dict:
        if self._raw is None:
            self._raw, problem = _read(self.path)
            if problem:
                warnings.warn(f"ignoring the tuning cache {self.path}: {problem}", TuningCacheWarning,
                              stacklevel=4)
        return self._raw

    def get(self, p: ConvProblem, rank: str = "call") -> Tuned | None:
        key = cache_key(p, rank)
        if key is None:
            return None
        with self._lock:
            if key in self._tuned:
                return self._tuned[key]
            entry = self._entries().get(key)
            if entry is None:
                return None
            try:
                tuned = _decode(p, entry)
            except (KeyError, TypeError, ValueError, AttributeError) as e:
                warnings.warn(f"ignoring the tuning cache entry for {p}: {type(e).__name__}: {e}",
                              TuningCacheWarning, stacklevel=3)
                del self._raw[key]
                return None
            self._tuned[key] = tuned
            return tuned

    def put(self, p: ConvProblem, tuned: Tuned, rank: str = "call") -> None:
        """Keeps ``tuned`` (ranked by ``rank``) in memory and merges it into the file (a warning
        if that fails)."""
        key = cache_key(p, rank)
        if key is None:
            return
        with self._lock:
            self._tuned[key] = tuned
            try:
                entry = {"algorithm": tuned.algorithm, "config": _encode(tuned.config),
                         "timings_ms": tuned.timings_ms, "rejected": tuned.rejected}
                self._raw = self._write(key, entry)
            except (OSError, TypeError) as e:
                warnings.warn(f"could not write the tuning cache {self.path}: {e}", TuningCacheWarning,
                              stacklevel=3)

    def _write(self, key: str, entry: dict) -> dict:
        """Merges ``entry`` into the file's current content; returns the merged entries."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with _file_lock(self.path):
            entries, _ = _read(self.path)  # other processes' entries since we last read
            entries[key] = entry
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=self.path.name, suffix=".tmp")
            try:
                with os.fdopen(fd, "w") as f:
                    json.dump({"version": VERSION, "entries": entries}, f, indent=1, sort_keys=True)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, self.path)
            except BaseException:
                os.unlink(tmp)
                raise
        return entries


_store: Store | None = None
_store_lock = threading.Lock()


def store() -> Store:
    """The process's Store for the cache file that ``NDCONV_CACHE_DIR`` names now."""
    global _store
    with _store_lock:
        if _store is None:
            _store = Store(cache_path())
        return _store


def reset() -> None:
    """Forgets the in-memory results; the next use re-reads the file (and the variable)."""
    global _store
    with _store_lock:
        _store = None
