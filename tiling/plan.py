"""The frozen plan every planner returns, and the strategy registry that picks one.

A plan is a pure function of (problem, SoC, forced strategy). It checks its own invariants when
built, prints itself (``str`` one line, ``explain()`` a table made from its fields), round-trips
through JSON with a schema version, and lowers to the ``NamedTuple`` of ints and small int64
arrays that the kernels receive (``kernel_args()``).
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from .codec import from_data, to_data
from .picture import Share, plan_svg
from .reduction import ReductionTree
from .soc import SocSpec
from .split import Split
from .tiling_data import TilingData
from .workspace import WorkspaceLayout

SCHEMA_VERSION = 1

#: ACLNN_ERR_INNER_TILING_ERROR, the status a failed tiling reports.
TILING_ERROR_STATUS = 561002


class TilingError(ValueError):
    """A problem the planner cannot tile (or an invalid forced strategy)."""

    status = TILING_ERROR_STATUS


def dtype_name(dtype) -> str:
    """A planner's dtype argument (a name, or anything ``np.dtype`` takes) as its name."""
    return dtype if isinstance(dtype, str) else np.dtype(dtype).name


def unit(text: str, doc: str = ""):
    """Field metadata shown by ``Plan.explain()``."""
    return field(metadata={"unit": text, "doc": doc})


@dataclass(frozen=True)
class Rejection:
    """Why a strategy was not chosen. ``hard``: it cannot run this problem at all."""

    strategy: str
    reason: str
    hard: bool


