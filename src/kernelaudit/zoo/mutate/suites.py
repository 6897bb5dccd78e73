"""Minimal test suites: per problem, the at most ``k`` inputs that kill the most mutants.

Read from a campaign store (standard library, plus scipy for the exact solver when
installed). Per subject the campaign records the *suite-candidate inputs* (columns:
shape x value kind x seed, :func:`kernelaudit.zoo.oracles.suite.candidate_specs`),
which of them the clean candidate and the known-correct variants pass, and per judged
mutant which inputs kill it (``inputs``: label -> 1/0). From that:

* an input the clean candidate or a correct variant fails is **ineligible**: a suite
  holding it would reject a correct kernel (a false rejection);
* **killable** mutants: killed by at least one eligible input;
* :func:`greedy`: repeatedly take the input killing most mutants not yet killed;
  :func:`exact`: the best set of at most ``k`` inputs, an ILP (``scipy.optimize.milp``:
  maximise covered mutants subject to ``sum x <= k``, ``y_m <= sum_{i kills m} x_i``)
  or, without scipy, every subset of size ``k`` (``k <= 2`` only);
* :func:`curve`: killed / killable over all problems for ``k = 1, 2, ...``;
* :func:`held_out`: the suites chosen on the mutants of one half of the operators and
  measured on the mutants of the other half (and the other way round), so the
  figure is not the fit of a suite to the very mutants it was chosen on.
"""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass, field
from typing import Any

#: Largest ``k`` :func:`exact` solves by enumeration when scipy is missing.
ENUMERATE_MAX_K = 2


@dataclass
class ProblemMatrix:
    """The kill matrix of one subject: eligible input labels, and per mutant the inputs that kill it."""

    subject: str
    problem: str
    inputs: list[dict[str, Any]]
    eligible: list[str]
    ineligible: dict[str, str] = field(default_factory=dict)
    kills: dict[str, frozenset[str]] = field(default_factory=dict)
    operator: dict[str, str] = field(default_factory=dict)

    def killable(self, mutants: list[str] | None = None) -> list[str]:
        ids = self.kills if mutants is None else mutants
        return [m for m in ids if self.kills.get(m)]

    def covered(self, chosen: list[str], mutants: list[str] | None = None) -> int:
        s = set(chosen)
        return sum(1 for m in self.killable(mutants) if self.kills[m] & s)


def matrices(records: list[dict[str, Any]]) -> dict[str, ProblemMatrix]:
    """subject -> its kill matrix (only subjects whose clean check recorded suite inputs)."""
    subjects: dict[str, dict[str, Any]] = {}
    mutants: dict[str, dict[str, Any]] = {}
    for r in records:
        if r.get("type") == "subject":
            subjects[r["subject"]] = r
        elif r.get("type") == "mutant":
            mutants[r["id"]] = r
    out: dict[str, ProblemMatrix] = {}
    for sid, rec in subjects.items():
        if "suite_inputs" not in rec:
            continue
        labels = [s["label"] for s in rec["suite_inputs"]]
        bad: dict[str, str] = {}
        for lab in labels:
            if rec.get("clean_inputs", {}).get(lab, 1) != 0:
                bad[lab] = "the clean candidate fails it" if lab in rec.get("clean_inputs", {}) else \
                    "the clean candidate was not judged on it"
            else:
                for name, got in rec.get("variant_inputs", {}).items():
                    if got.get(lab) == 1:
                        bad[lab] = f"correct variant {name} fails it"
                        break
        eligible = [lab for lab in labels if lab not in bad]
        out[sid] = ProblemMatrix(sid, rec.get("problem", sid), rec["suite_inputs"], eligible, bad)
    for mid, r in mutants.items():
        pm = out.get(r.get("subject"))
        if pm is None or r.get("outcome") not in ("killed", "survived") or "inputs" not in r:
            continue
        pm.kills[mid] = frozenset(lab for lab, k in r["inputs"].items() if k == 1 and lab in pm.eligible)
        pm.operator[mid] = r.get("operator", "?")
    return out


def greedy(pm: ProblemMatrix, k: int, mutants: list[str] | None = None) -> list[str]:
    """At most ``k`` inputs, each the one killing most not-yet-killed mutants (ties: candidate order)."""
    left = {m: pm.kills[m] for m in pm.killable(mutants)}
    chosen: list[str] = []
    while len(chosen) < k and left:
        best = max(pm.eligible, key=lambda lab: (sum(lab in s for s in left.values()), -pm.eligible.index(lab)))
        gain = sum(best in s for s in left.values())
        if gain == 0:
            break
        chosen.append(best)
        left = {m: s for m, s in left.items() if best not in s}
    return chosen


#: Value kinds from the most general draw to the most special: among suites that kill as many
#: mutants, the one of more general inputs is chosen (unlisted kinds, the adversarial ones, last).
KIND_ORDER = ("normal", "rand", "mixed", "large", "negative", "small")


