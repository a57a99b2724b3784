"""The aclnn layer: CANN's two-phase calls with CANN's names and argument order.

Tensors are NumPy arrays (None stands for a null pointer); outputs are allocated by the caller.
Every call returns a status code instead of raising, and ``aclGetRecentErrMsg()`` gives the
message of the last failure. The first phase checks in the order the CANN op_api code does and
returns ``(status, workspace_size, executor)``; ``executor.plan`` is the plan it will run. The
second phase runs it in the caller's ``workspace`` (a uint8 array of at least ``workspace_size``
bytes): the partial sums really go to its user region, after the system region.
"""

from __future__ import annotations

from collections.abc import Callable

from . import _config
from ._executor import Executor, launch
from .errors import (
    ACLNN_ERR_INNER,
    ACLNN_ERR_INNER_FIND_KERNEL_ERROR,
    ACLNN_ERR_INNER_TILING_ERROR,
    ACLNN_ERR_PARAM_INVALID,
    ACLNN_ERR_PARAM_NULLPTR,
    ACLNN_ERR_RUNTIME_ERROR,
    ACLNN_SUCCESS,
    NormkernError,
)
from .ops import batch_norm_gather_stats as _gather
from .ops import batch_norm_stats as _bns
from .ops import fast_batch_norm_backward as _fbn
from .ops import group_norm_backward as _gnb

__all__ = [
    "ACLNN_SUCCESS", "ACLNN_ERR_PARAM_NULLPTR", "ACLNN_ERR_PARAM_INVALID", "ACLNN_ERR_RUNTIME_ERROR",
    "ACLNN_ERR_INNER", "ACLNN_ERR_INNER_TILING_ERROR", "ACLNN_ERR_INNER_FIND_KERNEL_ERROR",
    "ACL_SUCCESS", "ACL_ERROR_INVALID_PARAM", "ACL_OPT_DETERMINISTIC", "ACL_OPT_ENABLE_DEBUG_KERNEL",
    "ACL_OPT_STRONG_CONSISTENCY", "ACL_OPT_ENABLE_KERNEL_EARLY_START",
    "aclrtCtxSetSysParamOpt", "aclrtCtxGetSysParamOpt", "aclGetRecentErrMsg", "Executor",
    "aclnnBatchNormStatsGetWorkspaceSize", "aclnnBatchNormStats",
    "aclnnBatchNormGatherStatsWithCountsGetWorkspaceSize", "aclnnBatchNormGatherStatsWithCounts",
    "aclnnFastBatchNormBackwardGetWorkspaceSize", "aclnnFastBatchNormBackward",
    "aclnnGroupNormBackwardGetWorkspaceSize", "aclnnGroupNormBackward",
]

ACL_SUCCESS = 0
ACL_ERROR_INVALID_PARAM = 100000

ACL_OPT_DETERMINISTIC = 0
ACL_OPT_ENABLE_DEBUG_KERNEL = 1
ACL_OPT_STRONG_CONSISTENCY = 2
ACL_OPT_ENABLE_KERNEL_EARLY_START = 3

_other_options: dict[int, int] = {}
_recent_error: list[str | None] = [None]


def aclGetRecentErrMsg() -> str | None:
    """The message of the most recent failed call (None once read, as ACL does)."""
    message, _recent_error[0] = _recent_error[0], None
    return message


def aclrtCtxSetSysParamOpt(opt: int, value: int) -> int:
    """Set a context option; ``ACL_OPT_DETERMINISTIC`` drives :func:`normkern.set_deterministic`."""
    if opt == ACL_OPT_DETERMINISTIC:
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 3:
            _recent_error[0] = f"aclrtCtxSetSysParamOpt: ACL_OPT_DETERMINISTIC value must be 0-3, got {value!r}"
            return ACL_ERROR_INVALID_PARAM
        _config.set_deterministic(value)
        return ACL_SUCCESS
    if opt in (ACL_OPT_ENABLE_DEBUG_KERNEL, ACL_OPT_STRONG_CONSISTENCY, ACL_OPT_ENABLE_KERNEL_EARLY_START):
        _other_options[opt] = int(value)
        return ACL_SUCCESS
    _recent_error[0] = f"aclrtCtxSetSysParamOpt: unknown option {opt!r}"
    return ACL_ERROR_INVALID_PARAM


