"""Triton kernels of the Winograd convolution (launcher and transform matrices in winograd.py).

The transform matrices arrive as constexpr tuples of floats, so each kernel is compiled for one
F(m x m, 3x3) variant: zero coefficients vanish at compile time and the rest become
multiply-adds on registers. A tile's A x A values (A = m + 2) are tuples of [BLOCK, BLOCK]
blocks (tiles x channels, channels contiguous in memory); the transforms run in fp32.
"""

import triton
import triton.language as tl

from .kernel_utils import dot, downcast


@triton.jit
def _combine(vals, MAT: tl.constexpr, ROW: tl.constexpr):
    """sum_i MAT[ROW][i] * vals[i], skipping the zero coefficients."""
    acc = tl.zeros_like(vals[0])
    for i in tl.static_range(len(MAT[ROW])):
        if MAT[ROW][i] != 0:
            acc += MAT[ROW][i] * vals[i]
    return acc


@triton.jit
def _apply(vals, MAT: tl.constexpr):
    """The tuple MAT @ vals."""
    out = ()
    for r in tl.static_range(len(MAT)):
        out = out + (_combine(vals, MAT, r),)
    return out


@triton.jit
def _program_tiles(T, TH, TW, INT64: tl.constexpr, BLOCK_T: tl.constexpr):
    """This program's tiles (grid axis 0) as flat indices, their mask and (n, th, tw) over
    [batch, TH, TW], and its group (grid axis 2)."""
    offs_t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    mask_t = offs_t < T
    tw = offs_t % TW
    rest = offs_t // TW
    n, th = rest // TH, rest % TH
    g = tl.program_id(2)
    if INT64:
        n = n.to(tl.int64)
        g = g.to(tl.int64)
        offs_t = offs_t.to(tl.int64)
    return offs_t, mask_t, n, th, tw, g


@triton.jit
def winograd_input_kernel(
    x_ptr, v_ptr,
    T, TH, TW, H, W, CG, LO_H, LO_W,
    sxn, sxh, sxw, sxg, sxc,
    svp, svg, svt,
    BT: tl.constexpr, TILE: tl.constexpr, INT64: tl.constexpr, INTERPRET: tl.constexpr,
    BLOCK_T: tl.constexpr, BLOCK_C: tl.constexpr,
):
    """v[a*A + b, g, t, c] = (B^T d B)[a, b], d the A x A input patch of tile t = (n, th, tw),
    rows from th*TILE - LO_H and columns from tw*TILE - LO_W, zero outside the input (so any
    padding, negative included, is this index shift plus the bounds mask)."""
    pid_c = tl.program_id(1)
    offs_t, mask_t, n, th, tw, g = _program_tiles(T, TH, TW, INT64, BLOCK_T)
    h0 = th * TILE - LO_H
    w0 = tw * TILE - LO_W
    offs_c = pid_c * BLOCK_C + tl.arange(0, BLOCK_C)
    mask_c = offs_c < CG
    x_tiles = x_ptr + n * sxn + g * sxg  # [BLOCK_T]
    x_chans = (offs_c * sxc)[None, :]

    # each patch row is transformed along its columns as it is loaded: r[i][b] = (d B)[i, b]
    rows = ()
    for i in tl.static_range(len(BT)):
        h = h0 + i
        row_ok = mask_t & (h >= 0) & (h < H)
        row = ()
        for j in tl.static_range(len(BT)):
            w = w0 + j
            ok = row_ok & (w >= 0) & (w < W)
            d = tl.load((x_tiles + h * sxh + w * sxw)[:, None] + x_chans,
                        mask=ok[:, None] & mask_c[None, :], other=0.0)
            row = row + (d.to(tl.float32),)
        rows = rows + (_apply(row, BT),)
    # then along the rows: v[a][b] = (B^T r)[a, b]
    v_tiles = v_ptr + g * svg + (offs_t * svt)[:, None] + offs_c[None, :]
    mask = mask_t[:, None] & mask_c[None, :]
    for b in tl.static_range(len(BT)):
        col = ()
        for i in tl.static_range(len(BT)):
            col = col + (rows[i][b],)
        for a in tl.static_range(len(BT)):
            value = _combine(col, BT, a)
            tl.store(v_tiles + (a * len(BT) + b) * svp, downcast(value, v_ptr.dtype.element_ty, INTERPRET),
                     mask=mask)


