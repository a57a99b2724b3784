"""The determinism switch, and what atomic plans do with it."""

import numpy as np
import pytest

import normkern
from normkern import aclnn

from .conftest import TINY, bits, make_input

X = make_input((60, 3, 257), "float32", seed=9)


@pytest.fixture(autouse=True)
def _switch_off():
    with normkern.set_deterministic(False):
        yield


def test_setter_acts_now_and_restores_as_a_context_manager():
    assert normkern.get_deterministic() == 0
    with normkern.set_deterministic(True):
        assert normkern.get_deterministic() == 1
        with normkern.set_deterministic(3):
            assert normkern.get_deterministic() == 3
        assert normkern.get_deterministic() == 1
    assert normkern.get_deterministic() == 0


def test_acl_option_drives_the_same_switch():
    assert aclnn.aclrtCtxSetSysParamOpt(aclnn.ACL_OPT_DETERMINISTIC, 1) == aclnn.ACL_SUCCESS
    assert normkern.get_deterministic() == 1
    assert aclnn.aclrtCtxGetSysParamOpt(aclnn.ACL_OPT_DETERMINISTIC) == (aclnn.ACL_SUCCESS, 1)
    assert aclnn.aclrtCtxSetSysParamOpt(aclnn.ACL_OPT_DETERMINISTIC, 7) == aclnn.ACL_ERROR_INVALID_PARAM
    assert aclnn.aclGetRecentErrMsg() == "aclrtCtxSetSysParamOpt: ACL_OPT_DETERMINISTIC value must be 0-3, got 7"
    assert aclnn.aclrtCtxSetSysParamOpt(99, 1) == aclnn.ACL_ERROR_INVALID_PARAM
    assert aclnn.aclrtCtxSetSysParamOpt(aclnn.ACL_OPT_DETERMINISTIC, 0) == aclnn.ACL_SUCCESS
    assert normkern.get_deterministic() == 0


def test_bad_switch_values_are_refused():
    with pytest.raises(normkern.InvalidParameterError,
                       match=r"\[set_deterministic\] value must be a bool or an ACL_OPT_DETERMINISTIC level "
                             r"0-3, got 4"):
        normkern.set_deterministic(4)


def test_atomic_replays_from_its_seed_and_varies_without_one():
    seeded = [normkern.batch_norm_stats(X, 1e-5, soc=TINY, strategy="atomic", arrival_seed=s) for s in range(12)]
    again = normkern.batch_norm_stats(X, 1e-5, soc=TINY, strategy="atomic", arrival_seed=3)
    assert np.array_equal(bits(again[0]), bits(seeded[3][0]))
    distinct = {bits(m).tobytes() for m, _ in seeded}
    assert len(distinct) > 1, "12 arrival orders of 5 partials gave one result"
    deterministic = normkern.batch_norm_stats(X, 1e-5, soc=TINY, strategy="split_r")
    for mean, _ in seeded:  # the spread of the orders stays within a few float32 ulps
        assert np.abs(mean.view(np.int32) - deterministic[0].view(np.int32)).max() <= 4


def test_determinism_refuses_atomic_globally_and_per_call():
    message = (r"\[batch_norm_stats\] strategy cannot be used while determinism is on: it adds 5 core partials "
               r"in arrival order, got 'atomic'")
    with normkern.set_deterministic(True):
        with pytest.raises(normkern.DeterminismError, match=message):
            normkern.batch_norm_stats(X, 1e-5, soc=TINY, strategy="atomic")
        normkern.batch_norm_stats(X, 1e-5, soc=TINY, strategy="atomic", deterministic=False)
    with pytest.raises(normkern.DeterminismError, match=message):
        normkern.batch_norm_stats(X, 1e-5, soc=TINY, strategy="atomic", deterministic=True)


def test_default_choice_is_deterministic_either_way():
    with normkern.set_deterministic(True):
        on = normkern.batch_norm_stats(X, 1e-5, soc=TINY)
    off = normkern.batch_norm_stats(X, 1e-5, soc=TINY)
    assert np.array_equal(bits(on[0]), bits(off[0])) and np.array_equal(bits(on[1]), bits(off[1]))


def test_default_soc_setter():
    with normkern.set_default_soc(TINY):
        assert normkern.get_default_soc() is TINY
        via_default = normkern.batch_norm_stats(X, 1e-5)
    assert normkern.get_default_soc().name == "Ascend910B2"
    explicit = normkern.batch_norm_stats(X, 1e-5, soc=TINY)
    assert np.array_equal(bits(via_default[0]), bits(explicit[0]))
