"""Deriving one op from an OpInfo entry: a sample that scales along a separable dim.

:func:`derive_entry` tries an entry's sample inputs (those whose first input has two
or more dims first), and for each every dim of the first input (the tensors of the
same rank and size along it batched with it, else only the first), under each value
domain (:data:`~.recipe.DOMAINS`) until one passes both checks: on float64 samples, two
runs agree (else the op is random) and the op on 2 stacked batches equals the op on
each batch; then the sweep's own judge, on 3 batches in float32 with one batch per
reference chunk, forward and (where differentiable) backward.
"""

from __future__ import annotations

import torch

from .families import classify
from .recipe import DOMAINS, _INDEX_TAGS, NotScalable, _flat_outputs, decode, encode, fn_ref, make_call, \
    resolve_fn, spec_from_recipe
from .spec import FLOAT_DTYPES, OpSpec

#: Sample inputs tried per OpInfo entry before it is listed as not covered.
SAMPLES_TRIED = 40
#: Further candidates tried for a backward once one passed forward only.
BWD_RETRIES = 6
#: Batches of the calibration, and of the case judged with its tolerance, that a derived
#: op must pass on the CPU before it is listed as covered.
CONFIRM_CAL_BATCHES = 8
CONFIRM_BATCHES = 48
#: Output elements a batch of a derived op holds at least (see ``_finish``)...
MIN_BATCH_OUTPUT = 256
#: ...unless its batched inputs would then pass this many elements per batch.
MAX_BATCH_INPUT = 2**14
#: Worst relative error (float32 against the float64 batch-local reference) the end-to-end
#: check of a derived op accepts: a non-separable op is off by O(1).
CONFIRM_REL = 1e-2


#: Ops under trial (name -> spec), found by the sweep's op lookup while being checked.
TRIAL: dict[str, OpSpec] = {}
#: True in the catalogue's build worker: an unknown op is never looked up in a catalogue.
DERIVING = False


def _rand_like(shape, od, gen: torch.Generator) -> torch.Tensor:
    if od["kind"] == "index":
        return torch.randint(0, max(od["high"], 1), tuple(shape), generator=gen, dtype=torch.int64)
    return torch.rand(tuple(shape), generator=gen, dtype=torch.float64) * 2 - 1


