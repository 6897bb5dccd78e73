"""The HTML report: one self-contained page (inline CSS, images as data URIs).

Sections: the manifest facts (versions, device, thresholds, fault model, seeds, command,
tolerances), the counts, skip reasons and error messages grouped, the boundary map(s),
the evidence of every wrong and error case, then a table of all cases. Nothing is
fetched from anywhere, so the page can be mailed, attached to an issue or archived
next to the run.
"""

from __future__ import annotations

import base64
import json
from html import escape
from pathlib import Path

from ...verdict import Status
from .cliffs import CAPTION, COLUMNS, cliffs
from .counts import STATUS_ORDER, by_op, count, counts_per_op, plain_repro, progress_text, reasons, wall_text
from .grid import STATUS_COLOURS
from .run import Run
from .waiting import CAPTION as WAITING_CAPTION, COLUMNS as WAITING_COLUMNS, total_line, waiting

_CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.6em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: 0.5em 0; }
th, td { border: 1px solid #ddd; padding: 2px 8px; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
code, .id { font-family: ui-monospace, monospace; font-size: 0.92em; }
.st { font-weight: bold; color: #fff; padding: 0 6px; border-radius: 3px; }
.note { color: #8a6d00; }
img { max-width: 100%; border: 1px solid #ddd; }
pre { background: #f7f7f7; padding: 6px; overflow-x: auto; font-size: 0.85em; margin: 0; }
"""


def render_html(run: Run, images: dict[str, Path] | None = None) -> str:
    """The whole page as a string; ``images`` (name -> PNG path) are embedded inline."""
    m = run.manifest
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>kernelaudit run {escape(str(run.path))}</title>",
        f"<style>{_CSS}{_status_css()}</style></head><body>",
        f"<h1>kernelaudit run <code>{escape(str(run.path))}</code></h1>",
        f"<p>{escape(progress_text(run))}; started {escape(m.started or '?')}.</p>",
        *(f'<p class="note">note: {escape(n)}</p>' for n in run.notes),
        "<h2>Run</h2>", _facts(run),
        "<h2>Verdicts</h2>", _counts(run), _reasons(run),
    ]
    if images:
        parts.append("<h2>Boundary map</h2>")
        for name, path in images.items():
            data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
            parts.append(f'<p><img alt="{escape(name)}" src="data:image/png;base64,{data}"></p>')
    parts += ["<h2>Wrong and error cases</h2>", _bad_cases(run)]
    steep = cliffs(run)
    if steep:
        parts += ["<h2>Performance cliffs</h2>", f"<p>{escape(CAPTION[0].upper() + CAPTION[1:])}.</p>",
                  _table(list(COLUMNS), [[escape(x) for x in c.row()] for c in steep], numeric={5, 7, 8})]
    slow = waiting(run)
    if slow:
        parts += ["<h2>Waiting on a longer timeout</h2>",
                  f"<p>{escape(WAITING_CAPTION[0].upper() + WAITING_CAPTION[1:])}: {escape(total_line(slow))}.</p>",
                  _table(list(WAITING_COLUMNS), [[escape(x) for x in w.row()] for w in slow],
                         numeric={1, 2, 3, 4, 5, 6})]
    parts += ["<h2>Tolerances</h2>", _tolerances(run)]
    parts += ["<h2>All cases</h2>", _all_cases(run), "</body></html>"]
    return "\n".join(parts)


def _status_css() -> str:
    out = []
    for s in Status:
        bg = STATUS_COLOURS[s]
        out.append(f".st-{s.value} {{ background: {bg}; }}")
    return "\n".join(out)


def _badge(status: Status) -> str:
    return f'<span class="st st-{status.value}">{status.value}</span>'


def _table(header: list[str] | None, rows: list[list[str]], numeric: set[int] = frozenset()) -> str:
    """A table from cells that are already HTML; ``numeric`` column indexes align right."""
    head = "<thead><tr>" + "".join(f"<th>{escape(h)}</th>" for h in header) + "</tr></thead>" if header else ""
    body = "".join(
        "<tr>" + "".join(f'<td class="n">{c}</td>' if i in numeric else f"<td>{c}</td>" for i, c in enumerate(row))
        + "</tr>"
        for row in rows
    )
    return f"<table>{head}<tbody>{body}</tbody></table>"


def _facts(run: Run) -> str:
    m = run.manifest
    mem = f"{m.device.memory_bytes / 2**30:.1f} GiB" if m.device.memory_bytes else "-"
    thresholds = ", ".join(f"{k} = {v:,}" if isinstance(v, int) else f"{k} = {v}" for k, v in m.thresholds.items())
    rows = [
        ("kernelaudit", m.kernelaudit), ("torch", m.torch), ("triton", m.triton or "-"),
        ("python", m.python), ("os", m.os), ("driver", m.driver or "-"),
        ("device", f"{m.device.name} ({m.device.type}), {mem}"),
        ("fault model", m.fault_model), ("thresholds", thresholds or "-"),
        ("seeds", ", ".join(map(str, m.seeds)) or "-"),
        ("planned cases", "-" if m.planned_cases is None else str(m.planned_cases)),
        ("started", m.started or "-"), ("wall time", wall_text(run) or "-"),
        ("command", " ".join(m.argv) or "-"),
    ]
    known = {"kernelaudit", "torch", "triton", "python", "os", "driver", "device", "thresholds", "fault_model",
             "tolerances", "seeds", "started", "argv", "plan"}
    rows += [(k, json.dumps(v)) for k, v in m.raw.items() if k not in known]  # fields added later still show
    return _table(None, [[f"<b>{escape(k)}</b>", f"<code>{escape(str(v))}</code>"] for k, v in rows])


def _counts(run: Run) -> str:
    header = ["op", *(s.value for s in STATUS_ORDER), "total"]
    rows = [[escape(op), *(str(c[s]) for s in STATUS_ORDER), str(c.total)] for op, c in counts_per_op(run).items()]
    total = count(run.records)
    rows.append(["<b>all</b>", *(f"<b>{total[s]}</b>" for s in STATUS_ORDER), f"<b>{total.total}</b>"])
    return _table(header, rows, numeric=set(range(1, len(header))))


def _reasons(run: Run) -> str:
    out = []
    for status, title in ((Status.SKIPPED, "Skipped, by reason"), (Status.ERROR, "Errors, by message")):
        grouped = reasons(run, status)
        if grouped:
            rows = [[str(n), escape(msg)] for msg, n in grouped]
            out.append(f"<h3>{title}</h3>" + _table(["cases", "message (one example)"], rows, numeric={0}))
    return "\n".join(out)


def _anchors(run: Run) -> dict[str, str]:
    """Record key -> a unique HTML id for its evidence row (case ids hold ``/ ^ + *``)."""
    return {r.key: f"case-{i}" for i, r in enumerate(run.records)}


def _bad_cases(run: Run) -> str:
    bad = run.with_status(Status.WRONG, Status.ERROR)
    if not bad:
        return "<p>None.</p>"
    anchors = _anchors(run)
    out = []
    for op, records in by_op(bad).items():
        c = count(records)
        out.append(f"<h3>{escape(op)}: {c[Status.WRONG]} wrong, {c[Status.ERROR]} error</h3>")
        rows = []
        # Wrong (silent) before error (loud), as in the terminal summary.
        for r in sorted(records, key=lambda r: r.status is not Status.WRONG):
            details = ""
            if r.verdict.details:
                text = json.dumps(r.verdict.details, indent=1, default=str)
                details = f"<details><summary>details</summary><pre>{escape(text)}</pre></details>"
            rows.append([
                _badge(r.status),
                f'<span class="id" id="{anchors[r.key]}">{escape(r.label(seed=run.several_seeds))}</span>',
                f"<code>{escape(r.shapes_text)}</code>", "-" if r.batch is None else str(r.batch),
                escape(r.verdict.explain()) + details,
            ])
        out.append(_table(["status", "case", "shapes", "batch", "evidence"], rows, numeric={3}))
        code = plain_repro(records, run.manifest.device.type or "cuda")
        if code:
            out.append(f"<details><summary>plain torch, the first case</summary><pre>{escape(code)}</pre></details>")
    return "\n".join(out)


def _tolerances(run: Run) -> str:
    tol = run.manifest.tolerances
    if not tol:
        return "<p>None recorded.</p>"
    rows = [
        [f"<code>{escape(key)}</code>",
         "<br>".join(f"<code>{escape(metric)}</code> {_tol(value)}" for metric, value in metrics.items())]
        for key, metrics in sorted(tol.items())
    ]
    return _table(["op/dtype/layout/direction", "metric tolerance"], rows)


def _tol(value: object) -> str:
    return f"{value:.3g}" if isinstance(value, (int, float)) else escape(str(value))


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"


def _all_cases(run: Run) -> str:
    rows = []
    anchors = _anchors(run)
    for r in run.records:
        v = r.verdict
        case_id = escape(r.id)
        if r.status in (Status.WRONG, Status.ERROR):
            case_id = f'<a href="#{anchors[r.key]}">{case_id}</a>'
        rows.append([
            f'<span class="id">{case_id}</span>', escape(r.dtype), escape(r.layout), escape(r.series),
            escape(r.size), escape(r.direction), "-" if r.seed is None else str(r.seed),
            "-" if r.batch is None else str(r.batch), _badge(r.status),
            escape(v.metric or "-"), _num(v.value), _num(v.tolerance), _num(r.elapsed_s),
        ])
    header = ["case", "dtype", "layout", "series", "size", "dir", "seed", "batch", "status", "metric", "value",
              "tol", "seconds"]
    return _table(header, rows, numeric={6, 7, 10, 11, 12})
