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
def aligned(v, ALIGN: tl.constexpr):
    """``v``, which the launcher found to be a multiple of ALIGN (triton_support.alignment_hint),
    written so that Triton knows it (it learns an argument's divisibility only by 16): with
    position strides and channel counts multiples of ALIGN, ALIGN lanes load and store as one
    vector."""
    return v // ALIGN * ALIGN


@triton.jit
def dot(a, b, acc, PRECISION: tl.constexpr, UPCAST: tl.constexpr):
    """acc + a @ b. UPCAST: Triton's interpreter computes half-precision dots wrongly; the GPU
    never upcasts."""
    if UPCAST:
        a = a.to(tl.float32)
        b = b.to(tl.float32)
    return tl.dot(a, b, acc, input_precision=PRECISION)


@triton.jit
def downcast(x, dtype: tl.constexpr, INTERPRET: tl.constexpr):
    """fp32 ``x`` as ``dtype``, rounded to nearest even. The GPU's conversion does that; Triton's
    interpreter truncates to bfloat16 (twice the error), so there the rounding is done on the bits."""
    if INTERPRET and dtype == tl.bfloat16:
        bits = x.to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        return bits.to(tl.uint16).to(tl.bfloat16, bitcast=True)
    return x.to(dtype)


@triton.jit
def input_index(j, t, ST, KD, ID, LO, S, ok):
    """Undilated input index that output j reads through read-order tap t, and whether it is a
    real element (inside the input, not an inserted zero)."""
    u = j * ST + t * KD - LO
    return u // ID, ok & (u >= 0) & (u <= (S - 1) * ID) & (u % ID == 0)
