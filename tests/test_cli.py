"""python -m ndconv check / explain."""

import subprocess
import sys

from ndconv import cli
from ndconv.algorithms import REGISTRY


def test_check_passes_and_prints_a_table(capsys):
    assert cli.main(["check", "--device", "cpu", "--case", "2d_3x3", "1d_causal_dw",
                     "--dtype", "float32"]) == 0
    out = capsys.readouterr().out
    assert "2d_3x3" in out and "wgrad" in out and "gemm" in out and "all checks passed" in out


def test_check_fails_on_a_wrong_algorithm(monkeypatch, capsys):
    gemm = REGISTRY["gemm"]
    original = gemm.run

    def wrong(p, x, w, out, config=None):
        original(p, x, w, out, config)
        out.mul_(1.01)

    monkeypatch.setattr(gemm, "run", wrong)
    assert cli.main(["check", "--device", "cpu", "--case", "2d_3x3", "--dtype", "float32"]) == 1
    assert "FAIL" in capsys.readouterr().out


def test_explain_command(capsys):
    assert cli.main(["explain", "--x", "2,8,8,4", "--w", "4,3,3,4", "--padding", "1"]) == 0
    assert "-> fwd" in capsys.readouterr().out
    assert cli.main(["explain", "--x", "2,8,8,4", "--w", "4,3,3,5"]) == 2


def test_module_entry_point():
    result = subprocess.run([sys.executable, "-m", "ndconv", "check", "--device", "cpu", "--case", "1d_k3",
                             "--dtype", "float64"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
