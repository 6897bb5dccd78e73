"""``kernelaudit run``: a whole program under the guard, and the what-if under a fault model."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

PROGRAM = textwrap.dedent("""
    import torch
    a = torch.arange(5 * 64 * 16, dtype=torch.float32).remainder(7).view(5, 64, 16)
    b = torch.arange(5 * 64 * 16, dtype=torch.float32).remainder(5).view(5, 64, 16).transpose(1, 2)
    got = torch.bmm(a, b)
    # the honest answer, from per-batch products far below every threshold
    ref = torch.stack([(a[i].double() * 1) @ b[i].double() for i in range(5)]).float()
    print("WRONG" if not torch.equal(got, ref) else "RIGHT")
""")


def _run(tmp_path, *opts):
    prog = tmp_path / "prog.py"
    prog.write_text(PROGRAM)
    stats = tmp_path / "stats.json"
    r = subprocess.run([sys.executable, "-m", "kernelaudit", "run", *opts, "--stats-json", str(stats), "--",
                        sys.executable, str(prog)], capture_output=True, text=True, timeout=120)
    s = json.loads(stats.read_text()) if stats.exists() else None
    return r, s


def test_run_what_if_without_guard_shows_the_fault(tmp_path):
    r, s = _run(tmp_path, "--guard", "off", "--fault-model", "mps", "--scale", "14")
    assert r.returncode == 0, r.stderr
    assert "WRONG" in r.stdout
    assert s["ignored"] >= 1 and s["by_rule"].get("A", 0) >= 1


def test_run_with_fix_under_the_fault_model_gives_the_right_answer(tmp_path):
    r, s = _run(tmp_path, "--fault-model", "mps", "--scale", "14")
    assert r.returncode == 0, r.stderr
    assert "RIGHT" in r.stdout
    assert s["fixed"] >= 1
    assert "kernelaudit guard:" in r.stderr


def test_run_with_raise_stops_the_program_with_a_clear_error(tmp_path):
    r, s = _run(tmp_path, "--guard", "raise", "--fault-model", "mps", "--scale", "14")
    assert r.returncode != 0
    assert "UnsafeCallError" in r.stderr and "rule A" in r.stderr and "largest safe chunk" in r.stderr


@pytest.mark.parametrize("opts", [("--guard", "explode"), ("--fault-model", "nope"), ("--scale", "99")])
def test_run_rejects_bad_arguments_with_exit_2(tmp_path, opts):
    # in this process (click's runner): refused before the program would start
    from click.testing import CliRunner

    from kernelaudit.cli import main

    prog = tmp_path / "prog.py"
    prog.write_text(PROGRAM)
    r = CliRunner().invoke(main, ["run", *opts, "--", sys.executable, str(prog)])
    assert r.exit_code == 2 and "Cannot have" in r.output, r.output
