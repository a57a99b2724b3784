"""Ascend-style tiling plans: core splits, UB blocks, reduction trees and workspaces.

Pure Python (NumPy only for ``kernel_args``); it never imports numba or normkern.
"""

from .batch_norm import BatchNormArgs, BatchNormPlan, BatchNormStrategy, plan_batch_norm
from .batch_norm_backward_reduce import (
    BatchNormReduceBackwardPlan,
    BatchNormReduceBackwardStrategy,
    plan_batch_norm_backward_reduce,
)
from .batch_norm_gather_stats import (
    GatherStatsArgs,
    GatherStatsPlan,
    GatherStatsStrategy,
    plan_batch_norm_gather_stats_with_counts,
)
from .batch_norm_stats import (
    BatchNormStatsArgs,
    BatchNormStatsPlan,
    BatchNormStatsStrategy,
    plan_batch_norm_stats,
)
from .elementwise import (
    BatchNormElemtBackwardPlan,
    BatchNormElemtPlan,
    ElementwiseArgs,
    ElementwisePlan,
    ElementwiseStrategy,
    plan_batch_norm_backward_elemt,
    plan_batch_norm_elemt,
)
from .fast_batch_norm_backward import (
    FastBatchNormBackwardPlan,
    FastBatchNormBackwardStrategy,
    plan_fast_batch_norm_backward,
)
from .group_norm_backward import (
    GroupNormBackwardPlan,
    GroupNormBackwardStrategy,
    plan_group_norm_backward,
)
from .group_norm_backward_groups import GroupNormBackwardGroupsPlan, GroupsArgs
from .plan import (
    SCHEMA_VERSION,
    Plan,
    Rejection,
    Strategy,
    StrategyRegistry,
    TilingError,
    UnknownStrategyError,
    parse_strategy,
)
from .reduction import LANES, Combine, LaneOrder, ReduceLevel, ReductionTree
from .soc import (
    A2_A3,
    ASCEND950,
    ATLAS_INFERENCE,
    ATLAS_TRAINING,
    DEFAULT_SOC,
    HOST,
    SocSpec,
    get_soc,
    host_soc,
    soc_names,
    unit_test_soc,
)
from .split import Split, SplitKind
from .support import ACLNN_NAMES, FAMILIES, Support, UnsupportedError, support
from .support import table as support_table
from .workspace import Region, WorkspaceLayout

__all__ = [
    "FastBatchNormBackwardPlan", "FastBatchNormBackwardStrategy", "plan_fast_batch_norm_backward",
    "GroupNormBackwardPlan", "GroupNormBackwardStrategy", "plan_group_norm_backward", "GroupNormBackwardGroupsPlan",
    "GroupsArgs",
    "GatherStatsArgs", "GatherStatsPlan", "GatherStatsStrategy", "plan_batch_norm_gather_stats_with_counts",
    "BatchNormArgs", "BatchNormPlan", "BatchNormStrategy", "plan_batch_norm",
    "BatchNormStatsArgs", "BatchNormStatsPlan", "BatchNormStatsStrategy", "plan_batch_norm_stats",
    "BatchNormReduceBackwardPlan", "BatchNormReduceBackwardStrategy", "plan_batch_norm_backward_reduce",
    "BatchNormElemtPlan", "BatchNormElemtBackwardPlan", "ElementwiseArgs", "ElementwisePlan", "ElementwiseStrategy",
    "plan_batch_norm_elemt", "plan_batch_norm_backward_elemt",
    "SCHEMA_VERSION", "Plan", "Rejection", "Strategy", "StrategyRegistry", "TilingError", "UnknownStrategyError",
    "parse_strategy",
    "LANES", "Combine", "LaneOrder", "ReduceLevel", "ReductionTree",
    "A2_A3", "ASCEND950", "ATLAS_INFERENCE", "ATLAS_TRAINING", "DEFAULT_SOC", "HOST", "SocSpec", "get_soc",
    "host_soc", "soc_names", "unit_test_soc", "ACLNN_NAMES", "FAMILIES", "Support", "UnsupportedError", "support",
    "support_table",
    "Split", "SplitKind", "Region", "WorkspaceLayout",
]
