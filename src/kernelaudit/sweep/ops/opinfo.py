"""Ops derived from PyTorch's own op database (OpInfo), not from a hand list.

For every entry of ``torch.testing._internal.common_methods_invocations.op_db`` (the
nn.functional, linalg, fft and special entries included) :mod:`.derive` looks for a
sample input that can be **scaled along one dimension the op is separable in**: the
op applied to a slice of that dimension equals the same slice of the op's output.
Such an op becomes an :class:`~.spec.OpSpec` whose batch is that dimension, so the
sweep's batch-local float64 reference (the op on one batch's rows) judges it at any
size. Separability is verified twice before an op counts as covered: on the sample
in float64 (the op on 2 stacked batches against the op on each), then end to end by
the sweep's own judge on 3 batches in float32, one batch per reference chunk, forward
and, where the op is differentiable, backward.

An op that is not covered says why (a random generator that needs a metamorphic
judge, a whole-tensor result, an output whose shape depends on the data, ...).

What a derived op needs at run time (its function, the sample's non-tensor arguments,
its operands' shapes and scaled dims) is a small JSON **recipe**: the derived catalogue
is cached in a JSON file per torch version (:func:`cache_path`), so a sweep, and each
of its worker processes, loads it in milliseconds instead of importing the op
database (seconds) and deriving again (a minute). Without the ``expecttest`` package
(which the op database imports) and no cache, only the hand specs are available, and
``--list-ops`` says so.
"""

from __future__ import annotations

import json
import os
import time
from functools import lru_cache
from pathlib import Path
from typing import Callable

import torch

from . import derive
from .derive import derive_entry
from .families import classify
from .recipe import spec_from_recipe
from .sdpa import sdpa_specs
from .spec import OpSpec

#: Bump when derivation changes: older cache files are then ignored.
CATALOGUE_VERSION = 2


def torch_key() -> str:
    """The torch release a catalogue belongs to (``2.13.0``: CPU and CUDA builds share
    their op database)."""
    return torch.__version__.split("+")[0]


def cache_path() -> Path:
    """The catalogue's cache file for this torch release (``KERNELAUDIT_CACHE_DIR``, else
    the user cache dir)."""
    from ...config import CACHE_DIR

    root = Path(CACHE_DIR.get()) if CACHE_DIR.get() else \
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kernelaudit"
    return root / f"opinfo-catalogue-v{CATALOGUE_VERSION}-torch{torch_key()}.json"


#: Catalogues shipped with kernelaudit, one per torch release they were derived on
#: (``python -m kernelaudit.sweep.ops.opinfo --snapshot`` writes this release's).
SNAPSHOT_DIR = Path(__file__).with_name("data")


def snapshot_path() -> Path:
    return SNAPSHOT_DIR / f"opinfo-catalogue-torch{torch_key()}.json"


def _failed(op_name: str, variant: str, kind: str, why: str) -> dict:
    return {"name": op_name + (f".{variant}" if variant else ""), "opinfo": op_name, "variant": variant,
            "family": classify(op_name, kind), "fwd": False, "bwd": False, "reason": why[:200], "recipe": None}


def _build_worker(conn, start: int, names) -> None:
    """Derive entries ``start``.. of the op database, sending ("start", i) before and
    ("rec", i, record) after each, then ("done",)."""
    import warnings

    derive.DERIVING = True  # an op under trial is looked up among the trials only, never in a catalogue
    warnings.filterwarnings("ignore")
    from torch.testing._internal.common_methods_invocations import op_db

    torch.set_num_threads(1)
    for i in range(start, len(op_db)):
        op = op_db[i]
        if names is not None and op.name not in names:
            continue
        conn.send(("start", i, op.name, op.variant_test_name, type(op).__name__))
        try:
            rec = derive_entry(op)
        except Exception as e:  # one entry's surprise must not lose the others
            rec = _failed(op.name, op.variant_test_name, type(op).__name__,
                          f"derivation failed: {type(e).__name__}: {e}")
        conn.send(("rec", i, rec))
    conn.send(("done",))


