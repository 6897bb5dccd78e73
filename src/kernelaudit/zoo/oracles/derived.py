"""The error a correct implementation may make, derived from the problem with no annotation.

For a case (problem, inputs, dtype) and every output element ``i`` this module
computes the allowed absolute error ``allowed[i]`` from evaluations of the problem's
own ``Model``, never from a declared ``ERROR_MODEL`` (which stays an optional
override in :mod:`.bound`):

1. **the float64 reference** ``ref`` (``case.reference()``);
2. **legitimate evaluations at the problem's dtype**, each a correct implementation
   that orders its arithmetic differently: the default evaluation; another thread
   count (CPU: torch splits blocked reductions by thread); the oneDNN/cuDNN backends
   off (another convolution and matmul algorithm); inputs split in two along dim 0
   where the model is batch-separable (checked in float64 first: other GEMM
   blockings); operands rounded to TF32 where the problem allows TF32
   (``ALLOW_TF32``, its dtype policy); and the float64 reference rounded once to the
   dtype. ``sigma[i]`` is the largest distance of these from ``ref``;
3. **a magnitude** ``M[i]`` the rounding errors carry. Where the model is affine in
   each floating input separately (multilinear: matmul, conv, linear, sums, means,
   scans, average pooling; tested in float64 by second differences) and the module
   applied to ``|inputs|`` and ``|parameters|`` bounds every sign pattern of the
   inputs (tested with random sign flips: ``x - mean(x)`` fails it), ``M`` is that
   absolute-value evaluation ``S`` and ``n``, the number of terms a value
   accumulates, is derived from it: ``n = |model|(1)^2 / E[(model(r) - model(0))^2]``
   over Rademacher inputs ``r`` (exactly ``K`` for a matmul, ``DIM`` for a mean).
   Elsewhere ``M[i] = max(|ref[i]|, rms(ref))``;
4. **smoothing**: one alternative that happens to land on the reference must not
   make an element's bound 0, so ``sigma`` is blended with ``c * M`` where ``c`` is the
   root mean square of ``sigma / M`` over the output (the error per unit magnitude
   this evaluation makes, spread by each element's own magnitude).

Then, per element, with ``u`` the unit roundoff of the dtype (TF32's where allowed)::

    scale[i]   = max(sigma[i], c * M[i], u * |ref[i]|)
    allowed[i] = SAFETY * scale[i] + [multilinear] u * LAMBDA * sqrt(n) * S[i] + n * tiny

The multilinear term is the probabilistic ``sqrt(n)`` growth bound (Higham and Mary)
that :mod:`.bound` applies to a declared ``multilinear`` model: it covers a correct
kernel that sums in a cruder order (sequentially, or in long blocks) than every
evaluation torch offers. An output is **exact** (``allowed`` is ``None``: every
element must match bit for bit) when it is not floating point (argmax, indexes), or
when the float64 reference is representable in the dtype (the op selects or copies
input values: no rounding happened), every alternative equals it bit for bit and the
model is not multilinear (max, min, max-pooling, copies, ReLU, clamps). A reduction
that torch happens to accumulate in double on the CPU (cumprod, scalar losses) is
not exact: its float64 result is not representable.

Calibration (``benchmarks/derived_error_model.py``, CPU, torch 2.13, small shapes;
the table is in ``docs/oracles.md``): ``SAFETY`` is the multiple of ``scale`` a correct
implementation may reach. The reference and a split-K reordering of it reached at
most 3.1 (corpus and KernelBench level 1) and 5.3 (level 2, ``4_Conv2d_Mish_Mish``);
the model run in bf16, fp16 or with TF32 operands reached at least 219 (fp16 on
``hinge_loss``, which averages its errors), TF32 typically 2e3 and bf16 6e3 and more.
64 leaves a factor 12 on the correct side and 3.4 below bf16/fp16; the closest call
is TF32: a convolution followed by a global average pool and a sum reached only 93.
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch

from ..problems.problem_case import ProblemCase, as_tensors, cast_floating

#: Multiple of the legitimate error scale a correct implementation may reach.
SAFETY = 64.0
#: Multiple of the probabilistic sqrt(n) * u growth accepted for accumulated sums
#: (multilinear models here, declared error models in ``bound``).
LAMBDA = 8.0
#: Unit roundoff (half the spacing at 1) per dtype.
UNIT_ROUNDOFF: dict[torch.dtype, float] = {
    torch.float64: 2.0**-53,
    torch.float32: 2.0**-24,
    torch.float16: 2.0**-11,
    torch.bfloat16: 2.0**-8,
}
#: Unit roundoff of TF32 operands (10 mantissa bits).
TF32_UNIT_ROUNDOFF = 2.0**-11
#: Name of the evaluation with TF32 operands (only where the problem allows TF32).
TF32_ALTERNATIVE = "TF32 operands"
#: Rademacher samples behind the term count ``n`` and the magnitude's sign test.
SIGN_SAMPLES = 4
#: Elements below which torch runs a CPU op on one thread (``at::internal::GRAIN_SIZE``).
GRAIN_SIZE = 32768
#: Relative float64 tolerance of the affinity, separability and magnitude tests.
F64_TEST_TOL = 1e-9


@dataclass
class DerivedModel:
    """What :func:`derive` found for one case.

    ``allowed[k]`` is the allowed absolute error of output ``k`` per element (``None``:
    exact); ``scale[k]`` the legitimate error scale before :data:`SAFETY`;
    ``alternatives`` the evaluations behind it; ``multilinear`` and ``length`` (``n``)
    say whether the sqrt(n) growth term applies.
    """

    allowed: list[torch.Tensor | None]
    scale: list[torch.Tensor | None]
    alternatives: list[str]
    multilinear: bool
    length: int | None
    notes: list[str] = field(default_factory=list)
    #: ``scale`` without the TF32 evaluation and at the dtype's own ``u``: the rounding of
    #: the dtype itself (what ``ulp`` measures against, whatever the problem allows).
    native_scale: list[torch.Tensor | None] = field(default_factory=list)

    def describe(self) -> str:
        """One line for verdicts: what the bound was derived from."""
        kind = f"multilinear, n={self.length}" if self.multilinear else "not multilinear"
        exact = " exact" if any(a is None for a in self.allowed) else ""
        return (f"derived error model ({kind};{exact} alternatives: {', '.join(self.alternatives)}; "
                f"SAFETY={SAFETY:g})")


def unit_roundoff(case: ProblemCase) -> float:
    """``u`` for the case's dtype, widened to TF32 when the problem allows TF32."""
    u = UNIT_ROUNDOFF.get(case.dtype, 2.0**-24)
    if case.problem.allow_tf32:
        u = max(u, TF32_UNIT_ROUNDOFF)
    return u


