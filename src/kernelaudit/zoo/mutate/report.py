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


def print_suites(sm: dict[str, Any]) -> None:
    """The suite curve (greedy and exact), held-out rates and the suites' false rejections (rich)."""
    from rich.console import Console
    from rich.table import Table

    con = Console(highlight=False, soft_wrap=True)
    if not sm["problems"]:
        con.print("suites: no per-input kill data in this campaign")
        return
    t = Table("k", "greedy", "exact", "held out (exact)", "worst split", "all splits", title=f"minimal suites: killable mutants killed with k inputs "
              f"per problem ({sm['problems']} problems, {sm['killable']} killable by some input)")
    held = {h["k"]: h for h in sm["held_out"]}
    for g, e in zip(sm["curve_greedy"], sm["curve_exact"]):
        h = held.get(g["k"])
        t.add_row(str(g["k"]), f"{_pct(g['rate'])} ({g['killed']}/{g['killable']})",
                  f"{_pct(e['rate'])} ({e['killed']}/{e['killable']})",
                  f"{_pct(h['rate'])} ({h['killed']}/{h['killable']})" if h else "-",
                  f"{_pct(h['min_rate'])} ({h['min_split']})" if h and h.get("min_rate") is not None else "-",
                  _pct(h.get("all_rate")) if h else "-")
    con.print(t)
    con.print("held out: suites chosen on half of the operators' mutants, scored on the other half's; "
              "'held out' is the default split (both directions pooled), 'worst split' the lowest of every "
              "split and direction measured, 'all splits' every split pooled")
    con.print(f"mutants killed by some oracle: {sm['killable_by_oracles']}; by some suite-candidate input: "
              f"{sm['killable']} (the rest need an oracle no input replays: tamper, static, size-1 shapes)")
    fr = sm["suite_false_rejections_k2"]
    con.print(f"suite false rejections (k=2) of {sm['correct_judged']} correct candidates: {len(fr)}"
              + (f": {', '.join(fr[:8])}" if fr else ""))
    inel = sum(len(v) for v in sm["ineligible_inputs"].values())
    if inel:
        con.print(f"inputs left out of suites because a correct candidate fails them: {inel} "
                  f"(in {len(sm['ineligible_inputs'])} subjects; scores.json lists them)")


def suite_curve(sm: dict[str, Any], path: Path) -> None:
    """Share of killable mutants killed against the suite size k (greedy, exact, held out), as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for key, label in (("curve_greedy", "greedy"), ("curve_exact", "exact (ILP)")):
        pts = [p for p in sm[key] if p["rate"] is not None]
        ax.plot([p["k"] for p in pts], [100 * p["rate"] for p in pts], marker="o", label=label)
    held = [h for h in sm["held_out"] if h["rate"] is not None]
    ax.plot([h["k"] for h in held], [100 * h["rate"] for h in held], "s", label="held-out operators (exact)")
    ax.axhline(99, color="grey", lw=0.8, ls="--", label="goal: 99%")
    ax.set_xticks([p["k"] for p in sm["curve_exact"]])
    ax.set_ylim(0, 102)
    ax.set_xlabel("inputs per problem (k)")
    ax.set_ylabel("killable mutants killed (%)")
    ax.set_title(f"suite curve: {sm['problems']} problems, {sm['killable']} killable mutants")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_report(directory: Path) -> dict[str, Path]:
    """scores.json, kill_matrix.csv, heatmap.png and report.html in ``directory``; their paths."""
    directory = Path(directory)
    manifest, records, s = load(directory)
    out = {"scores": directory / "scores.json", "matrix": directory / "kill_matrix.csv",
           "heatmap": directory / "heatmap.png", "html": directory / "report.html"}
    from .suites import summary as suite_summary

    sm = suite_summary(records)
    out["scores"].write_text(json.dumps({**s.to_json(), "suites": sm}, indent=2))
    suite_html = "<h2>Minimal suites</h2><p>no per-input kill data</p>"
    if sm["problems"]:
        out["suite_curve"] = directory / "suite_curve.png"
        suite_curve(sm, out["suite_curve"])
        simg = base64.b64encode(out["suite_curve"].read_bytes()).decode()
        srows = "".join(f"<tr><td>{g['k']}</td><td>{_pct(g['rate'])}</td><td>{_pct(e['rate'])}</td></tr>"
                        for g, e in zip(sm["curve_greedy"], sm["curve_exact"]))
        held = "; ".join(f"k={h['k']}: {_pct(h['rate'])} ({h['killed']}/{h['killable']})" for h in sm["held_out"])
        fr = sm["suite_false_rejections_k2"]
        suite_html = (f"<h2>Minimal suites</h2><p>{sm['problems']} problems, {sm['killable']} mutants killable by some "
                      f"input. Held out (chosen on half the operators, measured on the other): {held}. False "
                      f"rejections of the k=2 suites: {len(fr)} of {sm['correct_judged']} correct candidates"
                      f"{(': ' + html.escape(', '.join(fr))) if fr else ''}.</p><table><tr><th>k</th><th>greedy</th>"
                      f"<th>exact</th></tr>{srows}</table><img alt='suite curve' src='data:image/png;base64,{simg}'>")
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
            f"<h2>False rejections</h2><table><tr><th>oracle</th><th>correct candidates rejected</th><th>of</th></tr>"
            + "".join(f"<tr><td>{html.escape(c)}</td><td>{len(s.false_rejections.get(c, []))}</td>"
                      f"<td>{s.correct_judged}</td></tr>" for c in s.columns)
            + f"</table><ul>{fr or '<li>none</li>'}</ul>{suite_html}")
    out["html"].write_text(page)
    return out
