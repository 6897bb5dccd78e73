"""The README lists every finding of the full grid's run store of record: each op with a
wrong answer, or an error that says something about its size, is named there (issue:
every wrong or error case listed, with its reproduction and upstream lead)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: Suffixes of kernelaudit's own recipes of an op (its meta-derived or flat variant, the
#: dim it reduces, the aten overload): the README names the op.
RECIPE_SUFFIXES = {"meta", "flat", "dim_last", "default", "decomposed"}
PREFIXES = ("nn.functional.", "torch.ops.aten.")


def names(op: str) -> list[str]:
    """The words the README must hold for ``op``: its name without the namespaces and
    recipe suffixes, split at dots (``nn.functional.interpolate.area``: interpolate, area)."""
    for p in PREFIXES:
        op = op.removeprefix(p)
    return [w for w in op.split(".") if w not in RECIPE_SUFFIXES]


def test_every_finding_of_the_full_grid_is_named_in_the_readme(full_grid_findings):
    readme = (ROOT / "README.md").read_text()
    assert len(full_grid_findings) > 30   # the store holds the grid's findings: a check that can fail
    missing = {op: ids[:2] for op, ids in full_grid_findings.items()
               if not all(re.search(rf"(?<![\w]){re.escape(w)}(?![\w])", readme) for w in names(op))}
    assert not missing, f"findings the README does not name: {missing}"


def test_the_readme_check_reads_names_as_users_write_them():
    assert names("nn.functional.interpolate.nearest-exact") == ["interpolate", "nearest-exact"]
    assert names("torch.ops.aten._safe_softmax.default") == ["_safe_softmax"]
    assert names("arange.meta") == ["arange"] and names("masked.log_softmax") == ["masked", "log_softmax"]
