"""Reduction order as data.

A :class:`ReductionTree` lists, from the innermost level out, how partial sums are combined:

- ``lanes``: inside one UB block, 64 float32 lane accumulators (one 256-byte vector). Lane ``j``
  adds, in ascending order, the elements of each row at positions ``j, j+64, j+128, ...``; every row
  starts at lane 0 (rows sit in UB at a 64-element pitch). The 64 lanes are then folded pairwise:
  ``lane[j] += lane[j+32]`` for j < 32, then 16, 8, 4, 2, 1.
- ``blocks``: block sums added one after another in block order, onto 0.
- ``cores``: per-core partials written to the workspace and added in core order (``sequential``) or
  added in the order they arrive (``atomic``).

A level whose combine is ``atomic`` with more than two addends onto zero makes the plan
non-deterministic: floating-point addition is commutative, so two addends onto zero give one
result in any order, but three or more do not associate.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Combine(Enum):
    SEQUENTIAL = "sequential"
    PAIRWISE = "pairwise"
    ATOMIC = "atomic"


class LaneOrder(Enum):
    """The exact orders of the lanes level (SPEC §3), and the 950 arch35 kernels' binary add
    (``CalBinaryParams``: the tail added onto a power-of-two quotient, a register sum per 64, those halved)."""

    INTERLEAVED = "interleaved"
    FOLD_HALVES = "fold_halves"
    BINARY_ADD = "binary_add"


LANES = 64


@dataclass(frozen=True)
class ReduceLevel:
    name: str
    combine: Combine
    fan_in: int
    detail: str = ""

    def __post_init__(self) -> None:
        if self.fan_in < 0:
            raise ValueError(f"fan_in must be >= 0, got {self.fan_in}")

    @property
    def deterministic(self) -> bool:
        return self.combine is not Combine.ATOMIC or self.fan_in <= 2

    def describe(self) -> str:
        return f"{self.name}{self.fan_in}:{self.combine.value}"


@dataclass(frozen=True)
class ReductionTree:
    levels: tuple[ReduceLevel, ...]
    lane_order: LaneOrder = LaneOrder.INTERLEAVED

    @property
    def deterministic(self) -> bool:
        """True unless some atomic level adds more than two partials onto zero."""
        return all(level.deterministic for level in self.levels)

    def level(self, name: str) -> ReduceLevel:
        for level in self.levels:
            if level.name == name:
                return level
        raise KeyError(name)

    def describe(self) -> str:
        return "/".join(level.describe() for level in self.levels)
