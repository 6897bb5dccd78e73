"""Mutants with stable ids: ``<subject>:<operator>:<site>``, enumerated and materialised.

Enumeration counts sites only (one walk of a subject's scope per operator); a mutant's
source is produced when it runs. The id names the subject, the operator and the n-th
site of that operator in the subject's scope, so the same subject source always gives
the same ids (the store records each subject's source digest).
"""

from __future__ import annotations

import difflib
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from .operators import OPERATORS, OPERATORS_BY_NAME, Operator
from .subjects import Subject


@dataclass(frozen=True)
class Mutant:
    """One mutant: operator ``operator`` applied at site ``site`` of subject ``subject``."""

    subject: str
    operator: str
    site: int

    @property
    def id(self) -> str:
        return f"{self.subject}:{self.operator}:{self.site}"

    @property
    def family(self) -> str:
        return OPERATORS_BY_NAME[self.operator].family

    @classmethod
    def parse(cls, mutant_id: str) -> "Mutant":
        subject, operator, site = mutant_id.rsplit(":", 2)
        return cls(subject, operator, int(site))


def enumerate_mutants(subjects: Sequence[Subject], operators: Sequence[Operator] = OPERATORS) -> Iterator[Mutant]:
    """Every mutant of every subject, subject by subject, operators in table order, sites in order."""
    from .cst_sites import count_sites_many

    for s in subjects:
        counts = count_sites_many(s.tree, [(op.node_types, op.applies) for op in operators], s.scope)
        for op, n in zip(operators, counts):
            for site in range(n):
                yield Mutant(s.id, op.name, site)


@dataclass(frozen=True)
class Materialised:
    """A mutant's source and where it differs from its subject (1-based lines, and the changed text)."""

    source: str
    lines: tuple[int, ...]
    before: str
    after: str


def materialise(subject: Subject, mutant: Mutant) -> Materialised:
    """The mutant's program (IndexError when the site does not exist in this subject)."""
    op = OPERATORS_BY_NAME[mutant.operator]
    source = op.apply(subject.tree, mutant.site, subject.scope).code
    a, b = subject.source.splitlines(), source.splitlines()
    lines, old, new = [], [], []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if tag != "equal":
            lines += list(range(i1 + 1, max(i2, i1 + 1) + 1))
            old += a[i1:i2]
            new += b[j1:j2]
    return Materialised(source, tuple(lines), " / ".join(x.strip() for x in old)[:300],
                        " / ".join(x.strip() for x in new)[:300])


def count_by(mutants: Sequence[Mutant], key: str) -> Counter:
    """Counts of mutants by ``family``, ``operator`` or ``subject``."""
    return Counter(getattr(m, key) for m in mutants)
