"""Reports of a sweep run: terminal summary, boundary-map PNG, self-contained HTML page.

Everything reads a run store (``manifest.json`` + ``verdicts.jsonl``) through
:func:`load_run`; nothing here runs a case or writes the store.

    run = load_run("runs/2026-12-02-mps")
    print_summary(run)                    # rich tables in the terminal
    write_reports("runs/2026-12-02-mps")  # boundary_map.png + report.html in the run dir

Names load on first use: reading a store (``run``) imports no matplotlib.
"""

from __future__ import annotations

from ..._lazy import lazy_exports

_EXPORTS = {
    "render_boundary_map": "figure",
    "STATUS_COLOURS": "grid",
    "Panel": "grid",
    "PanelGrid": "grid",
    "boundary_grid": "grid",
    "render_html": "html",
    "CaseRecord": "run",
    "Device": "run",
    "Manifest": "run",
    "Run": "run",
    "RunStoreError": "run",
    "load_run": "run",
    "print_summary": "summary",
    "write_reports": "write",
}
__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
