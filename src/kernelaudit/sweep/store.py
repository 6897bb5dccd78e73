"""The run store: an append-only JSONL of verdicts plus a manifest.

Layout of a run directory::

    manifest.json     versions, device, thresholds, fault model, tolerances, seeds, plan
    verdicts.jsonl    one {"case", "verdict", "elapsed_s", "recorded"} object per line; a case
                      one worker ran alone adds "wall_s" (through the pool) and "worker_s"

Every verdict is flushed and fsynced as it is recorded, so a crash or an interrupt
loses nothing already judged; ``--resume`` skips every recorded case. A torn line
(the process died mid-write) is ignored on reading, and set aside on resume
(:func:`~kernelaudit.sweep.runfile.set_aside_torn`), so its case is recomputed and the
next record starts on a line of its own; the report says how many were.

Calibrated tolerances (one per key, thousands in a full grid) are deferred manifest
updates: merged in memory and written at most every :data:`MANIFEST_DEFER_S` seconds
and with any other write of the manifest (the run's segment is one, interrupts
included). Rewriting the whole manifest per key made calibration quadratic (40 s of the
parent's time for the 4,062 keys of the full grid on a 2-core CPU). A hard kill loses at
most the last few seconds of tolerances, which ``--resume`` calibrates again.
"""

from __future__ import annotations

import datetime as _dt
import platform
import subprocess
import time
from pathlib import Path
from typing import Any, Iterator

from .cases import Case
from ..errors import InvalidArgument
from ..jsonstore import append_jsonl, read_json, write_json_atomic
from ..provenance import git_sha, source_digest
from ..verdict import Verdict
from .runfile import MANIFEST, VERDICTS, kept_over, read_verdict_lines, set_aside_torn, supersedes

#: Deferred manifest updates (:meth:`RunStore.update_manifest` with ``defer``) are
#: written at most this often (seconds).
MANIFEST_DEFER_S = 2.0


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def environment() -> dict[str, Any]:
    """Versions of everything that can change a result."""
    import torch

    from .. import __version__

    env = {
        "kernelaudit": __version__,
        "torch": torch.__version__,
        "triton": _version_of("triton"),
        "python": platform.python_version(),
        "os": platform.platform(),
        "driver": None,
        "git": git_sha(),
        "source": source_digest(),   # the package's files by content: what ran, whatever git says
    }
    if torch.cuda.is_available():
        from .memory import allocator_in_force

        env["cuda"] = torch.version.cuda
        env["cuda_alloc"] = allocator_in_force()   # what the workers' caching allocators ran with
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=10)
            env["driver"] = out.stdout.strip().splitlines()[0] if out.returncode == 0 else None
        except (OSError, subprocess.SubprocessError, IndexError):
            pass
    return env