def strength(pm: ProblemMatrix, killable: list[str], k: int) -> dict[str, int]:
    """Each input's tie-break score among equally killing suites: the mutants of ``killable`` it
    kills alone first, then the generality of its value kind (:data:`KIND_ORDER`). Held out by
    operator, the strongest and most general of the best suites catch more of the unseen
    operators' mutants than an arbitrary one (2026-12-04 corpus campaign: 99.1% against 98.2%)."""
    kinds = {i["label"]: i.get("kind", "") for i in pm.inputs}
    span = len(KIND_ORDER) + 1
    step = k * span + 1  # one more mutant killed alone outweighs any difference of kinds in k inputs
    out = {}
    for lab in pm.eligible:
        kind = kinds.get(lab, "")
        rank = span - 1 - KIND_ORDER.index(kind) if kind in KIND_ORDER else 0
        out[lab] = sum(lab in pm.kills[m] for m in killable) * step + rank
    return out


def exact(pm: ProblemMatrix, k: int, mutants: list[str] | None = None, *, solver: str = "auto") -> list[str]:
    """The set of at most ``k`` inputs killing the most mutants (``solver``: auto, milp or enumerate);
    among sets killing as many, the one of greatest :func:`strength`."""
    from ...errors import check_choice

    check_choice("solver", solver, ("auto", "milp", "enumerate"))
    killable = pm.killable(mutants)
    if not killable or k <= 0:
        return []
    useful = [lab for lab in pm.eligible if any(lab in pm.kills[m] for m in killable)]
    score = strength(pm, killable, k)
    if len(useful) <= k:
        return useful
    if solver in ("auto", "milp"):
        try:
            return _milp(pm, k, killable, useful, score)
        except ImportError:
            if solver == "milp":
                raise
    if k > ENUMERATE_MAX_K:
        from ...errors import InvalidArgument

        raise InvalidArgument(f"Cannot solve k={k} exactly without scipy: allowed is k <= {ENUMERATE_MAX_K} "
                              "(pip install scipy for the ILP)")
    best: tuple[tuple[int, int], tuple[str, ...]] = ((-1, -1), ())
    for combo in itertools.combinations(useful, k):
        got = (pm.covered(list(combo), killable), sum(score[lab] for lab in combo))
        if got > best[0]:
            best = (got, combo)
    return list(best[1])


def topped(pm: ProblemMatrix, chosen: list[str], k: int) -> list[str]:
    """``chosen`` filled up to ``k`` with eligible inputs in candidate order: a suite never leaves a slot
    empty just because the mutants it was chosen on needed fewer (what :func:`export_suites` writes)."""
    return (chosen + [e for e in pm.eligible if e not in chosen])[:max(k, len(chosen))]


def _milp(pm: ProblemMatrix, k: int, killable: list[str], useful: list[str], score: dict[str, int]) -> list[str]:
    import numpy as np
    from scipy.optimize import Bounds, LinearConstraint, milp

    n, m = len(useful), len(killable)
    col = {lab: i for i, lab in enumerate(useful)}
    # variables: x_0..x_{n-1} (input chosen), y_0..y_{m-1} (mutant killed); maximise W * sum y +
    # sum score_i x_i, with W above any k inputs' scores: the most mutants first, then the strongest
    w = k * max(score[lab] for lab in useful) + 1
    c = np.concatenate([-np.array([score[lab] for lab in useful], dtype=float), -np.full(m, float(w))])
    a = np.zeros((1 + m, n + m))
    a[0, :n] = 1
    for j, mid in enumerate(killable):
        a[1 + j, n + j] = 1
        for lab in pm.kills[mid]:
            if lab in col:
                a[1 + j, col[lab]] = -1
    lo = np.concatenate([[0], np.full(m, -np.inf)])
    hi = np.concatenate([[k], np.zeros(m)])
    res = milp(c, constraints=LinearConstraint(a, lo, hi), integrality=np.ones(n + m), bounds=Bounds(0, 1))
    if res.x is None:
        raise RuntimeError(f"the ILP of {pm.subject} found no solution: {res.message}")
    return [useful[i] for i in range(n) if res.x[i] > 0.5]


@dataclass
class CurvePoint:
    k: int
    killed: int
    killable: int

    @property
    def rate(self) -> float | None:
        return self.killed / self.killable if self.killable else None


def curve(ms: dict[str, ProblemMatrix], ks: range | list[int] = range(1, 6), *, method: str = "greedy"
          ) -> list[CurvePoint]:
    """Killed / killable over every problem, per suite size ``k`` (``method``: greedy or exact)."""
    pick = greedy if method == "greedy" else exact
    out = []
    for k in ks:
        killed = sum(pm.covered(pick(pm, k)) for pm in ms.values())
        out.append(CurvePoint(k, killed, sum(len(pm.killable()) for pm in ms.values())))
    return out


def operator_split(operators: list[str], salt: str = "suites") -> tuple[set[str], set[str]]:
    """Two halves of the operators (sizes differ by at most one), ordered by a hash of each name and
    dealt alternately: the same split every run, and neither half empty when there are two or more."""
    ordered = sorted(set(operators), key=lambda o: hashlib.sha256(f"{salt}:{o}".encode()).hexdigest())
    return set(ordered[0::2]), set(ordered[1::2])