def aclrtCtxGetSysParamOpt(opt: int) -> tuple[int, int]:
    """``(status, value)`` of a context option."""
    if opt == ACL_OPT_DETERMINISTIC:
        return ACL_SUCCESS, _config.get_deterministic()
    if opt in (ACL_OPT_ENABLE_DEBUG_KERNEL, ACL_OPT_STRONG_CONSISTENCY, ACL_OPT_ENABLE_KERNEL_EARLY_START):
        return ACL_SUCCESS, _other_options.get(opt, 0)
    _recent_error[0] = f"aclrtCtxGetSysParamOpt: unknown option {opt!r}"
    return ACL_ERROR_INVALID_PARAM, 0


def _first_phase(prepare: Callable[[], Executor]) -> tuple[int, int, Executor | None]:
    try:
        executor = prepare()
    except NormkernError as exc:
        _recent_error[0] = str(exc)
        return exc.status, 0, None
    return ACLNN_SUCCESS, executor.workspace_size, executor


def _second_phase(op: str, workspace, workspace_size, executor) -> int:
    try:
        launch(op, workspace, workspace_size, executor)
    except NormkernError as exc:
        _recent_error[0] = str(exc)
        return exc.status
    return ACLNN_SUCCESS


def aclnnBatchNormStatsGetWorkspaceSize(input, eps, mean, invstd, *, soc=None):
    """First phase of aclnnBatchNormStats: ``(status, workspace_size, executor)``."""
    return _first_phase(lambda: _bns.prepare(input, eps, mean, invstd, soc=soc))


def aclnnBatchNormStats(workspace, workspace_size, executor, stream=None) -> int:
    """Second phase of aclnnBatchNormStats: writes ``mean`` and ``invstd`` given to the first phase."""
    return _second_phase(_bns.OP, workspace, workspace_size, executor)


def aclnnBatchNormGatherStatsWithCountsGetWorkspaceSize(input, mean, invstd, runningMean, runningVar, momentum, eps,
                                                        counts, meanAll, invstdAll, *, soc=None):
    """First phase of aclnnBatchNormGatherStatsWithCounts: ``(status, workspace_size, executor)``."""
    return _first_phase(lambda: _gather.prepare(input, mean, invstd, runningMean, runningVar, momentum, eps, counts,
                                                meanAll, invstdAll, soc=soc))


def aclnnBatchNormGatherStatsWithCounts(workspace, workspace_size, executor, stream=None) -> int:
    """Second phase: writes meanAll/invstdAll and updates runningMean/runningVar in place."""
    return _second_phase(_gather.OP, workspace, workspace_size, executor)


def aclnnFastBatchNormBackwardGetWorkspaceSize(gradOut, input, weight, runningMean, runningVar, saveMean, saveInvstd,
                                               training, eps, outputMask, version, gradInput, gradWeight, gradBias, *,
                                               soc=None):
    """First phase of aclnnFastBatchNormBackward: ``(status, workspace_size, executor)``.

    An empty gradOut or input returns ``(0, 0, executor)`` before any other check, as the op_api."""
    return _first_phase(lambda: _fbn.prepare(gradOut, input, weight, runningMean, runningVar, saveMean, saveInvstd,
                                             training, eps, outputMask, version, gradInput, gradWeight, gradBias,
                                             soc=soc))


def aclnnFastBatchNormBackward(workspace, workspace_size, executor, stream=None) -> int:
    """Second phase: writes the gradients selected by the first phase's outputMask."""
    return _second_phase(_fbn.OP, workspace, workspace_size, executor)


def aclnnGroupNormBackwardGetWorkspaceSize(gradOut, input, mean, rstd, gamma, N, C, HxW, group, outputMask, gradInput,
                                           gradGammaOut, gradBetaOut, *, soc=None):
    """First phase of aclnnGroupNormBackward: ``(status, workspace_size, executor)``.

    Runs the default (``cann``) plan: deterministic, whatever the determinism switch says, as the A2
    code (the ``atomic`` strategy is reachable from the Pythonic layer)."""
    return _first_phase(lambda: _gnb.prepare(gradOut, input, mean, rstd, gamma, N, C, HxW, group, outputMask,
                                             gradInput, gradGammaOut, gradBetaOut, soc=soc))


def aclnnGroupNormBackward(workspace, workspace_size, executor, stream=None) -> int:
    """Second phase: writes the gradients selected by outputMask; the partial rows go to ``workspace``."""
    return _second_phase(_gnb.OP, workspace, workspace_size, executor)
