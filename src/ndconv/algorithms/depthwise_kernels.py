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
                                    a += xv * ws[_weight_slot(r, _tap_of_column(e, jj, t3o, ST3, KD3, K3, U),
                                                              c, _chunk_taps(t3o, K3, U), CG)]
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
        sxn, sx1, sx2, sx3 = (aligned(sxn, ALIGN), aligned(sx1, ALIGN), aligned(sx2, ALIGN),
                              aligned(sx3, ALIGN))
        syn, sy1, sy2, sy3 = (aligned(syn, ALIGN), aligned(sy1, ALIGN), aligned(sy2, ALIGN),
                              aligned(sy3, ALIGN))
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
                    acc = _kernel_row(acc, t1, d, x_ptr, n, j1, j2, j3, mask_p, x_lanes, mask_o, w_lanes, S1,
                                      S2, S3, K1, K2, ST1, ST2, KD1, KD2, ID1, ID2, ID3, LO1, LO2, LO3, sxn,
                                      sx1, sx2, sx3, sxc, sw1, sw2, sw3, swc, K3, ST3, KD3, U, CG, FLIP, COLS,
                                      RH, K2C, ST2C, KD2C, d)
    else:
        for t1 in range(K1):  # weight taps; the input is read at the flipped tap when FLIP
            for d in range(K2 + RH - 1):  # input rows in read order
                acc = _kernel_row(acc, t1, d, x_ptr, n, j1, j2, j3, mask_p, x_lanes, mask_o, w_lanes, S1, S2,
                                  S3, K1, K2, ST1, ST2, KD1, KD2, ID1, ID2, ID3, LO1, LO2, LO3, sxn, sx1, sx2,
                                  sx3, sxc, sw1, sw2, sw3, swc, K3, ST3, KD3, U, CG, FLIP, COLS,
                                  RH, 0, 0, 0, 0)
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
        sxn, sx1, sx2, sx3 = (aligned(sxn, ALIGN), aligned(sx1, ALIGN), aligned(sx2, ALIGN),
                              aligned(sx3, ALIGN))
        sdn, sd1, sd2, sd3 = (aligned(sdn, ALIGN), aligned(sd1, ALIGN), aligned(sd2, ALIGN),
                              aligned(sd3, ALIGN))
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


@triton.constexpr_function
def _window(cols, st, kd, k):
    """Dilated input columns that ``cols`` consecutive outputs read through ``k`` taps."""
    return (cols - 1) * st + (k - 1) * kd + 1


@triton.constexpr_function
def _output_of_column(e, t, st, kd, cols):
    """The output (of ``cols`` consecutive ones) that reads window column ``e`` through tap
    ``t``, or -1; compile-time."""
    d = e - t * kd
    return d // st if d >= 0 and d % st == 0 and d // st < cols else -1


@triton.constexpr_function
def _chunk_reads(w0, e, s, st, idil, lo):
    """Whether the chunk of outputs from ``w0`` loads column ``e`` of its window: always in a
    runtime loop (w0 < 0), else where that dilated column is an element of an input ``s`` long
    (not padding, not an inserted zero); compile-time."""
    col = w0 * st - lo + e
    return w0 < 0 or (0 <= col <= (s - 1) * idil and col % idil == 0)


@triton.constexpr_function
def _pow2(n):
    return triton.next_power_of_2(n)


@triton.constexpr_function
def _last_chunk(so, cols):
    """The first output of the last chunk of ``cols`` outputs along a row ``so`` long."""
    return (so - 1) // cols * cols


@triton.constexpr_function
def _split_index(e, n):
    """Where column ``e`` of an ``n``-column (a power of two) tensor lands in _columns' tuple."""
    bits = n.bit_length() - 1
    return int(format(e, f"0{bits}b")[::-1], 2) if bits else 0


@triton.jit
def _columns(t, N: tl.constexpr):
    """The N trailing columns of ``t`` [A, B, N] (each thread's own registers) as a tuple of
    [A, B] tensors, in _split_index order: reshapes and splits move no data."""
    parts = (t,)
    for level in tl.static_range(N.bit_length() - 1):
        new = ()
        for u in tl.static_range(len(parts)):
            a, b = tl.split(tl.reshape(parts[u], (t.shape[0], t.shape[1], N >> (level + 1), 2)))
            new = new + (a, b)
        parts = new
    out = ()
    for u in tl.static_range(len(parts)):
        out = out + (tl.reshape(parts[u], (t.shape[0], t.shape[1])),)
    return out