# -- evaluations -------------------------------------------------------------------


def _model_at(case: ProblemCase, dtype: torch.dtype, *, absolute: bool = False) -> torch.nn.Module:
    """The case's model with floating parameters and buffers at ``dtype`` (``|.|`` if asked), cached."""
    key = ("derived-model", dtype, absolute)
    if key not in case._cache:
        base = case.model()
        floats = [p for p in list(base.parameters()) + list(base.buffers()) if p.is_floating_point()]
        if not absolute and all(p.dtype == dtype for p in floats):
            m = base  # shared, never modified
        else:
            m = copy.deepcopy(base).to(dtype)
            if absolute:
                with torch.no_grad():
                    for p in list(m.parameters()) + list(m.buffers()):
                        if p.is_floating_point():
                            p.abs_()
        case._cache[key] = m
    return case._cache[key]


def _run(model: torch.nn.Module, inputs: list[Any]) -> list[torch.Tensor]:
    with torch.no_grad():
        return [t.detach() for t in as_tensors(model(*inputs))]


def _float_positions(inputs: list[Any]) -> list[int]:
    return [i for i, x in enumerate(inputs) if isinstance(x, torch.Tensor) and x.is_floating_point()]


def _replace(inputs: list[Any], values: dict[int, torch.Tensor]) -> list[Any]:
    return [values.get(i, x) for i, x in enumerate(inputs)]


