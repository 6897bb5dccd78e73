"""Verdicts: what an oracle says about one result, with the evidence.

A verdict is one of four statuses plus evidence that explains it without the reader
opening any other file: the metric and its tolerance, the wrong batches (first, last,
count) and the first bad flat index as a Python int (indexes pass 2^32).
"""

from __future__ import annotations

import enum
import math
from dataclasses import asdict, dataclass, field
from typing import Any


class Status(str, enum.Enum):
    """The four classes of outcome. Ordered by severity for :func:`worst`."""

    OK = "ok"
    SKIPPED = "skipped"
    WRONG = "wrong"
    ERROR = "error"

    def __str__(self) -> str:
        return self.value


#: How severe a status is (the order of :func:`worst`).
SEVERITY = {Status.OK: 0, Status.SKIPPED: 1, Status.WRONG: 2, Status.ERROR: 3}


@dataclass(frozen=True)
class BadBatches:
    """Which batches (leading indexes) of an output were wrong."""

    first: int
    last: int
    count: int

    def __str__(self) -> str:
        if self.count == 1:
            return f"batch {self.first}"
        return f"{self.count} batches in [{self.first}, {self.last}]"


@dataclass(frozen=True)
class Verdict:
    """An oracle's judgement of one result.

    ``metric``/``value``/``tolerance`` name the measurement that decided it;
    ``bad_batches`` and ``first_bad_index`` locate a wrong answer; ``message`` says why
    in a sentence (an exception's text for ``error``, the bytes needed for ``skipped``).
    ``details`` holds extra evidence (per-output verdicts, spot checks, ...).
    """

    status: Status
    metric: str | None = None
    value: float | None = None
    tolerance: float | None = None
    bad_batches: BadBatches | None = None
    first_bad_index: int | None = None
    message: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    # -- construction helpers -------------------------------------------------
    @classmethod
    def passed(cls, metric: str, value: float, tolerance: float, **details: Any) -> "Verdict":
        return cls(Status.OK, metric, value, tolerance, details=details)

    @classmethod
    def error(cls, message: str, **details: Any) -> "Verdict":
        return cls(Status.ERROR, message=message, details=details)

    @classmethod
    def skipped(cls, message: str, **details: Any) -> "Verdict":
        return cls(Status.SKIPPED, message=message, details=details)

    # -- presentation ---------------------------------------------------------
    def explain(self) -> str:
        """One line a human can act on."""
        parts = [self.status.value]
        if self.metric is not None and self.value is not None:
            cmp = ">" if self.status is Status.WRONG else "<="
            parts.append(f"{self.metric}={_fmt(self.value)} {cmp} tol={_fmt(self.tolerance)}")
        if self.bad_batches is not None:
            parts.append(str(self.bad_batches))
        if self.first_bad_index is not None:
            parts.append(f"first bad flat index {self.first_bad_index}")
        if self.message:
            parts.append(self.message)
        return "; ".join(parts)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["status"] = self.status.value
        if d["value"] is not None and not math.isfinite(d["value"]):
            d["value"] = str(d["value"])  # JSON has no nan/inf
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Verdict":
        d = dict(d)
        d["status"] = Status(d["status"])
        if d.get("bad_batches") is not None:
            d["bad_batches"] = BadBatches(**d["bad_batches"])
        if isinstance(d.get("value"), str):
            d["value"] = float(d["value"])
        return cls(**d)


def worst(verdicts: "list[Verdict]") -> Verdict:
    """The most severe verdict of a list (error > wrong > skipped > ok); first wins ties."""
    if not verdicts:
        raise ValueError("worst() of no verdicts")
    return max(verdicts, key=lambda v: SEVERITY[v.status])


def _fmt(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.3g}"
