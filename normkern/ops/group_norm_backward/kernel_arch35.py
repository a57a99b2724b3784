"""GroupNormBackward's arch35 (Ascend950) plan executed: op_kernel/arch35 of hicann/ops-nn, lane by lane.

Per channel of a task (``T`` widened to float32): ``db = sum dy`` and ``ds = sum x * dy`` (the raw x, not
x_hat), each over HxW by the plan's binary add: up to 64 elements one vector register (``0 + v`` per lane,
then the register's Reduce<SUM>, modeled as the 64-lane pairwise tree), beyond that the first
``binaryAddQuotient`` elements with the rest added lane by lane, a register sum per 64, those halved in
64-blocks and the first ``binaryAddLastNum`` summed (mode 300: the same per loop of ``mode2OneLoopSize``,
the loop sums through 256-entry caches). Per task, with ``m, r`` its mean and rstd and ``M = C_G * HxW``::

    sum1 = reduce(ds * gamma)        sum2 = reduce(db * gamma)           (over C_G, binaryCG* the same way)
    C2 = (sum2 * m + (0 - sum1)) * r * r * r * (1 / M)                  (left to right, float32)
    C3 = (0 - C2) * m + (0 - sum2 * r * (1 / M))
    dx = (x * C2 + dy * (gamma * r)) + C3
    grad_gamma partial = (ds + db * (-m)) * r,   grad_beta partial = db

Every product and sum is rounded on its own (MulAddDst, MulDstAdd and Axpy as a product, then a sum). The
partials reach the outputs as the kernel sends them: N = 1 straight onto the zeroed outputs; else batches
2k and 2k+1 onto cleared workspace row k (mode 400: one row a batch), then stage 2 over the rows: the
binary-add tree of stage-2 mode 1 or the row tiles and caches of mode 2. Both adds onto a cleared row
commute, so the plan is deterministic. One thread runs every core's work in turn: the fast plan is the
host's; this one is for replaying the 950's bits.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ...kernels.dtypes import from_f32, to_f32
from ...kernels.lanes import fold

F32 = np.float32
LANES = 64
CACHE = 256

#: Positions of the plan's figures in the ``params`` array the kernel takes.
FIELDS = ("N", "C", "HXW", "G", "mode", "binaryAddQuotient", "binaryAddLastNum", "binaryCGQuotient",
          "binaryCGLastNum", "mode2OneLoopSize", "mode2MainLoopCnt", "mode2FoldLoopCnt", "mode2FoldTail",
          "stage2Mode", "reduceNCnt", "stage2BinaryAddQuotient", "nFactorStage2Mode2", "nLoop", "nMainFlodCount",
          "nTail", "resultCacheId")
(N, C, HXW, G, MODE, ADD_Q, ADD_LAST, CG_Q, CG_LAST, LOOP_SIZE, MAIN_LOOPS, FOLD_LOOPS, FOLD_TAIL, STAGE2_MODE,
 ROWS, TREE_Q, TILE, TILE_LOOPS, TILE_FOLDS, TILE_TAIL, RESULT_CACHE) = range(len(FIELDS))


def params(plan) -> np.ndarray:
    """The plan's figures the kernel reads, in ``FIELDS`` order."""
    td = plan.tiling_data
    return np.array([td[name] if name != "mode" else plan.mode for name in FIELDS], np.int64)


@njit(cache=True, error_model="numpy")
def _load_sum(values, start, count, lanes):
    """A register holding ``values[start:start + count]`` (``count <= 64``), zero beyond, summed (its
    Reduce<SUM>: the 64-lane pairwise fold, ``lanes.fold``)."""
    for i in range(LANES):
        lanes[i] = values[start + i] if i < count else F32(0.0)
    return fold(lanes)


@njit(cache=True, error_model="numpy")
def _fold(terms, base, quotient, folded, last, sums, lanes):
    """The binary add of ``terms[base:]``: lane ``i`` of the first ``quotient`` plus ``terms[base + quotient
    + i]`` while ``i < folded``, a register sum per 64 lanes, the sums halved in 64-blocks, the first
    ``last`` of them summed."""
    blocks = quotient // LANES
    for j in range(blocks):
        for k in range(LANES):
            i = j * LANES + k
            v = terms[base + i]
            if i < folded:
                v = v + terms[base + quotient + i]
            lanes[k] = v
        sums[j] = fold(lanes)
    width = blocks
    while width > LANES:
        width //= 2
        for j in range(width):
            sums[j] = sums[j] + sums[j + width]
    return _load_sum(sums, 0, last, lanes)


