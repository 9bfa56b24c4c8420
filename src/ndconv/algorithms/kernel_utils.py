"""@triton.jit helpers shared by the kernels, and the kernels several algorithms launch: the sum of
the weight gradients' float32 partial sums, and a tiled copy between layouts."""

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


@triton.jit
def sum_partials_kernel(ws_ptr, out_ptr, S, M, B, TRANSPOSE: tl.constexpr, INT64: tl.constexpr,
                        INTERPRET: tl.constexpr, SPLITS: tl.constexpr, BLOCK: tl.constexpr):
    """out = the sum of ws[s] over s < S (float32 [S, M], contiguous), cast to out's type: element
    m of ws[s] to out[m], or with TRANSPOSE (each ws[s] as [M / B, B]) to out[(m % B) * (M / B) +
    m // B]. SPLITS partial sums are loaded at once and reduced, chunk after chunk: the order
    is fixed (deterministic), and the loads of a chunk are in flight together."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if INT64:
        offs = offs.to(tl.int64)
    live = offs < M
    s = tl.arange(0, SPLITS)[:, None]
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for s0 in range(0, S, SPLITS):
        chunk = tl.load(ws_ptr + (s0 + s) * M + offs[None, :], mask=(s0 + s < S) & live[None, :], other=0.0)
        acc += tl.sum(chunk, axis=0)
    if TRANSPOSE:
        offs = offs % B * (M // B) + offs // B
    tl.store(out_ptr + offs, downcast(acc, out_ptr.dtype.element_ty, INTERPRET), mask=live)


@triton.jit
def planar_copy_kernel(
    src_ptr, dst_ptr,
    R1, R2, Q, C, Q_SRC, SHIFT,
    ss0, ss1, ss2, ssq, ssc, sd0, sd1, sd2, sdq, sdc,
    REVERSE: tl.constexpr, INT64: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_C: tl.constexpr,
):
    """dst[r0, r1, r2, q, c] = src[r0, r1, r2', q - SHIFT, c] (zero where q - SHIFT is outside
    [0, Q_SRC)), r2' = R2 - 1 - r2 when REVERSE else r2, both addressed by strides: between
    channels-last operands (c contiguous) and planar ones (q contiguous), or a weight with its
    two channel axes swapped and its taps (r2) reversed. A [BLOCK_Q, BLOCK_C] tile is read along
    one and written along the other, both coalesced (Triton transposes the tile through shared
    memory); PyTorch's copy of a transposed view reads or writes 2 bytes a sector."""
    pid = tl.program_id(0)
    tiles = tl.cdiv(Q, BLOCK_Q)
    q = (pid % tiles) * BLOCK_Q + tl.arange(0, BLOCK_Q)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    row = pid // tiles
    if INT64:
        row, q, c = row.to(tl.int64), q.to(tl.int64), c.to(tl.int64)
    r2 = row % R2
    rest = row // R2
    r1 = rest % R1
    r0 = rest // R1
    inside = (q < Q)[:, None] & (c < C)[None, :]
    u = q - SHIFT
    r2_src = R2 - 1 - r2 if REVERSE else r2
    src = src_ptr + r0 * ss0 + r1 * ss1 + r2_src * ss2 + (u * ssq)[:, None] + (c * ssc)[None, :]
    v = tl.load(src, mask=inside & ((u >= 0) & (u < Q_SRC))[:, None], other=0.0)
    tl.store(dst_ptr + r0 * sd0 + r1 * sd1 + r2 * sd2 + (q * sdq)[:, None] + (c * sdc)[None, :], v,
             mask=inside)
