"""The dtype plumbing: bfloat16 is recognised without normkern importing ml_dtypes up front."""

import ast
import subprocess
import sys
import textwrap

import ml_dtypes
import numpy as np

from normkern.kernels.dtypes import dtype_name, kernel_view


def test_import_leaves_ml_dtypes_alone_and_a_bfloat16_array_still_runs():
    # ml_dtypes 0.7.0 takes most of a second to import; normkern imports it only for a bfloat16 input,
    # and such a caller has imported it already. A fresh process, so that nothing imported it before.
    script = textwrap.dedent("""
        import sys
        import normkern
        assert "ml_dtypes" not in sys.modules, "import normkern imported ml_dtypes"
        import numpy as np
        mean, invstd = normkern.batch_norm_stats(np.ones((2, 3, 2, 2), np.float32), 1e-5)
        assert "ml_dtypes" not in sys.modules, "a float32 call imported ml_dtypes"
        import ml_dtypes
        x = np.arange(24, dtype=np.float32).reshape(2, 3, 2, 2).astype(ml_dtypes.bfloat16)
        mean, invstd = normkern.batch_norm_stats(x, 1e-5, soc="host")
        print(mean.tolist())
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    x = np.arange(24, dtype=np.float64).reshape(2, 3, 2, 2)
    assert ast.literal_eval(out.stdout) == x.mean(axis=(0, 2, 3)).tolist()  # small integers: exact in bf16 and float32


def test_names_and_kernel_views_of_the_three_compute_dtypes():
    for dtype, name, view in ((np.float32, "float32", np.float32), (np.float16, "float16", np.uint16),
                              (ml_dtypes.bfloat16, "bfloat16", np.int16)):
        assert dtype_name(np.dtype(dtype)) == name
        assert dtype_name(dtype) == name  # a scalar type as well as a dtype
        x = np.array([1.5, -2.0], dtype)
        v = kernel_view(x)
        assert v.dtype == np.dtype(view) and np.shares_memory(v, x)
    assert dtype_name(np.dtype(np.float64)) == "float64"
