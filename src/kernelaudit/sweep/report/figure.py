"""The boundary-map figure: the grids of :mod:`.grid` drawn with matplotlib (Agg).

Panels are laid out as a grid of their own: one row per (op, series), one column per
(dtype, direction), so a column of panels compares one dtype and direction across ops.
Every size is in inches per cell, so the figure grows with the number of cells and
small maps stay small. The figure title names the device, torch version, fault model,
scale and date, as every recorded GPU figure must.

Uses :class:`matplotlib.figure.Figure` directly (no pyplot): no global state, no
display needed, the Agg canvas renders it.
"""

from __future__ import annotations

import functools
import io
import textwrap
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from matplotlib import transforms
from matplotlib.collections import LineCollection
from matplotlib.colors import to_rgb
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from .counts import cases_by_device, progress_text
from .grid import (STATUS_COLOURS, STATUS_LABELS, STATUS_MARKS, Panel, PanelGrid, boundary_grid, overview_grid,
    panel_sort_key, status_rgb)
from .run import Run

# Sizes in inches.
CELL_W, CELL_H = 0.5, 0.3
ROW_LABELS_W = 0.7  # room for layout names left of each panel
PANEL_TITLE_H = 0.3
COL_LABELS_H = 0.55  # rotated size labels under each panel
GAP_W, GAP_H = 0.3, 0.15
LEGEND_H = 0.4
MIN_WIDTH = 8.0
MARGIN = 0.2
#: Largest side of a saved image in pixels; dpi drops to keep big maps under it.
MAX_PIXELS = 12000
DPI = 110
#: More panels than this also get one file per op family, easier to read than one big one.
MAX_PANELS_PER_FILE = 24
#: Least dots per inch a map is drawn at: below it its 7-point text is unreadable (and
#: under one pixel FreeType refuses it). A map that would need less is drawn in parts,
#: and ``boundary_map.png`` becomes the overview (:func:`render_overview`).
MIN_DPI = 80
# The overview's cells and labels, in inches.
OVERVIEW_CELL_W, OVERVIEW_CELL_H = 0.32, 0.14
OVERVIEW_LABELS_W = 2.4
OVERVIEW_COL_LABELS_H = 1.3
OVERVIEW_RIGHT_W = 1.4


@dataclass(frozen=True)
class _Layout:
    """Where each panel goes: panel-grid rows are (op, series), columns (dtype, direction).

    All panels of one (op, series) share their layouts, so each panel-grid row is as
    tall as its own layouts need; every column is as wide as the widest panel.
    """

    rows: list[tuple[str, str, str]]
    cols: list[tuple[str, str]]
    cells_per_row: list[int]  # layouts in each panel-grid row
    n_cols_cells: int
    header_h: float = 1.0  # title lines and legend

    @property
    def panel_w(self) -> float:
        return ROW_LABELS_W + CELL_W * self.n_cols_cells

    def panel_h(self, i: int) -> float:
        return PANEL_TITLE_H + CELL_H * self.cells_per_row[i] + COL_LABELS_H

    def top(self, i: int) -> float:
        """Inches from the figure's top edge to the top of panel-grid row ``i``."""
        return MARGIN + self.header_h + sum(self.panel_h(k) + GAP_H for k in range(i))

    @property
    def size(self) -> tuple[float, float]:
        w = 2 * MARGIN + len(self.cols) * self.panel_w + (len(self.cols) - 1) * GAP_W
        h = self.top(len(self.rows)) - GAP_H + MARGIN
        return max(w, MIN_WIDTH), h


def _layout(grids: dict[Panel, PanelGrid]) -> _Layout:
    rows: list[tuple[str, str, str, str]] = []
    cols: list[tuple[str, str]] = []
    height: dict[tuple[str, str, str, str], int] = {}
    for p, g in grids.items():  # grids are already in display order
        row = (p.family, p.op, p.series, p.axis)  # each size axis its own panel-grid row
        if row not in rows:
            rows.append(row)
        height[row] = max(height.get(row, 0), len(g.rows))
        if (p.dtype, p.direction) not in cols:
            cols.append((p.dtype, p.direction))
    cols.sort(key=lambda c: panel_sort_key(Panel("", "", "", *c)))
    return _Layout(rows, cols, [height[r] for r in rows], max(len(g.cols) for g in grids.values()))