def _close64(a: list[torch.Tensor], b: list[torch.Tensor], scale: list[torch.Tensor] | None = None) -> bool:
    """float64 results equal up to :data:`F64_TEST_TOL` of their size (NaN/inf in the same places)."""
    if len(a) != len(b):
        return False
    for k, (x, y) in enumerate(zip(a, b)):
        if x.shape != y.shape:
            return False
        if not x.is_floating_point():
            if not torch.equal(x, y):
                return False
            continue
        fin = torch.isfinite(x) & torch.isfinite(y)
        if not torch.equal(torch.isfinite(x), torch.isfinite(y)):
            return False
        ref = scale[k] if scale is not None else x.abs() + y.abs()
        tol = F64_TEST_TOL * (ref + _rms(ref))
        if bool(((x - y).abs() > tol)[fin].any()):
            return False
    return True


def _rms(t: torch.Tensor) -> float:
    f = t[torch.isfinite(t)].to(torch.float64)
    return float(f.pow(2).mean().sqrt()) if f.numel() else 0.0


def _round_tf32(t: torch.Tensor) -> torch.Tensor:
    """A float32 tensor rounded to 10 mantissa bits (nearest, ties away), as TF32 operands are."""
    if t.dtype != torch.float32:
        return t
    bits = t.contiguous().view(torch.int32)
    rounded = ((bits + 0x1000) & ~0x1FFF).view(torch.float32)
    return torch.where(torch.isfinite(t), rounded, t)


@contextlib.contextmanager
def _threads(n: int):
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _batch_chunks(case: ProblemCase, inputs: list[Any], outputs: list[torch.Tensor]) -> tuple[int, int] | None:
    """(batch size, split) when every tensor input and output shares a leading size > 1."""
    tensors = [x for x in inputs if isinstance(x, torch.Tensor)]
    if not tensors or any(x.dim() == 0 for x in tensors) or any(o.dim() == 0 for o in outputs):
        return None
    b = tensors[0].shape[0]
    if b < 2 or any(x.shape[0] != b for x in tensors) or any(o.shape[0] != b for o in outputs):
        return None
    return b, b // 2


def _chunked(model: torch.nn.Module, inputs: list[Any], split: int) -> list[torch.Tensor]:
    first = [x[:split] if isinstance(x, torch.Tensor) else x for x in inputs]
    second = [x[split:] if isinstance(x, torch.Tensor) else x for x in inputs]
    return [torch.cat([a, b]) for a, b in zip(_run(model, first), _run(model, second))]


def alternatives(case: ProblemCase) -> dict[str, list[torch.Tensor]]:
    """The legitimate evaluations of the model at the case's dtype, by name (see module docs)."""
    cpu = not str(case.device).startswith("cuda")
    inputs = [x for x in case.inputs if isinstance(x, torch.Tensor)]
    big = max([x.numel() for x in inputs] + [r.numel() for r in case.reference()]) >= GRAIN_SIZE
    if cpu and not big:
        with _threads(1):  # below the grain size torch uses one thread anyway
            return _alternatives(case, cpu=True, big=False)
    with _full_precision():
        return _alternatives(case, cpu=cpu, big=big)


@contextlib.contextmanager
def _full_precision():
    """TF32 off for CUDA matmuls and cuDNN convolutions (cuDNN allows it by default): the
    evaluations must round like the dtype; TF32, where the problem allows it, is one
    evaluation of its own."""
    matmul, conv = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, conv


