"""Triton kernel of the small-channel (stem) convolution (launcher in stem.py)."""

import triton
import triton.language as tl

from .kernel_utils import dot, downcast


@triton.jit
def _rows_of_windows(x_ptr, w_row, row, x_k, k, o, O, d: tl.constexpr, sxh_a, DH: tl.constexpr,
                     KH: tl.constexpr, ROWS: tl.constexpr, WINDOW: tl.constexpr, USED: tl.constexpr,
                     ALIGN: tl.constexpr):
    """The operands of product ``d``: its kernel rows' windows of every output of the tile, and
    their weights. Window elements past the kernel (and kernel rows past KH) read real input
    that the weight's zeros meet: they are zeroed, so that an inf there makes no NaN."""
    a = tl.load(x_ptr + (row + d * (ROWS * DH * sxh_a) * ALIGN)[:, None] + x_k[None, :])
    if USED < WINDOW or (d + 1) * ROWS > KH:
        a = tl.where(((k % WINDOW < USED) & (d * ROWS + k // WINDOW < KH))[None, :], a, 0.0)
    b = tl.load(w_row[None, :] + (d * ROWS * WINDOW + k)[:, None], mask=(o < O)[None, :], other=0.0)
    return a, b


@triton.jit
def stem_fwd_kernel(
    x_ptr, w_ptr, y_ptr,
    M, OW, OHW, O,
    sxn_a, sxh_a, syn, syh, syw, syo,
    SH: tl.constexpr, SW: tl.constexpr, DH: tl.constexpr, CP: tl.constexpr, KH: tl.constexpr,
    DOTS: tl.constexpr, ROWS: tl.constexpr, WINDOW: tl.constexpr, USED: tl.constexpr, ALIGN: tl.constexpr,
    INT64: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr, INTERPRET: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """y[n, oh, ow, o] = sum_{t, k} x[n, oh*SH + t*DH, ow*SW*CP + k] * w[o, t, k] over kernel rows
    t < KH and window elements k < USED (the kernel's span times CP), x the padded copy
    [N, Hp, Wp*CP] (CP channels a position, so a kernel row's taps over all channels are one
    contiguous window of a row) and w [O, DOTS*ROWS, WINDOW] (zero past the kernel). ROWS kernel
    rows make one dot's reduction, of WINDOW elements per row (a power of two).

    The windows overlap (a position's starts SW*CP elements after the previous one's): the loads
    are plain ones, served from L1, not pipelined through cp.async (which bypasses L1); each
    product's loads are issued before the previous product (5-11% faster on the H200). x's
    strides come divided by ALIGN and are multiplied back by the constant, so Triton can prove
    every window aligned and loads ALIGN elements at a time (with a row stride it could not
    prove a multiple of 16, they were scalar: the 7x7 stem about 1.5x slower)."""
    pid_m = tl.program_id(0)
    if INT64:
        pid_m = pid_m.to(tl.int64)
    m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    live_m = m < M
    m = tl.minimum(m, M - 1)  # the dead rows of the last tile read the last row, never stored
    n = m // OHW
    r = m - n * OHW
    oh = r // OW
    ow = r - oh * OW
    row = (n * sxn_a + oh * (SH * sxh_a)) * ALIGN + ow * (SW * CP)
    k = tl.arange(0, ROWS * WINDOW)
    x_k = (k // WINDOW) * (DH * sxh_a) * ALIGN + k % WINDOW  # kernel row k // WINDOW, element k % WINDOW
    o = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    w_row = w_ptr + o * (DOTS * ROWS * WINDOW)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    a_next, b_next = _rows_of_windows(x_ptr, w_row, row, x_k, k, o, O, 0, sxh_a, DH, KH, ROWS, WINDOW, USED,
                                      ALIGN)
    for d in tl.static_range(DOTS):
        a = a_next
        b = b_next
        if d + 1 < DOTS:
            a_next, b_next = _rows_of_windows(x_ptr, w_row, row, x_k, k, o, O, d + 1, sxh_a, DH, KH, ROWS,
                                              WINDOW, USED, ALIGN)
        acc = dot(a, b, acc, PRECISION, UPCAST)
    y = y_ptr + (n * syn + oh * syh + ow * syw)[:, None] + (o * syo)[None, :]
    tl.store(y, downcast(acc, y_ptr.dtype.element_ty, INTERPRET), mask=live_m[:, None] & (o < O)[None, :])
