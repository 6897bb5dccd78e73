"""``fuzz-baseline``: a published fuzzing recipe, reproduced as a baseline oracle.

The seed study (BACKGROUND section 2) reports that "a published fuzzing recipe wrongly
rejected correct kernels 107 times"; the study itself was not found, so this oracle
reproduces the recipe as its most likely source describes it: the op-schema-aware
seeded fuzzer of arXiv 2606.20128 / 2606.27396 with the *adversarial value* strategy
("injects NaN and Inf inputs, and the validator's NaN check fires on every kernel that
propagates them"; 99% recall, 94% false positives on correct controls there).

Recipe, per problem (seeded, so every run draws the same inputs):

* trials: the fixed shape and the boundary shapes of :mod:`.shapes` (largest prime
  below, one past, all small primes), with values ``uniform`` [0, 1), ``normal``
  and ``special`` (normal values with :data:`SPECIAL_FRACTION` of the elements
  replaced by NaN, +inf, -inf, 0, -0 and the smallest subnormal);
* validator: the candidate's output must hold no NaN (the NaN check), and
  ``torch.allclose(out, ref, rtol=TOL, atol=TOL)`` against the problem's ``Model`` run at
  the same dtype, NaNs unequal.

It is a *baseline*: its false rejections (correct kernels that propagate a NaN the
input carried, or whose rounding differs past a fixed tolerance at a large value) are
counted next to its kills, which is the point of the comparison.
"""

from __future__ import annotations

import torch

from ...verdict import Status, Verdict
from ..problems.problem_case import KERNELBENCH_SEED, ProblemCase, release_models
from .base import CandidateFailed, Driver, Subject, combine, run_subject

#: Fixed tolerance of the recipe's allclose (rtol = atol).
TOL = 1e-3
#: Share of elements replaced by special values in a ``special`` trial.
SPECIAL_FRACTION = 0.1
#: (shape label prefix, value distribution) of each trial; "fixed" is the problem's shape.
TRIALS = (("fixed", "uniform"), ("fixed", "normal"), ("fixed", "special"), ("prime below", "normal"),
          ("one past", "uniform"), ("all prime", "special"))


def _draw(kind: str, like: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    if kind == "uniform":
        v = torch.rand(like.shape, generator=gen, dtype=torch.float64)
    else:
        v = torch.randn(like.shape, generator=gen, dtype=torch.float64)
    if kind == "special":
        specials = torch.tensor([float("nan"), float("inf"), float("-inf"), 0.0, -0.0,
                                 torch.finfo(like.dtype).tiny * 2.0**-10], dtype=torch.float64)
        hit = torch.rand(like.shape, generator=gen) < SPECIAL_FRACTION
        pick = torch.randint(len(specials), like.shape, generator=gen)
        v = torch.where(hit, specials[pick], v)
    return v.to(device=like.device, dtype=like.dtype)


def fuzz_inputs(case: ProblemCase, kind: str, seed: int) -> list:
    """The case's inputs with floating values redrawn as ``kind`` (integer and ``fixed`` inputs kept)."""
    from .values import shape_for_kind

    gen = torch.Generator().manual_seed(seed)
    kinds = case.problem.input_kinds(len(case.inputs))
    out = []
    for x, ik in zip(case.inputs, kinds):
        if isinstance(x, torch.Tensor) and x.is_floating_point() and ik != "fixed":
            out.append(shape_for_kind(_draw(kind, x, gen), ik))
        else:
            out.append(x)
    return out


def validate(case: ProblemCase, outputs: list[torch.Tensor]) -> Verdict:
    """The recipe's validator: no NaN in the output, then allclose to the reference at the dtype."""
    refs = case.reference(case.dtype)
    if len(outputs) != len(refs):
        return Verdict(Status.WRONG, metric="outputs",
                       message=f"{case.describe()}: {len(outputs)} outputs, the reference has {len(refs)}")
    for k, (o, r) in enumerate(zip(outputs, refs)):
        if tuple(o.shape) != tuple(r.shape):
            return Verdict(Status.WRONG, metric="shape", message=f"{case.describe()}: output {k} has shape "
                                                                 f"{tuple(o.shape)}, expected {tuple(r.shape)}")
        if o.is_floating_point() and bool(torch.isnan(o).any()):
            idx = int(torch.isnan(o.reshape(-1)).nonzero()[0])
            return Verdict(Status.WRONG, metric="nan", first_bad_index=idx,
                           message=f"{case.describe()}: output {k} holds NaN (first at flat index {idx}): the "
                                   f"recipe's NaN check")
        o2, r2 = o.to(torch.float64).cpu(), r.to(torch.float64).cpu()
        if not torch.allclose(o2, r2, rtol=TOL, atol=TOL):
            bad = ~torch.isclose(o2, r2, rtol=TOL, atol=TOL)
            idx = int(bad.reshape(-1).nonzero()[0])
            err = float((o2 - r2).abs().nan_to_num(posinf=float("inf")).max())
            return Verdict(Status.WRONG, metric="allclose", value=err, tolerance=TOL, first_bad_index=idx,
                           message=f"{case.describe()}: output {k} not allclose (rtol=atol={TOL:g}); max abs "
                                   f"error {err:.3g}, first bad flat index {idx}")
    return Verdict(Status.OK, metric="allclose", tolerance=TOL,
                   message=f"{case.describe()}: no NaN, allclose rtol=atol={TOL:g}")


class FuzzBaselineOracle(Driver):
    """The fuzzing recipe's trials (:data:`TRIALS`), each run and validated by :func:`validate`."""

    name = "fuzz-baseline"

    def trial_cases(self, case: ProblemCase) -> list[ProblemCase]:
        from .shapes import shape_variants

        shapes = {"fixed": dict(case.shapes)}
        for label, other in shape_variants(case.shapes):
            for prefix in ("prime below", "one past", "all prime"):
                if label.startswith(prefix):
                    shapes[prefix] = other
        out = []
        for i, (where, kind) in enumerate(TRIALS):
            if where not in shapes:
                continue
            base = case if where == "fixed" else ProblemCase.make(case.problem, seed=KERNELBENCH_SEED,
                                                                  device=case.device, shapes=shapes[where])
            seed = case.seed * 100 + i
            out.append(base.with_inputs(fuzz_inputs(base, kind, seed), f"fuzz {where} {kind} seed {seed}"))
        return out

    def drive(self, case: ProblemCase, subject: Subject) -> Verdict:
        verdicts = {}
        for c in self.trial_cases(case):
            try:
                c.reference(c.dtype)
            except Exception as exc:  # noqa: BLE001 - the reference rejects the shape: not a trial
                verdicts[c.label] = Verdict.skipped(f"{c.describe()}: the reference raises {type(exc).__name__}",
                                                    reason="reference failed")
                continue
            try:
                outs = run_subject(subject, c, [x.clone() if isinstance(x, torch.Tensor) else x for x in c.inputs])
                verdicts[c.label] = validate(c, outs)
            except CandidateFailed as failed:
                verdicts[c.label] = failed.verdict
            release_models(c)
        return combine(self.name, verdicts, context="fuzz-baseline: ")