def _alternatives(case: ProblemCase, *, cpu: bool, big: bool) -> dict[str, list[torch.Tensor]]:
    dtype = case.dtype
    model = _model_at(case, dtype)
    inputs = cast_floating(case.inputs, dtype)
    ref = case.reference()
    threads = torch.get_num_threads()
    if cpu and big:
        # torch splits a CPU reduction among threads only above its grain size: another
        # thread count is another summation order there, and the same one below it
        out: dict[str, list[torch.Tensor]] = {"default": _run(model, inputs)}
        other = 1 if threads > 1 else min(4, os.cpu_count() or 1)
        if other != threads:
            with _threads(other):
                out[f"{other} thread{'s' if other > 1 else ''}"] = _run(model, inputs)
    else:
        out = {"default": _run(model, inputs)}
    if cpu:
        if torch.backends.mkldnn.is_available():
            with warnings.catch_warnings():  # the flags' TF32 note about Intel GPUs
                warnings.simplefilter("ignore", UserWarning)
                with torch.backends.mkldnn.flags(enabled=False):
                    out["oneDNN off"] = _run(model, inputs)
    elif torch.backends.cudnn.is_available():
        with torch.backends.cudnn.flags(enabled=False):
            out["cuDNN off"] = _run(model, inputs)
    chunks = _batch_chunks(case, inputs, ref)
    if chunks is not None:
        model64 = _model_at(case, torch.float64)
        inputs64 = cast_floating(case.inputs, torch.float64)
        try:
            separable = _close64(_chunked(model64, inputs64, chunks[1]), ref)
        except Exception:  # noqa: BLE001 - a model that needs its whole batch is not separable
            separable = False
        if separable:
            out["batch split in two"] = _chunked(model, inputs, chunks[1])
    if case.problem.allow_tf32 and dtype == torch.float32:
        tf32_model = copy.deepcopy(model)
        with torch.no_grad():
            for p in list(tf32_model.parameters()) + list(tf32_model.buffers()):
                if p.is_floating_point():
                    p.copy_(_round_tf32(p))
        out[TF32_ALTERNATIVE] = _run(tf32_model, [_round_tf32(x) if isinstance(x, torch.Tensor) else x
                                                  for x in inputs])
    out["reference rounded"] = [r.to(dtype) if r.is_floating_point() else r for r in ref]
    return out


# -- the multilinear magnitude -------------------------------------------------------


@dataclass
class Multilinear:
    """The magnitude ``S`` (module on |inputs|, |parameters|) per output and the term count ``n``."""

    magnitude: list[torch.Tensor]
    length: int