def build(progress: Callable[[str], None] | None = None, names: set[str] | None = None) -> dict:
    """Derive the catalogue from the op database (minutes on a CPU core): a dict with
    ``torch``, ``version``, ``seconds`` and ``entries`` (one record per OpInfo entry;
    only those whose OpInfo name is in ``names`` when given).

    Derivation runs ops on inputs they were not written for, and a few corrupt memory
    (an index past the end in an unchecked op): it runs in a worker process, and an
    entry that kills it is recorded as such and skipped by a fresh worker."""
    import multiprocessing as mp

    import kernelaudit.sweep.ops.opinfo as this  # not the __main__ copy of ``python -m``

    ctx = mp.get_context("spawn")
    t0 = time.perf_counter()
    entries: list[dict] = []
    start = 0
    while True:
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=this._build_worker, args=(child, start, names), daemon=True)
        proc.start()
        child.close()
        current = None
        try:
            while True:
                msg = parent.recv()
                if msg[0] == "start":
                    current = msg
                    if progress:
                        progress(msg[2])
                elif msg[0] == "rec":
                    entries.append(msg[2])
                    current = None
                else:
                    break
            proc.join(10)
            break
        except EOFError:  # the worker died inside ``current``
            proc.join(10)
            if current is None:
                raise RuntimeError(f"the catalogue's build worker died (exit status {proc.exitcode})")
            _, i, name, variant, kind = current
            entries.append(_failed(name, variant, kind,
                                   f"crashes the process on scaled inputs (exit status {proc.exitcode})"))
            start = i + 1
    return {"torch": torch_key(), "version": CATALOGUE_VERSION,
            "seconds": round(time.perf_counter() - t0, 1), "entries": entries}


class CatalogueUnavailable(Exception):
    """The op database cannot be imported here (no ``expecttest``) and nothing is cached."""


_LOADED: dict | None = None


def _read(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if data.get("version") == CATALOGUE_VERSION and data.get("torch") == torch_key():
        return data
    return None


def catalogue(*, rebuild: bool = False) -> dict:
    """The derived catalogue for this torch release: from the user cache, else from the
    snapshot shipped with kernelaudit, else built (minutes, once) and cached. Raises
    :class:`CatalogueUnavailable` when it can be neither read nor built."""
    import sys

    global _LOADED
    if _LOADED is not None and not rebuild:
        return _LOADED
    if not rebuild:
        for path in (cache_path(), snapshot_path()):
            if (data := _read(path)) is not None:
                _LOADED = data
                return data
    try:
        import expecttest  # noqa: F401  (the op database needs it)
    except ImportError:
        raise CatalogueUnavailable(
            f"no OpInfo op catalogue for torch {torch_key()} yet, and PyTorch's op database needs the "
            "expecttest package to derive one (pip install expecttest): only the hand-written ops "
            "are available") from None
    print(f"kernelaudit: deriving the op catalogue from PyTorch's OpInfo database for torch {torch_key()} "
          f"(once; minutes) into {cache_path()}", file=sys.stderr)
    data = build()
    write(data, cache_path())
    _LOADED = data
    return data


def write(data: dict, path: Path) -> bool:
    """Write a catalogue atomically; False where the directory is not writable."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, separators=(",", ":")))
        tmp.replace(path)
        return True
    except OSError:
        return False  # a read-only cache dir: this process keeps it in memory


def catalogue_entry(name: str) -> dict:
    """The catalogue's record of the derived op ``name`` (KeyError if none)."""
    for rec in catalogue()["entries"]:
        if rec["name"] == name:
            return rec
    raise KeyError(name)


@lru_cache(maxsize=1)
def derived_specs() -> dict[str, OpSpec]:
    """Every covered derived op as an :class:`OpSpec` (name -> spec), the explicit SDPA
    backends included; empty when the catalogue is unavailable. Names of hand specs
    are left to the hand specs."""
    from .catalog import ALL_OPS

    out = dict(sdpa_specs())
    try:
        data = catalogue()
    except CatalogueUnavailable:
        return out
    for rec in data["entries"]:
        if rec["fwd"] and rec["name"] not in ALL_OPS:
            out[rec["name"]] = spec_from_recipe(rec["name"], rec["family"], rec["recipe"])
    return out


def find_spec(name: str) -> OpSpec | None:
    """A derived op by name (an op under trial first), or None."""
    if name in derive.TRIAL or derive.DERIVING:
        return derive.TRIAL.get(name)
    if name.startswith("sdpa."):
        return sdpa_specs().get(name)
    spec = derived_specs().get(name)
    if spec is None:  # an op judged by a metamorphic relation (no per-op reference)
        from ..judge.metamorphic_ops import meta_specs
        spec = meta_specs().get(name)
    return spec


def main(argv: list[str]) -> None:
    """``python -m kernelaudit.sweep.ops.opinfo [--snapshot]``: derive this torch release's
    catalogue into the user cache (and the shipped snapshot with ``--snapshot``)."""
    import sys

    d = catalogue(rebuild=True)
    where = [cache_path()]
    write(d, cache_path())
    if "--snapshot" in argv:
        write(d, snapshot_path())
        where.append(snapshot_path())
    n = sum(r["fwd"] for r in d["entries"])
    print(f"{len(d['entries'])} entries, {n} covered fwd, {d['seconds']} s -> {', '.join(map(str, where))}",
          file=sys.stderr)


if __name__ == "__main__":
    import sys

    import kernelaudit.sweep.ops.opinfo as _this  # the module the sweep imports, not this __main__ copy

    _this.main(sys.argv[1:])
