"""CANN TilingData structs as typed, frozen records."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import ClassVar


class TilingData(Mapping):
    """A CANN TilingData struct as the host code fills it: a frozen record whose fields are the
    struct's, named and ordered as in the op's ``*_tiling.h``, and a read-only mapping of those names
    to their words. Values the planner derives besides them live on the plan, never here."""

    #: The struct's name and the header that declares it.
    struct: ClassVar[str] = ""
    header: ClassVar[str] = ""

    def __getitem__(self, name: str):
        if name not in self.__dataclass_fields__:
            raise KeyError(name)
        return getattr(self, name)

    def __iter__(self):
        return iter(self.__dataclass_fields__)

    def __len__(self) -> int:
        return len(self.__dataclass_fields__)

    @classmethod
    def from_words(cls, words: Mapping) -> TilingData:
        """The record of ``words``, which must name every field of the struct and nothing else."""
        if list(words) != list(cls.__dataclass_fields__):
            raise ValueError(f"{cls.struct} words must be {', '.join(cls.__dataclass_fields__)} in that order, "
                             f"got {', '.join(words)}")
        return cls(**words)


def tiling_data_class(struct: str, header: str, fields: tuple[tuple[str, type], ...]) -> type[TilingData]:
    """A frozen ``TilingData`` record of ``struct`` with ``fields`` (name, int or float) in struct order."""
    cls = dataclasses.make_dataclass(struct, list(fields), bases=(TilingData,), frozen=True)
    cls.struct, cls.header = struct, header
    cls.__doc__ = f"``{struct}`` of ``{header}``: {', '.join(name for name, _ in fields)}."
    return cls


def int_fields(*names: str) -> tuple[tuple[str, type], ...]:
    return tuple((name, int) for name in names)
