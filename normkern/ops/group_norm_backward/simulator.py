"""A NumPy interpreter of GroupNormBackward plans: slow, literal, equal to the kernels bit for bit.

Stage 1 walks every task (n, g) and channel with the fold-halves ReduceSum on materialized buffers
(mode 3: per chunk, with Kahan compensation) and the A2 dx formula of the plan's mode. Stage 2 goes
through a NaN-filled workspace exactly as the plan says: batch pairs onto rows, rows folded in UB
batches with the halving tree, two fp32 halves onto zeroed outputs, or every task's partials in the
given arrival order. An arch35 (Ascend950) plan goes through ``simulate_arch35``: op_kernel/arch35's
binary-add sums, its dx formula and its stage-2 trees, on whole rows of channels at once. The host's ``groups``
plan goes through ``simulate_groups``: each row's two 64-lane sums, the tasks' and the batch's sums in order.
"""

from __future__ import annotations

import numpy as np

from tiling import LANES, GroupNormBackwardPlan, GroupNormBackwardStrategy

from ...kernels.simulate import F32, fold_halves, lanes_add, pairwise64

S = GroupNormBackwardStrategy


def _channel_sums(plan, dy, x, r, neg_mr):
    if plan.mode == 5:
        return dy[0], (x[0] * r + neg_mr) * dy[0]
    if plan.mode != 3:
        return fold_halves(dy), fold_halves((x * r + neg_mr) * dy)
    totals, corrs = [F32(0.0), F32(0.0)], [F32(0.0), F32(0.0)]
    chunk = plan.tiling_data["mode2_ub_capacity_ele"]
    for start in range(0, plan.hxw, chunk):
        sl = slice(start, start + chunk)
        for k, values in enumerate((dy[sl], (x[sl] * r + neg_mr) * dy[sl])):
            adjusted = fold_halves(values) - corrs[k]
            summed = adjusted + totals[k]
            corrs[k] = (summed - totals[k]) - adjusted
            totals[k] = summed
    return totals[0], totals[1]


def _dx(plan, j, dy, x, m, r, neg_mr, gamma, c1, c2):
    if plan.mode == 0 and (j * plan.hxw) % (8 if plan.dtype == "float32" else 16) == 0:
        return dy * (r * gamma) - ((x * r + neg_mr) * (r * c2) + r * c1)
    if plan.mode == 0:
        return dy * (r * gamma) - (x * ((r * r) * c2) + (r * c1 - ((m * r) * r) * c2))
    if plan.mode == 5:
        return (dy * gamma) * r - ((x * r + neg_mr) * (r * c2) + r * c1)
    return ((dy * gamma) - (x * (r * c2) + F32(-1.0) * ((m * r) * c2 - c1))) * r


def _batch_fold(rows: np.ndarray, batch_rows: int) -> np.ndarray:
    acc = np.zeros(rows.shape[1], F32)
    for b0 in range(0, rows.shape[0], batch_rows):
        ub = rows[b0:b0 + batch_rows].copy()
        end = mid = ub.shape[0]
        while mid >= 2:
            mid >>= 1
            end -= mid
            ub[:mid] = ub[end:end + mid] + ub[:mid]
            mid = end
        acc = ub[0] + acc
    return acc


