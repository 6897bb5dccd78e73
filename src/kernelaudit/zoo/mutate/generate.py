"""Mutants with stable ids: ``<subject>:<operator>:<site>``, enumerated and materialised.

Enumeration counts sites only (one walk of a subject's scope per operator); a mutant's
source is produced when it runs. The id names the subject, the operator and the n-th
site of that operator in the subject's scope, so the same subject source always gives
the same ids (the store records each subject's source digest).

A worker builds a subject's :class:`SiteTable` once (one walk): every site's lines and
its text edit, so a mutant's lines are known without producing it, and producing it is a
one-line splice rather than a rewrite and print of the whole tree.
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


class SiteTable:
    """Every site of a subject as a text edit, from one walk of its tree (:func:`.cst_sites.site_edits`).

    What a worker needs per mutant without producing it: the lines the mutation touches
    (for the coverage test), and the mutant's source by splicing one line of text
    (microseconds) instead of rewriting and printing the whole tree (about 0.2 s for a
    corpus subject). Sites it cannot splice exactly fall back to :func:`materialise_slow`.
    """

    def __init__(self, subject: Subject, operators: Sequence[Operator] = OPERATORS) -> None:
        from .cst_sites import site_edits

        self.subject = subject
        rows = site_edits(subject.tree, [(op.node_types, op.applies, op.rewrite) for op in operators], subject.scope)
        self.edits = {op.name: row for op, row in zip(operators, rows)}
        self.spliced = subject.tree.code == subject.source

    def touched_lines(self, mutant: Mutant) -> tuple[int, ...] | None:
        """The source lines the mutant's node spans (a superset of the lines it changes); None: no such site."""
        row = self.edits.get(mutant.operator)
        if row is None or not 0 <= mutant.site < len(row):
            return None
        return row[mutant.site].lines

    def materialise(self, mutant: Mutant) -> Materialised:
        """The mutant's program, spliced where exact, else :func:`materialise_slow` (same result)."""
        row = self.edits.get(mutant.operator)
        if not self.spliced or row is None or not 0 <= mutant.site < len(row) or row[mutant.site].new is None:
            return materialise_slow(self.subject, mutant)
        e = row[mutant.site]
        src = self.subject.source
        return _diffed(src, src[:e.start] + e.new + src[e.end:], e.lines[0])


def materialise(subject: Subject, mutant: Mutant, table: SiteTable | None = None) -> Materialised:
    """The mutant's program (IndexError when the site does not exist in this subject); with the
    subject's ``table``, spliced from its text edit where that is exact."""
    if table is not None:
        return table.materialise(mutant)
    return materialise_slow(subject, mutant)


def _diffed(old: str, new: str, line: int) -> Materialised:
    """A one-line splice at 1-based ``line``: the changed line, as :func:`materialise_slow` reports it."""
    a, b = old.splitlines(), new.splitlines()
    if len(a) == len(b) and a[:line - 1] == b[:line - 1] and a[line:] == b[line:]:
        if a[line - 1] == b[line - 1]:
            return Materialised(new, (), "", "")
        return Materialised(new, (line,), a[line - 1].strip()[:300], b[line - 1].strip()[:300])
    return _diff(old, new)


def materialise_slow(subject: Subject, mutant: Mutant) -> Materialised:
    """The mutant's program by rewriting the subject's tree at the site and printing it whole."""
    op = OPERATORS_BY_NAME[mutant.operator]
    return _diff(subject.source, op.apply(subject.tree, mutant.site, subject.scope).code)


def _diff(old: str, source: str) -> Materialised:
    a, b = old.splitlines(), source.splitlines()
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
