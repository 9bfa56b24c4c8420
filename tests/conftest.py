import os
import sys

# Triton kernels run in the interpreter on CPU-only machines; this must precede importing triton.
if not os.environ.get("CUDA_VISIBLE_DEVICES") and not os.path.exists("/dev/nvidia0"):
    os.environ.setdefault("TRITON_INTERPRET", "1")

sys.path.insert(0, os.path.dirname(__file__))

import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

# "ci" (the default) draws the same examples every run, so a CI result is reproducible;
# HYPOTHESIS_PROFILE=explore draws fresh ones (run it locally to look for new failures).
settings.register_profile("ci", max_examples=60, deadline=None, print_blob=True, derandomize=True)
settings.register_profile("explore", max_examples=200, deadline=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(autouse=True)
def _fresh_planner(tmp_path, monkeypatch):
    """Each test starts with empty plan caches, autotuning off and its own tuning-cache directory
    (never the user's)."""
    from ndconv import planner

    monkeypatch.setenv("NDCONV_CACHE_DIR", str(tmp_path / "ndconv-cache"))
    monkeypatch.delenv("NDCONV_AUTOTUNE", raising=False)
    monkeypatch.delenv("NDCONV_PLAN_CACHE_SIZE", raising=False)
    previous = planner.autotune(False)
    planner.clear_cache()
    yield
    planner.autotune(previous)


@pytest.fixture(autouse=True)
def _seeded_torch():
    """Operands a test draws without its own generator are the same every run."""
    import torch

    torch.manual_seed(0)


@pytest.fixture
def full_fp32(monkeypatch):
    """fp32 problems on a GPU without TF32, so that the fp32 tolerances (exact fp32 products)
    hold; modules use it with ``pytestmark = pytest.mark.usefixtures("full_fp32")``."""
    import torch

    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
