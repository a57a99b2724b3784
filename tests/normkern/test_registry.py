"""The op registry: one record per op, and every generic layer serves exactly the registered ops."""

import inspect

import numpy as np
import pytest

import normkern
import tiling
from normkern import aclnn
from normkern import registry as _registry
from normkern.examples import example_inputs

RECORDS = _registry.records()


def test_every_op_is_registered_once_and_served_everywhere():
    names = [r.name for r in RECORDS]
    assert len(set(names)) == len(names) == 8
    for record in RECORDS:
        assert getattr(normkern, record.name) is record.function and record.name in normkern.__all__
        assert callable(getattr(aclnn, f"{record.aclnn}GetWorkspaceSize")) and callable(getattr(aclnn, record.aclnn))
        assert record.name in {e.op for e in tiling.support_table()}
    with pytest.raises(ValueError, match="registered twice"):
        _registry.register(RECORDS[0])


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.name)
def test_every_op_takes_the_same_keywords(record):
    keyword_only = [p.name for p in inspect.signature(record.function).parameters.values()
                    if p.kind is inspect.Parameter.KEYWORD_ONLY]
    assert keyword_only == list(_registry.COMMON_KEYWORDS)


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.name)
def test_a_record_runs_its_example_and_its_simulator_agrees(record):
    """The record's pieces fit: the example runs on the host plan, the plan it names is the plan that
    ran, the simulator gives the same bits, and the reference is close."""
    shape = (6, 4) if record.shape_ranks == (2, 2) else (3, 4, 5)
    options = {option.dest: option.kwargs.get("default", True) for option in record.options}
    kw = example_inputs(record.name, shape, **options)
    pristine = {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in kw.items()}
    outputs = record.call(kw, soc="host", arrival_seed=0, deterministic=True)
    assert len(outputs) == len(record.all_outputs)
    plan = record.plan(pristine, "host", None)
    assert plan.soc.name == "host" and plan.deterministic
    for got, want in zip(outputs, record.simulate(plan, pristine), strict=True):
        assert np.array_equal(np.asarray(got).view(np.uint8), np.asarray(want).view(np.uint8))
    for got, want in zip(outputs, record.reference(pristine), strict=True):
        np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=1e-5, atol=1e-5)
    assert record.bytes_moved(pristine) > 0


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.name)
def test_every_op_checks_the_common_keywords(record):
    kw = example_inputs(record.name, (6, 4) if record.shape_ranks == (2, 2) else (3, 4, 5))
    with pytest.raises(normkern.InvalidParameterError, match=rf"\[{record.name}\] arrival_seed must be a "
                       "non-negative int or None, got -1"):
        record.function(**kw, soc="host", arrival_seed=-1)
    with pytest.raises(normkern.InvalidParameterError, match=rf"\[{record.name}\] deterministic must be True, "
                       "False or None, got 'yes'"):
        record.function(**kw, soc="host", deterministic="yes")