def title_text(run: Run) -> str:
    """Device (every device a resumed run ran on), torch, fault model, scale and start date:
    what every recorded figure states."""
    m = run.manifest
    scale = f"2^{m.scale_bits}" if m.scale_bits is not None else "?"
    devices = " and ".join(cases_by_device(run))
    return (
        f"Boundary map - {devices} ({m.device.type}), torch {m.torch}, "
        f"fault model {m.fault_model}, scale 2^32 -> {scale}, {m.date}"
    )


#: What the rows and columns of a map are, after the run's progress in its header.
MAP_KEY = ("rows: layout, columns: size (crossing tensor's elements, increasing; on a dim / bytes / attn_batch "
           "axis panel: dim-0 size / storage bytes / batch x heads); several seeds in a cell show the worst")
OVERVIEW_KEY = ("overview: rows: op, by family; columns: size axis, dtype, direction; each cell the worst verdict "
                "of that panel (every layout and size); one map per op family gives its cells")


def _header_lines(run: Run, width_in: float, key: str = MAP_KEY) -> list[tuple[str, float, dict]]:
    """(text, height in inches, text style) per header line, wrapped to the figure width."""
    # About 0.09 in per character at 10 pt bold and 0.065 in at 8 pt: wrap before the edge.
    title = textwrap.wrap(title_text(run), int((width_in - 2 * MARGIN) / 0.09))
    info = textwrap.wrap(f"{progress_text(run)}; {key}", int((width_in - 2 * MARGIN) / 0.065))
    return ([(t, 0.22, {"fontsize": 10, "weight": "bold"}) for t in title]
            + [(t, 0.17, {"fontsize": 8}) for t in info])


def _draw_header(fig: Figure, lines: list[tuple[str, float, dict]]) -> None:
    """The header lines (:func:`_header_lines`) from the top margin down, then the legend."""
    fh = fig.get_size_inches()[1]
    y = MARGIN
    for text, h, style in lines:
        fig.text(0.5, 1 - y / fh, text, ha="center", va="top", **style)
        y += h
    handles = [Patch(facecolor=c, edgecolor="0.5", label=STATUS_LABELS[s]) for s, c in STATUS_COLOURS.items()]
    fig.legend(handles=handles, loc="upper center", ncol=len(handles), fontsize=8, frameon=False,
               bbox_to_anchor=(0.5, 1 - y / fh))


def grid_rgb(grid: PanelGrid) -> np.ndarray:
    """The panel's cells as an RGB image, ``[rows, cols, 3]`` floats: what is drawn."""
    return np.array([[status_rgb(s) for s in row] for row in grid.cells], dtype=float).reshape(
        len(grid.rows), len(grid.cols), 3
    )


def render_boundary_map(run: Run, grids: dict[Panel, PanelGrid] | None = None) -> Figure:
    """The boundary-map figure of ``run`` (or of the given subset of its ``grids``)."""
    grids = boundary_grid(run) if grids is None else grids
    if not grids:
        fig = Figure(figsize=(8, 2))
        fig.suptitle(title_text(run), fontsize=9)
        fig.text(0.5, 0.4, "No cases recorded yet.", ha="center", fontsize=12)
        return fig
    lay, lines = _sized_layout(run, grids)
    fw, fh = lay.size
    fig = Figure(figsize=(fw, fh))
    _draw_header(fig, lines)
    # One canvas in inches for every panel: an Axes per panel (its ticks, spines and
    # layout) cost 15 ms each, most of a 5,777-panel map's time.
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, fw)
    ax.set_ylim(0, fh)
    ax.set_axis_off()
    ax.set_autoscale_on(False)
    # a title wraps within its panel's width (about 0.062 in a character at 8 points)
    title_chars = max(12, int((lay.panel_w - GAP_W) / 0.062))
    row_of = {r: i for i, r in enumerate(lay.rows)}
    col_of = {c: j for j, c in enumerate(lay.cols)}
    segments: list = []
    for panel, grid in grids.items():
        i = row_of[(panel.family, panel.op, panel.series, panel.axis)]
        j = col_of[(panel.dtype, panel.direction)]
        # Panel box in inches from the figure's bottom-left corner.
        x0 = MARGIN + j * (lay.panel_w + GAP_W) + ROW_LABELS_W
        top = fh - lay.top(i) - PANEL_TITLE_H
        segments += _draw_panel(ax, panel, grid, x0, top, title_chars)
    ax.add_collection(LineCollection(segments, colors="0.6", linewidths=0.5))
    return fig


