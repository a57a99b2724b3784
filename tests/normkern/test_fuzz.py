"""Fuzzing every op (Hypothesis): valid calls equal their plan simulator bit for bit and stay near the float64
reference; invalid calls raise a normkern error and nothing else. Bounded for the default run;
``--hypothesis-profile=fuzz`` runs thousands of examples (docs/reliability.md)."""

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import normkern
from normkern import registry as _registry
from normkern.examples import example_inputs
from tests.tolerances import TOLERANCE

RECORDS = _registry.records()
SOCS = ["host", "Ascend910B2", "Ascend950", "Ascend910"]
DTYPES = ["float32", "float16", "bfloat16"]


def _shape(record, data):
    if record.shape_ranks == (2, 2):  # gather: (devices, channels)
        return (data.draw(st.integers(1, 12)), data.draw(st.integers(1, 40)))
    return tuple(data.draw(st.lists(st.integers(1, 9), min_size=2, max_size=5)))


def _inputs(record, shape, dtype, seed):
    options = {o.dest: o.kwargs.get("default", True) for o in record.options}
    if "group" in options:
        options["group"] = math.gcd(shape[1], 4) or 1
    return example_inputs(record.name, shape, dtype, seed=seed, **options)


def _copy(kw):
    return {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in kw.items()}


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(RECORDS), st.sampled_from(DTYPES), st.sampled_from(SOCS), st.integers(0, 2**16), st.data())
def test_valid_calls_equal_the_simulator_and_stay_near_float64(record, dtype, soc, seed, data):
    kw = _inputs(record, _shape(record, data), dtype, seed)
    pristine = _copy(kw)
    try:
        outputs = record.call(kw, soc=soc, arrival_seed=0)
    except normkern.NormkernError:
        return  # a dtype or an op the SoC's product table refuses: refused as such
    plan = record.plan(_copy(pristine), soc, None)
    for got, want in zip(outputs, record.simulate(plan, _copy(pristine)), strict=True):
        if want is not None:
            assert np.array_equal(np.asarray(got).view(np.uint8), np.asarray(want).view(np.uint8)), str(plan)
    for got, want in zip(outputs, record.reference(_copy(pristine)), strict=True):
        if got is None or want is None:
            continue
        got64, want64 = np.asarray(got).astype(np.float64), np.asarray(want, np.float64)
        finite = np.isfinite(want64)
        assert np.array_equal(np.isfinite(got64), finite)
        scale = float(np.abs(want64[finite]).max(initial=0.0)) + 1.0
        # loose: the simulator holds the exact bits; this catches a wrong formula, not a rounding
        assert float(np.abs(got64[finite] - want64[finite]).max(initial=0.0)) <= 256 * TOLERANCE[dtype] * scale


def _mutations(value):
    """Replacements that break some rule of a tensor or scalar argument."""
    found = [None, "text", [1.0, 2.0], 3, float("nan")]
    if isinstance(value, np.ndarray):
        with np.errstate(invalid="ignore"):
            found += [value.astype(np.float64), value.astype(np.int32), value.reshape(-1), value[..., None],
                      value.astype(value.dtype.newbyteorder(">")), np.ma.masked_array(value),
                      value.astype(np.complex64), np.zeros((0,) + value.shape[1:], value.dtype),
                      value[:1] if value.shape and value.shape[0] > 1 else value,
                      np.asarray(value[(0,) * value.ndim] if value.size else 0.0)]
    return found


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(RECORDS), st.sampled_from(DTYPES), st.integers(0, 2**16), st.data())
def test_invalid_calls_raise_normkern_errors_and_nothing_else(record, dtype, seed, data):
    kw = _inputs(record, _shape(record, data), dtype, seed)
    name = data.draw(st.sampled_from(sorted(kw)))
    kw[name] = data.draw(st.sampled_from(_mutations(kw[name])))
    keyword = data.draw(st.sampled_from([{}, {"soc": "nope"}, {"strategy": "nope"}, {"arrival_seed": -1},
                                         {"deterministic": "yes"}, {"out": 5}]))
    try:
        record.function(**kw, soc="host", **{k: v for k, v in keyword.items() if k != "soc"}) \
            if "soc" not in keyword else record.function(**kw, **keyword)
    except normkern.NormkernError as error:
        assert error.status in (161001, 161002, 561002, 561003) and str(error).startswith("[")
    except Exception as error:  # pragma: no cover - what the test exists to catch
        pytest.fail(f"{record.name}({name}={type(kw[name]).__name__}, {keyword}) raised {type(error).__name__}: "
                    f"{error}")
