"""Triton kernel of the Toeplitz (banded-GEMM) depthwise convolution (launcher in toeplitz.py).

Problems are padded to three spatial axes; the third is the *band axis* (the launcher permutes
the axis with the longest kernel there). Names as in implicit_gemm_kernels.py: ``S`` input size,
``SO`` output size, ``ST`` stride, ``KD`` kernel dilation, ``LO`` low pad, per axis 1..3.
"""

import triton
import triton.language as tl

from .kernel_utils import dot, downcast


@triton.jit
def toeplitz_fwd_kernel(
    x_ptr, band_ptr, y_ptr,
    O, ROWS, TILES3, BAND_LEN,
    S1, S2, S3, SO1, SO2, SO3, K1, K2,
    ST1, ST2, ST3, KD1, KD2, LO1, LO2, LO3,
    sxn, sx1, sx2, sx3, sxg,
    syn, sy1, sy2, sy3, syg, syo,
    OG: tl.constexpr, NK: tl.constexpr,
    INT64: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr, INTERPRET: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_C: tl.constexpr, TILE_W: tl.constexpr, BLOCK_K: tl.constexpr,
):
    """y[n, j1, j2, r*TILE_W + j, o] = sum_{t1, t2, i} x[n, u1, u2, base3(r) + i, o // OG] *
    band[t1, t2, i - j*ST3 + (TILE_W-1)*ST3, o], with u = j*st + t*kd - lo per axis: one
    batched tl.dot per (t1, t2, chunk of BLOCK_K window positions), channels as the batch.

    Rows m = (n, j1, r, j2) with j2 fastest, so a tile's rows are neighbours along axis 2 and the
    row windows of successive taps t2 overlap (L1/L2 hits). ``band`` holds per (t1, t2) the
    kernel row along axis 3 on its diagonals, zeros elsewhere (built by the launcher, flip and
    dilation included): one [BLOCK_C, BLOCK_K, TILE_W] slice is the Toeplitz block of every
    channel of the tile, channels contiguous in memory like the input's."""
    pid_m = tl.program_id(0)
    pid_c = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # [BLOCK_M]
    mask_m = offs_m < ROWS
    j2 = offs_m % SO2
    rest = offs_m // SO2
    r = rest % TILES3
    rest = rest // TILES3
    j1 = rest % SO1
    n = rest // SO1
    if INT64:
        n = n.to(tl.int64)
    offs_o = pid_c * BLOCK_C + tl.arange(0, BLOCK_C)  # output channels, [BLOCK_C]
    mask_o = offs_o < O
    x_lanes = (offs_o // OG) * sxg  # the input channel each output channel reads
    base3 = r * (TILE_W * ST3) - LO3  # first window position of each row, [BLOCK_M]
    offs_k = tl.arange(0, BLOCK_K)
    offs_j = tl.arange(0, TILE_W)
    # [BLOCK_K, TILE_W] diagonal index of the band: window position i feeds output j through
    # tap offset i - j*ST3 (shifted to be non-negative)
    diag = offs_k[:, None] - offs_j[None, :] * ST3 + (TILE_W - 1) * ST3
    band_lanes = band_ptr + offs_o[:, None, None]  # [BLOCK_C, 1, 1]
    acc = tl.zeros((BLOCK_C, BLOCK_M, TILE_W), dtype=tl.float32)
    for step in range(K1 * K2 * NK):
        kc = step % NK
        t12 = step // NK
        t2 = t12 % K2
        t1 = t12 // K2
        u1 = j1 * ST1 + t1 * KD1 - LO1  # [BLOCK_M]
        u2 = j2 * ST2 + t2 * KD2 - LO2
        ok = mask_m & (u1 >= 0) & (u1 < S1) & (u2 >= 0) & (u2 < S2)
        u3 = base3[:, None] + (kc * BLOCK_K + offs_k)[None, :]  # [BLOCK_M, BLOCK_K]
        ok3 = ok[:, None] & (u3 >= 0) & (u3 < S3)
        rows = n * sxn + u1 * sx1 + u2 * sx2  # [BLOCK_M]
        a = tl.load(x_ptr + x_lanes[:, None, None] + (rows[:, None] + u3 * sx3)[None, :, :],
                    mask=mask_o[:, None, None] & ok3[None, :, :], other=0.0)  # [BLOCK_C, BLOCK_M, BLOCK_K]
        band = band_lanes + ((t12 * BAND_LEN + kc * BLOCK_K + diag) * O)[None, :, :]
        b = tl.load(band, mask=mask_o[:, None, None], other=0.0)  # [BLOCK_C, BLOCK_K, TILE_W]
        acc = dot(a, b, acc, PRECISION, UPCAST)
    j3 = r[:, None] * TILE_W + offs_j[None, :]  # [BLOCK_M, TILE_W]
    y_pos = (n * syn + j1 * sy1 + j2 * sy2)[:, None] + j3 * sy3
    y_lanes = (offs_o // OG) * syg + (offs_o % OG) * syo
    tl.store(y_ptr + y_lanes[:, None, None] + y_pos[None, :, :],
             downcast(acc, y_ptr.dtype.element_ty, INTERPRET),
             mask=mask_o[:, None, None] & (mask_m[:, None] & (j3 < SO3))[None, :, :])