@triton.jit
def winograd_gemm_kernel(
    v_ptr, u_ptr, m_ptr,
    T, CG, OG,
    INT64: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    """m[z] = v[z] @ u[z] for every z = (point, group): [T, CG] @ [CG, OG], all contiguous,
    accumulated and stored in fp32 (the output transform's cancellations need the bits)."""
    n_tiles = tl.cdiv(OG, BLOCK_N)
    pid_m = tl.program_id(0) // n_tiles  # n fastest: the column tiles sharing v's rows run together
    pid_n = tl.program_id(0) % n_tiles
    z = tl.program_id(1)
    if INT64:
        z = z.to(tl.int64)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_m = offs_m < T
    mask_n = offs_n < OG
    v_rows = v_ptr + z * T * CG + offs_m * CG
    u_cols = u_ptr + z * CG * OG + offs_n
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, CG, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        mask_k = offs_k < CG
        a = tl.load(v_rows[:, None] + offs_k[None, :], mask=mask_m[:, None] & mask_k[None, :], other=0.0)
        b = tl.load(u_cols[None, :] + (offs_k * OG)[:, None], mask=mask_k[:, None] & mask_n[None, :],
                    other=0.0)
        acc = dot(a, b, acc, PRECISION, UPCAST)
    m_rows = m_ptr + z * T * OG + offs_m * OG
    tl.store(m_rows[:, None] + offs_n[None, :], acc, mask=mask_m[:, None] & mask_n[None, :])


@triton.jit
def winograd_output_kernel(
    m_ptr, y_ptr,
    T, TH, TW, HO, WO, OG,
    smp, smg, smt,
    syn, syh, syw, syg, syo,
    AT: tl.constexpr, INT64: tl.constexpr, INTERPRET: tl.constexpr,
    BLOCK_T: tl.constexpr, BLOCK_O: tl.constexpr,
):
    """y[n, th*m + i, tw*m + j, g, o] = (A^T M A)[i, j], M the A x A transformed outputs of tile
    t = (n, th, tw), group g, channel o; positions past the output (partial tiles) are masked."""
    pid_o = tl.program_id(1)
    offs_t, mask_t, n, th, tw, g = _program_tiles(T, TH, TW, INT64, BLOCK_T)
    offs_o = pid_o * BLOCK_O + tl.arange(0, BLOCK_O)
    mask_o = offs_o < OG
    mask = mask_t[:, None] & mask_o[None, :]
    m_tiles = m_ptr + g * smg + (offs_t * smt)[:, None] + offs_o[None, :]
    A: tl.constexpr = len(AT[0])

    # each row of M is transformed along its columns as it is loaded: r[a][j] = (M A)[a, j]
    rows = ()
    for a in tl.static_range(A):
        row = ()
        for b in tl.static_range(A):
            row = row + (tl.load(m_tiles + (a * A + b) * smp, mask=mask, other=0.0),)
        rows = rows + (_apply(row, AT),)
    # then along the rows: y[i][j] = (A^T r)[i, j]
    y_tiles = y_ptr + n * syn + g * syg  # [BLOCK_T]
    y_chans = (offs_o * syo)[None, :]
    for j in tl.static_range(len(AT)):
        col = ()
        for a in tl.static_range(A):
            col = col + (rows[a][j],)
        w = tw * len(AT) + j
        for i in tl.static_range(len(AT)):
            h = th * len(AT) + i
            ok = mask_t & (h < HO) & (w < WO)
            value = _combine(col, AT, i)
            tl.store((y_tiles + h * syh + w * syw)[:, None] + y_chans,
                     downcast(value, y_ptr.dtype.element_ty, INTERPRET), mask=ok[:, None] & mask_o[None, :])
