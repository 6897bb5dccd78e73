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
    """One op: ``source`` is ``hand``, ``sdpa`` or ``opinfo``; ``fwd``/``bwd`` whether a
    scaled case of it runs and is judged; ``reason`` why a direction is not covered."""

    name: str
    family: str
    source: str
    fwd: bool
    bwd: bool
    reason: str = ""
    devices: tuple[str, ...] = ("cpu", "cuda")


def rows() -> tuple[list[Row], str]:
    """(every op's row, a note: empty, or why the OpInfo catalogue is missing)."""
    from .catalog import ALL_OPS
    from .opinfo import CatalogueUnavailable, catalogue
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
        return out, str(e)
    for r in data["entries"]:
        if r["name"] in ALL_OPS:
            continue
        out.append(Row(r["name"], r["family"], "opinfo", r["fwd"], r["bwd"], r["reason"]))
    return out, note


def family_ops(family: str, covered_only: bool = True) -> list[str]:
    """The ops of ``family`` (covered forward ones, unless ``covered_only`` is False)."""
    if family not in FAMILIES:
        raise InvalidArgument(f"Cannot have family {family!r}: allowed values are {', '.join(FAMILIES)}")
    rs, _ = rows()
    return [r.name for r in rs if r.family == family and (r.fwd or not covered_only)]


def select(items: tuple[str, ...]) -> tuple[str, ...]:
    """Expand an ``--ops`` list: ``all`` (every covered op), ``family:NAME``, op names
    (checked when the grid is validated); order kept, duplicates dropped."""
    out: list[str] = []
    for item in items:
        if item == "all":
            names = [r.name for r in rows()[0] if r.fwd]
        elif item.startswith("family:"):
            names = family_ops(item[len("family:"):])
        else:
            names = [item]
        out += [n for n in names if n not in out]
    return tuple(out)


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
    opinfo_names = {e["opinfo"] for e in entries if e["fwd"] or e["name"] in hand}
    return {"ops": len(rs), "covered_fwd": len(fwd), "covered_bwd": sum(r.bwd for r in rs),
            "not_covered": len(rs) - len(fwd), "opinfo_names_covered": len(opinfo_names),
            "families_covered": sorted({r.family for r in fwd})}


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
        for col in ("op", "source", "fwd", "bwd", "why not"):
            t.add_column(col, overflow="fold")
        for r in sorted(mine, key=lambda r: (not r.fwd, r.name)):
            t.add_row(r.name, r.source, "yes" if r.fwd else "no", "yes" if r.bwd else "no", r.reason)
        console.print(t)
    s = summary(rs)
    console.print(f"{s['covered_fwd']} of {s['ops']} ops covered forward, {s['covered_bwd']} backward; "
                  f"{s['opinfo_names_covered']} distinct OpInfo names; families covered: "
                  f"{len(s['families_covered'])} of {len(FAMILIES)}")
