"""FastBatchNormBackward plans: the A2/A3 BatchNormGradV3 host tiling, reproduced exactly.

Source: ``norm/batch_norm_grad_v3/op_host/`` in hicann/ops-nn (``source="cann-ops-nn"`` on
Ascend910B* and Ascend910_93; ``host`` gets a ``"modeled"`` plan from the same templates with the
CPU's figures, dividing at most ``HOST_UB_BYTES`` of its UB; CANN has no such kernel elsewhere).

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
``tiling_data`` is the template's TilingData struct of ``batch_norm_grad_v3_tiling.h``, every word in
struct order, the float ``epsilon`` (the call's eps, as the host code copies it) last.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from functools import lru_cache
from math import prod
from typing import NamedTuple

import numpy as np

from .picture import Share
from .plan import Plan, Rejection, Strategy, StrategyRegistry, TilingError, dtype_name, unit
from .reduction import LANES, Combine, LaneOrder, ReduceLevel, ReductionTree
from .soc import HOST, SocSpec, get_soc
from .split import Split, SplitKind
from .support import require, support
from .tiling_data import TilingData, int64_struct
from .workspace import WorkspaceLayout

OP = "fast_batch_norm_backward"
TRANSPOSE_N_LIMIT = 1000
TRANSPOSE_HW_LIMIT = 32
FULL_LOAD_TRAIN_LIMIT = 12000
FULL_LOAD_INFER_LIMIT = 16000
CROSS_CORE_LIMIT = 20000
MAX_CHANNEL_SIZE = 1024
#: The UB the host model's templates divide, at most: there a pass's two float32 accumulators stay in
#: L1/L2 beside the rows streaming through, where the whole L2 as UB would spill them (the fold would
#: then be as long as the data). A2/A3 use their UB as is.
HOST_UB_BYTES = 128 * 1024
#: The host model's planes of at most this many elements go one plane a UB pass (split_load, one HW chunk):
#: the planes of a channel are added position by position onto one buffer of the plane's length, and that
#: buffer is folded once. The A2 templates pack several planes into a pass (full load: all of them), each
#: at its own offset, and fold the whole packed buffer; on a CPU the packed order costs a fold as long as
#: the channel and the stores that fill it, where the plane order keeps one short buffer in L1 and folds
#: it once (docs/performance.md). Longer planes keep the A2 choice.
HOST_PLANE_PASS_MAX = 1024
KEY_INFER_FULL_LOAD, KEY_INFER_SPLIT_LOAD = 10001, 20001
KEY_TRAIN_FULL_LOAD, KEY_TRAIN_SPLIT_LOAD = 30001, 40001
CROSS_CORE_KEY_OFFSET = 10
#: (dy, weight, running_var) dtype triples the A2 tiling accepts.
VALID_DTYPES = (
    ("float32", "float32", "float32"), ("float16", "float16", "float16"), ("bfloat16", "bfloat16", "bfloat16"),
    ("float16", "float32", "float32"), ("bfloat16", "float32", "float32"),
    ("float16", "float16", "float32"), ("bfloat16", "bfloat16", "float32"),
)
_HEADER = "norm/batch_norm_grad_v3/op_host/batch_norm_grad_v3_tiling.h"
#: The three A2 templates' structs as the header declares them: int64_t words, then the float epsilon.
_COMMON = "b1Dim aDim b0Dim bAlign coreChannelNum coreChannelNumTail"
_SPLIT = "bUbBlock b0UbBlock bUbLoop"


#: ``BatchNormGradV3Base::Reset`` starts ``epsilon_`` at ``DEFAULT_EPSILON`` (``batch_norm_grad_v3_base_tiling.h``),
#: kept only when the attribute is absent (the aclnn API always passes it); the split-load templates start
#: ``b0UbBlock`` at 1 (a local of ``DoOpTiling``, a member of the cross-core class), which the split-HW path
#: assigns again and the split-N path overwrites.
DEFAULT_EPSILON = float(np.float32(1e-5))


def _bngv3_struct(struct: str, names: str, **host_defaults) -> type[TilingData]:
    return int64_struct(struct, _HEADER, names, "float epsilon",
                        host_defaults={"epsilon": DEFAULT_EPSILON} | host_defaults)


FullLoadTilingData = _bngv3_struct("BatchNormGradV3FullLoadTilingData", f"{_COMMON} cUbBlock needCoreNum")
SplitLoadTilingData = _bngv3_struct("BatchNormGradV3SplitLoadTilingData",
                                    f"{_COMMON} {_SPLIT} bUbBlockTail b0UbBlockTail needCoreNum", b0UbBlock=1)
SplitLoadCrossCoreTilingData = _bngv3_struct(
    "BatchNormGradV3SplitLoadCrossCoreTilingData",
    f"{_COMMON} {_SPLIT} bUbTailLoop bUbBlockTail b0UbBlockTail b0UbTailBlockTail needCoreNum groupCore "
    "groupBlockNum groupBlockNumTail morehalfChannel groupBlockNumHalf groupBlockNumHalfTail bUbLoopHalf "
    "b0UbBlockTailHalf bUbTailLoopHalf b0UbTailBlockTailHalf moreMultiChannel bUbLoopMulti b0UbBlockTailMulti "
    "coreNum", b0UbBlock=1)


class FullLoadBudget(NamedTuple):
    """The full-load template's UB budget in float32 blocks (``DoOpTiling`` of
    ``batch_norm_grad_v3_fullload_tiling.cpp``): blocks that do not grow with the channels
    (``noRelateBlockNum``), blocks per channel (``relateBlockNum``), and bAlign-sized buffers per
    channel (``relateAlignBlockNum``)."""

    no_relate_blocks: int
    relate_blocks: int
    relate_align_buffers: int


FULL_LOAD_BUDGET = {True: FullLoadBudget(9 * 8 * 5, 9 * 4, 4), False: FullLoadBudget(9 * 8 * 4, 9 * 3, 3)}
#: The split-load templates' UB (``batch_norm_grad_v3_splitload_tiling.cpp``): three float32 buffers a
#: channel (weight, mean, variance), four float32 buffers an element of a pass (dy, x and two results).
SPLIT_LOAD_CHANNEL_BUFFERS = 3
SPLIT_LOAD_ELEMENT_BUFFERS = 4
FLOAT32_BYTES = 4


class FastBatchNormBackwardStrategy(enum.Enum):
    EMPTY = "empty"
    PLANES = "planes"
    FULL_LOAD = "full_load"
    SPLIT_LOAD_CROSS_CORE = "split_load_cross_core"
    SPLIT_LOAD = "split_load"


S = FastBatchNormBackwardStrategy


class Job(NamedTuple):
    """One core's share of one phase: blocks ``[block_start, block_start + block_count)`` of each of
    the channels ``[channel_start, channel_start + channel_count)``.

    ``group_size > 1`` marks a cross-core job: the core writes its partial sums to workspace slot
    ``core``, and after the phase the group's slots ``group_first .. group_first + group_size - 1``
    are added in core order; core ``group_first`` writes the channel's grad_weight and grad_bias.
    """

    phase: int
    core: int
    channel_start: int
    channel_count: int
    block_start: int
    block_count: int
    group_first: int
    group_size: int


class PassGeometry(NamedTuple):
    """How a channel's blocks form UB passes, stated once by the plan; the kernel and the simulator
    walk it with ``pass_extent``."""

    split_hw: int          # 1: a block is one (plane, HW chunk) pair (split HW); 0: a block is one plane
    hw_blocks: int         # split HW: HW chunks per plane (bUbLoop); 1 otherwise
    hw_block: int          # split HW: elements of a full HW chunk
    b1: int
    planes_per_pass: int   # planes per UB pass (b0UbBlock; B0 for full load; 1 for split HW)
    b1_align: int          # the pitch of a pass's planes in the UB buffers
    fold_len: int          # elements of the UB buffer each ReduceSum folds


def pass_step(geometry: PassGeometry) -> int:
    """Blocks a full UB pass covers."""
    return 1 if geometry.split_hw else geometry.planes_per_pass


def pass_extent(geometry: PassGeometry, block: int, last: int) -> tuple[int, int, int, int]:
    """``(plane, hw_start, hw_len, planes)`` of the UB pass that starts at ``block``; ``last`` ends the job.

    Plain integer arithmetic: the simulator calls it as it is, the kernels compile it with Numba."""
    if geometry.split_hw:
        plane = block // geometry.hw_blocks
        hw_start = (block - plane * geometry.hw_blocks) * geometry.hw_block
        return plane, hw_start, min(geometry.hw_block, geometry.b1 - hw_start), 1
    return block, 0, geometry.b1, min(geometry.planes_per_pass, last - block)


class FastBatchNormBackwardArgs(NamedTuple):
    """What the kernels receive: the fused dims, the pass geometry (``PassGeometry``'s fields, flat) and the
    job table."""

    b0: int
    c: int
    count: int             # B0 * B1, the elements per channel
    split_hw: int
    hw_blocks: int
    hw_block: int
    b1: int
    planes_per_pass: int
    b1_align: int
    fold_len: int
    job_core: np.ndarray   # the job table, sorted by (phase, core)
    job_channel_start: np.ndarray
    job_channel_count: np.ndarray
    job_block_start: np.ndarray
    job_block_count: np.ndarray
    job_group_first: np.ndarray
    job_group_size: np.ndarray
    phase_core_jobs: np.ndarray    # (phases, block_dim + 1): core k's jobs of phase p are [row[k], row[k+1])
    dbias_offset: int              # float32 offsets of the cross-core partial slots (8 floats a core)
    dweight_offset: int


class PlanesArgs(NamedTuple):
    """What the host ``planes`` kernel receives: the (N, C, HxW) dims, the segments of a plane, and each core's
    channels."""

    n: int
    c: int
    hxw: int
    row_elems: int          # a segment: a plane, or a CHUNK_ELEMS piece of one longer
    segs_per_plane: int
    core_start: np.ndarray
    core_count: np.ndarray


#: Elements of a ``planes`` segment at most: the row the 64 lanes sum before a fold; the same constant as
#: BatchNorm's chunk.
CHUNK_ELEMS = 16384


def planes_tree(n: int, hxw: int) -> ReductionTree:
    """The order of a ``planes`` plan's two per-channel sums (FastBatchNormBackward's and BatchNormReduceBackward's
    host plans): each segment's N planes added position by position, the row summed by 64 lanes, segments in
    order."""
    return ReductionTree((
        ReduceLevel("planes", Combine.SEQUENTIAL, n, "a segment's N planes added position by position, in plane "
                    "order"),
        ReduceLevel("lanes", Combine.PAIRWISE, LANES, "64 interleaved float32 lanes over the segment's row, folded "
                    "32+32 .. 1+1"),
        ReduceLevel("segments", Combine.SEQUENTIAL, -(-hxw // CHUNK_ELEMS), "a plane's segments' sums in order")),
        LaneOrder.INTERLEAVED)


def planes_args(n: int, c: int, hxw: int, core_split: Split) -> PlanesArgs:
    """A ``planes`` plan's kernel arguments: core ``k`` owns the channels of ``core_split``'s range ``k``."""
    ranges = core_split.ranges()
    return PlanesArgs(n=n, c=c, hxw=hxw, row_elems=min(hxw, CHUNK_ELEMS), segs_per_plane=-(-hxw // CHUNK_ELEMS),
                      core_start=np.array([s for s, _ in ranges], np.int64),
                      core_count=np.array([k for _, k in ranges], np.int64))


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
    epsilon: float

    @property
    def fused(self) -> tuple[int, int, int, bool]:
        (b0, a, b1), transposed = preprocess(self.shape)
        if a == 1:
            b0, b1 = 1, b0 * b1
        return b0, a, b1, transposed

    @property
    def align(self) -> int:
        """elements of the dy dtype in one UB block (32 bytes)"""
        return self.soc.block_elems(self.dtype)

    @property
    def ub_bytes(self) -> int:
        return template_ub_bytes(self.soc)

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
    budget = FULL_LOAD_BUDGET[p.training]
    relate = (p.b_align * budget.relate_align_buffers + budget.relate_blocks) * FLOAT32_BYTES
    c_ub_block = (p.ub_bytes - budget.no_relate_blocks * FLOAT32_BYTES) // relate
    td = FullLoadTilingData(b1Dim=b1, aDim=a, b0Dim=b0, bAlign=p.b_align, coreChannelNum=each,
                            coreChannelNumTail=tail, cUbBlock=c_ub_block, needCoreNum=need, epsilon=p.epsilon)
    return td, _quota(a, each, need, tail)


def _b_ub_block(p: FastBatchNormBackwardProblem, channels: int) -> int:
    aligned = -(-channels // p.align) * p.align
    block = (p.ub_bytes - aligned * SPLIT_LOAD_CHANNEL_BUFFERS * FLOAT32_BYTES) // \
        (SPLIT_LOAD_ELEMENT_BUFFERS * FLOAT32_BYTES)
    return block // p.align * p.align


def _split_load(p: FastBatchNormBackwardProblem) -> tuple[TilingData, Split, int]:
    """The tiling data, the channel split, and the key offset (0: split HW, 1: split N)."""
    b0, a, b1, _ = p.fused
    each = _fceil_div(a, p.soc.vector_cores)
    need = _fceil_div(a, each)
    tail = a - (need - 1) * each
    b_ub_block = p.b1_align if _plane_passes(p) else _b_ub_block(p, min(each, MAX_CHANNEL_SIZE))
    if b_ub_block <= 0:
        raise TilingError(f"[{OP}] split_load: bUbBlock is {b_ub_block}")
    td = SplitLoadTilingData.initial_words()
    td.update(b1Dim=b1, aDim=a, b0Dim=b0, bAlign=p.b_align, coreChannelNum=each, coreChannelNumTail=tail,
              bUbBlock=b_ub_block, needCoreNum=need, epsilon=p.epsilon)
    if b_ub_block < 2 * p.b1_align:
        loop = -(-b1 // b_ub_block)
        td.update(bUbLoop=loop, bUbBlockTail=b1 - (loop - 1) * b_ub_block)
        offset = 0
    else:
        planes = b_ub_block // p.b1_align
        loop = -(-b0 // planes)
        td.update(b0UbBlock=planes, bUbLoop=loop, b0UbBlockTail=b0 - (loop - 1) * planes)
        offset = 1
    return SplitLoadTilingData.from_words(td), _quota(a, each, need, tail), offset


def _cross_core(p: FastBatchNormBackwardProblem) -> tuple[TilingData, int]:
    """The tiling data and the key offset (0: split HW, 1: split N)."""
    b0, a, b1, _ = p.fused
    cores = p.soc.vector_cores
    td = SplitLoadCrossCoreTilingData.initial_words()
    each = a // cores
    b_ub_block = p.b1_align if _plane_passes(p) else _b_ub_block(p, each)
    if b_ub_block <= 0:
        raise TilingError(f"[{OP}] split_load_cross_core: bUbBlock is {b_ub_block}")
    td.update(b1Dim=b1, aDim=a, b0Dim=b0, bAlign=p.b_align, coreChannelNum=each, bUbBlock=b_ub_block,
              coreNum=cores)
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
    td["epsilon"] = p.epsilon
    return SplitLoadCrossCoreTilingData.from_words(td), offset


def _quota(total: int, each: int, need: int, tail: int) -> Split:
    if not 0 < tail <= each:
        raise TilingError(f"[{OP}] the float32 channel split gives a tail of {tail} for {each} per core")
    if tail == each:
        return Split(SplitKind.QUOTA, total, need, each, 0, 0)
    return Split(SplitKind.QUOTA, total, need - 1, each, 1, tail)


def template_ub_bytes(soc: SocSpec) -> int:
    """The UB the templates divide: the SoC's, capped at ``HOST_UB_BYTES`` on the host model."""
    return min(soc.ub_bytes, HOST_UB_BYTES) if soc.arch == HOST else soc.ub_bytes


