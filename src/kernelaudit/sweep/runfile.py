"""A run store's files and the one reader of its verdict lines.

``manifest.json`` (versions, device, thresholds, tolerances), ``verdicts.jsonl`` (one
JSON object a line, appended and fsynced per case) and, once a crash has torn a line,
``verdicts.torn.jsonl`` (what was set aside). :class:`~kernelaudit.sweep.store.RunStore`
(the sweep) and :func:`~kernelaudit.sweep.report.load_run` (the report) both read
verdicts through :func:`read_verdict_lines`, so they agree on what a store holds.
Imports nothing but the standard library and the core's
:mod:`kernelaudit.jsonstore` (the crash-safe JSON rules every store shares): a report
can read a store copied from another machine without the code that ran it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..jsonstore import count_lines, read_jsonl
from ..jsonstore import set_aside_torn as _set_aside_torn

MANIFEST = "manifest.json"
VERDICTS = "verdicts.jsonl"
#: Lines set aside because they did not parse (a crash mid-write), with their line number.
TORN = "verdicts.torn.jsonl"


def read_verdict_lines(path: Path) -> tuple[list[tuple[int, Any]], list[tuple[int, str]]]:
    """(parsed, torn) for the verdict file at ``path``: every non-blank line that parses,
    with its 1-based line number, and every one that does not (a process killed
    mid-write leaves its last line cut short; a store resumed by an older kernelaudit
    may have appended after it). A missing file reads as empty."""
    return read_jsonl(path)


def set_aside_torn(run_dir: Path) -> int:
    """Move every torn line of ``run_dir``'s verdict file to :data:`TORN` (appended, as
    ``{"line": n, "text": ...}``) and rewrite the verdict file without them, atomically,
    ending in a newline so the next record starts on a line of its own. Returns how
    many lines were set aside (0: the file is left untouched)."""
    return _set_aside_torn(Path(run_dir) / VERDICTS, Path(run_dir) / TORN)


def torn_count(run_dir: Path) -> int:
    """Lines set aside so far in ``run_dir`` (0 when none)."""
    return count_lines(Path(run_dir) / TORN)


#: Statuses that judged the case (a verdict on the op, not a note that it did not run).
JUDGED = ("ok", "wrong", "error")


def not_run(verdict: dict[str, Any]) -> bool:
    """A skip that says the case did not run here, not what the op does: too little
    memory (the plan's skip, or an allocation that failed despite it) or held back
    after a case of its op timed out."""
    d = verdict.get("details") or {}
    return verdict.get("status") == "skipped" and bool(
        "needed_bytes" in d or d.get("out_of_memory") or d.get("after_timeout"))


def judged(verdict: dict[str, Any]) -> bool:
    """Whether ``verdict`` judged the op (:data:`JUDGED`), a timeout aside: a case killed
    at its time limit says the op did not finish there, not what it gives."""
    return verdict.get("status") in JUDGED and not (verdict.get("details") or {}).get("timed_out")


def supersedes(later: dict[str, Any], earlier: dict[str, Any]) -> bool:
    """Whether record ``later`` of a case replaces record ``earlier`` of the same case
    (both ``{"case", "verdict", ...}``): always, but where the later one did not run
    (:func:`not_run`, for example ``--rerun wrong`` resumed on a GPU with less memory)
    and the earlier one judged the op (:func:`judged`). The judged verdict then stands,
    and the skip is kept beside it as ``"not_rerun"`` (its message and time): a finding
    is not lost to a smaller machine. A timeout is no judgement: a case that timed out,
    then under a longer timeout ran out of memory, is the memory skip (a larger GPU
    runs it), not a timeout every slow pass runs again."""
    return not (not_run(later["verdict"]) and judged(earlier["verdict"]))


def kept_over(later: dict[str, Any], earlier: dict[str, Any]) -> dict[str, Any]:
    """``earlier`` with ``later`` (a skip that did not displace it) noted as ``not_rerun``."""
    return {**earlier, "not_rerun": {"message": later["verdict"].get("message"), "recorded": later.get("recorded")}}
