"""One helper for every split: items over cores, and items over UB-sized blocks.

A split hands ``total`` items to consecutive parts: the first ``big_parts`` parts get
``big_items`` each, the remaining ``small_parts`` get ``small_items`` (fewer), so part ``p``
covers the half-open range ``ranges()[p]``. Three constructors name the three ways CANN splits:

- ``Split.even(total, cores)``: balanced; ``total % cores`` cores take one item more
  (GroupNormGrad's ``tailCore`` counts exactly those cores, which we call ``big_cores``).
- ``Split.quota(total, cores)``: every core takes ``ceil(total/cores)`` until the items run out,
  the last core takes what is left (BatchNormGradV3's eachCoreChannel / coreChannelTail).
- ``Split.blocks(total, block)``: full blocks of ``block`` items and one shorter tail block.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class SplitKind(Enum):
    EVEN = "even"
    QUOTA = "quota"
    BLOCKS = "blocks"


@dataclass(frozen=True)
class Split:
    kind: SplitKind
    total: int
    big_parts: int
    big_items: int
    small_parts: int
    small_items: int

    def __post_init__(self) -> None:
        counts = (self.total, self.big_parts, self.big_items, self.small_parts, self.small_items)
        if any(not isinstance(v, int) or v < 0 for v in counts):
            raise ValueError(f"Split fields must be non-negative ints: {self}")
        if self.big_parts * self.big_items + self.small_parts * self.small_items != self.total:
            raise ValueError(f"Split does not cover {self.total} items exactly: {self}")
        if self.small_parts and not 0 < self.small_items < self.big_items:
            raise ValueError(f"Split small parts must be non-empty and smaller than big ones: {self}")
        if self.total and self.big_items == 0:
            raise ValueError(f"Split has empty big parts: {self}")

    @classmethod
    def even(cls, total: int, cores: int) -> Split:
        """``total`` items over at most ``cores`` cores, the first ``total % used`` take one more."""
        if cores <= 0:
            raise ValueError(f"cores must be positive, got {cores}")
        used = min(total, cores)
        if used == 0:
            return cls(SplitKind.EVEN, 0, 0, 0, 0, 0)
        base, extra = divmod(total, used)
        if extra == 0:
            return cls(SplitKind.EVEN, total, used, base, 0, 0)
        return cls(SplitKind.EVEN, total, extra, base + 1, used - extra, base)

    @classmethod
    def quota(cls, total: int, cores: int) -> Split:
        """Each core takes ``ceil(total/cores)`` items; the last core used takes the remainder."""
        if cores <= 0:
            raise ValueError(f"cores must be positive, got {cores}")
        if total == 0:
            return cls(SplitKind.QUOTA, 0, 0, 0, 0, 0)
        each = -(-total // cores)
        return cls._full_and_tail(SplitKind.QUOTA, total, each)

    @classmethod
    def blocks(cls, total: int, block: int) -> Split:
        """Full blocks of ``block`` items, then one tail block with the rest (if any)."""
        if block <= 0:
            raise ValueError(f"block must be positive, got {block}")
        if total == 0:
            return cls(SplitKind.BLOCKS, 0, 0, 0, 0, 0)
        return cls._full_and_tail(SplitKind.BLOCKS, total, min(block, total))

    @classmethod
    def _full_and_tail(cls, kind: SplitKind, total: int, each: int) -> Split:
        full, tail = divmod(total, each)
        return cls(kind, total, full, each, 1 if tail else 0, tail)

    @property
    def parts(self) -> int:
        return self.big_parts + self.small_parts

    # Names by meaning for core splits ...
    @property
    def big_cores(self) -> int:
        return self.big_parts

    @property
    def small_cores(self) -> int:
        return self.small_parts

    # ... and for block splits.
    @property
    def full_blocks(self) -> int:
        return self.big_parts

    @property
    def block_items(self) -> int:
        return self.big_items

    @property
    def tail_items(self) -> int:
        """Items of the shorter last part (0 when every part is full)."""
        return self.small_items if self.small_parts else 0

    def counts(self) -> tuple[int, ...]:
        return (self.big_items,) * self.big_parts + (self.small_items,) * self.small_parts

    def starts(self) -> tuple[int, ...]:
        out, pos = [], 0
        for count in self.counts():
            out.append(pos)
            pos += count
        return tuple(out)

    def ranges(self) -> tuple[tuple[int, int], ...]:
        """``(start, count)`` of every part, in part order."""
        return tuple(zip(self.starts(), self.counts(), strict=False))

    def describe(self) -> str:
        """Compact form for one-line plan summaries, e.g. ``40x3+8x2``."""
        text = f"{self.big_parts}x{self.big_items}"
        if self.small_parts:
            text += f"+{self.small_parts}x{self.small_items}"
        return text
