"""kernelaudit: find and stop silent wrong answers from GPU tensor kernels.

The public API is small; everything else is private to the package.

* :func:`run_sweep`, :class:`GridSpec`, :class:`Case` - the boundary sweep;
* :class:`Verdict`, :class:`Status` - what an oracle says;
* :class:`Thresholds` - 2^31 / 2^32 / 2*2^32, scalable;
* :func:`make_fault_model` - deliberately wrong backends for tests and what-ifs;
* :class:`InvalidArgument`, :class:`UnsafeCallError` - errors.
"""

__version__ = "0.1.0"

from .cases import Case, GridSpec, grid
from .errors import InvalidArgument, KernelAuditError, UnsafeCallError
from .faults import make_fault_model
from .sweep import run_sweep
from .thresholds import T31, T32, T33, Thresholds
from .verdict import Status, Verdict

__all__ = [
    "__version__", "Case", "GridSpec", "grid", "run_sweep", "Verdict", "Status", "Thresholds",
    "T31", "T32", "T33", "make_fault_model", "InvalidArgument", "KernelAuditError", "UnsafeCallError",
]
