"""Triton kernels of the direct grouped convolution (launchers in grouped.py).

Problems are padded to three spatial axes, as in implicit_gemm_kernels.py. A program owns a
block of BG whole groups: BCI = pow2(BG*CG) input and BCO = pow2(BG*OG) output channels, which
are contiguous in channels-last memory (one wide, coalesced load per position). The groups of a
block are mixed by one small tensor-core product per tap with the block-diagonal weight of the
block, built in registers (BG times more products than the groups need, on units that have them
to spare). The taps are unrolled and read the input with plain loads, so a program's re-reads of
its input tile across taps are served by L1, not L2.

The rows kernel (stride-1 2-D problems) walks a strip of output rows instead: each input tile
(an input row at one column tap) is loaded once and multiplied into every output row that reads
it, so an input element passes the load and the tensor-core operand staging K2 times rather than
K1 * K2 times (fewer where a lane computes several consecutive output columns, which share
their column-shifted input tiles).
"""

import triton
import triton.language as tl

from .kernel_utils import aligned, dot, input_index, split_rows


@triton.jit
def _channels(cb, G, CG: tl.constexpr, BG: tl.constexpr, BC: tl.constexpr, EVEN: tl.constexpr):
    """The BC channel lanes of group block cb: (group within the block, channel within the group,
    mask); EVEN: every lane is a real channel (no mask needed, loads stay vectorised)."""
    lanes = tl.arange(0, BC)
    gb = lanes // CG
    if EVEN:
        mask = lanes < BC
    else:
        mask = (gb < BG) & (cb * BG + gb < G)
    return gb, lanes % CG, mask


