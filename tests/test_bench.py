"""The benchmark: suites load, every PyTorch baseline formulation is right, the runner produces
numbers, JSON and a plot on CPU, and a wrong algorithm is reported as wrong, never as a time."""

import json

import pytest
import torch
from cases import CASE_PARAMS, DEVICE, PASSES, for_pass

from ndconv import cli, testing
from ndconv.algorithms import REGISTRY, native
from ndconv.api import make_problem
from ndconv.bench import runner, suites

TINY = [
    {"name": "tiny_3x3", "x": [2, 6, 6, 4], "w": [4, 3, 3, 4], "stride": [1, 1], "padding_lo": [1, 1],
     "padding_hi": [1, 1], "kernel_dilation": [1, 1], "input_dilation": [1, 1], "groups": 1, "flip": False,
     "dtype": "float32", "passes": ["fwd", "dgrad", "wgrad"], "model": "test"},
    {"name": "tiny_causal", "x": [1, 16, 4], "w": [4, 3, 1], "stride": [1], "padding_lo": [2],
     "padding_hi": [0], "kernel_dilation": [1], "input_dilation": [1], "groups": 4, "flip": False,
     "dtype": "float32", "passes": ["fwd", "wgrad"]},
    {"name": "tiny_convT", "x": [1, 4, 4, 3], "w": [2, 3, 3, 3], "stride": [1, 1], "padding_lo": [1, 1],
     "padding_hi": [2, 2], "kernel_dilation": [1, 1], "input_dilation": [2, 2], "groups": 1, "flip": True,
     "dtype": "float32", "passes": ["wgrad"]},
]


@pytest.fixture
def tiny_suite(tmp_path):
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(TINY))
    return str(path)


@pytest.mark.parametrize("name", ["public", "cpu"])
def test_builtin_suites_load(name):
    cases = suites.load_suite(name)
    assert len(cases) >= 12 and all(c.passes for c in cases)
    assert {cat for c in cases for cat in suites.category(c.problem("cpu"))} == {
        "dense", "depthwise", "grouped", "1-D", "3-D", "transposed"}


def test_stems_suite_loads():
    """The stems suite: first layers of at most 4 input channels, all of which stem runs; the
    planner's rule (stem.wins) takes the short reductions."""
    from ndconv.algorithms import stem

    cases = suites.load_suite("stems")
    assert len(cases) >= 6 and all(c.problem("cpu").in_channels <= 4 for c in cases)
    assert all(stem.supports(c.problem(DEVICE))[0] for c in cases)
    assert {c.name for c in cases if stem.wins(c.problem(DEVICE))} == {
        "effnet_stem_3x3s2", "convnext_stem_4x4s4", "vae_conv_in_3x3", "unet_conv_in_c4", "gray_3x3_c1",
        "wav2vec2_conv0", "encodec_conv0_causal", "stereo_k7", "dac_conv0"}


def test_depthwise_suite_loads():
    """The depthwise suite: MobileNetV2's, EfficientNet-B0's, ConvNeXt's and MobileNetV3's depthwise
    layers and X3D's 3-D ones, all three passes, every one taken by the depthwise algorithm."""
    from ndconv.algorithms import depthwise

    cases = suites.load_suite("depthwise")
    assert len(cases) == 33 and all(c.spec["passes"] == ["fwd", "dgrad", "wgrad"] for c in cases)
    assert all(depthwise.supports(c.problem(DEVICE))[0] for c in cases)
    assert {c.problem("cpu").kernel for c in cases} == {(3, 3), (5, 5), (7, 7), (3, 3, 3)}
    assert {c.model for c in cases if c.problem("cpu").in_channels % 16} == {"MobileNetV3-Large", "X3D-M"}


def test_public_suite_is_the_shared_one():
    names = [c.name for c in suites.load_suite("public")]
    assert names[:3] == ["r50_stem_7x7s2", "r50_3x3_56", "r50_1x1_56"] and len(names) == 25


@pytest.mark.parametrize("bad,match", [
    ([{"name": "x"}], "lacks"),
    ([dict(TINY[0], dtype="int8")], "dtype must be one of"),
    ([dict(TINY[0], passes=["backward"])], "passes must be among"),
    ([dict(TINY[0], stride=[0, 1])], "stride must be positive"),
    ({"not": "a list"}, "expected a list"),
])
def test_malformed_suite_files_are_rejected(tmp_path, bad, match):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad))
    with pytest.raises(ValueError, match=match):
        suites.load_suite(str(path))


@pytest.mark.parametrize("pass_", PASSES)
@pytest.mark.parametrize("case", CASE_PARAMS)
def test_every_baseline_formulation_is_right(case, pass_):
    p = case.problem()
    q = for_pass(p, pass_)
    a, b = testing.random_operands(q, seed=7)
    ref = testing.reference_result(q, a, b)
    if pass_ == "wgrad" and p.flip:
        ref = ref.flip(tuple(range(1, 1 + p.ndim)))
    forms = native.formulations(p, pass_)
    assert forms, "every problem has at least one PyTorch formulation"
    for f in forms:
        out = f.to_natural(f.run(*f.prepare(a, b)))
        testing.assert_close(out, ref, testing.tolerance(q), f"{f.name} {pass_}")


