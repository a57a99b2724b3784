"""What each op supports on each SoC family: one table that planners, the API, the aclnn layer and the
CLI all ask, so they can never disagree.

A SoC family is an ``arch`` of ``SocSpec`` (every Atlas A2 and A3 chip is ``DAV_2201``). Per op and
family the table gives the input dtypes of the CANN product table (none: CANN ships no kernel there,
status 561003), whether our plan reproduces the public CANN host code (``"cann-ops-nn"``) or is our
own model (``"modeled"``), or, where CANN has the op but we do not plan it, why (status 561002).
"""

from __future__ import annotations

from dataclasses import dataclass

from .plan import TilingError
from .soc import A2_A3, ASCEND950, ATLAS_INFERENCE, ATLAS_TRAINING, HOST, SocSpec

#: The status of a SoC without a kernel for the op (ACLNN_ERR_INNER_FIND_KERNEL_ERROR).
NO_KERNEL_STATUS = 561003
#: The status of a dtype outside the op's product table (ACLNN_ERR_PARAM_INVALID).
INVALID_DTYPE_STATUS = 161002

ALL = ("float32", "float16", "bfloat16")
NO_BF16 = ("float32", "float16")

#: The SoC families, by ``SocSpec.arch``, as the CANN product tables name them.
FAMILIES: dict[str, str] = {
    A2_A3: "Atlas A2/A3",
    ATLAS_TRAINING: "Atlas training",
    ATLAS_INFERENCE: "Atlas inference",
    ASCEND950: "Ascend 950",
    HOST: "host (this CPU)",
}


@dataclass(frozen=True)
class Support:
    """One op on one SoC family. ``mixed``: float32 tensors may stand beside float16/bfloat16 ones
    where the op's doc allows it (statistics beside half activations)."""

    op: str
    family: str
    dtypes: tuple[str, ...]
    tiling: str | None
    note: str = ""
    mixed: bool = False

    @property
    def runs(self) -> bool:
        """CANN has the op here and normkern plans it."""
        return bool(self.dtypes) and self.tiling is not None


class UnsupportedError(TilingError):
    """CANN has no kernel for the op on this SoC (ACLNN_ERR_INNER_FIND_KERNEL_ERROR)."""

    status = NO_KERNEL_STATUS


#: Each op's aclnn name.
ACLNN_NAMES: dict[str, str] = {
    "batch_norm_stats": "aclnnBatchNormStats",
    "batch_norm_gather_stats_with_counts": "aclnnBatchNormGatherStatsWithCounts",
    "fast_batch_norm_backward": "aclnnFastBatchNormBackward",
    "group_norm_backward": "aclnnGroupNormBackward",
    "batch_norm_elemt": "aclnnBatchNormElemt",
    "batch_norm_backward_reduce": "aclnnBatchNormReduceBackward",
    "batch_norm_backward_elemt": "aclnnBatchNormElemtBackward",
    "batch_norm": "aclnnBatchNorm",
}


def _rows(op: str, families: dict[str, tuple]) -> dict[tuple[str, str], Support]:
    return {(op, arch): Support(op, arch, *row) for arch, row in families.items()}


