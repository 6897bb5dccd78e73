"""``bound``: a float64 reference plus an error bound derived from the problem and its precision.

Every problem is judged with the error model :mod:`.derived` derives from evaluations
of its own ``Model`` (no annotation needed). A problem may declare ``ERROR_MODEL`` to
override it; then, for each output element, the allowed error is

    bound = u * (LAMBDA * sqrt(n) * S + FN_ULPS * |ref|) + n * tiny

where ``u`` is the unit roundoff of the problem's dtype (2^-24 for float32; 2^-11 when
the problem sets ``ALLOW_TF32`` and so accepts TF32 operands), ``n`` the number of
terms a value accumulates, ``S`` the magnitude those terms carry, ``ref`` the float64
reference and ``tiny`` the smallest normal number (room for underflow). The problem
declares how ``n`` and ``S`` arise in ``ERROR_MODEL``:

``{"kind": "elementwise"}``
    one evaluation of a function per element: ``n = 1``, ``S = max(|ref|, rms(ref))``
    (relative error, with an absolute floor at the output's typical magnitude, where
    functions such as ``exp(x) - 1`` lose relative accuracy near zero).
``{"kind": "exact"}``
    max, min, argmax, max-pooling, copies: no rounding at all, bound 0.
``{"kind": "multilinear", "length": "K"}``
    sums of products (matmul, sums, means, scans, average pooling): ``S`` is the op
    applied to the absolute values of inputs and parameters (for a dot product
    ``|a|.|b|``), ``n`` the reduction length.
``{"kind": "scaled", "length": ...}``
    ``S = error_scale(model, *inputs)``, a function the problem file defines in
    float64 (softmax, norms, losses, attention).

``length`` is an int, a shape constant's name or a list of names (their product).

Why ``sqrt(n)`` and not the worst-case ``n``: rounding errors of a sum behave like a
random walk (Higham and Mary's probabilistic error analysis), so ``LAMBDA * sqrt(n) *
u`` bounds them with overwhelming probability, and only that tighter bound separates
correct fp32 accumulation from a precision downgrade: an fp32 matmul computed in bf16
has errors of about ``2^-9 * sqrt(K) * rms(a*b)``, which the worst-case bound ``K * u
* |a|.|b|`` would hide for every K above a few hundred.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ..problems.problem_case import (ProblemCase, ReferenceFailed, cast_floating, checker_out_of_memory,
                                     float64_backend, is_out_of_memory)
from ...verdict import Status, Verdict
from .base import Comparator
from .compare import chunked_compare, chunked_mismatch_verdict, structure_verdict
# One table of unit roundoffs and one LAMBDA, shared with the derived error model.
from .derived import LAMBDA, TF32_UNIT_ROUNDOFF, UNIT_ROUNDOFF, DerivedModel, _model_at, derive, widened_for_reach

#: ULPs allowed for evaluating one function (exp, erf, division) and the final rounding.
FN_ULPS = 8.0
#: The kinds of ``ERROR_MODEL`` this oracle understands.
ERROR_MODEL_KINDS = ("elementwise", "exact", "multilinear", "scaled")


def unit_roundoff(case: ProblemCase) -> float:
    """``u`` for the case's dtype, widened to TF32 when the problem allows TF32."""
    u = UNIT_ROUNDOFF.get(case.dtype, 2.0**-24)
    if case.problem.allow_tf32:
        u = max(u, TF32_UNIT_ROUNDOFF)
    return u


def accumulation_length(case: ProblemCase, length: Any) -> int:
    """Resolve ``ERROR_MODEL["length"]`` (int, shape name, or list of names) for the case."""
    if length is None:
        return 1
    if isinstance(length, int):
        return length
    if isinstance(length, str):
        if length in case.shapes:
            return int(case.shapes[length])
        return int(getattr(case.problem.module, length))
    return math.prod(accumulation_length(case, x) for x in length)


def _model64(case: ProblemCase, *, absolute: bool) -> torch.nn.Module:
    """The case's model in float64 (``|parameters|`` with ``absolute``), shared with the derivation."""
    return _model_at(case, torch.float64, absolute=absolute)


def _elementwise_scale(ref: torch.Tensor, blocks: bool = False) -> torch.Tensor:
    """max(|ref|, rms(ref)): relative error, with an absolute floor at the output's typical size
    (``blocks``: each block's, :func:`.values.block_rms`, for a ``block_floor`` case)."""
    if blocks:
        from .values import block_rms

        floor = block_rms(ref).reshape(ref.shape).to(ref.dtype)
        return torch.maximum(torch.nan_to_num(ref.abs(), posinf=0.0), floor)
    finite = ref[torch.isfinite(ref)]
    rms = float(finite.pow(2).mean().sqrt()) if finite.numel() else 0.0
    return torch.nan_to_num(ref.abs(), posinf=0.0).clamp_min(rms)


