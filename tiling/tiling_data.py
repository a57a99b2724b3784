"""CANN TilingData structs as typed, frozen records, and their bytes as the kernel receives them.

A struct declared with ``BEGIN_TILING_DATA_DEF`` / ``TILING_DATA_FIELD_DEF(type, name)`` is laid out as C
lays out its members: each at the next offset that is a multiple of its own size, a nested struct
(``TILING_DATA_FIELD_DEF_STRUCT``) at a multiple of 8 with its own layout, and every struct padded to a
multiple of 8 bytes, little-endian: the registration (metadef's ``register/tilingdata_base.h``) pads with
``CheckAlignAndGenPlaceHolder`` to a field's size before it, to 8 before a nested struct and at the end. The
ops-nn unit tests print such a blob as int32 words (``to_string<int32_t>``: an 8-byte field is two words,
low then high; a float its IEEE bits as a signed int32); ``to_words`` / ``from_words_text`` speak that.
"""

from __future__ import annotations

import dataclasses
import struct as _struct
from collections.abc import Mapping
from typing import ClassVar

#: C type -> (struct format, size, smallest, largest); floats are range-checked by packing.
C_TYPES = {
    "int8_t": ("b", 1, -2**7, 2**7 - 1), "uint8_t": ("B", 1, 0, 2**8 - 1),
    "int16_t": ("h", 2, -2**15, 2**15 - 1), "uint16_t": ("H", 2, 0, 2**16 - 1),
    "int32_t": ("i", 4, -2**31, 2**31 - 1), "uint32_t": ("I", 4, 0, 2**32 - 1),
    "int64_t": ("q", 8, -2**63, 2**63 - 1), "uint64_t": ("Q", 8, 0, 2**64 - 1),
    "float": ("f", 4, None, None),
}
STRUCT_ALIGN = 8


