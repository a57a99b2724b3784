"""Elementwise plans: BatchNormElemt and BatchNormElemtBackward (``source="modeled"`` everywhere).

Both ops map each element of ``x`` (shape ``(N, C, *spatial)``) through per-channel coefficients;
no element depends on another, so the plan fixes only who computes what, never a result bit:

- BatchNormElemt (``norm/batch_norm_elemt``): the op_api recomputes ``var = 1/invstd^2 - eps`` and
  calls the BatchNorm inference kernel (closed TBE on A2/A3 and Atlas training; no 950 kernel).
- BatchNormElemtBackward (``norm/sync_batch_norm_backward_elemt``): the op_api sums the per-device
  ``counter`` (ReduceSum, float32), divides ``sumDy`` and ``sumDyXmu`` by it, broadcasts every
  per-channel tensor to the input's shape and runs the SyncBatchNormBackwardElemt kernel: the atvoss
  elementwise template on Ascend 950 (tiling key 0, its DAG public), closed TBE elsewhere.

The host SoC first tries a plan of normkern's own, ``channels``: each core owns whole channels and walks their planes
in memory order (plane ``n`` of its every channel, then plane ``n + 1``), so a plane's coefficients are read once
and no element range is cut mid-plane. No element depends on another: its bits are every plan's.

The NPUs' split is a model of the atvoss elementwise template (``ElewiseTilingData``: ``dim0``,
``blockFormer``, ``blockNum``, ``ubFormer``, loops and tails per block), whose host code lives in
ops-base, not ops-nn: the flat element range goes to cores in ``block_former`` elements (a
multiple of one 256-byte float32 register), each core walks its range in UB blocks of
``ub_former`` elements. UB bytes per element: the inputs and the output, double-buffered, plus two
float32 temporaries. The workspace is the kernel's (the system part): the intermediate tensors the
op_api allocates (casts; on 950 the five broadcasts of the per-channel tensors) are not modeled.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from functools import lru_cache
from math import prod
from typing import NamedTuple

import numpy as np

from .batch_norm_stats import check_shape
from .picture import Share
from .plan import Plan, Rejection, Strategy, StrategyRegistry, TilingError, dtype_name, unit
from .reduction import LANES, Combine, ReduceLevel, ReductionTree
from .soc import A2_A3, ASCEND950, ATLAS_TRAINING, DTYPE_BYTES, HOST, SocSpec, get_soc
from .split import Split
from .support import require
from .workspace import WorkspaceLayout, align_up

RESERVE_BYTES = 1024
#: Elements of one 256-byte float32 vector register: the unit of every split.
ALIGN = LANES
#: The tiling key of the arch35 elementwise template (the only one SyncBatchNormBackwardElemt sets).
ARCH35_KEY = 0


class ElementwiseStrategy(enum.Enum):
    EMPTY = "empty"
    ELEMENTWISE = "elementwise"
    CHANNELS = "channels"


class ElementwiseArgs(NamedTuple):
    """What the kernels receive: each core's flat element range (``channels``: its channels) and the geometry."""

    n: int
    c: int
    hxw: int
    core_start: np.ndarray
    core_count: np.ndarray