@dataclass(frozen=True, kw_only=True)
class Plan:
    op: ClassVar[str] = ""
    #: Sentences ``explain()`` appends: what the fields alone do not say.
    explain_notes: ClassVar[tuple[str, ...]] = ()
    #: Derived properties ``explain()`` shows after the fields, each with its docstring.
    explain_properties: ClassVar[tuple[str, ...]] = ()
    _registry: ClassVar[dict[str, dict[str | None, type[Plan]]]] = {}
    #: The strategies (by value) this class plans, where an op's plans are of more than one class (a plan of
    #: normkern's own beside the templates' model); None: every other strategy of its op.
    own_strategies: ClassVar[tuple[str, ...] | None] = None

    soc: SocSpec
    strategy: enum.Enum
    source: str = unit("", '"cann-ops-nn": reproduces public CANN host code; "modeled": our own model')
    tiling_key: int | None = unit("", "CANN tiling key, None where no CANN tiling exists")
    block_dim: int = unit("cores", "cores launched (cores past the split's own idle)")
    core_split: Split = unit("", "work items per core")
    tree: ReductionTree = unit("", "reduction order, innermost level first")
    workspace: WorkspaceLayout = unit("bytes", "system + user workspace")
    rejected: tuple[Rejection, ...] = unit("", "strategies tried before this one, and why not")
    tiling_data: TilingData | None = unit("", "CANN TilingData struct, where reproduced")

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if cls.op:
            classes = Plan._registry.setdefault(cls.op, {})
            for strategy in cls.own_strategies or (None,):
                classes[strategy] = cls

    def __post_init__(self) -> None:
        if isinstance(self.tiling_data, dict):  # from JSON: the words, made the template's record again
            object.__setattr__(self, "tiling_data", self.tiling_data_class().from_words(self.tiling_data))
        if self.source not in ("cann-ops-nn", "modeled"):
            raise ValueError(f"plan source must be 'cann-ops-nn' or 'modeled', got {self.source!r}")
        if self.core_split.parts > self.block_dim:
            raise ValueError(f"the split uses {self.core_split.parts} cores, more than block_dim {self.block_dim}")
        if self.block_dim > self.soc.vector_cores:
            raise ValueError(f"block_dim {self.block_dim} exceeds {self.soc.name}'s {self.soc.vector_cores} cores")
        system = self.soc.system_workspace_bytes if self.block_dim else 0
        if self.workspace.system_bytes != system:
            raise ValueError(f"workspace system bytes {self.workspace.system_bytes} != {system} "
                             "(the SoC's system workspace, or 0 when no kernel is launched)")
        self.check()

    def check(self) -> None:
        """Op-specific invariants; subclasses raise ValueError when one fails."""

    def tiling_data_class(self) -> type[TilingData]:
        """The TilingData record of this plan's template (plans that reproduce CANN code override it)."""
        raise ValueError(f"{type(self).__name__} has no CANN TilingData")

    @property
    def deterministic(self) -> bool:
        """Derived from the reduction tree: no atomic level with more than two addends."""
        return self.tree.deterministic

    def kernel_args(self):
        raise NotImplementedError

    def summary_ub(self) -> str:
        """The UB part of ``str(plan)``; subclasses describe their blocks."""
        return ""

    def __str__(self) -> str:
        parts = [
            f"{self.op}[{self.strategy.value}]",
            self.soc.name,
            f"cores={self.block_dim} ({self.core_split.describe()})",
            f"ub={self.summary_ub()}",
            f"tree={self.tree.describe()}",
            f"ws={self.workspace.describe()}",
        ]
        if self.tiling_key is not None:
            parts.insert(2, f"key={self.tiling_key}")
        if not self.deterministic:
            parts.append("non-deterministic")
        return " ".join(parts)

    def explain_rows(self) -> list[tuple[str, str, str]]:
        """``(field, value, meaning)`` rows, generated from the dataclass fields."""
        rows: list[tuple[str, str, str]] = []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            meaning = f.metadata.get("doc", "")
            if f.metadata.get("unit"):
                meaning = f"{meaning} [{f.metadata['unit']}]".strip()
            if f.name == "soc":
                rows.append(("soc", value.name, f"{value.product}, {value.vector_cores} vector cores, "
                             f"UB {value.ub_bytes} B"))
            elif isinstance(value, Split) and f.name != "core_split":
                rows.append((f.name, f"{value.kind.value} {value.describe()}", meaning))
            elif f.name == "core_split":
                ranges = value.ranges()
                shown = ", ".join(f"{s}+{c}" for s, c in ranges[:4]) + (" ..." if len(ranges) > 4 else "")
                rows.append(("core_split", f"{value.kind.value} {value.describe()}", f"start+count: {shown}"))
            elif f.name == "tree":
                for level in value.levels:
                    rows.append((f"tree.{level.name}", f"{level.combine.value} x{level.fan_in}", level.detail))
                if any(level.name == "lanes" for level in value.levels):
                    rows.append(("tree.lane_order", value.lane_order.value, ""))
            elif f.name == "workspace":
                rows.append(("workspace.system", str(value.system_bytes), "bytes reserved for the runtime"))
                rows.append(("workspace.user", str(value.user_bytes), "bytes the kernel uses"))
                for region in value.regions:
                    rows.append((f"workspace.{region.name}", f"@{region.offset} {region.nbytes} B",
                                 f"{region.dtype} {region.shape}"))
            elif f.name == "rejected":
                for r in value:
                    rows.append((f"rejected.{r.strategy}", "cannot run" if r.hard else "not preferred", r.reason))
            elif f.name == "tiling_data":
                for key, v in (value or {}).items():
                    rows.append((f"tiling_data.{key}", str(v), ""))
            else:
                shown = value.value if isinstance(value, enum.Enum) else value
                rows.append((f.name, str(shown), meaning))
        for name in self.explain_properties:
            doc = (getattr(type(self), name).__doc__ or "").strip()
            rows.append((name, str(getattr(self, name)), doc))
        rows.append(("deterministic", str(self.deterministic), "derived from the reduction tree"))
        rows.extend(("note", "", text) for text in self.explain_notes)
        return rows

    def explain(self) -> str:
        rows = [("field", "value", "meaning")] + self.explain_rows()
        widths = [max(len(r[i]) for r in rows) for i in range(2)]
        lines = [str(self), ""]
        for name, value, meaning in rows:
            lines.append(f"{name:<{widths[0]}}  {value:<{widths[1]}}  {meaning}".rstrip())
        return "\n".join(lines)

    def index_axes(self) -> tuple[tuple[str, int], tuple[str, int]]:
        """The two axes of the problem's index space the picture draws, ``((name, extent), (name, extent))``;
        the rows axis of a one-axis plan has extent 1."""
        return ("", 1), ("items", self.core_split.total)

    def shares(self) -> tuple[Share, ...]:
        """Each core's part of the index space (``index_axes``), with its UB blocks: by default its range of
        the core split along the columns, no blocks."""
        return tuple(Share(core, 0, (0, 1), (start, start + count))
                     for core, (start, count) in enumerate(self.core_split.ranges()) if count)

    def phase_name(self, phase: int) -> str:
        """What the picture calls a phase of ``shares()`` (plans whose cores meet at a SyncAll have several)."""
        return f"phase {phase}"

    def to_svg(self, arrival=None) -> str:
        """The plan as an SVG picture (``tiling.picture``): the index space with each core's share and its
        UB blocks, the reduction tree (``arrival``: an example arrival order of an atomic level), the
        workspace regions, and a legend."""
        return plan_svg(self, arrival)

    def to_json(self, indent: int | None = 2) -> str:
        payload = {"schema_version": SCHEMA_VERSION, "op": self.op, "plan": to_data(self)}
        return json.dumps(payload, indent=indent)

    @classmethod
    def from_json(cls, text: str) -> Plan:
        payload = json.loads(text)
        version = payload.get("schema_version")
        if version != SCHEMA_VERSION:
            raise ValueError(f"plan schema version {version!r} is not supported (expected {SCHEMA_VERSION})")
        classes = Plan._registry.get(payload.get("op"))
        if classes is None:
            raise ValueError(f"unknown plan op {payload.get('op')!r}")
        plan_cls = classes.get(payload["plan"].get("strategy"), classes.get(None))
        if cls is not Plan and plan_cls is not cls:
            raise ValueError(f"JSON holds a {plan_cls.__name__}, not a {cls.__name__}")
        return from_data(plan_cls, payload["plan"])