def magnitude(case: ProblemCase) -> list[torch.Tensor] | None:
    """The ``S`` of the module docs for every output (``None`` for exact ops)."""
    model = case.problem.error_model or {}
    kind = model.get("kind")
    refs = case.reference()
    if kind == "elementwise":
        return [_elementwise_scale(r, case.block_floor) if r.is_floating_point() else None for r in refs]
    if kind == "exact":
        return None
    inputs64 = cast_floating(case.inputs, torch.float64)
    with torch.no_grad(), float64_backend(case.device):
        if kind == "multilinear":
            absolute = [v.abs() if isinstance(v, torch.Tensor) and v.is_floating_point() else v for v in inputs64]
            out = _model64(case, absolute=True)(*absolute)
        else:
            fn = getattr(case.problem.module, "error_scale", None)
            if fn is None:
                raise ValueError(
                    f"{case.problem.path}: ERROR_MODEL kind 'scaled' needs a function error_scale(model, *inputs)"
                )
            out = fn(_model64(case, absolute=False), *inputs64)
    outs = [out] if isinstance(out, torch.Tensor) else list(out)
    return [o.abs().to(torch.float64).expand_as(r) if r.is_floating_point() else None for o, r in zip(outs, refs)]


def error_bounds(case: ProblemCase) -> list[torch.Tensor | None]:
    """The allowed absolute error per element of every output (``None``: must be exact)."""
    key = "bounds"
    if key in case._cache:
        return case._cache[key]
    model = case.problem.error_model or {}
    refs = case.reference()
    u = unit_roundoff(case)
    n = accumulation_length(case, model.get("length")) if model.get("kind") in ("multilinear", "scaled") else 1
    tiny = torch.finfo(case.dtype).tiny if case.dtype.is_floating_point else 0.0
    mags = magnitude(case)
    bounds: list[torch.Tensor | None] = []
    for i, ref in enumerate(refs):
        if mags is None or mags[i] is None or not ref.is_floating_point():
            bounds.append(None)
            continue
        s = torch.nan_to_num(mags[i], nan=0.0, posinf=0.0)
        bounds.append(u * (LAMBDA * math.sqrt(n) * s + FN_ULPS * torch.nan_to_num(ref.abs(), posinf=0.0)) + n * tiny)
    case._cache[key] = bounds
    return bounds


class BoundOracle(Comparator):
    """Every element within its error bound of the float64 reference: the declared
    ``ERROR_MODEL``'s where the problem has one, else the derived one (:mod:`.derived`)."""

    name = "bound"

    def prepare(self, case: ProblemCase) -> None:
        if case.problem.error_model is not None:
            error_bounds(case)
        else:
            derive_or_none(case)

    def compare(self, case: ProblemCase, outputs: list[torch.Tensor]) -> Verdict:
        model = case.problem.error_model
        if model is not None and model.get("kind") not in ERROR_MODEL_KINDS:
            return Verdict.error(
                f"{case.problem.path}: ERROR_MODEL kind {model.get('kind')!r}: allowed kinds are "
                + ", ".join(ERROR_MODEL_KINDS)
            )
        refs = case.reference()
        bad_structure = structure_verdict(case, outputs, refs, metric="err/bound")
        if bad_structure is not None:
            return bad_structure
        if model is not None:
            bounds = error_bounds(case)
            how = f"declared error model {model.get('kind')}, u=2^{math.log2(unit_roundoff(case)):.0f}"
            exact_why = f"{model.get('kind')} op: the result must be exact"
        else:
            derived = derive_or_none(case)
            if isinstance(derived, str):
                return Verdict.skipped(f"{case.describe()}: bound could not derive an error model: {derived}",
                                       reason="derivation failed")
            bounds = derived.allowed
            how = derived.describe()
            exact_why = ("the float64 reference is representable and every legitimate evaluation "
                         f"gave it bit for bit: the result must be exact ({how})")
            v = judge_bounds(case, outputs, refs, bounds, how=how, exact_why=exact_why)
            if v.status is Status.WRONG and (wide := widened_for_reach(case, derived)) is not None:
                # before rejecting: the bound widened for the range of the intermediates
                how += "; widened for the intermediates' range (H = the module on max(|x|, 1))"
                return judge_bounds(case, outputs, refs, wide, how=how, exact_why=exact_why)
            return v
        return judge_bounds(case, outputs, refs, bounds, how=how, exact_why=exact_why)


