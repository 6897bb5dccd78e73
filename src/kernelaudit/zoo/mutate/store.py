"""The campaign store: a manifest plus an append-only JSONL of records, resumable.

Layout of a campaign directory::

    manifest.json    versions, device, shapes, columns (oracles), operators, subjects and their
                     source digests, the plan, every start and resume
    records.jsonl    one JSON object a line: ``{"type": "subject", ...}`` (clean candidate and
                     forced failure per oracle) and ``{"type": "mutant", ...}`` (outcome and the
                     kill-matrix row: ``oracles`` = {column: killed|survived|unjudged})

Every record is flushed and fsynced as it is written, so an interrupt loses nothing
already judged; a resumed campaign skips every recorded mutant. A torn last line (a
crash mid-write) is ignored on reading and set aside on resume (the rules every store
shares: :mod:`kernelaudit.jsonstore`). Reading needs only the standard library and that
module: a report can be made from a store copied from another machine.
"""

from __future__ import annotations

import datetime as _dt
import threading
from pathlib import Path
from typing import Any

from ...errors import InvalidArgument
from ...jsonstore import append_jsonl, read_json, read_jsonl, set_aside_torn, write_json_atomic

MANIFEST = "manifest.json"
RECORDS = "records.jsonl"
TORN = "records.torn.jsonl"
#: Manifest fields a resumed campaign must share with the one it continues.
MUST_MATCH = ("columns", "device", "small")


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def read_records(path: Path) -> tuple[list[dict[str, Any]], list[tuple[int, str]]]:
    """(records, torn lines with their 1-based numbers) of a records file; missing reads as empty."""
    parsed, torn = read_jsonl(path)
    return [rec for _, rec in parsed], torn


class CampaignStore:
    """One campaign directory: :meth:`create` (new or resumed), :meth:`open` (read), :meth:`append`."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()

    @classmethod
    def create(cls, path: Path, manifest: dict[str, Any], *, resume: bool) -> "CampaignStore":
        """A new store at ``path``, or (``resume``) the existing one, checked to be the same campaign."""
        store = cls(path)
        exists = (store.path / MANIFEST).exists()
        if exists and not resume:
            raise InvalidArgument(f"Cannot have --out={str(path)!r}: it already holds a campaign; pass --resume "
                                  "to continue it or choose another --out")
        if exists:
            old = store.manifest()
            for k in MUST_MATCH:
                if old.get(k) != manifest.get(k):
                    raise InvalidArgument(f"Cannot resume {str(path)!r} with {k}={manifest.get(k)!r}: the campaign "
                                          f"was started with {old.get(k)!r}")
            changed = sorted(s for s, d in manifest.get("subjects", {}).items()
                             if s in old.get("subjects", {}) and old["subjects"][s] != d)
            if changed:
                raise InvalidArgument(f"Cannot resume {str(path)!r}: the source of {', '.join(changed[:5])} changed "
                                      "since the campaign started (mutant ids would name other mutants)")
            store._set_aside_torn()
            old["subjects"] = {**old.get("subjects", {}), **manifest.get("subjects", {})}
            old["operators"] = sorted(set(old.get("operators", [])) | set(manifest.get("operators", [])))
            old.setdefault("resumed", []).append(now())
            old["plan"] = manifest.get("plan", old.get("plan"))
            store.write_manifest(old)
            return store
        store.path.mkdir(parents=True, exist_ok=True)
        store.write_manifest({**manifest, "created": now()})
        (store.path / RECORDS).touch()
        return store

    @classmethod
    def open(cls, path: Path) -> "CampaignStore":
        store = cls(Path(path))
        if not (store.path / MANIFEST).is_file():
            raise InvalidArgument(f"Cannot read campaign {str(path)!r}: no {MANIFEST} there (allowed: a directory "
                                  f"written by `kernelaudit mutate run --out`)")
        return store

    def manifest(self) -> dict[str, Any]:
        return read_json(self.path / MANIFEST)

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        write_json_atomic(self.path / MANIFEST, manifest)

    def records(self) -> list[dict[str, Any]]:
        return read_records(self.path / RECORDS)[0]

    def recorded_mutants(self) -> set[str]:
        return {r["id"] for r in self.records() if r.get("type") == "mutant"}

    def recorded_subjects(self) -> set[str]:
        return {r["subject"] for r in self.records() if r.get("type") == "subject"}

    def append(self, record: dict[str, Any]) -> None:
        """Write one record and make it durable before returning (thread-safe)."""
        with self._lock:
            append_jsonl(self.path / RECORDS, record, sort_keys=True)

    def _set_aside_torn(self) -> int:
        return set_aside_torn(self.path / RECORDS, self.path / TORN, sort_keys=True)