_TABLE: dict[tuple[str, str], Support] = {
    **_rows("batch_norm_stats", {
        A2_A3: (NO_BF16, "modeled", "the A2/A3 kernel is closed TBE"),
        ATLAS_TRAINING: (NO_BF16, "modeled", "closed TBE"),
        ASCEND950: (ALL, "modeled", "no public host tiling"),
        HOST: (ALL, "modeled", "the CPU's cores and L2")}),
    **_rows("batch_norm_gather_stats_with_counts", {
        A2_A3: (ALL, "modeled", "closed TBE; the 950 templates with A2/A3 figures", True),
        ATLAS_TRAINING: (NO_BF16, "modeled", "closed TBE; the 950 templates", True),
        ASCEND950: (ALL, "cann-ops-nn", "SyncBatchNormGatherStatsFused"),
        HOST: (ALL, "modeled", "the 950 templates with the CPU's figures", True)}),
    **_rows("fast_batch_norm_backward", {
        A2_A3: (ALL, "cann-ops-nn", "BatchNormGradV3"),
        HOST: (ALL, "modeled", "the BatchNormGradV3 templates with the CPU's figures")}),
    **_rows("group_norm_backward", {
        A2_A3: (ALL, "cann-ops-nn", "GroupNormGrad"),
        ATLAS_TRAINING: (NO_BF16, "modeled", "the op_api composes closed TBE ops there; planned with the A2 "
                         "GroupNormGrad templates and this SoC's figures"),
        ASCEND950: (ALL, "cann-ops-nn", "GroupNormGrad arch35 (regbase); the A2 templates with the 950's figures "
                    "with strategy='cann'", True),
        HOST: (ALL, "modeled", "the GroupNormGrad tiling with the CPU's figures", True)}),
    **_rows("batch_norm_elemt", {
        A2_A3: (ALL, "modeled", "op_api over the closed TBE BatchNorm inference kernel"),
        ATLAS_TRAINING: (NO_BF16, "modeled", "op_api over the closed TBE BatchNorm inference kernel"),
        HOST: (ALL, "modeled", "the elementwise split with the CPU's figures", True)}),
    **_rows("batch_norm_backward_reduce", {
        A2_A3: (ALL, "modeled", "ReduceSum (tiling not in ops-nn) + SyncBatchNormBackwardReduce", True),
        ATLAS_TRAINING: (NO_BF16, "modeled", "ReduceSum + closed TBE SyncBatchNormBackwardReduce", True),
        ASCEND950: (ALL, "modeled", "ReduceSum (tiling not in ops-nn) + the arch35 elementwise kernel", True),
        HOST: (ALL, "modeled", "the row reduction with the CPU's figures", True)}),
    **_rows("batch_norm_backward_elemt", {
        A2_A3: (ALL, "modeled", "closed TBE SyncBatchNormBackwardElemt", True),
        ATLAS_TRAINING: (NO_BF16, "modeled", "closed TBE SyncBatchNormBackwardElemt", True),
        ASCEND950: (ALL, "modeled", "arch35 elementwise kernel, key 0 (its split lives in ops-base)", True),
        HOST: (ALL, "modeled", "the elementwise split with the CPU's figures", True)}),
    **_rows("batch_norm", {
        A2_A3: (ALL, None, "BatchNormV3 (norm/batch_norm_v3) is not planned yet", True),
        ATLAS_TRAINING: (NO_BF16, None, "the op_api's BNTrainingReduce/Update (closed TBE) are not planned", True),
        ATLAS_INFERENCE: (NO_BF16, None, "the op_api's BNTrainingReduce/Update (closed TBE) are not planned", True),
        ASCEND950: (ALL, None, "BatchNormV3 arch35 (norm/batch_norm_v3) is not planned yet", True),
        HOST: (ALL, "modeled", "normkern's own: a channel's planes as one stream, staged in L2", True)}),
}


def ops() -> tuple[str, ...]:
    """The ops the table knows, in the order they were entered."""
    return tuple(dict.fromkeys(op for op, _ in _TABLE))


def support(op: str, soc: SocSpec) -> Support:
    """The table's entry for ``op`` on ``soc``'s family (no dtypes where CANN has no kernel)."""
    entry = _TABLE.get((op, soc.arch))
    if entry is None:
        return Support(op, soc.arch, (), None, f"CANN has no kernel for {soc.product}")
    return entry


def table() -> list[Support]:
    """Every (op, family) pair, families in the order of ``FAMILIES``, unlisted pairs as no-kernel rows."""
    return [_TABLE.get((op, arch), Support(op, arch, (), None, "CANN has no kernel"))
            for op in ops() for arch in FAMILIES]


def require(op: str, soc: SocSpec, dtype: str | None = None) -> Support:
    """The entry, or the error a planner raises: no kernel (561003), not planned (561002), or a
    dtype outside the product table (161002)."""
    entry = support(op, soc)
    if not entry.dtypes:
        raise UnsupportedError(f"[{op}] soc must support {ACLNN_NAMES[op]} (CANN has no kernel for "
                               f"{soc.product}), got {soc.name}")
    if entry.tiling is None:
        raise TilingError(f"[{op}] {entry.note}; plan for another SoC or host, got {soc.name}")
    if dtype is not None and dtype not in entry.dtypes:
        error = TilingError(f"[{op}] dtype must be one of {', '.join(entry.dtypes)} on {soc.name}, got {dtype}")
        error.status = INVALID_DTYPE_STATUS
        raise error
    return entry
