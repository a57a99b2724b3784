"""The op registry: every op slice registers one record, and what serves every op (the package
namespace, the aclnn layer, the CLI, the determinism checker, the examples) iterates over it.

A new op is its own files (``tiling/<op>.py``, ``normkern/ops/<op>/``), its rows in
``tiling/support.py``, and one import line in ``normkern/ops/__init__.py``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import tiling

from .errors import InvalidParameterError

#: The keywords every Pythonic op takes besides its own parameters.
COMMON_KEYWORDS = ("soc", "strategy", "deterministic", "arrival_seed", "out")


@dataclass(frozen=True)
class Option:
    """An op parameter the CLI offers as a flag (``--group``); ``kwargs`` go to ``add_argument``."""

    flag: str
    dest: str
    kwargs: dict


@dataclass(frozen=True)
class OpRecord:
    """Everything generic code needs to know of one op.

    ``plan(kw, soc, strategy)`` is the plan ``function(**kw, soc=soc, strategy=strategy)`` runs;
    ``plan_shape(shape, dtype, soc, strategy, **options)`` the plan for a CLI ``--shape``;
    ``simulate(plan, kw)`` and ``reference(kw)`` give every output (``outputs`` then ``updated``)
    from the plan simulator (arrival seed 0) and the float64 reference; ``example(shape, dtype,
    rng, eps=..., **options)`` seeded keyword inputs; ``bytes_moved(kw)`` the call's traffic floor.
    """

    name: str
    function: Callable
    #: ``bind(*args, **kwargs)``: ``function``'s first call of a signature (every check, the plan) as an executor.
    bind: Callable
    aclnn_prepare: Callable
    outputs: tuple[str, ...]
    strategies: type[enum.Enum]
    plan: Callable[[dict, tiling.SocSpec, Any], tiling.Plan]
    plan_shape: Callable[..., tiling.Plan]
    simulate: Callable[[tiling.Plan, dict], tuple]
    reference: Callable[[dict], tuple]
    example: Callable[..., dict]
    bytes_moved: Callable[[dict], int]
    shape_help: str = "the input's shape (e.g. 32,64,56,56)"
    shape_ranks: tuple[int, int] = (2, 8)
    updated: tuple[str, ...] = ()
    options: tuple[Option, ...] = ()
    #: The calls ``normkern warmup`` makes (``(shape, options)``, each under every strategy): together they
    #: run each of the op's parallel kernels, so that a warmed cache holds every kernel a call may need.
    warmup: tuple[tuple[tuple[int, ...], dict], ...] = (((4, 8, 6, 6), {}),)
    #: ``arrival(plan, seed)``: the orders an atomic plan's partials are added in, one row per sum (ops
    #: with atomic plans), drawn as the plan picture's example.
    arrival: Callable | None = None
    #: The op's cache of bound calls by signature (``runtime.calls.Signatures``).
    signatures: Any = None

    @property
    def aclnn(self) -> str:
        """The CANN name, ``aclnnXxx`` (kept with the support table in ``tiling``)."""
        return tiling.ACLNN_NAMES[self.name]

    @property
    def all_outputs(self) -> tuple[str, ...]:
        """The returned arrays, then the inputs updated in place."""
        return self.outputs + self.updated

    def call(self, kw: dict, **keywords) -> tuple:
        """Run the op on ``kw`` (updated in place as the op does) and return every output."""
        results = self.function(**kw, **keywords)
        if len(self.outputs) == 1:  # a single output is returned bare, as PyTorch returns a Tensor
            results = (results,)
        return (*results, *(kw.get(name) for name in self.updated))


_RECORDS: dict[str, OpRecord] = {}


def register(record: OpRecord) -> OpRecord:
    if record.name in _RECORDS:
        raise ValueError(f"op {record.name!r} is registered twice")
    _RECORDS[record.name] = record
    return record


def records() -> tuple[OpRecord, ...]:
    """Every registered op, by name (slices import each other's helpers, so the order they register in
    depends on imports)."""
    return tuple(sorted(_RECORDS.values(), key=lambda r: r.name))


def names() -> tuple[str, ...]:
    return tuple(r.name for r in records())


def get(op: str, caller: str = "normkern") -> OpRecord:
    """The record of ``op``; an unknown name is an error naming the known ones."""
    record = _RECORDS.get(op) if isinstance(op, str) else None
    if record is None:
        raise InvalidParameterError(caller, "op", f"must be one of {', '.join(names())}", repr(op))
    return record
