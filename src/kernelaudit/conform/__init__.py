"""kernelaudit conform (product 4): INT8 GEMM conformance below one bf16 spacing,
power-of-two requantization, and ULP tools.

Public surface (each name loads its module on first use; ``import kernelaudit.conform``
loads neither torch-heavy code nor Triton):

* :class:`Recipe` - the W8A8 epilogue spelled out (scale order, bias, rounding, clamp, output)
* :func:`reference_gemm` - the exact CPU reference of every recipe
* :func:`torch_w8a8`, :func:`triton_w8a8` - the implementations under test
* :data:`FAULTS`, :data:`CHECKS` - planted faults and the checks that do (not) see them
* :func:`quantize_rows`, :func:`pow2_scale`, :func:`agreement` - power-of-two requantization
* :func:`compare_ulp`, :func:`ulp_distance`, :func:`ulp_error`, :func:`plot_ulp` - ULP tools
* :func:`run_int8` - the whole campaign behind ``kernelaudit conform int8``
"""

from __future__ import annotations

from .._lazy import lazy_exports

_EXPORTS = {
    "Recipe": "recipe", "reference_gemm": "reference", "torch_w8a8": "torch_path", "triton_w8a8": "kernels",
    "TileConfig": "kernels", "FAULTS": "faults", "CHECKS": "checks", "Case": "cases", "suite": "cases",
    "quantize_rows": "quantize", "pow2_scale": "quantize", "agreement": "pow2", "accuracy_cost": "pow2",
    "compare_ulp": "ulp", "ulp_distance": "ulp", "ulp_error": "ulp", "plot_ulp": "ulp", "run_int8": "campaign",
}
__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
