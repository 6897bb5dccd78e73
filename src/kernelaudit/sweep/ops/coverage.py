"""What the sweep covers, per family, and why the rest is not: ``--list-ops`` and the
``--ops`` selection (names, ``all``, ``family:NAME``).

One row per op: the hand specs of :mod:`.catalog`, the explicit SDPA backends and
every entry of PyTorch's op database (:mod:`.opinfo`). An OpInfo entry whose name a
hand spec already has is listed once, as the hand spec (kept: it is the better one).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ...errors import InvalidArgument
from .families import FAMILIES, HAND_FAMILIES


@dataclass(frozen=True)
class Row:
    """One op: ``source`` is ``hand``, ``sdpa``, ``opinfo`` or ``metamorphic`` (an OpInfo
    entry, or a new op, judged by a relation); ``fwd``/``bwd`` whether a
    scaled case of it runs and is judged; ``reason`` why a direction is not covered."""

    name: str
    family: str
    source: str
    fwd: bool
    bwd: bool
    reason: str = ""
    devices: tuple[str, ...] = ("cpu", "cuda")
    #: How a covered op is judged: a float64 reference, or ``metamorphic: RELATION``.
    judge: str = ""


def rows() -> tuple[list[Row], str]:
    """(every op's row, a note: empty, or why the OpInfo catalogue is missing)."""
    from .catalog import ALL_OPS
    from .opinfo import CatalogueUnavailable, catalogue
    from .recipe import NOT_JUDGEABLE
    from .sdpa import SDPA_DEVICES

    out = [Row(n, HAND_FAMILIES.get(n, "other"), "hand", True, "bwd" in s.directions,
               "" if "bwd" in s.directions else "bwd: not differentiable")
           for n, s in ALL_OPS.items()]
    for backend, devs in SDPA_DEVICES.items():
        out.append(Row(f"sdpa.{backend}", "attention", "sdpa", True, True,
                       "" if "cpu" in devs else "runs on cuda only", devs))
    note = ""
    try:
        data = catalogue()
    except CatalogueUnavailable as e:
        return _with_judges(out), str(e)
    from .recipe import dim_last_records

    variants = dim_last_records(data["entries"])  # source "variant": a reduction over the last dim
    for r in [*data["entries"], *variants]:
        if r["name"] in ALL_OPS:
            continue
        bad = NOT_JUDGEABLE.get(r["name"], {})
        why = "; ".join(f"{d}: {w}" for d, w in bad.items())
        out.append(Row(r["name"], r["family"], "variant" if r in variants else "opinfo",
                       r["fwd"] and "fwd" not in bad, r["bwd"] and "bwd" not in bad,
                       "; ".join(x for x in (r["reason"], why) if x)))
    return _with_judges(out), note


def _with_judges(rs: list[Row]) -> list[Row]:
    """The rows with the judge each covered op uses. An OpInfo entry left uncovered for
    want of a reference that a metamorphic relation judges (:mod:`..judge.metamorphic_ops`)
    becomes covered forward by it; the relations' own ops (``cumsum.flat``, and
    ``NAME.meta`` where a hand spec has the name) are added."""
    from dataclasses import replace

    from ..judge.metamorphic_ops import META_OPS, sweep_name

    out = []
    for r in rs:
        op = META_OPS.get(r.name)
        if r.fwd:
            out.append(replace(r, judge=r.judge or ("fp64 batch-local reference" if r.source == "opinfo"
                                                    else "fp64 reference")))
        elif op is not None and r.source == "opinfo":
            out.append(replace(r, source="metamorphic", fwd=True, judge=f"metamorphic: {op.relation}",
                               reason="bwd: not judged (no fp64 reference; forward by the relation)"))
        else:
            out.append(r)
    names = {r.name for r in out}
    for op in META_OPS.values():
        if sweep_name(op.name) not in names:
            out.append(Row(sweep_name(op.name), op.family, "metamorphic", True, False, "bwd: not judged",
                           judge=f"metamorphic: {op.relation}"))
    return out


def family_ops(family: str, covered_only: bool = True) -> list[str]:
    """The ops of ``family`` (covered forward ones, unless ``covered_only`` is False)."""
    if family not in FAMILIES:
        raise InvalidArgument(f"Cannot have family {family!r}: allowed values are {', '.join(FAMILIES)}")
    rs, _ = rows()
    return [r.name for r in rs if r.family == family and (r.fwd or not covered_only)]


def select(items: tuple[str, ...], *, device: str | None = None,
           dropped: dict[str, str] | None = None) -> tuple[str, ...]:
    """Expand an ``--ops`` list: ``all`` (every covered op), ``family:NAME``,
    ``family:each`` (the first covered op of every family), op names
    (checked when the grid is validated); order kept, duplicates dropped.

    With ``device`` (``cpu``, ``cuda:1``, ...), ``all`` and ``family:NAME`` leave out the
    ops that do not run on that device type (``sdpa.efficient`` and ``sdpa.cudnn`` on a
    CPU), each recorded in ``dropped`` with the reason; an op named explicitly is kept
    (it runs, and its ``error`` says why)."""
    out: list[str] = []
    kind = None if device in (None, "auto") else device.split(":")[0]
    if not any(item == "all" or item.startswith("family:") for item in items):
        # Plain names need no catalogue: a fresh machine would otherwise derive it (minutes).
        return tuple(dict.fromkeys(items))
    where = {r.name: r for r in rows()[0]}
    for item in items:
        if item == "all":
            names = [r.name for r in where.values() if r.fwd]
        elif item == "family:each":  # one covered op per family: a quick look at every family
            names = _first_per_family(where.values(), kind)
        elif item.startswith("family:"):
            names = family_ops(item[len("family:"):])
        else:
            out += [item] if item not in out else []
            continue
        for n in names:
            r = where.get(n)
            if kind is not None and r is not None and kind not in r.devices:
                if dropped is not None:
                    dropped[n] = f"runs on {', '.join(r.devices)} only, not on {kind}"
                continue
            if n not in out:
                out.append(n)
    return tuple(out)


def _first_per_family(rs, kind: str | None) -> list[str]:
    """The first covered op of every family (rows order: hand specs first) that runs on
    device type ``kind`` (any device if None)."""
    out: dict[str, str] = {}
    for r in rs:
        if r.fwd and r.family not in out and (kind is None or kind in r.devices):
            out[r.family] = r.name
    return list(out.values())


def summary(rs: list[Row]) -> dict:
    """Counts: ops covered forward / backward, not covered, distinct OpInfo names covered,
    families with at least one covered op."""
    from .opinfo import catalogue

    fwd = [r for r in rs if r.fwd]
    try:
        entries = catalogue()["entries"]
    except Exception:
        entries = []
    hand = {r.name for r in rs if r.source == "hand"}
    by_relation = {r.name for r in fwd if r.source == "metamorphic"}
    opinfo_names = {e["opinfo"] for e in entries if e["fwd"] or e["name"] in hand or e["name"] in by_relation}
    return {"ops": len(rs), "covered_fwd": len(fwd), "covered_bwd": sum(r.bwd for r in rs),
            "not_covered": len(rs) - len(fwd), "opinfo_names_covered": len(opinfo_names),
            "families_covered": sorted({r.family for r in fwd}),
            "covered_by_relation": _count_by_family(r for r in fwd if r.judge.startswith("metamorphic"))}


def _count_by_family(rs) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in rs:
        out[r.family] = out.get(r.family, 0) + 1
    return dict(sorted(out.items()))


def as_json(rs: list[Row], note: str) -> dict:
    return {"summary": summary(rs), "note": note, "ops": [asdict(r) for r in rs]}


def render(rs: list[Row], note: str, console=None) -> None:
    """A rich table per family: covered ops (fwd, bwd) and the others with why."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    if note:
        console.print(f"[yellow]note:[/] {note}")
    for fam, title in FAMILIES.items():
        mine = [r for r in rs if r.family == fam]
        if not mine:
            continue
        cov = sum(r.fwd for r in mine)
        t = Table(title=f"{fam}: {title} ({cov} of {len(mine)} covered)", title_justify="left")
        for col in ("op", "source", "fwd", "bwd", "judge", "why not"):
            t.add_column(col, overflow="fold")
        for r in sorted(mine, key=lambda r: (not r.fwd, r.name)):
            t.add_row(r.name, r.source, "yes" if r.fwd else "no", "yes" if r.bwd else "no", r.judge, r.reason)
        console.print(t)
    s = summary(rs)
    console.print(f"{s['covered_fwd']} of {s['ops']} ops covered forward, {s['covered_bwd']} backward; "
                  f"{s['opinfo_names_covered']} distinct OpInfo names; families covered: "
                  f"{len(s['families_covered'])} of {len(FAMILIES)}")