@dataclass(frozen=True, kw_only=True)
class ElementwisePlan(Plan):
    explain_properties = ("ub_bytes_used",)

    strategy: ElementwiseStrategy
    shape: tuple[int, ...] = unit("", "input shape (N, C, *spatial)")
    dtype: str = unit("", "input and output dtype")
    stats_dtype: str = unit("", "dtype of the per-channel tensors")
    c: int = unit("", "C, channels")
    hxw: int = unit("elements", "plane size, product of the spatial dims")
    elems: int = unit("elements", "dim0: every element, flattened")
    io_tensors: int = unit("", "element-sized tensors the kernel reads and writes")
    bytes_per_elem: int = unit("bytes", "UB bytes per element (double-buffered I/O + float32 temporaries)")
    block_former: int = unit("elements", "blockFormer: elements per core (the last core takes the rest)")
    ub_former: int = unit("elements", "ubFormer: elements per UB block")
    block_split: Split = unit("", "a full core's elements over UB blocks")
    tail_block_split: Split = unit("", "the last core's elements over UB blocks")

    def check(self) -> None:
        if prod(self.shape) != self.elems or self.shape[1] != self.c or self.elems != self.c * self.hxw * self.shape[0]:
            raise ValueError(f"plan dims do not match shape {self.shape}")
        if self.strategy is ElementwiseStrategy.EMPTY:
            if self.elems:
                raise ValueError("an empty plan for a non-empty problem")
            return
        if self.strategy is ElementwiseStrategy.CHANNELS:
            if self.core_split.total != self.c:
                raise ValueError(f"core split covers {self.core_split.total} channels, expected {self.c}")
            return
        if self.core_split.total != self.elems or self.core_split.big_items != self.block_former:
            raise ValueError("the core split must hand out block_former elements per core, all of them")
        if self.block_former % ALIGN and self.core_split.parts > 1:
            raise ValueError(f"block_former {self.block_former} is not a multiple of {ALIGN}")
        tail = self.core_split.ranges()[-1][1]
        if self.block_split.total != self.block_former or self.tail_block_split.total != tail:
            raise ValueError("UB block splits do not cover the cores' ranges")
        if self.ub_bytes_used > self.soc.ub_bytes:
            raise ValueError(f"UB block needs {self.ub_bytes_used} bytes, {self.soc.name} has {self.soc.ub_bytes}")

    @property
    def ub_bytes_used(self) -> int:
        """UB bytes one block occupies [bytes]"""
        return self.ub_former * self.bytes_per_elem + RESERVE_BYTES if self.ub_former else 0

    def index_axes(self) -> tuple[tuple[str, int], tuple[str, int]]:
        if self.strategy is ElementwiseStrategy.CHANNELS:
            return ("channels", self.c), ("planes", self.shape[0])
        return ("", 1), ("elements", self.elems)

    def shares(self) -> tuple[Share, ...]:
        ranges = self.core_split.ranges()
        if self.strategy is ElementwiseStrategy.CHANNELS:
            return tuple(Share(core, 0, (start, start + count), (0, self.shape[0]), ())
                         for core, (start, count) in enumerate(ranges) if count)
        return tuple(Share(core, 0, (0, 1), (start, start + count),
                           tuple(start + s for s in (self.tail_block_split if core == len(ranges) - 1
                                                     else self.block_split).starts()[1:]))
                     for core, (start, count) in enumerate(ranges) if count)

    def summary_ub(self) -> str:
        if self.strategy is ElementwiseStrategy.CHANNELS:
            return f"planes of {self.hxw}"
        return f"{self.ub_former} {self.dtype}/block"

    def kernel_args(self) -> ElementwiseArgs:
        ranges = self.core_split.ranges()
        return ElementwiseArgs(
            n=self.shape[0], c=self.c, hxw=self.hxw,
            core_start=np.array([s for s, _ in ranges], dtype=np.int64),
            core_count=np.array([n for _, n in ranges], dtype=np.int64))


@dataclass(frozen=True, kw_only=True)
class BatchNormElemtPlan(ElementwisePlan):
    op = "batch_norm_elemt"
    explain_notes = (
        "y = ((x - mean) * r) * weight + bias per element, in float32, r per channel",
        "recompute_var: r = 1/sqrt((1/invstd^2 - eps) + eps) as the op_api and the inference kernel; "
        "else r = invstd",
    )

    recompute_var: bool = unit("", "r from the variance the op_api recomputes (NPU plans); else r = invstd (host)")


@dataclass(frozen=True, kw_only=True)
class BatchNormElemtBackwardPlan(ElementwisePlan):
    op = "batch_norm_backward_elemt"
    explain_notes = (
        "n = sum of counter (float32, index order); mean_dy = sum_dy / n, mean_dy_xmu = sum_dy_xmu / n",
        "grad_input = ((dy - mean_dy) - (x - mean) * (mean_dy_xmu * invstd^2)) * (invstd * weight), float32",
        "the means are rounded to float16 when every per-channel tensor is float16 (the op_api's promotion)",
    )

    devices: int = unit("", "entries of counter (devices)")