def held_out(ms: dict[str, ProblemMatrix], k: int, *, method: str = "greedy") -> dict[str, Any]:
    """Suites chosen on one half of the operators' mutants, measured on the other half; both directions."""
    pick = greedy if method == "greedy" else exact
    ops = sorted({o for pm in ms.values() for o in pm.operator.values()})
    a, b = operator_split(ops)
    killed = killable = 0
    for pm in ms.values():
        for train, test in ((a, b), (b, a)):
            tr = [m for m, o in pm.operator.items() if o in train]
            te = [m for m, o in pm.operator.items() if o in test]
            chosen = topped(pm, pick(pm, k, tr), k)
            killed += pm.covered(chosen, te)
            killable += len(pm.killable(te))
    return {"k": k, "method": method, "killed": killed, "killable": killable,
            "rate": killed / killable if killable else None, "operators": [sorted(a), sorted(b)]}


def choose(ms: dict[str, ProblemMatrix], k: int, *, method: str = "exact") -> dict[str, list[str]]:
    """subject -> chosen input labels (the suite of each problem)."""
    pick = greedy if method == "greedy" else exact
    return {sid: pick(pm, k) for sid, pm in ms.items()}


def false_rejections(ms: dict[str, ProblemMatrix], chosen: dict[str, list[str]],
                     records: list[dict[str, Any]]) -> list[str]:
    """Correct candidates (clean subjects, correct variants) a chosen suite rejects: goal none.

    Chosen inputs are eligible by construction; this recounts from the records so a
    suite from another source (a file, another campaign) is checked the same way."""
    subjects = {r["subject"]: r for r in records if r.get("type") == "subject"}
    out = []
    for sid, labels in chosen.items():
        rec = subjects.get(sid, {})
        if any(rec.get("clean_inputs", {}).get(lab, 0) == 1 for lab in labels):
            out.append(f"{sid} (clean)")
        for name, got in rec.get("variant_inputs", {}).items():
            if any(got.get(lab, 0) == 1 for lab in labels):
                out.append(f"{sid} variant {name}")
    return out


def correct_judged(records: list[dict[str, Any]]) -> int:
    """Correct candidates with per-input verdicts (clean subjects plus their variants; a subject's last record)."""
    last = {r["subject"]: r for r in records if r.get("type") == "subject"}
    return sum(1 + len(r.get("variant_inputs", {})) for r in last.values() if "clean_inputs" in r)


def summary(records: list[dict[str, Any]], ks: list[int] = (1, 2, 3, 4)) -> dict[str, Any]:
    """Everything the report shows about suites, JSON-ready."""
    ms = matrices(records)
    chosen2 = choose(ms, 2)
    return {
        "problems": len(ms), "mutants_with_inputs": sum(len(pm.kills) for pm in ms.values()),
        "killable": sum(len(pm.killable()) for pm in ms.values()),
        # killed by some oracle of the campaign: what no suite input kills (tamper-only faults, say) shows here
        "killable_by_oracles": len({r["id"] for r in records if r.get("type") == "mutant"
                                    and r.get("outcome") == "killed" and r.get("subject") in ms and "inputs" in r}),
        "ineligible_inputs": {sid: pm.ineligible for sid, pm in ms.items() if pm.ineligible},
        "curve_greedy": [{"k": p.k, "killed": p.killed, "killable": p.killable, "rate": p.rate}
                         for p in curve(ms, list(ks))],
        "curve_exact": [{"k": p.k, "killed": p.killed, "killable": p.killable, "rate": p.rate}
                        for p in curve(ms, list(ks), method="exact")],
        "held_out": [held_out(ms, k, method="exact") for k in (1, 2)],
        "suite_false_rejections_k2": false_rejections(ms, chosen2, records),
        "correct_judged": correct_judged(records),
    }


def export_suites(records: list[dict[str, Any]], out, *, k: int = 2, method: str = "exact",  # noqa: ANN001
                  source: str = "") -> tuple[Any, int]:
    """Write the chosen suites of every problem with per-input data to ``out``; (path, problems written)."""
    from pathlib import Path

    from ..oracles.suite import InputSpec, write_suite_file

    ms = matrices(records)
    chosen = choose(ms, k, method=method)
    problems: dict[str, dict[str, Any]] = {}
    for sid, pm in ms.items():
        specs = {s["label"]: InputSpec.from_json(s) for s in pm.inputs}
        name = Path(pm.problem).stem if pm.problem else sid
        key = name if name not in problems else sid  # two subjects of one problem name: the second by subject
        problems[key] = {"path": str(pm.problem), "subject": sid, "killed": pm.covered(chosen[sid]),
                         "killable": len(pm.killable()), "mutants": len(pm.kills),
                         # topped up to k with eligible inputs in candidate order, so that a problem with
                         # few killable mutants still gets a suite that judges something
                         "inputs": [specs[lab] for lab in topped(pm, chosen[sid], k)]}
    write_suite_file(Path(out), problems, k=k, source=source)
    return Path(out), len(problems)
