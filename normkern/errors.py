"""One error hierarchy carrying the aclnn status codes, and one message builder.

Every message reads ``[op] param rule, got value``, e.g.
``[batch_norm_stats] input must have rank 2 to 8, got rank 1 (shape (5,))``.
"""

from __future__ import annotations

import tiling

ACLNN_SUCCESS = 0
ACLNN_ERR_PARAM_NULLPTR = 161001
ACLNN_ERR_PARAM_INVALID = 161002
ACLNN_ERR_RUNTIME_ERROR = 361001
ACLNN_ERR_INNER = 561000
ACLNN_ERR_INNER_INFERSHAPE_ERROR = 561001
ACLNN_ERR_INNER_TILING_ERROR = 561002
ACLNN_ERR_INNER_FIND_KERNEL_ERROR = 561003
ACLNN_ERR_INNER_CREATE_EXECUTOR = 561101
ACLNN_ERR_INNER_NULLPTR = 561103


class NormkernError(Exception):
    """Base of every normkern error; ``status`` is the aclnn code the C API would return."""

    status = ACLNN_ERR_INNER

    def __init__(self, op: str, param: str, rule: str, value) -> None:
        self.op, self.param, self.rule, self.value = op, param, rule, value
        super().__init__(f"[{op}] {param} {rule}, got {value}")


class NullPointerError(NormkernError, ValueError):
    """A required tensor is missing (ACLNN_ERR_PARAM_NULLPTR)."""

    status = ACLNN_ERR_PARAM_NULLPTR


class InvalidParameterError(NormkernError, ValueError):
    """A dtype, shape, value or option breaks a rule (ACLNN_ERR_PARAM_INVALID)."""

    status = ACLNN_ERR_PARAM_INVALID


class DeterminismError(InvalidParameterError):
    """Determinism was asked of a strategy that cannot give it."""


class WorkspaceError(InvalidParameterError):
    """The workspace passed to the second phase is missing, too small or misaligned."""


class InternalNullError(NormkernError, ValueError):
    """A null executor or tensor given to an executor API such as aclSetInputTensorAddr
    (ACLNN_ERR_INNER_NULLPTR)."""

    status = ACLNN_ERR_INNER_NULLPTR


class UnsupportedError(NormkernError):
    """The op does not exist for this SoC in CANN (no kernel binary: ACLNN_ERR_INNER_FIND_KERNEL_ERROR)."""

    status = ACLNN_ERR_INNER_FIND_KERNEL_ERROR


class TilingError(NormkernError, tiling.TilingError):
    """The planner could not tile the problem (ACLNN_ERR_INNER_TILING_ERROR)."""

    status = ACLNN_ERR_INNER_TILING_ERROR

    def __init__(self, op: str, message: str) -> None:
        self.op, self.param, self.rule, self.value = op, "tiling", message, None
        Exception.__init__(self, message)
