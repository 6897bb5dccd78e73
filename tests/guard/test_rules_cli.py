"""``kernelaudit rules``: the rules the guard loads, and which apply on this machine or on
one its options describe."""

from __future__ import annotations

import json

from click.testing import CliRunner

from kernelaudit.guard.cli import predicate_text, rules_command
from kernelaudit.guard.rules import known_faults

H200 = ["--device", "cuda", "--torch", "2.11.0+cu130", "--cuda", "13.0", "--driver", "580.159.04"]


def _json(args):
    res = CliRunner().invoke(rules_command, [*args, "--json"])
    assert res.exit_code == 0, res.output
    return [json.loads(line) for line in res.output.splitlines()]


def test_on_the_sweeps_machine_every_cuda_rule_applies_and_on_another_torch_none():
    rows = _json(H200)
    assert len(rows) == len(known_faults())
    cuda = [r for r in rows if r["device"] == "cuda"]
    assert cuda and all(r["active"] for r in cuda) and not any(r["active"] for r in rows if r["device"] == "mps")
    later = _json(["--device", "cuda", "--torch", "2.12.0+cu130", "--cuda", "13.0", "--driver", "580.159.04"])
    assert not any(r["active"] for r in later)


def test_op_and_active_filter_the_list_and_the_table_names_the_machine():
    rows = _json([*H200, "--op", "layer_norm", "--active"])
    assert {r["name"] for r in rows} == {"norm-rows-layer_norm", "layer-norm-rows-forward", "layer-norm-rows-backward"}
    res = CliRunner().invoke(rules_command, [*H200, "--op", "layer_norm"])
    assert res.exit_code == 0
    words = " ".join(res.output.split())
    n = len(known_faults())
    cuda = sum(r.device == "cuda" for r in known_faults())
    assert f"3 of {n} rules; {cuda} apply (torch 2.11.0+cu130, CUDA 13.0, driver 580.159.04, devices cuda)" in words
    assert "rows >= 2147483648" in res.output


def test_nothing_applies_on_a_cpu_only_process_and_it_says_so():
    res = CliRunner().invoke(rules_command, ["--device", "cpu", "--active"])
    assert res.exit_code == 0 and res.output.startswith("no rule of ") and "applies" in res.output


def test_an_unreadable_rule_file_exits_2_naming_it(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    res = CliRunner().invoke(rules_command, ["--rules", str(bad)])
    assert res.exit_code == 2 and "bad.json" in res.output


def test_predicates_read_as_words():
    assert predicate_text({"kind": "dim", "dim": 0, "at_least": 65521}) == "dim 0 >= 65521"
    assert predicate_text({"kind": "numel", "tensor": "any", "at_least": 5, "inner_of": "dim"}) == \
        "a tensor of the call >= 5 elements (its dim not the last dim)"
    assert predicate_text({"kind": "mps-matmul", "rule": "A"}) == "mps-matmul rule A"