#: Labels sit this far (inches: 3 points) from their panel's edge.
LABEL_PAD = 3 / 72


def _draw_panel(ax, panel: Panel, grid: PanelGrid, x0: float, top: float, title_chars: int = 80) -> list:
    """Draw one panel on the canvas ``ax`` (data coordinates are inches), its top-left
    corner at (``x0``, ``top``); return its cell lines as segments. The title is wrapped
    at ``title_chars`` (two lines at most: the room above a panel) instead of running into
    the next panel. The image and every text carry the panel's title as gid (the title
    text ``<title>:title``), so a reader of the figure finds a panel's artists."""
    nr, nc = len(grid.rows), len(grid.cols)
    w, h = CELL_W * nc, CELL_H * nr
    ax.imshow(grid_rgb(grid), extent=(x0, x0 + w, top - h, top), aspect="auto", interpolation="nearest",
              gid=panel.title)
    title = "\n".join(textwrap.wrap(panel.title, title_chars, max_lines=2, placeholder="..."))
    ax.text(x0 - ROW_LABELS_W + GAP_W, top + LABEL_PAD, title, fontsize=8, ha="left", va="bottom",
            linespacing=1.0, gid=f"{panel.title}:title")
    for j, label in enumerate(grid.cols):
        ax.text(x0 + (j + 0.5) * CELL_W, top - h - LABEL_PAD, label, rotation=45, rotation_mode="anchor",
                ha="right", va="top", fontsize=7, gid=panel.title)
    for i, label in enumerate(grid.rows):
        ax.text(x0 - LABEL_PAD, top - (i + 0.5) * CELL_H, label, ha="right", va="center", fontsize=7,
                gid=panel.title)
    for i, row in enumerate(grid.cells):
        for j, status in enumerate(row):
            if STATUS_MARKS[status]:
                ax.text(x0 + (j + 0.5) * CELL_W, top - (i + 0.5) * CELL_H, STATUS_MARKS[status], ha="center",
                        va="center", fontsize=7, color="white", weight="bold", gid=panel.title)
    return ([[(x0 + j * CELL_W, top - h), (x0 + j * CELL_W, top)] for j in range(1, nc)]
            + [[(x0, top - i * CELL_H), (x0 + w, top - i * CELL_H)] for i in range(1, nr)])


def save_figure(fig: Figure, path: Path) -> Path:
    """Write ``fig`` as PNG, lowering dpi so no side passes :data:`MAX_PIXELS`, never
    below :data:`MIN_DPI` (callers cut big maps into parts first; a part still too big
    is written larger rather than with text below a pixel). The pixels are mapped to
    :func:`map_palette` (8-bit colour indexes): every status colour stays exact, edges
    and text keep their blends, and the file is about a third of the RGBA one (the full
    grid's 33 maps of 2026-12-06: 6.1 MB against 20.8)."""
    from PIL import Image

    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=max(_dpi(tuple(fig.get_size_inches())), MIN_DPI), facecolor="white")
    rgb = Image.open(buf).convert("RGB")
    rgb.quantize(palette=_palette_image(), dither=Image.Dither.NONE).save(path, format="png", optimize=True)
    return path


#: Colours a map is drawn in besides the status colours: text, the cells' grid lines,
#: the legend's edges.
_INK = ("#000000", "#999999", "#808080")
#: Blends of every pair of map colours (antialiased edges, white marks on a cell).
_BLENDS = (0.25, 0.5, 0.75)


def map_palette() -> list[tuple[int, int, int]]:
    """The colours a saved map may hold: the status colours and the ink, exact; every
    blend of two of them at :data:`_BLENDS`; a ramp of 32 greys for text."""
    anchors = [_rgb(c) for c in (*STATUS_COLOURS.values(), *_INK)]
    out = list(anchors)
    for i, a in enumerate(anchors):
        for b in anchors[i + 1:]:
            out += [tuple(round(x * (1 - t) + y * t) for x, y in zip(a, b)) for t in _BLENDS]
    out += [(g, g, g) for g in range(0, 256, 8)]
    return list(dict.fromkeys(out))


