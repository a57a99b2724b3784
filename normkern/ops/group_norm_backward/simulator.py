"""A NumPy interpreter of GroupNormBackward plans: slow, literal, equal to the kernels bit for bit.

Stage 1 walks every task (n, g) and channel with the fold-halves ReduceSum on materialized buffers
(mode 3: per chunk, with Kahan compensation) and the A2 dx formula of the plan's mode. Stage 2 goes
through a NaN-filled workspace exactly as the plan says: batch pairs onto rows, rows folded in UB
batches with the halving tree, two fp32 halves onto zeroed outputs, or every task's partials in the
given arrival order.
"""

from __future__ import annotations

import numpy as np

from tiling import GroupNormBackwardPlan, GroupNormBackwardStrategy

from ..._simulate import F32, fold_halves

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
    atomic plan."""
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
