"""The boundary map as data: one grid of statuses per panel, before any drawing.

A panel is one (op, series, dtype, direction). Its rows are layouts, its columns are
size labels (``2^31-``, ``2^31``, ``2^31+``, ``2^32-`` ...) in increasing order of the
crossing tensor's element count. Every panel of one (op, series) gets the same rows and
columns, so panels side by side compare cell for cell; a cell no record fills is
``None`` ("not run"). Several records in one cell (several seeds) show the worst.

The figure draws exactly these grids, through :func:`status_rgb`; tests check the
grids and the colours instead of reading pixels.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from typing import NamedTuple

from ...verdict import SEVERITY, Status, worst
from .run import CaseRecord, Run

#: Cell colours: a status, or ``None`` for a case not run.
STATUS_COLOURS: dict[Status | None, str] = {
    Status.OK: "#4caf50",
    Status.ERROR: "#ff9800",
    Status.WRONG: "#d62728",
    Status.SKIPPED: "#9e9e9e",
    None: "#ffffff",
}
#: Legend and table labels, in the order they are shown.
STATUS_LABELS: dict[Status | None, str] = {
    Status.OK: "ok",
    Status.ERROR: "error",
    Status.WRONG: "wrong",
    Status.SKIPPED: "skipped",
    None: "not run",
}
#: One-letter marks drawn in cells, so the map reads without colour vision.
STATUS_MARKS: dict[Status | None, str] = {
    Status.OK: "",
    Status.ERROR: "E",
    Status.WRONG: "W",
    Status.SKIPPED: "S",
    None: "",
}


def status_rgb(status: Status | None) -> tuple[float, float, float]:
    """The cell colour of ``status`` as RGB floats in [0, 1]."""
    h = STATUS_COLOURS[status].lstrip("#")
    return tuple(int(h[i:i + 2], 16) / 255 for i in (0, 2, 4))  # type: ignore[return-value]


class Panel(NamedTuple):
    """One panel of the map: the cases of one op, series, dtype and direction."""

    family: str
    op: str
    series: str
    dtype: str
    direction: str
    axis: str = "elements"

    @property
    def title(self) -> str:
        t = f"{self.op}, {self.series} series, {self.dtype}, {self.direction}"
        return t if self.axis == "elements" else f"{t}, {self.axis} axis"


@dataclass(frozen=True)
class PanelGrid:
    """Rows (layouts) x columns (size labels) of statuses; ``None`` is not run."""

    rows: tuple[str, ...]
    cols: tuple[str, ...]
    cells: tuple[tuple[Status | None, ...], ...]

    def at(self, layout: str, size: str) -> Status | None:
        """The status of one cell, by its layout and size label."""
        return self.cells[self.rows.index(layout)][self.cols.index(size)]


def panel_of(r: CaseRecord) -> Panel:
    return Panel(r.family, r.op, r.series, r.dtype, r.direction, r.axis)


def boundary_grid(run: Run) -> dict[Panel, PanelGrid]:
    """Every panel's grid of statuses, panels sorted by family, op, series, dtype, direction
    and size axis (each axis its own panels: its columns count its own unit)."""
    by_group: dict[tuple[str, str, str], list[CaseRecord]] = defaultdict(list)
    for r in run.records:
        by_group[(r.op, r.series, r.axis)].append(r)
    out: dict[Panel, PanelGrid] = {}
    for group in by_group.values():
        rows = tuple(_ordered_layouts({r.layout for r in group}))
        cols = tuple(_ordered_sizes(group))
        by_panel: dict[Panel, dict[tuple[str, str], list[CaseRecord]]] = defaultdict(lambda: defaultdict(list))
        for r in group:
            by_panel[panel_of(r)][(r.layout, r.size)].append(r)
        for panel, cells in by_panel.items():
            out[panel] = PanelGrid(rows, cols, tuple(
                tuple(_cell_status(cells.get((row, col), [])) for col in cols) for row in rows
            ))
    return {p: out[p] for p in sorted(out, key=panel_sort_key)}


def overview_grid(grids: dict[Panel, PanelGrid]) -> PanelGrid:
    """One row per (op, series), one column per (size axis, dtype, direction): the worst
    status of that panel's cells, as a cell shows the worst of its records (error > wrong
    > skipped > ok; ``None``: no panel, or no cell run)."""
    rows: dict[tuple[str, str], None] = {}  # ordered sets: first appearance
    found: dict[tuple[str, str, str], None] = {}
    worst_of: dict[tuple, Status | None] = {}
    series_of: dict[str, set[str]] = {}
    for p, g in grids.items():
        rows.setdefault((p.op, p.series))
        series_of.setdefault(p.op, set()).add(p.series)
        col = (p.axis, p.dtype, p.direction)
        found.setdefault(col)
        run = [c for row in g.cells for c in row if c is not None]
        worst_of[(p.op, p.series, col)] = max(run, key=SEVERITY.__getitem__) if run else None
    cols = list(found)
    cols.sort(key=lambda c: (_rank(c[0], _AXIS_ORDER), _rank(c[1], _DTYPE_ORDER), _rank(c[2], _DIRECTION_ORDER)))
    return PanelGrid(
        tuple(op if len(series_of[op]) == 1 else f"{op} ({series})" for op, series in rows),
        tuple(" ".join(c) for c in cols),
        tuple(tuple(worst_of.get((op, series, c)) for c in cols) for op, series in rows))


def _cell_status(records: list[CaseRecord]) -> Status | None:
    if not records:
        return None
    return worst([r.verdict for r in records]).status


_LAYOUT_ORDER = ("contig", "aT", "bT", "abT", "slice")
_DTYPE_ORDER = ("float64", "float32", "tfloat32", "bfloat16", "float16")
_DIRECTION_ORDER = ("fwd", "bwd")
_SERIES_ORDER = ("out", "in")
_AXIS_ORDER = ("elements", "dim", "bytes", "attn_batch")


def _rank(value: str, order: tuple[str, ...]) -> tuple[int, str]:
    return (order.index(value), "") if value in order else (len(order), value)


def _ordered_layouts(layouts: set[str]) -> list[str]:
    return sorted(layouts, key=lambda s: _rank(s, _LAYOUT_ORDER))


def panel_sort_key(p: Panel) -> tuple:
    return (p.family, p.op, _rank(p.series, _SERIES_ORDER), _rank(p.axis, _AXIS_ORDER), _rank(p.dtype, _DTYPE_ORDER),
            _rank(p.direction, _DIRECTION_ORDER))


_SIZE_LABEL = re.compile(r"^(?:(\d+)\*)?2\^(\d+)([+-]?)$")


def size_label_key(label: str) -> tuple[float, int]:
    """Order of a size label read from its text: ``2^31- < 2^31 < 2^31+ < 2*2^32-``.

    Labels that are not of that form sort last (by text, through the caller's tie-break).
    """
    m = _SIZE_LABEL.match(label)
    if not m:
        return (float("inf"), 0)
    mult, exp, sign = m.groups()
    return (int(mult or 1) * 2.0 ** int(exp), {"-": -1, "": 0, "+": 1}[sign])


def _ordered_sizes(records: list[CaseRecord]) -> list[str]:
    """Size labels by increasing size along the records' axis (the crossing element
    count for ``elements``); the label text breaks ties."""
    smallest: dict[str, float] = {}
    for r in records:
        n = float(r.measure) if r.measure is not None else float("inf")
        smallest[r.size] = min(smallest.get(r.size, float("inf")), n)
    return sorted(smallest, key=lambda s: (smallest[s], size_label_key(s), s))
