"""GroupNormBackward plans: the A2/A3 GroupNormGrad host tiling, reproduced exactly.

Source: ``norm/group_norm_grad/op_host/group_norm_grad_tiling.cpp`` in hicann/ops-nn
(``source="cann-ops-nn"`` on Ascend910B* and Ascend910_93; ``host`` gets a ``"modeled"`` plan from
the same code with the CPU's figures). All host arithmetic is the code's: uint32 helpers
``Ceil(a, b) = ((a - 1) / b + 1) * b``, ``DivCeil``, ``Floor``, wrapping as C++ does.

A task is one ``(n, g)`` pair (``NxG`` of them), ``C_G = C / G`` channels of ``HxW`` elements.

- Core split: ``taskNumPerCore = Ceil(NxG, cores) / cores``, ``coreNumUsed = (NxG - 1) /
  taskNumPerCore + 1`` (block_dim), the first ``tailCore = NxG % coreNumUsed`` cores one task more
  (``Split.even(NxG, coreNumUsed)``; the code's "tailCore" counts the *bigger* cores).
- ``dtypeBytes`` 4 (fp32) or 6 (fp16/bf16: the input and its float32 copy), ``elePerBlock`` 8 or 16;
  ``reserveSpace = 1024 + Ceil(C_G, elePerBlock) * dtypeBytes * 3``.
- Stage-1 UB mode: 5 when ``HxW == 1``; 0 (a whole group in UB) when ``mode0UbCapGNum > 0``; 1 (one
  channel) or 2 (several) from ``mode1UbCapCNum``; else 3 (HxW in chunks of ``mode2_ub_capacity_ele``,
  the chunk sums combined with Kahan compensation).
- Kernel key ``dtypeKey + 10 * (N > 2)`` (fp32 0, fp16 1, bf16 2): the code picks its "deterministic"
  workspace path whenever N > 2 and never reads the determinism switch.
- N > 2 (``cann`` strategy): each task atomically adds its C_G partials into workspace row
  ``n // 2`` (two addends onto zero: batches 2k and 2k+1); stage 2 folds the ``ceil(N/2)`` rows per
  channel chunk ``castEleNum`` in UB batches of ``coreBatchParts`` rows (a halving tree inside a
  batch, batches added in order). fp32 splits the rows in two halves on ``2 * stage2CoreUsed``
  cores whose results are atomically added onto the zeroed outputs (two addends again); fp16/bf16
  uses ``stage2CoreUsed`` cores over all rows and casts. Workspace ``16 MiB + 2 * ceil(N/2) * C * 4``.
- N <= 2: fp32 adds the task partials straight onto the zeroed outputs (workspace 16 MiB); fp16/bf16
  goes through a ``(2, C)`` float32 workspace (``16 MiB + 2 * C * 4``) and a cast.
- ``atomic`` (ours, only when asked): the code's N <= 2 path for any N, every task's partials added
  onto the outputs in an arrival order: non-deterministic once N > 2, as the CANN docs warn.

Deviations, each where the A2 code cannot be followed: on a one-core SoC an fp32 N > 2 plan would
need ``castEleNum = Ceil(DivCeil(C, 0), 64) = 0`` and is refused (never on A2: ``coreNumUsed >= 3``
whenever N > 2). Atlas training (Ascend910) and Ascend950 get ``"modeled"`` plans from the same code with
their own figures (cores, UB, system workspace): on Atlas training the op_api composes closed TBE ops
(BatchNorm training grads on ``(1, N*G, -1)`` and ReduceSums) instead of GroupNormGrad; on Ascend950 that
model is there only when asked for (``strategy="cann"``), because the 950's public arch35 tiling (binary-add
sums, its small-NG full-load and recompute templates) is a different code base, which ``arch35``
(``tiling.group_norm_backward_arch35``) reproduces and the 950 plans by default.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from . import group_norm_backward_arch35 as arch35
from .picture import Share
from .plan import Plan, Rejection, Strategy, StrategyRegistry, TilingError, dtype_name, unit
from .reduction import LANES, Combine, LaneOrder, ReduceLevel, ReductionTree
from .soc import ASCEND950, DTYPE_BYTES, HOST, SocSpec, get_soc
from .split import Split
from .support import require, support
from .tiling_data import TilingData, c_struct, tiling_data_class
from .workspace import Region, WorkspaceLayout

OP = "group_norm_backward"
U32 = 0xFFFFFFFF
MAX_C = 240000
UPPER_CARRYING_LIMIT = 8000
RESERVE_SPACE = 1024
UB_COPIES = 3
STEP_SIZE = 64
DTYPES = ("float32", "float16", "bfloat16")
DTYPE_KEY = {"float32": 0, "float16": 1, "bfloat16": 2}
MODE_0, MODE_1, MODE_2, MODE_3, MODE_5 = 0, 1, 2, 3, 5
_A2_FIELDS = (
    "Tiling_key", "N", "C", "HXW", "G", "NXG", "C_G", "task_num_per_core", "task_num_per_tail_core", "tail_core",
    "mode1_ub_cap_C_num", "mode1_ub_iter_C_num", "mode1_ub_tail_C_num", "mode2_ub_capacity_ele",
    "mode2_ub_iteration_num", "mode2_ub_tail_num", "workSpaceSize", "stage2CoreUsed", "castEleNum", "tailCastNum",
    "coreBatchParts", "coreBatchPartsTailRepeat", "repeatTime4Stage2", "dx_is_require", "dgamma_is_require",
    "dbeta_is_require")
#: ``GroupNormGradTilingData``: every member uint64_t in the header (older copies declare uint32_t and
#: int32_t; the host arithmetic above is the uint32 code's, whose values the wider fields hold unchanged).
_A2_MEMBERS = c_struct("; ".join(f"uint64_t {name}" for name in _A2_FIELDS))
#: The fields ``TilingCalculationParameters`` (same header) starts at other than 0: ``uint32_t tilingKey = -1``
#: and the three ``bool ...IsRequire = true``. ``CalStage1TilingInfo`` picks a mode on every path and ``Init``
#: reads the three attributes on every path, so no plan keeps them.
GroupNormGradTilingData = tiling_data_class(
    "GroupNormGradTilingData", "norm/group_norm_grad/op_host/group_norm_grad_tiling.h", _A2_MEMBERS,
    host_defaults={"Tiling_key": U32, "dx_is_require": 1, "dgamma_is_require": 1, "dbeta_is_require": 1})


class GroupNormBackwardStrategy(enum.Enum):
    EMPTY = "empty"
    CANN = "cann"
    ATOMIC = "atomic"
    ARCH35 = "arch35"
    GROUPS = "groups"


S = GroupNormBackwardStrategy


class GroupNormBackwardArgs(NamedTuple):
    """What the kernels receive: ints and int64 arrays only."""

    n: int
    c: int
    hxw: int
    g: int
    c_g: int
    mode: int
    chunk: int               # mode 3: elements of a HxW chunk (mode2_ub_capacity_ele)
    align: int               # elements of a 32-byte block of the input (mode 0's aligned channels)
    core_start: np.ndarray   # stage 1: each core's first task and task count
    core_count: np.ndarray
    pair_rows: int           # N > 2 workspace path: ceil(N / 2) rows of C partials (0 otherwise)
    row_halves: int          # 2 when fp32 splits the rows over two halves of stage-2 cores, else 1
    first_half_rows: int     # rows of the first half (ceil(ceil(N/2)/2)), or all rows
    cast_elems: int          # stage 2: channels per stage-2 core (castEleNum)
    stage2_cores: int
    batch_rows: int          # stage 2: rows folded per UB batch (coreBatchParts)
    dgamma_offset: int       # float32 offsets of the workspace arrays (0 when there is none)
    dbeta_offset: int
    ws_elems: int            # workSpaceSize: elements of each workspace array


def _u32(value: int) -> int:
    return value & U32


def ceil_u32(a: int, b: int) -> int:
    """The code's ``Ceil`` in uint32 (0 when b is 0, as its error branch returns)."""
    a, b = _u32(a), _u32(b)
    return 0 if b == 0 else _u32((_u32(a - 1) // b + 1) * b)


def div_ceil_u32(a: int, b: int) -> int:
    a, b = _u32(a), _u32(b)
    return 0 if b == 0 else _u32(_u32(a - 1) // b + 1)


def floor_u32(a: int, b: int) -> int:
    a, b = _u32(a), _u32(b)
    return 0 if b == 0 else a // b * b


@dataclass(frozen=True)
class GroupNormBackwardProblem:
    n: int
    c: int
    hxw: int
    g: int
    dtype: str
    out_dtype: str
    mask: tuple[bool, bool, bool]
    soc: SocSpec

    @property
    def c_g(self) -> int:
        return self.c // self.g

    @property
    def dtype_bytes(self) -> int:
        """dtypeBytes: a half element is held beside its float32 copy"""
        float32 = DTYPE_BYTES["float32"]
        return float32 if self.dtype == "float32" else DTYPE_BYTES[self.dtype] + float32

    @property
    def ele_per_block(self) -> int:
        return self.soc.block_elems(self.dtype)


def _stage1(p: GroupNormBackwardProblem) -> tuple[dict[str, int], int, int]:
    """PlanStepCoreUsage and CalStage1TilingInfo: the struct's words so far, coreNumUsed and
    mode0UbCapGNum (two values the host code keeps outside the struct)."""
    cores, ub = p.soc.vector_cores, p.soc.ub_bytes
    nxg = p.n * p.g
    epb, dbytes = p.ele_per_block, p.dtype_bytes
    per_group_block = ceil_u32(p.c_g, epb)
    if per_group_block > UPPER_CARRYING_LIMIT:
        raise TilingError(f"[{OP}] channelPerGroup {p.c_g} is over the operator's carrying capacity "
                          f"{UPPER_CARRYING_LIMIT}")
    reserve = _u32(RESERVE_SPACE + per_group_block * dbytes * UB_COPIES)
    tpc = ceil_u32(nxg, cores) // cores
    used = _u32((nxg - 1) // tpc + 1)
    tptc, tail_core = tpc, used
    if nxg % used:
        tptc, tail_core = tpc - 1, nxg % used
    unaligned = 0 if p.hxw % 8 == 0 or p.c_g == 1 else _u32(2 * ceil_u32(p.hxw, epb) * 4)
    mode0 = 0 if ub < reserve + unaligned else \
        (ub - reserve - unaligned) // _u32(ceil_u32(p.c_g * p.hxw, epb) * dbytes * UB_COPIES)
    mode1 = (ub - reserve) // _u32(ceil_u32(p.hxw, epb) * dbytes * UB_COPIES)
    td = GroupNormGradTilingData.initial_words()
    td.update(N=p.n, C=p.c, HXW=p.hxw, G=p.g, NXG=nxg, C_G=p.c_g, task_num_per_core=tpc,
              task_num_per_tail_core=tptc, tail_core=tail_core, mode1_ub_cap_C_num=_u32(mode1))
    if mode1 > 0:
        iters = ceil_u32(p.c_g, mode1) // _u32(mode1)
        td["mode1_ub_iter_C_num"] = iters
        td["mode1_ub_tail_C_num"] = _u32(mode1) if iters * mode1 == p.c_g else p.c_g - (iters - 1) * mode1
    if p.hxw == 1:
        mode = MODE_5
    elif mode0 > 0:
        mode = MODE_0
    elif mode1 == 1:
        mode = MODE_1
    elif mode1 > 1:
        mode = MODE_2
    else:
        mode = MODE_3
        cap = floor_u32((ub - reserve) // (dbytes * UB_COPIES), epb * 8)
        if cap == 0:
            raise TilingError(f"[{OP}] mode2_ub_capacity_ele is 0: a {ub}-byte UB cannot hold a HxW chunk")
        iters = ceil_u32(p.hxw, cap) // cap
        td.update(mode2_ub_capacity_ele=cap, mode2_ub_iteration_num=iters,
                  mode2_ub_tail_num=cap if p.hxw - iters * cap == 0 else p.hxw - (iters - 1) * cap)
    td["Tiling_key"] = mode
    return td, used, _u32(mode0)


def _stage2(p: GroupNormBackwardProblem, td: dict, used: int, workspace_path: bool) -> int:
    """CalStage2TilingInfo; returns the user workspace bytes."""
    available = (p.soc.ub_bytes - RESERVE_SPACE) // 2
    fp32_out = p.out_dtype == "float32"
    if workspace_path:
        td["workSpaceSize"] = div_ceil_u32(p.n, 2) * p.c
        user = 2 * td["workSpaceSize"] * 4
        if fp32_out:
            if used // 2 == 0:
                raise TilingError(f"[{OP}] coreNumUsed {used}: castEleNum = Ceil(DivCeil(C, coreNumUsed / 2), 64) "
                                  "is 0, the fp32 stage 2 has no second half of cores")
            cast = ceil_u32(div_ceil_u32(p.c, used // 2), STEP_SIZE)
            available = available - cast * 4 if available > cast * 4 else 0
            batches = div_ceil_u32(div_ceil_u32(p.n, 2), 2)
        else:
            cast = ceil_u32(div_ceil_u32(p.c, used), STEP_SIZE)
            available = _u32(available - cast * (4 + 2))
            batches = div_ceil_u32(p.n, 2)
        stage2 = div_ceil_u32(p.c, cast)
        td.update(castEleNum=cast, stage2CoreUsed=stage2, tailCastNum=p.c if stage2 == 1 else p.c - (stage2 - 1) * cast)
        parts = min(available // (cast * 4), batches)
        if parts == 0:
            raise TilingError(f"[{OP}] coreBatchParts is 0: a {p.soc.ub_bytes}-byte UB cannot hold one row of "
                              f"{cast} partials")
        td.update(coreBatchParts=parts, coreBatchPartsTailRepeat=batches % parts or parts,
                  repeatTime4Stage2=div_ceil_u32(batches, parts))
        return user
    if fp32_out:
        return 0
    cast = ceil_u32(div_ceil_u32(p.c, used), STEP_SIZE)
    stage2 = div_ceil_u32(p.c, cast)
    td.update(castEleNum=cast, workSpaceSize=p.c, stage2CoreUsed=stage2,
              tailCastNum=p.c if stage2 == 1 else p.c - (stage2 - 1) * cast)
    return 2 * p.c * 4


@dataclass(frozen=True, kw_only=True)
class GroupNormBackwardDims(Plan):
    """The fields of every GroupNormBackward plan: the problem's dims and dtypes."""

    strategy: GroupNormBackwardStrategy
    n: int = unit("", "N")
    c: int = unit("channels", "C")
    hxw: int = unit("elements", "HxW, elements of a channel")
    g: int = unit("groups", "group")
    dtype: str = unit("", "dtype of grad_out / input")
    out_dtype: str = unit("", "dtype of mean, rstd, gamma and grad_gamma / grad_beta")

    @property
    def c_g(self) -> int:
        """C / group, channels of a group [channels]"""
        return self.c // self.g if self.g else 0


@dataclass(frozen=True, kw_only=True)
class GroupNormBackwardPlan(GroupNormBackwardDims):
    op = OP
    explain_properties = ("mode_text", "stages")
    explain_notes = (
        "per task (n, g), per channel: sum dy and sum x_hat * dy over HxW; A2 and host plans: each one ReduceSum "
        "in the A2 fold-halves order (mode 3: per HxW chunk, the chunk sums combined with Kahan compensation); "
        "arch35: the binary add its TilingData's binaryAdd* fields describe",
        "dx per task from the task's own sums, in the kernel's formula for the mode",
    )

    mode: int = unit("", "stage-1 UB mode (A2: 0 group in UB, 1 one channel, 2 channels, 3 HxW chunks, 5 HxW == 1; "
                         "arch35: 100 group full load, 200 channel full load, 300 recompute, 400 small N x G, "
                         "500 empty)")
    mode0_groups: int = unit("groups", "mode0UbCapGNum: whole groups the UB holds (mode 0 when > 0)")

    @property
    def mode_text(self) -> str:
        """what the stage-1 mode keeps in UB"""
        if self.strategy is S.ARCH35:
            return arch35.MODE_NAMES.get(self.mode, "-")
        return {MODE_0: "a whole group", MODE_1: "one channel", MODE_2: "several channels",
                MODE_3: "a HxW chunk", MODE_5: "HxW == 1: no reduction per channel"}.get(self.mode, "-")

    @property
    def stages(self) -> str:
        """the arch35 kernel's stages and the cores each takes"""
        if self.strategy is not S.ARCH35 or self.tiling_data is None:
            return "-"
        td = self.tiling_data
        if self.mode == arch35.EMPTY_KEY:
            return (f"empty input: grad_gamma and grad_beta zeroed, {td['cols']} columns on {td['usedCoreNumDG']} "
                    f"core(s) of {self.block_dim} launched")
        parts = []
        if self.mode == arch35.MODE_3:
            parts.append(f"stage 0: N*C = {self.n * self.c} channel sums on {td['stage0CoreUsed']} cores "
                         f"({td['stage0TaskNumPerCore']} a core)")
        parts.append(f"clear: {td['workSpaceSize']} x 2 workspace floats in {td['clrBlockNum']} blocks of "
                     f"{td['clrBlockSize']}")
        parts.append(f"stage 1 ({self.mode_text}): N*G = {self.n * self.g} tasks on {td['stage1CoreUsed']} cores "
                     f"({td['taskNumPerCore']} a core)")
        if td["stage2CoreUsed"]:
            how = (f"binary-add tree over {td['reduceNCnt']} rows" if td["stage2Mode"] == arch35.STAGE2_MODE_1 else
                   f"row tiles of {td['nFactorStage2Mode2']} with {td['cacheBufferCount']} cache levels")
            parts.append(f"stage 2 (mode {td['stage2Mode']}): C = {self.c} channels on {td['stage2CoreUsed']} cores, "
                         + how)
        else:
            parts.append("no stage 2 (N = 1: the task sums are the outputs)")
        return "; ".join(parts)

    @property
    def pair_rows(self) -> int:
        """rows of the N > 2 workspace path (batches 2k and 2k+1 share a row)"""
        return (self.n + 1) // 2 if self.strategy is S.CANN and self.n > 2 else 0

    def check(self) -> None:
        if self.strategy is S.EMPTY:
            return
        if self.strategy is S.ARCH35:
            self._check_arch35()
            return
        if type(self.tiling_data) is not GroupNormGradTilingData:
            raise ValueError("tiling_data must be a GroupNormGradTilingData")
        if self.core_split.total != self.n * self.g:
            raise ValueError(f"core split covers {self.core_split.total} tasks, expected N*G = {self.n * self.g}")
        td = self.tiling_data
        if self.mode == MODE_3 and (td["mode2_ub_iteration_num"] - 1) * td["mode2_ub_capacity_ele"] + \
                td["mode2_ub_tail_num"] != self.hxw:
            raise ValueError("the HxW chunks do not cover HxW exactly")
        if td["stage2CoreUsed"] and ((td["stage2CoreUsed"] - 1) * td["castEleNum"] + td["tailCastNum"] != self.c):
            raise ValueError("the stage-2 channel chunks do not cover C exactly")
        if self.pair_rows:
            if self.workspace.region("partials").shape != (2, self.pair_rows, self.c):
                raise ValueError(f"the workspace must hold (2, {self.pair_rows}, {self.c}) partial rows")
            halves = 2 if self.out_dtype == "float32" else 1
            if halves * td["stage2CoreUsed"] > self.block_dim:
                raise ValueError("stage 2 needs more cores than the plan launches")

    def _check_arch35(self) -> None:
        if self.tiling_data is None:
            return
        if type(self.tiling_data) is not self.tiling_data_class():
            raise ValueError(f"tiling_data must be a {self.tiling_data_class().__name__}")
        td = self.tiling_data
        if self.mode == arch35.EMPTY_KEY:
            return
        if self.core_split.total != self.n * self.g:
            raise ValueError(f"core split covers {self.core_split.total} tasks, expected N*G = {self.n * self.g}")
        if td["clrBlockSize"] * (td["clrBlockNum"] - 1) + td["clrTailBlockSize"] != td["workSpaceSize"]:
            raise ValueError("the clearing blocks do not cover the workspace exactly")
        if td["stage2CoreUsed"] and td["stage2Mode"] == arch35.STAGE2_MODE_1 and \
                td["cBlockFactor"] * (td["stage2CoreUsed"] - 1) + td["cTailBlockFactor"] != self.c:
            raise ValueError("the stage-2 channel blocks do not cover C exactly")

    def index_axes(self) -> tuple[tuple[str, int], tuple[str, int]]:
        return ("tasks (n, g)", self.n * self.g), ("elements of a task", self.c_g * self.hxw)

    def shares(self) -> tuple[Share, ...]:
        """A core's tasks, every element of each; its stage-1 UB blocks by mode: a whole group (A2 0, arch35
        100), channels (A2 1, 2: ``mode1_ub_cap_C_num`` at a time; arch35 200, 400: ``mode1UbCapCNum``) or HxW
        chunks of each channel (A2 3, arch35 300)."""
        if self.strategy is S.EMPTY or self.mode == arch35.EMPTY_KEY:
            return ()
        td, width = self.tiling_data, self.c_g * self.hxw
        if self.strategy is S.ARCH35:
            channels = td["mode1UbCapCNum"] if self.mode in (arch35.MODE_1, arch35.MODE_3) else 0
            chunk = td["mode2UbCapEle"] if self.mode == arch35.MODE_2 else 0
        else:
            channels = td["mode1_ub_cap_C_num"] if self.mode in (MODE_1, MODE_2) else 0
            chunk = td["mode2_ub_capacity_ele"] if self.mode == MODE_3 else 0
        if channels:
            edges = tuple(range(channels * self.hxw, width, channels * self.hxw))
        elif chunk:
            edges = tuple(sorted({c * self.hxw + k for c in range(self.c_g) for k in range(0, self.hxw, chunk)} - {0}))
        else:
            edges = ()
        return tuple(Share(core, 0, (start, start + count), (0, width), edges)
                     for core, (start, count) in enumerate(self.core_split.ranges()) if count)

    def tiling_data_class(self) -> type[TilingData]:
        if self.strategy is S.ARCH35:
            return arch35.GroupNormGradEmptyTilingData if self.mode == arch35.EMPTY_KEY else \
                arch35.GroupNormGradRegBaseTilingData
        return GroupNormGradTilingData

    def summary_ub(self) -> str:
        return f"mode{self.mode} {self.dtype}" if self.strategy is not S.EMPTY else "-"

    def kernel_args(self) -> GroupNormBackwardArgs:
        if self.strategy is S.ARCH35:
            raise TilingError(f"[{OP}] the arch35 plan's kernel reads its TilingData fields "
                              "(normkern.ops.group_norm_backward.kernel_arch35.params), not the A2 kernel arguments")
        td = self.tiling_data
        ranges = self.core_split.ranges()
        rows = self.pair_rows
        fp32_halves = rows and self.out_dtype == "float32"
        offsets = [0, td["workSpaceSize"]]  # the dbeta array starts workSpaceSize floats after the dgamma array
        return GroupNormBackwardArgs(
            n=self.n, c=self.c, hxw=self.hxw, g=self.g, c_g=self.c_g, mode=self.mode,
            chunk=td["mode2_ub_capacity_ele"], align=self.soc.block_elems(self.dtype),
            core_start=np.array([s for s, _ in ranges], np.int64),
            core_count=np.array([k for _, k in ranges], np.int64),
            pair_rows=rows, row_halves=2 if fp32_halves else 1,
            first_half_rows=(rows + 1) // 2 if fp32_halves else rows,
            cast_elems=td["castEleNum"], stage2_cores=td["stage2CoreUsed"], batch_rows=td["coreBatchParts"],
            dgamma_offset=offsets[0], dbeta_offset=offsets[1], ws_elems=td["workSpaceSize"])


def _build(p: GroupNormBackwardProblem, strategy: S, rejected) -> GroupNormBackwardPlan:
    soc = p.soc
    cann = support(OP, soc).tiling == "cann-ops-nn" and soc.arch != ASCEND950  # the 950's exact code is arch35
    exact = cann and strategy is not S.ATOMIC  # CANN never picks atomic for N > 2
    common = dict(soc=soc, strategy=strategy, source="cann-ops-nn" if exact else "modeled", rejected=rejected,
                  n=p.n, c=p.c, hxw=p.hxw, g=p.g, dtype=p.dtype, out_dtype=p.out_dtype)
    if strategy is S.EMPTY:
        return GroupNormBackwardPlan(**common, tiling_key=None, block_dim=0, core_split=Split.even(0, 1),
                                     tree=ReductionTree(()), workspace=WorkspaceLayout(0, 0), tiling_data=None,
                                     mode=-1, mode0_groups=0)
    td, used, mode0_groups = _stage1(p)
    workspace_path = strategy is S.CANN and p.n > 2
    user = _stage2(p, td, used, workspace_path)
    td.update(dx_is_require=int(p.mask[0]), dgamma_is_require=int(p.mask[1]), dbeta_is_require=int(p.mask[2]))
    key = DTYPE_KEY[p.dtype] + 10 * int(workspace_path)
    lanes = ReduceLevel("lanes", Combine.PAIRWISE, LANES, "a channel's HxW (or chunk): fold halves, then pairwise")
    levels = [lanes]
    if td["Tiling_key"] == MODE_3:
        levels.append(ReduceLevel("chunks", Combine.SEQUENTIAL, td["mode2_ub_iteration_num"],
                                  "HxW chunk sums combined with Kahan compensation, in order"))
    if workspace_path:
        rows = (p.n + 1) // 2
        levels.append(ReduceLevel("batch_pairs", Combine.ATOMIC, 2, "tasks (2k, g) and (2k+1, g) onto row k"))
        levels.append(ReduceLevel("rows", Combine.SEQUENTIAL, rows, f"workspace rows in UB batches of "
                                  f"{td['coreBatchParts']} (halving tree inside), batches in order"))
        if p.out_dtype == "float32":
            levels.append(ReduceLevel("halves", Combine.ATOMIC, 2, "the two row halves onto the zeroed output"))
        shape = (2, rows, p.c)  # dgamma rows, then dbeta rows at workSpaceSize floats (the kernel's two buffers)
    else:
        detail = "every task's partials onto the zeroed output, in arrival order" if strategy is S.ATOMIC else \
            "the N <= 2 tasks' partials onto the zeroed output (two addends commute)"
        levels.append(ReduceLevel("tasks", Combine.ATOMIC, p.n, detail))
        shape = (2, p.c) if user else None    # fp16/bf16: float32 dgamma, dbeta accumulators
    # The code places the two arrays back to back with no alignment, so the region is built by hand.
    name = "partials" if workspace_path else "accumulators"
    regions = (Region(name, 0, user, "float32", shape),) if shape else ()
    workspace = WorkspaceLayout(soc.system_workspace_bytes if used else 0, user, regions)
    tiling_data = GroupNormGradTilingData.from_words(td)
    return GroupNormBackwardPlan(
        **common, tiling_key=key if cann else None, block_dim=used,
        core_split=Split.even(p.n * p.g, used),
        tree=ReductionTree(tuple(levels), LaneOrder.FOLD_HALVES), workspace=workspace, tiling_data=tiling_data,
        mode=td["Tiling_key"], mode0_groups=mode0_groups)


def _build_arch35(p: GroupNormBackwardProblem, rejected) -> GroupNormBackwardPlan:
    """The arch35 host tiling's plan (``tiling.group_norm_backward_arch35``): key, block_dim, the
    TilingData's three structs, the workspace rows; an empty input with C > 0 gets the empty tiling
    (key 500: the C gradient columns zeroed), C == 0 launches nothing (the op_api returns first)."""
    soc = p.soc
    common = dict(soc=soc, strategy=S.ARCH35, source="cann-ops-nn", rejected=rejected, n=p.n, c=p.c, hxw=p.hxw,
                  g=p.g, dtype=p.dtype, out_dtype=p.out_dtype)
    if not p.n * p.c * p.hxw:
        if p.c == 0:
            return GroupNormBackwardPlan(**common, tiling_key=None, block_dim=0, core_split=Split.even(0, 1),
                                         tree=ReductionTree(()), workspace=WorkspaceLayout(0, 0), tiling_data=None,
                                         mode=arch35.EMPTY_KEY, mode0_groups=0)
        if p.c // p.g > arch35.UPPER_CARRYING_LIMIT:
            raise TilingError(f"[{OP}] C/group = {p.c // p.g} exceeds {arch35.UPPER_CARRYING_LIMIT} "
                              "(CheckInputAndOutput)")
        td = arch35.empty_tiling(p.c, soc)
        return GroupNormBackwardPlan(
            **common, tiling_key=arch35.EMPTY_KEY, block_dim=soc.vector_cores,
            core_split=Split.quota(p.c, td["usedCoreNumDG"]), tree=ReductionTree(()),
            workspace=WorkspaceLayout(soc.system_workspace_bytes,
                                      arch35.MIN_WORKSPACE_SIZE - soc.system_workspace_bytes),
            tiling_data=td, mode=arch35.EMPTY_KEY, mode0_groups=0)
    r = arch35.arch35_tiling(p.n, p.c, p.hxw, p.g, p.dtype, p.out_dtype, p.mask, soc)
    td = r["td"]
    lanes = ReduceLevel("lanes", Combine.PAIRWISE, LANES, f"a channel's HxW by binary add: quotient "
                        f"{td['binaryAddQuotient']}, K {td['binaryAddK']}, last {td['binaryAddLastNum']}")
    levels = [lanes]
    if r["mode"] == arch35.MODE_2:
        levels.append(ReduceLevel("loops", Combine.SEQUENTIAL, td["mode2MainLoopCnt"],
                                  f"{td['mode2MainLoopCnt']} main loops of {td['mode2OneLoopSize']}, "
                                  f"{td['mode2FoldLoopCnt']} fold loops folded onto them"))
    rows = r["reduce_rows"]
    if td["stage2CoreUsed"]:
        if r["mode"] != arch35.MODE_3:
            levels.append(ReduceLevel("batch_pairs", Combine.ATOMIC, 2, "tasks (2k, g) and (2k+1, g) onto row k"))
        detail = (f"{rows} workspace rows, a binary-add tree past {arch35.RA_BINARY_ADD_THRESHOLD} (quotient "
                  f"{td['stage2BinaryAddQuotient']}, K {td['stage2BinaryAddK']})"
                  if td["stage2Mode"] == arch35.STAGE2_MODE_1 else
                  f"{rows} workspace rows in tiles of {td['nFactorStage2Mode2']}, "
                  f"{td['cacheBufferCount']} cache levels")
        levels.append(ReduceLevel("rows", Combine.PAIRWISE, rows, detail))
    else:
        levels.append(ReduceLevel("tasks", Combine.ATOMIC, 1, "N = 1: each task's sums onto the zeroed outputs"))
    regions = (Region("partials", 0, r["user_bytes"], "float32", (2, td["workSpaceSize"] // p.c, p.c)),)
    return GroupNormBackwardPlan(
        **common, tiling_key=r["key"], block_dim=r["block_dim"], core_split=Split.even(p.n * p.g, r["stage1_cores"]),
        tree=ReductionTree(tuple(levels), LaneOrder.BINARY_ADD),
        workspace=WorkspaceLayout(soc.system_workspace_bytes, r["user_bytes"], regions), tiling_data=td,
        mode=r["mode"], mode0_groups=td["mode0UbCapGNum"])


def _check_arch35(p):
    if p.soc.arch != ASCEND950:
        return Rejection("arch35", f"the arch35 tiling is Ascend950's, not {p.soc.name}'s", True)
    return None


def _check_empty(p):
    if p.n * p.c * p.hxw:
        return Rejection("empty", f"input has {p.n * p.c * p.hxw} elements", True)
    if p.soc.arch == ASCEND950:
        return Rejection("empty", "Ascend950's arch35 code tiles an empty input itself (key 500)", False)
    return None


def _check_cann(p):
    if not p.n * p.c * p.hxw:
        return Rejection("cann", "input is empty", True)
    if p.soc.arch == ASCEND950:
        return Rejection("cann", "Ascend950 runs its arch35 tiling; the A2 templates with the 950's figures "
                         "only when asked for", False)
    return None


def _check_atomic(p):
    if not p.n * p.c * p.hxw:
        return Rejection("atomic", "input is empty", True)
    return Rejection("atomic", "the A2 code takes the workspace path; atomic only when asked for", False)


def _check_groups(p):
    from . import group_norm_backward_groups  # it builds on this module's strategies

    return group_norm_backward_groups.check_groups(p)


def _build_groups(p, rejected):
    from . import group_norm_backward_groups

    return group_norm_backward_groups.build_groups(p, rejected)


def _registry(host: bool) -> StrategyRegistry:
    """The empty exit, then normkern's own ``groups`` on the host; the CANN tilings, then ``groups`` (refused) on
    the NPUs."""
    cann = tuple(Strategy(s, check, lambda p, r, s=s: _build(p, s, r))
                 for s, check in ((S.CANN, _check_cann), (S.ATOMIC, _check_atomic)))
    empty = Strategy(S.EMPTY, _check_empty, lambda p, r: _build(p, S.EMPTY, r))
    arch35 = Strategy(S.ARCH35, _check_arch35, _build_arch35)
    groups = Strategy(S.GROUPS, _check_groups, _build_groups)
    return StrategyRegistry(OP, S, (empty, groups, *cann, arch35) if host else (empty, *cann, arch35, groups))


REGISTRY = _registry(False)
HOST_REGISTRY = _registry(True)


def plan_group_norm_backward(n: int, c: int, hxw: int, group: int, dtype="float32",
                             soc: str | SocSpec | None = None, strategy: str | S | None = None, *,
                             out_dtype=None, output_mask=(True, True, True)) -> GroupNormBackwardPlan:
    """Plan GroupNormGrad for ``N, C, HxW, group`` and the input ``dtype`` on ``soc``.

    ``out_dtype`` is mean's dtype (grad_gamma / grad_beta take it); it defaults to ``dtype``, the only
    choice on A2/A3. ``output_mask`` fills the ``*_is_require`` fields."""
    name = dtype_name(dtype)
    out = name if out_dtype is None else dtype_name(out_dtype)
    return _plan_cached(int(n), int(c), int(hxw), int(group), name, out, tuple(bool(m) for m in output_mask),
                        get_soc(soc), REGISTRY.parse(strategy))


@lru_cache(maxsize=256)
def _plan_cached(n, c, hxw, g, dtype, out_dtype, mask, soc, strategy) -> GroupNormBackwardPlan:
    require(OP, soc)
    if min(n, c, hxw) < 0 or g <= 0:
        raise TilingError(f"[{OP}] N, C, HxW must be non-negative and group positive, got {n}, {c}, {hxw}, {g}")
    if c % g:
        raise TilingError(f"[{OP}] C={c} must be a multiple of group={g}")
    require(OP, soc, dtype)
    if not require(OP, soc, out_dtype).mixed and out_dtype != dtype:
        raise TilingError(f"[{OP}] on {soc.name} mean's dtype must equal the input's ({dtype}), got {out_dtype}")
    if out_dtype != dtype and out_dtype != "float32":
        raise TilingError(f"[{OP}] on {soc.name} mean's dtype must be the input's ({dtype}) or float32, got "
                          f"{out_dtype} (a float32 input takes float32 statistics only)")
    registry = HOST_REGISTRY if soc.arch == HOST else REGISTRY
    return registry.plan(GroupNormBackwardProblem(n, c, hxw, g, dtype, out_dtype, mask, soc), strategy)
