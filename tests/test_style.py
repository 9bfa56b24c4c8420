"""The code stays within the style pyproject.toml sets (ruff: pycodestyle errors and warnings,
pyflakes, 110 columns), so an unused import or an undefined name fails CI like a wrong result."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_ruff_finds_nothing():
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "src", "tests", "tools"],
                            cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