def _layout(members, offset: int = 0) -> tuple[list[tuple[str, str, int]], int]:
    """(name, C type, byte offset) of every scalar field of ``members`` (``(C type, name)`` pairs or
    ``(struct name, members)`` of a nested struct), and the end offset, padded to ``STRUCT_ALIGN``."""
    fields = []
    for ctype, name in members:
        if isinstance(name, tuple):  # a nested struct: ``(struct name, its members)``
            offset = -(-offset // STRUCT_ALIGN) * STRUCT_ALIGN
            inner, offset = _layout(name[1], offset)
            fields += inner
            continue
        size = C_TYPES[ctype][1]
        offset = -(-offset // size) * size
        fields.append((name, ctype, offset))
        offset += size
    return fields, -(-offset // STRUCT_ALIGN) * STRUCT_ALIGN


class TilingData(Mapping):
    """A CANN TilingData struct as the host code fills it: a frozen record whose fields are the
    struct's, named and ordered as in the op's ``*_tiling.h``, and a read-only mapping of those names
    to their words. Values the planner derives besides them live on the plan, never here."""

    #: The struct's name and the header that declares it.
    struct: ClassVar[str] = ""
    header: ClassVar[str] = ""
    #: Its members as the header declares them (``c_struct``), or None where they are not reproduced.
    c_members: ClassVar[tuple | None] = None
    #: The value a field holds until the host code assigns it, where that is not 0: the initializer of the
    #: tiling class's member (or local) that the code copies into the field, as its source declares it.
    #: Where the code skips a step, the field keeps it (arch35 GroupNormGrad's ``stage2Mode_ = 1`` at N = 1).
    host_defaults: ClassVar[Mapping] = {}

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

    @classmethod
    def initial_words(cls) -> dict:
        """Every field with the value it holds before the host code assigns it: its ``host_defaults``
        entry, else 0. A planner starts from these, so a field the code leaves alone keeps CANN's value."""
        return {name: cls.host_defaults.get(name, 0) for name in cls.__dataclass_fields__}

    # --- the C struct -------------------------------------------------------------------------------
    @classmethod
    def c_layout(cls) -> tuple[list[tuple[str, str, int]], int]:
        """(name, C type, offset) of each field and the struct's size in bytes."""
        if cls.c_members is None:
            raise ValueError(f"{cls.struct}: its C member types are not reproduced, so it has no byte layout")
        return _layout(cls.c_members)

    def to_bytes(self) -> bytes:
        """The struct as the kernel receives it (little-endian, padding zero). Raises ValueError naming the
        field whose value its C type cannot hold."""
        fields, size = self.c_layout()
        blob = bytearray(size)
        for name, ctype, offset in fields:
            fmt, _, low, high = C_TYPES[ctype]
            value = self[name]
            if low is not None and not (isinstance(value, int) and low <= value <= high):
                raise ValueError(f"{self.struct}.{name} = {value!r} does not fit its C type {ctype} "
                                 f"[{low}, {high}]")
            try:
                _struct.pack_into("<" + fmt, blob, offset, value)
            except (_struct.error, OverflowError, TypeError) as e:
                raise ValueError(f"{self.struct}.{name} = {value!r} does not fit its C type {ctype}") from e
        return bytes(blob)

    @classmethod
    def from_bytes(cls, blob: bytes) -> TilingData:
        """The record of a struct's bytes; raises ValueError naming the field a short blob cuts, or the
        bytes a long one has past the struct."""
        fields, size = cls.c_layout()
        blob = bytes(blob)
        if len(blob) != size:
            cut = next((f"{name} ({ctype} at byte {offset})" for name, ctype, offset in fields
                        if offset + C_TYPES[ctype][1] > len(blob)), None)
            where = f"it ends inside or before {cut}" if cut else f"{len(blob) - size} bytes past the struct's end"
            raise ValueError(f"{cls.struct} is {size} bytes, got {len(blob)}: {where}")
        # the layout lists the fields in record order (checked when the class is made)
        return cls.from_words({name: _struct.unpack_from("<" + C_TYPES[ctype][0], blob, offset)[0]
                               for name, ctype, offset in fields})

    def to_words(self) -> list[int]:
        """The struct as the ops-nn unit tests print it: its bytes as signed int32 words."""
        blob = self.to_bytes()
        return list(_struct.unpack(f"<{len(blob) // 4}i", blob))

    def words_text(self) -> str:
        """``to_words`` as the unit tests print them: the words, space-separated."""
        return " ".join(map(str, self.to_words()))

    @classmethod
    def from_words_text(cls, text: str) -> TilingData:
        """The record of a unit test's printed words (``"4 0 2048 0 ..."``: int32 words, signed or not)."""
        try:
            words = [int(part) for part in text.replace(",", " ").split()]
        except ValueError as e:
            raise ValueError(f"{cls.struct} words must be integers: {e}") from None
        for i, word in enumerate(words):
            if not -2**31 <= word < 2**32:
                raise ValueError(f"{cls.struct} word {i} = {word} is not a 32-bit word")
        return cls.from_bytes(b"".join((w & 0xFFFFFFFF).to_bytes(4, "little") for w in words))


def tiling_data_class(struct: str, header: str, c_members: tuple | None = None, *,
                      fields: tuple[tuple[str, type], ...] | None = None,
                      host_defaults: Mapping | None = None) -> type[TilingData]:
    """A frozen ``TilingData`` record of ``struct``: its fields (name, int or float, in struct order) and
    C layout from ``c_members`` (``c_struct``); or, with ``fields`` instead, a record without a layout.
    ``host_defaults``: the fields whose value before the host code assigns them is not 0 (see
    ``TilingData.host_defaults``)."""
    if (c_members is None) == (fields is None):
        raise TypeError(f"{struct}: give its C members or, for a record without a layout, its fields")
    fields = typed_fields(c_members) if fields is None else fields
    host_defaults = dict(host_defaults or {})
    unknown = set(host_defaults) - {name for name, _ in fields}
    if unknown:
        raise ValueError(f"{struct} has no field {', '.join(sorted(unknown))} to give a host default")
    cls = dataclasses.make_dataclass(struct, list(fields), bases=(TilingData,), frozen=True)
    cls.struct, cls.header, cls.c_members, cls.host_defaults = struct, header, c_members, host_defaults
    cls.__doc__ = f"``{struct}`` of ``{header}``: {', '.join(name for name, _ in fields)}."
    return cls


def int64_struct(struct: str, header: str, names: str, tail: str, *,
                 host_defaults: Mapping | None = None) -> type[TilingData]:
    """The record of a struct of ``int64_t`` members ``names`` (space-separated) followed by the
    declaration ``tail`` (``"float epsilon"``): the shape of every BatchNormGradV3 and gather-stats
    template's struct."""
    members = c_struct("; ".join(f"int64_t {name}" for name in names.split()) + "; " + tail)
    return tiling_data_class(struct, header, members, host_defaults=host_defaults)


def c_struct(declaration: str) -> tuple[tuple[str, str], ...]:
    """The members of ``"uint32_t N; int64_t C; ..."`` (a header's ``TILING_DATA_FIELD_DEF`` lines, type and
    name), as ``(C type, name)`` pairs."""
    members = []
    for item in declaration.replace("\n", " ").split(";"):
        if item.strip():
            ctype, name = item.split()
            if ctype not in C_TYPES:
                raise ValueError(f"unknown C type {ctype!r} of {name}")
            members.append((ctype, name))
    return tuple(members)


def typed_fields(members) -> tuple[tuple[str, type], ...]:
    """The record fields of C ``members`` (nested structs flattened): float for ``float``, else int."""
    return tuple((name, float if ctype == "float" else int) for name, ctype, _ in _layout(members)[0])