@dataclass(frozen=True)
class _Problem:
    op: str
    shape: tuple[int, ...]
    dtype: str
    stats_dtype: str
    soc: SocSpec
    devices: int

    @property
    def elems(self) -> int:
        return prod(self.shape)

    @property
    def io_tensors(self) -> tuple[int, int]:
        """(element-sized data tensors, per-channel tensors the op_api broadcasts to the element shape): x and
        y, or dy, x and dx; the 950 BatchNormElemtBackward path also broadcasts its five per-channel tensors
        (the TBE kernels take per-channel vectors)."""
        if self.op == "batch_norm_elemt":
            return 2, 0
        return 3, 5 if self.soc.arch == ASCEND950 else 0

    @property
    def bytes_per_elem(self) -> int:
        tensors, broadcasts = self.io_tensors
        io = tensors * DTYPE_BYTES[self.dtype] + broadcasts * DTYPE_BYTES[self.stats_dtype]
        return 2 * io + 2 * DTYPE_BYTES["float32"]


def _build(problem: _Problem, strategy: ElementwiseStrategy, rejected: tuple[Rejection, ...]) -> ElementwisePlan:
    soc = problem.soc
    elems = problem.elems
    common = dict(soc=soc, strategy=strategy, source="modeled", rejected=rejected, tiling_data=None,
                  tiling_key=ARCH35_KEY if soc.arch == ASCEND950 and problem.op != "batch_norm_elemt" else None,
                  shape=problem.shape, dtype=problem.dtype, stats_dtype=problem.stats_dtype, c=problem.shape[1],
                  hxw=prod(problem.shape[2:]), elems=elems,
                  io_tensors=sum(problem.io_tensors),
                  bytes_per_elem=problem.bytes_per_elem)
    if problem.op == "batch_norm_elemt":
        common["recompute_var"] = soc.arch in (A2_A3, ATLAS_TRAINING)
        plan_class = BatchNormElemtPlan
    else:
        common["devices"] = problem.devices
        plan_class = BatchNormElemtBackwardPlan
    tree = ReductionTree(())
    if problem.op == "batch_norm_backward_elemt" and problem.devices:
        tree = ReductionTree((ReduceLevel("counter", Combine.SEQUENTIAL, problem.devices,
                                          "counter entries added in index order (float32)"),))
    if strategy is ElementwiseStrategy.EMPTY:
        return plan_class(**common, block_dim=0, core_split=Split.blocks(0, 1), tree=tree,
                          workspace=WorkspaceLayout(0, 0), block_former=0, ub_former=0,
                          block_split=Split.blocks(0, 1), tail_block_split=Split.blocks(0, 1))
    if strategy is ElementwiseStrategy.CHANNELS:
        core_split = Split.even(problem.shape[1], soc.vector_cores)
        return plan_class(**common, block_dim=core_split.parts, core_split=core_split, tree=tree,
                          workspace=WorkspaceLayout(soc.system_workspace_bytes, 0), block_former=0, ub_former=0,
                          block_split=Split.blocks(0, 1), tail_block_split=Split.blocks(0, 1))
    capacity = (soc.ub_bytes - RESERVE_BYTES) // problem.bytes_per_elem // ALIGN * ALIGN
    if capacity < ALIGN:
        raise TilingError(f"[{problem.op}] UB of {soc.ub_bytes} bytes cannot hold one {ALIGN}-element block")
    block_former = min(align_up(-(-elems // soc.vector_cores), ALIGN), elems)
    core_split = Split.blocks(elems, block_former)
    ub_former = min(capacity, block_former)
    return plan_class(
        **common, block_dim=core_split.parts, core_split=core_split, tree=tree,
        workspace=WorkspaceLayout(soc.system_workspace_bytes, 0), block_former=block_former, ub_former=ub_former,
        block_split=Split.blocks(block_former, ub_former),
        tail_block_split=Split.blocks(core_split.ranges()[-1][1], ub_former))


def _check_empty(problem):
    if problem.elems:
        return Rejection("empty", f"the input has {problem.elems} elements", True)
    return None


def _check_elementwise(problem):
    if not problem.elems:
        return Rejection("elementwise", "no elements", True)
    return None


def _check_channels(problem):
    if problem.soc.arch != HOST:
        return Rejection("channels", f"normkern's own CPU plan; {problem.soc.name} runs the elementwise template", True)
    if not problem.elems:
        return Rejection("channels", "no elements", True)
    return None


def _registry(op: str, host: bool) -> StrategyRegistry:
    """The empty exit, then normkern's own plan first on the host, the template's model first (and the own plan
    refused) on the NPUs."""
    empty = Strategy(ElementwiseStrategy.EMPTY, _check_empty, lambda p, r: _build(p, ElementwiseStrategy.EMPTY, r))
    template = Strategy(ElementwiseStrategy.ELEMENTWISE, _check_elementwise,
                        lambda p, r: _build(p, ElementwiseStrategy.ELEMENTWISE, r))
    own = Strategy(ElementwiseStrategy.CHANNELS, _check_channels,
                   lambda p, r: _build(p, ElementwiseStrategy.CHANNELS, r))
    return StrategyRegistry(op, ElementwiseStrategy, (empty, own, template) if host else (empty, template, own))


REGISTRIES = {(op, host): _registry(op, host) for op in ("batch_norm_elemt", "batch_norm_backward_elemt")
              for host in (False, True)}


@lru_cache(maxsize=256)
def _plan_cached(op, shape, dtype, stats_dtype, soc, strategy, devices) -> ElementwisePlan:
    check_shape(op, shape)
    entry = require(op, soc, dtype)
    if stats_dtype != dtype:
        if stats_dtype != "float32" or not entry.mixed:
            allowed = f"the input's ({dtype}) or float32" if entry.mixed else f"the input's ({dtype})"
            raise TilingError(f"[{op}] stats dtype must be {allowed} on {soc.name}, got {stats_dtype}")
        if soc.arch == ASCEND950 and dtype != "float16":
            # SyncBatchNormBackwardElemt's arch35 tiling: float32 statistics only beside float16 data
            raise TilingError(f"[{op}] stats dtype must equal the input's ({dtype}) on {soc.name} unless the "
                              f"input is float16 (SyncBatchNormBackwardElemt tiling), got {stats_dtype}")
    return REGISTRIES[op, soc.arch == HOST].plan(_Problem(op, shape, dtype, stats_dtype, soc, devices), strategy)


def plan_batch_norm_elemt(shape, dtype="float32", soc: str | SocSpec | None = None,
                          strategy: str | ElementwiseStrategy | None = None, *,
                          stats_dtype=None) -> BatchNormElemtPlan:
    """Plan BatchNormElemt for ``input`` of ``shape``/``dtype``; ``stats_dtype`` (default ``dtype``) is
    the dtype of mean, invstd, weight and bias."""
    dtype = dtype_name(dtype)
    return _plan_cached("batch_norm_elemt", tuple(int(d) for d in shape), dtype,
                        dtype_name(stats_dtype) if stats_dtype is not None else dtype, get_soc(soc),
                        REGISTRIES["batch_norm_elemt", True].parse(strategy), 0)


def plan_batch_norm_backward_elemt(shape, dtype="float32", soc: str | SocSpec | None = None,
                                   strategy: str | ElementwiseStrategy | None = None, *,
                                   stats_dtype=None, devices: int = 1) -> BatchNormElemtBackwardPlan:
    """Plan BatchNormElemtBackward for ``grad_out``/``input`` of ``shape``/``dtype``, per-channel tensors of
    ``stats_dtype`` (default ``dtype``) and a ``counter`` of ``devices`` entries."""
    dtype = dtype_name(dtype)
    if int(devices) < 0:
        raise TilingError(f"[batch_norm_backward_elemt] devices must be >= 0, got {devices}")
    return _plan_cached("batch_norm_backward_elemt", tuple(int(d) for d in shape), dtype,
                        dtype_name(stats_dtype) if stats_dtype is not None else dtype, get_soc(soc),
                        REGISTRIES["batch_norm_backward_elemt", True].parse(strategy), int(devices))