def multilinear(case: ProblemCase) -> Multilinear | None:
    """``S`` and ``n`` where the model is affine in each floating input and ``S`` bounds
    every sign pattern of the inputs; ``None`` elsewhere (see module docs)."""
    ref = case.reference()
    if not all(r.is_floating_point() for r in ref):
        return None
    inputs64 = cast_floating(case.inputs, torch.float64)
    positions = _float_positions(inputs64)
    if not positions:
        return None
    model64 = _model_at(case, torch.float64)
    gen = torch.Generator(device=inputs64[positions[0]].device).manual_seed(case.seed + 7)

    def draw_like(x: torch.Tensor, kind: str) -> torch.Tensor:
        if kind == "normal":
            return torch.randn(x.shape, generator=gen, device=x.device, dtype=torch.float64)
        return torch.randint(0, 2, x.shape, generator=gen, device=x.device).to(torch.float64) * 2 - 1

    try:
        # affine in each input separately: the second difference along a random direction is 0
        for p in positions:
            x = inputs64[p]
            d = draw_like(x, "normal") * (_rms(x) or 1.0)
            plus = _run(model64, _replace(inputs64, {p: x + d}))
            minus = _run(model64, _replace(inputs64, {p: x - d}))
            mid = [0.5 * (a + b) for a, b in zip(plus, minus)]
            if not _close64(mid, ref, [a.abs() + b.abs() for a, b in zip(plus, minus)]):
                return None
        absolute = [x.abs() if i in positions else x for i, x in enumerate(inputs64)]
        mag = [t.abs() for t in _run(_model_at(case, torch.float64, absolute=True), absolute)]
        if len(mag) != len(ref) or any(m.shape != r.shape for m, r in zip(mag, ref)):
            return None
        slack = [m * (1 + F64_TEST_TOL) + F64_TEST_TOL * _rms(m) for m in mag]
        if any(bool((r.abs() > s)[torch.isfinite(r)].any()) for r, s in zip(ref, slack)):
            return None
        ones = _replace(inputs64, {p: torch.ones_like(inputs64[p]) for p in positions})
        zeros = _replace(inputs64, {p: torch.zeros_like(inputs64[p]) for p in positions})
        count_mag = _run(_model_at(case, torch.float64, absolute=True), ones)
        offset = _run(model64, zeros)
        second = [torch.zeros_like(r) for r in ref]
        for _ in range(SIGN_SAMPLES):
            signs = {p: draw_like(inputs64[p], "sign") for p in positions}
            flipped = _run(model64, _replace(inputs64, {p: inputs64[p] * s for p, s in signs.items()}))
            if any(bool((f.abs() > s)[torch.isfinite(f)].any()) for f, s in zip(flipped, slack)):
                return None  # |model|(|x|) is no magnitude: the model subtracts (x - mean(x))
            rad = _run(model64, _replace(inputs64, signs))
            second = [acc + (r - o).pow(2) for acc, r, o in zip(second, rad, offset)]
    except Exception:  # noqa: BLE001 - an evaluation the model refuses (zeros into a log): not multilinear
        return None
    total_mag = sum(float(c.abs().pow(2).nan_to_num(posinf=0.0).sum()) for c in count_mag)
    total_var = sum(float(s.nan_to_num(posinf=0.0).sum()) / SIGN_SAMPLES for s in second)
    length = max(1, round(total_mag / total_var)) if total_var > 0 else 1
    return Multilinear([torch.nan_to_num(m, nan=0.0, posinf=0.0) for m in mag], int(length))


# -- the bound -----------------------------------------------------------------------


def _exactly_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if not a.is_floating_point():
        return torch.equal(a, b)
    same = (a == b) | (torch.isnan(a) & torch.isnan(b))
    return bool(same.all())


def fingerprint(case: ProblemCase) -> tuple:
    """What the derived model depends on: problem, device, dtype, shapes and the input values.

    Values enter through float64 moments (sum, sum of squares, an index-weighted sum):
    two cases with equal fingerprints were drawn the same way (the oracles' cases are
    regenerated from seeds), so one derivation serves both.
    """
    parts: list[Any] = [id(case.problem.Model), str(case.device), str(case.dtype), tuple(sorted(case.shapes.items())),
                        case.problem.allow_tf32]
    for x in case.inputs:
        if isinstance(x, torch.Tensor):
            v = x.detach().reshape(-1).to(torch.float64).nan_to_num(nan=0.5, posinf=3.0, neginf=-3.0)
            w = torch.arange(1, v.numel() + 1, device=v.device, dtype=torch.float64).remainder(997)
            parts.append((tuple(x.shape), str(x.dtype), float(v.sum()), float(v.pow(2).sum()), float((v * w).sum())))
        else:
            parts.append(repr(x))
    return tuple(parts)


#: Derived models kept per problem (the table and the oracles rebuild equal cases), and
#: the output size above which none is kept there (only on its case).
CACHE_SIZE = 32
CACHE_NUMEL = 2**22


