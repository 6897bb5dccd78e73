"""A sweep's findings become guard rules, and the guard loaded with them fixes a program
that hits them (CPU, under the ``mps`` fault model at a small scale)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kernelaudit.guard.intercept import guarding
from kernelaudit.guard.proof import _call_case, bitwise_equal, max_rel_error, run_guarded, tolerance
from kernelaudit.guard.rules import load_rules
from kernelaudit.sweep.cases import Case, GridSpec
from kernelaudit.sweep.schedule import run_sweep
from kernelaudit.sweep.store import RunStore

ROOT = Path(__file__).resolve().parents[2]
SCALE = 12
RECORD = ROOT / "benchmarks/results/2026-12-03-h200-full-sweep-after-int64-fix/sweep_store"


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    spec = GridSpec(ops=("bmm",), dtypes=("float32",), layouts=("aT",), directions=("fwd",),
                    thresholds=("2^31", "2^32"), positions=("below", "above"), scale=SCALE)
    run_sweep(spec, out, device="cpu", fault_model="mps")
    return RunStore.open(out)


def test_the_sweep_writes_one_rule_per_failing_group_with_versions_and_action(swept):
    rules = load_rules(swept.path / "rules.json")
    by = {r.name: r for r in rules}
    assert set(by) == {"sweep-cpu-bmm-float32-aT-fwd-in", "sweep-cpu-bmm-float32-aT-fwd-out"}
    err, wrong = by["sweep-cpu-bmm-float32-aT-fwd-in"], by["sweep-cpu-bmm-float32-aT-fwd-out"]
    assert (err.effect, wrong.effect) == ("error", "wrong")  # rule B raises, rule A is silent
    for r in rules:
        assert (r.op, r.device, r.dtypes, r.layouts, r.action, r.split_dim) == ("bmm", "cpu", ("float32",), ("aT",),
                                                                                "fix", 0)
        assert r.versions["torch"] == "==" + ".".join(torch.__version__.split("+")[0].split(".")[:2]) + ".*"
        assert r.provenance["fault_model"] == "mps" and r.provenance["cases"]
    # the size predicate: one past the largest correct size below the first failure
    latest = [(Case.from_json(x["case"]), x) for x in swept.latest().values()]
    ok_in = max(x["case"]["crossing_numel"] for c, x in latest if c.series == "in" and x["verdict"]["status"] == "ok")
    assert err.when == {"kind": "numel", "tensor": "any", "at_least": ok_in + 1}


def test_the_rules_fix_every_failing_case_and_without_them_it_stays_wrong(swept):
    rules = load_rules(swept.path / "rules.json")
    failing = [Case.from_json(x["case"]) for x in swept.latest().values() if x["verdict"]["status"] != "ok"]
    assert len(failing) >= 3
    for case in failing:
        honest = run_guarded(case, fault_model="none").outs
        bare = run_guarded(case, fault_model="mps")
        assert bare.error is not None or not bitwise_equal(bare.outs, honest), case.id
        with guarding("fix", rules=rules, fault_model="mps", scale=SCALE) as engine:
            got = _call_case(case, "cpu")
        assert max_rel_error(got, honest) <= tolerance(case), case.id
        assert engine.stats().fixed >= 1


PROGRAM = """
import torch
a = torch.randn({B}, 64, 32).transpose(1, 2)      # (B, 32, 64) transposed view
b = torch.randn({B}, 64, 32)
ref = torch.from_numpy(a.double().numpy() @ b.double().numpy())   # numpy: outside the fault model
print((torch.bmm(a, b).double() - ref).abs().max().item())
"""


def test_kernelaudit_run_with_the_sweep_rules_gives_correct_answers(swept):
    B = 2 ** SCALE // (32 * 32) + 1  # output (B, 32, 32) just past 2^32 (scaled): rule A under the fault model
    out = subprocess.run([sys.executable, "-m", "kernelaudit", "run", "--fault-model", "mps", "--scale", str(SCALE),
                          "--rules", str(swept.path / "rules.json"), "--", sys.executable, "-c", PROGRAM.format(B=B)],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert float(out.stdout.strip().splitlines()[-1]) < 1e-4  # the fault model alone: O(1) (previous test)
    assert "1 fixed" in out.stderr, out.stderr


@pytest.mark.skipif(not RECORD.is_dir(), reason="the H200 sweep of record is not in this checkout")
def test_the_shipped_sweep_rules_are_what_the_sweep_of_record_gives():
    from kernelaudit.sweep.rules_out import rules_from_store

    shipped = [r for r in load_rules(ROOT / "src/kernelaudit/guard/known_faults/sweeps_of_record.json")]
    rules, notes = rules_from_store(RunStore.open(RECORD))
    assert rules == shipped and notes == []
    assert {(r.op, r.effect, r.action) for r in rules} == {("arange", "wrong", "raise"), ("sdpa", "error", "raise")}