@triton.jit
def grouped_fwd_kernel(
    x_ptr, w_ptr, y_ptr,
    G, ROWS, NTAPS, CHUNKS,
    S1, S2, S3, SO1, SO2, SO3, K2, K3,
    ST1, ST2, ST3, KD1, KD2, KD3, ID1, ID2, ID3, LO1, LO2, LO3,
    sxn, sx1, sx2, sx3, sxc,
    swg, swo, sw1, sw2, sw3, swc,
    syn, sy1, sy2, sy3, syo,
    CG: tl.constexpr, OG: tl.constexpr, BG: tl.constexpr, BCI: tl.constexpr, BCO: tl.constexpr,
    TA: tl.constexpr, TB: tl.constexpr, EVEN: tl.constexpr, FLIP: tl.constexpr, INT64: tl.constexpr,
    TILE_H: tl.constexpr, TILE_W: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):
    """y[n, j, g, o] = sum_{t, c < CG} x[n, (j*st + t'*kd - lo) / idil, g, c] * w[g, o, t, c] for a
    tile of output positions and BG whole groups, as acc[P, BCO] += x_taps[P, TN*BCI] @
    wdiag[TN*BCI, BCO] over chunks of TA taps, then TB more (both powers of two: a 3x3 kernel is
    8 + 1 taps), fp32 accumulation; wdiag is the block-diagonal weight of the block's groups.
    The channels of x and y are contiguous (group stride = CG, OG channel strides).
    TILE_H == 0: the tile is TILE_W consecutive flat positions over (n, j1, j2, j3); else a
    TILE_H x TILE_W tile over (j2, j3) at one (n, j1)."""
    n_cb = tl.cdiv(G, BG)
    pid = tl.program_id(0)
    cb = pid % n_cb  # channel blocks fastest: the programs sharing an input tile run together
    tile = pid // n_cb
    if TILE_H == 0:
        offs = tile * TILE_W + tl.arange(0, TILE_W)
        mask_p = offs < ROWS
        n, j1, j2, j3 = split_rows(offs, SO1, SO2, SO3)
    else:
        tiles_w = tl.cdiv(SO3, TILE_W)
        tiles_h = tl.cdiv(SO2, TILE_H)
        offs = tl.arange(0, TILE_H * TILE_W)
        j2 = (tile // tiles_w) % tiles_h * TILE_H + offs // TILE_W
        j3 = tile % tiles_w * TILE_W + offs % TILE_W
        n1 = tile // (tiles_w * tiles_h)  # n * SO1 + j1
        n = n1 // SO1 + offs * 0
        j1 = n1 % SO1 + offs * 0
        mask_p = (j2 < SO2) & (j3 < SO3)
    if INT64:
        n = n.to(tl.int64)
    _, _, mask_ci = _channels(cb, G, CG, BG, BCI, EVEN)  # [BCI]
    x_cols = (cb * (BG * CG) + tl.arange(0, BCI)) * sxc  # groups are adjacent: flat channels
    x_base = x_ptr + n * sxn  # [P]
    acc = tl.zeros((TILE_W if TILE_H == 0 else TILE_H * TILE_W, BCO), dtype=tl.float32)
    for chunk in range(CHUNKS):
        t0 = chunk * TA
        a = _gather_taps(x_base, x_cols, t0, j1, j2, j3, mask_p, mask_ci, K2, K3, NTAPS, S1, S2, S3,
                         ST1, ST2, ST3, KD1, KD2, KD3, ID1, ID2, ID3, LO1, LO2, LO3, sx1, sx2, sx3,
                         TA, BCI, EVEN)
        b = _weight_diagonal(w_ptr, t0, cb, G, NTAPS, K2, K3, swg, swo, sw1, sw2, sw3, swc,
                             CG, OG, BG, BCI, BCO, TA, EVEN, FLIP)
        acc = dot(a, b, acc, PRECISION, UPCAST)
    if TB > 0:
        t0 = CHUNKS * TA
        a = _gather_taps(x_base, x_cols, t0, j1, j2, j3, mask_p, mask_ci, K2, K3, NTAPS, S1, S2, S3,
                         ST1, ST2, ST3, KD1, KD2, KD3, ID1, ID2, ID3, LO1, LO2, LO3, sx1, sx2, sx3,
                         TB, BCI, EVEN)
        b = _weight_diagonal(w_ptr, t0, cb, G, NTAPS, K2, K3, swg, swo, sw1, sw2, sw3, swc,
                             CG, OG, BG, BCI, BCO, TB, EVEN, FLIP)
        acc = dot(a, b, acc, PRECISION, UPCAST)
    _, _, mask_co = _channels(cb, G, OG, BG, BCO, EVEN)  # [BCO]
    y_rows = y_ptr + n * syn + j1 * sy1 + j2 * sy2 + j3 * sy3  # [P]
    y_cols = (cb * (BG * OG) + tl.arange(0, BCO)) * syo
    if EVEN:
        y_mask = mask_p[:, None]
    else:
        y_mask = mask_p[:, None] & mask_co[None, :]
    tl.store(y_rows[:, None] + y_cols[None, :], acc.to(y_ptr.dtype.element_ty), mask=y_mask)


@triton.jit
def _rows_program(G, N, BG: tl.constexpr, STRIP, STRIPS, COL_TILES, INT64: tl.constexpr,
                  BLOCK_W: tl.constexpr, IMGS: tl.constexpr):
    """A rows-kernel program's (group block, chunk = (images, strip, column tile), first output
    row, and per lane: image, output column, lane in range). Its BLOCK_W lanes are IMGS images
    times BLOCK_W / IMGS columns (narrow rows of several images fill one tensor-core tile).
    Group blocks vary fastest: the programs sharing input rows run together."""
    n_cb = tl.cdiv(G, BG)
    pid = tl.program_id(0)
    chunk = pid // n_cb
    rest = chunk // COL_TILES
    lane = tl.arange(0, BLOCK_W)
    n = rest // STRIPS * IMGS + lane // (BLOCK_W // IMGS)
    cols = chunk % COL_TILES * (BLOCK_W // IMGS) + lane % (BLOCK_W // IMGS)
    if INT64:
        n = n.to(tl.int64)
    return pid % n_cb, chunk, rest % STRIPS * STRIP, n, cols, n < N


@triton.jit
def grouped_rows_fwd_kernel(
    x_ptr, w_ptr, y_ptr,
    G, N, H, W, HO, WO, LO1, LO2, STRIP, STRIPS, COL_TILES,
    sxn, sx1, sx2, sxc,
    swg, swo, sw1, sw2, swc,
    syn, sy1, sy2, syo,
    K1: tl.constexpr, K2: tl.constexpr,
    CG: tl.constexpr, OG: tl.constexpr, BG: tl.constexpr, BCI: tl.constexpr, BCO: tl.constexpr,
    EVEN: tl.constexpr, FLIP: tl.constexpr, INT64: tl.constexpr,
    BLOCK_W: tl.constexpr, IMGS: tl.constexpr, COLS: tl.constexpr, PRECISION: tl.constexpr,
    UPCAST: tl.constexpr, ALIGN: tl.constexpr,
):
    """y[n, i, j, g, o] = sum_{t1, t2, c < CG} x[n, i + t1 - LO1, j + t2 - LO2, g, c] * w[g, o, t1, t2, c]
    (stride 1, no dilation) for a strip of STRIP output rows, BLOCK_W (image, column) lanes of
    COLS consecutive output columns each and BG whole groups. Step u reads input row r0 + u -
    LO1: its K2 + COLS - 1 column-shifted tiles [BLOCK_W, BCI] are loaded once each and
    multiplied into the K1 accumulators (per lane column) of the output rows that read them
    (acc[c, k] holds column c of output row r0 + u - k, through kernel row k); then output row
    r0 + u - (K1 - 1) is complete, is stored, and the accumulators roll down one row. The K1*K2
    block-diagonal weights [BCI, BCO] stay in registers for the whole strip. ALIGN divides the
    position strides (kernel_utils.aligned)."""
    if ALIGN > 1:
        sxn, sx1, sx2 = aligned(sxn, ALIGN), aligned(sx1, ALIGN), aligned(sx2, ALIGN)
        syn, sy1, sy2 = aligned(syn, ALIGN), aligned(sy1, ALIGN), aligned(sy2, ALIGN)
    cb, _, r0, n, lanes, ok_n = _rows_program(G, N, BG, STRIP, STRIPS, COL_TILES, INT64, BLOCK_W, IMGS)
    cols = lanes * COLS  # a lane's first output column
    _, _, mask_ci = _channels(cb, G, CG, BG, BCI, EVEN)
    _, _, mask_co = _channels(cb, G, OG, BG, BCO, EVEN)
    x_tile = x_ptr + ((cb * (BG * CG) + tl.arange(0, BCI)) * sxc)[None, :]
    y_tile = y_ptr + (n * syn + cols * sy2)[:, None] + ((cb * (BG * OG) + tl.arange(0, BCO)) * syo)[None, :]
    y_masks = ()
    for c in tl.static_range(COLS):
        y_masks = y_masks + ((ok_n & (cols + c < WO))[:, None] & mask_co[None, :],)
    weights = ()
    for t in tl.static_range(K1 * K2):  # the tap (t // K2, t % K2) in read order
        weights = weights + (_weight_diagonal(w_ptr, t, cb, G, K1 * K2, K1, K2, swg, swo, 0, sw1, sw2, swc,
                                              CG, OG, BG, BCI, BCO, 1, EVEN, FLIP),)
    accs = ()
    for i in tl.static_range(COLS * K1):  # (column, kernel row)
        accs = accs + (tl.zeros((BLOCK_W, BCO), dtype=tl.float32),)
    for u in range(tl.minimum(STRIP, HO - r0) + K1 - 1):
        ih = r0 + u - LO1
        if INT64:
            ih = ih.to(tl.int64)
        row = n * sxn + ih * sx1
        ok_row = ok_n & (ih >= 0) & (ih < H)
        for e in tl.static_range(K2 + COLS - 1):  # input column cols + e - LO2
            iw = cols + e - LO2
            ok = ((iw >= 0) & (iw < W) & ok_row)[:, None] & mask_ci[None, :]
            a = tl.load(x_tile + (row + iw * sx2)[:, None], mask=ok, other=0.0)
            rolled = ()
            for c in tl.static_range(COLS):
                for k in tl.static_range(K1):
                    acc = accs[c * K1 + k]
                    if e - c >= 0:
                        if e - c < K2:  # column c reads this tile through column tap e - c
                            acc = dot(a, weights[k * K2 + e - c], acc, PRECISION, UPCAST)
                    rolled = rolled + (acc,)
            accs = rolled
        oh = ih + LO1 - (K1 - 1)
        rolled = ()
        for c in tl.static_range(COLS):
            tl.store(y_tile + oh * sy1 + c * sy2, accs[c * K1 + K1 - 1].to(y_ptr.dtype.element_ty),
                     mask=y_masks[c] & (oh >= r0))
            rolled = rolled + (tl.zeros((BLOCK_W, BCO), dtype=tl.float32),) + accs[c * K1:c * K1 + K1 - 1]
        accs = rolled


@triton.jit
def grouped_rows_wgrad_kernel(
    x_ptr, dy_ptr, ws_ptr,
    G, N, H, W, HO, WO, LO1, LO2, STRIP, STRIPS, COL_TILES,
    sxn, sx1, sx2, sxc,
    sdn, sd1, sd2, sdo,
    K1: tl.constexpr, K2: tl.constexpr, TK: tl.constexpr, TN: tl.constexpr,
    CG: tl.constexpr, OG: tl.constexpr, BG: tl.constexpr, BCI: tl.constexpr, BCO: tl.constexpr,
    EVEN: tl.constexpr, INT64: tl.constexpr,
    BLOCK_W: tl.constexpr, IMGS: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr,
    ALIGN: tl.constexpr,
):
    """ws[chunk, g, o, t1, t2, c] = sum over the chunk's STRIP output rows r and BLOCK_W columns j
    of dy[n, r, j, g, o] * x[n, r + t1 - LO1, j + t2 - LO2, g, c] (the weight gradient of a
    stride-1 2-D convolution; BLOCK_W lanes of (image, column)) for BG whole groups. Step u
    reads input row r0 + u - LO1 once, as one tile [BLOCK_W, (t2, c)] of its TN >= K2 column
    taps, and the K1 dy rows r0 + u - t1 that read it through kernel row t1, as one tile
    [BLOCK_W, (t1, o)] (rows of dy come from L2 K1 times): one tensor-core product
    [(t1, o), (t2, c)] per input row, both operands copied asynchronously into the shared memory
    the product reads. Only the diagonal blocks (same group, real taps) are stored; the chunks
    are summed afterwards in a fixed order. ALIGN divides the position strides
    (kernel_utils.aligned)."""
    if ALIGN > 1:
        sxn, sx1, sx2 = aligned(sxn, ALIGN), aligned(sx1, ALIGN), aligned(sx2, ALIGN)
        sdn, sd1, sd2 = aligned(sdn, ALIGN), aligned(sd1, ALIGN), aligned(sd2, ALIGN)
    cb, chunk, r0, n, cols, ok_n = _rows_program(G, N, BG, STRIP, STRIPS, COL_TILES, INT64, BLOCK_W, IMGS)
    x_lane = tl.arange(0, TN * BCI)  # (column tap, input lane)
    t2 = x_lane // BCI
    gi = x_lane % BCI // CG
    d_lane = tl.arange(0, TK * BCO)  # (kernel row, output lane)
    t1 = d_lane // BCO
    go = d_lane % BCO // OG
    iw = cols[:, None] + t2[None, :] - LO2
    mask_ci = t2 < K2
    mask_co = t1 < K1
    if not EVEN:  # lanes past the last group (EVEN: none; masks constant over a tap's lanes vectorise)
        mask_ci = mask_ci & (gi < BG) & (cb * BG + gi < G)
        mask_co = mask_co & (go < BG) & (cb * BG + go < G)
    ok_lane = (ok_n & (cols < WO))[:, None]
    x_ok = (iw >= 0) & (iw < W) & mask_ci[None, :] & ok_lane
    d_ok = ok_lane & mask_co[None, :]
    x_tile = x_ptr + (n * sxn)[:, None] + iw * sx2 + ((cb * (BG * CG) + x_lane % BCI) * sxc)[None, :]
    d_tile = (dy_ptr + (n * sdn + cols * sd2)[:, None]
              + ((cb * (BG * OG) + d_lane % BCO) * sdo - t1 * sd1)[None, :])
    acc = tl.zeros((TK * BCO, TN * BCI), dtype=tl.float32)
    end = tl.minimum(STRIP, HO - r0)
    for u in range(end + K1 - 1):
        r = r0 + u
        if INT64:
            r = r.to(tl.int64)
        ih = r - LO1
        a = tl.load(x_tile + ih * sx1, mask=x_ok & (ih >= 0) & (ih < H), other=0.0)
        rows_in_strip = (u - t1 >= 0) & (u - t1 < end)  # dy row r - t1 belongs to this strip
        d = tl.load(d_tile + r * sd1, mask=d_ok & rows_in_strip[None, :], other=0.0)
        acc = dot(tl.trans(d), a, acc, PRECISION, UPCAST)
    ws = ws_ptr + chunk.to(tl.int64) * G * OG * K1 * K2 * CG
    offs = ((((cb * BG + go) * OG + d_lane % BCO % OG) * K1 + t1)[:, None] * (K2 * CG)
            + (t2 * CG + x_lane % BCI % CG)[None, :])
    mask = (go[:, None] == gi[None, :]) & mask_co[:, None] & mask_ci[None, :]
    tl.store(ws + offs, acc, mask=mask)


@triton.jit
def _weight_diagonal(w_ptr, t0, cb, G, NTAPS, K2, K3, swg, swo, sw1, sw2, sw3, swc,
                     CG: tl.constexpr, OG: tl.constexpr, BG: tl.constexpr,
                     BCI: tl.constexpr, BCO: tl.constexpr, TN: tl.constexpr, EVEN: tl.constexpr,
                     FLIP: tl.constexpr):
    """The block-diagonal weight of group block cb at the TN read-order taps t0..:
    [TN * BCI, BCO], rows (tap, input lane); w[g, o, t, c] where lane c and column o belong to the
    same group g, else 0 (the weight tap is reversed when FLIP)."""
    rows = tl.arange(0, TN * BCI)
    t = t0 + rows // BCI
    gi = (rows % BCI) // CG
    ci = (rows % BCI) % CG
    go, co, mask_co = _channels(cb, G, OG, BG, BCO, EVEN)
    tw = t
    if FLIP:
        tw = NTAPS - 1 - t  # every axis reversed: the flat tap index reverses
    t3 = tw % K3
    t2 = (tw // K3) % K2
    t1 = tw // (K3 * K2)
    offs = (t1 * sw1 + t2 * sw2 + t3 * sw3 + ci * swc)[:, None] + ((cb * BG + go) * swg + co * swo)[None, :]
    mask = (gi[:, None] == go[None, :]) & ((t < NTAPS) & (gi < BG))[:, None] & mask_co[None, :]
    return tl.load(w_ptr + offs, mask=mask, other=0.0)


@triton.jit
def _gather_taps(x_base, x_cols, t0, j1, j2, j3, mask_r, mask_ci,
                 K2, K3, NTAPS, S1, S2, S3,
                 ST1, ST2, ST3, KD1, KD2, KD3, ID1, ID2, ID3, LO1, LO2, LO3,
                 sx1, sx2, sx3,
                 TN: tl.constexpr, BCI: tl.constexpr, EVEN: tl.constexpr):
    """x at the TN taps t0.. of rows j: [P, TN * BCI], columns (tap, channel)."""
    t = t0 + tl.arange(0, TN)  # [TN] read-order taps
    t3 = t % K3
    t2 = (t // K3) % K2
    t1 = t // (K3 * K2)
    ok = mask_r[:, None] & (t < NTAPS)[None, :]
    i1, ok = input_index(j1[:, None], t1[None, :], ST1, KD1, ID1, LO1, S1, ok)
    i2, ok = input_index(j2[:, None], t2[None, :], ST2, KD2, ID2, LO2, S2, ok)
    i3, ok = input_index(j3[:, None], t3[None, :], ST3, KD3, ID3, LO3, S3, ok)
    rows = x_base[:, None] + i1 * sx1 + i2 * sx2 + i3 * sx3  # [P, TN]
    if EVEN:
        mask = ok[:, :, None]
    else:
        mask = ok[:, :, None] & mask_ci[None, None, :]
    xv = tl.load(rows[:, :, None] + x_cols[None, None, :], mask=mask, other=0.0)  # [P, TN, BCI]
    return tl.reshape(xv, (xv.shape[0], TN * BCI))


@triton.jit
def _store_diagonal(ws, acc, t0, cb, G, NTAPS, ok,
                    CG: tl.constexpr, OG: tl.constexpr, BG: tl.constexpr,
                    BCI: tl.constexpr, BCO: tl.constexpr, TN: tl.constexpr, EVEN: tl.constexpr):
    """The diagonal blocks of acc [TN * BCI, BCO] (rows (tap, input lane)) into
    ws [G, OG, NTAPS, CG]: the entries whose input and output channel share a group."""
    rows = tl.arange(0, TN * BCI)
    t = t0 + rows // BCI
    gi = (rows % BCI) // CG
    ci = (rows % BCI) % CG
    go, co, mask_co = _channels(cb, G, OG, BG, BCO, EVEN)
    offs = (t * CG + ci)[:, None] + (((cb * BG + go) * OG + co) * NTAPS * CG)[None, :]
    mask = (gi[:, None] == go[None, :]) & (ok & (t < NTAPS) & (gi < BG))[:, None] & mask_co[None, :]
    tl.store(ws + offs, acc, mask=mask)


@triton.jit
def grouped_wgrad_kernel(
    x_ptr, dy_ptr, ws_ptr,
    G, ROWS, ROWS_PER_PROGRAM, NTAPS,
    S1, S2, S3, SO1, SO2, SO3, K2, K3,
    ST1, ST2, ST3, KD1, KD2, KD3, ID1, ID2, ID3, LO1, LO2, LO3,
    sxn, sx1, sx2, sx3, sxc,
    sdn, sd1, sd2, sd3, sdc,
    CG: tl.constexpr, OG: tl.constexpr, BG: tl.constexpr, BCI: tl.constexpr, BCO: tl.constexpr,
    TA: tl.constexpr, TB: tl.constexpr, EVEN: tl.constexpr, INT64: tl.constexpr,
    BLOCK_P: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):
    """ws[chunk, g, o, t, c] = sum over the chunk's output positions r of
    dy[r, g, o] * x[(r*st + t*kd - lo) / idil, g, c] for BG whole groups and the TA read-order taps
    t0 = program_id(1) * TA.. (the last tap chunk also the TB taps after all chunks): per block of
    BLOCK_P positions acc[TN*BCI, BCO] += x_taps^T @ dy, dy loaded once for all the taps, whose
    overlapping rows of x come from L1. Only the diagonal blocks (same group) are stored; the
    partial sums per chunk are summed afterwards in a fixed order (deterministic)."""
    n_cb = tl.cdiv(G, BG)
    pid = tl.program_id(0)
    cb = pid % n_cb
    chunk = pid // n_cb
    t0 = tl.program_id(1) * TA
    tail = tl.program_id(1) == tl.num_programs(1) - 1  # this program also reduces the TB taps
    _, _, mask_ci = _channels(cb, G, CG, BG, BCI, EVEN)
    _, _, mask_co = _channels(cb, G, OG, BG, BCO, EVEN)
    x_cols = (cb * (BG * CG) + tl.arange(0, BCI)) * sxc
    d_cols = (cb * (BG * OG) + tl.arange(0, BCO)) * sdc
    acc_a = tl.zeros((TA * BCI, BCO), dtype=tl.float32)
    if TB > 0:
        acc_b = tl.zeros((TB * BCI, BCO), dtype=tl.float32)
    start = chunk * ROWS_PER_PROGRAM
    end = tl.minimum(ROWS, start + ROWS_PER_PROGRAM)
    for r0 in range(start, end, BLOCK_P):
        rows = r0 + tl.arange(0, BLOCK_P)
        mask_r = rows < end
        n, j1, j2, j3 = split_rows(rows, SO1, SO2, SO3)
        if INT64:
            n = n.to(tl.int64)
        d_rows = dy_ptr + n * sdn + j1 * sd1 + j2 * sd2 + j3 * sd3
        if EVEN:
            d_mask = mask_r[:, None]
        else:
            d_mask = mask_r[:, None] & mask_co[None, :]
        dy = tl.load(d_rows[:, None] + d_cols[None, :], mask=d_mask, other=0.0)  # [P, BCO]
        x_base = x_ptr + n * sxn
        xa = _gather_taps(x_base, x_cols, t0, j1, j2, j3, mask_r, mask_ci, K2, K3, NTAPS, S1, S2, S3,
                          ST1, ST2, ST3, KD1, KD2, KD3, ID1, ID2, ID3, LO1, LO2, LO3, sx1, sx2, sx3,
                          TA, BCI, EVEN)
        acc_a = dot(tl.trans(xa), dy, acc_a, PRECISION, UPCAST)
        if TB > 0:
            tb0 = tl.num_programs(1) * TA
            xb = _gather_taps(x_base, x_cols, tb0, j1, j2, j3, mask_r & tail, mask_ci, K2, K3, NTAPS,
                              S1, S2, S3, ST1, ST2, ST3, KD1, KD2, KD3, ID1, ID2, ID3, LO1, LO2, LO3,
                              sx1, sx2, sx3, TB, BCI, EVEN)
            acc_b = dot(tl.trans(xb), dy, acc_b, PRECISION, UPCAST)
    ws = ws_ptr + chunk.to(tl.int64) * G * OG * NTAPS * CG
    _store_diagonal(ws, acc_a, t0, cb, G, NTAPS, True, CG, OG, BG, BCI, BCO, TA, EVEN)
    if TB > 0:
        _store_diagonal(ws, acc_b, tl.num_programs(1) * TA, cb, G, NTAPS, tail,
                        CG, OG, BG, BCI, BCO, TB, EVEN)


@triton.jit
def grouped_fwd_fma_kernel(
    x_ptr, w_ptr, y_ptr,
    G, ROWS, NTAPS,
    S1, S2, S3, SO1, SO2, SO3, K2, K3,
    ST1, ST2, ST3, KD1, KD2, KD3, ID1, ID2, ID3, LO1, LO2, LO3,
    sxn, sx1, sx2, sx3, sxc,
    swg, swo, sw1, sw2, sw3, swc,
    syn, sy1, sy2, sy3, syo,
    CG: tl.constexpr, OG: tl.constexpr, BG: tl.constexpr, FLIP: tl.constexpr, INT64: tl.constexpr,
    BLOCK_P: tl.constexpr,
):
    """The forward kernel on CUDA cores, for power-of-two groups and G % BG == 0: per tap,
    acc[P, BG, OG] += sum_c x_t[P, BG, 1, CG] * w_t[1, BG, OG, CG] (CG*OG FMAs per group and
    position, no wasted product; the reduction over c is meant to stay within a thread)."""
    n_cb = G // BG
    pid = tl.program_id(0)
    cb = pid % n_cb
    offs = pid // n_cb * BLOCK_P + tl.arange(0, BLOCK_P)
    mask_p = offs < ROWS
    n, j1, j2, j3 = split_rows(offs, SO1, SO2, SO3)
    if INT64:
        n = n.to(tl.int64)
    x_cols = (cb * (BG * CG) + tl.arange(0, BG * CG)) * sxc
    x_base = x_ptr + n * sxn
    lanes = tl.arange(0, BG * OG * CG)  # (g, o, c)
    w_lanes = w_ptr + (cb * BG + lanes // (OG * CG)) * swg + (lanes // CG % OG) * swo + (lanes % CG) * swc
    acc = tl.zeros((BLOCK_P, BG, OG), dtype=tl.float32)
    for t in range(NTAPS):  # read-order taps
        t3 = t % K3
        t2 = (t // K3) % K2
        t1 = t // (K3 * K2)
        i1, ok = input_index(j1, t1, ST1, KD1, ID1, LO1, S1, mask_p)
        i2, ok = input_index(j2, t2, ST2, KD2, ID2, LO2, S2, ok)
        i3, ok = input_index(j3, t3, ST3, KD3, ID3, LO3, S3, ok)
        rows = x_base + i1 * sx1 + i2 * sx2 + i3 * sx3
        xv = tl.load(rows[:, None] + x_cols[None, :], mask=ok[:, None], other=0.0).to(tl.float32)
        tw = NTAPS - 1 - t if FLIP else t
        tw3 = tw % K3
        tw2 = (tw // K3) % K2
        tw1 = tw // (K3 * K2)
        wv = tl.load(w_lanes + tw1 * sw1 + tw2 * sw2 + tw3 * sw3).to(tl.float32)
        xg = tl.reshape(xv, (BLOCK_P, BG, 1, CG))
        wg = tl.reshape(wv, (1, BG, OG, CG))
        acc += tl.sum(xg * wg, axis=3)
    y_rows = y_ptr + n * syn + j1 * sy1 + j2 * sy2 + j3 * sy3
    y_cols = (cb * (BG * OG) + tl.arange(0, BG * OG)) * syo
    out = tl.reshape(acc, (BLOCK_P, BG * OG)).to(y_ptr.dtype.element_ty)
    tl.store(y_rows[:, None] + y_cols[None, :], out, mask=mask_p[:, None])
