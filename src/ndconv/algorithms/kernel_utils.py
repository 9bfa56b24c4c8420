"""@triton.jit helpers shared by the kernels."""

import triton
import triton.language as tl  # noqa: F401  (Triton requires it in a jit function's module)


@triton.jit
def split_rows(rows, S1, S2, S3):
    """Flat row indices over [batch, S1, S2, S3] (last fastest) as (n, i1, i2, i3)."""
    i3 = rows % S3
    rest = rows // S3
    i2 = rest % S2
    rest = rest // S2
    return rest // S1, rest % S1, i2, i3