def _version_of(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


class RunStore:
    """One run directory. Open with :meth:`create` (new run) or :meth:`open` (resume/report)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._pending: dict[str, Any] = {}  # deferred manifest updates, not yet written
        self._written = time.monotonic()    # when the manifest was last written

    # -- manifest -------------------------------------------------------------
    @classmethod
    def create(cls, path: Path, manifest: dict[str, Any], *, resume: bool) -> "RunStore":
        path = Path(path)
        store = cls(path)
        if (path / MANIFEST).exists() and not resume:
            if store.recorded_keys():
                raise InvalidArgument(
                    f"Cannot have out={str(path)!r}: it already holds a run; pass --resume to continue it "
                    "or choose another --out")
        if resume and (path / MANIFEST).exists():
            old = store.manifest()
            for k in ("thresholds", "fault_model", "seeds"):
                if k in manifest and old.get(k) != manifest[k]:
                    raise InvalidArgument(
                        f"Cannot resume {str(path)!r} with {k}={manifest[k]!r}: the run was started with {old.get(k)!r}")
            torn = set_aside_torn(path)
            if torn:
                old["torn_lines_set_aside"] = old.get("torn_lines_set_aside", 0) + torn
            old.setdefault("resumed", []).append(now())
            old.setdefault("tolerances", {}).update(manifest.get("tolerances", {}))
            # a resumed invocation over a subset (--ops, --rerun) plans fewer cases than the
            # run holds: the run's plan is the largest any invocation made
            new_plan, old_plan = manifest.get("plan"), old.get("plan")
            if new_plan is not None and (old_plan is None or new_plan.get("cases", 0) >= old_plan.get("cases", 0)):
                old["plan"] = new_plan
            store.write_manifest(old)
            return store
        path.mkdir(parents=True, exist_ok=True)
        store.write_manifest(manifest)
        (path / VERDICTS).touch()
        return store

    @classmethod
    def open(cls, path: Path) -> "RunStore":
        store = cls(Path(path))
        if not (store.path / MANIFEST).is_file():
            raise InvalidArgument(f"Cannot read run store {str(path)!r}: no {MANIFEST} there")
        return store

    def manifest(self) -> dict[str, Any]:
        """The manifest, with the deferred updates not yet written merged in."""
        return _merged(read_json(self.path / MANIFEST), self._pending)

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        """Write ``manifest`` whole, with the deferred updates merged in (they are then written)."""
        write_json_atomic(self.path / MANIFEST, _merged(manifest, self._pending))
        self._pending = {}
        self._written = time.monotonic()

    def update_manifest(self, *, defer: bool = False, **fields: Any) -> None:
        """Set manifest fields; a dict field is updated key by key. With ``defer``, the
        write waits until :data:`MANIFEST_DEFER_S` seconds have passed since the last
        one (or until the next write of any kind, or :meth:`flush`)."""
        self._pending = _merged(self._pending, fields)
        if not defer or time.monotonic() - self._written >= MANIFEST_DEFER_S:
            self.flush()

    def flush(self) -> None:
        """Write the deferred manifest updates now, if any."""
        if self._pending:
            self.write_manifest(read_json(self.path / MANIFEST))

    def add_segment(self, segment: dict[str, Any]) -> None:
        """Record one invocation of the sweep on this store (``segments``: when, how
        long, which code, how many cases; a resumed run has several)."""
        m = self.manifest()
        m.setdefault("segments", []).append(segment)
        self.write_manifest(m)

    # -- verdicts --------------------------------------------------------------
    def append(self, case: Case, verdict: Verdict, elapsed_s: float, **extra: Any) -> None:
        rec = {"case": case.to_json(), "verdict": verdict.to_json(), "elapsed_s": round(elapsed_s, 4),
               "recorded": now(), **extra}
        append_jsonl(self.path / VERDICTS, rec, default=_jsonable)

    def records(self) -> Iterator[dict[str, Any]]:
        """Every complete record, in order (torn lines are skipped)."""
        parsed, _ = read_verdict_lines(self.path / VERDICTS)
        for _, rec in parsed:
            yield rec

    def latest(self) -> dict[str, dict[str, Any]]:
        """Case key -> its last record (:func:`~.runfile.supersedes`: a later record that
        did not run, for want of memory or after a timeout, does not replace an earlier
        judged verdict; it is noted on it as ``not_rerun``)."""
        out: dict[str, dict[str, Any]] = {}
        for r in self.records():
            key = Case.from_json(r["case"]).key
            if key in out and not supersedes(r, out[key]):
                out[key] = kept_over(r, out[key])
            else:
                out[key] = r
        return out

    def recorded_keys(self) -> set[str]:
        return set(self.latest())


def _merged(m: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
    """``m`` with ``fields`` set (in place); a dict field present in both is updated key by key."""
    for k, v in fields.items():
        if isinstance(v, dict) and isinstance(m.get(k), dict):
            m[k].update(v)
        else:
            m[k] = dict(v) if isinstance(v, dict) else v
    return m


def _jsonable(x):
    if isinstance(x, (set, frozenset, tuple)):
        return list(x)
    return str(x)