def derive_or_none(case: ProblemCase) -> DerivedModel | str:
    """The derived model, or why it cannot be derived (a reference failure propagates)."""
    if "derived-failed" in case._cache:  # kept when the case's large entries are released
        return case._cache["derived-failed"]
    try:
        return derive(case)
    except ReferenceFailed:
        raise
    except Exception as exc:  # noqa: BLE001 - an evaluation the derivation needs raised
        if is_out_of_memory(exc):  # the checker's memory, not a model that cannot be derived
            raise checker_out_of_memory(case, "the derived error model", exc) from exc
        why = case._cache["derived-failed"] = f"{type(exc).__name__}: {exc}"
        return why


def judge_bounds(case: ProblemCase, outputs: list[torch.Tensor], refs: list[torch.Tensor],
                 bounds: list[torch.Tensor | None], *, how: str, exact_why: str) -> Verdict:
    """``wrong`` at the first output with an element beyond its bound (``None``: exact), else ``ok``.

    Compared in chunks (:func:`~.compare.chunked_compare`): no float64 copy of a whole output.
    """
    worst = 0.0
    for i, (got, ref, bnd) in enumerate(zip(outputs, refs, bounds)):
        if got.is_floating_point() != ref.is_floating_point():
            return Verdict(Status.WRONG, metric="dtype",
                           message=f"{case.describe()}: output {i} has dtype {got.dtype}, reference {ref.dtype}")
        if bnd is None:
            # exact: the correctly rounded reference, bit for bit (NaN meets NaN)
            res = chunked_compare(got, ref, None)
            if res.mismatched:
                return chunked_mismatch_verdict(case, i, got, ref, res, metric="err", tolerance=0.0,
                                                value=res.max_err if res.max_err or res.worst_diff == 0 else
                                                float("inf"), extra=exact_why)
            continue
        flat = bnd.expand_as(ref).reshape(-1)
        res = chunked_compare(got, ref, lambda r, a, b, f=flat: f[a:b])
        if res.mismatched:
            return chunked_mismatch_verdict(case, i, got, ref, res, metric="err/bound", tolerance=1.0, extra=how)
        worst = max(worst, res.worst_ratio)
    return Verdict.passed("err/bound", worst, 1.0, error_model=how)


#: atol = rtol of the fallback comparison where no error model can be derived (the
#: reference cannot be evaluated the ways the derivation needs): KernelBench's own
#: tolerance, coarse, but it never rejects a correct fp32 kernel.
FALLBACK_TOL = 1e-2


class BoundOrClose(Comparator):
    """``bound``; where it cannot derive an error model (an evaluation the derivation
    needs raises), ``allclose`` at :data:`FALLBACK_TOL` against the float64 reference,
    and the verdict says so.

    What ``shapes`` and ``values`` judge with by default.
    """

    name = "bound"

    def __init__(self, bound: BoundOracle | None = None, *, tol: float = FALLBACK_TOL) -> None:
        self.bound = bound or BoundOracle()
        self.tol = tol

    def falls_back(self, case: ProblemCase) -> bool:
        """True where ``bound`` cannot judge (no error model declared nor derivable)."""
        if case.problem.error_model is not None or "derived-floor" in case._cache:
            return False  # declared, or derived already (its summary outlives the released model)
        return isinstance(derive_or_none(case), str)

    def prepare(self, case: ProblemCase) -> None:
        self.bound.prepare(case)
        case.reference()

    def compare(self, case: ProblemCase, outputs: list[torch.Tensor]) -> Verdict:
        if not self.falls_back(case):
            return self.bound.compare(case, outputs)
        refs = case.reference()
        metric = "err/(atol+rtol*|ref|)"
        bad_structure = structure_verdict(case, outputs, refs, metric=metric)
        if bad_structure is not None:
            return bad_structure
        why = (f"no error model ({derive_or_none(case)}), so bound could not judge; "
               f"allclose(atol=rtol={self.tol:g}) against the float64 reference instead")
        worst = 0.0
        for i, (got, ref) in enumerate(zip(outputs, refs)):
            res = chunked_compare(got, ref, lambda r, a, b: self.tol + self.tol * r.abs())
            if res.mismatched:
                return chunked_mismatch_verdict(case, i, got, ref, res, metric=metric, tolerance=1.0, extra=why)
            worst = max(worst, res.worst_ratio)
        return Verdict.passed(metric, worst, 1.0, fallback=why)
