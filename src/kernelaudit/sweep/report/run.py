"""Reading a run store back: the manifest and the recorded verdicts, typed.

A run store is a directory holding ``manifest.json`` (versions, device, thresholds,
fault model, tolerances, plan) and ``verdicts.jsonl`` (one ``{"case", "verdict",
"elapsed_s", "recorded"}`` object per line). The store module writes it; this module
only reads it, with the json module, so a report never imports the code that ran the
sweep and can read a store copied from another machine.

Reading is forgiving where a crash can leave a mark and strict everywhere else:

* a line that does not parse (the process died mid-write) is dropped, with a note, and
  so is one set aside on resume (:mod:`kernelaudit.sweep.runfile`: one reader for the
  sweep and the report);
* a case recorded twice keeps its last verdict (a resumed run re-judged it), with a
  note. "The same case" is the store's key: id plus seed and scale, so the seeds of one
  id are all kept;
* anything else that is not what the store writes raises :class:`RunStoreError`, whose
  message names the file (and line) to look at.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ...errors import KernelAuditError
from ...verdict import Status, Verdict
from ..runfile import MANIFEST, TORN, VERDICTS, read_verdict_lines, supersedes, torn_count


_VERDICT_FIELDS = {f.name for f in fields(Verdict)}


class RunStoreError(KernelAuditError, ValueError):
    """A run store is missing or not in the format the store module writes."""


@dataclass(frozen=True)
class Device:
    """The device a run judged: ``type`` is cpu, cuda or mps."""

    type: str = "unknown"
    name: str = "unknown"
    memory_bytes: int | None = None

    def __str__(self) -> str:
        mem = f", {self.memory_bytes / 2**30:.0f} GiB" if self.memory_bytes else ""
        return f"{self.name} ({self.type}{mem})"


@dataclass(frozen=True)
class Manifest:
    """The facts a run recorded about itself before judging anything.

    ``raw`` keeps the whole JSON object, so a field added to the store later is still
    shown in the HTML report even before this class learns its name.
    """

    kernelaudit: str = "?"
    torch: str = "?"
    triton: str | None = None
    python: str = "?"
    os: str = "?"
    driver: str | None = None
    device: Device = field(default_factory=Device)
    thresholds: dict[str, int] = field(default_factory=dict)
    fault_model: str = "none"
    tolerances: dict[str, dict[str, float]] = field(default_factory=dict)
    seeds: tuple[int, ...] = ()
    started: str = ""
    argv: tuple[str, ...] = ()
    planned_cases: int | None = None
    #: One entry per sweep invocation on this store (started, ended, wall_s, git,
    #: calibrated, cases_run, completed); older stores have none.
    segments: tuple[dict[str, Any], ...] = ()
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def wall_s(self) -> float | None:
        """Wall time of every sweep invocation on this store, summed (None if unrecorded)."""
        return sum(float(s.get("wall_s") or 0) for s in self.segments) if self.segments else None

    @property
    def scale_bits(self) -> int | None:
        """log2 of the 2^32 threshold this run used (32 on real hardware)."""
        bits = self.thresholds.get("bits")
        return int(bits) if bits is not None else None

    @property
    def date(self) -> str:
        """The day the run started (``YYYY-MM-DD``), or ``?``."""
        return self.started[:10] if self.started else "?"

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Manifest":
        dev = d.get("device") or {}
        plan = d.get("plan") or {}
        return cls(
            kernelaudit=str(d.get("kernelaudit", "?")),
            torch=str(d.get("torch", "?")),
            triton=d.get("triton"),
            python=str(d.get("python", "?")),
            os=str(d.get("os", "?")),
            driver=d.get("driver"),
            device=Device(
                type=str(dev.get("type", "unknown")),
                name=str(dev.get("name", "unknown")),
                memory_bytes=dev.get("memory_bytes"),
            ),
            thresholds=dict(d.get("thresholds") or {}),
            fault_model=str(d.get("fault_model") or "none"),
            tolerances={k: dict(v) if isinstance(v, dict) else {"tolerance": v}
                        for k, v in (d.get("tolerances") or {}).items()},
            seeds=tuple(d.get("seeds") or ()),
            started=str(d.get("started") or ""),
            argv=tuple(str(a) for a in d.get("argv") or ()),
            planned_cases=plan.get("cases"),
            segments=tuple(dict(x) for x in d.get("segments") or ()),
            raw=dict(d),
        )


@dataclass(frozen=True)
class CaseRecord:
    """One judged case: what was run (the case fields the report needs) and the verdict.

    ``size`` is the size label (``2^32-``, ``2^32``, ``2^32+`` ...), ``crossing_numel``
    the element count of the tensor that crosses the threshold; ``key`` is unique in a
    run (id, seed, scale); ``case`` keeps the whole case object as recorded.
    """

    id: str
    key: str
    seed: int | None
    op: str
    family: str
    dtype: str
    layout: str
    series: str
    size: str
    direction: str
    batch: int | None
    shapes: tuple[tuple[int, ...], ...]
    crossing_numel: int | None
    verdict: Verdict
    elapsed_s: float | None = None
    recorded: str = ""
    case: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def axis(self) -> str:
        """The size axis the case crosses (``elements``, ``dim``, ``bytes``, ``attn_batch``)."""
        return str(self.case.get("axis") or "elements")

    @property
    def measure(self) -> int | None:
        """The case's size along its axis (elements, dim size, bytes, batch x heads)."""
        m = self.case.get("measure")
        return int(m) if m is not None else self.crossing_numel

    @property
    def status(self) -> Status:
        return self.verdict.status

    def label(self, *, seed: bool = False) -> str:
        """The case id, with `` seed N`` appended when ``seed`` is asked for."""
        return f"{self.id} seed {self.seed}" if seed and self.seed is not None else self.id

    @property
    def shapes_text(self) -> str:
        """``65537x256x64 @ 65537x64x256`` style: the operand shapes, compact."""
        return " @ ".join("x".join(map(str, s)) for s in self.shapes) or "-"


