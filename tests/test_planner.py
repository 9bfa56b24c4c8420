"""The planner: plan cache, autotuning with fake algorithms, the persistent tuning cache (across
processes, corrupt, concurrent), explain, thread safety and the cached call path."""

import json
import os
import subprocess
import sys
import threading
import time
import types
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from cases import DEVICE

import ndconv
from ndconv import api, planner, tuning
from ndconv.algorithms import REGISTRY, reference
from ndconv.algorithms.triton_support import INTERPRET
from ndconv.problem import ConvProblem

SRC = str(Path(ndconv.__file__).parents[1])


def _problem(c=4, o=4, size=8, **args):
    return api.make_problem((2, size, size, c), (o, 3, 3, c), padding=1, **args)


def _fake(name, delay_s=0.0, scale=1.0, configs=(None,)):
    """An algorithm that computes the reference result (times ``scale``), after ``delay_s`` (or
    its config, as a number of seconds). Delays exceed the stalls of torch ops on a loaded CPU."""

    def run(p, x, w, out, config=None):
        time.sleep(delay_s if not isinstance(config, str) else float(config))
        reference.run(p, x, w, out)
        out.mul_(scale)

    return types.SimpleNamespace(
        NAME=name, supports=lambda p: (True, f"{name} fake"), configs=lambda p: list(configs),
        default_config=lambda p: configs[0], run=run,
    )


@pytest.fixture
def registry():
    """The algorithm registry, for the test to change; restored, in its order, afterwards."""
    saved = dict(REGISTRY)
    yield REGISTRY
    REGISTRY.clear()
    REGISTRY.update(saved)


@pytest.fixture
def fakes(registry):
    """Only fake algorithms (and the reference) registered: slow, fast, and fast but wrong."""
    for name in [n for n in registry if n != "reference"]:
        del registry[name]
    registry["slow"] = _fake("slow", delay_s=0.03)
    registry["fast"] = _fake("fast")
    registry["wrong"] = _fake("wrong", scale=1.1)
    return registry


@pytest.fixture
def cpu_algorithms(registry):
    """The real algorithms that run on the CPU without Triton's (slow) interpreter."""
    del registry["depthwise"], registry["toeplitz"], registry["implicit_gemm"], registry["stem"]


# ---------------------------------------------------------------------- plan cache


def test_plan_cache_hits_misses_and_evicts_least_recently_used(monkeypatch):
    monkeypatch.setenv("NDCONV_PLAN_CACHE_SIZE", "2")
    planner.clear_cache()
    p1, p2, p3 = _problem(c=2), _problem(c=3), _problem(c=5)
    first = planner.plan(p1)
    assert planner.cache_info() == (0, 1, 1, 2)
    assert planner.plan(p1) is first  # a hit returns the cached plan itself
    planner.plan(p2)
    planner.plan(p3)  # evicts p1, the least recently used
    assert planner.cache_info() == (1, 3, 2, 2)
    planner.plan(p3)
    planner.plan(p2)
    assert planner.cache_info().hits == 3
    assert planner.plan(p1) is not first  # p1 was evicted: planned again
    assert planner.cache_info() == (3, 4, 2, 2)


def test_plan_cache_capacity_default_and_bad_values(monkeypatch):
    assert planner.cache_info().capacity == 128
    monkeypatch.setenv("NDCONV_PLAN_CACHE_SIZE", "0")
    planner.clear_cache()
    planner.plan(_problem())
    planner.plan(_problem())
    assert planner.cache_info() == (0, 2, 0, 0)
    monkeypatch.setenv("NDCONV_PLAN_CACHE_SIZE", "many")
    with pytest.warns(UserWarning, match="NDCONV_PLAN_CACHE_SIZE must be a non-negative integer"):
        planner.clear_cache()
    assert planner.cache_info().capacity == 128


def test_forced_plans_are_cached_apart_from_chosen_ones(monkeypatch):
    p = _problem()
    assert planner.plan(p).source == "heuristic"
    assert planner.plan(p, "gemm").name == "gemm" and planner.plan(p, "gemm").source == "forced"
    monkeypatch.setenv("NDCONV_ALGORITHM", "reference")
    assert planner.plan(p).reason == "forced by NDCONV_ALGORITHM=reference"
    monkeypatch.delenv("NDCONV_ALGORITHM")
    assert planner.plan(p).name == "native"