#: Slots of 8 float32 (one 32-byte block) per core for each cross-core partial.
PARTIAL_SLOT = 8
PHASE_NAMES = ("whole channels", "channel pairs", "channel groups")


@dataclass(frozen=True, kw_only=True)
class FastBatchNormBackwardPlan(Plan):
    op = OP
    explain_properties = ("ub_bytes", "blocks_per_channel", "fold_len", "phases")
    explain_notes = (
        "save_invstd is the reciprocal standard deviation (aclnn parameter table, PyTorch); the A2 kernel "
        "source consumes that input as a variance (sqrt(v + eps)); normkern follows the parameter table",
        "per channel, every UB pass adds dy and (x - mean) * dy elementwise into two float32 buffers of fold_len "
        "elements (a plane at a b1Align pitch), in pass order; each buffer is then one ReduceSum (fold halves)",
        "weight and the statistics are cast to float32 first (op_api), so any float dtype is accepted for them",
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

    def tiling_data_class(self) -> type[TilingData]:
        if self.strategy is S.PLANES:
            raise ValueError("a planes plan (normkern's own) has no CANN TilingData")
        return {S.FULL_LOAD: FullLoadTilingData, S.SPLIT_LOAD: SplitLoadTilingData,
                S.SPLIT_LOAD_CROSS_CORE: SplitLoadCrossCoreTilingData}[self.strategy]

    @property
    def ub_bytes(self) -> int:
        """bytes of UB the templates divide: the SoC's; the host model caps it at HOST_UB_BYTES"""
        return template_ub_bytes(self.soc)

    @property
    def split_hw(self) -> bool:
        """blocks are (plane, HW chunk) pairs (split HW, key offset 0)"""
        return self.strategy in (S.SPLIT_LOAD, S.SPLIT_LOAD_CROSS_CORE) and \
            self.tiling_data["bUbBlock"] < 2 * self.b1_align

    @property
    def hw_blocks(self) -> int:
        if self.strategy is S.PLANES:
            return -(-self.b1 // CHUNK_ELEMS)
        return self.tiling_data["bUbLoop"] if self.split_hw else 1

    @property
    def blocks_per_channel(self) -> int:
        """blocks of one channel: planes, or planes x HW chunks when splitting HW (planes: rows) [blocks]"""
        return self.b0 * self.hw_blocks

    @property
    def planes_per_pass(self) -> int:
        if self.strategy is S.PLANES:
            return 1
        if self.strategy is S.FULL_LOAD:
            return self.b0
        return 1 if self.split_hw else self.tiling_data["b0UbBlock"]

    @property
    def passes(self) -> PassGeometry:
        """how a channel's blocks form UB passes"""
        return PassGeometry(split_hw=int(self.split_hw), hw_blocks=self.hw_blocks, hw_block=self.hw_block, b1=self.b1,
                            planes_per_pass=self.planes_per_pass, b1_align=self.b1_align, fold_len=self.fold_len)

    @property
    def fold_len(self) -> int:
        """elements of the UB buffer a ReduceSum folds (bAlign for full load, else bUbBlock) [elements]"""
        if self.strategy is S.EMPTY:
            return 0
        if self.strategy is S.PLANES:
            return LANES
        return self.b_align if self.strategy is S.FULL_LOAD else self.tiling_data["bUbBlock"]

    @property
    def phases(self) -> str:
        """how each phase hands channels and blocks to cores"""
        parts = []
        if self.strategy is S.EMPTY:
            return "none: nothing to compute"
        if self.strategy is S.PLANES:
            return f"one: {self.a} channels on {self.block_dim} cores, each reduced and its dx written while hot"
        for phase in sorted({job.phase for job in self.jobs()}):
            jobs = [job for job in self.jobs() if job.phase == phase]
            channels = sum(job.channel_count for job in jobs if job.group_first == job.core)
            sizes = sorted({job.group_size for job in jobs})
            parts.append(f"{PHASE_NAMES[phase]}: {channels} ch on {len({j.core for j in jobs})} cores"
                         + (f" (groups of {'/'.join(map(str, sizes))})" if sizes != [1] else ""))
        return "; ".join(parts)

    def index_axes(self) -> tuple[tuple[str, int], tuple[str, int]]:
        return ("channels", self.a), ("blocks of a channel", self.blocks_per_channel)

    def phase_name(self, phase: int) -> str:
        return PHASE_NAMES[phase]

    def shares(self) -> tuple[Share, ...]:
        """Each job: its channels x its blocks, a UB pass every ``pass_step`` blocks from its first."""
        step = self.hw_blocks if self.strategy is S.PLANES else \
            pass_step(self.passes) if self.strategy is not S.EMPTY else 1
        return tuple(Share(job.core, job.phase, (job.channel_start, job.channel_start + job.channel_count),
                           (job.block_start, job.block_start + job.block_count),
                           tuple(range(job.block_start + step, job.block_start + job.block_count, step)))
                     for job in self.jobs())

    def jobs(self) -> tuple[Job, ...]:
        """Every core's work, phase by phase (phases are separated by a SyncAll)."""
        if self.strategy is S.EMPTY:
            return ()
        td, blocks = self.tiling_data, self.blocks_per_channel
        if self.strategy in (S.PLANES, S.FULL_LOAD, S.SPLIT_LOAD):
            return tuple(Job(0, core, start, count, 0, blocks, core, 1)
                         for core, (start, count) in enumerate(self.core_split.ranges()))
        cores, jobs, channel = td["coreNum"], [], 0
        if td["moreMultiChannel"]:
            each = td["coreChannelNum"]
            jobs += [Job(0, core, core * each, each, 0, blocks, core, 1) for core in range(cores)]
            channel = cores * each
        if td["morehalfChannel"]:
            half, tail = td["groupBlockNumHalf"], td["groupBlockNumHalfTail"]
            for core in range(cores // 2 * 2):  # an odd last core would step past the pairs: it idles
                first = core - core % 2
                jobs.append(Job(1, core, channel + core // 2, 1, (core % 2) * half, tail if core % 2 else half,
                                first, 2))
            channel += cores // 2
        if td["groupCore"] and channel < self.a:
            group, each, tail = td["groupCore"], td["groupBlockNum"], td["groupBlockNumTail"]
            for core in range(td["needCoreNum"]):
                index = core % group
                jobs.append(Job(2, core, channel + core // group, 1, index * each,
                                tail if index == group - 1 else each, core - index, group))
        return tuple(jobs)

    def check(self) -> None:
        if self.strategy is S.EMPTY:
            if prod(self.shape):
                raise ValueError("an empty plan for a non-empty problem")
            return
        if self.strategy is S.PLANES:
            if self.tiling_data is not None or self.transposed or self.core_split.total != self.a:
                raise ValueError("a planes plan has no TilingData, no transposition and splits the channels")
            self._check_coverage()
            return
        if type(self.tiling_data) is not self.tiling_data_class():
            raise ValueError(f"tiling_data must be a {self.tiling_data_class().struct}")
        if self.core_split.total != self.a and self.strategy is not S.SPLIT_LOAD_CROSS_CORE:
            raise ValueError(f"core split covers {self.core_split.total} channels, expected {self.a}")
        pass_len = self.hw_block if self.split_hw else self.planes_per_pass * self.b1_align
        if pass_len > self.fold_len:
            raise ValueError(f"a UB pass of {pass_len} elements does not fit the {self.fold_len}-element buffer")
        self._check_coverage()
        if any(job.group_size > 1 for job in self.jobs()):
            for name in ("dbias_partials", "dweight_partials"):
                if self.workspace.region(name).shape != (self.block_dim, PARTIAL_SLOT):
                    raise ValueError(f"workspace region {name} must hold one {PARTIAL_SLOT}-float slot a core")

    @property
    def hw_block(self) -> int:
        return self.tiling_data["bUbBlock"] if self.split_hw else self.b1

    def _check_coverage(self) -> None:
        """Every (channel, block) is reduced by exactly one job; every job's core exists."""
        blocks = self.blocks_per_channel
        whole = np.zeros(self.a + 1, np.int64)   # difference array of whole-channel coverage
        pieces: dict[int, list[tuple[int, int]]] = {}
        for job in self.jobs():
            if not 0 <= job.core < self.block_dim or job.channel_count <= 0 or job.block_count <= 0:
                raise ValueError(f"job {job} is empty or runs on a core past block_dim {self.block_dim}")
            if not job.group_first <= job.core < job.group_first + job.group_size:
                raise ValueError(f"job {job} is not inside its group")
            if job.block_start == 0 and job.block_count == blocks:
                whole[job.channel_start] += 1
                whole[job.channel_start + job.channel_count] -= 1
            else:
                pieces.setdefault(job.channel_start, []).append((job.block_start, job.block_count))
        covered = np.cumsum(whole)[:-1]
        for channel, parts in pieces.items():
            if covered[channel] or sorted(parts)[0][0] != 0:
                raise ValueError(f"channel {channel} is reduced twice or from block {sorted(parts)[0][0]}")
            end = 0
            for start, count in sorted(parts):
                if start != end:
                    how = "twice" if start < end else "by no core"
                    raise ValueError(f"channel {channel}: blocks {end}..{start} are covered {how}")
                end = start + count
            if end != blocks:
                raise ValueError(f"channel {channel}: the groups cover {end} of {blocks} blocks")
            covered[channel] = 1
        if not (covered == 1).all():
            missing = int(np.flatnonzero(covered != 1)[0])
            raise ValueError(f"channel {missing} is covered {covered[missing]} times, not once")

    def summary_ub(self) -> str:
        td = self.tiling_data
        if self.strategy is S.EMPTY:
            return "-"
        if self.strategy is S.PLANES:
            return f"segments of {min(self.b1, CHUNK_ELEMS)}"
        if self.strategy is S.FULL_LOAD:
            return f"{td['cUbBlock']}ch {self.dtype}"
        return f"bUbBlock={td['bUbBlock']} {self.dtype}"

    def kernel_args(self) -> FastBatchNormBackwardArgs | PlanesArgs:
        if self.strategy is S.PLANES:
            return planes_args(self.b0, self.a, self.b1, self.core_split)
        jobs = self.jobs()
        phases = max(job.phase for job in jobs) + 1
        offsets = np.zeros((phases, self.block_dim + 1), np.int64)
        for job in jobs:
            offsets[job.phase, job.core + 1] += 1
        offsets = np.cumsum(offsets, axis=1)
        order = sorted(range(len(jobs)), key=lambda i: (jobs[i].phase, jobs[i].core))
        for phase in range(phases):
            offsets[phase] += sum(1 for job in jobs if job.phase < phase)

        def column(name):
            return np.array([getattr(jobs[i], name) for i in order], np.int64)

        cross = any(job.group_size > 1 for job in jobs)
        return FastBatchNormBackwardArgs(
            b0=self.b0, c=self.a, count=self.b0 * self.b1, **self.passes._asdict(), job_core=column("core"),
            job_channel_start=column("channel_start"), job_channel_count=column("channel_count"),
            job_block_start=column("block_start"), job_block_count=column("block_count"),
            job_group_first=column("group_first"), job_group_size=column("group_size"),
            phase_core_jobs=offsets,
            dbias_offset=self.workspace.region("dbias_partials").offset // 4 if cross else 0,
            dweight_offset=self.workspace.region("dweight_partials").offset // 4 if cross else 0)


def _build(p: FastBatchNormBackwardProblem, strategy: S, rejected) -> FastBatchNormBackwardPlan:
    b0, a, b1, transposed = p.fused
    cores = p.soc.vector_cores
    exact = support(OP, p.soc).tiling == "cann-ops-nn"
    if strategy is S.EMPTY:  # the op_api returns before any tiling: no kernel, no workspace
        return FastBatchNormBackwardPlan(
            soc=p.soc, strategy=strategy, source="cann-ops-nn" if exact else "modeled", tiling_key=None, block_dim=0,
            core_split=Split.even(0, cores), tree=ReductionTree(()), workspace=WorkspaceLayout(0, 0),
            rejected=rejected, tiling_data=None, shape=p.shape, dtype=p.dtype, weight_dtype=p.weight_dtype,
            training=p.training, transposed=False, b0=b0, a=a, b1=b1, b1_align=0, b_align=0)
    if strategy is S.PLANES:  # normkern's own: the op_api's transposition is CANN's, not needed here
        n, c, hxw = p.shape[0], p.shape[1], prod(p.shape[2:])
        core_split = Split.even(c, cores)
        return FastBatchNormBackwardPlan(
            soc=p.soc, strategy=strategy, source="modeled", tiling_key=None, block_dim=core_split.parts,
            core_split=core_split, tree=planes_tree(n, hxw),
            workspace=WorkspaceLayout(p.soc.system_workspace_bytes, 0), rejected=rejected, tiling_data=None,
            shape=p.shape, dtype=p.dtype, weight_dtype=p.weight_dtype, training=p.training, transposed=False,
            b0=n, a=c, b1=hxw, b1_align=p.b1_align, b_align=p.b1_align * n)
    fold = ReduceLevel("lanes", Combine.PAIRWISE, LANES,
                       "ReduceSum of the buffer: fold halves down to 64, then pairwise (A2 order, modeled)")
    regions: tuple = ()
    if strategy is S.FULL_LOAD:
        td, core_split = _full_load(p)
        key = KEY_TRAIN_FULL_LOAD if p.training else KEY_INFER_FULL_LOAD
        block_dim = td["needCoreNum"]
        levels = (ReduceLevel("ub_passes", Combine.SEQUENTIAL, 1, "a channel's B0 planes in one UB pass"), fold)
    elif strategy is S.SPLIT_LOAD:
        td, core_split, offset = _split_load(p)
        key = (KEY_TRAIN_SPLIT_LOAD if p.training else KEY_INFER_SPLIT_LOAD) + offset
        block_dim = td["needCoreNum"]
        levels = (ReduceLevel("ub_passes", Combine.SEQUENTIAL, td["bUbLoop"] * (b0 if offset == 0 else 1),
                              "a channel's UB passes added elementwise, in order"), fold)
    else:
        td, offset = _cross_core(p)
        key = (KEY_TRAIN_SPLIT_LOAD if p.training else KEY_INFER_SPLIT_LOAD) + CROSS_CORE_KEY_OFFSET + offset
        block_dim = cores if td["moreMultiChannel"] or td["morehalfChannel"] else td["needCoreNum"]
        core_split = Split.even(block_dim, block_dim)
        passes = td["bUbLoopMulti"] * (b0 if offset == 0 else 1)
        levels = (ReduceLevel("ub_passes", Combine.SEQUENTIAL, passes,
                              "a core's UB passes added elementwise, in order"), fold,
                  ReduceLevel("cores", Combine.SEQUENTIAL, max(td["groupCore"], 2 if td["morehalfChannel"] else 1),
                              "a channel group's per-core partials in the workspace, added in core order"))
        regions = (("dbias_partials", (block_dim, PARTIAL_SLOT)), ("dweight_partials", (block_dim, PARTIAL_SLOT)))
    if block_dim > cores:
        raise TilingError(f"[{OP}] {strategy.value} needs {block_dim} cores, {p.soc.name} has {cores}")
    workspace = WorkspaceLayout.build(p.soc.system_workspace_bytes, regions)
    return FastBatchNormBackwardPlan(
        soc=p.soc, strategy=strategy, source="cann-ops-nn" if exact else "modeled", tiling_key=key if exact else None,
        block_dim=block_dim, core_split=core_split, tree=ReductionTree(levels, LaneOrder.FOLD_HALVES),
        workspace=workspace, rejected=rejected, tiling_data=td, shape=p.shape, dtype=p.dtype,
        weight_dtype=p.weight_dtype, training=p.training, transposed=transposed, b0=b0, a=a, b1=b1,
        b1_align=p.b1_align, b_align=p.b_align)


def _check_empty(p):
    if prod(p.shape):
        return Rejection("empty", f"input has {prod(p.shape)} elements", True)
    return None


def _not_empty(strategy: S, check):
    """``check`` behind the rule every kernel template shares: there are elements to compute."""
    def checked(p):
        if not prod(p.shape):
            return Rejection(strategy.value, "input is empty", True)
        return check(p)
    return checked


#: Whether a host SoC plans ``planes`` unless another strategy is asked for (tests of the templates' host model
#: turn it off to have the templates chosen at small shapes).
HOST_OWN_PLAN = True


def _check_planes(p):
    if p.soc.arch != HOST:
        return Rejection("planes", f"normkern's own CPU plan; {p.soc.name} runs the BatchNormGradV3 templates", True)
    if not HOST_OWN_PLAN:
        return Rejection("planes", "the BatchNormGradV3 templates' host model was asked for", False)
    return None


def _plane_passes(p) -> bool:
    """Whether the host model takes one plane a UB pass (``HOST_PLANE_PASS_MAX``)."""
    return p.soc.arch == HOST and p.fused[2] <= HOST_PLANE_PASS_MAX


def _check_full_load(p):
    if _plane_passes(p):
        return Rejection("full_load", f"host: planes of B1={p.fused[2]} <= {HOST_PLANE_PASS_MAX} go one a pass "
                         "(split_load)", False)
    limit = FULL_LOAD_TRAIN_LIMIT if p.training else FULL_LOAD_INFER_LIMIT
    if p.b_align > limit:
        return Rejection("full_load", f"bAlign={p.b_align} > {limit}", True)
    if _full_load(p)[0]["cUbBlock"] < 1:  # never on A2 (12000 * 16 B < UB); possible on a custom SoC
        return Rejection("full_load", f"a {p.ub_bytes}-byte UB holds no channel of bAlign={p.b_align}", True)
    return None


def _check_cross_core(p):
    if p.b_align < CROSS_CORE_LIMIT:
        return Rejection("split_load_cross_core", f"bAlign={p.b_align} < {CROSS_CORE_LIMIT}", True)
    if p.fused[1] % p.soc.vector_cores == 0:
        return Rejection("split_load_cross_core", f"C={p.fused[1]} is a multiple of {p.soc.vector_cores} cores",
                         True)
    return None


_CHECKS = {S.EMPTY: _check_empty, S.PLANES: _not_empty(S.PLANES, _check_planes),
           S.FULL_LOAD: _not_empty(S.FULL_LOAD, _check_full_load),
           S.SPLIT_LOAD_CROSS_CORE: _not_empty(S.SPLIT_LOAD_CROSS_CORE, _check_cross_core),
           S.SPLIT_LOAD: _not_empty(S.SPLIT_LOAD, lambda p: None)}


def _registry(order: tuple[S, ...]) -> StrategyRegistry:
    return StrategyRegistry(OP, S, tuple(Strategy(s, _CHECKS[s], lambda p, r, s=s: _build(p, s, r)) for s in order))


#: The NPUs' order: CANN's templates (``planes`` last, which split_load always precedes: only asked for, refused);
#: the host's: normkern's own plan first, the templates' host model when asked for.
REGISTRY = _registry((S.EMPTY, S.FULL_LOAD, S.SPLIT_LOAD_CROSS_CORE, S.SPLIT_LOAD, S.PLANES))
HOST_REGISTRY = _registry((S.EMPTY, S.PLANES, S.FULL_LOAD, S.SPLIT_LOAD_CROSS_CORE, S.SPLIT_LOAD))


def plan_fast_batch_norm_backward(shape, dtype="float32", soc: str | SocSpec | None = None,
                                  strategy: str | S | None = None, *, training: bool = True,
                                  weight_dtype=None, var_dtype=None, epsilon: float = 1e-5
                                  ) -> FastBatchNormBackwardPlan:
    """Plan BatchNormGradV3 for ``grad_out``/``input`` of ``shape``; weight and statistics dtypes
    default to ``dtype``. ``epsilon`` (the call's eps) is the struct's last word, as a float32."""
    name = dtype_name(dtype)
    weight = name if weight_dtype is None else dtype_name(weight_dtype)
    var = weight if var_dtype is None else dtype_name(var_dtype)
    return _plan_cached(tuple(int(d) for d in shape), name, weight, var, bool(training), get_soc(soc),
                        REGISTRY.parse(strategy), epsilon)


@lru_cache(maxsize=256)
def _plan_cached(shape, dtype, weight, var, training, soc, strategy, epsilon):
    epsilon = float(np.float32(epsilon))  # the struct's float word
    require(OP, soc, dtype)
    if not 2 <= len(shape) <= 8 or min(shape) < 0:
        raise TilingError(f"[{OP}] input must have rank 2 to 8 and no negative dim, got {shape}")
    if (dtype, weight, var) not in VALID_DTYPES:
        raise TilingError(f"[{OP}] dtypes (dy, weight, running_var) = ({dtype}, {weight}, {var}) are not a "
                          "supported combination")
    registry = HOST_REGISTRY if soc.arch == HOST else REGISTRY
    return registry.plan(FastBatchNormBackwardProblem(shape, dtype, weight, var, training, soc, epsilon), strategy)