def _inputs(operands: list[dict], B: int, seed: int) -> list[torch.Tensor]:
    """Operands for B batches, batch-first, random values ([-1, 1) or indexes)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for od in operands:
        shape = list(od["shape"])
        if od["dim"] is not None:
            s = shape.pop(od["dim"])
            shape = [B * s, *shape]
        out.append(_rand_like(shape, od, g))
    return out


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if not a.is_floating_point():
        return bool(torch.equal(a, b))
    if not (torch.isfinite(a).all() and torch.isfinite(b).all()):
        return False
    scale = max(1.0, float(b.abs().max())) if b.numel() else 1.0
    return a.numel() == 0 or float((a - b).abs().max()) <= 1e-6 * scale


def _separable_outputs(recipe: dict, seed: int) -> list[dict]:
    """The judged outputs of a candidate recipe (index, batch dim, rows per batch) if the
    op is deterministic and separable on float64 samples; raises :class:`NotScalable`."""
    base = dict(recipe, outs=[])
    fn = resolve_fn(recipe["fn"])
    domain = DOMAINS[recipe["domain"]]

    def run(tensors):
        ts = []
        for t, od in zip(tensors, recipe["operands"]):
            if od["dim"] is not None:
                t = t.movedim(0, od["dim"])
            t = t.to(_INDEX_TAGS[od["tag"]]) if od["kind"] == "index" else domain(t)
            ts.append(t)
        inp, args, kwargs = decode(base["template"], ts)
        with torch.no_grad():
            return _flat_outputs(fn(inp, *args, **kwargs))

    x2 = _inputs(recipe["operands"], 2, seed)
    o2 = run(x2)
    again = run(x2)
    if [o.shape for o in again] != [o.shape for o in o2] or not all(
            torch.equal(a, b) or (a.is_floating_point() and torch.allclose(a, b, rtol=0, atol=0, equal_nan=True))
            for a, b in zip(again, o2)):
        raise NotScalable("output differs between two runs on the same input: needs a metamorphic judge")
    halves = []
    for h in range(2):
        part = []
        for t, od in zip(x2, recipe["operands"]):
            if od["dim"] is None:
                part.append(t)
            else:
                n = t.shape[0] // 2
                part.append(t[h * n:(h + 1) * n])
        halves.append(run(part))
    floats = [i for i, o in enumerate(o2) if o.is_floating_point()]
    judged = floats or list(range(len(o2)))
    if not judged:
        raise NotScalable("no tensor output")
    outs = []
    for i in judged:
        o, h0, h1 = o2[i], halves[0][i], halves[1][i]
        if o.dim() == 0 or h0.dim() != o.dim():
            raise NotScalable("output is not batched (a whole-tensor result): needs a combining reference")
        found = None
        for d in range(o.dim()):
            n = h0.shape[d]
            if o.shape[d] != 2 * n or n == 0:
                continue
            if _close(o.narrow(d, 0, n), h0) and _close(o.narrow(d, n, n), h1):
                found = {"index": i, "dim": d, "rows": n}
                break
        if found is None:
            if not all(torch.isfinite(t).all() for t in (o, h0, h1) if t.is_floating_point()):
                raise NotScalable("non-finite output on the generated values")
            raise NotScalable("not separable along the scaled dim")
        outs.append(found)
    return outs


def _candidates(tensors: list[torch.Tensor], grads: list[bool]) -> list[list[dict]]:
    """Operand descriptions to try: for each dim d of the first tensor, the tensors of its
    rank and size along d batched along d (the others shared), then only the first."""
    first = tensors[0]
    if first.dim() == 0 or not first.is_floating_point() and first.dtype not in _INDEX_TAGS.values():
        return []
    out = []
    for d in range(first.dim()):
        if first.shape[d] == 0:
            continue
        for only_first in (False, True):
            ods = []
            for i, t in enumerate(tensors):
                batched = (i == 0) or (not only_first and t.dim() == first.dim() and t.shape[d] == first.shape[d])
                od = {"shape": list(t.shape), "dim": d if batched else None, "grad": bool(grads[i])}
                if t.is_floating_point():
                    od.update(kind="value")
                elif t.dtype in _INDEX_TAGS.values() and t.dtype != torch.bool:
                    if t.numel() and int(t.min()) < 0:
                        raise NotScalable("integer tensor argument with negative values (not an index)")
                    od.update(kind="index", tag=str(t.dtype).split(".")[-1],
                              high=int(t.max()) + 1 if t.numel() else 1)
                elif t.dtype == torch.bool:
                    od.update(kind="index", tag="bool", high=2)
                else:
                    raise NotScalable(f"tensor argument of dtype {t.dtype}")
                ods.append(od)
            if ods not in out:
                out.append(ods)
    return out


def _confirm(name: str, family: str, recipe: dict, direction: str) -> str | None:
    """None if the derived op runs and is judged ok end to end, else why not: float32, 3
    batches, one per reference chunk, against the float64 batch-local reference (a
    non-separable op is off by O(1)); then as the sweep judges it, a tolerance
    calibrated on :data:`CONFIRM_CAL_BATCHES` batches and a case of
    :data:`CONFIRM_BATCHES` judged with it, which a correct CPU must pass (an op whose
    float32 error is not stable from batch to batch would be a false rejection)."""
    from ..cases import Case
    from ..judge.execution import execute
    from ..tolerance import calibrated

    spec = spec_from_recipe(name, family, recipe)
    TRIAL[name] = spec
    try:
        case = Case(name, "float32", "contig", recipe["series"], "cal", "below", 3, direction, 0, 16)
        out = execute(case, "cpu", tolerances=None, ref_chunk=1)
        if out.verdict.status.value != "ok":
            return f"{direction} does not run in the sweep: {out.verdict.message}"
        worst = max(out.worst.values(), default=0.0)
        if not worst <= CONFIRM_REL:
            return f"{direction} differs from the batch-local reference by {worst:.3g} (not separable)"
        cal = execute(case.with_batch(CONFIRM_CAL_BATCHES), "cpu", tolerances=None)
        tol = calibrated(cal.worst, "float32")
        v = execute(case.with_batch(CONFIRM_BATCHES, seed=1), "cpu", tolerances=tol).verdict
        if v.status.value != "ok":
            return (f"{direction} judged {v.status.value} on a correct CPU at {CONFIRM_BATCHES} batches "
                    f"({v.metric} {v.value:.3g} > tolerance {v.tolerance:.3g}): a false rejection"
                    if v.value is not None and v.tolerance is not None else
                    f"{direction} judged {v.status.value} on a correct CPU: {v.message[:120]}")
    finally:
        TRIAL.pop(name, None)
    return None


def _dtypes(op) -> list[str]:
    both = set(op.supported_dtypes("cpu")) & set(op.supported_dtypes("cuda"))
    return [d for d in FLOAT_DTYPES if getattr(torch, d) in both]


def derive_entry(op) -> dict:
    """One OpInfo entry as a catalogue record: name, family, and a recipe (covered) or
    the reason it is not covered."""
    name = op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")
    family = classify(op.name, type(op).__name__)
    rec = {"name": name, "opinfo": op.name, "variant": op.variant_test_name, "family": family,
           "fwd": False, "bwd": False, "reason": "", "recipe": None}
    if family == "random":
        rec["reason"] = "random generator: needs a metamorphic judge"
        return rec
    dtypes = _dtypes(op)
    if "float32" not in dtypes:
        rec["reason"] = "no float32 support on both cpu and cuda"
        return rec
    ref = fn_ref(op)
    reasons: list[str] = []
    try:
        samples = list(op.sample_inputs("cpu", torch.float64, requires_grad=op.supports_autograd))
    except Exception as e:
        rec["reason"] = f"sample inputs fail: {type(e).__name__}"
        return rec
    # Samples whose first input has two or more dims first: they scale along one dim and
    # keep the others (a reduction over the rest, a conv's channels).
    samples = sorted(samples[:SAMPLES_TRIED], key=lambda s: -min(_first_dim(s), 2))
    want_bwd = op.supports_autograd
    fwd_only: dict | None = None  # the first recipe that passed forward only
    tries_after_fwd = 0
    for k, s in enumerate(samples):
        try:
            tensors: list[torch.Tensor] = []
            template = encode([s.input, list(s.args), dict(s.kwargs)], tensors)
            if not tensors:
                raise NotScalable("no tensor input to scale (a factory): needs a closed-form judge")
            if any(t.numel() == 0 for t in tensors):
                raise NotScalable("empty tensor in the sample")
            grads = [t.requires_grad and t.is_floating_point() for t in tensors]
            cands = _candidates([t.detach() for t in tensors], grads)
            if not cands:
                raise NotScalable("first input is a scalar tensor")
        except NotScalable as e:
            reasons.append(str(e))
            continue
        for ods in cands:
            for domain in DOMAINS:
                recipe = {"fn": ref, "template": template, "domain": domain,
                          "operands": [dict(od, shape=list(od["shape"])) for od in ods],
                          "opinfo": name, "dtypes": dtypes, "directions": ["fwd"], "sample": k}
                try:
                    recipe["outs"] = _separable_outputs(recipe, seed=k)
                except NotScalable as e:
                    reasons.append(str(e))
                    if "non-finite" in str(e):
                        continue  # another domain may do
                    break
                except Exception as e:
                    reasons.append(f"raises on the generated values: {type(e).__name__}")
                    continue
                recipe["exact"] = _integer_outputs(recipe, k)
                _finish(recipe)
                why = _confirm(name, family, recipe, "fwd")
                if why:
                    reasons.append(why)
                    continue
                if not want_bwd or recipe["exact"] or not any(od.get("grad") for od in ods):
                    rec.update(fwd=True, recipe=recipe, reason="bwd: not differentiable" if not want_bwd
                               else "bwd: no differentiable input or output")
                    return rec
                recipe["directions"] = ["fwd", "bwd"]
                why = _confirm(name, family, recipe, "bwd")
                if why is None:
                    rec.update(fwd=True, bwd=True, recipe=recipe, reason="")
                    return rec
                recipe["directions"] = ["fwd"]
                if fwd_only is None:
                    fwd_only = dict(rec, fwd=True, recipe=recipe, reason=why)
                tries_after_fwd += 1
                if tries_after_fwd >= BWD_RETRIES:
                    return fwd_only
                break
    if fwd_only is not None:
        return fwd_only
    rec["reason"] = _best_reason(reasons) if reasons else "no sample inputs"
    return rec


def _first_dim(sample) -> int:
    x = sample.input
    while isinstance(x, (list, tuple)) and x:
        x = x[0]
    return x.dim() if isinstance(x, torch.Tensor) else 0


def _integer_outputs(recipe: dict, seed: int) -> bool:
    """Whether every judged output is an integer tensor (indices): judged exactly."""
    x = _inputs(recipe["operands"], 1, seed)
    call = make_call(dict(recipe, outs=recipe["outs"]))
    with torch.no_grad():
        res = call(*x)
    return all(not r.is_floating_point() for r in res)


def _finish(recipe: dict) -> None:
    """Per-batch sizes. A batch is ``group`` slices of the scaled dim, enough that its
    smallest output has :data:`MIN_BATCH_OUTPUT` elements: the ``rel`` metric divides by
    a batch's largest reference value, which over one or two elements can be near zero
    (grid_sampler_3d, one output element per slice, was judged wrong at 5.6e-5 against
    a tolerance of 1e-6). The series is the larger of the batched inputs and outputs."""
    x = _inputs(recipe["operands"], 1, 0)
    with torch.no_grad():
        res = make_call(recipe)(*x)
    smallest = min((r.numel() for r in res), default=1)
    group = max(1, -(-MIN_BATCH_OUTPUT // max(smallest, 1)))
    ins1 = max((t.numel() for t, od in zip(x, recipe["operands"]) if od["dim"] is not None), default=1)
    group = max(1, min(group, MAX_BATCH_INPUT // max(ins1, 1)))
    recipe["group"] = group
    if group > 1:
        for od in recipe["operands"]:
            if od["dim"] is not None:
                od["shape"][od["dim"]] *= group
        for o in recipe["outs"]:
            o["rows"] *= group
        x = _inputs(recipe["operands"], 1, 0)
        with torch.no_grad():
            res = make_call(recipe)(*x)
    ins = max((t.numel() for t, od in zip(x, recipe["operands"]) if od["dim"] is not None), default=1)
    outs = max((r.numel() for r in res), default=1)
    recipe["series"] = "out" if outs > ins else "in"
    recipe["per_batch"] = max(ins, outs, 1)


#: Reasons in the order they explain best why no sample would do.
_REASON_ORDER = ("metamorphic", "factory", "whole-tensor", "not separable", "non-finite", "differs",
                 "does not run", "raises", "argument", "scalar", "negative")


def _best_reason(reasons: list[str]) -> str:
    for key in _REASON_ORDER:
        for r in reasons:
            if key in r:
                return r
    return reasons[0]