def derive(case: ProblemCase) -> DerivedModel:
    """The derived error model of ``case``, computed once: cached on ``case._cache`` and,
    by :func:`fingerprint`, on the problem for equal cases."""
    key = "derived-model"
    if key in case._cache:
        return case._cache[key]
    shared = case.problem.__dict__.setdefault("_derived_cache", {})
    fp = fingerprint(case)
    if fp in shared:
        case._cache[key] = shared[fp]
        return shared[fp]
    dm = case._cache[key] = _derive(case)
    if sum(r.numel() for r in case.reference()) <= CACHE_NUMEL:  # large outputs: GPU memory matters more
        if len(shared) >= CACHE_SIZE:
            shared.pop(next(iter(shared)))
        shared[fp] = dm
    return dm


def _derive(case: ProblemCase) -> DerivedModel:
    refs = case.reference()
    alts = alternatives(case)
    # One thread for the float64 tests: the same results, and on a loaded machine a
    # small op on several threads waits for them far longer than it computes.
    with _threads(1) if not str(case.device).startswith("cuda") else contextlib.nullcontext():
        ml = multilinear(case)
    u = unit_roundoff(case)
    tiny = torch.finfo(case.dtype).tiny if case.dtype.is_floating_point else 0.0
    allowed: list[torch.Tensor | None] = []
    scales: list[torch.Tensor | None] = []
    natives: list[torch.Tensor | None] = []
    notes: list[str] = []
    u_native = UNIT_ROUNDOFF.get(case.dtype, 2.0**-24)
    for k, ref in enumerate(refs):
        if not ref.is_floating_point():
            allowed.append(None)
            scales.append(None)
            natives.append(None)
            continue
        rounded = alts["reference rounded"][k]
        evaluated = {name: a[k] for name, a in alts.items() if name != "reference rounded"}
        representable = _exactly_equal(rounded.to(torch.float64), ref)
        if (ml is None and representable
                and all(_exactly_equal(a.to(rounded.dtype), rounded) for a in evaluated.values())):
            allowed.append(None)
            scales.append(None)
            natives.append(None)
            notes.append(f"output {k}: the float64 reference is representable in {case.dtype} and every "
                         "evaluation equals it bit for bit: exact")
            continue
        ref_f = torch.nan_to_num(ref, nan=0.0, posinf=0.0, neginf=0.0)
        mag = ml.magnitude[k] if ml is not None else ref_f.abs().clamp_min(_rms(ref_f))
        scale = _scale(ref, mag, list(evaluated.values()) + [rounded], u)
        bound = SAFETY * scale
        n = 1
        if ml is not None:
            n = ml.length
            bound = bound + u * LAMBDA * math.sqrt(n) * mag
        allowed.append(bound + n * tiny)
        scales.append(scale)
        native = [a for name, a in evaluated.items() if name != TF32_ALTERNATIVE] + [rounded]
        natives.append(scale if len(native) == len(evaluated) + 1 else _scale(ref, mag, native, u_native))
    return DerivedModel(allowed, scales, [n for n in alts if n != "reference rounded"], ml is not None,
                        ml.length if ml is not None else None, notes, natives)


def _scale(ref: torch.Tensor, mag: torch.Tensor, evaluations: list[torch.Tensor], u: float) -> torch.Tensor:
    """``max(sigma, c * M, u * |ref|)`` of the module docs for one output."""
    ref_f = torch.nan_to_num(ref, nan=0.0, posinf=0.0, neginf=0.0)
    finite_ref = torch.isfinite(ref)
    sigma = torch.zeros_like(ref_f)
    for a in evaluations:
        e = (a.to(torch.float64) - ref).abs()
        # a non-finite evaluation where the reference is finite (an overflow of the dtype)
        # says nothing about rounding: the candidate must match the reference there
        sigma = torch.maximum(sigma, torch.where(torch.isfinite(e) & finite_ref, e, torch.zeros_like(e)))
    ratio = torch.where(mag > 0, sigma / mag.clamp_min(torch.finfo(torch.float64).tiny), torch.zeros_like(mag))
    c = _rms(ratio)
    return torch.maximum(torch.maximum(sigma, c * mag), u * ref_f.abs())