@pytest.fixture
def deterministic():
    """Turns torch's deterministic mode on and off (``deterministic(True)``); off afterwards."""
    previous = torch.are_deterministic_algorithms_enabled()
    yield torch.use_deterministic_algorithms
    torch.use_deterministic_algorithms(previous)


def test_plans_follow_torch_determinism_flags(fakes, monkeypatch, deterministic):
    """An algorithm may support fewer problems in deterministic mode (cuDNN's graphs leave out
    their nondeterministic engines), so the plan, tuning and call caches key on the mode: a plan
    made outside it is not reused inside it, nor the other way round."""
    from ndconv.problem import deterministic_mode

    fakes["free"] = _fake("free")
    fakes["free"].supports = lambda p: (not deterministic_mode(), "free fake, nondeterministic")
    monkeypatch.setitem(planner.PREFERENCE, "cpu", ("free", "fast", "reference"))
    runs = []
    for name in ("free", "fast"):
        fakes[name].run = lambda *a, name=name, run=fakes[name].run: (runs.append(name), run(*a))[1]
    x, w = torch.randn(2, 6, 6, 4), torch.randn(4, 3, 3, 4)
    expected = F.conv2d(x.movedim(-1, 1), w.movedim(-1, 1), padding=1).movedim(1, -1)
    p = _problem()
    assert planner.plan(p).name == "free"
    torch.testing.assert_close(ndconv.conv2d(x, w, padding=1), expected)
    ndconv.conv2d(x, w, padding=1)  # the cached call
    key = tuning.cache_key(p)
    deterministic(True)
    assert planner.plan(p).name == "fast" and tuning.cache_key(p) == key + " | deterministic"
    torch.testing.assert_close(ndconv.conv2d(x, w, padding=1), expected)
    deterministic(False)
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", True)
    assert planner.plan(p).name == "fast"
    ndconv.conv2d(x, w, padding=1)
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", False)
    assert planner.plan(p).name == "free" and tuning.cache_key(p) == key
    ndconv.conv2d(x, w, padding=1)
    assert runs == ["free", "free", "fast", "fast", "free"]


def test_cached_calls_neither_validate_nor_plan_again(monkeypatch):
    x, w = torch.randn(1, 5, 5, 2), torch.randn(3, 3, 3, 2)
    expected = ndconv.conv2d(x, w, padding=1)

    def fail(*args, **kwargs):
        raise AssertionError("repeated work on a cached call")

    monkeypatch.setattr(ConvProblem, "create", fail)
    monkeypatch.setattr(planner, "_choose", fail)
    torch.testing.assert_close(ndconv.conv2d(x, w, padding=1), expected)
    torch.testing.assert_close(ndconv.conv2d(x, w, 1, [1]), expected)  # another spelling
    torch.testing.assert_close(ndconv.conv_general(x, w, [1, 1], [1, 1], [1, 1]), expected)  # conv_general


def test_cached_calls_still_reject_what_the_parsers_reject():
    x, w = torch.randn(1, 5, 5, 2), torch.randn(2, 3, 3, 2)
    ndconv.conv_general(x, w, stride=1, groups=1)
    with pytest.raises(ValueError, match="stride must be an int"):
        ndconv.conv_general(x, w, stride=True)  # True == 1, but not for the parser
    with pytest.raises(ValueError, match="groups must be a positive integer"):
        ndconv.conv_general(x, w, groups=True)


# ---------------------------------------------------------------------- autotuning


def test_autotune_picks_the_fast_correct_algorithm(fakes):
    ndconv.autotune(True)
    for p in (_problem(), _problem(c=3, o=6), _problem().wgrad()):
        chosen = planner.plan(p)
        assert (chosen.name, chosen.source) == ("fast", "tuned")
        timings = chosen.tuned.timings_ms
        assert timings["slow"]["default"] > timings["fast"]["default"]
        assert "wrong" not in timings and "wrong result" in chosen.tuned.rejected["wrong[default]"]
        assert "reference" not in timings  # the oracle is never a candidate