@triton.jit
def _walk_chunk(acc, x_rows, x_at, oks, dy_at, live, w0, S3: tl.constexpr, SO3: tl.constexpr,
                ROW_TAPS: tl.constexpr, K3: tl.constexpr, ST3: tl.constexpr, KD3: tl.constexpr,
                ID3: tl.constexpr, LO3: tl.constexpr, SX3: tl.constexpr, SD3: tl.constexpr, CW: tl.constexpr,
                MASKED: tl.constexpr, W0: tl.constexpr):
    """walk_wgrad_kernel's accumulators after CW output columns from w0 (their dy at dy_at; each
    kernel row's input row at x_rows, the chunk's first window column at x_at): each input
    column of the window loaded once and multiplied into every (output column, tap) that reads
    it.

    MASKED: every load masked (rows, channels, columns). Else the caller made every row and
    channel pointer point at real data or at zeros, and either the chunk is W0 >= 0, a constant
    (its columns outside x and dy are known at compile time: not loaded, their products
    skipped), or (W0 < 0) every column is inside. Without input dilation the window and the dy
    columns are then one [WALKERS, BLOCK_O, columns] load each (each thread's columns its own
    registers, at immediate offsets from one pointer; one load op, not one per column, keeps
    Triton's compile time down)."""
    if W0 >= 0:
        v0 = W0 * ST3 - LO3  # dilated input column of the window's start
    else:
        v0 = w0 * ST3 - LO3
    span: tl.constexpr = _window(CW, ST3, KD3, K3)
    windows: tl.constexpr = not MASKED and ID3 == 1
    if windows:
        jd = tl.arange(0, _pow2(CW))[None, None, :]
        if W0 >= 0:
            ok_d = jd < min(CW, SO3 - W0)
        else:
            ok_d = jd < CW
        dys = _columns(tl.load(dy_at[:, :, None] + jd * SD3, mask=ok_d, other=0.0).to(tl.float32), _pow2(CW))
    else:
        dys = ()
        for jj in tl.static_range(CW):
            if MASKED:
                v = tl.load(dy_at + jj * SD3, mask=live & (w0 + jj < SO3), other=0.0).to(tl.float32)
            elif W0 + jj < SO3:
                v = tl.load(dy_at + jj * SD3).to(tl.float32)
            else:
                v = tl.zeros(live.shape, tl.float32)  # past the row: never used
            dys = dys + (v,)
    for q in tl.static_range(ROW_TAPS):
        if windows:
            je = tl.arange(0, _pow2(span))[None, None, :]
            if W0 >= 0:
                ok_x = (je < span) & (je + v0 >= 0) & (je + v0 < S3)
                base = x_rows[q] + v0 * SX3
            else:
                ok_x = je < span
                base = x_at[q]
            xs = tl.load(base[:, :, None] + je * SX3, mask=ok_x, other=0.0).to(tl.float32)
            xs = _columns(xs, _pow2(span))
        row = ()  # the kernel row's K3 accumulators
        for t3 in tl.static_range(K3):
            row = row + (acc[q * K3 + t3],)
        for e in tl.static_range(span):
            if _column_used(e, CW, 0, ST3, KD3, K3, K3) and _chunk_reads(W0, e, S3, ST3, ID3, LO3):
                if windows:
                    xv = xs[_split_index(e, _pow2(span))]
                elif MASKED:
                    col = v0 + e
                    real = (col >= 0) & (col <= (S3 - 1) * ID3)
                    if ID3 > 1:
                        real = real & (col % ID3 == 0)
                    xv = tl.load(x_rows[q] + (col // ID3) * SX3, mask=oks[q] & real, other=0.0).to(tl.float32)
                else:
                    xv = tl.load(x_rows[q] + ((v0 + e) // ID3) * SX3).to(tl.float32)
                new = ()
                for t3 in tl.static_range(K3):
                    a = row[t3]
                    if _output_of_column(e, t3, ST3, KD3, CW) >= 0:
                        if W0 < 0 or W0 + _output_of_column(e, t3, ST3, KD3, CW) < SO3:
                            if windows:
                                a += xv * dys[_split_index(_output_of_column(e, t3, ST3, KD3, CW), _pow2(CW))]
                            else:
                                a += xv * dys[_output_of_column(e, t3, ST3, KD3, CW)]
                    new = new + (a,)
                row = new
        new = ()
        for t in tl.static_range(ROW_TAPS * K3):
            if t // K3 == q:
                new = new + (row[t % K3],)
            else:
                new = new + (acc[t],)
        acc = new
    return acc


@triton.jit
def _walk_rows(acc, x_ptr, dy_ptr, zero_ptr, x_lanes, d_lanes, lane_ok, start, end, S1, S2, SO1, SO2,
               ST1, ST2, KD1, KD2, ID1, ID2, LO1, LO2, sxn, sx1, sx2, sdn, sd1, sd2,
               S3: tl.constexpr, SO3: tl.constexpr, K1: tl.constexpr, K2: tl.constexpr, K3: tl.constexpr,
               ST3: tl.constexpr, KD3: tl.constexpr, ID3: tl.constexpr, LO3: tl.constexpr, SX3: tl.constexpr,
               SD3: tl.constexpr, INT64: tl.constexpr, CW: tl.constexpr, WALKERS: tl.constexpr,
               PART: tl.constexpr):
    """walk_wgrad_kernel's accumulators after its rows' first chunk (PART 0: rows and channels
    without data point at zeros, columns outside x skipped at compile time), their middle
    chunks (1: unmasked), their last chunk (2, as 0), or all their chunks with every load
    masked (3). Each part is its own loop over the rows, so that Triton's passes, which walk
    each memory op's dataflow, see one part's code at a time (compile time)."""
    last: tl.constexpr = _last_chunk(SO3, CW)
    for r0 in range(start, end, WALKERS):
        row = r0 + tl.arange(0, WALKERS)[:, None]  # [WALKERS, 1]
        j2 = row % SO2
        j1 = (row // SO2) % SO1
        n = row // (SO2 * SO1)
        if INT64:
            n = n.to(tl.int64)
        live = (row < end) & lane_ok[None, :]
        x_rows = ()  # per kernel row (t1, t2): its input row, and whether it is a real one
        oks = ()
        for t1 in tl.static_range(K1):
            i1, ok1 = input_index(j1, t1, ST1, KD1, ID1, LO1, S1, live)
            for t2 in tl.static_range(K2):
                i2, ok2 = input_index(j2, t2, ST2, KD2, ID2, LO2, S2, ok1)
                at = x_ptr + n * sxn + i1 * sx1 + i2 * sx2 + x_lanes
                if PART < 3:
                    at = tl.where(ok2, at, zero_ptr)
                x_rows = x_rows + (at,)
                oks = oks + (ok2,)
        dy_at = dy_ptr + n * sdn + j1 * sd1 + j2 * sd2 + d_lanes
        if PART < 3:
            dy_at = tl.where(live, dy_at, zero_ptr)
        if PART == 0:
            acc = _walk_chunk(acc, x_rows, x_rows, oks, dy_at, live, 0, S3, SO3, K1 * K2, K3, ST3, KD3, ID3,
                              LO3, SX3, SD3, CW, False, 0)
        elif PART == 1:
            x_at = ()
            for q in tl.static_range(K1 * K2):
                x_at = x_at + (x_rows[q] + (CW * ST3 - LO3) * SX3,)
            dy_mid = dy_at + CW * SD3
            for w0 in range(CW, last, CW):
                acc = _walk_chunk(acc, x_rows, x_at, oks, dy_mid, live, w0, S3, SO3, K1 * K2, K3, ST3, KD3,
                                  ID3, LO3, SX3, SD3, CW, False, -1)
                new = ()
                for q in tl.static_range(K1 * K2):
                    new = new + (x_at[q] + CW * ST3 * SX3,)
                x_at = new
                dy_mid += CW * SD3
        elif PART == 2:
            acc = _walk_chunk(acc, x_rows, x_rows, oks, dy_at + last * SD3, live, last, S3, SO3, K1 * K2, K3,
                              ST3, KD3, ID3, LO3, SX3, SD3, CW, False, last)
        else:
            for w0 in range(0, SO3, CW):
                acc = _walk_chunk(acc, x_rows, x_rows, oks, dy_at + w0 * SD3, live, w0, S3, SO3, K1 * K2, K3,
                                  ST3, KD3, ID3, LO3, SX3, SD3, CW, True, -1)
    return acc


@triton.jit
def walk_wgrad_kernel(
    x_ptr, dy_ptr, ws_ptr, zero_ptr,
    ROWS, ROWS_PER_PROGRAM, O,
    S1, S2, SO1, SO2,
    ST1, ST2, KD1, KD2, ID1, ID2, LO1, LO2,
    sxn, sx1, sx2, sxg, sxc,
    sdn, sd1, sd2, sdg, sdo,
    S3: tl.constexpr, SO3: tl.constexpr, K1: tl.constexpr, K2: tl.constexpr, K3: tl.constexpr,
    ST3: tl.constexpr, KD3: tl.constexpr, ID3: tl.constexpr, LO3: tl.constexpr,
    SX3: tl.constexpr, SD3: tl.constexpr, CG: tl.constexpr, OG: tl.constexpr, INT64: tl.constexpr,
    CW: tl.constexpr, WALKERS: tl.constexpr, BLOCK_O: tl.constexpr, VEC: tl.constexpr,
    PEELED: tl.constexpr, ALIGN: tl.constexpr,
):
    """ws[chunk, (t1, t2, t3), c, o] = sum over the chunk's output rows of dy[r, o] *
    x[(r*st + t*kd - lo) / idil, o // OG, c], every tap in one program.

    Each thread owns VEC channels of one output row at a time (WALKERS consecutive rows side by
    side) and walks along it in chunks of CW columns: the chunk's dy columns are loaded once,
    then for each kernel row (t1, t2) each input column of the chunk's window is loaded and
    converted once and multiplied into every (output column, tap) that reads it, resolved at
    compile time. So all K1 * K2 * K3 accumulators stay in registers, one per tap (no column
    axis to reduce), dy is read once and x once per kernel row, and a load feeds up to K3 FMAs.

    PEELED (the launcher found the middle chunks' windows inside x): rows outside x, rows past
    the program's last and channels past O point at zeros (zero_ptr, at least a row of x or dy
    long), the first and last chunks are unrolled with their columns outside x skipped at
    compile time, and the middle chunks load without masks at immediate offsets from running
    pointers (SX3 and SD3, the column strides, are constexpr). Else every load is masked."""
    if ALIGN > 1:
        O = aligned(O, ALIGN)
        sxn, sx1, sx2 = aligned(sxn, ALIGN), aligned(sx1, ALIGN), aligned(sx2, ALIGN)
        sdn, sd1, sd2 = aligned(sdn, ALIGN), aligned(sd1, ALIGN), aligned(sd2, ALIGN)
    c = tl.program_id(0)
    g, k, lane_ok = _lanes(tl.program_id(1), O, OG, INT64, BLOCK_O, VEC)
    x_lanes = (g * sxg + c * sxc)[None, :]
    d_lanes = (g * sdg + k * sdo)[None, :]
    start = tl.program_id(2) * ROWS_PER_PROGRAM
    end = tl.minimum(start + ROWS_PER_PROGRAM, ROWS)
    last: tl.constexpr = _last_chunk(SO3, CW)
    acc = ()
    for t in tl.static_range(K1 * K2 * K3):
        acc = acc + (tl.zeros((WALKERS, BLOCK_O), dtype=tl.float32),)
    args = (x_ptr, dy_ptr, zero_ptr, x_lanes, d_lanes, lane_ok, start, end, S1, S2, SO1, SO2,
            ST1, ST2, KD1, KD2, ID1, ID2, LO1, LO2, sxn, sx1, sx2, sdn, sd1, sd2)
    # (the constexprs go one by one: in a tuple they would reach the callee as values)
    if PEELED:  # the first chunks, the middle ones, the last ones: three loops over the rows
        acc = _walk_rows(acc, *args, S3, SO3, K1, K2, K3, ST3, KD3, ID3, LO3, SX3, SD3, INT64, CW, WALKERS,
                         0)
        if last > CW:
            acc = _walk_rows(acc, *args, S3, SO3, K1, K2, K3, ST3, KD3, ID3, LO3, SX3, SD3, INT64, CW,
                             WALKERS, 1)
        if last > 0:
            acc = _walk_rows(acc, *args, S3, SO3, K1, K2, K3, ST3, KD3, ID3, LO3, SX3, SD3, INT64, CW,
                             WALKERS, 2)
    else:
        acc = _walk_rows(acc, *args, S3, SO3, K1, K2, K3, ST3, KD3, ID3, LO3, SX3, SD3, INT64, CW, WALKERS,
                         3)
    # one store of every tap's sum (one memory op, not one per tap: Triton's compile time grows
    # with memory ops times the kernel's size)
    taps = tl.arange(0, _pow2(K1 * K2 * K3))[:, None]
    sums = tl.zeros((_pow2(K1 * K2 * K3), BLOCK_O), dtype=tl.float32)
    for t in tl.static_range(K1 * K2 * K3):
        sums = tl.where(taps == t, tl.sum(acc[t], axis=0)[None, :], sums)
    ws = ws_ptr + tl.program_id(2).to(tl.int64) * K1 * K2 * K3 * CG * O
    tl.store(ws + (taps * CG + c) * O + (g * OG + k)[None, :], sums,
             mask=(taps < K1 * K2 * K3) & lane_ok[None, :])