@njit(cache=True, error_model="numpy")
def _reduce(terms, count, quotient, last, sums, lanes):
    """A reduce of ``terms[:count]``: one register (each lane ``0 + v``) up to 64, else the binary add."""
    if count > LANES:
        return _fold(terms, 0, quotient, count - quotient, last, sums, lanes)
    for i in range(LANES):
        lanes[i] = F32(0.0) + terms[i] if i < count else F32(0.0)
    return fold(lanes)


@njit(cache=True, error_model="numpy")
def _cache_sum(cache, level, lanes):
    """``CustomReduceSum`` of a 256-entry cache level: (x1 + x3) + (x2 + x4) of its registers, summed."""
    for k in range(LANES):
        lanes[k] = (cache[level, k] + cache[level, 2 * LANES + k]) + (cache[level, LANES + k] +
                                                                      cache[level, 3 * LANES + k])
    return fold(lanes)


@njit(cache=True, error_model="numpy")
def _recompute(terms, p, cache, sums, lanes):
    """Mode 300's sum of a channel: the main loops, each with its fold loop lane-added, through the caches."""
    size, loops, folds = p[LOOP_SIZE], p[MAIN_LOOPS], p[FOLD_LOOPS]
    cache[:] = 0.0
    scratch = np.empty(2 * size, F32)
    for k in range(loops):
        folded = size if k < folds - 1 else (p[FOLD_TAIL] if k == folds - 1 else 0)
        for i in range(size):
            scratch[i] = terms[k * size + i]
        for i in range(folded):
            scratch[size + i] = terms[loops * size + k * size + i]
        cache[0, k & 0xFF] = _fold(scratch, 0, size, folded, min(size // LANES, LANES), sums, lanes)
        if (k + 1) & 0xFF == 0:
            cache[1, (k & 0xFF00) >> 8] = _cache_sum(cache, 0, lanes)
        if (k + 1) & 0xFFFF == 0:
            cache[2, k >> 16] = _cache_sum(cache, 1, lanes)
    return _cache_sum(cache, 0 if loops < CACHE else 1 if loops < CACHE * CACHE else 2, lanes)


@njit(cache=True, error_model="numpy")
def _channel_sums(dy, x, row, p, t_dy, t_xdy, cache, sums, lanes):
    """(db, ds) of the channel at flat offset ``row``."""
    hxw = p[HXW]
    for i in range(hxw):
        d = to_f32(dy[row + i])
        t_dy[i] = d
        t_xdy[i] = to_f32(x[row + i]) * d
    if p[MODE] == 100 and hxw == 1:
        return t_dy[0], t_xdy[0]
    if p[MODE] == 300:
        return _recompute(t_dy, p, cache, sums, lanes), _recompute(t_xdy, p, cache, sums, lanes)
    return (_reduce(t_dy, hxw, p[ADD_Q], p[ADD_LAST], sums, lanes),
            _reduce(t_xdy, hxw, p[ADD_Q], p[ADD_LAST], sums, lanes))


@njit(cache=True, error_model="numpy")
def stage1(dy, x, dx, mean, rstd, gamma, p, write_dx, partials):
    """Every task's dx and its (grad_gamma, grad_beta) partials, ``partials[t] = (C_G,) x 2``."""
    c_g, hxw, g = p[C] // p[G], p[HXW], p[G]
    dy, x = dy.reshape(-1), x.reshape(-1)
    dx = dx.reshape(-1)
    t_dy, t_xdy = np.empty(hxw, F32), np.empty(hxw, F32)
    sums = np.empty(max(p[ADD_Q], p[CG_Q], p[LOOP_SIZE]) // LANES + 1, F32)
    lanes = np.empty(LANES, F32)
    cache = np.zeros((3, CACHE), F32)
    db, ds = np.empty(c_g, F32), np.empty(c_g, F32)
    t1, t2 = np.empty(c_g, F32), np.empty(c_g, F32)
    scale = F32(1.0) / F32(c_g * hxw)
    for t in range(partials.shape[0]):
        m, r = mean[t], rstd[t]
        gam = gamma[(t % g) * c_g:(t % g + 1) * c_g]
        for j in range(c_g):
            db[j], ds[j] = _channel_sums(dy, x, (t * c_g + j) * hxw, p, t_dy, t_xdy, cache, sums, lanes)
        for j in range(c_g):
            t1[j] = ds[j] * gam[j]
            t2[j] = db[j] * gam[j]
        if c_g == 1:
            sum1, sum2 = t1[0], t2[0]
        else:
            sum1 = _reduce(t1, c_g, p[CG_Q], p[CG_LAST], sums, lanes)
            sum2 = _reduce(t2, c_g, p[CG_Q], p[CG_LAST], sums, lanes)
        c2 = (sum2 * m + (F32(0.0) - sum1)) * r
        c2 = (c2 * r) * r * scale
        c3 = (F32(0.0) - c2) * m + (F32(0.0) - (sum2 * r) * scale)
        neg_m = -m
        for j in range(c_g):
            partials[t, 0, j] = (ds[j] + db[j] * neg_m) * r
            partials[t, 1, j] = db[j]
            if write_dx:
                gr = gam[j] * r
                row = (t * c_g + j) * hxw
                for i in range(hxw):
                    v = to_f32(x[row + i]) * c2 + to_f32(dy[row + i]) * gr
                    dx[row + i] = from_f32(v + c3, dx[row + i])


@njit(cache=True, error_model="numpy")
def _tree(col, count, quotient, temp):
    """Stage-2 mode 1 down one column of ``count`` rows (``col`` holds them, then at least 8 zeros: the
    kernel's zero row stands in for every row past the end)."""
    if count <= 2:
        acc = F32(0.0)
        for i in range(count):
            acc = acc + col[i]
        return acc
    if count <= 4:
        return (col[0] + col[2]) + (col[1] + col[3])
    if count <= 8:
        return ((col[0] + col[4]) + (col[1] + col[5])) + ((col[2] + col[6]) + (col[3] + col[7]))
    paired = (count - quotient + 7) // 8
    for grp in range(quotient // 8):
        q = grp * 8
        if grp < paired:
            r = quotient + q
            a = (col[q] + col[r]) + (col[q + 1] + col[r + 1])
            a = a + ((col[q + 2] + col[r + 2]) + (col[q + 3] + col[r + 3]))
            b = (col[q + 4] + col[r + 4]) + (col[q + 5] + col[r + 5])
            b = b + ((col[q + 6] + col[r + 6]) + (col[q + 7] + col[r + 7]))
        else:
            a = (col[q] + col[q + 1]) + (col[q + 2] + col[q + 3])
            b = (col[q + 4] + col[q + 5]) + (col[q + 6] + col[q + 7])
        temp[grp] = a + b
    width = quotient // 8
    while width > 1:
        width //= 2
        for j in range(width):
            temp[j] = temp[j] + temp[j + width]
    return temp[0]


@njit(cache=True, error_model="numpy")
def _tiles(col, p, block, caches):
    """Stage-2 mode 2 down one column: the row tiles folded, each halved, the tile sums through the caches."""
    tile, loops, folds, tail = p[TILE], p[TILE_LOOPS], p[TILE_FOLDS], p[TILE_TAIL]
    for b in range(loops):
        other = (b + loops) * tile
        for k in range(tile):
            v = col[b * tile + k]
            if b < folds or (b == folds and k < tail):
                v = v + col[other + k]
            block[k] = v
        width = tile
        while width > 1:
            width //= 2
            for k in range(width):
                block[k] = block[k] + block[k + width]
        acc = block[0]
        ident = 0
        bits = b ^ (b + 1)
        while bits > 1:
            bits >>= 1
            ident += 1
        for j in range(ident):
            acc = acc + caches[j]
        caches[ident] = acc
    return caches[p[RESULT_CACHE]]


@njit(cache=True, error_model="numpy")
def stage2(partials, p, ws, dgamma, dbeta):
    """The partials onto grad_gamma / grad_beta (float32 (C,)) through the workspace ``ws`` (2 x W floats)."""
    n, c, g = p[N], p[C], p[G]
    c_g = c // g
    outs = (dgamma, dbeta)
    if p[MODE] != 400 and n <= 1:
        for which in range(2):
            for t in range(g):
                for j in range(c_g):
                    outs[which][t * c_g + j] = F32(0.0) + partials[t, which, j]
        return
    rows = p[ROWS]
    width = rows * c
    ws[:2 * width] = 0.0
    own_rows = p[MODE] == 400  # stage 0 and stage 1 store a batch's row; elsewhere two tasks add onto it
    for t in range(n * g):
        b, grp = t // g, t % g
        row = b if own_rows else b // 2
        for which in range(2):
            base = which * width + row * c + grp * c_g
            for j in range(c_g):
                ws[base + j] = partials[t, which, j] if own_rows else ws[base + j] + partials[t, which, j]
    col = np.zeros(rows + 8, F32)
    temp = np.empty(max(p[TREE_Q] // 8, 1), F32)
    block = np.empty(max(p[TILE], 1), F32)
    caches = np.empty(64, F32)
    for which in range(2):
        for k in range(c):
            for i in range(rows):
                col[i] = ws[which * width + i * c + k]
            if p[STAGE2_MODE] == 1:
                outs[which][k] = _tree(col, rows, p[TREE_Q], temp)
            else:
                outs[which][k] = _tiles(col, p, block, caches)