def _rgb(colour: str) -> tuple[int, int, int]:
    return tuple(round(255 * x) for x in to_rgb(colour))  # type: ignore[return-value]


@functools.lru_cache(maxsize=1)
def _palette_image():
    from PIL import Image

    pal = Image.new("P", (1, 1))
    flat = [v for c in map_palette() for v in c]
    pal.putpalette(flat + [0] * (768 - len(flat)))
    return pal


def _dpi(size_in: tuple[float, float]) -> float:
    return min(DPI, MAX_PIXELS / max(size_in))


def _sized_layout(run: Run, grids: dict[Panel, PanelGrid]) -> tuple[_Layout, list[tuple[str, float, dict]]]:
    """(layout, header lines) of :func:`render_boundary_map`: the header wrapped to the
    panels' width, its height in the layout."""
    lay = _layout(grids)
    lines = _header_lines(run, lay.size[0])
    return replace(lay, header_h=sum(h for _, h, _ in lines) + LEGEND_H), lines


def _map_size(run: Run, grids: dict[Panel, PanelGrid]) -> tuple[float, float]:
    """The size in inches :func:`render_boundary_map` gives ``grids``."""
    return _sized_layout(run, grids)[0].size


def _legible(run: Run, grids: dict[Panel, PanelGrid]) -> bool:
    return _dpi(_map_size(run, grids)) >= MIN_DPI


def _in_parts(run: Run, grids: dict[Panel, PanelGrid]) -> list[dict[Panel, PanelGrid]]:
    """``grids`` cut, in order, between panel-grid rows (op, series, axis) into as few
    parts as keep each legible (:data:`MIN_DPI`); one part if the whole is."""
    rows: dict[tuple, dict[Panel, PanelGrid]] = {}
    for p, g in grids.items():
        rows.setdefault((p.family, p.op, p.series, p.axis), {})[p] = g
    parts: list[dict[Panel, PanelGrid]] = []
    cur: dict[Panel, PanelGrid] = {}
    for panels in rows.values():
        if cur and not _legible(run, {**cur, **panels}):
            parts.append(cur)
            cur = {}
        cur.update(panels)
    return parts + [cur] if cur else parts


def _overview_frame(run: Run, ncols: int) -> tuple[float, list[tuple[str, float, dict]], float]:
    """(width, header lines, height of all but the rows) of an overview of ``ncols``
    columns: room right of the matrix for the family names and the last rotated labels."""
    fw = max(2 * MARGIN + OVERVIEW_LABELS_W + OVERVIEW_CELL_W * ncols + OVERVIEW_RIGHT_W, MIN_WIDTH)
    lines = _header_lines(run, fw, OVERVIEW_KEY)
    return fw, lines, 2 * MARGIN + sum(h for _, h, _ in lines) + LEGEND_H + OVERVIEW_COL_LABELS_H


