"""``kernelaudit repro``: summary, JSON and figure; exit 0 invariant, 1 diverges,
2 bad arguments, 3 could not judge."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

import torch

import kernelaudit.repro as repro
from kernelaudit.repro import subjects as repro_subjects
from kernelaudit.errors import EXIT_FOUND, EXIT_OK, EXIT_UNJUDGED, EXIT_USAGE
from kernelaudit.repro.cli import COMMANDS

SPLIT_MODEL = '''
import torch
from kernelaudit.repro import gemm

def subject(device="cpu", rows=8):
    g = torch.Generator().manual_seed(0)
    w = torch.randn(32, 16, generator=g).bfloat16()
    def fn(x):  # cuBLAS-like: a split-K order from 4 rows on
        if x.shape[0] < 4:
            return gemm.mm(x, w, out_dtype=torch.float32)
        return gemm.mm(x[:, :16], w[:16], out_dtype=torch.float32) + gemm.mm(x[:, 16:], w[16:], out_dtype=torch.float32)
    return fn, torch.randn(rows, 32, generator=g).bfloat16()

def broken(device="cpu", rows=8):
    def fn(x):
        raise RuntimeError("kernel launch failed")
    return fn, torch.ones(rows, 2)
'''


def _invoke(*args):
    return CliRunner().invoke(COMMANDS["repro"], list(args))


def test_op_invariant_writes_summary_json_and_figure(tmp_path):
    r = _invoke("op", "--op", "addmm", "--impl", "ieee,mma", "-k", "24", "-n", "16", "--batch-sizes", "1,3,9",
                "--runs", "2", "--json", str(tmp_path / "r.json"), "--figure", str(tmp_path / "r.png"))
    assert r.exit_code == EXIT_OK, r.output
    assert r.output.count(": invariant") == 2
    data = json.loads((tmp_path / "r.json").read_text())
    assert [rep["invariant"] for rep in data["reports"]] == [True, True]
    assert {p["probe"] for p in data["reports"][0]["probes"]} == {"run", "batch", "position"}
    assert (tmp_path / "r.png").stat().st_size > 1000


@pytest.mark.parametrize("op, k, n", [("softmax", 24, 1), ("rms_norm", 24, 1), ("attention", 8, 4), ("sum", 24, 1)])
def test_row_ops_and_attention_are_invariant_as_torch_runs_them_and_under_ieee(op, k, n):
    r = _invoke("op", "--op", op, "--dtype", "float32", "-k", str(k), "-n", str(n), "--impl", "torch,ieee",
                "--batch-sizes", "1,3", "--runs", "2")
    assert r.exit_code == EXIT_OK, r.output
    assert r.output.count(": invariant") == 2
    assert f"{op} float32 K={k}" in r.output


def test_a_torch_function_by_dotted_name_gets_its_keywords_and_a_tuple_is_judged_on_its_first(tmp_path):
    r = _invoke("op", "--op", "torch.sort(dim=-1, descending=True)", "--impl", "torch", "-k", "16",
                "--batch-sizes", "1,4", "--json", str(tmp_path / "r.json"))
    assert r.exit_code == EXIT_OK, r.output
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["op"] == "torch.sort(dim=-1, descending=True)"
    assert data["reports"][0]["dtype"] == "bfloat16"   # the sorted values, not the int64 indices
    fn, x = repro_subjects.op_subject("torch.sort(dim=-1, descending=True)", "torch", "float32", 16, 1, 4, "cpu")
    assert torch.equal(fn(x), x.sort(dim=-1, descending=True).values)


def test_a_random_dotted_function_diverges_run_to_run_and_exits_1():
    # dropout draws a new mask each call: every probe must see it
    r = _invoke("op", "--op", "torch.nn.functional.dropout(p=0.5)", "--dtype", "float32", "--impl", "torch",
                "-k", "64", "--batch-sizes", "1,4", "--runs", "2")
    assert r.exit_code == EXIT_FOUND, r.output
    assert "run to run      diverges from run = 1 on" in r.output
    assert "batch size      diverges" in r.output


def test_model_entry_point_that_diverges_exits_1_and_says_where(tmp_path):
    (tmp_path / "subj.py").write_text(SPLIT_MODEL)
    r = _invoke("model", f"{tmp_path / 'subj.py'}:subject", "--impl", "torch", "--batch-sizes", "1,2,3,4,8")
    assert r.exit_code == EXIT_FOUND, r.output
    assert "diverges from batch = 4 on" in r.output


def test_model_that_raises_exits_3(tmp_path):
    (tmp_path / "subj.py").write_text(SPLIT_MODEL)
    r = _invoke("model", f"{tmp_path / 'subj.py'}:broken", "--impl", "torch", "--batch-sizes", "1,2")
    assert r.exit_code == EXIT_UNJUDGED
    assert "could not judge: RuntimeError: kernel launch failed" in r.output


@pytest.mark.parametrize("args, named", [
    (("op", "--impl", "cublas"), "impl"), (("op", "--op", "conv"), "op"), (("op", "--dtype", "int8"), "dtype"),
    (("op", "--batch-sizes", "0,4"), "batch-sizes"), (("op", "--runs", "0"), "runs"),
    (("op", "--op", "torch.nope"), "op"), (("op", "--op", "torch.cumsum(1)"), "op"),
    (("op", "--op", "torch.cumsum(dim=x)"), "op"), (("op", "--op", "os.system"), "op"),
    (("op", "--op", "torch._C._nn.linear"), "op"), (("op", "--op", "torch.pi"), "op"), (("op", "-k", "0"), "k"),
    (("model", "no_colon_here"), "entry point"), (("model", "kernelaudit.repro.tinylm:nothing"), "entry point"),
])
def test_bad_arguments_exit_2_naming_the_argument(args, named):
    r = _invoke(*args)
    assert r.exit_code == EXIT_USAGE, r.output
    assert f"Cannot have {named}" in r.output


def test_public_surface_is_small_and_resolves():
    assert repro.__all__ == sorted(["Report", "addmm", "bmm", "check", "deterministic", "install", "installed",
                                    "linear", "mm", "uninstall"])
    for name in repro.__all__:
        assert callable(getattr(repro, name))
    with pytest.raises(AttributeError):
        repro.nothing  # noqa: B018


def test_importing_repro_loads_no_kernels():
    code = ("import sys, kernelaudit.repro; "
            "print(sorted(m for m in sys.modules if m.startswith(('triton', 'kernelaudit.repro.'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
