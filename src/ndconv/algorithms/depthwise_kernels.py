"""Triton kernels of the direct small-group convolution (launchers in depthwise.py).

Problems are padded to three spatial axes, as in implicit_gemm_kernels.py. Output channels are
the vector lanes: lane o belongs to group o // OG and reads that group's CG input channels.
The forward kernel's output positions are strips of RH rows (along the next-to-last axis) of
COLS consecutive outputs along the last axis (each a register accumulator), TILE_H x STRIPS
strips per program; the taps along the last axis are unrolled in chunks of U, and the weight
gradient's in one [K3P] axis.
"""

import triton
import triton.language as tl

from .kernel_utils import aligned, input_index, split_rows


@triton.jit
def _lanes(block, O, OG: tl.constexpr, INT64: tl.constexpr, BLOCK_O: tl.constexpr, VEC: tl.constexpr):
    """The output-channel lanes of channel block ``block``: (group g, channel k within it, mask).
    Written as runs of VEC consecutive lanes, so that Triton proves (and gives each thread) at
    most VEC contiguous channels: fewer registers per thread where VEC is below a 16-byte
    vector."""
    i = tl.arange(0, BLOCK_O)
    offs_o = block * BLOCK_O + (i // VEC) * VEC + i % VEC
    g = offs_o // OG
    if INT64:
        g = g.to(tl.int64)
    return g, offs_o % OG, offs_o < O


@triton.jit
def _positions(offs_p, ROWS, SO1, SO2, SO3, INT64: tl.constexpr):
    """Flat output positions as (n, j1, j2, j3) and their mask."""
    n, j1, j2, j3 = split_rows(offs_p, SO1, SO2, SO3)
    if INT64:
        n = n.to(tl.int64)
    return offs_p < ROWS, n, j1, j2, j3


@triton.constexpr_function
def _chunk_taps(first, k, u):
    """Taps in the chunk of at most ``u`` that starts at tap ``first`` of ``k``."""
    return min(u, k - first)


@triton.constexpr_function
def _tap_of_column(e, jj, first, st, kd, k, u):
    """The tap (within the chunk starting at tap ``first``) through which output ``jj`` of a
    strip reads column ``e`` of the chunk's input window, or -1; compile-time."""
    d = e - jj * st
    return d // kd if d >= 0 and d % kd == 0 and d // kd < _chunk_taps(first, k, u) else -1


@triton.constexpr_function
def _weight_slot(r, tap, c, taps, cg):
    """Index in _kernel_row's weights (ordered by output row, tap, input channel)."""
    return (r * taps + tap) * cg + c


@triton.constexpr_function
def _row_tap(d, r, st, kd, k):
    """The tap (read order) through which row r of a strip reads the input row at dilated offset
    ``d`` from its first row's window, or -1; compile-time."""
    e = d - r * st
    return e // kd if e >= 0 and e % kd == 0 and e // kd < k else -1


@triton.constexpr_function
def _row_reads(d, r, st, kd, k):
    """Whether row r of a strip reads input row ``d`` through a tap (always, for k = 0: the
    rows are a runtime loop)."""
    return k == 0 or _row_tap(d, r, st, kd, k) >= 0


@triton.constexpr_function
def _input_row_used(d, rows, st, kd, k):
    return any(_row_reads(d, r, st, kd, k) for r in range(rows))


@triton.constexpr_function
def _column_used(e, cols, first, st, kd, k, u):
    return any(_tap_of_column(e, jj, first, st, kd, k, u) >= 0 for jj in range(cols))


@triton.jit
def _kernel_row(acc, t1, d, x_ptr, n, j1, j2, j3, mask_p, x_lanes, mask_o, w_lanes, S1, S2, S3,
                K1, K2, ST1, ST2, KD1, KD2, ID1, ID2, ID3, LO1, LO2, LO3, sxn, sx1, sx2, sx3,
                sxc, sw1, sw2, sw3, swc, K3: tl.constexpr, ST3: tl.constexpr, KD3: tl.constexpr,
                U: tl.constexpr, CG: tl.constexpr, FLIP: tl.constexpr, COLS: tl.constexpr, RH: tl.constexpr,
                K2U: tl.constexpr, ST2U: tl.constexpr, KD2U: tl.constexpr, DS: tl.constexpr):
    """direct_fwd_kernel's accumulators after one input row along axis 2 of kernel row t1 (the
    input read at the flipped tap when FLIP), loaded once for all RH rows of the strip. In a
    runtime loop (K2U = 0) ``d`` is a read-order tap, and row r of the strip reads the row
    through tap d - r (so RH > 1 needs stride and dilation 1 along axis 2; taps outside the
    kernel get zero weights). With the kernel rows unrolled (K2U, ST2U, KD2U: that axis's
    kernel, stride and dilation) ``d`` is a constant (DS, the same as a constexpr), the row's
    dilated offset from the strip's first window, and each row's tap, if any, is resolved at
    compile time."""
    u1 = j1 * ST1 + (K1 - 1 - t1 if FLIP else t1) * KD1 - LO1  # scalar
    ok1 = (u1 >= 0) & (u1 <= (S1 - 1) * ID1) & (u1 % ID1 == 0)
    x1 = x_ptr + n * sxn + (u1 // ID1) * sx1
    if K2U > 0:
        i2, ok2 = input_index(j2, d, ST2, 1, ID2, LO2, S2, mask_p & ok1)
    else:
        i2, ok2 = input_index(j2, d, ST2, KD2, ID2, LO2, S2, mask_p & ok1)
    rows = x1 + i2 * sx2  # [P]
    w1 = w_lanes + t1 * sw1
    for t3o in tl.static_range(0, K3, U):  # chunks of U taps in read order
        ws = ()  # [1, BLOCK_O] per (output row, tap, c)
        for r in tl.static_range(RH):
            if K2U > 0:
                tap2 = _row_tap(DS, r, ST2U, KD2U, K2U)  # read order; -1: row r reads no tap here
            else:
                tap2 = d - r
            w12 = w1 + (K2 - 1 - tap2 if FLIP else tap2) * sw2
            for t in tl.static_range(_chunk_taps(t3o, K3, U)):
                for c in tl.static_range(CG):
                    w_at = (w12 + (K3 - 1 - t3o - t if FLIP else t3o + t) * sw3 + c * swc)[None, :]
                    if RH == 1:
                        wv = tl.load(w_at)
                    else:
                        wv = tl.load(w_at, mask=(tap2 >= 0) & (tap2 < K2), other=0.0)
                    ws = ws + (wv.to(tl.float32),)
        v0 = j3 * ST3 + t3o * KD3 - LO3  # [P] dilated input column of the window's start
        for e in tl.static_range((COLS - 1) * ST3 + (_chunk_taps(t3o, K3, U) - 1) * KD3 + 1):
            if _column_used(e, COLS, t3o, ST3, KD3, K3, U):
                i3, ok = input_index(v0, e, 1, 1, ID3, 0, S3, ok2)
                col = rows + i3 * sx3  # [P]
                for c in tl.static_range(CG):
                    xv = tl.load(col[:, None] + (x_lanes + c * sxc)[None, :],
                                 mask=ok[:, None] & mask_o[None, :], other=0.0).to(tl.float32)
                    new = ()
                    for r in tl.static_range(RH):
                        for jj in tl.static_range(COLS):
                            a = acc[r * COLS + jj]
                            if _tap_of_column(e, jj, t3o, ST3, KD3, K3, U) >= 0:
                                if _row_reads(DS, r, ST2U, KD2U, K2U):  # the weight of (r, tap, c) in ws
                                    a += xv * ws[_weight_slot(r, _tap_of_column(e, jj, t3o, ST3, KD3, K3, U), c,
                                                              _chunk_taps(t3o, K3, U), CG)]
                            new = new + (a,)
                    acc = new
    return acc


@triton.jit
def direct_fwd_kernel(
    x_ptr, w_ptr, y_ptr, w_off, y_off,
    N, O,
    S1, S2, S3, SO1, SO2, SO3, K1, K2,
    ST1, ST2, KD1, KD2, ID1, ID2, ID3, LO1, LO2, LO3,
    sxn, sx1, sx2, sx3, sxg, sxc,
    swg, swo, sw1, sw2, sw3, swc,
    syn, sy1, sy2, sy3, syg, syo,
    K3: tl.constexpr, ST3: tl.constexpr, KD3: tl.constexpr, U: tl.constexpr,
    CG: tl.constexpr, OG: tl.constexpr, FLIP: tl.constexpr, INT64: tl.constexpr,
    TILE_H: tl.constexpr, STRIPS: tl.constexpr, COLS: tl.constexpr, BLOCK_O: tl.constexpr,
    CHANNELS_FASTEST: tl.constexpr, ROWS_UNROLLED: tl.constexpr, K1C: tl.constexpr, K2C: tl.constexpr,
    ST2C: tl.constexpr, KD2C: tl.constexpr, VEC: tl.constexpr, RH: tl.constexpr, FLAT: tl.constexpr,
    ALIGN: tl.constexpr,
):
    """y[n, j, o] = sum_{t, c < CG} x[n, (j*st + t'*kd - lo) / idil, o // OG, c] * w[o, t, c]
    for a tile of TILE_H x STRIPS strips of RH x COLS outputs (rows along axis 2, consecutive
    along the last axis) x BLOCK_O output channels, on CUDA cores, fp32 accumulation.

    A strip's outputs are separate accumulators, and the taps along the last axis are
    unrolled in chunks of U: each input column of a chunk's window is loaded and converted once
    and feeds every (output, tap) pair that reads it, all resolved at compile time (K3, ST3, KD3
    are constexpr), for all RH rows of the strip. The input rows along axis 2 (K2 + RH - 1) and
    the kernel rows along axis 1 are loops (their re-reads hit L1), or, with ROWS_UNROLLED,
    unrolled over constant rows (K1C kernel rows; axis 2's kernel K2C, stride ST2C and dilation
    KD2C), so that the loads of later rows can be issued before the FMAs of earlier ones.

    With FLAT a program's TILE_H * STRIPS strips are consecutive in one row-major order over
    all images' strips (n, j1, strip row, strip column), so maps whose size is not a power of
    two strips per axis are not padded to one (N is the batch, bounding the last program).
    With CHANNELS_FASTEST the channel blocks of one tile are consecutive programs (a 1-D
    grid), so they run together and read whole channel rows of the input from HBM. The weight and
    the output start w_off and y_off elements past their pointers (an output phase's views).
    ALIGN divides the channel count, y_off and the position strides of x and y (kernel_utils.aligned)."""
    if ALIGN > 1:
        O, y_off = aligned(O, ALIGN), aligned(y_off, ALIGN)
        sxn, sx1, sx2, sx3 = aligned(sxn, ALIGN), aligned(sx1, ALIGN), aligned(sx2, ALIGN), aligned(sx3, ALIGN)
        syn, sy1, sy2, sy3 = aligned(syn, ALIGN), aligned(sy1, ALIGN), aligned(sy2, ALIGN), aligned(sy3, ALIGN)
    w_ptr += w_off
    y_ptr += y_off
    if CHANNELS_FASTEST:
        blocks_o = tl.cdiv(O, BLOCK_O)
        block_o = tl.program_id(0) % blocks_o
        pid = tl.program_id(0) // blocks_o
    else:
        block_o = tl.program_id(1)
        pid = tl.program_id(0)
    offs = tl.arange(0, TILE_H * STRIPS)
    if FLAT:  # the strips of all images in one row-major order, TILE_H * STRIPS consecutive ones
        strip = pid * (TILE_H * STRIPS) + offs
        if INT64:
            strip = strip.to(tl.int64)
        strip_cols = tl.cdiv(SO3, COLS)
        strip_rows = tl.cdiv(SO2, RH)
        j3 = (strip % strip_cols) * COLS  # [P] a strip's first column
        j2 = (strip // strip_cols % strip_rows) * RH  # [P] its first row
        n1 = strip // (strip_cols * strip_rows)  # n * SO1 + j1
        j1 = n1 % SO1
        n = n1 // SO1
        mask_p = n < N
    else:  # a tile of TILE_H x STRIPS strips of one image
        tiles_w = tl.cdiv(SO3, STRIPS * COLS)
        tiles_h = tl.cdiv(SO2, TILE_H * RH)
        tw = pid % tiles_w
        th = (pid // tiles_w) % tiles_h
        n1 = pid // (tiles_w * tiles_h)  # n * SO1 + j1
        j1 = n1 % SO1
        n = n1 // SO1
        if INT64:
            n = n.to(tl.int64)
        j2 = (th * TILE_H + offs // STRIPS) * RH  # [P] a strip's first row
        j3 = (tw * STRIPS + offs % STRIPS) * COLS  # [P] its first column
        mask_p = (j2 < SO2) & (j3 < SO3)  # the strip's later rows are read (not stored) past SO2
    g, k, mask_o = _lanes(block_o, O, OG, INT64, BLOCK_O, VEC)
    x_lanes = g * sxg  # [BLOCK_O]
    o_w = tl.minimum(g * OG + k, O - 1)  # lanes past O read valid weights (unmasked; never stored)
    w_lanes = w_ptr + (o_w // OG) * swg + (o_w % OG) * swo  # [BLOCK_O]
    acc = ()
    for i in tl.static_range(RH * COLS):
        acc = acc + (tl.zeros((TILE_H * STRIPS, BLOCK_O), dtype=tl.float32),)
    if ROWS_UNROLLED:  # every kernel row's loads in one straight block, free to be issued early
        for t1 in tl.static_range(K1C):
            for d in tl.static_range((RH - 1) * ST2C + (K2C - 1) * KD2C + 1):  # dilated input rows
                if _input_row_used(d, RH, ST2C, KD2C, K2C):
                    acc = _kernel_row(acc, t1, d, x_ptr, n, j1, j2, j3, mask_p, x_lanes, mask_o, w_lanes, S1, S2,
                                      S3, K1, K2, ST1, ST2, KD1, KD2, ID1, ID2, ID3, LO1, LO2, LO3, sxn, sx1, sx2,
                                      sx3, sxc, sw1, sw2, sw3, swc, K3, ST3, KD3, U, CG, FLIP, COLS, RH, K2C, ST2C,
                                      KD2C, d)
    else:
        for t1 in range(K1):  # weight taps; the input is read at the flipped tap when FLIP
            for d in range(K2 + RH - 1):  # input rows in read order
                acc = _kernel_row(acc, t1, d, x_ptr, n, j1, j2, j3, mask_p, x_lanes, mask_o, w_lanes, S1, S2, S3,
                                  K1, K2, ST1, ST2, KD1, KD2, ID1, ID2, ID3, LO1, LO2, LO3, sxn, sx1, sx2, sx3,
                                  sxc, sw1, sw2, sw3, swc, K3, ST3, KD3, U, CG, FLIP, COLS, RH, 0, 0, 0, 0)
    y_rows = y_ptr + n * syn + j1 * sy1 + j2 * sy2  # [P]
    y_lanes = g * syg + k * syo  # [BLOCK_O]
    for r in tl.static_range(RH):
        for jj in tl.static_range(COLS):
            tl.store((y_rows + r * sy2 + (j3 + jj) * sy3)[:, None] + y_lanes[None, :],
                     acc[r * COLS + jj].to(y_ptr.dtype.element_ty),
                     mask=(mask_p & (j2 + r < SO2) & (j3 + jj < SO3))[:, None] & mask_o[None, :])


@triton.jit
def direct_wgrad_kernel(
    x_ptr, dy_ptr, ws_ptr,
    STRIPS, STRIPS_PER_PROGRAM, O,
    S1, S2, S3, SO1, SO2, SO3, K1, K2,
    ST1, ST2, KD1, KD2, ID1, ID2, ID3, LO1, LO2, LO3,
    sxn, sx1, sx2, sx3, sxg, sxc,
    sdn, sd1, sd2, sd3, sdg, sdo,
    K3: tl.constexpr, ST3: tl.constexpr, KD3: tl.constexpr, U: tl.constexpr,
    CG: tl.constexpr, OG: tl.constexpr, INT64: tl.constexpr,
    COLS: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_O: tl.constexpr, ALIGN: tl.constexpr,
):
    """ws[chunk, (t1, t2, t3), c, o] = sum over the chunk's output positions r of
    dy[r, o] * x[(r*st + t*kd - lo) / idil, o // OG, c] for one (t1, t2, c) per program.

    Output positions are strips of COLS consecutive outputs along the last axis (BLOCK_S strips
    at a time, the program's share of all strips in a loop); a strip's dy columns are loaded
    once and kept, then each input column of the strip's window is loaded and converted once
    and feeds every (output, tap) pair that reads it, resolved at compile time as in
    direct_fwd_kernel. Taps along the last axis are done in chunks of U (one accumulator per
    tap); positions are reduced once per chunk at the end. Partial sums per program go to
    the workspace, summed afterwards in a fixed order (deterministic). ALIGN divides the
    channel count and the position strides of x and dy (kernel_utils.aligned)."""
    if ALIGN > 1:
        O = aligned(O, ALIGN)
        sxn, sx1, sx2, sx3 = aligned(sxn, ALIGN), aligned(sx1, ALIGN), aligned(sx2, ALIGN), aligned(sx3, ALIGN)
        sdn, sd1, sd2, sd3 = aligned(sdn, ALIGN), aligned(sd1, ALIGN), aligned(sd2, ALIGN), aligned(sd3, ALIGN)
    pid_t = tl.program_id(0)  # fastest: the taps of one chunk run together and share its tiles in L2
    c = pid_t % CG
    t2 = (pid_t // CG) % K2
    t1 = pid_t // (CG * K2)
    g, k, mask_o = _lanes(tl.program_id(1), O, OG, INT64, BLOCK_O, BLOCK_O)
    x_lanes = g * sxg + c * sxc  # [BLOCK_O]
    d_lanes = g * sdg + k * sdo
    tiles3 = tl.cdiv(SO3, COLS)
    start = tl.program_id(2) * STRIPS_PER_PROGRAM
    end = tl.minimum(start + STRIPS_PER_PROGRAM, STRIPS)
    ws = ws_ptr + tl.program_id(2).to(tl.int64) * K1 * K2 * K3 * CG * O
    for t3o in tl.static_range(0, K3, U):  # chunks of U taps along the last axis
        acc = ()
        for t in tl.static_range(_chunk_taps(t3o, K3, U)):
            acc = acc + (tl.zeros((BLOCK_S, BLOCK_O), dtype=tl.float32),)
        for s0 in range(start, end, BLOCK_S):
            strip = s0 + tl.arange(0, BLOCK_S)
            mask_s = strip < end
            _, n, j1, j2, tile = _positions(strip, STRIPS, SO1, SO2, tiles3, INT64)
            j3 = tile * COLS  # [BLOCK_S] the strip's first output
            dy_rows = dy_ptr + n * sdn + j1 * sd1 + j2 * sd2
            dys = ()
            for jj in tl.static_range(COLS):
                ok = mask_s & (j3 + jj < SO3)
                dys = dys + (tl.load((dy_rows + (j3 + jj) * sd3)[:, None] + d_lanes[None, :],
                                     mask=ok[:, None] & mask_o[None, :], other=0.0).to(tl.float32),)
            i1, ok1 = input_index(j1, t1, ST1, KD1, ID1, LO1, S1, mask_s)
            i2, ok2 = input_index(j2, t2, ST2, KD2, ID2, LO2, S2, ok1)
            x_rows = x_ptr + n * sxn + i1 * sx1 + i2 * sx2  # [BLOCK_S]
            v0 = j3 * ST3 + t3o * KD3 - LO3  # dilated input column of the window's start
            for e in tl.static_range((COLS - 1) * ST3 + (_chunk_taps(t3o, K3, U) - 1) * KD3 + 1):
                if _column_used(e, COLS, t3o, ST3, KD3, K3, U):
                    i3, ok = input_index(v0, e, 1, 1, ID3, 0, S3, ok2)
                    xv = tl.load((x_rows + i3 * sx3)[:, None] + x_lanes[None, :],
                                 mask=ok[:, None] & mask_o[None, :], other=0.0).to(tl.float32)
                    new = ()
                    for t in tl.static_range(_chunk_taps(t3o, K3, U)):
                        a = acc[t]
                        for jj in tl.static_range(COLS):
                            if _tap_of_column(e, jj, t3o, ST3, KD3, K3, U) == t:
                                a += xv * dys[jj]
                        new = new + (a,)
                    acc = new
        for t in tl.static_range(_chunk_taps(t3o, K3, U)):
            tap = (t1 * K2 + t2) * K3 + t3o + t
            tl.store(ws + (tap * CG + c) * O + g * OG + k, tl.sum(acc[t], axis=0), mask=mask_o)