def test_autotune_picks_the_fast_config(fakes):
    fakes["fast"] = _fake("fast", configs=("0.05", "0.0", "0.03"))
    del fakes["slow"]
    ndconv.autotune(True)
    chosen = planner.plan(_problem())
    assert (chosen.name, chosen.config) == ("fast", "0.0")
    assert set(chosen.tuned.timings_ms["fast"]) == {"0.05", "0.0", "0.03"}


def test_autotune_times_the_prepared_call(fakes):
    """A candidate is timed as a cached call runs it: through its ``prepare`` where it has one,
    so a prepared call that is slow (here: sleeping) loses even when ``run`` is fast."""
    prepared = _fake("prepared")

    def prepare(p, config):
        def call(a, b):
            time.sleep(0.03)
            out = torch.empty(p.result_shape, dtype=p.dtype)
            prepared.run(p, *p.views(a, b, out), config)
            return out
        return call

    prepared.prepare = prepare
    fakes["prepared"] = prepared
    ndconv.autotune(True)
    chosen = planner.plan(_problem())
    assert chosen.name == "fast"
    assert chosen.tuned.timings_ms["prepared"]["default"] >= 30  # ms: its prepared call's sleep


def test_autotune_is_used_by_the_functions_and_can_be_turned_off(fakes):
    x, w = torch.randn(2, 6, 6, 3), torch.randn(4, 3, 3, 3)
    calls = []
    fast_run = fakes["fast"].run
    fakes["fast"].run = lambda *a: (calls.append(1), fast_run(*a))[1]
    assert ndconv.autotune(True) is False
    y = ndconv.conv2d(x, w, padding=1)
    torch.testing.assert_close(y, F.conv2d(x.movedim(-1, 1), w.movedim(-1, 1), padding=1).movedim(1, -1))
    n = len(calls)  # the tuning's calls and the real one
    ndconv.conv2d(x, w, padding=1)
    assert len(calls) == n + 1  # tuned once per problem
    assert ndconv.autotune(False) is True
    assert planner.plan(_problem(c=3)).source == "heuristic"


@pytest.mark.parametrize("value,setting", [("1", "True"), ("gpu", "gpu"), ("0", "False"), ("often", "False")])
def test_autotune_from_the_environment(value, setting):
    code = "import ndconv.planner as p; print(p.autotuning())"
    env = dict(os.environ, PYTHONPATH=SRC, NDCONV_AUTOTUNE=value)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == setting
    assert ("autotuning stays off" in out.stderr) == (value == "often")


def test_autotune_ranks_by_call_time_or_by_gpu_time(fakes, monkeypatch):
    """Ranked by call time, a candidate's host time counts (here every call costs 1 s to issue,
    so all tie and the first registered, slow, stays); ranked by GPU time it does not (fast).
    The two rankings are tuned and cached apart."""
    monkeypatch.setattr(tuning, "_host_ms", lambda call, a, b: 1e3)
    p = _problem()
    ndconv.autotune(True)
    assert planner.plan(p).name == "slow"
    assert ndconv.autotune("gpu") is True and planner.autotuning() == "gpu"
    assert planner.plan(p).name == "fast"
    assert tuning.store().get(p).algorithm == "slow" and tuning.store().get(p, "gpu").algorithm == "fast"
    with pytest.raises(ValueError, match="'call' or 'gpu'"):
        ndconv.autotune("sometimes")


def test_autotune_times_near_ties_again_longer(fakes, monkeypatch):
    """Candidates within 5% of the best are timed again with a longer budget in interleaved
    rounds, and the median of their rounds decides (one round where slow wins does not); a
    candidate further off is not timed again."""
    from ndconv.bench import timing

    del fakes["wrong"]  # timed in registry order: slow, fast, then far
    fakes["far"] = _fake("far")
    rounds = [1.2, 1.0, 0.9, 1.1, 1.3, 0.95, 1.1, 1.0]  # slow, fast, slow, fast, ...
    quick = {0.05: iter([1.0, 1.04, 2.0]), 0.0625: iter(rounds)}  # by budget: first pass, then ties
    timed = []

    def scripted(call, arg_sets, device, budget_s, max_repeats):
        timed.append(budget_s)
        return types.SimpleNamespace(median_ms=next(quick[budget_s]))

    monkeypatch.setattr(timing, "time_fn", scripted)
    ndconv.autotune("gpu")
    chosen = planner.plan(_problem())
    assert chosen.name == "fast" and timed == [0.05] * 3 + [0.0625] * 8
    assert chosen.tuned.timings_ms == {"slow": {"default": 1.15}, "fast": {"default": 1.0},
                                       "far": {"default": 2.0}}


