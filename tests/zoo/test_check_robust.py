"""`kernelaudit check` on real files: what is not the candidate's fault is never blamed on it.

A reference that raises, a missing module, a stateful candidate, a machine without
triton: each gives the verdict it is, with the exit code it is.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from kernelaudit.verdict import Status
from kernelaudit.zoo.check import run_check

PROBLEM = '''
import torch
import torch.nn as nn

N = 16
ERROR_MODEL = {{"kind": "exact"}}


class Model(nn.Module):
    def forward(self, x):
        {forward}


def get_inputs():
    {inputs}


def get_init_inputs():
    return []
'''

RIGHT = "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n" \
        "        return torch.relu(x)\n"


def _problem(tmp_path, forward="return torch.relu(x)", inputs="return [torch.rand(N)]"):
    p = tmp_path / "problem.py"
    p.write_text(textwrap.dedent(PROBLEM).format(forward=forward, inputs=inputs))
    return p


def _candidate(tmp_path, text=RIGHT):
    p = tmp_path / "cand.py"
    p.write_text(text)
    return p


def test_reference_that_raises_is_could_not_judge_and_the_sequence_goes_on(tmp_path):
    problem = _problem(tmp_path, forward="raise RuntimeError('reference broke')")
    v = run_check(problem, _candidate(tmp_path), "kernelbench,bound,tamper", device="cpu").verdict
    checks = v.details["checks"]
    assert checks["kernelbench"]["status"] == checks["bound"]["status"] == "skipped"
    assert "the reference (Model.forward" in checks["bound"]["message"] and "reference broke" in v.message
    assert "problem.py:" in checks["bound"]["message"]  # where in the problem file
    # tamper's runs A-C need no reference and find nothing; its history calls are judged
    # against the reference, which raised: that part could not be judged, never an error
    assert checks["tamper"]["status"] == "skipped", checks["tamper"]["message"]
    assert "runs A-C found nothing" in checks["tamper"]["message"]
    assert "could not judge the history calls" in checks["tamper"]["message"]
    assert "reference broke" in checks["tamper"]["message"]
    assert v.status is Status.SKIPPED and "error" not in {c["status"] for c in checks.values()}


def test_reference_that_raises_keeps_tamper_findings_that_need_no_reference(tmp_path):
    problem = _problem(tmp_path, forward="raise RuntimeError('reference broke')")
    clobber = RIGHT.replace("        return", "        x.zero_()  # clobbers its input\n        return")
    v = run_check(problem, _candidate(tmp_path, clobber), "tamper", device="cpu").verdict
    assert v.status is Status.WRONG and "was modified by the candidate" in v.message
    assert "could not judge the history calls" in v.message and v.details["history_unjudged"]


def test_get_inputs_that_raises_is_could_not_judge(tmp_path):
    problem = _problem(tmp_path, inputs="raise ValueError('no inputs')")
    v = run_check(problem, _candidate(tmp_path), "bound", device="cpu").verdict
    assert v.status is Status.SKIPPED and "get_inputs()" in v.message and "no inputs" in v.message


def test_candidate_needing_a_missing_module_is_an_install_problem(tmp_path):
    cand = _candidate(tmp_path, "import kernelaudit_no_such_module\n" + RIGHT)
    v = run_check(_problem(tmp_path), cand, "bound", device="cpu").verdict
    assert v.status is Status.SKIPPED and "'kernelaudit_no_such_module'" in v.message
    assert "not installed" in v.message


STATEFUL = RIGHT.replace("        return torch.relu(x)\n", """\
        self.calls = getattr(self, "calls", 0) + 1
        return torch.relu(x) + (self.calls > 1)  # right on its first call only
""")


def test_stateful_candidate_verdict_does_not_depend_on_oracle_order(tmp_path):
    problem, cand = _problem(tmp_path), _candidate(tmp_path, STATEFUL)
    one = run_check(problem, cand, "bound,assert-close", device="cpu").verdict.details["checks"]
    two = run_check(problem, cand, "assert-close,bound", device="cpu").verdict.details["checks"]
    assert {k: c["status"] for k, c in one.items()} == {k: c["status"] for k, c in two.items()}
    assert one["bound"]["status"] == "ok"  # each oracle's instance is fresh: its first call


NO_TRITON = """
import json, sys
sys.modules["triton"] = None  # `import triton` raises ImportError, as on a machine without it
from kernelaudit.zoo.check import run_check
v = run_check(sys.argv[1], sys.argv[2], "strongest", device="cpu").verdict
loaded = sorted(m for m in sys.modules if m.startswith("kernelaudit") and "kernels" in m)
print(json.dumps({"status": v.status.value, "message": v.message, "kernel_modules": loaded}))
"""


def test_pure_pytorch_candidate_is_judged_without_triton(tmp_path):
    proc = subprocess.run([sys.executable, "-c", NO_TRITON, str(_problem(tmp_path)), str(_candidate(tmp_path))],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["status"] == "ok", out["message"]
    assert out["kernel_modules"] == []  # neither the corpus kernels nor the sweep's Triton kernels


def test_timeout_bounds_an_in_process_check_too(tmp_path):
    from kernelaudit.zoo.check import run_check_bounded

    slow = _candidate(tmp_path, RIGHT.replace("        return", "        import time; time.sleep(30)\n        return"))
    result = run_check_bounded(_problem(tmp_path), slow, "bound", timeout_s=0.5, device="cpu")
    assert result.verdict.status is Status.ERROR and "timed out after 0.5 s" in result.verdict.message
    assert result.seconds < 10


def test_checker_failure_names_a_missing_module_or_where_the_checker_raised():
    from kernelaudit.zoo.check import _checker_failure

    try:
        import kernelaudit_no_such_module  # noqa: F401
    except ModuleNotFoundError as exc:
        assert "'kernelaudit_no_such_module', which is not installed" in _checker_failure(exc)
    try:
        {}["x"]
    except KeyError as exc:
        assert _checker_failure(exc).startswith("the checker raised KeyError at ")
