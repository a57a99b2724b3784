"""One test per error message of the Pythonic layer, with its aclnn status."""

import numpy as np
import pytest

import normkern
from normkern.errors import (
    ACLNN_ERR_INNER_FIND_KERNEL_ERROR,
    ACLNN_ERR_PARAM_INVALID,
    ACLNN_ERR_PARAM_NULLPTR,
)

from .conftest import make_input

X = make_input((2, 3, 4), "float32")
BF16 = make_input((2, 3, 4), "bfloat16")
F32 = np.float32

CASES = [
    (dict(input=None), ACLNN_ERR_PARAM_NULLPTR, "[batch_norm_stats] input must not be None (null pointer), got None"),
    (dict(input=[[1.0]]), ACLNN_ERR_PARAM_INVALID, "[batch_norm_stats] input must be a numpy.ndarray, got list"),
    (dict(input=X.astype(np.float64)), ACLNN_ERR_PARAM_INVALID,
     "[batch_norm_stats] input dtype must be one of float32, float16 on Ascend910B2, got float64"),
    (dict(input=BF16), ACLNN_ERR_PARAM_INVALID,
     "[batch_norm_stats] input dtype must be one of float32, float16 on Ascend910B2, got bfloat16"),
    (dict(input=X, soc="Ascend310P3"), ACLNN_ERR_INNER_FIND_KERNEL_ERROR,
     "[batch_norm_stats] soc must support aclnnBatchNormStats (CANN has no kernel for Atlas inference), "
     "got Ascend310P3"),
    (dict(input=X, soc="Ascend999"), ACLNN_ERR_PARAM_INVALID,
     "[batch_norm_stats] soc must be a SocSpec or one of Ascend910B1, Ascend910B2, Ascend910B3, Ascend910B4, "
     "Ascend910_93, Ascend910, Ascend310P3, Ascend950, host, got 'Ascend999'"),
    (dict(input=np.zeros(5, F32)), ACLNN_ERR_PARAM_INVALID,
     "[batch_norm_stats] input must have rank 2 to 8, got rank 1 (shape (5,))"),
    (dict(input=np.zeros((1,) * 9, F32)), ACLNN_ERR_PARAM_INVALID,
     "[batch_norm_stats] input must have rank 2 to 8, got rank 9 (shape (1, 1, 1, 1, 1, 1, 1, 1, 1))"),
    (dict(input=np.zeros((2, 0, 3), F32)), ACLNN_ERR_PARAM_INVALID,
     "[batch_norm_stats] input dim 1 (C) must be positive, got shape (2, 0, 3)"),
    (dict(input=X, eps="small"), ACLNN_ERR_PARAM_INVALID, "[batch_norm_stats] eps must be a real number, got 'small'"),
    (dict(input=X, strategy="fast"), ACLNN_ERR_PARAM_INVALID,
     "[batch_norm_stats] strategy must be one of empty, split_c, split_r, atomic, channels, got 'fast'"),
    (dict(input=X, deterministic=1), ACLNN_ERR_PARAM_INVALID,
     "[batch_norm_stats] deterministic must be True, False or None, got 1"),
    (dict(input=X, arrival_seed=-1), ACLNN_ERR_PARAM_INVALID,
     "[batch_norm_stats] arrival_seed must be a non-negative int or None, got -1"),
    (dict(input=X, out=np.zeros(3, F32)), ACLNN_ERR_PARAM_INVALID,
     "[batch_norm_stats] out must be a (mean, invstd) pair of arrays, got <class 'numpy.ndarray'>"),
    (dict(input=X, out=(np.zeros(3, F32), None)), ACLNN_ERR_PARAM_NULLPTR,
     "[batch_norm_stats] invstd must not be None (null pointer), got None"),
    (dict(input=X, out=(np.zeros(3, np.float16), np.zeros(3, F32))), ACLNN_ERR_PARAM_INVALID,
     "[batch_norm_stats] mean dtype must be float32, got float16"),
    (dict(input=X, out=(np.zeros(3, F32), np.zeros(4, F32))), ACLNN_ERR_PARAM_INVALID,
     "[batch_norm_stats] invstd shape must be (C,) = (3,), got (4,)"),
    (dict(input=X, out=(np.zeros(3, F32), np.zeros(3, F32)[None])), ACLNN_ERR_PARAM_INVALID,
     "[batch_norm_stats] invstd shape must be (C,) = (3,), got (1, 3)"),
    (dict(input=X, strategy="split_r", soc="Ascend910B2", _shape=(1, 3, 4)), 561002,
     "strategy split_r cannot run this problem: the reduction axis is a single row"),
]


@pytest.mark.parametrize("kwargs, status, message", CASES, ids=[c[2][19:70] for c in CASES])
def test_message_and_status(kwargs, status, message):
    kwargs = dict(kwargs)
    shape = kwargs.pop("_shape", None)
    if shape is not None:
        kwargs["input"] = make_input(shape, "float32")
    eps = kwargs.pop("eps", 1e-5)
    with pytest.raises(normkern.NormkernError) as info:
        normkern.batch_norm_stats(kwargs.pop("input"), eps, **kwargs)
    assert info.value.status == status
    assert message in str(info.value) if status == 561002 else str(info.value) == message


def test_read_only_output_is_refused_and_nothing_is_written():
    mean = np.full(3, np.nan, F32)
    invstd = np.full(3, np.nan, F32)
    invstd.flags.writeable = False
    with pytest.raises(normkern.InvalidParameterError,
                       match=r"\[batch_norm_stats\] invstd must be writeable, got a read-only array"):
        normkern.batch_norm_stats(X, 1e-5, out=(mean, invstd))
    assert np.isnan(mean).all()


def test_errors_are_value_errors_for_plain_python_callers():
    with pytest.raises(ValueError):
        normkern.batch_norm_stats(np.zeros(5, F32), 1e-5)
