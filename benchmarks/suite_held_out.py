"""Held-out rate of the minimal suites (issue 17, part 5), per operator split and direction.

From a campaign's records (no device: the per-input kill matrix is in the records)::

    python benchmarks/suite_held_out.py \
        benchmarks/results/2026-12-04-h200-mutate-campaign-l123/records.jsonl.gz \
        benchmarks/results/2026-12-04-cpu-mutate-fork-server/corpus_records.jsonl.gz [--k 2] \
        [--salts suites,a,b] [--confirm] [--out FILE]

Per records file and tie-break (``local``: the problem's own mutants, the rule before;
``pooled``: :func:`~kernelaudit.zoo.mutate.suites.role_credit` over every problem's
training mutants, then the problem's own), the suites of at most ``k`` inputs chosen on
one half of the operators' mutants and measured on the other half's, for every split of
``--salts`` (default :data:`~kernelaudit.zoo.mutate.suites.SPLIT_SALTS`) in both
directions: each rate, the least, and all pooled; and leave one operator out. The
denominator is always the measured half's *killable* mutants: those some eligible input
(one no correct candidate fails) kills alone.

``--confirm`` measures on ten more salts (``confirm-0`` .. ``confirm-9``) that the rule
was not developed on. What limits the rate (``limits``, the pooled rule, the measured
salts): ``tie_bound``, per split the best any rule choosing among the sets that kill the
most training mutants could do (it picks with the measured mutants: no rule can, it is
a bound); ``any_bound``, the best set of ``k`` at all; the missed mutants by how many
eligible inputs kill them, by operator family and by operator.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import itertools
import json
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import emit  # noqa: E402

from kernelaudit.zoo.mutate import suites  # noqa: E402

CONFIRM_SALTS = tuple(f"confirm-{i}" for i in range(10))


def read_records(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


def combined(paths: list[Path]) -> list[dict]:
    """The records of several campaigns as one; a subject found in several keeps the first
    file's records (its subject record and mutants), so no mutant counts twice."""
    out, owner = [], {}
    for path in paths:
        for r in read_records(path):
            sid = r.get("subject")
            if owner.setdefault(sid, path) == path:
                out.append(r)
    return out


def rates(h: dict) -> dict:
    return {"min_rate": h["min_rate"], "min_split": h["min_split"], "all": [h["all_killed"], h["all_killable"]],
            "all_rate": h["all_rate"], "splits": {f"{s['salt']} {s['direction']}": [s["killed"], s["killable"]]
                                                  for s in h["splits"]}}


def limits(ms: dict, records: list[dict], k: int, salts: tuple[str, ...]) -> dict:
    """Bounds and the anatomy of what the pooled rule misses (see the module docstring)."""
    family = {r["operator"]: r.get("family", "?") for r in records if r.get("type") == "mutant" and "operator" in r}
    ops = sorted({o for pm in ms.values() for o in pm.operator.values()})
    tie_bound, any_bound = {}, {}
    by_killers, by_family, by_operator = Counter(), Counter(), Counter()
    no_training = 0
    for salt in salts:
        a, b = suites.operator_split(ops, salt)
        for direction, train, test in (("1->2", a, b), ("2->1", b, a)):
            tr = {sid: [m for m, o in pm.operator.items() if o in train] for sid, pm in ms.items()}
            credit = suites.role_credit(ms, tr)
            tie = best = total = 0
            for sid, pm in ms.items():
                te = [m for m, o in pm.operator.items() if o in test]
                if not pm.killable(te):
                    continue
                total += len(pm.killable(te))
                combos = [list(c) for c in itertools.combinations(pm.eligible, k)] or [list(pm.eligible)]
                scored = [(pm.covered(c, tr[sid]), pm.covered(c, te)) for c in combos]
                top = max(s[0] for s in scored)
                tie += max(s[1] for s in scored if s[0] == top)
                best += max(s[1] for s in scored)
                chosen = set(suites.topped(pm, suites.exact(pm, k, tr[sid], credit=credit), k))
                for m in pm.killable(te):
                    if not pm.kills[m] & chosen:
                        n = len(pm.kills[m])
                        by_killers["1" if n == 1 else "2" if n == 2 else "3+"] += 1
                        by_family[family.get(pm.operator[m], "?")] += 1
                        by_operator[pm.operator[m]] += 1
                        no_training += not pm.killable(tr[sid])
            key = f"{salt} {direction}"
            tie_bound[key], any_bound[key] = [tie, total], [best, total]
    return {"tie_bound_min": min(t / n for t, n in tie_bound.values()),
            "any_bound_min": min(t / n for t, n in any_bound.values()),
            "tie_bound": tie_bound, "any_bound": any_bound,
            "missed_by_killers": dict(by_killers), "missed_by_family": dict(by_family.most_common()),
            "missed_by_operator": dict(by_operator.most_common(15)),
            "missed_in_problems_without_training_mutants": no_training}


