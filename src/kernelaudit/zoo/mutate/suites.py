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
  maximise covered mutants subject to ``sum x <= k``, ``y_m <= sum_{i kills m} x_i``) or,
  where the sets are few (or without scipy, ``k <= 2``), every subset of size ``k``;
* among the sets that kill as many mutants (most problems have many: a handful of
  mutants, most of them killed by every input), :func:`exact` takes the one whose input
  *roles* (value kind, own or boundary shape: :func:`input_role`) carry the most
  :func:`role_credit`, pooled over the mutants of every problem: the kills few inputs
  make. A problem's own mutants are too few to say which input catches an operator they
  do not include; the campaign's other problems say which kinds of input make the rare
  kills (``tie_break="local"``: the problem's own mutants alone, the earlier rule);
* :func:`curve`: killed / killable over all problems for ``k = 1, 2, ...``;
* :func:`held_out`: the suites chosen on the mutants of one half of the operators (the
  pooled credit too) and measured on the mutants of the other half, both directions, for
  several splits (:data:`SPLIT_SALTS`): each split's rate and the least of them, so the
  figure is not the fit of a suite to the very mutants it was chosen on;
  :func:`leave_one_operator_out`: each operator measured on suites chosen on all the others.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

#: Largest ``k`` :func:`exact` solves by enumeration when scipy is missing.
ENUMERATE_MAX_K = 2
#: Most input sets :func:`exact` enumerates (``solver="auto"``) before it hands a problem to the ILP.
ENUMERATE_LIMIT = 20000
#: Tie-breaks among the suites that kill the most mutants: ``pooled`` (:func:`role_credit` over every
#: problem's mutants, then the problem's own) or ``local`` (the problem's own mutants alone).
TIE_BREAKS = ("pooled", "local")
#: Salts of the operator splits :func:`held_out` measures, each in both directions ("suites" first:
#: the split reported before there were several).
SPLIT_SALTS = ("suites", "a", "b", "c", "d", "e", "f", "g", "h", "i")
#: An input is *sharp* where its error bound (the subject record's ``clean_bounds``:
#: rms(allowed) / rms(reference), :func:`~.worker.input_bounds`) is at most this many times the
#: problem's tightest eligible one (:func:`_sharp`: an input without a recorded bound is sharp only
#: where no input of its problem has one). Measured on the CPU
#: records of 2026-12-05 (``benchmarks/results/2026-12-05-cpu-suite-rule-sharp-input/``): 4 to 30
#: give (nearly) the same suites; 2 is worse, 100 no longer tells an EfficientNet's batch-7 input
#: (bound 0.4% of its output) from its batch-3 ones (19-26%).
SHARP_FACTOR = 10.0


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
    #: Eligible inputs whose bound is within :data:`SHARP_FACTOR` of the tightest (every
    #: eligible input where the record has no bounds: then the rule ignores sharpness).
    sharp: frozenset[str] = frozenset()

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
        out[sid] = ProblemMatrix(sid, rec.get("problem", sid), rec["suite_inputs"], eligible, bad,
                                 sharp=_sharp(eligible, rec.get("clean_bounds")))
    for mid, r in mutants.items():
        pm = out.get(r.get("subject"))
        if pm is None or r.get("outcome") not in ("killed", "survived") or "inputs" not in r:
            continue
        pm.kills[mid] = frozenset(lab for lab, k in r["inputs"].items() if k == 1 and lab in pm.eligible)
        pm.operator[mid] = r.get("operator", "?")
    return out


def _sharp(eligible: list[str], bounds: dict[str, float] | None) -> frozenset[str]:
    """The eligible inputs within :data:`SHARP_FACTOR` of the tightest recorded bound. Where no
    input of the problem has a recorded bound (judged exactly, no derived model, or records from
    before bounds were kept) every input is sharp: nothing to compare. Where some have one, an
    input without is not sharp: the derived model bounds none of its outputs, as where its
    reference is not finite (KernelBench's ``98_KLDivLoss`` on any input but ``rand``: the log
    of negative "probabilities"), and such an input can hardly tell a fault from the clean output."""
    recorded = {lab: bounds[lab] for lab in eligible if bounds and lab in bounds}
    if not recorded:
        return frozenset(eligible)
    tightest = min(recorded.values())
    return frozenset(lab for lab, b in recorded.items() if b <= SHARP_FACTOR * tightest)


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


#: The composite value kind (:data:`kernelaudit.zoo.oracles.values.STRATA`, named here so that
#: reading a campaign store needs no torch): among sets killing as many training mutants the
#: pooled rule takes one that holds such an input, which carries every value kind (then the
#: rest of :func:`exact`'s order).
STRATA_KIND = "strata"
#: Value kinds from the most general draw to the most special: among suites that kill as many
#: mutants, the one of more general inputs is chosen (unlisted kinds, the adversarial ones, last).
KIND_ORDER = ("normal", "rand", "mixed", "large", "negative", "small")


def strength(pm: ProblemMatrix, killable: list[str], k: int) -> dict[str, int]:
    """Each input's score among equally killing suites from the problem's own mutants: the mutants of
    ``killable`` it kills alone first, then the generality of its value kind (:data:`KIND_ORDER`).
    Alone (``tie_break="local"``) the rule of the 2026-12-04 corpus campaign; after the pooled
    :func:`role_credit` it only orders suites whose roles carry as much credit."""
    kinds = {i["label"]: i.get("kind", "") for i in pm.inputs}
    span = len(KIND_ORDER) + 1
    step = k * span + 1  # one more mutant killed alone outweighs any difference of kinds in k inputs
    out = {}
    for lab in pm.eligible:
        kind = kinds.get(lab, "")
        rank = span - 1 - KIND_ORDER.index(kind) if kind in KIND_ORDER else 0
        out[lab] = sum(lab in pm.kills[m] for m in killable) * step + rank
    return out


def _input_spec(pm: ProblemMatrix, label: str) -> dict[str, Any]:
    """The candidate input ``label`` of the problem as the campaign recorded it ({} if none)."""
    return next((i for i in pm.inputs if i.get("label") == label), {})


def input_role(pm: ProblemMatrix, label: str) -> tuple[str, str]:
    """``(value kind, "own" | "boundary")``: an input is at the problem's own shape (that of its first
    candidate input, :func:`kernelaudit.zoo.oracles.suite.candidate_specs`) or at a boundary shape.
    What an input of one problem has in common with inputs of the others."""
    spec = _input_spec(pm, label)
    own = pm.inputs[0].get("shapes") if pm.inputs else None
    return spec.get("kind", ""), "own" if spec.get("shapes") == own else "boundary"


def input_size(pm: ProblemMatrix, label: str) -> int:
    """The product of an input's shape constants: how large an input is, to compare with the others
    of its problem (a larger one runs more programs and more loop iterations of a kernel)."""
    spec = _input_spec(pm, label)
    return math.prod(max(1, int(v)) for v in (spec.get("shapes") or {}).values())


def input_shapes(pm: ProblemMatrix, label: str) -> tuple[tuple[str, int], ...]:
    """An input's shape constants, as a key: two inputs at one shape run the same programs and
    loop bounds, so a suite spanning two shapes reaches more of a kernel's tails."""
    spec = _input_spec(pm, label)
    return tuple(sorted((str(k), int(v)) for k, v in (spec.get("shapes") or {}).items()))


def role_credit(ms: dict[str, ProblemMatrix], mutants: dict[str, list[str]] | None = None
                ) -> dict[tuple[str, str], float]:
    """Each input role's (:func:`input_role`) *unique-kill credit*, pooled over every problem: a killable
    mutant killed by ``n`` eligible inputs gives ``1 / n`` to the role of each (a mutant every input
    kills says nothing about which input to take; one input alone kills gives that input's role a
    whole point). ``mutants``: subject -> the mutant ids to count (default every mutant); a subject
    left out counts none."""
    out: dict[tuple[str, str], float] = defaultdict(float)
    for sid, pm in ms.items():
        ids = None if mutants is None else mutants.get(sid, [])
        roles = {lab: input_role(pm, lab) for lab in pm.eligible}
        for m in pm.killable(ids):
            killers = pm.kills[m]
            for lab in killers:
                out[roles[lab]] += 1 / len(killers)
    return dict(out)


def exact(pm: ProblemMatrix, k: int, mutants: list[str] | None = None, *, solver: str = "auto",
          credit: dict[tuple[str, str], float] | None = None) -> list[str]:
    """The set of at most ``k`` inputs killing the most mutants (``solver``: auto, milp or enumerate).

    Among sets killing as many, with ``credit`` (:func:`role_credit`, pooled over problems: the
    ``pooled`` rule): one that holds a ``strata`` input where one can; then one spanning the most
    distinct shapes (:func:`input_shapes`); then one holding a sharp input (``ProblemMatrix.sharp``:
    an error bound within :data:`SHARP_FACTOR` of the problem's tightest); then the greatest
    :func:`strength` (its inputs' own kills,
    then the generality of their value kinds: inputs that each kill much are the ones whose kills
    carry over to faults of other operators); then one whose largest input (:func:`input_size`) is
    as large as can be; then the one whose distinct input roles carry the most credit (a second
    input of one role adds none); then (enumeration) the earliest in candidate order; a slot the
    mutants leave free still goes by these (``k`` inputs whenever ``k`` are eligible). Without
    ``credit``: the greatest :func:`strength`, useful inputs only (the ``local`` rule).

    Strength and shapes before size were measured on held-out operator splits (k = 2, worst of 20 /
    worst of 10 confirmation splits): corpus 99.34 / 99.23% -> 99.50 / 99.43%, levels 1-2 99.51 /
    99.59% -> 99.80 / 99.80%, the H200 records of 2026-12-05 97.37 / 98.46% -> 97.61 / 98.64%
    (``benchmarks/results/2026-12-05-cpu-suite-rule-strength-first/``). The sharp input after
    shapes: levels 1-2 with level 3's six hardest subjects 98.96 / 99.10% -> 99.51 / 99.55%, those
    six alone 84.95 / 86.24% -> 94.17 / 93.48%, levels 1-2 alone and the corpus unchanged
    (``benchmarks/results/2026-12-05-cpu-suite-rule-sharp-input/``)."""
    from ...errors import check_choice

    check_choice("solver", solver, ("auto", "milp", "enumerate"))
    killable = pm.killable(mutants)
    if k <= 0:
        return []
    if credit is not None:
        return _exact_pooled(pm, k, killable, credit, solver)
    if not killable:
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


def _exact_pooled(pm: ProblemMatrix, k: int, killable: list[str], credit: dict[tuple[str, str], float],
                  solver: str) -> list[str]:
    cands = list(pm.eligible)
    if len(cands) <= k:
        return cands
    score = strength(pm, killable, k)
    role = {lab: input_role(pm, lab) for lab in cands}
    size = {lab: input_size(pm, lab) for lab in cands}
    shape = {lab: input_shapes(pm, lab) for lab in cands}
    args = (pm, k, killable, cands, credit, role, score, size, shape)
    if solver == "enumerate" or (solver == "auto" and math.comb(len(cands), k) <= ENUMERATE_LIMIT):
        return _enumerate_pooled(*args)
    try:
        return _milp_pooled(*args)
    except ImportError:
        if solver == "milp" or k > ENUMERATE_MAX_K:
            raise
        return _enumerate_pooled(*args)


def _enumerate_pooled(pm: ProblemMatrix, k: int, killable: list[str], cands: list[str],
                      credit: dict[tuple[str, str], float], role: dict[str, tuple[str, str]],
                      score: dict[str, int], size: dict[str, int], shape: dict[str, tuple]) -> list[str]:
    bit = {m: 1 << i for i, m in enumerate(killable)}
    mask = {lab: sum(b for m, b in bit.items() if lab in pm.kills[m]) for lab in cands}
    best: tuple[Any, tuple[str, ...]] = ((-1,), ())
    for combo in itertools.combinations(cands, k):  # candidate order: the first of equals wins
        hit = 0
        for lab in combo:
            hit |= mask[lab]
        got = (hit.bit_count(), any(role[lab][0] == STRATA_KIND for lab in combo), len({shape[lab] for lab in combo}),
               any(lab in pm.sharp for lab in combo), sum(score[lab] for lab in combo), max(size[lab] for lab in combo),
               round(sum(credit.get(r, 0.0) for r in {role[lab] for lab in combo}), 9))
        if got > best[0]:
            best = (got, combo)
    return list(best[1])


def _milp_pooled(pm: ProblemMatrix, k: int, killable: list[str], cands: list[str],
                 credit: dict[tuple[str, str], float], role: dict[str, tuple[str, str]],
                 score: dict[str, int], size: dict[str, int], shape: dict[str, tuple]) -> list[str]:
    """ILPs solved in turn, each holding what the ones before reached: the most mutants killed; a
    ``strata`` input if any; the most distinct shapes; a sharp input if any; the greatest strength;
    the largest input as large as can be; then the most credit of distinct roles (to six digits).
    Variables: x (input chosen), y (mutant killed), z (role chosen), s (a ``strata`` input chosen), t
    (the input counted as the largest: one, chosen), u (shape spanned), h (a sharp input chosen)."""
    import numpy as np
    from scipy.optimize import Bounds, LinearConstraint, milp

    roles = sorted(set(role.values()))
    shapes = sorted(set(shape.values()))
    n, m, r, q = len(cands), len(killable), len(roles), len(shapes)
    col = {lab: i for i, lab in enumerate(cands)}
    nv = n + m + r + 1 + n + q + 1  # x, y, z, s, t, u, h
    xs, ys, zs, sv, ts, us = 0, n, n + m, n + m + r, n + m + r + 1, n + m + r + 1 + n
    hv = us + q
    rows, lo, hi = [], [], []

    def row(entries: dict[int, float], low: float, high: float) -> None:
        a = np.zeros(nv)
        for j, v in entries.items():
            a[j] += v
        rows.append(a)
        lo.append(low)
        hi.append(high)

    row({xs + i: 1 for i in range(n)}, 0, k)
    for j, mid in enumerate(killable):  # y_m <= sum of x over the inputs killing m
        row({ys + j: 1, **{xs + col[lab]: -1 for lab in pm.kills[mid]}}, -np.inf, 0)
    for j, rl in enumerate(roles):  # z_r <= sum of x over the inputs of role r
        row({zs + j: 1, **{xs + col[lab]: -1 for lab in cands if role[lab] == rl}}, -np.inf, 0)
    for j, sh in enumerate(shapes):  # u_s <= sum of x over the inputs at shape s
        row({us + j: 1, **{xs + col[lab]: -1 for lab in cands if shape[lab] == sh}}, -np.inf, 0)
    row({sv: 1, **{xs + col[lab]: -1 for lab in cands if role[lab][0] == STRATA_KIND}}, -np.inf, 0)
    row({hv: 1, **{xs + col[lab]: -1 for lab in cands if lab in pm.sharp}}, -np.inf, 0)
    for i in range(n):  # t_i <= x_i, at most one t
        row({ts + i: 1, xs + i: -1}, -np.inf, 0)
    row({ts + i: 1 for i in range(n)}, 0, 1)
    ranks = {v: i for i, v in enumerate(sorted(set(size.values())))}
    top = max([credit.get(rl, 0.0) for rl in roles] + [0.0])
    units = [round(1e6 * credit.get(rl, 0.0) / top) if top > 0 else 0 for rl in roles]
    stages = [{ys + j: 1.0 for j in range(m)}, {sv: 1.0}, {us + j: 1.0 for j in range(q)}, {hv: 1.0},
              {xs + col[lab]: float(score[lab]) for lab in cands},
              {ts + col[lab]: float(ranks[size[lab]]) for lab in cands},
              {zs + j: float(u) for j, u in enumerate(units)}]
    res = None
    for gain in stages:
        c = np.zeros(nv)
        for j, v in gain.items():
            c[j] = -v
        res = milp(c, constraints=[LinearConstraint(np.array(rows), np.array(lo), np.array(hi))],
                   integrality=np.ones(nv), bounds=Bounds(0, 1), options={"mip_rel_gap": 0})
        if res.x is None:
            raise RuntimeError(f"the ILP of {pm.subject} found no solution: {res.message}")
        row(gain, round(-res.fun) - 0.5, np.inf)  # hold it (integer objectives: round, half a unit slack)
    return [cands[i] for i in range(n) if res.x[xs + i] > 0.5]


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


def _picker(method: str, tie_break: str):  # noqa: ANN202
    from ...errors import check_choice

    check_choice("method", method, ("exact", "greedy"))
    check_choice("tie_break", tie_break, TIE_BREAKS)
    if method == "greedy":
        return lambda pm, k, mutants, credit: greedy(pm, k, mutants)
    return lambda pm, k, mutants, credit: exact(pm, k, mutants, credit=credit)


def _measure(ms: dict[str, ProblemMatrix], k: int, pick, tie_break: str, train: set[str],  # noqa: ANN001
             test: set[str]) -> tuple[int, int]:
    """(killed, killable) of the mutants of ``test`` operators by suites chosen on those of ``train``."""
    tr = {sid: [m for m, o in pm.operator.items() if o in train] for sid, pm in ms.items()}
    credit = role_credit(ms, tr) if tie_break == "pooled" else None  # from the training mutants only
    killed = killable = 0
    for sid, pm in ms.items():
        te = [m for m, o in pm.operator.items() if o in test]
        if not pm.killable(te):
            continue
        chosen = topped(pm, pick(pm, k, tr[sid], credit), k)
        killed += pm.covered(chosen, te)
        killable += len(pm.killable(te))
    return killed, killable


def held_out(ms: dict[str, ProblemMatrix], k: int, *, method: str = "greedy",
             salts: tuple[str, ...] | list[str] = SPLIT_SALTS, tie_break: str = "pooled") -> dict[str, Any]:
    """Suites chosen on one half of the operators' mutants, measured on the other half's killable mutants.

    Per salt of ``salts`` one split (:func:`operator_split`), measured in both directions: ``splits``
    lists each (``direction`` "1->2": chosen on the first half, measured on the second) with its
    ``killed`` / ``killable`` (the test half's mutants some eligible input kills) and ``rate``;
    ``min_rate`` / ``min_split``: the worst of them; ``all_*``: every split pooled. ``killed``,
    ``killable``, ``rate`` and ``operators``: the first salt's split, both directions pooled (the
    figure reported before there were several splits)."""
    pick = _picker(method, tie_break)
    ops = sorted({o for pm in ms.values() for o in pm.operator.values()})
    splits = []
    halves = []
    for salt in salts:
        a, b = operator_split(ops, salt)
        halves.append((a, b))
        for direction, train, test in (("1->2", a, b), ("2->1", b, a)):
            killed, killable = _measure(ms, k, pick, tie_break, train, test)
            splits.append({"salt": salt, "direction": direction, "killed": killed, "killable": killable,
                           "rate": killed / killable if killable else None})
    first = splits[:2]
    killed, killable = sum(s["killed"] for s in first), sum(s["killable"] for s in first)
    rated = [s for s in splits if s["rate"] is not None]
    worst = min(rated, key=lambda s: s["rate"]) if rated else None
    all_killed, all_killable = sum(s["killed"] for s in splits), sum(s["killable"] for s in splits)
    return {"k": k, "method": method, "tie_break": tie_break if method == "exact" else None,
            "killed": killed, "killable": killable, "rate": killed / killable if killable else None,
            "operators": [sorted(halves[0][0]), sorted(halves[0][1])] if halves else [[], []],
            "splits": splits, "min_rate": worst["rate"] if worst else None,
            "min_split": f"{worst['salt']} {worst['direction']}" if worst else None,
            "all_killed": all_killed, "all_killable": all_killable,
            "all_rate": all_killed / all_killable if all_killable else None}


def leave_one_operator_out(ms: dict[str, ProblemMatrix], k: int, *, method: str = "exact",
                           tie_break: str = "pooled") -> dict[str, Any]:
    """Each operator's killable mutants measured on suites chosen on the mutants of every other operator
    (the pooled credit too): how a suite chosen on a whole campaign fares on one more operator.
    ``operators``: operator -> [killed, killable]."""
    pick = _picker(method, tie_break)
    ops = sorted({o for pm in ms.values() for o in pm.operator.values()})
    per: dict[str, list[int]] = {}
    for op in ops:
        killed, killable = _measure(ms, k, pick, tie_break, set(ops) - {op}, {op})
        if killable:
            per[op] = [killed, killable]
    killed, killable = sum(v[0] for v in per.values()), sum(v[1] for v in per.values())
    return {"k": k, "method": method, "tie_break": tie_break if method == "exact" else None,
            "killed": killed, "killable": killable, "rate": killed / killable if killable else None,
            "operators": per}


def choose(ms: dict[str, ProblemMatrix], k: int, *, method: str = "exact", tie_break: str = "pooled"
           ) -> dict[str, list[str]]:
    """subject -> chosen input labels (the suite of each problem; ``pooled``: credit from every mutant)."""
    pick = _picker(method, tie_break)
    credit = role_credit(ms) if tie_break == "pooled" else None
    return {sid: pick(pm, k, None, credit) for sid, pm in ms.items()}


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
                         # k inputs, so that a problem with few killable mutants still gets a suite that
                         # judges something (exact: the slots its mutants leave free go to inputs the
                         # pooled credit favours; greedy: topped up in candidate order)
                         "inputs": [specs[lab] for lab in topped(pm, chosen[sid], k)]}
    write_suite_file(Path(out), problems, k=k, source=source)
    return Path(out), len(problems)
