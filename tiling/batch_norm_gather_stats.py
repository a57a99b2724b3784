"""BatchNormGatherStatsWithCounts plans: the SyncBatchNormGatherStatsFused host tiling.

For ``Ascend950`` this reproduces the public AscendC host code
(``norm/sync_batch_norm_gather_stats_fused/op_host/`` in hicann/ops-nn, ``source="cann-ops-nn"``):
four templates tried in priority order, all launching every vector core (``block_dim = coreNum``,
ScheduleMode 1), tiling key ``template * 100 + dtypeKey`` (fp32 1, fp16 2, bf16 3):

==========  =====================  =======================================  =========================
priority    template               capable when                             splits over cores
==========  =====================  =======================================  =========================
1000        common (1)             C <= 240000 and not (C < N and N > 255)  channels, UB = ubFormer rows
2000        workspace (2)          not (C < N and N > 255)                  channels, UB = channel chunks
3000        first_axis_common (3)  C <= 5000                                devices (N), UB = ubFormer rows
4000        first_axis_workspace   always                                   devices (N), UB = channel chunks
==========  =====================  =======================================  =========================

``N`` is the number of devices (rows of ``mean``), ``C`` the channels. Every split is
``blockFormer = ceil(X / coreNum)``, ``blockNum = ceil(X / blockFormer)``, ``blockTail = X -
(blockNum - 1) * blockFormer`` (``Split.quota``). ``common`` and ``first_axis_common`` search
``ubFormer`` downward from ``maxUB / (cAlignM * 8 + 36)`` until two whole buffers, the count
buffer and the BRCB buffer fit. Workspace: ``coreNum * 4 + 16 MiB`` (channel split),
``(blockNum + 2) * cAlignM * 4 + 4 * coreNum + 16 MiB`` (first_axis_common) or ``(blockNum + 2) *
cAlignV * 4 + 16 MiB`` (first_axis_workspace). ``tiling_data`` lists the TilingData fields in the
order of the TilingData structs in ``sync_batch_norm_gather_stats_fused_tiling.h``, ending with the
call's momentum and eps as float32.

On A2/A3 and Atlas training the kernel is closed TBE: the same templates serve as a documented
model (``source="modeled"``, ``tiling_key`` None) with those SoCs' cores, UB and system workspace;
``host`` uses the CPU's figures.

Reduction order (our model of the kernels, whose sources we did not have): per channel,
``sum_n mean[n]*count[n]`` (pass 1, then ``meanAll``) and ``sum_n (var[n] + (mean[n]-meanAll)^2) *
count[n]`` (pass 2) add devices in ascending order. The channel-split templates do this inside one
core. The first-axis templates give each core a block of devices, write one partial row per block
to the workspace, and add the rows in block order: fixed, deterministic. The count total is added
in device order (CANN adds per-core count partials atomically, which gives the same bits while
counts are integers below 2**24).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from .plan import Plan, Rejection, Strategy, StrategyRegistry, TilingError, dtype_name, unit
from .reduction import Combine, ReduceLevel, ReductionTree
from .soc import SocSpec, get_soc
from .split import Split
from .support import require, support
from .tiling_data import TilingData, int64_struct
from .workspace import WorkspaceLayout

OP = "batch_norm_gather_stats_with_counts"
DTYPE_KEY = {"float32": 1, "float16": 2, "bfloat16": 3}
MAX_C_COMMON = 240000
MAX_C_FIRST_AXIS_COMMON = 5000
RESERVED = 16 * 1024 * 1024


class GatherStatsStrategy(enum.Enum):
    EMPTY = "empty"
    COMMON = "common"
    WORKSPACE = "workspace"
    FIRST_AXIS_COMMON = "first_axis_common"
    FIRST_AXIS_WORKSPACE = "first_axis_workspace"


_TEMPLATE_KEY = {GatherStatsStrategy.COMMON: 1, GatherStatsStrategy.WORKSPACE: 2,
                 GatherStatsStrategy.FIRST_AXIS_COMMON: 3, GatherStatsStrategy.FIRST_AXIS_WORKSPACE: 4}
FIRST_AXIS = (GatherStatsStrategy.FIRST_AXIS_COMMON, GatherStatsStrategy.FIRST_AXIS_WORKSPACE)
_HEADER = "norm/sync_batch_norm_gather_stats_fused/op_host/sync_batch_norm_gather_stats_fused_tiling.h"


#: ``ParamsSyncBatchNormGatherStatsFused`` (same header) starts ``nLength``/``cLength`` at 1, ``momentum`` at
#: 0.1f and ``eps`` at 1e-5f; ``GetShapeAttrsInfo`` assigns all four on every path that reaches a template.
HOST_DEFAULTS = {"nLength": 1, "cLength": 1, "momentum": float(np.float32(0.1)), "eps": float(np.float32(1e-5))}


def _struct(struct: str, names: str) -> type[TilingData]:
    """A template's struct: int64_t words, then the call's momentum and eps as float."""
    return int64_struct(struct, _HEADER, names, "float momentum; float eps", host_defaults=HOST_DEFAULTS)


_BUFFERS = "wholeBufferByteSize nBufferByteSize cBufferByteSize nBrcbBufferByteSize wholeBufferElemNums"
#: Each template's TilingData struct, every word in struct order.
TILING_DATA = {
    GatherStatsStrategy.COMMON: _struct(
        "SyncBatchNormGatherStatsFusedTilingDataCommon",
        f"nLength cLength cFormerAlignV_ cFormerAlignM_ cTailAlignV_ cTailAlignM_ blockFormer blockNum blockTail "
        f"ubFormer ubLoop ubTail {_BUFFERS}"),
    GatherStatsStrategy.WORKSPACE: _struct(
        "SyncBatchNormGatherStatsFusedTilingDataWorkspace",
        "nLength cLength blockFormer blockNum blockTail ubFormerOfFormer ubTailOfFormer ubLoopOfFormer "
        "ubFormerOfTail ubTailOfTail ubLoopOfTail"),
    GatherStatsStrategy.FIRST_AXIS_COMMON: _struct(
        "SyncBatchNormGatherStatsFusedTilingDataFirstAxisCommon",
        f"nLength cLength cAlignV cAlignM blockFormer blockNum blockTail ubFormer ubLoopOfFormerBlock "
        f"ubLoopOfTailBlock ubTailOfFormerBlock ubTailOfTailBlock {_BUFFERS}"),
    GatherStatsStrategy.FIRST_AXIS_WORKSPACE: _struct(
        "SyncBatchNormGatherStatsFusedTilingDataFirstAxisWorkspace",
        "nLength cLength cAlignV blockFormer blockNum blockTail ubFormer ubTail ubLoop"),
}
#: The UB the host code keeps back before dividing it (``ubSizePlatForm - 1024``).
UB_RESERVE = 1024
FLOAT_DTYPE_SIZE = 4
#: float32 buffers the workspace template divides its UB into (``WORKSPACE_MAX_BUFFER_NUM``), and the
#: first-axis workspace template; buffers are rounded down to 16 elements (``WORKSPACE_B16_ALIGN_FACTOR``).
WORKSPACE_MAX_BUFFER_NUM = 5
FIRST_AXIS_WORKSPACE_MAX_BUFFER_NUM = 3
WORKSPACE_B16_ALIGN_FACTOR = 16
#: float32 channel buffers beside the ubFormer rows: four in ``common``, two in ``first_axis_common``.
COMMON_CHANNEL_BUFFERS = 4
FIRST_AXIS_COMMON_CHANNEL_BUFFERS = 2


class GatherStatsArgs(NamedTuple):
    n: int
    c: int
    split_n: int
    core_start: np.ndarray
    core_count: np.ndarray
    partial_offset: int
    partial_pitch: int


def _ceil_div(value: int, factor: int) -> int:
    return value if factor == 0 else (value + factor - 1) // factor


@dataclass(frozen=True)
class GatherStatsProblem:
    n: int
    c: int
    dtype: str
    soc: SocSpec
    momentum: float
    eps: float

    @property
    def cores(self) -> int:
        return self.soc.vector_cores

    @property
    def ub(self) -> int:
        return self.soc.ub_bytes


def _align(value: int, block: int) -> int:
    return _ceil_div(value, block) * block


def _search_ub_former(ub_avail: int, c_align_m: int) -> tuple[int, dict]:
    """The downward ubFormer search shared by common and first_axis_common."""
    current = ub_avail // (c_align_m * 4 * 2 + 4 + 32) if ub_avail >= 0 else -1
    while current >= 0:
        whole = current * c_align_m * 4
        n_buffer = _ceil_div(current * 4, 32) * 32
        n_brcb = _ceil_div(current, 8) * 8 * 32
        if 2 * whole + n_buffer + n_brcb <= ub_avail and n_brcb <= whole:
            return current, {"wholeBufferByteSize": whole, "nBufferByteSize": n_buffer,
                             "nBrcbBufferByteSize": n_brcb}
        current -= 1
    return current, {}


def _tiling_data(problem: GatherStatsProblem, strategy: GatherStatsStrategy) -> TilingData:
    n, c, cores, ub = problem.n, problem.c, problem.cores, problem.ub
    f32_block, mean_block = problem.soc.block_elems("float32"), problem.soc.block_elems(problem.dtype)
    split_len = n if strategy in FIRST_AXIS else c
    block_former = _ceil_div(split_len, cores)
    block_num = _ceil_div(split_len, block_former)
    block_tail = split_len - (block_num - 1) * block_former
    td = {"nLength": n, "cLength": c, "blockFormer": block_former, "blockNum": block_num,
          "blockTail": block_tail}
    if strategy is GatherStatsStrategy.COMMON:
        former_v, tail_v = _align(block_former, f32_block), _align(block_tail, f32_block)
        former_m, tail_m = _align(block_former, mean_block), _align(block_tail, mean_block)
        td.update({"cFormerAlignV_": former_v, "cFormerAlignM_": former_m, "cTailAlignV_": tail_v,
                   "cTailAlignM_": tail_m, "cBufferByteSize": former_m * 4})
        ub_former, buffers = _search_ub_former(
            ub - former_m * FLOAT_DTYPE_SIZE * COMMON_CHANNEL_BUFFERS - UB_RESERVE, former_m)
        if ub_former <= 0:
            raise TilingError(f"[{OP}] common: Calculate ubFormer failed, ubFormer={ub_former}")
        ub_loop = _ceil_div(n, ub_former)
        td.update(buffers)
        td.update({"wholeBufferElemNums": ub_former * former_m, "ubFormer": ub_former, "ubLoop": ub_loop,
                   "ubTail": n - (ub_loop - 1) * ub_former})
    elif strategy is GatherStatsStrategy.WORKSPACE:
        max_buffer = (ub - UB_RESERVE) // WORKSPACE_MAX_BUFFER_NUM // FLOAT_DTYPE_SIZE // \
            WORKSPACE_B16_ALIGN_FACTOR * WORKSPACE_B16_ALIGN_FACTOR
        for part, items in (("Former", block_former), ("Tail", block_tail)):
            former = min(max_buffer, _align(items, WORKSPACE_B16_ALIGN_FACTOR))
            loop = _ceil_div(items, former)
            td.update({f"ubFormerOf{part}": former, f"ubTailOf{part}": items - (loop - 1) * former,
                       f"ubLoopOf{part}": loop})
    elif strategy is GatherStatsStrategy.FIRST_AXIS_COMMON:
        align_v, align_m = _align(c, f32_block), _align(c, mean_block)
        td.update({"cAlignV": align_v, "cAlignM": align_m, "cBufferByteSize": align_m * 4})
        ub_former, buffers = _search_ub_former(
            ub - align_m * FLOAT_DTYPE_SIZE * FIRST_AXIS_COMMON_CHANNEL_BUFFERS - UB_RESERVE, align_m)
        if ub_former <= 0:
            raise TilingError(f"[{OP}] first_axis_common: Calculate ubFormer failed, ubFormer={ub_former}")
        td.update(buffers)
        loop_former, loop_tail = _ceil_div(block_former, ub_former), _ceil_div(block_tail, ub_former)
        td.update({"ubFormer": ub_former, "ubLoopOfFormerBlock": loop_former, "ubLoopOfTailBlock": loop_tail,
                   "ubTailOfFormerBlock": block_former - (loop_former - 1) * ub_former,
                   "ubTailOfTailBlock": block_tail - (loop_tail - 1) * ub_former,
                   "wholeBufferElemNums": ub_former * align_m})
    else:
        align_v = _align(c, WORKSPACE_B16_ALIGN_FACTOR)
        max_buffer = (ub - UB_RESERVE) // FIRST_AXIS_WORKSPACE_MAX_BUFFER_NUM // FLOAT_DTYPE_SIZE // \
            WORKSPACE_B16_ALIGN_FACTOR * WORKSPACE_B16_ALIGN_FACTOR
        ub_former = min(max_buffer, align_v)
        ub_loop = _ceil_div(c, ub_former)
        td.update({"cAlignV": align_v, "ubFormer": ub_former, "ubTail": c - (ub_loop - 1) * ub_former,
                   "ubLoop": ub_loop})
    record = TILING_DATA[strategy]
    words = record.initial_words()
    words.update((name, td[name]) for name in words if name in td)
    return record.from_words(words | {"momentum": problem.momentum, "eps": problem.eps})


def _workspace_user_bytes(problem: GatherStatsProblem, strategy, td: dict[str, int]) -> int:
    """The CANN workspace formula minus its 16 MiB reserve."""
    if strategy is GatherStatsStrategy.FIRST_AXIS_COMMON:
        return (td["blockNum"] + 2) * td["cAlignM"] * 4 + 4 * problem.cores
    if strategy is GatherStatsStrategy.FIRST_AXIS_WORKSPACE:
        return (td["blockNum"] + 2) * td["cAlignV"] * 4
    return problem.cores * 4


@dataclass(frozen=True, kw_only=True)
class GatherStatsPlan(Plan):
    op = OP

    strategy: GatherStatsStrategy
    n: int = unit("devices", "N, rows of mean / invstd / counts")
    c: int = unit("channels", "C")
    dtype: str = unit("", "dtype of mean (the outputs take it); compute is float32")
    partial_pitch: int = unit("floats", "row pitch of the per-block partials in the workspace")

    def check(self) -> None:
        if self.strategy is GatherStatsStrategy.EMPTY:
            return
        items = self.n if self.strategy in FIRST_AXIS else self.c
        if self.core_split.total != items:
            raise ValueError(f"core split covers {self.core_split.total} items, expected {items}")
        if self.strategy in FIRST_AXIS:
            region = self.workspace.region("block_partials")
            if region.shape != (self.core_split.parts + 2, self.partial_pitch) or self.partial_pitch < self.c:
                raise ValueError("workspace cannot hold one partial row per block plus two")

    def index_axes(self) -> tuple[tuple[str, int], tuple[str, int]]:
        return ("", 1), ("devices" if self.strategy in FIRST_AXIS else "channels", self.core_split.total)

    def tiling_data_class(self) -> type[TilingData]:
        return TILING_DATA[self.strategy]

    def summary_ub(self) -> str:
        td = self.tiling_data or {}
        return f"ubFormer={td.get('ubFormer', td.get('ubFormerOfFormer', 0))} {self.dtype}"

    def kernel_args(self) -> GatherStatsArgs:
        starts = np.zeros(self.block_dim, np.int64)
        counts = np.zeros(self.block_dim, np.int64)
        for core, (start, count) in enumerate(self.core_split.ranges()):
            starts[core], counts[core] = start, count
        offset = 0
        if self.strategy in FIRST_AXIS:
            offset = self.workspace.region("block_partials").offset // 4
        return GatherStatsArgs(n=self.n, c=self.c, split_n=int(self.strategy in FIRST_AXIS),
                               core_start=starts, core_count=counts, partial_offset=offset,
                               partial_pitch=self.partial_pitch)

    def inline_kernel_args(self) -> GatherStatsArgs:
        """``kernel_args()`` for a run on one thread. A channel-split plan adds each channel's
        devices in device order whatever the core boundaries, so one core over every channel makes the
        same additions; a device-split plan keeps its blocks, whose boundaries are the order."""
        args = self.kernel_args()
        if args.split_n:
            return args
        return args._replace(core_start=np.zeros(1, np.int64), core_count=np.array([self.c], np.int64))


def _build(problem: GatherStatsProblem, strategy: GatherStatsStrategy, rejected) -> GatherStatsPlan:
    soc = problem.soc
    exact = support(OP, soc).tiling == "cann-ops-nn"
    common = dict(soc=soc, strategy=strategy, source="cann-ops-nn" if exact else "modeled", rejected=rejected,
                  n=problem.n, c=problem.c, dtype=problem.dtype)
    if strategy is GatherStatsStrategy.EMPTY:
        return GatherStatsPlan(**common, tiling_key=None, block_dim=0, core_split=Split.quota(0, 1),
                               tree=ReductionTree(()), workspace=WorkspaceLayout(0, 0), tiling_data=None,
                               partial_pitch=0)
    td = _tiling_data(problem, strategy)
    user = _workspace_user_bytes(problem, strategy, td)
    if strategy in FIRST_AXIS:
        core_split = Split.quota(problem.n, problem.cores)
        pitch = td["cAlignM"] if strategy is GatherStatsStrategy.FIRST_AXIS_COMMON else td["cAlignV"]
        arrays = (("block_partials", (core_split.parts + 2, pitch)),)
        if strategy is GatherStatsStrategy.FIRST_AXIS_COMMON:
            arrays += (("core_counts", (problem.cores,)),)
        regions = WorkspaceLayout.build(soc.system_workspace_bytes, arrays).regions
        levels = (ReduceLevel("devices", Combine.SEQUENTIAL, core_split.big_items, "devices of a block, in order"),
                  ReduceLevel("blocks", Combine.SEQUENTIAL, core_split.parts,
                              "per-block partial rows in the workspace, added in block order"))
    else:
        core_split = Split.quota(problem.c, problem.cores)
        pitch = 0
        regions = WorkspaceLayout.build(0, (("core_counts", (problem.cores,)),)).regions
        levels = (ReduceLevel("devices", Combine.SEQUENTIAL, problem.n, "all devices of a channel, in order"),)
    # the CANN byte count; at least what the regions need (only differs for odd core counts)
    needed = regions[-1].offset + regions[-1].nbytes
    workspace = WorkspaceLayout(soc.system_workspace_bytes, max(user, needed), regions)
    return GatherStatsPlan(**common, tiling_key=_TEMPLATE_KEY[strategy] * 100 + DTYPE_KEY[problem.dtype]
                           if exact else None, block_dim=problem.cores, core_split=core_split,
                           tree=ReductionTree(levels), workspace=workspace, tiling_data=td, partial_pitch=pitch)


def _check(strategy):
    def check(p: GatherStatsProblem):
        name = strategy.value
        if strategy is GatherStatsStrategy.EMPTY:
            return None if p.n == 0 or p.c == 0 else Rejection(name, f"mean has {p.n}x{p.c} elements", True)
        if p.n == 0 or p.c == 0:
            return Rejection(name, "mean is empty", True)
        many_devices = p.c < p.n and p.n > 255
        if strategy is GatherStatsStrategy.COMMON and (p.c > MAX_C_COMMON or many_devices):
            return Rejection(name, f"C={p.c} > {MAX_C_COMMON}" if p.c > MAX_C_COMMON else
                             f"C={p.c} < N={p.n} and N > 255", True)
        if strategy is GatherStatsStrategy.WORKSPACE and many_devices:
            return Rejection(name, f"C={p.c} < N={p.n} and N > 255", True)
        if strategy is GatherStatsStrategy.FIRST_AXIS_COMMON and p.c > MAX_C_FIRST_AXIS_COMMON:
            return Rejection(name, f"C={p.c} > {MAX_C_FIRST_AXIS_COMMON}", True)
        return None
    return check


REGISTRY = StrategyRegistry(OP, GatherStatsStrategy, tuple(
    Strategy(s, _check(s), lambda p, r, s=s: _build(p, s, r)) for s in GatherStatsStrategy))


def plan_batch_norm_gather_stats_with_counts(devices: int, channels: int, dtype="float32",
                                             soc: str | SocSpec | None = None,
                                             strategy: str | GatherStatsStrategy | None = None, *,
                                             momentum: float = 0.1, eps: float = 1e-5) -> GatherStatsPlan:
    """Plan the gather for ``mean`` of shape ``(devices, channels)`` and ``dtype`` on ``soc``;
    ``momentum`` and ``eps`` (the call's) are the struct's last words, as float32."""
    return _plan_cached(int(devices), int(channels), dtype_name(dtype), get_soc(soc), REGISTRY.parse(strategy),
                        momentum, eps)


@lru_cache(maxsize=256)
def _plan_cached(n, c, dtype, soc, strategy, momentum, eps) -> GatherStatsPlan:
    momentum, eps = float(np.float32(momentum)), float(np.float32(eps))  # the struct's float words
    if n < 0 or c < 0:
        raise TilingError(f"[{OP}] mean dims must be non-negative, got ({n}, {c})")
    require(OP, soc, dtype)
    return REGISTRY.plan(GatherStatsProblem(n, c, dtype, soc, momentum, eps), strategy)
