"""Scores of a campaign: kill rates per oracle and family, miss rates, false rejections.

Read from a store's records alone (standard library). Definitions:

* a mutant is **scored** when its outcome is ``killed`` or ``survived`` (equivalent,
  stillborn, crash, timeout and unjudged mutants are counted apart);
* an oracle judges a subject **validly** when it passes the clean candidate and catches
  the forced failure (``tamper`` and ``static`` look for tricks, not for wrong values:
  for them passing the clean candidate is enough); its kills on other subjects are
  left out of its rates (and the clean rejection is a false rejection);
* **kill rate** of an oracle: killed / (killed + survived) over scored mutants of the
  subjects it judges validly; **miss rate** is one minus it;
* **killable**: killed by at least one oracle of the campaign;
* **false rejections** of an oracle: clean subjects and known-correct variants it rejects.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

#: Oracles that judge how a result was produced, not its values: a forced wrong value is not theirs to catch.
VALUE_BLIND = ("tamper", "static")


@dataclass
class Rate:
    killed: int = 0
    survived: int = 0

    @property
    def scored(self) -> int:
        return self.killed + self.survived

    @property
    def rate(self) -> float | None:
        return self.killed / self.scored if self.scored else None


@dataclass
class Scores:
    columns: list[str]
    outcomes: Counter = field(default_factory=Counter)
    outcomes_by_family: dict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))
    kill: dict[str, Rate] = field(default_factory=dict)
    kill_by_family: dict[str, dict[str, Rate]] = field(default_factory=lambda: defaultdict(dict))
    killable: int = 0
    scored: int = 0
    subjects: int = 0
    subject_errors: dict[str, str] = field(default_factory=dict)
    invalid: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    false_rejections: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    correct_judged: int = 0

    def to_json(self) -> dict[str, Any]:
        def r(x: Rate) -> dict[str, Any]:
            return {"killed": x.killed, "survived": x.survived, "rate": x.rate}

        return {
            "columns": self.columns, "outcomes": dict(self.outcomes), "subjects": self.subjects,
            "scored": self.scored, "killable": self.killable,
            "outcomes_by_family": {f: dict(c) for f, c in self.outcomes_by_family.items()},
            "kill": {c: r(x) for c, x in self.kill.items()},
            "kill_by_family": {f: {c: r(x) for c, x in d.items()} for f, d in self.kill_by_family.items()},
            "subject_errors": self.subject_errors, "invalid_subjects": dict(self.invalid),
            "false_rejections": {c: v for c, v in self.false_rejections.items()},
            "correct_judged": self.correct_judged,
        }


def score(records: list[dict[str, Any]], columns: list[str]) -> Scores:
    """Scores of the records of one campaign (the last record of a mutant or subject wins)."""
    subjects: dict[str, dict[str, Any]] = {}
    mutants: dict[str, dict[str, Any]] = {}
    for rec in records:
        if rec.get("type") == "subject":
            subjects[rec["subject"]] = rec
        elif rec.get("type") == "mutant":
            mutants[rec["id"]] = rec
    s = Scores(list(columns))
    s.subjects = len(subjects)
    valid: dict[str, set[str]] = {c: set() for c in columns}
    for sid, rec in subjects.items():
        if "error" in rec:
            s.subject_errors[sid] = rec["error"]
            continue
        s.correct_judged += 1 + len(rec.get("variants", {}))
        for c in columns:
            clean = rec.get("clean", {}).get(c)
            forced = rec.get("forced", {}).get(c)
            if clean == "killed":
                s.false_rejections[c].append(sid)
            for name, v in rec.get("variants", {}).items():
                if v.get(c) == "killed":
                    s.false_rejections[c].append(f"{sid} variant {name}")
            if clean == "survived" and (forced == "killed" or c in VALUE_BLIND):
                valid[c].add(sid)
            else:
                s.invalid[c].append(f"{sid} (clean {clean}, forced failure {forced})")
    for c in columns:
        s.kill[c] = Rate()
    for rec in mutants.values():
        fam = rec.get("family", "?")
        s.outcomes[rec["outcome"]] += 1
        s.outcomes_by_family[fam][rec["outcome"]] += 1
        if rec["outcome"] not in ("killed", "survived"):
            continue
        s.scored += 1
        if rec["outcome"] == "killed":
            s.killable += 1
        for c in columns:
            o = rec.get("oracles", {}).get(c)
            if rec["subject"] not in valid[c] or o not in ("killed", "survived"):
                continue
            fam_rate = s.kill_by_family[fam].setdefault(c, Rate())
            for rate in (s.kill[c], fam_rate):
                if o == "killed":
                    rate.killed += 1
                else:
                    rate.survived += 1
    return s