def test_concurrent_threads_tune_a_problem_once(fakes, monkeypatch):
    ndconv.autotune(True)
    calls = []
    tune = tuning.tune
    monkeypatch.setattr(tuning, "tune", lambda *a: (calls.append(1), tune(*a))[1])
    p = _problem()
    threads = [threading.Thread(target=planner.plan, args=(p,)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls == [1]


# ---------------------------------------------------------------------- the persistent cache


def _entries():
    return json.loads(tuning.cache_path().read_text())["entries"]


def test_tuning_cache_is_written_and_read_by_a_new_process(cpu_algorithms):
    ndconv.autotune(True)
    p = _problem()
    chosen = planner.plan(p)
    entry = _entries()[tuning.cache_key(p)]
    assert entry["algorithm"] == chosen.name and set(entry["timings_ms"]) == {"native", "gemm"}
    assert json.loads(tuning.cache_path().read_text())["version"] == 1
    code = f"""
import ndconv
from ndconv import api, planner, tuning
def no_tuning(*a):
    raise AssertionError("tuned again")
tuning.tune = no_tuning
p = api.make_problem((2, 8, 8, 4), (4, 3, 3, 4), padding=1)
ndconv.autotune(True)
chosen = planner.plan(p)
print(chosen.name, chosen.source, chosen.tuned.timings_ms == {entry["timings_ms"]!r})
"""
    env = dict(os.environ, PYTHONPATH=SRC)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [chosen.name, "tuned", "True"]


@pytest.mark.parametrize("content, message", [
    ("{not json", "corrupt"),
    ('{"version": 2, "entries": {}}', "not an ndconv tuning cache of version 1"),
    ("[1, 2]", "not an ndconv tuning cache"),
])
def test_corrupt_or_foreign_cache_is_ignored_with_a_warning(fakes, content, message):
    path = tuning.cache_path()
    path.parent.mkdir(parents=True)
    path.write_text(content)
    ndconv.autotune(True)
    with pytest.warns(tuning.TuningCacheWarning, match=message):
        chosen = planner.plan(_problem())
    assert (chosen.name, chosen.source) == ("fast", "tuned")
    assert list(_entries()) == [tuning.cache_key(_problem())]  # replaced by a valid file


@pytest.mark.parametrize("entry", [
    {"algorithm": "gone", "config": None, "timings_ms": {"gone": {"default": 1.0}}},
    {"algorithm": "fast", "config": {"block_m": 7}, "timings_ms": {"fast": {"default": 1.0}}},
    {"algorithm": "fast", "config": None, "timings_ms": {}},
    {"algorithm": "fast"},
])
def test_entries_that_do_not_rebuild_are_ignored_with_a_warning(fakes, entry):
    p = _problem()
    path = tuning.cache_path()
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"version": 1, "entries": {tuning.cache_key(p): entry}}))
    ndconv.autotune(True)
    with pytest.warns(tuning.TuningCacheWarning, match="ignoring the tuning cache entry"):
        chosen = planner.plan(p)
    assert (chosen.name, chosen.source) == ("fast", "tuned")
    assert _entries()[tuning.cache_key(p)]["algorithm"] == "fast"


def test_dataclass_configs_round_trip(fakes):
    from ndconv.algorithms import implicit_gemm

    p = _problem()
    config = implicit_gemm.configs(p)[1]
    fakes["implicit_gemm"] = implicit_gemm
    tuned = tuning.Tuned("implicit_gemm", config, {"implicit_gemm": {tuning.config_label(config): 1.0}}, {})
    tuning.store().put(p, tuned)
    stored = _entries()[tuning.cache_key(p)]["config"]
    assert stored["block_m"] == config.block_m
    tuning.reset()
    assert tuning.store().get(p) == tuned


