"""Reports of a sweep run: terminal summary, boundary-map PNG, self-contained HTML page.

Everything reads a run store (``manifest.json`` + ``verdicts.jsonl``) through
:func:`load_run`; nothing here runs a case or writes the store.

    run = load_run("runs/2026-12-02-mps")
    print_summary(run)                    # rich tables in the terminal
    write_reports("runs/2026-12-02-mps")  # boundary_map.png + report.html in the run dir
"""

from .figure import render_boundary_map
from .grid import STATUS_COLOURS, Panel, PanelGrid, boundary_grid
from .html import render_html
from .run import CaseRecord, Device, Manifest, Run, RunStoreError, load_run
from .summary import print_summary
from .write import write_reports

__all__ = [
    "STATUS_COLOURS",
    "CaseRecord",
    "Device",
    "Manifest",
    "Panel",
    "PanelGrid",
    "Run",
    "RunStoreError",
    "boundary_grid",
    "load_run",
    "print_summary",
    "render_boundary_map",
    "render_html",
    "write_reports",
]
