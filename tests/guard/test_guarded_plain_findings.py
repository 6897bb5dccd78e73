"""A finding's plain-torch program (``benchmarks/repro_store_findings.py``'s snippet: the
big call, then a reference of small calls on slices of the same tensors) runs to the end
under ``kernelaudit run --guard fix`` with every shipped CUDA rule, moved to the CPU and
scaled down with the case. On the H100 (2026-12-06) four of these crashed under the guard
because a float16 pool's ``bytes`` rule refused the reference's slices, which lie far into
the big tensor's storage."""

from __future__ import annotations

import pytest

from kernelaudit.sweep.cases import GridSpec, grid
from kernelaudit.sweep.ops.plain import plain_check

SCALE = 16


def _guarded(mod, tmp_path, op, direction, dtype, threshold, position):
    case = grid(GridSpec(ops=(op,), dtypes=(dtype,), directions=(direction,), thresholds=(threshold,),
                         positions=(position,), layouts=("contig",), scale=SCALE))[0]
    rules = tmp_path / "rules.json"
    assert len(mod.cpu_rules(rules, SCALE)) > 50
    script = tmp_path / "finding.py"
    script.write_text(plain_check(case, device="cpu", chunk_elements=2**8))
    return case, mod.run_guarded(script, rules, 240)


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
        tmp_path, benchmark_script, op, direction, dtype, threshold, position):
    case, got = _guarded(benchmark_script("guarded_findings_cpu"), tmp_path, op, direction, dtype, threshold, position)
    assert got["result"] == "ok" and got["compared"] > 0, (case.id, got)
    assert got["fixed"] >= 1 and got["refused"] == 0, (case.id, got)


def test_a_rule_moved_to_the_cpu_is_expected_to_fire_only_where_this_cpu_can_screen_its_op(tmp_path, benchmark_script):
    # addmm's rules (the engine) and the pools' (kernels of their own here) must fix their
    # finding's program; _chunk_cat's cannot (a composite on the CPU), nor a rule whose
    # predicate this scaling leaves at full size (eigvalsh's dim rule)
    mod = benchmark_script("guarded_findings_cpu")
    moved = mod.cpu_rules(tmp_path / "rules.json", SCALE)

    def fire(op, dtype):
        return mod.should_fire({"op": op, "dtype": dtype}, moved)

    assert fire("addmm.decomposed", "float32") and fire("nn.functional.adaptive_avg_pool2d", "float16")
    assert not fire("_chunk_cat", "float32") and not fire("linalg.eigvalsh", "float32")
    assert not fire("addmm.decomposed", "bfloat16")   # its rules are float16 and float32
    # slogdet's 2^31 - 8 matrices meet their rule at full size and fall one short at scale 16
    slogdet = {"op": "linalg.slogdet", "dtype": "float32", "direction": "bwd", "layout": "contig",
               "axis": "elements", "id": "linalg.slogdet/float32/contig/in/2^31-/bwd"}
    code, _, small = mod.small_program(slogdet, SCALE)
    assert code and fire("linalg.slogdet", "float32") and not mod.should_fire(slogdet, moved, small)