def test_unwritable_cache_warns_and_keeps_the_result_in_memory(fakes, tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("NDCONV_CACHE_DIR", str(blocker / "sub"))  # a directory under a file
    planner.clear_cache()
    ndconv.autotune(True)
    with pytest.warns(tuning.TuningCacheWarning) as record:
        assert planner.plan(_problem()).name == "fast"
    assert [str(r.message).split(" the tuning cache")[0] for r in record] == ["ignoring", "could not write"]
    assert tuning.store().get(_problem()).algorithm == "fast"


def test_concurrent_processes_merge_their_entries():
    code = """
import sys
import ndconv
from ndconv import api, planner
ndconv.autotune(True)
c = int(sys.argv[1])
planner.plan(api.make_problem((1, 6, 6, c), (2, 3, 3, c), padding=1))
"""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # native and gemm only
    env["PYTHONPATH"] = SRC
    procs = [subprocess.Popen([sys.executable, "-c", code, str(c)], env=env, stderr=subprocess.PIPE,
                              text=True) for c in (1, 2, 3, 5)]
    for proc in procs:
        assert proc.wait(timeout=120) == 0, proc.stderr.read()
    keys = list(_entries())
    assert len(keys) == 4 and all(f"x=[1, 6, 6, {c}]" in " ".join(keys) for c in (1, 2, 3, 5))
    assert not list(tuning.cache_path().parent.glob("*.tmp"))


# ---------------------------------------------------------------------- explain


def _rows(e, pass_="fwd"):
    return {r.algorithm: r for r in e.rows if r.pass_ == pass_}


def test_explain_dense():
    e = ndconv.explain((2, 8, 8, 16), (32, 3, 3, 16), padding=1)
    rows, text = _rows(e), str(e)
    assert e.chosen() == "native" and e.plans["fwd"].source == "heuristic"
    assert rows["native"].chosen and rows["native"].reason.startswith("first in preference order")
    assert rows["reference"].supported and not rows["depthwise"].supported
    if INTERPRET:  # the Triton algorithms take CPU tensors: their refusals are about the problem
        assert "GEMM" in rows["depthwise"].reason
        assert not rows["grouped"].supported and "not a grouped convolution" in rows["grouped"].reason
        assert rows["implicit_gemm"].supported
    assert "fwd: native (heuristic)" in text and " ms " not in text  # nothing tuned, no timings
    assert "deterministic mode" not in text


def test_explain_says_when_planned_in_deterministic_mode(deterministic):
    deterministic(True)
    e = ndconv.explain((2, 8, 8, 16), (32, 3, 3, 16), padding=1)
    assert e.deterministic and str(e).splitlines()[1].startswith("deterministic mode")


@pytest.mark.skipif(not INTERPRET and not torch.cuda.is_available(), reason="no Triton device")
def test_explain_depthwise():
    e = ndconv.explain((2, 8, 8, 6), (6, 3, 3, 1), padding=1, groups=6, device=DEVICE)
    for pass_ in ("fwd", "dgrad", "wgrad"):
        assert _rows(e, pass_)["depthwise"].supported
    assert "direct kernel" in _rows(e)["depthwise"].reason and "groups=6" in str(e)


@pytest.mark.skipif(not INTERPRET and not torch.cuda.is_available(), reason="no Triton device")
def test_explain_transposed():
    x, w = torch.randn(1, 4, 4, 3, device=DEVICE), torch.randn(5, 4, 4, 3, device=DEVICE)
    ndconv.conv_transpose2d(x, w, stride=2, padding=1)  # the same problem as:
    e = ndconv.explain(x, w, 1, ([2, 2], [2, 2]), 1, 2, flip=True)
    assert "idil=[2, 2]" in str(e) and "flip" in str(e)
    assert "output phases" in _rows(e)["implicit_gemm"].reason


@pytest.mark.parametrize("x, w", [((2, 9, 5), (6, 3, 5)), ((1, 4, 5, 4, 3), (4, 3, 3, 3, 3))],
                         ids=["1d", "3d"])
def test_explain_1d_and_3d(x, w):
    e = ndconv.explain(x, w, padding=1, dtype=torch.bfloat16)
    assert f"x={list(x)}" in str(e) and "bfloat16" in str(e)
    assert all(e.chosen(q) == "native" for q in ("fwd", "dgrad", "wgrad"))
    assert len(e.rows) == 3 * len(REGISTRY)


@pytest.mark.skipif(torch.cuda.is_available(), reason="shows a CUDA problem on a machine without one")
def test_explain_a_cuda_problem_without_a_gpu():
    e = ndconv.explain((2, 8, 8, 16), (32, 3, 3, 16), device="cuda", dtype=torch.float16)
    assert "needs an NVIDIA GPU" in _rows(e)["implicit_gemm"].reason and e.chosen() == "native"


def test_explain_forced(monkeypatch):
    e = ndconv.explain((2, 8, 8, 4), (4, 3, 3, 4), padding=1, algorithm="gemm")
    assert all(e.chosen(q) == "gemm" and e.plans[q].source == "forced" for q in ("fwd", "dgrad", "wgrad"))
    assert "fwd: gemm (forced)" in str(e) and "forced by algorithm=gemm" in str(e)
    monkeypatch.setenv("NDCONV_ALGORITHM", "reference")
    assert "forced by NDCONV_ALGORITHM=reference" in str(ndconv.explain((2, 8, 8, 4), (4, 3, 3, 4)))


def test_explain_tuned(fakes):
    shapes = {"input": (2, 8, 8, 4), "weight": (4, 3, 3, 4), "padding": 1}
    ndconv.autotune(True)
    before = ndconv.explain(**shapes)
    assert "not tuned yet" in str(before) and before.chosen() == "reference"  # nothing is tuned by explain
    planner.plan(before.problem)  # tunes the forward pass
    e = ndconv.explain(**shapes)
    rows, text = _rows(e), str(e)
    assert e.chosen() == "fast" and e.plans["fwd"].source == "tuned" and "fwd: fast (tuned)" in text
    assert rows["slow"].best_ms > rows["fast"].best_ms and rows["reference"].best_ms is None
    assert "fastest of 2 correct candidates" in rows["fast"].reason and "1 candidate(s) rejected" in text
    assert e.chosen("dgrad") == "reference" and _rows(e, "dgrad")["fast"].best_ms is None
    ndconv.autotune(False)
    off = ndconv.explain(**shapes)
    assert off.chosen() == "reference" and "tuned choice fast" in str(off)


def test_explain_command_options(capsys):
    from ndconv import cli

    args = ["explain", "--x", "2,8,8,4", "--w", "4,3,3,4"]
    assert cli.main([*args, "--algorithm", "gemm", "--dtype", "float16"]) == 0
    out = capsys.readouterr().out
    assert "forced by algorithm=gemm" in out and "float16" in out
    assert cli.main([*args, "--autotune"]) == 0
    assert "not tuned yet" in capsys.readouterr().out


# ---------------------------------------------------------------------- threads


def test_threads_share_the_caches(monkeypatch):
    monkeypatch.setenv("NDCONV_PLAN_CACHE_SIZE", "2")
    planner.clear_cache()
    g = torch.Generator().manual_seed(0)
    cases = [(torch.randn(2, s, s, c, generator=g), torch.randn(o, k, k, c, generator=g), k // 2)
             for s, c, o, k in ((5, 2, 3, 3), (6, 3, 2, 1), (7, 4, 4, 3), (4, 1, 5, 5), (8, 2, 2, 3))]
    expected = [F.conv2d(x.movedim(-1, 1), w.movedim(-1, 1), padding=pad).movedim(1, -1)
                for x, w, pad in cases]
    errors = []

    def work(offset):
        try:
            for i in range(30):
                j = (i + offset) % len(cases)
                x, w, pad = cases[j]
                torch.testing.assert_close(ndconv.conv2d(x, w, padding=pad), expected[j])
        except Exception as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert planner.cache_info().size <= 2 and planner.call_cache().info().size <= 2
    calls = planner.call_cache().info()
    assert calls.hits + calls.misses == 6 * 30  # every call looked itself up