def simulate(plan: GroupNormBackwardPlan, dy3, x3, mean, rstd, gamma, arrival_order=None):
    """Execute ``plan`` on (N*G, C_G, HxW) arrays and float32 task statistics and gamma (C,).

    Returns float32 ``(dx, grad_gamma, grad_beta)``; ``arrival_order`` (G, N) is required for an
    atomic plan. An arch35 plan runs ``simulate_arch35``."""
    if plan.strategy is S.ARCH35:
        return simulate_arch35(plan, dy3, x3, mean, rstd, gamma)
    if plan.strategy is S.GROUPS:
        return simulate_groups(plan, dy3, x3, mean, rstd, gamma)
    td = plan.tiling_data
    dy, x = dy3.astype(F32), x3.astype(F32)
    c_g, tasks = plan.c_g, plan.n * plan.g
    dx = np.full(dy.shape, np.nan, F32)
    partials = np.full((tasks, 2, c_g), np.nan, F32)
    scale = F32(c_g * plan.hxw)
    for t in range(tasks):
        m, r = mean[t], rstd[t]
        neg_mr = (F32(-1.0) * m) * r
        for j in range(c_g):
            partials[t, 1, j], partials[t, 0, j] = _channel_sums(plan, dy[t, j], x[t, j], r, neg_mr)
        gam = gamma[(t % plan.g) * c_g:(t % plan.g + 1) * c_g]
        c1 = fold_halves(gam * partials[t, 1]) / scale
        c2 = fold_halves(gam * partials[t, 0]) / scale
        for j in range(c_g):
            dx[t, j] = _dx(plan, j, dy[t, j], x[t, j], m, r, neg_mr, gam[j], c1, c2)
    out = np.full((2, plan.c), np.nan, F32)
    flat = partials.reshape(plan.n, plan.g, 2, c_g).transpose(0, 2, 1, 3).reshape(plan.n, 2, plan.c)
    if plan.pair_rows:
        rows = np.full((2, plan.pair_rows, plan.c), np.nan, F32)     # the workspace
        for k in range(plan.pair_rows):
            rows[:, k] = F32(0.0) + flat[2 * k]
            if 2 * k + 1 < plan.n:
                rows[:, k] = rows[:, k] + flat[2 * k + 1]
        cast, parts = td["castEleNum"], td["coreBatchParts"]
        for c0 in range(0, plan.c, cast):
            sl = slice(c0, min(c0 + cast, plan.c))
            if plan.out_dtype == "float32":
                first = (plan.pair_rows + 1) // 2
                for which in (0, 1):
                    halves = (_batch_fold(rows[which, :first, sl], parts), _batch_fold(rows[which, first:, sl], parts))
                    out[which, sl] = (F32(0.0) + halves[0]) + halves[1]
            else:
                for which in (0, 1):
                    out[which, sl] = _batch_fold(rows[which, :, sl], parts)
        return dx, out[0], out[1]
    if plan.out_dtype != "float32" and plan.n == 1 and plan.strategy is S.CANN:
        return dx, flat[0, 0].copy(), flat[0, 1].copy()
    order = np.tile(np.arange(plan.n), (plan.g, 1)) if arrival_order is None else np.asarray(arrival_order)
    if plan.strategy is S.ATOMIC and arrival_order is None:
        raise ValueError("an atomic plan needs its arrival order to be simulated")
    out[:] = 0.0
    for g in range(plan.g):
        sl = slice(g * c_g, (g + 1) * c_g)
        for n in order[g]:
            out[:, sl] = out[:, sl] + flat[n, :, sl]
    return dx, out[0], out[1]


# ---------------------------------------------------------------------------------------------------------------
# The arch35 (Ascend950) plan: op_kernel/arch35 of hicann/ops-nn, every vector step on whole rows of channels.
# A register's Reduce<SUM> is the 64-lane pairwise tree (pairwise64 of each row); MulAddDst, MulDstAdd and Axpy round
# the product, then the sum.

def _halve_columns(blocks: np.ndarray, rows: int) -> np.ndarray:
    """Rows [0, h) += rows [h, 2h) (axis 1) until ``rows`` remain."""
    while blocks.shape[1] > rows:
        half = blocks.shape[1] // 2
        blocks = blocks[:, :half] + blocks[:, half:2 * half]
    return blocks