def render_overview(run: Run, grids: dict[Panel, PanelGrid]) -> Figure:
    """The overview of a map too big for one legible image: :func:`~.grid.overview_grid`
    as one matrix, ops down (a line and the family's name between families), (axis,
    dtype, direction) across, a mark on every cell not ok; the per-family maps hold the
    layouts and sizes."""
    g = overview_grid(grids)
    families = [fam for fam, _ in _row_families(grids)]
    nr, nc = len(g.rows), len(g.cols)
    fw, lines, fixed_h = _overview_frame(run, nc)
    body_h = OVERVIEW_CELL_H * nr
    fh = fixed_h + body_h
    fig = Figure(figsize=(fw, fh))
    _draw_header(fig, lines)
    x0 = MARGIN + OVERVIEW_LABELS_W
    ax = fig.add_axes((x0 / fw, MARGIN / fh, OVERVIEW_CELL_W * nc / fw, body_h / fh))
    ax.imshow(grid_rgb(g), aspect="auto", interpolation="nearest")
    ax.set_xticks([])
    ax.set_yticks([])
    ax.vlines(np.arange(0.5, nc - 1), -0.5, nr - 0.5, colors="0.6", linewidth=0.3)
    above = transforms.offset_copy(ax.transData, fig=fig, y=3, units="points")
    left = transforms.offset_copy(ax.transData, fig=fig, x=-3, units="points")
    right = transforms.offset_copy(ax.transData, fig=fig, x=4, units="points")
    for j, label in enumerate(g.cols):
        ax.text(j, -0.5, label, rotation=60, rotation_mode="anchor", ha="left", va="bottom", fontsize=6,
                transform=above, clip_on=False)
    for i, label in enumerate(g.rows):
        ax.text(-0.5, i, label, ha="right", va="center", fontsize=6, transform=left, clip_on=False)
    for i, fam in enumerate(families):
        if i == 0 or fam != families[i - 1]:
            if i:
                ax.hlines(i - 0.5, -0.5, nc - 0.5, colors="black", linewidth=0.8)
            ax.text(nc - 0.5, i - 0.5, fam, ha="left", va="top", fontsize=7, weight="bold", transform=right,
                    clip_on=False)
    for i, row in enumerate(g.cells):
        for j, status in enumerate(row):
            if STATUS_MARKS[status]:
                ax.text(j, i, STATUS_MARKS[status], ha="center", va="center", fontsize=5, color="white",
                        weight="bold")
    return fig


def _row_families(grids: dict[Panel, PanelGrid]) -> list[tuple[str, tuple[str, str]]]:
    """(family, (op, series)) per overview row, in the overview's order."""
    seen: dict[tuple[str, str], str] = {}
    for p in grids:
        seen.setdefault((p.op, p.series), p.family)
    return [(fam, row) for row, fam in seen.items()]


def _overview_parts(run: Run, grids: dict[Panel, PanelGrid]) -> list[dict[Panel, PanelGrid]]:
    """``grids`` cut between ops into as few parts as keep each overview legible."""
    rows: dict[tuple, dict[Panel, PanelGrid]] = {}
    for p, g in grids.items():
        rows.setdefault((p.op, p.series), {})[p] = g
    fw, _, fixed = _overview_frame(run, len({(p.axis, p.dtype, p.direction) for p in grids}))
    per_part = max(1, int((MAX_PIXELS / MIN_DPI - fixed) / OVERVIEW_CELL_H)) if fw * MIN_DPI <= MAX_PIXELS else 1
    chunks = list(rows.values())
    return [{p: g for part in chunks[i:i + per_part] for p, g in part.items()}
            for i in range(0, len(chunks), per_part)]


def save_boundary_maps(run: Run, out_dir: Path) -> dict[str, Path]:
    """Write ``boundary_map.png`` and, for a big map, ``boundary_map_<family>.png`` each.

    A map too big for one legible image (:data:`MIN_DPI`) is drawn as the overview
    (:func:`render_overview`; ``boundary_map.png``, also named ``boundary_map_overview``,
    then ``boundary_map_overview_<i>.png`` if it takes several), and a family too big for
    one image in parts, ``boundary_map_<family>_<i>.png`` (i = 1, 2, ...). Returns
    name -> path: ``boundary_map``, then the overview's and the families' names.
    """
    grids = boundary_grid(run)
    out: dict[str, Path] = {}
    if not grids or _legible(run, grids):
        out["boundary_map"] = save_figure(render_boundary_map(run, grids), out_dir / "boundary_map.png")
    else:
        for i, part in enumerate(_overview_parts(run, grids), 1):
            name, file = ("boundary_map_overview", "boundary_map.png") if i == 1 else \
                (f"boundary_map_overview_{i}", f"boundary_map_overview_{i}.png")
            out[name] = save_figure(render_overview(run, part), out_dir / file)
        out = {"boundary_map": out["boundary_map_overview"], **out}
    if len(grids) > MAX_PANELS_PER_FILE or "boundary_map_overview" in out:
        families = sorted({p.family for p in grids})
        for fam in families:
            parts = _in_parts(run, {p: g for p, g in grids.items() if p.family == fam})
            for i, sub in enumerate(parts, 1):
                name = f"boundary_map_{_safe(fam)}" + (f"_{i}" if len(parts) > 1 else "")
                out[name] = save_figure(render_boundary_map(run, sub), out_dir / f"{name}.png")
    return out


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)