@dataclass(frozen=True)
class Strategy:
    """A named strategy: ``check(problem)`` returns a Rejection or None; ``build`` makes the plan."""

    name: enum.Enum
    check: Callable[[object], Rejection | None]
    build: Callable[[object, tuple[Rejection, ...]], Plan]


class UnknownStrategyError(TilingError):
    """A strategy name that is not one of the op's; ``names`` lists the op's."""

    def __init__(self, message: str, names: str) -> None:
        super().__init__(message)
        self.names = names


def parse_strategy(op: str, strategy_enum: type[enum.Enum], strategy) -> enum.Enum | None:
    """An op's strategy Enum from the Enum itself, its value, or None (the planner chooses)."""
    if strategy is None or isinstance(strategy, strategy_enum):
        return strategy
    try:
        return strategy_enum(strategy)
    except ValueError:
        names = ", ".join(s.value for s in strategy_enum)
        raise UnknownStrategyError(f"[{op}] strategy must be one of {names}, got {strategy!r}", names) from None


class StrategyRegistry:
    """Tries strategies in priority order and records why the earlier ones were passed over."""

    def __init__(self, op: str, strategy_enum: type[enum.Enum], strategies: tuple[Strategy, ...]):
        self.op = op
        self.strategy_enum = strategy_enum
        self.strategies = strategies

    def parse(self, strategy) -> enum.Enum | None:
        return parse_strategy(self.op, self.strategy_enum, strategy)

    def plan(self, problem, strategy=None) -> Plan:
        forced = self.parse(strategy)
        rejected: list[Rejection] = []
        for candidate in self.strategies:
            rejection = candidate.check(problem)
            if forced is not None:
                if candidate.name is not forced:
                    continue
                if rejection is not None and rejection.hard:
                    raise TilingError(f"[{self.op}] strategy {forced.value} cannot run this problem: "
                                      f"{rejection.reason}")
                return candidate.build(problem, ())
            if rejection is None:
                return candidate.build(problem, tuple(rejected))
            rejected.append(rejection)
        reasons = "; ".join(f"{r.strategy}: {r.reason}" for r in rejected)
        raise TilingError(f"[{self.op}] no strategy can tile this problem ({reasons})")
