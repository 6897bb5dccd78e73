"""`kernelaudit sweep` and `kernelaudit report` from the command line: exit codes and messages."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _run(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "kernelaudit", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=600)


def _invoke(*args):
    """The ``kernelaudit`` command in this process (click's runner: its exit code, and
    stdout and stderr together as ``output``); the tests below run it as a process too."""
    from click.testing import CliRunner

    from kernelaudit.cli import main

    return CliRunner().invoke(main, list(args))


# One per kind of argument (list, op name, model, device), in this process (a process each
# cost a torch import, 2.5 s); GridSpec's own validation of the rest is tested below.
@pytest.mark.parametrize("args,name", [
    (["--dtypes", "float8"], "dtypes"),
    (["--ops", "bmm,conv"], "ops"),
    (["--fault-model", "cosmic"], "fault_model"),
    (["--device", "tpu"], "device"),
])
def test_bad_sweep_argument_exits_2_naming_the_argument_and_the_allowed_values(args, name, tmp_path):
    r = _invoke("sweep", "--out", str(tmp_path / "x"), *args)
    assert r.exit_code == 2, r.output
    assert f"{name}=" in r.output and "allowed values" in r.output
    assert not (tmp_path / "x").exists()   # refused before anything was written


def test_sweep_refuses_zero_workers_with_exit_2_naming_the_argument(tmp_path):
    r = _invoke("sweep", "--device", "cpu", "--workers", "0", "--out", str(tmp_path / "x"))
    assert r.exit_code == 2, r.output
    assert "case_workers=0" in r.output and "--workers" in r.output and "1 or more" in r.output


def test_sweep_exits_1_on_wrong_cases_0_when_they_match_the_rules_and_report_rebuilds(tmp_path):
    common = ["--device", "cpu", "--ops", "bmm", "--dtypes", "float32", "--thresholds", "2^32",
              "--layouts", "contig,aT", "--directions", "fwd", "--fault-model", "mps", "--scale", "12", "--no-report"]
    r = _run("sweep", *common, "--out", str(tmp_path / "a"))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "wrong" in r.stdout and "bmm/float32/aT/out/2^32+/fwd" in r.stdout
    r = _run("sweep", *common, "--out", str(tmp_path / "b"), "--expect-rules")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "classified exactly as the mps rules predict" in r.stdout
    rules = (tmp_path / "a" / "rules.json").read_text()
    (tmp_path / "a" / "rules.json").unlink()
    r = _invoke("report", str(tmp_path / "a"))
    assert r.exit_code == 1
    assert (tmp_path / "a" / "report.html").exists() and (tmp_path / "a" / "boundary_map.png").exists()
    assert (tmp_path / "a" / "rules.json").read_text() == rules and "rules: " in r.output
    r = _invoke("report", str(tmp_path / "missing"))
    assert r.exit_code == 2 and "missing" in r.output


def test_sweep_refuses_to_overwrite_a_run_without_resume(tmp_path):
    common = ["--device", "cpu", "--ops", "add", "--dtypes", "float32", "--thresholds", "2^32", "--scale", "12",
              "--positions", "above", "--layouts", "contig", "--directions", "fwd", "--no-report", "--out", str(tmp_path)]
    assert _invoke("sweep", *common).exit_code == 0
    r = _invoke("sweep", *common)
    assert r.exit_code == 2 and "--resume" in r.output
    r = _invoke("sweep", *common, "--resume")
    assert r.exit_code == 0 and "0 cases run" in r.output


def test_sweep_help_shows_examples():
    r = _run("sweep", "--help")
    assert r.returncode == 0 and "Examples:" in r.stdout and "--fault-model mps --scale 16" in r.stdout


@pytest.mark.parametrize("kw,name", [({"layouts": ("diagonal",)}, "layouts"), ({"scale": 40}, "scale"),
                                     ({"thresholds": ("2^30",)}, "thresholds")])
def test_bad_grid_argument_in_process_names_the_argument_and_the_allowed_values(kw, name):
    from kernelaudit import GridSpec
    from kernelaudit.errors import InvalidArgument
    from kernelaudit.sweep.cases import grid

    with pytest.raises(InvalidArgument, match=f"{name}=.*allowed values"):
        grid(GridSpec(**kw))


def test_quick_sweeps_every_family_and_under_a_fault_model_the_ops_it_corrupts():
    from kernelaudit.sweep.cli import PRESETS, default_ops
    from kernelaudit.sweep.ops.catalog import QUICK_OPS

    quick = PRESETS["quick"]
    assert default_ops(quick, "none") == ("family:each",)
    assert default_ops(quick, "mps") == tuple(QUICK_OPS) == default_ops(quick, "wrap32")
    assert default_ops(PRESETS["full"], "mps") == ("all",)  # a preset without fault-model ops keeps its own


def test_an_interrupted_sweep_still_writes_the_rules_of_its_findings_so_far(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from kernelaudit.sweep import schedule
    from kernelaudit.sweep.cli import sweep

    real = schedule.run_sweep

    def interrupted(spec, out, **kw):   # the findings recorded, then Ctrl-C before the end
        real(spec, out, **kw)
        (out / "rules.json").unlink()
        raise KeyboardInterrupt

    monkeypatch.setattr(schedule, "run_sweep", interrupted)
    out = tmp_path / "a"
    r = CliRunner().invoke(sweep, ["--device", "cpu", "--ops", "bmm", "--dtypes", "float32", "--thresholds", "2^32",
                                   "--layouts", "aT", "--directions", "fwd", "--fault-model", "mps", "--scale", "12",
                                   "--no-report", "--out", str(out)])
    assert r.exit_code == 130, r.output
    assert "interrupted" in r.output and "rules of the findings so far" in r.output
    assert '"op": "bmm"' in (out / "rules.json").read_text()
