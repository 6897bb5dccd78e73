"""Tolerances: calibrated below the thresholds, recorded with the run.

The study's recipe: run each configuration at a size far below every threshold,
take the worst error each metric shows there, and accept up to
:data:`CALIBRATION_FACTOR` times that, never less than a floor of a few units of the
dtype's machine epsilon (so a calibration that happened to be exact does not make the
oracle reject an honest last-bit difference). Exact ops get tolerance 0.
"""

from __future__ import annotations

import torch

from ..errors import CheckerBug
from .ops.spec import DTYPES

#: Accept up to this many times the worst error seen below the thresholds (the study's 10x).
CALIBRATION_FACTOR = 10.0
#: Floor of a calibrated tolerance, in units of the dtype's machine epsilon.
FLOOR_EPS = 2.0
#: Per-metric floors where theory gives a tighter honest bound: ``cond`` divides the
#: error by sum |a||g| >= |result|, so one rounding of the result costs at most half an
#: epsilon; a floor of 2 eps there hid a corrupted batch diluted in a bf16 weight
#: gradient (mm/addmm/linear backward, rule C).
FLOOR_EPS_BY_METRIC = {"cond": 0.5}
#: Metrics that must match exactly.
EXACT_METRICS = frozenset({"exact"})


#: TF32's machine epsilon (10 explicit mantissa bits).
TF32_EPS = 2.0 ** -10


def tf32_floor(op: str, family: str, dtype: str, device_type: str, allowed: bool) -> float | None:
    """The floor of a float32 convolution's tolerances on CUDA where cuDNN may compute it
    in TF32 (``allowed``: ``torch.backends.cudnn.allow_tf32``, True by default), else
    None. cuDNN picks the algorithm per call, from its shapes, so the calibration's small
    call may get a full float32 one and the case's a TF32 one: on an H100 (torch 2.11,
    2026-12-05) conv3d at 2^32 elements erred 2.4e-4 on every batch against a calibrated
    4.9e-7, and conv_transpose3d's last batches 2.6e-4, TF32's rounding, not a size
    fault (one wrecks values: errors near 1). A float32 case then passes at TF32's
    precision, :data:`FLOOR_EPS` of its epsilon."""
    if device_type != "cuda" or dtype != "float32" or not allowed or family != "conv_pool" or "conv" not in op:
        return None
    return FLOOR_EPS * TF32_EPS


def with_floor(tolerances: dict[str, float], floor: float) -> dict[str, float]:
    """``tolerances`` with every metric but the exact ones at least ``floor``."""
    return {k: v if k.split(":")[-1] in EXACT_METRICS else max(float(v), floor) for k, v in tolerances.items()}


def floor_for(dtype: str, metric: str) -> float:
    """The least tolerance a metric gets for a dtype (0 for exact metrics)."""
    if metric in EXACT_METRICS:
        return 0.0
    dt = DTYPES[dtype]
    eps = torch.finfo(dt).eps if dt.is_floating_point else torch.finfo(torch.float64).eps
    return FLOOR_EPS_BY_METRIC.get(metric, FLOOR_EPS) * eps


def calibrated(worst: dict[str, float], dtype: str) -> dict[str, float]:
    """Tolerances from a calibration's worst metrics: ``max(10 * worst, floor)``."""
    out = {}
    for name, w in worst.items():
        metric = name.split(":")[-1]
        if metric in EXACT_METRICS:
            out[name] = 0.0
        else:
            out[name] = max(CALIBRATION_FACTOR * float(w), floor_for(dtype, metric))
    return out


class MissingTolerance(CheckerBug):
    """A metric has no calibrated tolerance: judging without one would pass anything."""


def tolerance_for(tolerances: dict[str, float] | None, name: str, metric: str) -> float | None:
    """The tolerance of output ``name``'s ``metric``; None while calibrating.

    A metric the calibration did not record (a run store calibrated by another version,
    say) raises :class:`MissingTolerance` instead of silently accepting everything."""
    if tolerances is None:
        return None
    key = f"{name}:{metric}"
    if key in tolerances:
        return tolerances[key]
    if metric in EXACT_METRICS:
        return 0.0
    raise MissingTolerance(f"no calibrated tolerance for {key} (calibrated: {', '.join(sorted(tolerances)) or 'none'})")
