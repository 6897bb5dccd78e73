"""The error a correct implementation may make, derived from the problem with no annotation.

For a case (problem, inputs, dtype) and every output element ``i`` this module
computes the allowed absolute error ``allowed[i]`` from evaluations of the problem's
own ``Model``, never from a declared ``ERROR_MODEL`` (which stays an optional
override in :mod:`.bound`):

1. **the float64 reference** ``ref`` (``case.reference()``);
2. **legitimate evaluations at the problem's dtype**, each a correct implementation
   that orders its arithmetic differently: the default evaluation; another thread
   count (CPU: torch splits blocked reductions by thread); the oneDNN/cuDNN backends
   off (another convolution and matmul algorithm); a CUDA case of at most
   :data:`CPU_ALTERNATIVE_NUMEL` elements evaluated on the CPU (another device);
   inputs split in two along dim 0 where the model is batch-separable (checked in
   float64 first: other GEMM blockings); operands rounded to TF32 where the problem allows TF32
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
   Elsewhere ``M[i] = max(|ref[i]|, rms(ref))`` (rms of ``i``'s block for a ``block_floor``
   case, whose input rows have different magnitudes: :func:`.values.block_rms`).
   A case larger than the problem's small shape (a KernelBench problem at its own
   shape) takes affinity, the sign-flip bound and batch separability, properties of the
   function rather than of its sizes, from the small shape, tested there once per
   problem; at its own shape it computes only ``S`` and ``n`` (one Rademacher sample
   once the outputs hold :data:`ONE_SAMPLE_NUMEL` elements, on the first rows of the
   batch where the model is separable). Later cases of the problem take those answers too;
4. **smoothing**: one alternative that happens to land on the reference must not
   make an element's bound 0, so ``sigma`` is blended with ``c * M`` where ``c`` is the
   root mean square of ``sigma / M`` over the output (the error per unit magnitude
   this evaluation makes, spread by each element's own magnitude).

Then, per element, with ``u`` the unit roundoff of the dtype (TF32's where allowed)::

    scale[i]   = max(sigma[i], c * M[i], u * |ref[i]|)
    allowed[i] = SAFETY * scale[i] + [multilinear] u * LAMBDA * sqrt(n) * S[i] + n * tiny
                 + [multilinear] SAFETY * smallest_subnormal * H[i]   (inf where H[i] >= max)

``H`` (:func:`intermediate_reach`: the module on ``max(|inputs|, 1)``) bounds every
intermediate of every association; its term is negligible unless the inputs make some
intermediate leave the dtype's range (a long product of mixed magnitudes). It costs one
more float64 evaluation at the case's shape, so it is computed only before a rejection
(:func:`widened_for_reach`): an output within the bound without it is within it with it.

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
import contextvars
import copy
import math
import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from ..problems.problem_case import (ProblemCase, as_tensors, cast_floating, float64_backend, is_out_of_memory,
                                     tf32_off)
from . import compare as _compare
from .compare import max_abs_finite

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
#: The most terms a value may accumulate: past 2^53 a sum's terms are below float64's
#: resolution of it, so a larger ``n`` says the outputs do not depend on the inputs.
MAX_TERMS = float(2**53)
#: Elements below which torch runs a CPU op on one thread (``at::internal::GRAIN_SIZE``).
GRAIN_SIZE = 32768
#: Elements of a case's largest tensor from which the float64 tests of the derivation run
#: on the CPU threads torch has (below: one thread; small shapes stay far below it).
THREADED_TESTS_NUMEL = 1 << 20
#: Elements (parameters, buffers, inputs and outputs) up to which a CUDA case is also
#: evaluated on the CPU as one more legitimate order (small shapes: milliseconds there).
CPU_ALTERNATIVE_NUMEL = 1 << 22
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


def _model_at(case: ProblemCase, dtype: torch.dtype, *, absolute: bool = False,
              at_least_one: bool = False) -> torch.nn.Module:
    """The case's model with floating parameters and buffers at ``dtype`` (``|.|`` if asked,
    ``max(|.|, 1)`` with ``at_least_one``), cached."""
    absolute = absolute or at_least_one
    key = ("derived-model", dtype, absolute, at_least_one)
    if key not in case._cache:
        base = case.model()
        floats = [p for p in list(base.parameters()) + list(base.buffers()) if p.is_floating_point()]
        if not absolute and all(p.dtype == dtype for p in floats):
            m = base  # shared, never modified
        else:
            m = case.model_at(dtype)
            if absolute:
                with torch.no_grad():
                    for p in list(m.parameters()) + list(m.buffers()):
                        if p.is_floating_point():
                            p.abs_()
                            if at_least_one:
                                p.clamp_(min=1.0)
        case._cache[key] = m
    return case._cache[key]


def _run(model: torch.nn.Module, inputs: list[Any]) -> list[torch.Tensor]:
    """The model's outputs; a float64 evaluation (a float64 input) on the backend
    :func:`~..problems.problem_case.float64_backend` picks."""
    x = next((x for x in inputs if isinstance(x, torch.Tensor) and x.is_floating_point()), None)
    with torch.no_grad(), float64_backend(x.device, x.dtype) if x is not None else contextlib.nullcontext():
        return [t.detach() for t in as_tensors(model(*inputs))]


def _float_positions(inputs: list[Any]) -> list[int]:
    return [i for i, x in enumerate(inputs) if isinstance(x, torch.Tensor) and x.is_floating_point()]


def _replace(inputs: list[Any], values: dict[int, torch.Tensor]) -> list[Any]:
    return [values.get(i, x) for i, x in enumerate(inputs)]


def _close64(a: list[torch.Tensor], b: list[torch.Tensor], scale: list[torch.Tensor] | None = None) -> bool:
    """float64 results equal up to :data:`F64_TEST_TOL` of their size (NaN/inf in the same places).

    ``scale[k]`` (default ``|a| + |b|``) is the size, element by element; compared in chunks.
    """
    if len(a) != len(b):
        return False
    for k, (x, y) in enumerate(zip(a, b)):
        if x.shape != y.shape:
            return False
        if not x.is_floating_point():
            if not torch.equal(x, y):
                return False
            continue
        xf, yf = x.reshape(-1), y.reshape(-1)
        sf = scale[k].reshape(-1) if scale is not None else None

        def size(lo: int, hi: int) -> torch.Tensor:
            return sf[lo:hi].to(torch.float64) if sf is not None else xf[lo:hi].abs() + yf[lo:hi].abs()

        rms = _rms_chunked(xf.numel(), size)
        for lo, hi in _spans(xf.numel()):
            xc, yc = xf[lo:hi], yf[lo:hi]
            fx, fy = torch.isfinite(xc), torch.isfinite(yc)
            if not torch.equal(fx, fy):
                return False
            tol = F64_TEST_TOL * (size(lo, hi) + rms)
            if bool(((xc - yc).abs() > tol)[fx & fy].any()):
                return False
    return True


#: The device the derivation in progress runs on (its chunk size: :func:`~.compare.chunk_elements`).
_DEVICE: contextvars.ContextVar[str] = contextvars.ContextVar("derived_device", default="cpu")


def _spans(n: int) -> Iterator[tuple[int, int]]:
    """[lo, hi) flat spans of at most :func:`~.compare.chunk_elements` elements of the device
    the derivation runs on (:data:`_DEVICE`)."""
    step = _compare.chunk_elements(_DEVICE.get())  # read at call time (tests make it small)
    for lo in range(0, n, step):
        yield lo, min(n, lo + step)


def _rms_chunked(n: int, values) -> float:  # noqa: ANN001 - values(lo, hi) -> tensor
    """Root mean square of the finite ``values(lo, hi)`` over all spans of ``n`` elements."""
    total, count = 0.0, 0
    for lo, hi in _spans(n):
        v = values(lo, hi).reshape(-1).to(torch.float64)
        if not v.numel():
            continue
        if _all_finite(v):                          # the common case: no mask
            total += float(torch.dot(v, v))         # the sum of squares as one dot product
            count += v.numel()
            continue
        finite = torch.isfinite(v)
        # zeros for the non-finite, not a boolean gather: a gather compacts (and syncs a GPU)
        z = torch.where(finite, v, 0.0)
        total += float(torch.dot(z, z))
        count += int(finite.sum())
    return math.sqrt(total / count) if count else 0.0


def _rms(t: torch.Tensor) -> float:
    flat = t.reshape(-1)
    return _rms_chunked(flat.numel(), lambda lo, hi: flat[lo:hi])


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


def _on_cpu(model: torch.nn.Module, inputs: list[Any], outputs: list[torch.Tensor],
            device: str) -> list[torch.Tensor] | None:
    """The model evaluated on the CPU (another device: other convolution algorithms and
    summation orders than every CUDA evaluation), its outputs moved back to ``device``;
    ``None`` when the model, its inputs and its ``outputs`` (the reference's) hold more than
    :data:`CPU_ALTERNATIVE_NUMEL` elements (a problem at its own shape: too slow there; an
    output of 1 G elements from 2 M of inputs, KernelBench L1 7 and 9, took most of
    ``strongest``'s second on the H200 in the CPU's matmul and the copy back) or the model
    cannot run on the CPU (a forward that creates CUDA tensors)."""
    held = sum(p.numel() for p in (*model.parameters(), *model.buffers()))
    held += sum(x.numel() for x in (*inputs, *outputs) if isinstance(x, torch.Tensor))
    if held > CPU_ALTERNATIVE_NUMEL:
        return None
    try:
        cpu_model = copy.deepcopy(model).to("cpu")
        cpu_inputs = [x.to("cpu") if isinstance(x, torch.Tensor) else x for x in inputs]
        return [o.to(device) for o in _run(cpu_model, cpu_inputs)]
    except Exception:  # noqa: BLE001 - a forward tied to CUDA: the alternative does not apply
        return None


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
    """The legitimate evaluations of the model at the case's dtype, by name (see module docs).

    All of them at once: :func:`derive` folds them one at a time (:func:`evaluations`)."""
    return dict(evaluations(case))


def evaluations(case: ProblemCase) -> Iterator[tuple[str, list[torch.Tensor]]]:
    """(name, outputs) of each legitimate evaluation, made one at a time: a consumer that
    drops each before the next holds one evaluation's outputs, not all of them."""
    cpu = not str(case.device).startswith("cuda")
    inputs = [x for x in case.inputs if isinstance(x, torch.Tensor)]
    big = max([x.numel() for x in inputs] + [r.numel() for r in case.reference()]) >= GRAIN_SIZE
    del inputs
    if cpu and not big:
        with _threads(1):  # below the grain size torch uses one thread anyway
            yield from _alternatives(case, cpu=True, big=False)
        return
    # TF32 off for CUDA matmuls and cuDNN convolutions (cuDNN allows it by default): the
    # evaluations must round like the dtype; TF32, where the problem allows it, is one
    # evaluation of its own
    with tf32_off():
        yield from _alternatives(case, cpu=cpu, big=big)


def _alternatives(case: ProblemCase, *, cpu: bool, big: bool) -> Iterator[tuple[str, list[torch.Tensor]]]:
    dtype = case.dtype
    model = _model_at(case, dtype)
    inputs = cast_floating(case.inputs, dtype)  # the case's own tensors where the dtype matches
    ref = case.reference()
    threads = torch.get_num_threads()
    yield "default", _run(model, inputs)
    if cpu and big:
        # torch splits a CPU reduction among threads only above its grain size: another
        # thread count is another summation order there, and the same one below it
        other = 1 if threads > 1 else min(4, os.cpu_count() or 1)
        if other != threads:
            with _threads(other):
                out = _run(model, inputs)
            yield f"{other} thread{'s' if other > 1 else ''}", out
    if cpu:
        if torch.backends.mkldnn.is_available():
            with warnings.catch_warnings():  # the flags' TF32 note about Intel GPUs
                warnings.simplefilter("ignore", UserWarning)
                with torch.backends.mkldnn.flags(enabled=False):
                    out = _run(model, inputs)
            yield "oneDNN off", out
    elif torch.backends.cudnn.is_available():
        with torch.backends.cudnn.flags(enabled=False):
            out = _run(model, inputs)
        yield "cuDNN off", out
    if not cpu:
        out = _on_cpu(model, inputs, ref, case.device)
        if out is not None:
            yield "on the CPU", out
    out = None
    split = separable_split(case)
    if split is not None:
        yield "batch split in two", _chunked(model, inputs, split)
    if case.problem.allow_tf32 and dtype == torch.float32:
        tf32_model = copy.deepcopy(model)
        with torch.no_grad():
            for p in list(tf32_model.parameters()) + list(tf32_model.buffers()):
                if p.is_floating_point():
                    p.copy_(_round_tf32(p))
        rounded_inputs = [_round_tf32(x) if isinstance(x, torch.Tensor) else x for x in inputs]
        out = _run(tf32_model, rounded_inputs)
        del rounded_inputs, tf32_model
        yield TF32_ALTERNATIVE, out
        out = None
    yield "reference rounded", [r.to(dtype) if r.is_floating_point() else r for r in ref]


def separable_split(case: ProblemCase) -> int | None:
    """Where the model is batch-separable (every tensor input and output shares a leading
    size, and the float64 model gives the reference on the two halves of the batch): the
    size of the first half; else ``None``. Computed once per case; a case larger than its
    small shape takes the answer of the small shape (:func:`_small_shape_facts`), where
    the batch is also split."""
    key = "derived-separable"
    if key not in case._cache:
        chunks = _batch_chunks(case, case.inputs, case.reference())
        separable = False
        if chunks is not None:
            facts = _small_shape_facts(case)
            shown = facts.get("separable") if facts is not None else None
            separable = _separable(case, chunks[1]) if shown is None else shown
        case._cache[key] = chunks[1] if chunks is not None and separable else None
    return case._cache[key]


def _separable(case: ProblemCase, split: int) -> bool:
    """Does the float64 model give the reference when run on the two halves of the batch?

    Each half is cast, run and compared on its own (no float64 copy of all the inputs,
    no concatenated output)."""
    model64 = _model_at(case, torch.float64)
    ref = case.reference()
    try:
        for part in (slice(None, split), slice(split, None)):
            half = cast_floating([x[part] if isinstance(x, torch.Tensor) else x for x in case.inputs], torch.float64)
            out = _run(model64, half)
            del half
            if not _close64(out, [r[part] for r in ref]):
                return False
            del out
    except Exception as exc:  # noqa: BLE001 - a model that needs its whole batch is not separable
        if is_out_of_memory(exc):
            raise
        return False
    return True


# -- the multilinear magnitude -------------------------------------------------------


@dataclass
class Multilinear:
    """The magnitude ``S`` (module on |inputs|, |parameters|) per output and the term count ``n``."""

    magnitude: list[torch.Tensor]
    length: int


def _structure(case: ProblemCase) -> tuple:
    """What makes two cases the same function: the problem, device, dtype, shape constants,
    each tensor input's shape and dtype and each other input's value (not tensor values)."""
    return (id(case.problem.Model), str(case.device), str(case.dtype), tuple(sorted(case.shapes.items())),
            tuple((tuple(x.shape), str(x.dtype)) if isinstance(x, torch.Tensor) else repr(x) for x in case.inputs),
            tuple(repr(x) for x in case.init_inputs))


def multilinear(case: ProblemCase) -> Multilinear | None:
    """``S`` and ``n`` where the model is affine in each floating input and ``S`` bounds
    every sign pattern of the inputs; ``None`` elsewhere (see module docs).

    Being affine in each input, the sign-flip bound and the term count ``n`` are properties
    of the function, not of the input values: once a case has shown them, a case of the same
    :func:`_structure` (another seed or value kind) computes only its own magnitude ``S`` and
    checks that ``S`` bounds its reference. A case that fails is tested in full each time."""
    ref = case.reference()
    if not all(r.is_floating_point() for r in ref):
        return None
    if not _float_positions(case.inputs):
        return None
    known = case.problem.__dict__.setdefault("_multilinear_structures", {})
    key = _structure(case)
    shown = None if key in known else shown_at_small_shape(case)
    if shown is False:
        return None  # not multilinear at the small shape: the same function is not here either
    inputs64 = cast_floating(case.inputs, torch.float64)
    positions = _float_positions(inputs64)
    if shown:
        return _multilinear_shown(case, inputs64, positions, ref, known, key)
    if key in known:
        try:
            found = _magnitude(case, inputs64, positions, ref)
        except Exception as exc:  # noqa: BLE001 - as below: a refused evaluation is no magnitude
            if is_out_of_memory(exc):
                raise
            found = None
        if found is None:
            return None
        return Multilinear([torch.nan_to_num(m, nan=0.0, posinf=0.0, out=m) for m in found[0]], known[key])
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
            # x + d, then x - d, in one buffer: d is drawn again from the same generator
            # state (the same bits) rather than kept, and x + (-d) is x - d bit for bit
            state = gen.get_state()
            moved = draw_like(x, "normal").mul_(_rms(x) or 1.0).add_(x)
            plus = _run(model64, _replace(inputs64, {p: moved}))
            del moved
            gen.set_state(state)
            moved = draw_like(x, "normal").mul_(-(_rms(x) or 1.0)).add_(x)
            minus = _run(model64, _replace(inputs64, {p: moved}))
            del moved
            if not _affine(plus, minus, ref):
                return None
            del plus, minus
        found = _magnitude(case, inputs64, positions, ref)
        if found is None:
            return None
        mag, slack_rms = found
        total_mag, offset = _mass_and_offset(case, model64, inputs64, positions)
        total_var = 0.0
        for _ in range(SIGN_SAMPLES):
            signs = {p: draw_like(inputs64[p], "sign") for p in positions}
            rad = _run(model64, _replace(inputs64, signs))
            total_var += sum(_sum_squares(r, o) for r, o in zip(rad, offset)) / SIGN_SAMPLES
            del rad
            for p, s in signs.items():
                s.mul_(inputs64[p])  # the inputs with their signs flipped, in the signs' buffer
            flipped = _run(model64, _replace(inputs64, signs))
            del signs
            if not all(_bounded_by(f, m, q) for f, m, q in zip(flipped, mag, slack_rms)):
                return None  # |model|(|x|) is no magnitude: the model subtracts (x - mean(x))
            del flipped
        del offset
    except Exception as exc:  # noqa: BLE001 - an evaluation the model refuses (zeros into a log): not multilinear
        if is_out_of_memory(exc):
            raise  # the checker's memory: never a silent change of the error model
        return None
    return _remember(known, key, mag, total_mag, total_var)


#: Output elements from which one Rademacher sample estimates the term count ``n`` of a
#: case whose function was shown multilinear at the small shape (fewer elements: more
#: samples, at most :data:`SIGN_SAMPLES`): ``n`` is a ratio of sums over every output
#: element, and one sample of 4096 elements varies by about 2 % (``sqrt(n)`` by 1 %).
ONE_SAMPLE_NUMEL = 1 << 12


def shown_at_small_shape(case: ProblemCase) -> bool | None:
    """Whether the problem's function is multilinear (affine in each input, ``S`` bounding
    every sign pattern), as its small shape shows; ``None`` where the small shape was not
    tested (the case is tested in full). See :func:`_small_shape_facts`."""
    facts = _small_shape_facts(case)
    return None if facts is None else facts["multilinear"]


def _small_shape_facts(case: ProblemCase) -> dict[str, bool | None] | None:
    """What the problem's small shape shows about its function: ``multilinear`` (affine in
    each input, ``S`` bounding every sign pattern) and ``separable`` (the float64 model
    gives the reference on the two halves of the batch; ``None`` where the small shape's
    inputs share no leading size to split).

    These are properties of the function, not of its sizes: the small shape
    (:func:`~kernelaudit.zoo.problems.small_shapes.shrinking_shapes`, same seed and
    device) shows them for a fraction of what a case at the problem's own shape costs.
    Only the magnitude ``S`` and the term count ``n`` depend on the shape; each case
    computes those. A case larger than the small shape has the small shape tested (once
    per problem, function, device and dtype); once tested, every case of the problem
    (the boundary shapes and value kinds that follow) takes the answer. ``None`` where
    no case larger than the small shape came first: the case is tested in full, as a
    ``--small`` check tests every case."""
    from ..problems.small_shapes import shrinking_shapes

    found = case.problem.__dict__.setdefault("_small_shape_facts", {})
    fkey = (id(case.problem.Model), str(case.device), str(case.dtype), len(case.inputs),
            tuple(_float_positions(case.inputs)))
    if fkey in found:
        return found[fkey][1]
    small = shrinking_shapes(case.problem, case.shapes)
    if small is None:
        return None
    try:
        probe = ProblemCase.make(case.problem, seed=case.seed, device=case.device,
                                 shapes={**case.shapes, **small}, label="small (function probe)")
    except Exception as exc:  # noqa: BLE001 - get_inputs() refuses the small shape: test the case in full
        if is_out_of_memory(exc):
            raise
        return None
    if probe.dtype != case.dtype or (len(probe.inputs), tuple(_float_positions(probe.inputs))) != fkey[3:]:
        return None  # not the same inputs at the small shape: test the case in full
    token = _DEVICE.set(str(case.device))
    try:
        with _threads(1) if not str(case.device).startswith("cuda") else contextlib.nullcontext():
            facts: dict[str, bool | None] = {"multilinear": multilinear(probe) is not None}
            chunks = _batch_chunks(probe, probe.inputs, probe.reference())
            facts["separable"] = None if chunks is None else _separable(probe, chunks[1])
    except Exception as exc:  # noqa: BLE001 - the reference refuses the small shape: test the case in full
        if is_out_of_memory(exc):
            raise
        return None
    finally:
        _DEVICE.reset(token)
        del probe
    found[fkey] = (case.problem.Model, facts)  # the class kept alive: its id stays unique
    return facts


def _multilinear_shown(case: ProblemCase, inputs64: list[Any], positions: list[int], ref: list[torch.Tensor],
                       known: dict, key: tuple) -> Multilinear | None:
    """:func:`multilinear` for a case whose function the small shape showed multilinear:
    its own ``S`` (which must bound its reference) and ``n`` (``|model|(1)``, ``model(0)``
    and Rademacher samples: one where the outputs hold :data:`ONE_SAMPLE_NUMEL` elements;
    on the first rows that hold that many where the model is batch-separable)."""
    try:
        found = _magnitude(case, inputs64, positions, ref)
        if found is None:
            return None
        mag = found[0]
        model64 = _model_at(case, torch.float64)
        # n is the same on every row of a batch-separable model: the first rows that hold
        # ONE_SAMPLE_NUMEL output elements estimate it (the whole batch otherwise)
        numel = sum(r.numel() for r in ref)
        sample = inputs64
        split = separable_split(case)
        if split is not None:
            batch = ref[0].shape[0]
            rows = min(batch, -(-ONE_SAMPLE_NUMEL * batch // max(1, numel)))
            sample = [x[:rows] if isinstance(x, torch.Tensor) else x for x in inputs64]
            numel = numel * rows // batch
        total_mag, offset = _mass_and_offset(case, model64, sample, positions)
        samples = min(SIGN_SAMPLES, -(-ONE_SAMPLE_NUMEL // max(1, numel)))
        gen = torch.Generator(device=inputs64[positions[0]].device).manual_seed(case.seed + 7)
        total_var = 0.0
        for _ in range(samples):
            signs = {p: _signs_like(sample[p], gen) for p in positions}
            rad = _run(model64, _replace(sample, signs))
            del signs
            total_var += sum(_sum_squares(r, o) for r, o in zip(rad, offset)) / samples
            del rad
        del offset, sample
    except Exception as exc:  # noqa: BLE001 - as in multilinear: a refused evaluation, not multilinear
        if is_out_of_memory(exc):
            raise
        return None
    return _remember(known, key, mag, total_mag, total_var)


def _remember(known: dict, key: tuple, mag: list[torch.Tensor], total_mag: float,
              total_var: float) -> Multilinear | None:
    """The term count ``n = total_mag / total_var`` (at least 1) kept for cases of ``key``'s
    structure (the oldest dropped past :data:`CACHE_SIZE`), and the case's ``Multilinear``;
    ``None`` where ``n`` passes :data:`MAX_TERMS`: the outputs do not measurably depend on the
    inputs (a deep network whose activations die out in eval mode is a constant), so there is
    no accumulation to bound and ``sqrt(n)`` would allow any value."""
    if not total_var > 0 or total_mag / total_var > MAX_TERMS:
        return None
    length = int(max(1, round(total_mag / total_var)))
    if len(known) >= CACHE_SIZE:
        known.pop(next(iter(known)))
    known[key] = length
    return Multilinear([torch.nan_to_num(m, nan=0.0, posinf=0.0, out=m) for m in mag], length)


def _mass_and_offset(case: ProblemCase, model64: Any, inputs64: list[Any],  # noqa: ANN401
                     positions: list[int]) -> tuple[float, list[torch.Tensor]]:
    """The numerator of the term count ``n``, ``sum |model|(1)^2``, and ``model(0)``, the offset
    the Rademacher samples are centred on."""
    ones = _replace(inputs64, {p: torch.ones_like(inputs64[p]) for p in positions})
    total_mag = sum(_sum_squares(c) for c in _run(_model_at(case, torch.float64, absolute=True), ones))
    del ones
    zeros = _replace(inputs64, {p: torch.zeros_like(inputs64[p]) for p in positions})
    return total_mag, _run(model64, zeros)


def _signs_like(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Rademacher signs (+-1, float64) shaped like ``x``, from one byte of randomness each."""
    return torch.randint(0, 2, x.shape, generator=gen, device=x.device, dtype=torch.int8).to(torch.float64).mul_(2).sub_(1)


def _magnitude(case: ProblemCase, inputs64: list[Any], positions: list[int],
               ref: list[torch.Tensor]) -> tuple[list[torch.Tensor], list[float]] | None:
    """``S`` (the module on |inputs| and |parameters|, float64) and its rms per output, where
    ``S`` bounds ``ref``; else None."""
    absolute = [x.abs() if i in positions else x for i, x in enumerate(inputs64)]
    mag = [t.abs_() for t in _run(_model_at(case, torch.float64, absolute=True), absolute)]
    del absolute
    if len(mag) != len(ref) or any(m.shape != r.shape for m, r in zip(mag, ref)):
        return None
    slack_rms = [_rms(m) for m in mag]
    if not all(_bounded_by(r, m, q) for r, m, q in zip(ref, mag, slack_rms)):
        return None
    return mag, slack_rms


def intermediate_reach(case: ProblemCase) -> list[torch.Tensor] | None:
    """``H``: the multilinear module on ``max(|inputs|, 1)`` and ``max(|parameters|, 1)``
    (float64), per output; ``None`` where it cannot be evaluated.

    Every product of a subset of a term's factors, and every partial sum of terms, is at
    most ``H`` in magnitude, so ``H`` bounds every intermediate of every association of a
    multilinear module: the range another correct order may pass through. ``S`` (on
    ``|inputs|``) bounds only the final values; for a product of many factors of mixed
    magnitudes (a cumulative product of 512 values scaled by 2^-16..2^16) the running
    product leaves float32's range and comes back, so ``S`` and the reference are modest
    where another association overflows an intermediate (``H`` past the dtype's range) or
    loses an underflowed one's bits (absolute error of the smallest subnormal, amplified by
    at most ``H``)."""
    inputs64 = cast_floating(case.inputs, torch.float64)
    positions = _float_positions(inputs64)
    reach = [x.abs().clamp_min_(1.0) if i in positions else x for i, x in enumerate(inputs64)]
    try:
        out = [t.abs_() for t in _run(_model_at(case, torch.float64, at_least_one=True), reach)]
    except Exception as exc:  # noqa: BLE001 - no reach: the bound stays as it was
        if is_out_of_memory(exc):
            raise
        return None
    refs = case.reference()
    if len(out) != len(refs) or any(h.shape != r.shape for h, r in zip(out, refs)):
        return None
    return out


def _affine(plus: list[torch.Tensor], minus: list[torch.Tensor], ref: list[torch.Tensor]) -> bool:
    """``(plus + minus) / 2`` equals ``ref`` up to the float64 test tolerance of ``|plus| + |minus|``."""
    if len(plus) != len(ref) or len(minus) != len(ref):
        return False
    for a, b, r in zip(plus, minus, ref):
        if a.shape != r.shape or b.shape != r.shape:
            return False
        af, bf, rf = a.reshape(-1), b.reshape(-1), r.reshape(-1)
        if not _close64([(af[lo:hi] + bf[lo:hi]) * 0.5 for lo, hi in [(0, 0)]], [rf[:0]]):
            return False  # unreachable guard for dtype checks
        rms = _rms_chunked(af.numel(), lambda lo, hi: af[lo:hi].abs() + bf[lo:hi].abs())
        for lo, hi in _spans(af.numel()):
            mid = (af[lo:hi] + bf[lo:hi]) * 0.5
            x, y = mid, rf[lo:hi]
            fx, fy = torch.isfinite(x), torch.isfinite(y)
            if not torch.equal(fx, fy):
                return False
            tol = F64_TEST_TOL * (af[lo:hi].abs() + bf[lo:hi].abs() + rms)
            if bool(((x - y).abs() > tol)[fx & fy].any()):
                return False
    return True


def _bounded_by(values: torch.Tensor, mag: torch.Tensor, mag_rms: float) -> bool:
    """``|values| <= mag * (1 + tol) + tol * rms(mag)`` wherever ``values`` is finite (chunked)."""
    vf, mf = values.reshape(-1), mag.reshape(-1)
    for lo, hi in _spans(vf.numel()):
        v = vf[lo:hi]
        # |v| - (1 + tol) * mag > tol * rms(mag), in one subtraction; a non-finite v is left out
        over = torch.sub(v.abs(), mf[lo:hi], alpha=1 + F64_TEST_TOL) > F64_TEST_TOL * mag_rms
        if bool(over.any()) and bool((over & torch.isfinite(v)).any()):
            return False
    return True


def _sum_squares(t: torch.Tensor, minus: torch.Tensor | None = None) -> float:
    """``sum((t - minus)^2)`` in float64 with NaN as 0 and inf dropped, chunked (no
    whole-size difference is made)."""
    flat = t.reshape(-1)
    sub = minus.reshape(-1) if minus is not None else None
    total = 0.0
    for lo, hi in _spans(flat.numel()):
        c = flat[lo:hi].to(torch.float64).reshape(-1)
        if sub is not None:
            c = c - sub[lo:hi].reshape(-1)
        part = float(torch.dot(c, c)) if _all_finite(c) else math.inf   # one pass, no squared copy
        if not math.isfinite(part):   # NaN as 0; an inf, or a square past float64's range, dropped
            part = float(c.abs().pow(2).nan_to_num(nan=0.0, posinf=0.0).sum())
        total += part
    return total


def _all_finite(t: torch.Tensor) -> bool:
    """Every element finite, from one min/max pass (a NaN or an inf shows in one of them)."""
    if not t.numel():
        return True
    lo, hi = torch.aminmax(t)
    return math.isfinite(float(lo)) and math.isfinite(float(hi))


# -- the bound -----------------------------------------------------------------------


def _exactly_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if torch.equal(a, b):  # one pass; False where either holds a NaN, so NaNs are looked at below
        return True
    if not a.is_floating_point():
        return False
    same = (a == b) | (torch.isnan(a) & torch.isnan(b))
    return bool(same.all())


def fingerprint(case: ProblemCase) -> tuple:
    """What the derived model depends on: problem, device, dtype, shapes and the input values.

    Values enter through float64 moments (sum, sum of squares, an index-weighted sum):
    two cases with equal fingerprints were drawn the same way (the oracles' cases are
    regenerated from seeds), so one derivation serves both.
    """
    parts: list[Any] = [id(case.problem.Model), str(case.device), str(case.dtype), tuple(sorted(case.shapes.items())),
                        case.problem.allow_tf32, case.block_floor]
    for x in case.inputs:
        if isinstance(x, torch.Tensor):
            flat = x.detach().reshape(-1)
            s1 = s2 = sw = 0.0
            for lo, hi in _spans(flat.numel()):  # chunked: no float64 copy of a whole input
                v = flat[lo:hi].to(torch.float64).nan_to_num(nan=0.5, posinf=3.0, neginf=-3.0)
                w = torch.arange(lo + 1, hi + 1, device=v.device, dtype=torch.float64).remainder(997)
                s1, s2, sw = s1 + float(v.sum()), s2 + float(v.pow(2).sum()), sw + float((v * w).sum())
            parts.append((tuple(x.shape), str(x.dtype), s1, s2, sw))
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
    token = _DEVICE.set(str(case.device))
    try:
        return _derive_cached(case, key)
    finally:
        _DEVICE.reset(token)


def _derive_cached(case: ProblemCase, key: str) -> DerivedModel:
    shared = case.problem.__dict__.setdefault("_derived_cache", {})
    # large outputs are never kept there (GPU memory matters more), so none is looked up:
    # the fingerprint's passes over the inputs are saved too
    kept = sum(r.numel() for r in case.reference()) <= CACHE_NUMEL
    fp = fingerprint(case) if kept else None
    if kept and fp in shared:
        case._cache[key] = dm = shared[fp]
        case._cache["derived-floor"] = [0.0 if a is None else max_abs_finite(a, empty=0.0) for a in dm.allowed]
        return dm
    dm = case._cache[key] = _derive(case)
    # The largest allowed error per output: a scalar summary that outlives the model
    # (release_case keeps it), for tamper's history calls.
    case._cache["derived-floor"] = [0.0 if a is None else max_abs_finite(a, empty=0.0) for a in dm.allowed]
    if kept:
        if len(shared) >= CACHE_SIZE:
            shared.pop(next(iter(shared)))
        shared[fp] = dm
    return dm


def _derive(case: ProblemCase) -> DerivedModel:
    """The derivation of the module docs, holding little: the multilinear tests first (before
    anything of the fold is resident), then each evaluation folded into ``sigma`` and
    dropped, every elementwise step in chunks, the float64 model copies freed at the end."""
    refs = case.reference()
    # One thread for the float64 tests of a small case: the same results, and on a loaded
    # machine a small op on several threads waits for them far longer than it computes.
    # A large case (whose structure its small shape showed) keeps the threads it has.
    cpu = not str(case.device).startswith("cuda")
    largest = max([x.numel() for x in case.inputs if isinstance(x, torch.Tensor)] + [r.numel() for r in refs])
    with _threads(1) if cpu and largest < THREADED_TESTS_NUMEL else contextlib.nullcontext():
        ml = multilinear(case)
    u = unit_roundoff(case)
    tiny = torch.finfo(case.dtype).tiny if case.dtype.is_floating_point else 0.0
    u_native = UNIT_ROUNDOFF.get(case.dtype, 2.0**-24)
    folds = [_Fold(ref, case.dtype) if ref.is_floating_point() else None for ref in refs]
    names: list[str] = []
    for name, outs in evaluations(case):
        if name != "reference rounded":
            names.append(name)
        for fold, out in zip(folds, outs):
            if fold is not None:
                fold.add(name, out)
        del outs
    for key in [k for k in case._cache if isinstance(k, tuple) and k and k[0] == "derived-model"]:
        del case._cache[key]  # the float64 and |.| model copies: parameters can be large
    allowed: list[torch.Tensor | None] = []
    scales: list[torch.Tensor | None] = []
    natives: list[torch.Tensor | None] = []
    notes: list[str] = []
    for k, (ref, fold) in enumerate(zip(refs, folds)):
        if fold is None:
            allowed.append(None)
            scales.append(None)
            natives.append(None)
            continue
        if ml is None and fold.representable and fold.all_equal:
            allowed.append(None)
            scales.append(None)
            natives.append(None)
            notes.append(f"output {k}: the float64 reference is representable in {case.dtype} and every "
                         "evaluation equals it bit for bit: exact")
            continue
        mag = ml.magnitude[k] if ml is not None else None
        rf = ref.reshape(-1)
        if ml is not None:
            mag_floor: float | torch.Tensor = 0.0
        elif case.block_floor:  # blocks of different magnitudes (a strata input): each block's own
            from .values import block_rms

            mag_floor = block_rms(ref)
        else:
            mag_floor = _rms_chunked(rf.numel(), lambda lo, hi: torch.nan_to_num(rf[lo:hi], nan=0.0, posinf=0.0,
                                                                                 neginf=0.0))
        scale = _scale_from_sigma(ref, mag, mag_floor, fold.sigma, u)
        native = None
        if fold.native_sigma is not None:
            native = _scale_from_sigma(ref, mag, mag_floor, fold.native_sigma, u_native)
        fold.sigma = fold.native_sigma = None
        n = ml.length if ml is not None else 1
        bound = scale * SAFETY
        if ml is not None:
            bound.add_(mag, alpha=u * LAMBDA * math.sqrt(n))
        bound.add_(n * tiny)
        allowed.append(bound)
        scales.append(scale)
        natives.append(scale if native is None else native)
    return DerivedModel(allowed, scales, names, ml is not None, ml.length if ml is not None else None, notes,
                        natives)


def widened_for_reach(case: ProblemCase, dm: DerivedModel) -> list[torch.Tensor | None] | None:
    """``dm.allowed`` widened for the range of the intermediates (:func:`intermediate_reach`,
    :func:`_add_reach`), in new tensors; ``None`` where ``dm`` is not multilinear or ``H``
    cannot be evaluated. One more float64 evaluation of the module at the case's shape, so
    the oracles ask for it only before rejecting (a correct kernel rarely needs it)."""
    if not dm.multilinear or not case.dtype.is_floating_point:
        return None
    token = _DEVICE.set(str(case.device))
    try:
        reach = intermediate_reach(case)
    finally:
        _DEVICE.reset(token)
        case._cache.pop(("derived-model", torch.float64, True, True), None)  # its max(|p|, 1) model copy
    if reach is None:
        return None
    out: list[torch.Tensor | None] = []
    for bound, h in zip(dm.allowed, reach):
        if bound is None:
            out.append(None)
            continue
        wide = bound.clone()
        _add_reach(wide, h, case.dtype)
        out.append(wide)
    return out


def _add_reach(bound: torch.Tensor, reach: torch.Tensor, dtype: torch.dtype) -> None:
    """Widen ``bound`` for intermediates' range (:func:`intermediate_reach`): ``SAFETY``
    subnormal spacings amplified by ``H``, and no bound at all (inf: any value, finite or
    not) where ``H`` passes the dtype's largest finite number, so that some association
    can overflow. Negligible wherever the inputs keep every intermediate in range."""
    top = torch.finfo(dtype).max
    step = torch.finfo(dtype).smallest_normal * torch.finfo(dtype).eps  # the smallest subnormal
    bf, hf = bound.reshape(-1), reach.reshape(-1)
    for lo, hi in _spans(bf.numel()):
        h = hf[lo:hi]
        bf[lo:hi].add_(h, alpha=SAFETY * step)
        bf[lo:hi].masked_fill_(~(h < top), math.inf)  # NaN H (inf * 0 in float64) too


class _Fold:
    """One output's evaluations folded as they come: ``sigma`` (the largest distance from
    the float64 reference where both are finite), the same without the TF32 evaluation,
    and whether the reference is representable and every evaluation equals it."""

    def __init__(self, ref: torch.Tensor, dtype: torch.dtype) -> None:
        self.ref, self.dtype = ref, dtype
        # contiguous whatever the reference's strides: it is updated through flat views
        self.sigma = torch.zeros(ref.shape, dtype=ref.dtype, device=ref.device)
        self.native_sigma: torch.Tensor | None = None
        self.all_equal = True
        self.representable = True

    def add(self, name: str, out: torch.Tensor) -> None:
        if name == TF32_ALTERNATIVE and self.native_sigma is None:
            self.native_sigma = self.sigma.clone()  # the dtype's own rounding, without TF32
        rf, of, sf = self.ref.reshape(-1), out.reshape(-1), self.sigma.reshape(-1)
        nf = self.native_sigma.reshape(-1) if self.native_sigma is not None and name != TF32_ALTERNATIVE else None
        for lo, hi in _spans(rf.numel()):
            r, o = rf[lo:hi], of[lo:hi]
            # |o - r| is finite exactly where both are: a non-finite one gives inf or NaN, here 0
            e = torch.sub(o if o.dtype != torch.bool else o.to(torch.float64), r)  # o promoted inside: no copy
            e = e.abs_().nan_to_num_(nan=0.0, posinf=0.0)
            torch.maximum(sf[lo:hi], e, out=sf[lo:hi])
            if nf is not None:
                torch.maximum(nf[lo:hi], e, out=nf[lo:hi])
            if name == "reference rounded":
                self.representable = self.representable and _exactly_equal(r.to(self.dtype).to(torch.float64), r)
            elif self.all_equal:
                self.all_equal = _exactly_equal(o.to(self.dtype), r.to(self.dtype))


def _scale_from_sigma(ref: torch.Tensor, mag: torch.Tensor | None, mag_floor: float | torch.Tensor, sigma: torch.Tensor,
                      u: float) -> torch.Tensor:
    """``max(sigma, c * M, u * |ref|)`` of the module docs, in a new tensor, chunk by chunk
    (``M`` is ``mag``, or ``max(|ref|, mag_floor)`` where ``mag`` is ``None``)."""
    sf = sigma.reshape(-1)
    tiny = torch.finfo(torch.float64).tiny

    def ratio(lo: int, hi: int) -> torch.Tensor:
        m = _mag_span(mag, ref, mag_floor, lo, hi)
        return torch.where(m > 0, sf[lo:hi] / m.clamp_min(tiny), 0.0)

    c = _rms_chunked(sf.numel(), ratio)
    out = torch.empty(sigma.shape, dtype=sigma.dtype, device=sigma.device)  # contiguous: written through a flat view
    of, rf = out.reshape(-1), ref.reshape(-1)
    for lo, hi in _spans(sf.numel()):
        m = _mag_span(mag, ref, mag_floor, lo, hi)
        r = torch.nan_to_num(rf[lo:hi], nan=0.0, posinf=0.0, neginf=0.0).abs()
        torch.maximum(torch.maximum(sf[lo:hi], c * m), u * r, out=of[lo:hi])
    return out


def _mag_span(mag: torch.Tensor | None, ref: torch.Tensor, mag_floor: float | torch.Tensor, lo: int,
              hi: int) -> torch.Tensor:
    if mag is not None:
        return mag.reshape(-1)[lo:hi]
    m = torch.nan_to_num(ref.reshape(-1)[lo:hi], nan=0.0, posinf=0.0, neginf=0.0).abs()
    if isinstance(mag_floor, torch.Tensor):  # per element (a block_floor case's blocks)
        return torch.maximum(m, mag_floor[lo:hi].to(m.dtype))
    return m.clamp_min(mag_floor)
