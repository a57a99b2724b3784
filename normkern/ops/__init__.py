"""One vertical slice per operator: api (validation, plan, kernel call), kernel, simulator, reference, and
its record in the op registry. Importing a slice registers it: one line per op."""

from . import batch_norm as batch_norm
from . import batch_norm_backward_elemt as batch_norm_backward_elemt
from . import batch_norm_backward_reduce as batch_norm_backward_reduce
from . import batch_norm_elemt as batch_norm_elemt
from . import batch_norm_gather_stats as batch_norm_gather_stats
from . import batch_norm_stats as batch_norm_stats
from . import fast_batch_norm_backward as fast_batch_norm_backward
from . import group_norm_backward as group_norm_backward