@dataclass(frozen=True)
class Run:
    """A loaded run store: manifest, one record per case id, and load notes."""

    path: Path
    manifest: Manifest
    records: tuple[CaseRecord, ...]
    notes: tuple[str, ...] = ()

    @property
    def several_seeds(self) -> bool:
        """Whether records differ in seed (then reports show each record's seed)."""
        return len({r.seed for r in self.records}) > 1

    def with_status(self, *statuses: Status) -> list[CaseRecord]:
        """The records whose verdict has one of ``statuses``, in store order."""
        return [r for r in self.records if r.status in statuses]


def load_run(path: str | Path) -> Run:
    """Read the run store at ``path`` (a directory with manifest.json and verdicts.jsonl).

    A store whose manifest exists but that has recorded nothing yet (no verdicts.jsonl)
    loads as a run with no records. Raises :class:`RunStoreError` naming the path when
    the directory or manifest is missing, or a file is not what the store writes.
    """
    root = Path(path)
    if not root.is_dir():
        what = "is not a directory" if root.exists() else "does not exist"
        raise RunStoreError(f"Cannot read run store {root}: it {what}")
    manifest = _read_manifest(root / MANIFEST)
    records, notes = _read_verdicts(root / VERDICTS)
    return Run(path=root, manifest=manifest, records=tuple(records), notes=tuple(notes))


def _read_manifest(path: Path) -> Manifest:
    if not path.is_file():
        raise RunStoreError(f"Cannot read run store {path.parent}: no {MANIFEST} in it")
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise RunStoreError(f"Cannot read {path}: not valid JSON ({e})") from None
    if not isinstance(d, dict):
        raise RunStoreError(f"Cannot read {path}: expected a JSON object, got {type(d).__name__}")
    try:
        return Manifest.from_json(d)
    except (TypeError, ValueError, AttributeError) as e:
        raise RunStoreError(f"Cannot read {path}: unexpected manifest layout ({e})") from None


