"""docs/architecture.md is the module map: every module and every knob is named there."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "architecture.md").read_text()
PKG = ROOT / "src" / "kernelaudit"


def test_every_module_in_the_tree_is_named_in_the_module_map():
    missing = []
    for f in sorted(PKG.rglob("*.py")):
        rel = f.relative_to(PKG)
        if rel.parts[:2] == ("zoo", "problems") and len(rel.parts) > 3:
            continue  # corpus, solutions, mutants: data, listed by docs/oracles.md
        heading = "### `kernelaudit" + ("" if rel.parent == Path(".") else f"/{rel.parent.as_posix()}") + "/`"
        section = DOC.split(heading, 1)[1].split("\n### ", 1)[0] if heading in DOC else ""
        if f"| `{rel.name}` |" not in section:
            missing.append(rel.as_posix())
    assert not missing, f"modules not in docs/architecture.md: {missing}"


def test_every_knob_is_listed_in_the_docs():
    from kernelaudit.config import KNOBS

    assert [n for n in KNOBS if f"`{n}`" not in DOC] == []
