"""What every Triton algorithm checks before it runs: is Triton importable, and is there a device
to run on (an NVIDIA GPU of compute capability 8.0 or newer, or Triton's interpreter for CPU
tensors when ``TRITON_INTERPRET=1``)."""

from __future__ import annotations

import os
from functools import lru_cache

import torch

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


@lru_cache(maxsize=None)
def triton_available() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


@lru_cache(maxsize=None)
def _cuda_capability_ok() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 0)


def device_reason(p) -> str | None:
    """None when a Triton kernel can run problem ``p`` on its device, else why not."""
    if not triton_available():
        return "Triton is not installed"
    if p.device == "cuda":
        return None if _cuda_capability_ok() else "needs an NVIDIA GPU of compute capability 8.0+"
    if p.device == "cpu" and INTERPRET:
        return None
    return f"Triton kernels need a CUDA device (or TRITON_INTERPRET=1 for CPU tensors), not {p.device}"