def without_kinds(ms: dict, kinds: set[str]) -> dict:
    """The matrices with the inputs of ``kinds`` removed (from the candidates, the kills, the inputs):
    another candidate set measured on the same mutants."""
    if not kinds:
        return ms
    out = {}
    for sid, pm in ms.items():
        drop = {i["label"] for i in pm.inputs if i.get("kind") in kinds}
        out[sid] = dataclasses.replace(
            pm, inputs=[i for i in pm.inputs if i["label"] not in drop],
            eligible=[lab for lab in pm.eligible if lab not in drop],
            ineligible={lab: why for lab, why in pm.ineligible.items() if lab not in drop},
            kills={m: frozenset(k - drop) for m, k in pm.kills.items()})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("records", nargs="+", type=Path, help="records.jsonl[.gz] of campaigns with per-input kills")
    ap.add_argument("--k", type=int, default=2, help="inputs per problem, at most")
    ap.add_argument("--salts", default=",".join(suites.SPLIT_SALTS), help="operator split salts (comma list)")
    ap.add_argument("--confirm", action="store_true", help="also the ten confirmation salts confirm-0..9")
    ap.add_argument("--no-limits", action="store_true", help="skip the bounds and the anatomy of misses")
    ap.add_argument("--drop-kinds", default="", help="comma list of input value kinds left out of the "
                    "candidates (e.g. strata: the campaign's rates as if it had not drawn them)")
    ap.add_argument("--combine", action="store_true", help="judge the record files as one campaign "
                    "(a subject in several: the first file's)")
    ap.add_argument("--ignore-bounds", action="store_true", help="treat every input as sharp (the rule "
                    "before the records carried clean_bounds): both rules measured on the same mutants")
    ap.add_argument("--out", type=Path, help="write the JSON result here too")
    args = ap.parse_args()
    salts = tuple(s for s in args.salts.split(",") if s)
    result = {"k": args.k, "salts": list(salts), "campaigns": {}}
    sets = ([(" + ".join(f"{p.parent.name}/{p.name}" for p in args.records), args.records)] if args.combine
            else [(f"{p.parent.name}/{p.name}", [p]) for p in args.records])
    for label, paths in sets:
        start = time.perf_counter()
        records = combined(paths)
        ms = without_kinds(suites.matrices(records), {k for k in args.drop_kinds.split(",") if k})
        if args.ignore_bounds:
            ms = {sid: dataclasses.replace(pm, sharp=frozenset(pm.eligible)) for sid, pm in ms.items()}
        entry = {"drop_kinds": args.drop_kinds, "ignore_bounds": args.ignore_bounds, "problems": len(ms), "killable": sum(len(pm.killable()) for pm in ms.values())}
        for tb in suites.TIE_BREAKS[::-1]:  # local (before), then pooled
            entry[tb] = rates(suites.held_out(ms, args.k, method="exact", salts=salts, tie_break=tb))
            if args.confirm:
                entry[tb]["confirm"] = rates(suites.held_out(ms, args.k, method="exact", salts=CONFIRM_SALTS,
                                                             tie_break=tb))
            loo = suites.leave_one_operator_out(ms, args.k, tie_break=tb)
            entry[tb]["leave_one_operator_out"] = [loo["killed"], loo["killable"], loo["rate"]]
        chosen = suites.choose(ms, args.k)
        entry["false_rejections"] = len(suites.false_rejections(ms, chosen, records))
        entry["correct_judged"] = suites.correct_judged(records)
        if not args.no_limits:
            entry["limits"] = limits(ms, records, args.k, salts)
        entry["seconds"] = round(time.perf_counter() - start, 1)
        result["campaigns"][label] = entry
        for tb in suites.TIE_BREAKS[::-1]:
            e = entry[tb]
            line = (f"{label} k={args.k} {tb:6s}: min {e['min_rate']:.2%} ({e['min_split']}), "
                    f"all splits {e['all_rate']:.2%}, leave one operator out {e['leave_one_operator_out'][2]:.2%}")
            if "confirm" in e:
                line += f"; confirm salts min {e['confirm']['min_rate']:.2%}, all {e['confirm']['all_rate']:.2%}"
            print(line, file=sys.stderr)
    emit(result, args.out)


if __name__ == "__main__":
    main()
