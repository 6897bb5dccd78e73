"""kernelaudit: find and stop silent wrong answers from GPU tensor kernels.

The public API is small and loaded lazily: importing ``kernelaudit`` (or one product,
``kernelaudit.guard``) loads no other product.

* :func:`run_sweep`, :class:`GridSpec`, :class:`Case`, :func:`grid` - the boundary sweep;
* :func:`deterministic` - batch-invariant, fixed-order kernels (:mod:`kernelaudit.repro`);
* :class:`Verdict`, :class:`Status` - what every judge says;
* :class:`Thresholds`, ``T31``, ``T32``, ``T33`` - 2^31 / 2^32 / 2*2^32, scalable;
* :func:`make_fault_model` - deliberately wrong backends for tests and what-ifs;
* :class:`InvalidArgument`, :class:`KernelAuditError`, :class:`UnsafeCallError` - errors.

The guard is :mod:`kernelaudit.guard`; the oracle zoo :mod:`kernelaudit.zoo`; INT8
conformance and ULP tools :mod:`kernelaudit.conform`.
"""

from __future__ import annotations

from ._lazy import lazy_exports

__version__ = "0.1.0"

#: Public name -> the module that defines it.
_EXPORTS = {
    "Case": "kernelaudit.sweep.cases", "GridSpec": "kernelaudit.sweep.cases", "grid": "kernelaudit.sweep.cases",
    "run_sweep": "kernelaudit.sweep.schedule",
    "deterministic": "kernelaudit.repro",
    "Verdict": "kernelaudit.verdict", "Status": "kernelaudit.verdict",
    "Thresholds": "kernelaudit.thresholds", "T31": "kernelaudit.thresholds", "T32": "kernelaudit.thresholds",
    "T33": "kernelaudit.thresholds",
    "make_fault_model": "kernelaudit.faults",
    "InvalidArgument": "kernelaudit.errors", "KernelAuditError": "kernelaudit.errors",
    "UnsafeCallError": "kernelaudit.errors",
}
__all__ = ["__version__", *_EXPORTS]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
