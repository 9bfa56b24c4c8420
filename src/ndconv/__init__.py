"""ndconv: N-d convolutions for PyTorch with MLX's semantics (channels last), fast on NVIDIA GPUs.

    import ndconv
    y = ndconv.conv2d(x, w, stride=2, padding=1)   # x [N, H, W, C], w [O, KH, KW, C]
    print(ndconv.explain(x, w, stride=2, padding=1))
    ndconv.autotune(True)                          # measure every algorithm once per problem
"""

from . import nn
from .api import (
    conv1d,
    conv2d,
    conv3d,
    conv_general,
    conv_transpose1d,
    conv_transpose2d,
    conv_transpose3d,
    explain,
)
from .planner import autotune
from .problem import ConvProblem

__version__ = "0.1.0"

__all__ = [
    "ConvProblem",
    "autotune",
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_general",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "explain",
    "nn",
]
