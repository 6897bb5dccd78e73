"""The detection table: computed by a command, committed in docs/oracles.md, enforced here."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelaudit.zoo.check import TABLE_COLUMNS, committed_table, detection_table, table_block

DOCS = Path(__file__).resolve().parents[2] / "docs" / "oracles.md"

pytestmark = [pytest.mark.filterwarnings("ignore::RuntimeWarning"), pytest.mark.usefixtures("triton_interpreter")]


@pytest.fixture(scope="module")
def table():
    return detection_table(device="cpu", small=True)


def _row(table, name):
    return next(r for r in table.rows if r.candidate == name)


def test_committed_table_in_docs_matches_the_computed_one(table):
    assert committed_table(DOCS.read_text()) == table_block(table), (
        "docs/oracles.md is stale: run `kernelaudit oracle-table --write docs/oracles.md`"
    )


def test_table_has_every_known_candidate_and_every_oracle(table):
    assert table.columns == TABLE_COLUMNS
    wrong = [r for r in table.rows if r.expect == "wrong"]
    right = [r for r in table.rows if r.expect == "correct"]
    assert len(wrong) >= 9 and len(right) >= 5
    for needed in ("bf16", "negative_branch", "fixed_shape", "unwritten", "zeroes_input", "side_stream",
                   "missing_half", "pad_zero", "acc_assign"):
        assert any(needed in r.candidate for r in wrong), needed


def test_kernelbench_reproduces_the_official_checkers_known_misses(table):
    assert not _row(table, "relu__drops_negative_branch").flagged("kernelbench")
    assert not _row(table, "elu__drops_negative_branch").flagged("kernelbench")
    bf16 = _row(table, "matmul_square__bf16_compute")
    assert not bf16.flagged("kernelbench") and bf16.flagged("kernelbench@1e-4")


def test_strongest_catches_every_known_wrong_candidate_that_can_fail_on_this_device(table):
    missed = [r.candidate for r in table.rows if r.expect == "wrong" and not r.cuda_only and not r.flagged("strongest")]
    assert missed == []


@pytest.mark.parametrize("column, candidate", [
    ("kernelbench", "gelu__missing_half"),
    ("assert-close", "matmul_square__bf16_compute"),
    ("ulp", "matmul_square__tf32_not_allowed"),
    ("bound", "matmul_square__bf16_compute"),
    ("shapes", "matmul_rect__fixed_shape_grid"),
    ("shapes", "softmax__pad_zero"),
    ("values", "relu__drops_negative_branch"),
    ("values", "cross_entropy_loss__no_max_subtraction"),
    ("values", "argmax_dim__last_tie"),
    ("tamper", "leaky_relu__zeroes_input"),
    ("tamper", "gelu__unwritten_output"),
])
def test_each_oracle_detects_the_fault_it_is_built_for(table, column, candidate):
    assert _row(table, candidate).flagged(column)


def test_only_strict_tolerance_oracles_reject_a_correct_kernel_and_only_the_tf32_one(table):
    rejected = {(r.candidate, c) for r in table.rows if r.expect == "correct" for c in table.columns if r.flagged(c)}
    assert rejected == {("matmul_tf32_allowed__tf32", c) for c in ("kernelbench@1e-4", "assert-close", "ulp")}
