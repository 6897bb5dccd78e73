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

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from .counts import progress_text
from .grid import (
    STATUS_COLOURS, STATUS_LABELS, STATUS_MARKS, Panel, PanelGrid, boundary_grid, panel_sort_key, status_rgb,
)
from .run import Run

# Sizes in inches.
CELL_W, CELL_H = 0.5, 0.3
ROW_LABELS_W = 0.7  # room for layout names left of each panel
PANEL_TITLE_H = 0.3
COL_LABELS_H = 0.55  # rotated size labels under each panel
GAP_W, GAP_H = 0.3, 0.15
HEADER_H = 1.0  # figure title, progress line and legend
MARGIN = 0.2
#: Largest side of a saved image in pixels; dpi drops to keep big maps under it.
MAX_PIXELS = 12000
DPI = 110
#: More panels than this also get one file per op family, easier to read than one big one.
MAX_PANELS_PER_FILE = 24


@dataclass(frozen=True)
class _Layout:
    """Where each panel goes: panel-grid rows are (op, series), columns (dtype, direction)."""

    rows: list[tuple[str, str, str]]
    cols: list[tuple[str, str]]
    n_rows_cells: int
    n_cols_cells: int

    @property
    def panel_w(self) -> float:
        return ROW_LABELS_W + CELL_W * self.n_cols_cells

    @property
    def panel_h(self) -> float:
        return PANEL_TITLE_H + CELL_H * self.n_rows_cells + COL_LABELS_H

    @property
    def size(self) -> tuple[float, float]:
        w = 2 * MARGIN + len(self.cols) * self.panel_w + (len(self.cols) - 1) * GAP_W
        h = 2 * MARGIN + HEADER_H + len(self.rows) * self.panel_h + (len(self.rows) - 1) * GAP_H
        return max(w, 6.0), h


def _layout(grids: dict[Panel, PanelGrid]) -> _Layout:
    rows, cols = [], []
    for p in grids:  # grids are already in display order
        if (p.family, p.op, p.series) not in rows:
            rows.append((p.family, p.op, p.series))
        if (p.dtype, p.direction) not in cols:
            cols.append((p.dtype, p.direction))
    cols.sort(key=lambda c: panel_sort_key(Panel("", "", "", *c)))
    return _Layout(
        rows, cols,
        n_rows_cells=max(len(g.rows) for g in grids.values()),
        n_cols_cells=max(len(g.cols) for g in grids.values()),
    )


def title_text(run: Run) -> str:
    """Device, torch, fault model, scale and date: what every recorded figure states."""
    m = run.manifest
    scale = f"2^{m.scale_bits}" if m.scale_bits is not None else "?"
    return (
        f"Boundary map - {m.device.name} ({m.device.type}), torch {m.torch}, "
        f"fault model {m.fault_model}, scale 2^32 -> {scale}, {m.date}"
    )


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
    lay = _layout(grids)
    fw, fh = lay.size
    fig = Figure(figsize=(fw, fh))
    fig.text(0.5, 1 - MARGIN / fh, title_text(run), ha="center", va="top", fontsize=10, weight="bold")
    fig.text(0.5, 1 - (MARGIN + 0.3) / fh, f"{progress_text(run)}; rows: layout, columns: size "
             "(crossing tensor's elements, increasing); several seeds in a cell show the worst",
             ha="center", va="top", fontsize=8)
    handles = [Patch(facecolor=c, edgecolor="0.5", label=STATUS_LABELS[s]) for s, c in STATUS_COLOURS.items()]
    fig.legend(handles=handles, loc="upper center", ncol=len(handles), fontsize=8, frameon=False,
               bbox_to_anchor=(0.5, 1 - (MARGIN + 0.5) / fh))
    for panel, grid in grids.items():
        i = lay.rows.index((panel.family, panel.op, panel.series))
        j = lay.cols.index((panel.dtype, panel.direction))
        # Panel box in inches from the figure's bottom-left corner.
        x0 = MARGIN + j * (lay.panel_w + GAP_W) + ROW_LABELS_W
        top = fh - MARGIN - HEADER_H - i * (lay.panel_h + GAP_H) - PANEL_TITLE_H
        w, h = CELL_W * len(grid.cols), CELL_H * len(grid.rows)
        ax = fig.add_axes((x0 / fw, (top - h) / fh, w / fw, h / fh))
        _draw_panel(ax, panel, grid)
    return fig


def _draw_panel(ax, panel: Panel, grid: PanelGrid) -> None:
    ax.imshow(grid_rgb(grid), aspect="auto", interpolation="nearest")
    ax.set_title(panel.title, fontsize=8, loc="left", pad=3)
    ax.set_xticks(range(len(grid.cols)), grid.cols, rotation=45, ha="right", fontsize=7)
    ax.set_yticks(range(len(grid.rows)), grid.rows, fontsize=7)
    ax.tick_params(length=0)
    # Thin lines between cells, so white "not run" cells still read as cells.
    ax.set_xticks(np.arange(-0.5, len(grid.cols)), minor=True)
    ax.set_yticks(np.arange(-0.5, len(grid.rows)), minor=True)
    ax.grid(which="minor", color="0.6", linewidth=0.5)
    ax.tick_params(which="minor", length=0)
    for i, row in enumerate(grid.cells):
        for j, status in enumerate(row):
            if STATUS_MARKS[status]:
                ax.text(j, i, STATUS_MARKS[status], ha="center", va="center", fontsize=7, color="white",
                        weight="bold")


def save_figure(fig: Figure, path: Path) -> Path:
    """Write ``fig`` as PNG, lowering dpi so no side passes :data:`MAX_PIXELS`."""
    FigureCanvasAgg(fig)
    dpi = min(DPI, MAX_PIXELS / max(fig.get_size_inches()))
    fig.savefig(path, format="png", dpi=dpi, facecolor="white")
    return path


def save_boundary_maps(run: Run, out_dir: Path) -> dict[str, Path]:
    """Write ``boundary_map.png`` and, for a big map, ``boundary_map_<family>.png`` each.

    Returns name -> path: ``boundary_map`` and ``boundary_map_<family>``.
    """
    grids = boundary_grid(run)
    out = {"boundary_map": save_figure(render_boundary_map(run, grids), out_dir / "boundary_map.png")}
    if len(grids) > MAX_PANELS_PER_FILE:
        families = sorted({p.family for p in grids})
        for fam in families:
            sub = {p: g for p, g in grids.items() if p.family == fam}
            name = f"boundary_map_{_safe(fam)}"
            out[name] = save_figure(render_boundary_map(run, sub), out_dir / f"{name}.png")
    return out


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)
