"""The commands `kernelaudit conform int8` and `kernelaudit ulp`, through click's runner:
exit codes 0 (ok), 1 (found something), 2 (bad arguments)."""

from __future__ import annotations

import json

import numpy as np
import torch
from click.testing import CliRunner

from kernelaudit.conform.cli import COMMANDS


def test_commands_are_exported_for_the_top_level_group():
    assert set(COMMANDS) == {"conform", "ulp"}
    assert "int8" in COMMANDS["conform"].commands


def test_ulp_command_exits_0_on_equal_tensors_and_1_on_a_one_ulp_difference(tmp_path):
    a = torch.randn(64).bfloat16()
    b = a.clone()
    b.view(torch.int16)[3] += 1
    torch.save(a, tmp_path / "a.pt")
    torch.save(b, tmp_path / "b.pt")
    same = CliRunner().invoke(COMMANDS["ulp"], [str(tmp_path / "a.pt"), str(tmp_path / "a.pt")])
    diff = CliRunner().invoke(COMMANDS["ulp"], [str(tmp_path / "b.pt"), str(tmp_path / "a.pt"),
                                                "--plot", str(tmp_path / "h.png")])
    assert same.exit_code == 0 and "0 / 64 elements differ" in same.output
    assert diff.exit_code == 1 and "1 / 64 elements differ" in diff.output and "index 3" in diff.output
    assert (tmp_path / "h.png").exists()
    tol = CliRunner().invoke(COMMANDS["ulp"], [str(tmp_path / "b.pt"), str(tmp_path / "a.pt"), "--max-ulp", "1"])
    assert tol.exit_code == 0


def test_ulp_command_reads_npy_against_a_float64_reference(tmp_path):
    x = np.random.default_rng(0).random(1000) + 1
    np.save(tmp_path / "ref.npy", x)
    np.save(tmp_path / "got.npy", x.astype(np.float16))
    r = CliRunner().invoke(COMMANDS["ulp"], [str(tmp_path / "got.npy"), str(tmp_path / "ref.npy"), "--max-ulp", "0.5"])
    assert r.exit_code == 0, r.output
    assert "float16" in r.output and "centred" in r.output


def test_ulp_command_exits_2_naming_allowed_file_types(tmp_path):
    (tmp_path / "a.txt").write_text("1")
    r = CliRunner().invoke(COMMANDS["ulp"], [str(tmp_path / "a.txt"), str(tmp_path / "a.txt")])
    assert r.exit_code == 2 and ".pt, .pth, .npy" in r.output


def test_conform_int8_exits_2_on_an_unknown_implementation_or_device(tmp_path):
    r = CliRunner().invoke(COMMANDS["conform"], ["int8", "--impl", "cutlass", "--out", str(tmp_path)])
    assert r.exit_code == 2 and "allowed values are torch, triton, torchao" in r.output
    r = CliRunner().invoke(COMMANDS["conform"], ["int8", "--device", "mps", "--out", str(tmp_path)])
    assert r.exit_code == 2 and "allowed values are cpu, cuda" in r.output
    for bad in ("32x48", "0x4x4", "axbxc"):
        r = CliRunner().invoke(COMMANDS["conform"], ["int8", "--shapes", bad, "--out", str(tmp_path)])
        assert r.exit_code == 2 and "comma lists of MxNxK" in r.output


def test_conform_int8_writes_report_and_exits_0_when_all_holds(tmp_path):
    r = CliRunner().invoke(COMMANDS["conform"], ["int8", "--device", "cpu", "--impl", "torch", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    rec = json.loads((tmp_path / "conform_int8.json").read_text())
    assert rec["pow2"]["pow2_cases_bit_identical"] == rec["pow2"]["pow2_cases"] > 0
    assert "Blindness table" in (tmp_path / "conform_int8.txt").read_text()
    assert (tmp_path / "blindness.png").stat().st_size > 1000 and (tmp_path / "conform_int8.html").exists()


def test_conform_int8_exits_1_when_the_suite_cannot_witness_every_fault(tmp_path):
    r = CliRunner().invoke(COMMANDS["conform"], ["int8", "--device", "cpu", "--impl", "torch", "--shapes", "2x2x4",
                                                 "--out", str(tmp_path)])  # too small for the clamp and tie faults
    assert r.exit_code == 1, r.output


def test_campaign_verdict_is_1_when_a_correct_implementation_is_rejected():
    from kernelaudit.conform.campaign import verdict

    ok = {"false_rejections": {"torch": {"bit_exact": 0}}, "blindness": [
        {"changed_cases": 2, "caught": {"bit_exact": 2}}], "pow2": {"pow2_cases_bit_identical": 3, "pow2_cases": 3}}
    assert verdict(ok) == 0
    assert verdict({**ok, "false_rejections": {"torch": {"bit_exact": 1}}}) == 1
    assert verdict({**ok, "blindness": [{"changed_cases": 0, "caught": {"bit_exact": 0}}]}) == 1
    assert verdict({**ok, "pow2": {"pow2_cases_bit_identical": 2, "pow2_cases": 3}}) == 1


def test_public_names_all_resolve_and_importing_the_package_loads_no_triton():
    import subprocess
    import sys

    import kernelaudit.conform as conform

    assert all(getattr(conform, n) is not None for n in conform.__all__)
    code = ("import sys, kernelaudit.conform; "
            "print('triton' in sys.modules, 'kernelaudit.conform.kernels' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]
