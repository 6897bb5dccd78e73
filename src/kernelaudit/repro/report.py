"""How invariance reports are shown: a terminal summary, JSON, a figure."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from .invariance import PROBES, Report

_NAMES = {"run": "run to run", "batch": "batch size", "position": "batch position"}


def _line(report: Report, probe: str) -> str:
    probes = report.of(probe)
    if not probes:
        return f"  {_NAMES[probe]:<15} not probed"
    bad = [p for p in probes if not p.equal]
    if not bad:
        settings = ", ".join(str(p.setting) for p in probes)
        return f"  {_NAMES[probe]:<15} identical bits ({probe} {settings})"
    start = report.diverges_from(probe)
    where = (f"diverges from {probe} = {start} on" if start is not None
             else f"diverges at {probe} = {', '.join(str(p.setting) for p in bad)}")
    worst = max(bad, key=lambda p: p.max_ulps)
    return (f"  {_NAMES[probe]:<15} {where}: up to {worst.max_ulps} ULP, "
            f"{worst.mismatched} / {worst.total} elements at {probe} = {worst.setting}, first at {worst.first_index}")


def summary(report: Report) -> str:
    """A few lines: the verdict, then one line per probe kind."""
    head = f"{report.subject} on {report.device} ({report.dtype or '?'})"
    if report.error:
        return f"{head}: could not judge: {report.error}"
    verdict = "invariant" if report.invariant else "NOT invariant"
    return "\n".join([f"{head}: {verdict}"] + [_line(report, p) for p in PROBES])


def write_json(reports: Sequence[Report], path: Path, **meta) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**meta, "reports": [r.to_json() for r in reports]}, indent=1) + "\n")


def figure(reports: Sequence[Report], path: Path, title: str = "") -> None:
    """Row 0's distance from batch 1, in ULPs, against the batch size: one line per subject."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.4))
    for r in reports:
        ps = sorted(r.of("batch"), key=lambda p: p.setting)
        if ps:
            ax.plot([p.setting for p in ps], [p.max_ulps for p in ps], marker="o", label=r.subject)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch size M")
    ax.set_ylabel("row 0 vs batch 1 (max ULP)")
    ax.set_title(title, fontsize=9)
    ax.legend(frameon=False, fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
