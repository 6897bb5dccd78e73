"""`kernelaudit check`: verdicts, exit codes 0/1/2, JSON, and isolation from crashing candidates."""

from __future__ import annotations

import json
import textwrap

import pytest
from click.testing import CliRunner

from kernelaudit.zoo.check import check_command, run_check_isolated
from kernelaudit.zoo.problems import CORPUS_DIR, MUTANTS_DIR, solution_path
from kernelaudit.verdict import Status

pytestmark = pytest.mark.usefixtures("triton_interpreter")

RELU = str(CORPUS_DIR / "relu.py")


def run(*args):
    return CliRunner().invoke(check_command, [*map(str, args)], catch_exceptions=False)


def test_correct_candidate_exits_0_and_prints_ok():
    r = run(RELU, solution_path("relu"), "--small", "--device", "cpu", "--no-isolate", "--oracle", "bound,tamper")
    assert r.exit_code == 0, r.output
    assert r.output.startswith("OK relu on relu [BATCH=4, DIM=200] with bound,tamper on cpu")


def test_wrong_candidate_exits_1_with_the_evidence():
    r = run(RELU, MUTANTS_DIR / "relu__drops_negative_branch.py", "--small", "--device", "cpu", "--no-isolate",
            "--oracle", "kernelbench,values")
    assert r.exit_code == 1
    assert "WRONG" in r.output and "values negative" in r.output and "first bad flat index" in r.output


def test_json_output_is_one_object_with_the_verdict():
    r = run(RELU, solution_path("relu"), "--small", "--device", "cpu", "--no-isolate", "--json")
    d = json.loads(r.output)
    assert r.exit_code == 0 and d["verdict"]["status"] == "ok" and d["oracle"] == "kernelbench"
    assert d["shapes"] == {"BATCH": 4, "DIM": 200}


@pytest.mark.parametrize("args, message", [
    (["--oracle", "bogus"], "Cannot have --oracle='bogus': allowed values are kernelbench, assert-close, ulp, bound"),
    (["--device", "tpu"], "'--device'"),
    (["--tol", "0"], "Cannot have --tol=0.0"),
])
def test_bad_arguments_exit_2_naming_the_argument_and_allowed_values(args, message):
    r = CliRunner().invoke(check_command, [RELU, str(solution_path("relu")), *args])
    assert r.exit_code == 2 and message in r.output


def test_missing_file_and_malformed_problem_exit_2(tmp_path):
    assert CliRunner().invoke(check_command, [str(tmp_path / "no.py"), RELU]).exit_code == 2
    bad = tmp_path / "bad_problem.py"
    bad.write_text("x = 1\n")
    r = CliRunner().invoke(check_command, [str(bad), str(solution_path("relu")), "--no-isolate"])
    assert r.exit_code == 2 and "missing Model, get_inputs, get_init_inputs" in r.output


def test_malformed_candidate_is_an_error_verdict_exit_1(tmp_path):
    cand = tmp_path / "cand.py"
    cand.write_text("import torch\n\nraise ImportError('no kernel here')\n")
    r = run(RELU, cand, "--small", "--device", "cpu", "--no-isolate")
    assert r.exit_code == 1 and "ERROR" in r.output and "cand.py:3: ImportError while loading" in r.output


def _crasher(tmp_path, body: str):
    p = tmp_path / "crash.py"
    p.write_text(textwrap.dedent(f"""
        import os, sys, time
        import torch.nn as nn

        class ModelNew(nn.Module):
            def forward(self, x):
                {body}
    """))
    return p


@pytest.mark.parametrize("body, expect", [
    ("os._exit(7)", "exit code 7"),
    ("os.abort()", "signal 6"),
    ("sys.exit(3)", "SystemExit"),
])
def test_isolated_check_turns_a_dying_candidate_into_an_error_verdict(tmp_path, body, expect):
    result = run_check_isolated(RELU, _crasher(tmp_path, body), "bound", device="cpu", small=True, timeout_s=120)
    assert result.verdict.status is Status.ERROR and expect in result.verdict.message
    assert result.isolated


def test_isolated_check_times_out_a_hanging_candidate(tmp_path):
    result = run_check_isolated(RELU, _crasher(tmp_path, "time.sleep(60)"), "bound", device="cpu", small=True,
                                timeout_s=3)
    assert result.verdict.status is Status.ERROR and "timed out after 3 s" in result.verdict.message


def test_isolated_check_of_a_correct_candidate_is_ok():
    result = run_check_isolated(RELU, solution_path("relu"), "bound,tamper", device="cpu", small=True)
    assert result.verdict.ok and result.isolated and result.shapes == {"BATCH": 4, "DIM": 200}


def test_a_candidate_that_patches_torch_while_running_gets_an_error_verdict(tmp_path):
    import torch

    original = torch.allclose
    cand = tmp_path / "cheat.py"
    cand.write_text(textwrap.dedent("""
        import torch
        import torch.nn as nn

        class ModelNew(nn.Module):
            def forward(self, x):
                torch.allclose = lambda *a, **k: True
                return x
    """))
    r = run(RELU, cand, "--small", "--device", "cpu", "--no-isolate")
    assert r.exit_code == 1 and "replaced torch.allclose while it ran" in r.output
    assert torch.allclose is original
