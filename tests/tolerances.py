"""The one tolerance table every comparison with a float64 reference uses.

An output stored in ``dtype`` may differ from the float64 reference by at most ``TOLERANCE[dtype]``
times its scale: the largest magnitude of the output, or of a larger term that cancels into it (the
op's test says which). float32: the rounding of float32 sums over a few thousand terms; float16 and
bfloat16: four half-units of their last place, the final rounding of a float32 result dominating.
"""

import numpy as np

TOLERANCE = {"float32": 8e-6, "float16": 2e-3, "bfloat16": 1.6e-2}


def assert_close(got, want, *, scale=None, dtype=None, name="output") -> None:
    """``max |got - want| <= TOLERANCE[dtype] * scale``; ``dtype`` defaults to got's, ``scale`` to max |want|."""
    got64 = np.asarray(got).astype(np.float64)
    want64 = np.asarray(want, np.float64)
    key = dtype or np.dtype(np.asarray(got).dtype).name
    if scale is None:
        scale = float(np.abs(want64).max(initial=0.0))
    error = float(np.abs(got64 - want64).max(initial=0.0))
    bound = TOLERANCE[key] * scale
    assert error <= bound, f"{name}: max error {error:.3g} > {bound:.3g} ({key}, scale {scale:.3g})"
