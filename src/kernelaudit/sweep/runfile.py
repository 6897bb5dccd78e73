"""A run store's files and the one reader of its verdict lines.

``manifest.json`` (versions, device, thresholds, tolerances), ``verdicts.jsonl`` (one
JSON object a line, appended and fsynced per case) and, once a crash has torn a line,
``verdicts.torn.jsonl`` (what was set aside). :class:`~kernelaudit.sweep.store.RunStore`
(the sweep) and :func:`~kernelaudit.sweep.report.load_run` (the report) both read
verdicts through :func:`read_verdict_lines`, so they agree on what a store holds.
Imports nothing but the standard library: a report can read a store copied from
another machine without the code that ran it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

MANIFEST = "manifest.json"
VERDICTS = "verdicts.jsonl"
#: Lines set aside because they did not parse (a crash mid-write), with their line number.
TORN = "verdicts.torn.jsonl"


def read_verdict_lines(path: Path) -> tuple[list[tuple[int, Any]], list[tuple[int, str]]]:
    """(parsed, torn) for the verdict file at ``path``: every non-blank line that parses,
    with its 1-based line number, and every one that does not (a process killed
    mid-write leaves its last line cut short; a store resumed by an older kernelaudit
    may have appended after it). A missing file reads as empty."""
    parsed: list[tuple[int, Any]] = []
    torn: list[tuple[int, str]] = []
    if not path.exists():
        return parsed, torn
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            parsed.append((n, json.loads(line)))
        except json.JSONDecodeError:
            torn.append((n, line))
    return parsed, torn


def set_aside_torn(run_dir: Path) -> int:
    """Move every torn line of ``run_dir``'s verdict file to :data:`TORN` (appended, as
    ``{"line": n, "text": ...}``) and rewrite the verdict file without them, atomically,
    ending in a newline so the next record starts on a line of its own. Returns how
    many lines were set aside (0: the file is left untouched)."""
    path = Path(run_dir) / VERDICTS
    if not path.exists():
        return 0
    text = path.read_text(encoding="utf-8")
    parsed, torn = read_verdict_lines(path)
    if not torn and (not text or text.endswith("\n")):
        return 0
    with open(Path(run_dir) / TORN, "a", encoding="utf-8") as f:
        for n, line in torn:
            f.write(json.dumps({"line": n, "text": line}) + "\n")
    tmp = path.with_suffix(".jsonl.tmp")
    tmp.write_text("".join(json.dumps(obj) + "\n" for _, obj in parsed), encoding="utf-8")
    os.replace(tmp, path)
    return len(torn)


def torn_count(run_dir: Path) -> int:
    """Lines set aside so far in ``run_dir`` (0 when none)."""
    p = Path(run_dir) / TORN
    return sum(1 for line in p.read_text(encoding="utf-8").splitlines() if line.strip()) if p.exists() else 0
