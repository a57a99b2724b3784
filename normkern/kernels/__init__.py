"""The compiled building blocks the op slices share (every module here is part of each cached kernel's key:
``runtime/cache.py``).

- ``lanes``: 64-lane sums, the fold orders (pairwise, halves), short rows in vector registers, prefetches;
- ``views``: row views without reference counting;
- ``streaming``: non-temporal stores of whole cache lines;
- ``dtypes``: float16 and bfloat16 in compiled code (widened exactly, narrowed to nearest-even);
- ``planes``: a core's walk over a channel's plane rows or a flat element range, and the core partials'
  combine in a given order;
- ``running``: a batch norm's running statistics and inverse standard deviation, per channel;
- ``simulate``: the NumPy twins of these orders, for the plan simulators.
"""

from . import running as running  # loaded with normkern, so that its cache is keyed like the others'
