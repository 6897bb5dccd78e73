"""Renders a `conform int8` record: terminal text, an HTML page and figures."""

from __future__ import annotations

import html
import json
from pathlib import Path

from .checks import CHECKS


SHORT = {"torch_testing_default": "tt_default", "int8_scaled_mm_suite": "int8_1e-1/1", "allclose_1e-1": "1e-1",
         "kernelbench_1e-2": "kb_1e-2", "kernelbench_1e-4": "kb_1e-4", "one_bf16_spacing": "1_bf16_sp",
         "bit_exact": "bit_exact"}


def blindness_lines(result: dict) -> list[str]:
    """The blindness table as fixed-width text: one row per (fault, implementation),
    each check's column ``caught/cases`` (cases where the fault changed the output)."""
    names = list(CHECKS)
    head = f"{'fault':26} {'impl':6} {'chg/cases':>9} {'bf16 sp(norm)':>13} " + " ".join(
        f"{SHORT.get(n, n)[:13]:>13}" for n in names)
    lines = ["columns: " + ", ".join(f"{SHORT.get(n, n)} = {n}" for n in names), head]
    for r in result["blindness"]:
        cells = " ".join(f"{r['caught'][n]:>6}/{r['changed_cases']:<6}" for n in names)
        tag = " (control)" if r["control"] else ""
        lines.append(f"{r['fault'][:26]:26} {r['implementation']:6} {r['changed_cases']:>4}/{r['cases']:<4} "
                     f"{r['max_bf16_spacings']:>13.3g} {cells}{tag}")
    return lines


def text_report(result: dict) -> str:
    env = result["env"]
    p = result["pow2"]
    out = [f"kernelaudit conform int8 on {env['device_name']} (torch {env['torch']}, triton {env['triton']}, "
           f"{env['date']}): {result['cases']} cases, shapes {result['shapes']}", "",
           "False rejections of the correct implementations (failing cases per check; goal 0):"]
    for impl, counts in result["false_rejections"].items():
        out.append(f"  {impl:7} " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    if result.get("false_rejections_vs_exact"):
        out += ["", f"The same correct implementations against the single-rounding ideal instead of their own "
                    f"recipe ({result['cases_vs_exact']} cases): tight checks now reject them:"]
        for impl, counts in result["false_rejections_vs_exact"].items():
            out.append(f"  {impl:7} " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    for impl, why in result.get("not_run", {}).items():
        out.append(f"  {impl:7} not run: {why}")
    out += ["", "Blindness table: cases where each check saw the fault / cases where the fault changed the output",
            *blindness_lines(result), "",
            f"Power-of-two scales: {p['pow2_cases_bit_identical']} / {p['pow2_cases']} cases bit-identical across "
            f"the reference and every implementation in every scale order",
            f"Free scales: {p['free_cases_bit_identical']} / {p['free_cases']} cases bit-identical; "
            f"{p['free_differing_elements']} differing output elements in all"]
    if p["accuracy_cost"]:
        ratios = [c["pow2_rel_error"] / c["free_rel_error"] for c in p["accuracy_cost"] if c["free_rel_error"]]
        out.append(f"Accuracy cost of power-of-two scales (relative error vs the float product, pow2 / free): "
                   f"median {sorted(ratios)[len(ratios) // 2]:.2f}x over {len(ratios)} cases")
    return "\n".join(out)


def blindness_figure(result: dict, path) -> None:
    """Heatmap: rows (fault, implementation), columns checks, cell = fraction of the
    changed cases the check caught."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    rows = [r for r in result["blindness"] if r["changed_cases"]]
    names = list(CHECKS)
    data = np.array([[r["caught"][n] / r["changed_cases"] for n in names] for r in rows])
    fig, ax = plt.subplots(figsize=(8, 0.32 * len(rows) + 1.6))
    ax.imshow(data, cmap="RdYlGn", vmin=0, vmax=1, aspect="auto")
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
    ax.set_yticks(range(len(rows)), [f"{r['fault']} [{r['implementation']}]" for r in rows], fontsize=7)
    for i, r in enumerate(rows):
        for j, n in enumerate(names):
            ax.text(j, i, f"{r['caught'][n]}/{r['changed_cases']}", ha="center", va="center", fontsize=6)
    ax.set_title(f"Which check sees which fault ({result['env']['device_name']})", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(result: dict, out_dir) -> list[Path]:
    """``conform_int8.json``, ``conform_int8.txt``, ``conform_int8.html`` and
    ``blindness.png`` under ``out_dir``; returns the paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    text = text_report(result)
    paths = [out / "conform_int8.json", out / "conform_int8.txt", out / "conform_int8.html", out / "blindness.png"]
    paths[0].write_text(json.dumps(result, indent=1) + "\n")
    paths[1].write_text(text + "\n")
    blindness_figure(result, paths[3])
    paths[2].write_text("<!doctype html><meta charset=utf-8><title>kernelaudit conform int8</title>"
                        f"<h1>kernelaudit conform int8</h1><pre>{html.escape(text)}</pre>"
                        f"<img src='{paths[3].name}' alt='blindness table'>\n")
    return paths
