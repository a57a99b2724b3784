"""FastBatchNormBackward plans: the A2/A3 BatchNormGradV3 host tiling, reproduced exactly.

Source: ``norm/batch_norm_grad_v3/op_host/`` in hicann/ops-nn (``source="cann-ops-nn"`` on
Ascend910B* and Ascend910_93; ``host`` gets a ``"modeled"`` plan from the same templates with the
CPU's figures; CANN has no such kernel elsewhere). Kernels for these plans are not written yet.

Preprocessing (op_api): rank > 5 is viewed as 5-D ``(N, C, d2, d3, rest)``, rank < 4 as 4-D; if
``N > 1000``, ``C > 1`` and ``HW <= 32`` the input is transposed to ``(1, C, N, HW)``. Fusion:
``B0 = N``, ``A = C``, ``B1 = HW`` (``A == 1`` folds to ``B0 = 1, B1 = N*HW``); ``b1Align`` rounds
``B1`` up to a 32-byte block of the dy dtype (8 or 16 elements); ``bAlign = b1Align * B0``.

Templates in priority order:

- ``full_load`` (1000): ``bAlign <= 12000`` (training) / ``16000`` (inference). Channels over cores
  ``eachCoreChannel = ceil(float(C) / cores)`` (float32 arithmetic, as the C++), the last core the
  tail; ``cUbBlock`` channels per UB pass. Key 30001 / 10001.
- ``split_load_cross_core`` (1050): ``bAlign >= 20000`` and ``C % cores != 0``. Whole channels
  ``C // cores`` per core, the leftover channels each split over a group of cores whose per-core
  partials (8 floats each for dbias and dweight) go through the workspace and are summed in core
  order. Key base + 10 + (0 split HW | 1 split N); ScheduleMode 1.
- ``split_load`` (1100): always. ``bUbBlock`` elements per UB pass, split over HW (offset 0) when
  ``bUbBlock < 2 * b1Align``, else whole planes over N (offset 1). Key 40001/40002, 20001/20002.

Workspace: 16 MiB, plus ``blockDim * 8 * 4 * 2`` bytes for the cross-core partials.
``tiling_data`` holds the integer TilingData fields in the struct order of ``batch_norm_grad_v3_tiling.h``
(the float epsilon, a call attribute, is left out).
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from functools import lru_cache
from math import prod
from typing import NamedTuple

import numpy as np

from .plan import Plan, Rejection, Strategy, StrategyRegistry, TilingError, dtype_name, unit
from .reduction import Combine, LaneOrder, ReduceLevel, ReductionTree
from .soc import SocSpec, get_soc
from .split import Split, SplitKind
from .workspace import WorkspaceLayout

OP = "fast_batch_norm_backward"
TRANSPOSE_N_LIMIT = 1000
TRANSPOSE_HW_LIMIT = 32
FULL_LOAD_TRAIN_LIMIT = 12000
FULL_LOAD_INFER_LIMIT = 16000
CROSS_CORE_LIMIT = 20000
MAX_CHANNEL_SIZE = 1024
KEY_INFER_FULL_LOAD, KEY_INFER_SPLIT_LOAD = 10001, 20001
KEY_TRAIN_FULL_LOAD, KEY_TRAIN_SPLIT_LOAD = 30001, 40001
CROSS_CORE_KEY_OFFSET = 10
#: (dy, weight, running_var) dtype triples the A2 tiling accepts.
VALID_DTYPES = (
    ("float32", "float32", "float32"), ("float16", "float16", "float16"), ("bfloat16", "bfloat16", "bfloat16"),
    ("float16", "float32", "float32"), ("bfloat16", "float32", "float32"),
    ("float16", "float16", "float32"), ("bfloat16", "bfloat16", "float32"),
)
TILING_DATA_FIELDS = {
    "full_load": ("b1Dim", "aDim", "b0Dim", "bAlign", "coreChannelNum", "coreChannelNumTail", "cUbBlock",
                  "needCoreNum"),
    "split_load": ("b1Dim", "aDim", "b0Dim", "bAlign", "coreChannelNum", "coreChannelNumTail", "bUbBlock",
                   "b0UbBlock", "bUbLoop", "bUbBlockTail", "b0UbBlockTail", "needCoreNum"),
    "split_load_cross_core": (
        "b1Dim", "aDim", "b0Dim", "bAlign", "coreChannelNum", "coreChannelNumTail", "bUbBlock", "b0UbBlock",
        "bUbLoop", "bUbTailLoop", "bUbBlockTail", "b0UbBlockTail", "b0UbTailBlockTail", "needCoreNum",
        "groupCore", "groupBlockNum", "groupBlockNumTail", "morehalfChannel", "groupBlockNumHalf",
        "groupBlockNumHalfTail", "bUbLoopHalf", "b0UbBlockTailHalf", "bUbTailLoopHalf", "b0UbTailBlockTailHalf",
        "moreMultiChannel", "bUbLoopMulti", "b0UbBlockTailMulti", "coreNum"),
}


class FastBatchNormBackwardStrategy(enum.Enum):
    FULL_LOAD = "full_load"
    SPLIT_LOAD_CROSS_CORE = "split_load_cross_core"
    SPLIT_LOAD = "split_load"


S = FastBatchNormBackwardStrategy


class FastBatchNormBackwardArgs(NamedTuple):
    b0: int
    a: int
    b1: int
    tiling: np.ndarray


def _fceil_div(numerator: int, denominator: int) -> int:
    """``std::ceil(static_cast<float>(n) / d)``: the division and the ceil in float32."""
    return int(math.ceil(np.float32(np.float32(numerator) / np.float32(denominator))))


def preprocess(shape: tuple[int, ...]) -> tuple[tuple[int, int, int], bool]:
    """The op_api view: ``((B0, A, B1), transposed)`` before the A == 1 fold."""
    n, c = shape[0], shape[1]
    hw = prod(shape[2:])
    if n > TRANSPOSE_N_LIMIT and c > 1 and hw <= TRANSPOSE_HW_LIMIT:
        return (1, c, n * hw), True
    return (n, c, hw), False


@dataclass(frozen=True)
class FastBatchNormBackwardProblem:
    shape: tuple[int, ...]
    dtype: str
    weight_dtype: str
    var_dtype: str
    training: bool
    soc: SocSpec

    @property
    def fused(self) -> tuple[int, int, int, bool]:
        (b0, a, b1), transposed = preprocess(self.shape)
        if a == 1:
            b0, b1 = 1, b0 * b1
        return b0, a, b1, transposed

    @property
    def align(self) -> int:
        return 8 if self.dtype == "float32" else 16

    @property
    def b1_align(self) -> int:
        b1 = self.fused[2]
        return -(-b1 // self.align) * self.align

    @property
    def b_align(self) -> int:
        return self.b1_align * self.fused[0]


def _full_load(p: FastBatchNormBackwardProblem) -> tuple[dict, Split]:
    b0, a, b1, _ = p.fused
    each = _fceil_div(a, p.soc.vector_cores)
    need = _fceil_div(a, each)
    tail = a - (need - 1) * each
    if p.training:
        relate, not_relate = p.b_align * 4 * 4 + 9 * 4 * 4, 9 * 8 * 5 * 4
    else:
        relate, not_relate = p.b_align * 4 * 3 + 9 * 3 * 4, 9 * 8 * 4 * 4
    c_ub_block = (p.soc.ub_bytes - not_relate) // relate
    td = {"b1Dim": b1, "aDim": a, "b0Dim": b0, "bAlign": p.b_align, "coreChannelNum": each,
          "coreChannelNumTail": tail, "cUbBlock": c_ub_block, "needCoreNum": need}
    return td, _quota(a, each, need, tail)


def _b_ub_block(p: FastBatchNormBackwardProblem, channels: int) -> int:
    aligned = -(-channels // p.align) * p.align
    block = (p.soc.ub_bytes - aligned * 3 * 4) // (4 * 4)
    return block // p.align * p.align


def _split_load(p: FastBatchNormBackwardProblem) -> tuple[dict, Split, int]:
    """The tiling data, the channel split, and the key offset (0: split HW, 1: split N)."""
    b0, a, b1, _ = p.fused
    each = _fceil_div(a, p.soc.vector_cores)
    need = _fceil_div(a, each)
    tail = a - (need - 1) * each
    b_ub_block = _b_ub_block(p, min(each, MAX_CHANNEL_SIZE))
    if b_ub_block <= 0:
        raise TilingError(f"[{OP}] split_load: bUbBlock is {b_ub_block}")
    td = {"b1Dim": b1, "aDim": a, "b0Dim": b0, "bAlign": p.b_align, "coreChannelNum": each,
          "coreChannelNumTail": tail, "bUbBlock": b_ub_block, "b0UbBlock": 1, "bUbLoop": 0, "bUbBlockTail": 0,
          "b0UbBlockTail": 0, "needCoreNum": need}
    if b_ub_block < 2 * p.b1_align:
        loop = -(-b1 // b_ub_block)
        td.update(bUbLoop=loop, bUbBlockTail=b1 - (loop - 1) * b_ub_block)
        offset = 0
    else:
        planes = b_ub_block // p.b1_align
        loop = -(-b0 // planes)
        td.update(b0UbBlock=planes, bUbLoop=loop, b0UbBlockTail=b0 - (loop - 1) * planes)
        offset = 1
    return td, _quota(a, each, need, tail), offset


def _cross_core(p: FastBatchNormBackwardProblem) -> dict:
    b0, a, b1, _ = p.fused
    cores = p.soc.vector_cores
    td = dict.fromkeys(TILING_DATA_FIELDS["split_load_cross_core"], 0)
    each = a // cores
    b_ub_block = _b_ub_block(p, each)
    if b_ub_block <= 0:
        raise TilingError(f"[{OP}] split_load_cross_core: bUbBlock is {b_ub_block}")
    td.update(b1Dim=b1, aDim=a, b0Dim=b0, bAlign=p.b_align, coreChannelNum=each, bUbBlock=b_ub_block,
              b0UbBlock=1, coreNum=cores)
    left = a
    if a > cores:
        td["moreMultiChannel"] = 1
        left -= each * cores

    def group_info(left_channels: int, all_blocks: int) -> bool:
        if left_channels == 0:
            return False
        group = min(cores // left_channels, all_blocks)
        if group == 0:
            return False
        td["groupBlockNum"] = _fceil_div(all_blocks, group)
        td["groupCore"] = _fceil_div(all_blocks, td["groupBlockNum"])
        td["groupBlockNumTail"] = all_blocks - (td["groupCore"] - 1) * td["groupBlockNum"]
        td["needCoreNum"] = td["groupCore"] * left_channels
        return True

    def half_channels(all_blocks: int) -> int:
        """The first cores/2 leftover channels go to pairs of cores when there are few cores per channel."""
        nonlocal left
        if all_blocks > 2 and cores // left < 2:
            td["morehalfChannel"] = 1
            left -= cores // 2
            td["groupCore"] = 2
            td["groupBlockNumHalf"] = _fceil_div(all_blocks, 2)
            td["groupBlockNumHalfTail"] = all_blocks - td["groupBlockNumHalf"]
        return left

    if b_ub_block < 2 * p.b1_align:  # split HW
        td["bUbLoop"] = -(-b1 // b_ub_block)
        td["bUbBlockTail"] = b1 - (td["bUbLoop"] - 1) * b_ub_block
        td["bUbLoopMulti"], td["b0UbBlockTailMulti"] = td["bUbLoop"], td["bUbBlockTail"]
        all_blocks = td["bUbLoop"] * b0
        if left:
            half_channels(all_blocks)
            group_info(left, all_blocks)
        offset = 0
    else:  # split N
        planes = b_ub_block // p.b1_align
        td["b0UbBlock"] = planes
        td["bUbLoopMulti"] = -(-b0 // planes)
        td["b0UbBlockTailMulti"] = b0 - (td["bUbLoopMulti"] - 1) * planes
        all_blocks = b0
        offset = 1
        if left:
            half_channels(all_blocks)
            if td["morehalfChannel"]:
                half, half_tail = td["groupBlockNumHalf"], td["groupBlockNumHalfTail"]
                td["bUbLoopHalf"] = -(-half // planes)
                td["b0UbBlockTailHalf"] = half - (td["bUbLoopHalf"] - 1) * planes
                td["bUbTailLoopHalf"] = -(-half_tail // planes)
                td["b0UbTailBlockTailHalf"] = half_tail - (td["bUbTailLoopHalf"] - 1) * planes
            if group_info(left, all_blocks):
                td["bUbLoop"] = -(-td["groupBlockNum"] // planes)
                td["b0UbBlockTail"] = td["groupBlockNum"] - (td["bUbLoop"] - 1) * planes
                td["bUbTailLoop"] = -(-td["groupBlockNumTail"] // planes)
                td["b0UbTailBlockTail"] = td["groupBlockNumTail"] - (td["bUbTailLoop"] - 1) * planes
    td["_offset"] = offset
    return td


def _quota(total: int, each: int, need: int, tail: int) -> Split:
    if not 0 < tail <= each:
        raise TilingError(f"[{OP}] the float32 channel split gives a tail of {tail} for {each} per core")
    if tail == each:
        return Split(SplitKind.QUOTA, total, need, each, 0, 0)
    return Split(SplitKind.QUOTA, total, need - 1, each, 1, tail)


@dataclass(frozen=True, kw_only=True)
class FastBatchNormBackwardPlan(Plan):
    op = OP
    explain_notes = (
        "save_invstd is the reciprocal standard deviation (aclnn parameter table, PyTorch); the A2 kernel "
        "source consumes that input as a variance (sqrt(v + eps)); normkern follows the parameter table",
    )

    strategy: FastBatchNormBackwardStrategy
    shape: tuple[int, ...] = unit("", "input shape (N, C, *spatial)")
    dtype: str = unit("", "dtype of grad_out / input")
    weight_dtype: str = unit("", "dtype of weight (and the saved statistics)")
    training: bool = unit("", "training (save_mean/save_invstd) or inference (running statistics)")
    transposed: bool = unit("", "op_api transpose to (1, C, N, HW): N > 1000, C > 1, HW <= 32")
    b0: int = unit("", "fused B0 (N)")
    a: int = unit("channels", "fused A (C)")
    b1: int = unit("elements", "fused B1 (HW)")
    b1_align: int = unit("elements", "B1 rounded up to a 32-byte block")
    b_align: int = unit("elements", "b1Align * B0")

    def check(self) -> None:
        if self.tiling_data is None or tuple(self.tiling_data) != TILING_DATA_FIELDS[self.strategy.value]:
            raise ValueError("tiling_data must hold the TilingData fields of the template, in struct order")
        if self.core_split.total != self.a and self.strategy is not S.SPLIT_LOAD_CROSS_CORE:
            raise ValueError(f"core split covers {self.core_split.total} channels, expected {self.a}")

    def summary_ub(self) -> str:
        td = self.tiling_data
        if self.strategy is S.FULL_LOAD:
            return f"{td['cUbBlock']}ch {self.dtype}"
        return f"bUbBlock={td['bUbBlock']} {self.dtype}"

    def kernel_args(self) -> FastBatchNormBackwardArgs:
        return FastBatchNormBackwardArgs(self.b0, self.a, self.b1,
                                         np.array(list(self.tiling_data.values()), np.int64))


def _build(p: FastBatchNormBackwardProblem, strategy: S, rejected) -> FastBatchNormBackwardPlan:
    b0, a, b1, transposed = p.fused
    cores = p.soc.vector_cores
    exact = p.soc.arch == "DAV_2201"
    user = 0
    if strategy is S.FULL_LOAD:
        td, core_split = _full_load(p)
        key = KEY_TRAIN_FULL_LOAD if p.training else KEY_INFER_FULL_LOAD
        block_dim = td["needCoreNum"]
        levels = (ReduceLevel("lanes", Combine.PAIRWISE, 64, "A2 ReduceSum per channel (fold halves, modeled)"),
                  ReduceLevel("blocks", Combine.SEQUENTIAL, 1, "a channel's B0*b1Align elements in one UB pass"))
    elif strategy is S.SPLIT_LOAD:
        td, core_split, offset = _split_load(p)
        key = (KEY_TRAIN_SPLIT_LOAD if p.training else KEY_INFER_SPLIT_LOAD) + offset
        block_dim = td["needCoreNum"]
        levels = (ReduceLevel("lanes", Combine.PAIRWISE, 64, "A2 ReduceSum per UB pass (fold halves, modeled)"),
                  ReduceLevel("blocks", Combine.SEQUENTIAL, td["bUbLoop"], "UB passes of a channel, in order"))
    else:
        td = _cross_core(p)
        offset = td.pop("_offset")
        key = (KEY_TRAIN_SPLIT_LOAD if p.training else KEY_INFER_SPLIT_LOAD) + CROSS_CORE_KEY_OFFSET + offset
        block_dim = cores if td["moreMultiChannel"] or td["morehalfChannel"] else td["needCoreNum"]
        core_split = Split.even(block_dim, block_dim)
        user = block_dim * 8 * 4 * 2
        levels = (ReduceLevel("lanes", Combine.PAIRWISE, 64, "A2 ReduceSum per UB pass (fold halves, modeled)"),
                  ReduceLevel("blocks", Combine.SEQUENTIAL, max(td["bUbLoop"], td["bUbLoopMulti"]),
                              "UB passes of a core, in order"),
                  ReduceLevel("cores", Combine.SEQUENTIAL, max(td["groupCore"], 1),
                              "a channel group's per-core partials in the workspace, summed in core order"))
    if block_dim > cores:
        raise TilingError(f"[{OP}] {strategy.value} needs {block_dim} cores, {p.soc.name} has {cores}")
    regions = (("cross_core_partials", (block_dim, 2, 8)),) if user else ()
    workspace = WorkspaceLayout.build(p.soc.system_workspace_bytes, regions)
    return FastBatchNormBackwardPlan(
        soc=p.soc, strategy=strategy, source="cann-ops-nn" if exact else "modeled", tiling_key=key if exact else None,
        block_dim=block_dim, core_split=core_split, tree=ReductionTree(levels, LaneOrder.FOLD_HALVES),
        workspace=workspace, rejected=rejected, tiling_data=td, shape=p.shape, dtype=p.dtype,
        weight_dtype=p.weight_dtype, training=p.training, transposed=transposed, b0=b0, a=a, b1=b1,
        b1_align=p.b1_align, b_align=p.b_align)


def _check_full_load(p):
    limit = FULL_LOAD_TRAIN_LIMIT if p.training else FULL_LOAD_INFER_LIMIT
    if p.b_align > limit:
        return Rejection("full_load", f"bAlign={p.b_align} > {limit}", True)
    return None


def _check_cross_core(p):
    if p.b_align < CROSS_CORE_LIMIT:
        return Rejection("split_load_cross_core", f"bAlign={p.b_align} < {CROSS_CORE_LIMIT}", True)
    if p.fused[1] % p.soc.vector_cores == 0:
        return Rejection("split_load_cross_core", f"C={p.fused[1]} is a multiple of {p.soc.vector_cores} cores",
                         True)
    return None


REGISTRY = StrategyRegistry(OP, S, (
    Strategy(S.FULL_LOAD, _check_full_load, lambda p, r: _build(p, S.FULL_LOAD, r)),
    Strategy(S.SPLIT_LOAD_CROSS_CORE, _check_cross_core, lambda p, r: _build(p, S.SPLIT_LOAD_CROSS_CORE, r)),
    Strategy(S.SPLIT_LOAD, lambda p: None, lambda p, r: _build(p, S.SPLIT_LOAD, r)),
))


def plan_fast_batch_norm_backward(shape, dtype="float32", soc: str | SocSpec | None = None,
                                  strategy: str | S | None = None, *, training: bool = True,
                                  weight_dtype=None, var_dtype=None) -> FastBatchNormBackwardPlan:
    """Plan BatchNormGradV3 for ``grad_out``/``input`` of ``shape``; weight and statistics dtypes
    default to ``dtype``."""
    name = dtype_name(dtype)
    weight = name if weight_dtype is None else dtype_name(weight_dtype)
    var = weight if var_dtype is None else dtype_name(var_dtype)
    return _plan_cached(tuple(int(d) for d in shape), name, weight, var, bool(training), get_soc(soc),
                        REGISTRY.parse(strategy))


@lru_cache(maxsize=256)
def _plan_cached(shape, dtype, weight, var, training, soc, strategy):
    if soc.arch not in ("DAV_2201", "host"):
        raise TilingError(f"[{OP}] BatchNormGradV3 exists only on Atlas A2/A3 (and the host model), not on "
                          f"{soc.name}")
    if not 2 <= len(shape) <= 8 or min(shape) <= 0:
        raise TilingError(f"[{OP}] input must have rank 2 to 8 and no empty dim, got {shape}")
    if (dtype, weight, var) not in VALID_DTYPES:
        raise TilingError(f"[{OP}] dtypes (dy, weight, running_var) = ({dtype}, {weight}, {var}) are not a "
                          "supported combination")
    return REGISTRY.plan(FastBatchNormBackwardProblem(shape, dtype, weight, var, training, soc), strategy)
