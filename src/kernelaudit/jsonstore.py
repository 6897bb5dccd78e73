"""JSON files that survive a crash: an atomically replaced document and an append-only JSONL log.

A store (the sweep's run store, the mutation campaign's store) is a directory with a
manifest (one JSON document, rewritten whole) and a log (one JSON object a line,
appended). The rules they share live here:

* :func:`write_json_atomic` writes a temporary file beside the target and renames it
  over the target, so a reader sees the old document or the new one, never half;
* :func:`append_jsonl` flushes and fsyncs each line before returning, so an interrupt
  loses nothing already recorded;
* :func:`read_jsonl` skips blank lines and returns the lines that do not parse apart
  (*torn*: a process killed mid-write leaves its last line cut short);
* :func:`set_aside_torn` moves the torn lines to a side file and rewrites the log
  without them, ending in a newline, so the next record starts on a line of its own.

Shared core: imports the standard library and :mod:`kernelaudit.errors` only, so a
report can read a store copied from another machine without torch.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .errors import InvalidArgument


def read_json(path: Path) -> Any:
    """The JSON document at ``path``; :class:`InvalidArgument` naming the file when it
    does not parse (a missing file raises ``FileNotFoundError`` as usual)."""
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise InvalidArgument(f"Cannot read {path}: {e}") from e


def write_json_atomic(path: Path, obj: Any, *, indent: int | None = 2, sort_keys: bool = True) -> None:
    """Write ``obj`` as JSON to ``path`` atomically: to a temporary file in the same
    directory (named for this process and thread, so concurrent writers never share
    one), then renamed over ``path``."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        tmp.write_text(json.dumps(obj, indent=indent, sort_keys=sort_keys), encoding="utf-8")
        os.replace(tmp, path)  # atomic: never a half-written document
    finally:
        if tmp.exists():  # the write or the rename failed: leave no stray file
            tmp.unlink()


def append_jsonl(path: Path, obj: Any, *, sort_keys: bool = False,
                 default: Callable[[Any], Any] | None = None) -> None:
    """Append ``obj`` as one JSON line to ``path`` and make it durable (flush, fsync)
    before returning. Not locked: a caller that appends from several threads holds its
    own lock."""
    line = json.dumps(obj, sort_keys=sort_keys, default=default) + "\n"
    with open(path, "a", encoding="utf-8") as f:
        f.write(line)
        f.flush()
        os.fsync(f.fileno())


def read_jsonl(path: Path) -> tuple[list[tuple[int, Any]], list[tuple[int, str]]]:
    """(parsed, torn) for the JSONL file at ``path``: every non-blank line that parses,
    with its 1-based line number, and every one that does not. A missing file reads as
    empty."""
    path = Path(path)
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


def set_aside_torn(path: Path, torn_path: Path, *, sort_keys: bool = False) -> int:
    """Move every torn line of the JSONL file ``path`` to ``torn_path`` (appended, as
    ``{"line": n, "text": ...}``) and rewrite ``path`` without them, atomically, ending
    in a newline. The kept records are written again with ``sort_keys`` (as their store
    wrote them). Returns how many lines were set aside (0: ``path`` is left untouched,
    unless its last line lacked only its newline, which is then added)."""
    path, torn_path = Path(path), Path(torn_path)
    if not path.exists():
        return 0
    text = path.read_text(encoding="utf-8")
    parsed, torn = read_jsonl(path)
    if not torn and (not text or text.endswith("\n")):
        return 0
    with open(torn_path, "a", encoding="utf-8") as f:
        for n, line in torn:
            f.write(json.dumps({"line": n, "text": line}) + "\n")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text("".join(json.dumps(obj, sort_keys=sort_keys) + "\n" for _, obj in parsed), encoding="utf-8")
    os.replace(tmp, path)
    return len(torn)


def count_lines(path: Path) -> int:
    """Non-blank lines of the text file at ``path`` (0 when it does not exist)."""
    path = Path(path)
    if not path.exists():
        return 0
    return sum(1 for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
