"""normkern for PyTorch: every op on CPU tensors, a CPU ``SyncBatchNorm`` on torch.distributed, and batch and
group norm layers whose backward runs normkern. Needs the ``[torch]`` extra.

- ``normkern.torch.<op>``: the registered ops (``batch_norm_stats`` ... ``batch_norm_backward_elemt``) on
  tensors, no copy for contiguous ones (``_tensors``).
- ``SyncBatchNorm`` (``convert_sync_batchnorm``), ``BatchNorm1d/2d/3d``, ``GroupNorm``: drop-ins for
  ``torch.nn``'s, planning for the ``host`` SoC unless ``soc=`` says otherwise.
- ``set_threads_per_rank``: the Numba threads of each rank (default: its share of the cores).

normkern's launches run on PyTorch's OpenMP thread team wherever PyTorch is loaded (``normkern.runtime.launch``);
importing this module joins it at once.
"""

from __future__ import annotations

try:
    import torch as _torch  # noqa: F401
except ImportError as exc:  # pragma: no cover - the [torch] extra is missing
    raise ImportError("normkern.torch needs PyTorch: pip install 'normkern[torch]'") from exc

from .. import registry, runtime
from ._contract import NotSupportedError
from ._tensors import tensor_op, to_numpy, to_tensor
from ._threads import set_threads_per_rank, threads_for
from .batchnorm import BatchNorm1d, BatchNorm2d, BatchNorm3d, SyncBatchNorm
from .groupnorm import GroupNorm

globals().update({_name: tensor_op(_name) for _name in registry.names()})

# normkern's kernels run on PyTorch's own OpenMP threads, which spin after each of its ops (normkern/runtime).
runtime.join_openmp_team(_torch.get_num_threads)

__all__ = [
    *registry.names(), "SyncBatchNorm", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "GroupNorm",
    "set_threads_per_rank", "threads_for", "tensor_op", "to_numpy", "to_tensor", "NotSupportedError",
]
