"""A finding's plain-torch program (``benchmarks/repro_store_findings.py``'s snippet: the
big call, then a reference of small calls on slices of the same tensors) runs to the end
under ``kernelaudit run --guard fix`` with every shipped CUDA rule, moved to the CPU and
scaled down with the case. On the H100 (2026-12-06) five such programs crashed under the
guard: a float16 pool's ``bytes`` rule refused the reference's slices, which lie far into
the big tensor's storage."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from kernelaudit.guard.rules import known_faults
from kernelaudit.sweep.cases import GridSpec, grid
from kernelaudit.sweep.ops.plain import plain_check
from kernelaudit.thresholds import Thresholds

SCALE = 16
#: Rule kinds whose ``at_least`` counts elements or bytes, scaled with the case.
SCALED = ("numel", "bytes", "attention-scores")


def _cpu_rules(path) -> int:
    """Every shipped CUDA rule as a CPU rule, its size scaled to :data:`SCALE`; how many."""
    f = Thresholds(SCALE).t31 / 2**31
    rules = []
    for r in known_faults():
        if r.device != "cuda" or not r.aten or not isinstance(r.when.get("at_least"), int):
            continue
        when = dict(r.when)
        if when["kind"] in SCALED:
            when["at_least"] = max(2, int(when["at_least"] * f))
        rule = {"name": r.name, "op": r.op, "device": "cpu", "effect": r.effect, "when": when,
                "aten": list(r.aten), "action": r.action, "dtypes": list(r.dtypes)}
        if r.split_dim is not None:
            rule["split_dim"] = r.split_dim
        rules.append(rule)
    path.write_text(json.dumps({"schema": 1, "rules": rules}))
    return len(rules)


def _guarded(tmp_path, op, direction, dtype, threshold, position):
    case = grid(GridSpec(ops=(op,), dtypes=(dtype,), directions=(direction,), thresholds=(threshold,),
                         positions=(position,), layouts=("contig",), scale=SCALE))[0]
    rules = tmp_path / "rules.json"
    assert _cpu_rules(rules) > 50
    script = tmp_path / "finding.py"
    script.write_text(plain_check(case, device="cpu", chunk_elements=2**8))
    p = subprocess.run([sys.executable, "-m", "kernelaudit", "run", "--guard", "fix", "--rules", str(rules), "--",
                        sys.executable, str(script)], capture_output=True, text=True, timeout=240)
    return case, p


CRASHED_ON_THE_H100 = [  # (op, direction, dtype, threshold, position)
    ("nn.functional.adaptive_avg_pool2d", "bwd", "float16", "2^31", "above"),
    ("nn.functional.interpolate.area", "bwd", "float16", "2^32", "below"),
]
MORE = [
    ("nn.functional.interpolate.area", "bwd", "float16", "2^31", "above"),
    ("nn.functional.adaptive_avg_pool3d", "bwd", "float16", "2^31", "above"),
    ("nn.functional.adaptive_avg_pool1d", "bwd", "float16", "2^32", "below"),
    ("nn.functional.adaptive_avg_pool2d", "bwd", "float32", "2^31", "above"),
    ("nn.functional.interpolate.area", "fwd", "float32", "2^32", "below"),
    ("nn.functional.adaptive_max_pool2d", "bwd", "float16", "2^31", "above"),
]


@pytest.mark.parametrize("op,direction,dtype,threshold,position", [
    *CRASHED_ON_THE_H100, *(pytest.param(*c, marks=pytest.mark.slow) for c in MORE)])
def test_a_findings_plain_program_runs_to_the_end_under_the_guard_with_every_shipped_rule(
        tmp_path, op, direction, dtype, threshold, position):
    case, p = _guarded(tmp_path, op, direction, dtype, threshold, position)
    assert p.returncode == 0, f"{case.id}: rc {p.returncode}\n{p.stderr[-3000:]}"
    result = json.loads([ln for ln in p.stdout.splitlines() if ln.startswith("{")][-1])
    assert result["result"] == "ok" and result["compared"] > 0, (case.id, result)
    counts = re.search(r"(\d+) fixed, (\d+) refused", p.stderr)
    assert counts, p.stderr[-2000:]
    fixed, refused = map(int, counts.groups())
    assert fixed >= 1 and refused == 0, f"{case.id}: {counts.group(0)}\n{p.stderr[-2000:]}"
