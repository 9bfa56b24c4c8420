"""Triton kernels of the implicit-GEMM convolution (launchers in implicit_gemm.py).

Every problem is padded to three spatial axes (size-1 axes in front). Names: ``S`` input size,
``SO`` output size, ``K`` kernel size, ``ST`` stride, ``KD`` kernel dilation, ``ID`` input
dilation, ``LO`` low pad (dilated coordinates), per axis 1..3; ``s*`` are element strides.
"""

import triton
import triton.language as tl

from .kernel_utils import dot, split_rows


@triton.jit
def _weight_tap(t0, u, pt, k, FLIP: tl.constexpr):
    """Weight index of the phase's u-th read-order tap t0 + pt*u (reversed when flipping)."""
    t = t0 + u * pt
    if FLIP:
        t = k - 1 - t
    return t


@triton.jit
def _phase(phase_ptr, index):
    """Row ``index`` of the phase table (implicit_gemm._phases): per axis (r, count, base, t0,
    taps)."""
    row = phase_ptr + index * 15
    return (tl.load(row), tl.load(row + 1), tl.load(row + 2), tl.load(row + 3), tl.load(row + 4),
            tl.load(row + 5), tl.load(row + 6), tl.load(row + 7), tl.load(row + 8), tl.load(row + 9),
            tl.load(row + 10), tl.load(row + 11), tl.load(row + 12), tl.load(row + 13), tl.load(row + 14))


@triton.jit
def _carry(a, b, n):
    """Counter a wrapped to 0 when it reaches n, with the carry added to the next counter b
    (the reduction's tap and channel counters advance this way: no division in the loop)."""
    wrap = a >= n
    return tl.where(wrap, 0, a), tl.where(wrap, b + 1, b)


