"""Triton kernel of the Toeplitz (banded-GEMM) depthwise convolution (launcher in toeplitz.py).

Operands are planar (one channel's plane contiguous, the band axis last, so that a row of input
positions is one contiguous run) and padded to three spatial axes; the third is the band axis.
Names as in implicit_gemm_kernels.py: ``S`` input size, ``SO`` output size, ``ST`` stride,
``KD`` kernel dilation, ``LO`` low pad, per axis 1..3.
"""

import triton
import triton.language as tl

from .kernel_utils import dot, downcast


@triton.jit
def toeplitz_fwd_kernel(
    x_ptr, table_ptr, y_ptr,
    ROWS, TILES3,
    S1, S2, SO1, SO2, K1, K2,
    ST1, ST2, ST3, KD1, KD2, LO1, LO2,
    sxg, sxn, sx1, sx2, syo, syn, sy1, sy2,
    OG: tl.constexpr, NK: tl.constexpr,
    INT64: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr, INTERPRET: tl.constexpr,
    BLOCK_M: tl.constexpr, TILE_W: tl.constexpr, BLOCK_K: tl.constexpr,
):
    """y[o, n, j1, j2, r*TILE_W + j] = sum_{t1, t2, i} x[o // OG, n, u1, u2, r*TILE_W*ST3 + i]
    * table[o, t1, t2, i, j] with u = j*st + t*kd - lo on axes 1 and 2: one 2-D tl.dot per
    (t1, t2, chunk of BLOCK_K window positions), which Triton lowers to wgmma on Hopper.

    The launcher pads x along the band axis (its low pad materialised, zeros up to the last
    window's end, rows a multiple of 16 elements), so every window starts at a multiple of 16
    elements and needs no mask: the loads vectorise (16 bytes a thread), where masks or offsets
    of unknown alignment would split them into 2-byte loads. Rows outside axes 1 and 2 are
    masked per row. y's band axis holds whole tiles (the launcher crops it).

    Program (pid_m, o): output channel o, BLOCK_M rows m = (n, j1, j2, r) with r fastest, so a
    tile's rows read neighbouring runs of input and successive taps t2 re-read rows the previous
    ones loaded (L2 hits). ``table`` holds per (o, t1, t2) the kernel row along axis 3 as its
    [window, TILE_W] Toeplitz block (built by the launcher, flip and dilation included)."""
    pid_m = tl.program_id(0)
    o = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # [BLOCK_M]
    mask_m = offs_m < ROWS
    r = offs_m % TILES3
    rest = offs_m // TILES3
    j2 = rest % SO2
    rest = rest // SO2
    j1 = rest % SO1
    n = rest // SO1
    g = o // OG
    if INT64:
        n = n.to(tl.int64)
        g = g.to(tl.int64)
        o = o.to(tl.int64)  # the table's and y's channel offsets
    window = x_ptr + g * sxg + n * sxn + r * (TILE_W * ST3)  # [BLOCK_M]
    offs_k = tl.arange(0, BLOCK_K)
    offs_j = tl.arange(0, TILE_W)
    table = table_ptr + o * (K1 * K2 * NK * BLOCK_K * TILE_W) + offs_k[:, None] * TILE_W + offs_j[None, :]
    acc = tl.zeros((BLOCK_M, TILE_W), dtype=tl.float32)
    for step in range(K1 * K2 * NK):
        kc = step % NK
        t12 = step // NK
        t2 = t12 % K2
        t1 = t12 // K2
        u1 = j1 * ST1 + t1 * KD1 - LO1
        u2 = j2 * ST2 + t2 * KD2 - LO2
        ok = mask_m & (u1 >= 0) & (u1 < S1) & (u2 >= 0) & (u2 < S2)
        a = tl.load((window + u1 * sx1 + u2 * sx2)[:, None] + (kc * BLOCK_K + offs_k)[None, :],
                    mask=ok[:, None], other=0.0)  # [BLOCK_M, BLOCK_K]
        b = tl.load(table + step * (BLOCK_K * TILE_W))  # [BLOCK_K, TILE_W]
        acc = dot(a, b, acc, PRECISION, UPCAST)
    y = y_ptr + o * syo + (n * syn + j1 * sy1 + j2 * sy2 + r * TILE_W)[:, None] + offs_j[None, :]
    tl.store(y, downcast(acc, y_ptr.dtype.element_ty, INTERPRET), mask=mask_m[:, None])


@triton.jit
def toeplitz_table_kernel(
    w_ptr, table_ptr,
    K1, K2, K3, ST3, KD3, WINDOW,
    swo, sw1, sw2, sw3,
    FLIP: tl.constexpr, WINDOW_P2: tl.constexpr, TILE_W: tl.constexpr,
):
    """table[o, t1*K2 + t2, i, j] = w'[o, t1, t2, (i - j*ST3) / KD3] where that is a tap, else 0:
    the Toeplitz block [WINDOW, TILE_W] of one (channel, kernel row) a program, grid (O, K1*K2).
    w' is the weight in read order (every axis reversed when FLIP), its axes in the launcher's
    order (the band axis last) through the strides sw1..sw3."""
    o = tl.program_id(0)
    t12 = tl.program_id(1)
    t1 = t12 // K2
    t2 = t12 % K2
    i = tl.arange(0, WINDOW_P2)[:, None]
    j = tl.arange(0, TILE_W)[None, :]
    d = i - j * ST3
    t3 = d // KD3
    tap = (d >= 0) & (d % KD3 == 0) & (t3 < K3) & (i < WINDOW)
    if FLIP:
        t1, t2, t3 = K1 - 1 - t1, K2 - 1 - t2, K3 - 1 - t3
    v = tl.load(w_ptr + o.to(tl.int64) * swo + t1 * sw1 + t2 * sw2 + t3 * sw3, mask=tap, other=0.0)
    row = table_ptr + (o.to(tl.int64) * (K1 * K2) + t12) * (WINDOW * TILE_W)
    tl.store(row + i * TILE_W + j, v, mask=i < WINDOW)