def test_runner_on_tiny_cases(tiny_suite, tmp_path):
    result = runner.run_suite(suites.load_suite(tiny_suite), "cpu")
    assert len(result["rows"]) == 6
    for row in result["rows"]:
        assert row["baseline"][1] > 0 and row["best"][1] > 0 and row["planner"]["ms"] > 0
        assert row["floor_ms"] > 0 and row["speedup"] > 0 and row["best_vs_floor"] > 0
        assert row["flops"] > 0 and row["bytes"] > 0 and "gemm" in row["algorithms"]
        assert row["algorithms"]["gemm"]["max_rel_err"] < 1e-4
    assert set(result["summary"]) >= {"dense", "depthwise", "1-D", "transposed", "overall"}
    assert result["env"]["torch"] == torch.__version__ and result["roofline"]["bandwidth_gbs"] > 0
    out_json, out_png = tmp_path / "r.json", tmp_path / "r.png"
    assert cli.main(["bench", "--suite", tiny_suite, "--case", "tiny_3x3", "--passes", "fwd",
                     "--json", str(out_json), "--plot", str(out_png)]) == 0
    data = json.loads(out_json.read_text())
    assert set(data) >= {"env", "roofline", "rows", "summary", "suite"} and len(data["rows"]) == 1
    row = data["rows"][0]
    for key in ("case", "pass", "floor_ms", "baseline", "best", "planner", "speedup", "best_vs_floor",
                "best_tflops", "best_gbs", "baseline_formulations", "algorithms", "checked_on"):
        assert key in row
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("pass_", PASSES)
@pytest.mark.parametrize(
    "shape, groups", [(((3, 6, 5, 8), (8, 3, 3, 2)), 4), (((2, 7, 6, 6), (6, 3, 3, 1)), 6)],
    ids=["grouped", "depthwise"],
)
@pytest.mark.parametrize("limit", [1 << 12, 1 << 15])
def test_a_reference_too_big_for_the_limit_is_a_slice_of_the_full_one(shape, groups, pass_, limit,
                                                                        monkeypatch):
    p = make_problem(*shape, padding=1, groups=groups, dtype=torch.float64)
    q = for_pass(p, pass_)
    a, b = testing.random_operands(q, seed=3)
    full = testing.reference_result(q, a, b)
    monkeypatch.setitem(runner._REFERENCE_LIMIT, "cpu", limit)
    ref, take, where = runner._reference_slice(q, a, b, "cpu")
    assert where != "full" and 0 < ref.numel() < full.numel(), where
    assert take(full).shape == ref.shape
    testing.assert_close(ref, take(full), 1e-12, where)
    if pass_ == "wgrad" and shape[1][-1] == 1:  # one channel per group: only groups can shrink
        assert where.endswith(f"/{groups} groups") and "channels" not in where


def test_a_wrong_algorithm_is_reported_wrong_not_timed(tiny_suite, monkeypatch, capsys):
    gemm = REGISTRY["gemm"]
    original = gemm.run

    def wrong(p, x, w, out, config=None):
        original(p, x, w, out, config)
        out.view(-1)[0] += 1.0

    monkeypatch.setattr(gemm, "run", wrong)
    result = runner.run_suite(suites.load_suite(tiny_suite)[:1], "cpu", passes=["fwd"], algorithms=["gemm"])
    row = result["rows"][0]
    assert "wrong" in row["algorithms"]["gemm"] and "ms" not in row["algorithms"]["gemm"]
    assert row["best"] is None and row["speedup"] is None
    assert cli.main(["bench", "--suite", tiny_suite, "--case", "tiny_3x3", "--passes", "fwd",
                     "--algorithm", "gemm"]) == 1
    assert "WRONG" in capsys.readouterr().out


def test_source_digest_names_the_code(tmp_path):
    """Equal sources give equal digests wherever they lie; a changed or renamed file changes it."""
    from ndconv.bench.runner import source_digest

    for root in (tmp_path / "a", tmp_path / "b"):
        (root / "algorithms").mkdir(parents=True)
        (root / "api.py").write_text("x = 1\n")
        (root / "algorithms" / "k.py").write_text("y = 2\n")
    first = source_digest(tmp_path / "a")
    assert first == source_digest(tmp_path / "b") and len(first) == 12
    (tmp_path / "b" / "algorithms" / "k.py").write_text("y = 3\n")
    assert source_digest(tmp_path / "b") != first
    (tmp_path / "b" / "algorithms" / "k.py").write_text("y = 2\n")
    (tmp_path / "b" / "algorithms" / "k.py").rename(tmp_path / "b" / "algorithms" / "j.py")
    assert source_digest(tmp_path / "b") != first


def test_unknown_case_is_an_error(capsys):
    assert cli.main(["bench", "--case", "nope"]) == 2
    assert "no case nope" in capsys.readouterr().err
