"""Reports of a campaign: terminal summary, kill matrix CSV, heat-map PNG and one HTML page."""

from __future__ import annotations

import base64
import csv
import html
import json
from pathlib import Path
from typing import Any

from .operators import FAMILIES
from .scores import Scores, score
from .store import CampaignStore
from .worker import OUTCOMES


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def load(directory: Path) -> tuple[dict[str, Any], list[dict[str, Any]], Scores]:
    """(manifest, records, scores) of a campaign directory."""
    store = CampaignStore.open(directory)
    manifest = store.manifest()
    records = store.records()
    return manifest, records, score(records, manifest["columns"])


def print_summary(manifest: dict[str, Any], s: Scores) -> None:
    """Outcomes, kill rate per oracle, kill rate per family x oracle, false rejections (rich)."""
    from rich.console import Console
    from rich.table import Table

    con = Console(highlight=False, soft_wrap=True)
    total = sum(s.outcomes.values())
    con.print(f"[bold]mutation campaign[/] {manifest.get('device')} small={manifest.get('small')}: "
              f"{total} mutants of {s.subjects} subjects; " + ", ".join(f"{o} {s.outcomes.get(o, 0)}" for o in OUTCOMES))
    con.print(f"scored (killed or survived): {s.scored}; killable (killed by some oracle): {s.killable}; "
              f"correct candidates judged: {s.correct_judged}")
    t = Table("oracle", "kill rate", "killed", "survived", "miss rate", "false rejections", "subjects left out")
    for c in s.columns:
        k = s.kill[c]
        t.add_row(c, _pct(k.rate), str(k.killed), str(k.survived), _pct(None if k.rate is None else 1 - k.rate),
                  str(len(s.false_rejections.get(c, []))), str(len(s.invalid.get(c, []))))
    con.print(t)
    fams = [f for f in FAMILIES if f in s.kill_by_family]
    t = Table("family", *s.columns, title="kill rate per operator family")
    for f in fams:
        t.add_row(f, *[_pct(s.kill_by_family[f].get(c).rate) if c in s.kill_by_family[f] else "-"
                       for c in s.columns])
    con.print(t)
    for c, items in s.false_rejections.items():
        if items:
            con.print(f"[red]{c}[/] rejects correct candidates: {', '.join(items[:8])}"
                      + (f" (+{len(items) - 8})" if len(items) > 8 else ""))
    for sid, err in list(s.subject_errors.items())[:10]:
        con.print(f"[yellow]could not judge[/] {sid}: {err}", markup=True)


def write_kill_matrix(records: list[dict[str, Any]], columns: list[str], path: Path) -> None:
    """One row per mutant: id, subject, operator, family, outcome, then each oracle's result."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["mutant", "subject", "operator", "family", "outcome", *columns])
        for r in records:
            if r.get("type") == "mutant":
                w.writerow([r["id"], r.get("subject"), r.get("operator"), r.get("family"), r["outcome"],
                            *[r.get("oracles", {}).get(c, "") for c in columns]])


def heat_map(s: Scores, path: Path) -> None:
    """Kill rate per operator family (rows) x oracle (columns), as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fams = [f for f in FAMILIES if f in s.kill_by_family]
    data = np.full((len(fams), len(s.columns)), np.nan)
    for i, f in enumerate(fams):
        for j, c in enumerate(s.columns):
            r = s.kill_by_family[f].get(c)
            if r is not None and r.rate is not None:
                data[i, j] = 100 * r.rate
    fig, ax = plt.subplots(figsize=(1.1 * len(s.columns) + 2, 0.5 * len(fams) + 1.5))
    im = ax.imshow(data, vmin=0, vmax=100, cmap="RdYlGn", aspect="auto")
    ax.set_xticks(range(len(s.columns)), s.columns, rotation=40, ha="right")
    ax.set_yticks(range(len(fams)), [f"{f} ({sum(s.kill_by_family[f][c].scored for c in s.columns[:1] if c in s.kill_by_family[f])})"
                                     for f in fams])
    for i in range(len(fams)):
        for j in range(len(s.columns)):
            if not np.isnan(data[i, j]):
                ax.text(j, i, f"{data[i, j]:.0f}", ha="center", va="center", fontsize=8)
    fig.colorbar(im, ax=ax, label="mutants killed (%)")
    ax.set_title("kill rate: operator family x oracle")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_report(directory: Path) -> dict[str, Path]:
    """scores.json, kill_matrix.csv, heatmap.png and report.html in ``directory``; their paths."""
    directory = Path(directory)
    manifest, records, s = load(directory)
    out = {"scores": directory / "scores.json", "matrix": directory / "kill_matrix.csv",
           "heatmap": directory / "heatmap.png", "html": directory / "report.html"}
    out["scores"].write_text(json.dumps(s.to_json(), indent=2))
    write_kill_matrix(records, s.columns, out["matrix"])
    heat_map(s, out["heatmap"])
    img = base64.b64encode(out["heatmap"].read_bytes()).decode()
    rows = "".join(f"<tr><td>{html.escape(c)}</td><td>{_pct(s.kill[c].rate)}</td><td>{s.kill[c].killed}</td>"
                   f"<td>{s.kill[c].survived}</td><td>{len(s.false_rejections.get(c, []))}</td></tr>"
                   for c in s.columns)
    fr = "".join(f"<li>{html.escape(c)}: {html.escape(', '.join(v))}</li>" for c, v in s.false_rejections.items() if v)
    page = (f"<!doctype html><meta charset=utf-8><title>kernelaudit mutate</title>"
            f"<style>body{{font-family:sans-serif;max-width:70em;margin:2em auto}}td,th{{padding:2px 8px}}</style>"
            f"<h1>Mutation campaign</h1><p>{html.escape(str(manifest.get('device')))}, small={manifest.get('small')}, "
            f"{sum(s.outcomes.values())} mutants of {s.subjects} subjects: "
            + html.escape(", ".join(f"{o} {s.outcomes.get(o, 0)}" for o in OUTCOMES)) +
            f"</p><table><tr><th>oracle</th><th>kill rate</th><th>killed</th><th>survived</th>"
            f"<th>false rejections</th></tr>{rows}</table><h2>Kill matrix</h2>"
            f"<img alt='kill rate heat map' src='data:image/png;base64,{img}'>"
            f"<h2>False rejections</h2><ul>{fr or '<li>none</li>'}</ul>")
    out["html"].write_text(page)
    return out
