"""Writing every report file of a run: the boundary map(s) and the HTML page."""

from __future__ import annotations

from pathlib import Path

from ...errors import InvalidArgument
from .figure import save_boundary_maps
from .html import render_html
from .run import load_run


def write_reports(run_dir: str | Path, out_dir: str | Path | None = None) -> dict[str, Path]:
    """Load the run at ``run_dir`` and write its reports into ``out_dir`` (default: ``run_dir``).

    Writes ``boundary_map.png`` (plus ``boundary_map_<family>.png`` per op family for a
    big map; for a map too big to read as one image, ``boundary_map.png`` is the overview
    and a big family comes in parts: :func:`~.figure.save_boundary_maps`) and
    ``report.html``, which embeds those images. Returns name -> path, with the names
    ``boundary_map``, ``boundary_map_overview``, ``boundary_map_<family>[_<i>]`` and ``report``.
    """
    run = load_run(run_dir)
    out = Path(run_dir) if out_dir is None else Path(out_dir)
    if out.exists() and not out.is_dir():
        raise InvalidArgument(f"Cannot have out_dir={str(out)!r}: it exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    paths = save_boundary_maps(run, out)
    html = out / "report.html"
    # The per-family maps, when there are any, say the same as the big one, readably (an
    # overview, when the big one is one, says something else and is shown first).
    images = {k: p for k, p in paths.items() if k != "boundary_map"} or paths
    html.write_text(render_html(run, images=images), encoding="utf-8")
    return {**paths, "report": html}