@triton.jit
def conv_fwd_kernel(
    x_ptr, w_ptr, y_ptr, phase_ptr,
    N, CG, OG, NPHASE,
    S1, S2, S3, K1, K2, K3,
    PJ1, PJ2, PJ3, PT1, PT2, PT3, QS1, QS2, QS3, US1, US2, US3,
    sxn, sx1, sx2, sx3, sxg, sxc,
    swg, swo, sw1, sw2, sw3, swc,
    syn, sy1, sy2, sy3, syg, syo,
    FLIP: tl.constexpr, PACKED: tl.constexpr, INT64: tl.constexpr,
    PRECISION: tl.constexpr, UPCAST: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    """y[n, j, g, o] = sum_{t, c} x[n, (j*st + t'*kd - lo) / idil, g, c] * w[g, o, t, c], over
    the taps t whose input position is a real element: one output phase per program (grid axis 1).

    ``phase_ptr`` holds per non-empty phase and axis (r, count, base, t0, taps): output
    j = r + PJ*q for q < count reads input base + q*QS + u*US through read-order taps
    t' = t0 + PT*u, u < taps."""
    # grid axis 0 = (m tile, n tile) with n fastest, so the output-channel tiles that share an
    # input tile run together and read it from L2; axis 1 = (group, phase)
    n_tiles = tl.cdiv(OG, BLOCK_N)
    pid_m = tl.program_id(0) // n_tiles
    pid_n = tl.program_id(0) % n_tiles
    pid_z = tl.program_id(1)
    g = pid_z // NPHASE
    r1, Q1, B1, T01, NT1, r2, Q2, B2, T02, NT2, r3, Q3, B3, T03, NT3 = _phase(phase_ptr, pid_z % NPHASE)
    m_total = N * Q1 * Q2 * Q3
    taps = tl.where(pid_m * BLOCK_M < m_total, NT1 * NT2 * NT3, 0)

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # rows of this phase: (n, q1, q2, q3)
    mask_m = offs_m < m_total
    n, q1, q2, q3 = split_rows(offs_m, Q1, Q2, Q3)
    if INT64:
        n = n.to(tl.int64)
        g = g.to(tl.int64)
    i1 = B1 + q1 * QS1  # input coordinates at the phase's first tap, [BLOCK_M]
    i2 = B2 + q2 * QS2
    i3 = B3 + q3 * QS3
    x_rows = x_ptr + n * sxn + g * sxg  # [BLOCK_M] pointers

    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_n = offs_n < OG
    w_cols = w_ptr + g * swg + offs_n * swo  # [BLOCK_N] pointers

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    if PACKED:  # small channel counts: the reduction runs over (last-axis tap, channel) pairs,
        # contiguous in memory along a row when that axis is not dilated (e.g. the 7x3 inputs of a
        # kernel row of an RGB stem); the other taps advance as counters
        run = NT3 * CG
        u1 = pid_z * 0
        u2 = u1
        k0 = u1
        for kk in range(0, tl.where(taps > 0, NT1 * NT2, 0) * tl.cdiv(run, BLOCK_K)):
            offs_k = k0 + tl.arange(0, BLOCK_K)
            mask_k = offs_k < run
            u3 = offs_k // CG
            c = offs_k % CG
            ii1 = i1 + u1 * US1
            ii2 = i2 + u2 * US2
            ok = mask_m & (ii1 >= 0) & (ii1 < S1) & (ii2 >= 0) & (ii2 < S2)
            ii3 = i3[:, None] + (u3 * US3)[None, :]  # [BLOCK_M, BLOCK_K]
            ok2 = ok[:, None] & mask_k[None, :] & (ii3 >= 0) & (ii3 < S3)
            a = tl.load((x_rows + ii1 * sx1 + ii2 * sx2 + i3 * sx3)[:, None]
                        + (u3 * US3 * sx3 + c * sxc)[None, :],
                        mask=ok2, other=0.0)
            t1 = _weight_tap(T01, u1, PT1, K1, FLIP)
            t2 = _weight_tap(T02, u2, PT2, K2, FLIP)
            t3 = _weight_tap(T03, u3, PT3, K3, FLIP)
            b = tl.load(w_cols[None, :] + (t1 * sw1 + t2 * sw2 + t3 * sw3 + c * swc)[:, None],
                        mask=mask_k[:, None] & mask_n[None, :], other=0.0)
            acc = dot(a, b, acc, PRECISION, UPCAST)
            k0, u2 = _carry(k0 + BLOCK_K, u2, run)
            u2, u1 = _carry(u2, u1, NT2)
    else:  # one tap at a time, channels in BLOCK_K chunks: contiguous, vectorised loads
        # the tap (u1, u2, u3) and channel chunk c0 advance as counters: no division in the loop
        u1 = pid_z * 0
        u2 = u1
        u3 = u1
        c0 = u1
        for kk in range(0, taps * tl.cdiv(CG, BLOCK_K)):
            offs_c = c0 + tl.arange(0, BLOCK_K)
            mask_c = offs_c < CG
            ii1 = i1 + u1 * US1
            ii2 = i2 + u2 * US2
            ii3 = i3 + u3 * US3
            ok = mask_m & (ii1 >= 0) & (ii1 < S1) & (ii2 >= 0) & (ii2 < S2) & (ii3 >= 0) & (ii3 < S3)
            a = tl.load((x_rows + ii1 * sx1 + ii2 * sx2 + ii3 * sx3)[:, None] + (offs_c * sxc)[None, :],
                        mask=ok[:, None] & mask_c[None, :], other=0.0)
            t1 = _weight_tap(T01, u1, PT1, K1, FLIP)
            t2 = _weight_tap(T02, u2, PT2, K2, FLIP)
            t3 = _weight_tap(T03, u3, PT3, K3, FLIP)
            b = tl.load(w_cols[None, :] + t1 * sw1 + t2 * sw2 + t3 * sw3 + (offs_c * swc)[:, None],
                        mask=mask_c[:, None] & mask_n[None, :], other=0.0)
            acc = dot(a, b, acc, PRECISION, UPCAST)
            c0, u3 = _carry(c0 + BLOCK_K, u3, CG)
            u3, u2 = _carry(u3, u2, NT3)
            u2, u1 = _carry(u2, u1, NT2)

    j1 = r1 + PJ1 * q1
    j2 = r2 + PJ2 * q2
    j3 = r3 + PJ3 * q3
    y_rows = y_ptr + n * syn + j1 * sy1 + j2 * sy2 + j3 * sy3 + g * syg
    tl.store(y_rows[:, None] + (offs_n * syo)[None, :], acc.to(y_ptr.dtype.element_ty),
             mask=mask_m[:, None] & mask_n[None, :])


@triton.jit
def conv_wgrad_kernel(
    d_ptr, s_ptr, out_ptr,
    ROWS_PER_SPLIT, NB, MD, ND, SPLIT,
    R1, R2, R3, SG1, SG2, SG3, K1, K2, K3,
    A1, A2, A3, T1, T2, T3, F1, F2, F3, V1, V2, V3,
    sdn, sd1, sd2, sd3, sdg, sdc,
    ssn, ss1, ss2, ss3, ssg, ssc,
    sos, sog, som, so1, so2, so3, son,
    TAPWISE: tl.constexpr, DENSE: tl.constexpr, INT64: tl.constexpr,
    PRECISION: tl.constexpr, UPCAST: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    """out[split, g, m, t, c] = sum over rows r = (n, p) of this split of
    dense[n, p, g, m] * gathered[n, (p*A + t*T + F) / V, g, c] (zero unless divisible and inside):
    the weight gradient as one GEMM per group over the long reduction, split across programs.
    TAPWISE: each column tile is one tap's channels (index math per row, not per element);
    DENSE: V == 1 on every axis (no divisibility test)."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_z = tl.program_id(2)
    g = pid_z // SPLIT
    split = pid_z % SPLIT
    if INT64:
        g = g.to(tl.int64)

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    mask_m = offs_m < MD
    if TAPWISE:
        chunks = tl.cdiv(ND, BLOCK_N)
        tap = pid_n // chunks
        c = (pid_n % chunks) * BLOCK_N + tl.arange(0, BLOCK_N)
        mask_n = c < ND
    else:  # columns: (tap, channel) pairs
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        mask_n = offs_n < K1 * K2 * K3 * ND
        tap = offs_n // ND
        c = offs_n % ND
    t3 = tap % K3
    t2 = (tap // K3) % K2
    t1 = tap // (K3 * K2)

    rows_total = NB * R1 * R2 * R3
    r_begin = split * ROWS_PER_SPLIT
    r_end = tl.minimum(rows_total, r_begin + ROWS_PER_SPLIT)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for r0 in range(r_begin, r_end, BLOCK_K):
        rows = r0 + tl.arange(0, BLOCK_K)
        mask_r = rows < r_end
        n, p1, p2, p3 = split_rows(rows, R1, R2, R3)
        if INT64:
            n = n.to(tl.int64)
        d_rows = d_ptr + n * sdn + p1 * sd1 + p2 * sd2 + p3 * sd3 + g * sdg
        a = tl.load(d_rows[:, None] + (offs_m * sdc)[None, :], mask=mask_r[:, None] & mask_m[None, :],
                    other=0.0)  # [BLOCK_K, BLOCK_M]
        s_rows = s_ptr + n * ssn + g * ssg
        if TAPWISE:
            pos1 = p1 * A1 + (t1 * T1 + F1)  # [BLOCK_K]
            pos2 = p2 * A2 + (t2 * T2 + F2)
            pos3 = p3 * A3 + (t3 * T3 + F3)
            ok = mask_r
        else:
            pos1 = p1[:, None] * A1 + (t1 * T1)[None, :] + F1  # [BLOCK_K, BLOCK_N]
            pos2 = p2[:, None] * A2 + (t2 * T2)[None, :] + F2
            pos3 = p3[:, None] * A3 + (t3 * T3)[None, :] + F3
            ok = mask_r[:, None] & mask_n[None, :]
        if DENSE:
            ok &= (pos1 >= 0) & (pos1 < SG1) & (pos2 >= 0) & (pos2 < SG2) & (pos3 >= 0) & (pos3 < SG3)
        else:
            ok &= (pos1 >= 0) & (pos1 <= (SG1 - 1) * V1) & (pos1 % V1 == 0)
            ok &= (pos2 >= 0) & (pos2 <= (SG2 - 1) * V2) & (pos2 % V2 == 0)
            ok &= (pos3 >= 0) & (pos3 <= (SG3 - 1) * V3) & (pos3 % V3 == 0)
            pos1 = pos1 // V1
            pos2 = pos2 // V2
            pos3 = pos3 // V3
        if TAPWISE:
            b = tl.load((s_rows + pos1 * ss1 + pos2 * ss2 + pos3 * ss3)[:, None] + (c * ssc)[None, :],
                        mask=ok[:, None] & mask_n[None, :], other=0.0)
        else:
            b = tl.load(s_rows[:, None] + pos1 * ss1 + pos2 * ss2 + pos3 * ss3 + (c * ssc)[None, :],
                        mask=ok, other=0.0)
        acc = dot(tl.trans(a), b, acc, PRECISION, UPCAST)

    out = out_ptr + split * sos + g * sog
    cols = t1 * so1 + t2 * so2 + t3 * so3 + c * son
    tl.store(out + (offs_m * som)[:, None] + cols[None, :], acc.to(out_ptr.dtype.element_ty),
             mask=mask_m[:, None] & mask_n[None, :])


@triton.jit
def conv_fwd_tma_kernel(
    x_desc, w_desc, y, phase_ptr,
    N, G, CG, OG, NPHASE,
    Q1, Q2, Q3, K1, K2, K3, PJ1, PJ2, PJ3, PT1, PT2, PT3, US1, US2, US3, ST1, ST2,
    syn, sy1, sy2, sy3, syg, syo, C3_LO, C3_HI,
    FLIP: tl.constexpr, W_T: tl.constexpr, Y_TMA: tl.constexpr, INT64: tl.constexpr, PRECISION: tl.constexpr,
    UPCAST: tl.constexpr,
    BB: tl.constexpr, B1: tl.constexpr, B2: tl.constexpr, B3: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PERSISTENT: tl.constexpr,
):
    """y[n, j, g, o] = sum_{t, c} x[n, (j + t*kd - lo) / idil, g, c] * w[g, o, t, c] at stride 1,
    every operand tile a TMA box. Per output phase (``phase_ptr`` as in conv_fwd_kernel: at
    stride 1 a phase's rows q read input base + q + u*US through taps t0 + PT*u, so a tile of
    rows is a box of the input shifted per tap; without input dilation there is one phase,
    base = -lo, US = kd), the output tile is a box of BB x B1 x B2 x B3 rows of x [N, S1, S2,
    S3, C] (descriptor ``x_desc``, box [BB, B1, B2, B3, BLOCK_K]); the hardware fills what falls
    outside the input with zeros, which is the padding (and cropping is a shift), so there are
    no masks and no address arithmetic per element. ``w_desc`` is the weight as [K1, K2, K3,
    G*OG, CG] (box [1, 1, 1, BLOCK_N, BLOCK_K]), or (W_T: an input gradient's view of the
    forward's weight, not copied) [K1, K2, K3, G*CG, OG] (box [1, 1, 1, BLOCK_K, BLOCK_N],
    transposed in shared memory). The product is computed transposed,
    acc[o, m] = w[o, :] . x[m, :], so that the box (reshaped to [BB*B1*B2*B3, BLOCK_K], a free
    view of shared memory) is wgmma's B operand, which Triton takes from shared memory through
    reshapes, where it would load an A operand into registers. Q1..Q3: the most rows any phase
    has per axis. Y_TMA (one phase of all the outputs): ``y`` is a descriptor of the output
    [N, SO1, SO2, SO3, G*OG] and the tile leaves in one TMA store (clipped at the output's
    edges by the hardware); else ``y`` is a pointer and rows j = r + PJ*q are stored with masks.
    The first tap of the last axis reduces over channels C3_LO.. and its last tap over ..C3_HI
    (multiples of BLOCK_K; 0 and CG but for a folded stride, whose outer taps hold zero weights
    for part of their channels: those steps are skipped). ST1, ST2: the input row step per
    output row on axes 1 and 2 (1 but for a strided axis, where the box has side 1).

    Tiles are numbered (group and phase, position box, output-channel tile), the last fastest:
    a tile's output-channel tiles share its x boxes in L2. The grid has one program per tile,
    or (PERSISTENT) fewer programs, each looping over tiles with its loops flattened into one,
    so that the next tile's loads are in flight during this tile's epilogue (short reductions
    spend much of a tile there)."""
    BLOCK_M: tl.constexpr = BB * B1 * B2 * B3
    n_tiles = tl.cdiv(OG, BLOCK_N)
    T3 = tl.cdiv(Q3, B3)
    T2 = tl.cdiv(Q2, B2)
    T1 = tl.cdiv(Q1, B1)
    mn_tiles = tl.cdiv(N, BB) * T1 * T2 * T3 * n_tiles
    for tile in tl.range(tl.program_id(0), G * NPHASE * mn_tiles, tl.num_programs(0), flatten=PERSISTENT):
        pid_m = tile % mn_tiles // n_tiles
        pid_n = tile % n_tiles
        pid_z = tile // mn_tiles
        g = pid_z // NPHASE
        r1, C1, A1, T01, NT1, r2, C2, A2, T02, NT2, r3, C3, A3, T03, NT3 = _phase(phase_ptr, pid_z % NPHASE)
        q3 = pid_m % T3 * B3  # the box's first row, per axis
        q2 = pid_m // T3 % T2 * B2
        q1 = pid_m // (T3 * T2) % T1 * B1
        b0 = pid_m // (T3 * T2 * T1) * BB
        o0 = g * OG + pid_n * BLOCK_N
        c_base = g * CG
        live = (q1 < C1) & (q2 < C2) & (q3 < C3)  # this phase may have fewer rows than Q

        acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
        # the tap (u1, u2, u3) and channel block c0 advance as counters: one flat loop to pipeline
        u1 = pid_m * 0
        u2 = u1
        u3 = u1
        c0 = u1 + C3_LO
        row_steps = NT3 * tl.cdiv(CG, BLOCK_K) - C3_LO // BLOCK_K - tl.cdiv(CG - C3_HI, BLOCK_K)
        steps = tl.where(live, NT1 * NT2 * row_steps, 0)
        for kk in range(steps):
            a = x_desc.load([b0, A1 + ST1 * q1 + u1 * US1, A2 + ST2 * q2 + u2 * US2, A3 + q3 + u3 * US3,
                             c_base + c0])
            a = a.reshape(BLOCK_M, BLOCK_K)  # [BLOCK_M, BLOCK_K]
            t1 = _weight_tap(T01, u1, PT1, K1, FLIP)
            t2 = _weight_tap(T02, u2, PT2, K2, FLIP)
            t3 = _weight_tap(T03, u3, PT3, K3, FLIP)
            if W_T:
                b = tl.trans(w_desc.load([t1, t2, t3, c_base + c0,
                                          pid_n * BLOCK_N]).reshape(BLOCK_K, BLOCK_N))
            else:
                b = w_desc.load([t1, t2, t3, o0, c0]).reshape(BLOCK_N, BLOCK_K)
            acc = dot(b, tl.trans(a), acc, PRECISION, UPCAST)
            c0, u3 = _carry(c0 + BLOCK_K, u3, tl.where(u3 == NT3 - 1, C3_HI, CG))
            c0 = tl.where(u3 == NT3, C3_LO, c0)  # a new kernel row starts at its first tap's range
            u3, u2 = _carry(u3, u2, NT3)
            u2, u1 = _carry(u2, u1, NT2)

        if Y_TMA:
            y.store([b0, q1, q2, q3, o0], tl.trans(acc).to(y.dtype).reshape(BB, B1, B2, B3, BLOCK_N))
        else:
            offs_m = tl.arange(0, BLOCK_M)
            i3 = q3 + offs_m % B3
            i2 = q2 + offs_m // B3 % B2
            i1 = q1 + offs_m // (B3 * B2) % B1
            n = b0 + offs_m // (B3 * B2 * B1)
            mask_m = (n < N) & (i1 < C1) & (i2 < C2) & (i3 < C3)
            offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
            mask_n = offs_n < OG
            if INT64:
                n = n.to(tl.int64)
                g = g.to(tl.int64)
            y_rows = (y + n * syn + (r1 + PJ1 * i1) * sy1 + (r2 + PJ2 * i2) * sy2 + (r3 + PJ3 * i3) * sy3
                      + g * syg)
            tl.store(y_rows[:, None] + (offs_n * syo)[None, :], tl.trans(acc).to(y.dtype.element_ty),
                     mask=mask_m[:, None] & mask_n[None, :])


@triton.jit
def rows_fwd_kernel(
    x_desc, w_desc, y, R, O, C, NB, KD, LO, LOS, syb, syr,
    TAPS: tl.constexpr, ST: tl.constexpr, FLIP: tl.constexpr, BATCHED: tl.constexpr, INT64: tl.constexpr,
    PRECISION: tl.constexpr, UPCAST: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    """y[b, r, o] = sum over taps t and channels c of x[b, r*ST + t*KD - LO, c] * w[o, t, c]: a
    1-D convolution as a GEMM over rows, each tap a shifted box of them. ``x_desc`` holds the
    input with ST rows folded into one ([NB, rows, ST*C], box [1, BLOCK_M, BLOCK_K], BATCHED; or
    [rows, C] where it is one batch), so that tap t is the box at row offset floor((t*KD - LO) /
    ST) and channel offset ((t*KD - LO) mod ST)*C (``LOS`` = ceil(LO / ST) keeps the division on
    non-negative numbers); rows past the input's ends are TMA's zero fill (the padding).
    ``w_desc`` is [O, TAPS*C]. A 1x1 convolution at stride 1 without padding is one tap over its
    N*S rows. With ST > 1, BLOCK_K divides C (a step never reads the next row's channels); with
    ST = 1 the zero fill past C meets the next tap's weights.

    The reduction is short next to the output (r50's 64 channels: one step), so a tile's
    epilogue is much of its time. One program an SM loops over the tiles (a row block's channel
    tiles adjacent, sharing x in L2), the loops flattened into one that Triton pipelines across
    tiles: the next tile's loads are in flight during this tile's stores. Unlike the
    convolution kernel's boxes over 3 spatial axes, these boxes make that pay (H200: r50_1x1_56
    40-41 against 49 us, conv1d_k3s2_768 123-125 against 151; not flattened 70 on r50_1x1_56). Not
    ``warp_specialize``: on Hopper Triton 3.6's producer/consumer split of this loop hangs the
    GPU (PERFORMANCE.md, eighteenth session)."""
    n_tiles = tl.cdiv(O, BLOCK_N)
    m_tiles = tl.cdiv(R, BLOCK_M)
    steps = tl.cdiv(C, BLOCK_K)  # per tap
    for tile in tl.range(tl.program_id(0), NB * m_tiles * n_tiles, tl.num_programs(0), flatten=True):
        b = tile // (m_tiles * n_tiles)
        m0 = tile // n_tiles % m_tiles * BLOCK_M
        o0 = tile % n_tiles * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        t, kk = 0, 0  # the tap and its reduction step: counters, no division in the loop
        for _ in range(TAPS * steps):
            k = kk * BLOCK_K
            u = t * KD - LO + LOS * ST  # the tap's input offset, made non-negative
            r0 = m0 + u // ST - LOS
            c0 = u % ST * C + k
            if BATCHED:
                a = x_desc.load([b, r0, c0]).reshape(BLOCK_M, BLOCK_K)
            else:
                a = x_desc.load([r0, c0])
            wt = TAPS - 1 - t if FLIP else t
            w = w_desc.load([o0, wt * C + k])
            acc = dot(a, tl.trans(w), acc, PRECISION, UPCAST)
            kk, t = _carry(kk + 1, t, steps)
        rows = m0 + tl.arange(0, BLOCK_M)
        cols = o0 + tl.arange(0, BLOCK_N)
        base = y + b * syb
        if INT64:
            rows = rows.to(tl.int64)
            base = y + b.to(tl.int64) * syb
        tl.store(base + rows[:, None] * syr + cols[None, :], acc.to(y.dtype.element_ty),
                 mask=(rows[:, None] < R) & (cols[None, :] < O))


@triton.jit
def conv_wgrad_tma_kernel(
    dy_desc, x_desc, out_ptr, phase_ptr,
    N, CG, OG, SPLIT, STEPS_PER_SPLIT, NPHASE,
    SO1, SO2, SO3, K1, K2, K3, KD1, KD2, KD3, LO1, LO2, LO3,
    sos, sog, soo, so1, so2, so3, soc,
    PHASED: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr,
    BB: tl.constexpr, B1: tl.constexpr, B2: tl.constexpr, B3: tl.constexpr,
    BLOCK_O: tl.constexpr, BLOCK_C: tl.constexpr, TAPS3: tl.constexpr,
):
    """out[split, g, o, t, c] = sum over this split's boxes of output positions j of
    dy[n, j, g, o] * x[n, j + t*kd - lo, g, c]: the weight gradient at stride 1 without input
    dilation, TAPS3 consecutive taps along the last axis per program (one accumulator each,
    sharing each dy box: dy is read K3/TAPS3 times, not K3), both operands TMA boxes
    (``dy_desc`` [N, SO1, SO2, SO3, G*OG] with box [BB, B1, B2, B3, BLOCK_O], ``x_desc`` [N, S1,
    S2, S3, G*CG] with box [BB, B1, B2, B3, BLOCK_C]); x's box is dy's shifted by the tap,
    zero-filled outside the input (the padding). The boxes tile the output positions exactly
    (the launcher picks B1..B3 dividing SO1..SO3), so no product pairs a zero-filled dy row with
    an x element the convolution never reads; channels past a group's end belong to the next
    group and only reach columns that are not stored.

    PHASED: the NPHASE stride-1 phases of a strided or transposed 2-D weight gradient in one
    launch (axis 2 is the phase axis: SO2 = K2 = 1). One of dy and x is viewed [N, Q1, P1, Q2,
    P2*C], so that a phase is a coordinate on axis 2 and an offset into the channels; row ph of
    ``phase_ptr`` (int32) holds dy's and x's (axis-2 coordinate, channel offset), the phase's
    tap count, kernel dilation and low pad per axis (1 and 3), and where its taps go in out
    (first, step). Programs past a phase's taps store nothing."""
    BLOCK_M: tl.constexpr = BB * B1 * B2 * B3
    c_tiles = tl.cdiv(CG, BLOCK_C)
    o_tiles = tl.cdiv(OG, BLOCK_O)
    pid = tl.program_id(0)  # (taps, o tile, c tile), c fastest: the programs sharing dy run together
    pid_c = pid % c_tiles
    pid_o = pid // c_tiles % o_tiles
    tap = pid // (c_tiles * o_tiles)
    chunks3 = tl.cdiv(K3, TAPS3)
    t3 = tap % chunks3 * TAPS3  # the first of this program's taps along the last axis
    t2 = tap // chunks3 % K2
    t1 = tap // (chunks3 * K2)
    g = tl.program_id(1) // (SPLIT * NPHASE)
    phase = tl.program_id(1) // SPLIT % NPHASE
    split = tl.program_id(1) % SPLIT
    dy2, dyc, x2, xc = 0, 0, 0, 0
    k1, kd1, lo1, k3, kd3, lo3 = K1, KD1, LO1, K3, KD3, LO3
    out1, step1, out3, step3 = 0, 1, 0, 1
    if PHASED:
        row = phase_ptr + phase * 14
        dy2, dyc, x2, xc = tl.load(row), tl.load(row + 1), tl.load(row + 2), tl.load(row + 3)
        k1, kd1, lo1 = tl.load(row + 4), tl.load(row + 5), tl.load(row + 6)
        out1, step1 = tl.load(row + 7), tl.load(row + 8)
        k3, kd3, lo3 = tl.load(row + 9), tl.load(row + 10), tl.load(row + 11)
        out3, step3 = tl.load(row + 12), tl.load(row + 13)
    T3 = tl.cdiv(SO3, B3)
    T2 = tl.cdiv(SO2, B2)
    T1 = tl.cdiv(SO1, B1)
    first = split * STEPS_PER_SPLIT
    live = (t1 < k1) & (t3 < k3)  # a phase with fewer taps than the grid's: nothing to do
    steps = tl.where(live, tl.minimum(tl.cdiv(N, BB) * T1 * T2 * T3 - first, STEPS_PER_SPLIT), 0)
    o0 = g * OG + pid_o * BLOCK_O
    c0 = g * CG + pid_c * BLOCK_C
    s1 = t1 * kd1 - lo1  # the tap's shift of the x box against the dy box
    s2 = t2 * KD2 - LO2 + x2
    s3 = t3 * kd3 - lo3

    # the box (b, q1, q2, q3), counted in boxes, advances as counters from the split's first
    q3 = first % T3
    q2 = first // T3 % T2
    q1 = first // (T3 * T2) % T1
    b = first // (T3 * T2 * T1)
    accs = ()
    for i in tl.static_range(TAPS3):
        accs = accs + (tl.zeros((BLOCK_O, BLOCK_C), dtype=tl.float32),)
    for _ in range(steps):
        d = tl.trans(dy_desc.load([b * BB, q1 * B1, q2 * B2 + dy2, q3 * B3,
                                   o0 + dyc]).reshape(BLOCK_M, BLOCK_O))
        new = ()
        for i in tl.static_range(TAPS3):  # past K3 (a ragged last chunk): computed, never stored
            a = x_desc.load([b * BB, q1 * B1 + s1, q2 * B2 + s2, q3 * B3 + s3 + i * kd3, c0 + xc])
            new = new + (dot(d, a.reshape(BLOCK_M, BLOCK_C), accs[i], PRECISION, UPCAST),)
        accs = new
        q3, q2 = _carry(q3 + 1, q2, T3)
        q2, q1 = _carry(q2, q1, T2)
        q1, b = _carry(q1, b, T1)

    offs_o = pid_o * BLOCK_O + tl.arange(0, BLOCK_O)
    offs_c = pid_c * BLOCK_C + tl.arange(0, BLOCK_C)
    out = out_ptr + split * sos + g * sog + (out1 + step1 * t1) * so1 + t2 * so2
    for i in tl.static_range(TAPS3):
        tl.store(out + (out3 + step3 * (t3 + i)) * so3 + (offs_o * soo)[:, None] + (offs_c * soc)[None, :],
                 accs[i].to(out_ptr.dtype.element_ty),
                 mask=(offs_o < OG)[:, None] & (offs_c < CG)[None, :] & (t3 + i < k3) & live)


@triton.jit
def padded_blocks_kernel(
    x_ptr, y_ptr,
    ROWS, NX, SHIFT3, B1, B2, B3, S1, S2, S3, LO1, LO2, LO3, C,
    sxn, sx1, sx2, sx3,
    ST1: tl.constexpr, ST2: tl.constexpr, ST3: tl.constexpr, CP: tl.constexpr,
    COLS: tl.constexpr, BLOCK_R: tl.constexpr, INT64: tl.constexpr,
):
    """y[k*NX + n, b1, b2, b3, (p1, p2, p3, c)] = x[n, b1*ST1 + p1 - LO1, b2*ST2 + p2 - LO2,
    b3*ST3 + p3 - LO3 - k*SHIFT3, c], zero outside x and for c >= C (x's channels contiguous; y
    contiguous, rows of ST1*ST2*ST3*CP elements): copy k of x (NX images) shifted by k*SHIFT3
    along its last axis. A program copies BLOCK_R rows of y: the row and column index
    arithmetic is split so each element costs a few adds and compares."""
    W: tl.constexpr = ST1 * ST2 * ST3 * CP
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    if INT64:
        rows = rows.to(tl.int64)
    n, b1, b2, b3 = split_rows(rows, B1, B2, B3)
    cols = tl.arange(0, COLS)
    c = cols % CP
    p3 = cols // CP % ST3
    p2 = cols // (CP * ST3) % ST2
    p1 = cols // (CP * ST3 * ST2)
    i1 = (b1 * ST1 - LO1)[:, None] + p1[None, :]
    i2 = (b2 * ST2 - LO2)[:, None] + p2[None, :]
    i3 = (b3 * ST3 - LO3 - n // NX * SHIFT3)[:, None] + p3[None, :]
    live = (rows < ROWS)[:, None] & (cols < W)[None, :]
    ok = live & (c < C)[None, :] & (i1 >= 0) & (i1 < S1) & (i2 >= 0) & (i2 < S2) & (i3 >= 0) & (i3 < S3)
    src = x_ptr + (n % NX * sxn)[:, None] + i1 * sx1 + i2 * sx2 + i3 * sx3 + c[None, :]
    tl.store(y_ptr + rows[:, None] * W + cols[None, :], tl.load(src, mask=ok, other=0.0), mask=live)
