"""@triton.jit helpers shared by the kernels."""

import triton
import triton.language as tl


@triton.jit
def split_rows(rows, S1, S2, S3):
    """Flat row indices over [batch, S1, S2, S3] (last fastest) as (n, i1, i2, i3)."""
    i3 = rows % S3
    rest = rows // S3
    i2 = rest % S2
    rest = rest // S2
    return rest // S1, rest % S1, i2, i3


@triton.jit
def dot(a, b, acc, PRECISION: tl.constexpr, UPCAST: tl.constexpr):
    """acc + a @ b. UPCAST: Triton's interpreter computes half-precision dots wrongly; the GPU
    never upcasts."""
    if UPCAST:
        a = a.to(tl.float32)
        b = b.to(tl.float32)
    return tl.dot(a, b, acc, input_precision=PRECISION)