def _read_verdicts(path: Path) -> tuple[list[CaseRecord], list[str]]:
    if not path.exists():
        return [], [f"no {VERDICTS} yet: nothing recorded"]
    parsed, torn = read_verdict_lines(path)
    by_key: dict[str, CaseRecord] = {}
    raw: dict[str, Any] = {}
    notes: list[str] = []
    repeated = kept = 0
    for lineno, obj in parsed:
        rec = _record(obj, f"{path} line {lineno}")
        if rec.key in by_key:
            repeated += 1
            if not supersedes(obj, raw[rec.key]):
                kept += 1  # a rerun that could not run here (memory) leaves the judged verdict
                continue
        by_key[rec.key], raw[rec.key] = rec, obj  # a resumed run's later verdict replaces the earlier one
    if torn:
        # A crash mid-write leaves a line cut short; its case simply reruns on --resume.
        notes.append(f"{path.name}: {len(torn)} incomplete line(s) (crash mid-write?) ignored, first at line "
                     f"{torn[0][0]}; --resume sets them aside and recomputes their cases")
    aside = torn_count(path.parent)
    if aside:
        notes.append(f"{aside} torn line(s) set aside on resume in {TORN}; their cases were recomputed")
    if repeated:
        notes.append(f"{repeated} record(s) repeat a case already recorded; the last verdict of each is used"
                     + (f", but for {kept} skipped for want of memory or after a timeout, where the earlier "
                        "judged verdict stands" if kept else ""))
    return list(by_key.values()), notes


def _size_label(case: dict[str, Any]) -> str:
    """``2^32+`` from threshold and position, for a case recorded without its label."""
    mark = {"below": "-", "at": "", "above": "+"}.get(case.get("position", ""), "?")
    return f"{case.get('threshold', '?')}{mark}"


def _record(obj: Any, where: str) -> CaseRecord:
    if not isinstance(obj, dict) or not isinstance(obj.get("case"), dict) or not isinstance(obj.get("verdict"), dict):
        raise RunStoreError(f"Cannot read {where}: expected an object with 'case' and 'verdict' objects")
    case, v = obj["case"], obj["verdict"]
    if not isinstance(case.get("id"), str):
        raise RunStoreError(f"Cannot read {where}: the case has no string 'id'")
    try:
        verdict = Verdict.from_json({k: val for k, val in v.items() if k in _VERDICT_FIELDS})
    except (TypeError, ValueError, KeyError) as e:
        raise RunStoreError(f"Cannot read {where}: bad verdict ({e!r})") from None
    def get(name: str, default: Any = None) -> Any:
        # Derived facts (shapes, crossing_numel) may sit in the case or next to it.
        return case[name] if case.get(name) is not None else obj.get(name, default)

    try:
        seed, scale = case.get("seed"), case.get("scale")
        return CaseRecord(
            id=case["id"],
            key=case["id"] + (f"/s{seed}" if seed is not None else "") + (f"/b{scale}" if scale is not None else ""),
            seed=seed,
            op=str(case.get("op", "?")),
            family=str(get("family") or case.get("op", "?")),
            dtype=str(case.get("dtype", "?")),
            layout=str(case.get("layout", "?")),
            series=str(case.get("series", "-")),
            size=str(case.get("size") or _size_label(case)),
            direction=str(case.get("direction", "fwd")),
            batch=case.get("batch"),
            shapes=tuple(tuple(int(n) for n in s) for s in get("shapes") or ()),
            crossing_numel=get("crossing_numel"),
            verdict=verdict,
            elapsed_s=obj.get("elapsed_s"),
            recorded=str(obj.get("recorded") or ""),
            case=case,
        )
    except (TypeError, ValueError) as e:
        raise RunStoreError(f"Cannot read {where}: bad case ({e})") from None
