"""Workspace layout: the system region the runtime reserves, then named user regions."""

from __future__ import annotations

from dataclasses import dataclass

#: User regions start at this alignment (the 32-byte UB block; also the DataCopy granularity).
REGION_ALIGN = 32


def align_up(value: int, alignment: int) -> int:
    return -(-value // alignment) * alignment


@dataclass(frozen=True)
class Region:
    name: str
    offset: int
    nbytes: int
    dtype: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class WorkspaceLayout:
    """``total_bytes = system_bytes + user_bytes``; region offsets count from the user start."""

    system_bytes: int
    user_bytes: int
    regions: tuple[Region, ...] = ()

    def __post_init__(self) -> None:
        end = 0
        for region in self.regions:
            if region.offset < end or region.offset % REGION_ALIGN:
                raise ValueError(f"workspace region {region.name!r} overlaps or is misaligned")
            itemsize = {"float32": 4}.get(region.dtype)
            count = 1
            for extent in region.shape:
                count *= extent
            if itemsize is None or region.nbytes < count * itemsize:
                raise ValueError(f"workspace region {region.name!r} too small for {region.shape} {region.dtype}")
            end = region.offset + region.nbytes
        if end > self.user_bytes:
            raise ValueError(f"workspace regions need {end} bytes, user part is {self.user_bytes}")

    @classmethod
    def build(cls, system_bytes: int, arrays: tuple[tuple[str, tuple[int, ...]], ...]) -> WorkspaceLayout:
        """Lay float32 arrays ``(name, shape)`` one after another, each 32-byte aligned."""
        regions, offset = [], 0
        for name, shape in arrays:
            count = 1
            for extent in shape:
                count *= extent
            nbytes = align_up(count * 4, REGION_ALIGN)
            regions.append(Region(name, offset, nbytes, "float32", tuple(shape)))
            offset += nbytes
        return cls(system_bytes, offset, tuple(regions))

    @property
    def total_bytes(self) -> int:
        return self.system_bytes + self.user_bytes

    def region(self, name: str) -> Region:
        for region in self.regions:
            if region.name == name:
                return region
        raise KeyError(name)

    def describe(self) -> str:
        return f"{_bytes_text(self.system_bytes)}+{_bytes_text(self.user_bytes)}"


def _bytes_text(n: int) -> str:
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return f"{n}B"
