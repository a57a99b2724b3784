"""What the runtime derives from a plan, kept beside it: kernel arguments, thread spans, addition orders.

A plan is a pure value (``tiling``); what a call needs from it besides (the lowered ``kernel_args()``, each
thread's run of cores at a thread count, a deterministic plan's addition order) is made once per plan and
kept here, keyed by the plan object. Planners return the same object for the same problem (they are
cached), so a repeated call finds its values. The table keeps its plans alive, so an id is never reused
while it is in the table; it is emptied when it reaches ``PLANS`` plans.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

#: Plans whose derived values are kept; past this many the table starts afresh.
PLANS = 1024

_table: dict[int, tuple[object, dict]] = {}


def derived(plan, key: Hashable, make: Callable[[], object]):
    """``make()`` for ``plan`` and ``key``, made once per plan object."""
    entry = _table.get(id(plan))
    if entry is None or entry[0] is not plan:
        if len(_table) >= PLANS:
            _table.clear()
        entry = _table[id(plan)] = (plan, {})
    values = entry[1]
    value = values.get(key)
    if value is None:
        value = values[key] = make()
    return value


def kernel_args(plan):
    """``plan.kernel_args()``, lowered once per plan."""
    return derived(plan, "kernel_args", plan.kernel_args)