def _binary_fold(terms: np.ndarray, quotient: int, last: int, folded: int | None = None) -> np.ndarray:
    """The binary-add reduce of each row of ``terms`` (``VFDbetaDgammaBinaryFoldCommon``,
    ``VFComputeBinaryFoldSum1Sum2``, a recompute loop): element ``i`` of the first ``quotient`` plus element
    ``quotient + i`` for ``i < folded`` (default: all the rest), one register sum per 64, those sums halved in
    64-blocks down to one register, its first ``last`` lanes summed."""
    main = terms[:, :quotient].copy()
    rest = terms.shape[1] - quotient if folded is None else folded
    main[:, :rest] = main[:, :rest] + terms[:, quotient:quotient + rest]
    sums = pairwise64(main.reshape(-1, LANES)).reshape(terms.shape[0], quotient // LANES)
    return pairwise64(_halve_columns(sums, min(sums.shape[1], LANES))[:, :last])


def _arch35_row_sums(terms: np.ndarray, quotient: int, last: int) -> np.ndarray:
    """A reduce of each row's ``terms``: one register (``+ 0`` per lane, then its sum) up to 64 elements,
    else the binary fold."""
    if terms.shape[1] <= LANES:
        return pairwise64(terms + F32(0.0))
    return _binary_fold(terms, quotient, last)


def _cache_sum(cache: np.ndarray) -> np.ndarray:
    """``CustomReduceSum`` of 256-float caches: (x1 + x3) + (x2 + x4) over its four registers, then a register sum."""
    return pairwise64((cache[:, :64] + cache[:, 128:192]) + (cache[:, 64:128] + cache[:, 192:256]))


def _recompute_sums(terms: np.ndarray, td) -> np.ndarray:
    """Mode 300's channel sums: ``mode2MainLoopCnt`` loops of ``mode2OneLoopSize``, each with its fold loop
    added on, a binary fold per loop into a 256-entry cache, caches of caches every 256 and 65536 loops."""
    size, loops, folds = td["mode2OneLoopSize"], td["mode2MainLoopCnt"], td["mode2FoldLoopCnt"]
    base = loops * size
    levels = np.zeros((3, terms.shape[0], 256), F32)
    for k in range(loops):
        folded = size if k < folds - 1 else (td["mode2FoldTail"] if k == folds - 1 else 0)
        part = np.concatenate((terms[:, k * size:(k + 1) * size], terms[:, base + k * size:base + k * size + folded]),
                              axis=1)
        levels[0, :, k & 0xFF] = _binary_fold(part, size, min(size // LANES, LANES), folded)
        if (k + 1) & 0xFF == 0:
            levels[1, :, (k & 0xFF00) >> 8] = _cache_sum(levels[0])
        if (k + 1) & 0xFFFF == 0:
            levels[2, :, k >> 16] = _cache_sum(levels[1])
    return _cache_sum(levels[0 if loops < 256 else 1 if loops < 65536 else 2])


def _stage2_tree(rows: np.ndarray, td) -> np.ndarray:
    """Stage-2 mode 1 over ``reduceNCnt`` rows per column: in order from zero up to 2 rows, the 4- and
    8-row trees with zero rows past the end, else 8-row trees of the quotient rows with the rest folded on
    and those halved."""
    count = rows.shape[0]
    zero = np.zeros(rows.shape[1], F32)

    def row(i):
        return rows[i] if i < count else zero

    def eight(q, r):
        x1 = (row(q) + row(r)) + (row(q + 1) + row(r + 1))
        x1 = x1 + ((row(q + 2) + row(r + 2)) + (row(q + 3) + row(r + 3)))
        x3 = (row(q + 4) + row(r + 4)) + (row(q + 5) + row(r + 5))
        return x1 + (x3 + ((row(q + 6) + row(r + 6)) + (row(q + 7) + row(r + 7))))

    if count <= 2:
        acc = zero.copy()
        for i in range(count):
            acc = acc + rows[i]
        return acc
    if count <= 4:
        return (row(0) + row(2)) + (row(1) + row(3))
    if count <= 8:
        return ((row(0) + row(4)) + (row(1) + row(5))) + ((row(2) + row(6)) + (row(3) + row(7)))
    quotient = td["stage2BinaryAddQuotient"]
    paired = -(-(count - quotient) // 8)
    temp = []
    for grp in range(quotient // 8):
        if grp < paired:
            temp.append(eight(grp * 8, quotient + grp * 8))
        else:
            q = grp * 8
            x1 = (rows[q] + rows[q + 1]) + (rows[q + 2] + rows[q + 3])
            temp.append(x1 + ((rows[q + 4] + rows[q + 5]) + (rows[q + 6] + rows[q + 7])))
    return _halve_columns(np.stack(temp, axis=1), 1)[:, 0]


def _stage2_tiles(rows: np.ndarray, td) -> np.ndarray:
    """Stage-2 mode 2: ``nLoop`` tiles of ``nFactorStage2Mode2`` rows, the later tiles folded onto the first
    ``nMainFlodCount`` (and the ``nTail`` rows onto the next), each tile's rows halved to one, those sums
    combined through the cache levels (``UpdateCacheStage2Mode2``)."""
    tile, loops, main_folds, tail = (td["nFactorStage2Mode2"], td["nLoop"], td["nMainFlodCount"], td["nTail"])
    caches = {}
    for b in range(loops):
        block = rows[b * tile:(b + 1) * tile].copy()
        other = (b + loops) * tile
        if b < main_folds:
            block = block + rows[other:other + tile]
        elif b == main_folds and tail:
            block[:tail] = block[:tail] + rows[other:other + tail]
        acc = _halve_columns(block.T, 1)[:, 0]
        cache_id = bin(b ^ (b + 1)).count("1") - 1
        for j in range(cache_id):
            acc = acc + caches[j]
        caches[cache_id] = acc
    return caches[td["resultCacheId"]]


def simulate_arch35(plan: GroupNormBackwardPlan, dy3, x3, mean, rstd, gamma):
    """Execute an arch35 plan on (N*G, C_G, HxW) arrays and float32 task statistics and gamma (C,).

    Returns float32 ``(dx, grad_gamma, grad_beta)``: every product and sum rounded to float32 in the order of
    op_kernel/arch35; grad_gamma and grad_beta before their cast to mean's dtype."""
    td = plan.tiling_data
    n, g, c_g, hxw = plan.n, plan.g, plan.c_g, plan.hxw
    dy = dy3.astype(F32).reshape(n * plan.c, hxw)
    x = x3.astype(F32).reshape(n * plan.c, hxw)
    prod = x * dy
    if plan.mode == 100 and hxw == 1:               # VFMode0DbetaDsOneHw: no reduction
        db, ds = dy[:, 0].copy(), prod[:, 0].copy()
    elif plan.mode == 300:
        db, ds = _recompute_sums(dy, td), _recompute_sums(prod, td)
    else:
        q, last = td["binaryAddQuotient"], td["binaryAddLastNum"]
        db, ds = _arch35_row_sums(dy, q, last), _arch35_row_sums(prod, q, last)
    db, ds = db.reshape(n * g, c_g), ds.reshape(n * g, c_g)
    m, r = mean.reshape(-1, 1), rstd.reshape(-1, 1)
    gam = np.tile(gamma.reshape(g, c_g), (n, 1))
    if c_g == 1:
        sum1, sum2 = (ds * gam)[:, 0], (db * gam)[:, 0]
    else:
        q, last = td["binaryCGQuotient"], td["binaryCGLastNum"]
        sum1, sum2 = _arch35_row_sums(ds * gam, q, last), _arch35_row_sums(db * gam, q, last)
    s = F32(1.0) / F32(c_g * hxw)
    sum1, sum2 = sum1.reshape(-1, 1), sum2.reshape(-1, 1)
    c2 = (((sum2 * m + (F32(0.0) - sum1)) * r) * r) * r * s
    c3 = (F32(0.0) - c2) * m + (F32(0.0) - (sum2 * r) * s)
    gr = (gam * r).reshape(n * g, c_g, 1)
    dx = ((x3.astype(F32) * c2.reshape(-1, 1, 1)) + dy3.astype(F32) * gr) + c3.reshape(-1, 1, 1)
    dgamma = (ds + db * (F32(-1.0) * m)) * r                     # Axpy(ds, db, -mean), then Muls(rstd)
    per_n = [a.reshape(n, plan.c) for a in (dgamma, db)]
    if plan.mode == 400:
        rows = per_n
    elif n <= 1:
        return dx, F32(0.0) + per_n[0][0], F32(0.0) + per_n[1][0]
    else:
        rows = []
        for part in per_n:                                       # batches 2k and 2k+1 onto cleared row k
            paired = F32(0.0) + part[0::2]
            paired[:n // 2] = paired[:n // 2] + part[1::2]
            rows.append(paired)
    reduce = _stage2_tree if td["stage2Mode"] == 1 else _stage2_tiles
    return dx, reduce(rows[0], td), reduce(rows[1], td)


def simulate_groups(plan, dy3, x3, mean, rstd, gamma):
    """Execute a ``groups`` plan (``tiling.group_norm_backward_groups``) on (N*G, C_G, HxW) arrays, every row side
    by side: each row's ``dy`` and ``dy * (x - m)`` summed by 64 lanes a segment and folded, the segments in order;
    a task's ``A``, ``B`` over its channels in order; grad_gamma and grad_beta over the batch in order."""
    n, g, c_g, hxw = plan.n, plan.g, plan.c_g, plan.hxw
    args = plan.kernel_args()
    dy = dy3.astype(F32).reshape(n * g, c_g, hxw)
    x = x3.astype(F32).reshape(n * g, c_g, hxw)
    m = np.asarray(mean, F32).reshape(n * g)
    r = np.asarray(rstd, F32).reshape(n * g)
    sums = np.zeros((2, n * g, c_g), F32)
    for start in range(0, hxw, args.row_elems):
        cut = slice(start, min(start + args.row_elems, hxw))
        d = dy[:, :, cut].reshape(n * g * c_g, -1)
        products = d * (x[:, :, cut] - m[:, None, None]).reshape(n * g * c_g, -1)
        for which, values in enumerate((d, products)):
            lanes = np.zeros((n * g * c_g, LANES), F32)
            lanes_add(lanes, values)
            sums[which] = sums[which] + pairwise64(lanes).reshape(n * g, c_g)
    gam = np.asarray(gamma, F32).reshape(g, c_g)
    gam_t = np.tile(gam, (n, 1))  # (N*G, C_G): each task's channels' gamma
    a = np.zeros(n * g, F32)
    b = np.zeros(n * g, F32)
    for j in range(c_g):
        a = a + gam_t[:, j] * sums[0, :, j]
        b = b + gam_t[:, j] * sums[1, :, j]
    grad_beta = np.zeros((g, c_g), F32)
    grad_gamma = np.zeros((g, c_g), F32)
    for batch in range(n):
        tasks = slice(batch * g, (batch + 1) * g)
        grad_beta = grad_beta + sums[0, tasks]
        grad_gamma = grad_gamma + sums[1, tasks] * r[tasks, None]
    count = F32(c_g * hxw)
    e = (r * a) / count
    f = (((r * r) * r) * b) / count
    dx = dy * (gam_t * r[:, None])[:, :, None] - ((x - m[:, None, None]) * f[:, None, None] + e[:, None, None])
    return dx, grad_gamma.reshape(-1), grad_beta.reshape(-1)
