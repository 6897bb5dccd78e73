"""The README lists every finding of the full grid's run store of record: each op with a
wrong answer, or an error that says something about its size, is named there (issue:
every wrong or error case listed, with its reproduction and upstream lead)."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from kernelaudit.sweep.judge.execution import DEVICE_ALLOC_FAILED
from kernelaudit.sweep.rules_out import unjudged
from kernelaudit.sweep.runfile import supersedes

ROOT = Path(__file__).resolve().parents[2]
#: The full grid's run store of record (cumulative: every segment so far).
STORE = ROOT / "benchmarks/results/2026-12-05-h100-full-grid-segments-6-8-and-decode/store/verdicts.jsonl.gz"
#: Suffixes of kernelaudit's own recipes of an op (its meta-derived or flat variant, the
#: dim it reduces, the aten overload): the README names the op.
RECIPE_SUFFIXES = {"meta", "flat", "dim_last", "default", "decomposed"}
PREFIXES = ("nn.functional.", "torch.ops.aten.")


def findings(path: Path) -> dict[str, list[str]]:
    """op -> ids of its cases whose last verdict is a finding: wrong, or an error that is
    neither unjudged (a timeout, kernelaudit's own failure, a failed calibration) nor
    CUDA out of memory inside a library (a memory skip since)."""
    latest = {}
    with gzip.open(path, "rt") as f:
        for line in f:
            r = json.loads(line)
            key = r["case"]["id"]
            if key not in latest or supersedes(r, latest[key]):   # as the store reads it
                latest[key] = r
    out: dict[str, list[str]] = {}
    for r in latest.values():
        v = r["verdict"]
        if v["status"] == "wrong" or (v["status"] == "error" and not unjudged(v)
                                      and DEVICE_ALLOC_FAILED not in (v.get("message") or "")):
            out.setdefault(r["case"]["op"], []).append(r["case"]["id"])
    return out


def names(op: str) -> list[str]:
    """The words the README must hold for ``op``: its name without the namespaces and
    recipe suffixes, split at dots (``nn.functional.interpolate.area``: interpolate, area)."""
    for p in PREFIXES:
        op = op.removeprefix(p)
    return [w for w in op.split(".") if w not in RECIPE_SUFFIXES]


@pytest.mark.skipif(not STORE.exists(), reason="the full grid's store of record is not in this checkout")
def test_every_finding_of_the_full_grid_is_named_in_the_readme():
    readme = (ROOT / "README.md").read_text()
    found = findings(STORE)
    assert len(found) > 30   # the store holds the grid's findings: a check that can fail
    missing = {op: ids[:2] for op, ids in found.items()
               if not all(re.search(rf"(?<![\w]){re.escape(w)}(?![\w])", readme) for w in names(op))}
    assert not missing, f"findings the README does not name: {missing}"


def test_the_readme_check_reads_names_as_users_write_them():
    assert names("nn.functional.interpolate.nearest-exact") == ["interpolate", "nearest-exact"]
    assert names("torch.ops.aten._safe_softmax.default") == ["_safe_softmax"]
    assert names("arange.meta") == ["arange"] and names("masked.log_softmax") == ["masked", "log_softmax"]
