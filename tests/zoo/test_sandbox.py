"""The sandbox of `kernelaudit check`: a candidate that writes outside its scratch directory,
reads a secret, opens a socket or forks without bound is stopped and reported as such."""

from __future__ import annotations

import textwrap

import pytest
from click.testing import CliRunner

from kernelaudit.verdict import Status
from kernelaudit.zoo import sandbox
from kernelaudit.zoo.check import check_command, run_check_isolated

ABI = sandbox.landlock_abi()
pytestmark = pytest.mark.skipif(ABI < 1, reason=f"the kernel has no Landlock (ABI {ABI}): the sandbox refuses to run")

PROBLEM = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)

def get_inputs():
    return [torch.randn(4, 8)]

def get_init_inputs():
    return []
'''

#: (name, body of ModelNew.forward, words the verdict's message must hold)
CASES = {
    "write": ("open(OUTSIDE, 'w').write('escaped')", ["tried to write", "outside its scratch directory"]),
    "read": ("open(SECRET).read()", ["tried to read", "secret.txt"]),
    "list": ("os.listdir(os.path.dirname(SECRET))", ["tried to list", "outside the problem"]),
    "socket": ("socket.create_connection(('127.0.0.1', 9))", ["opened a socket", "AF_INET"]),
    "fork": ("[os.fork() or os._exit(0) for _ in iter(int, 1)]", ["forked the checking process"]),
    "processes": ("[subprocess.run(['true']) for _ in iter(int, 1)]", ["started more than 16 processes"]),
}


def _files(tmp_path, body: str):
    problem = tmp_path / "tiny.py"
    problem.write_text(PROBLEM)
    (tmp_path / "secret.txt").write_text("the secret")
    cand = tmp_path / "cand.py"
    cand.write_text(textwrap.dedent(f"""
        import ctypes, os, socket, subprocess
        import torch
        import torch.nn as nn

        OUTSIDE = {str(tmp_path / 'escaped.txt')!r}
        SECRET = {str(tmp_path / 'secret.txt')!r}

        class ModelNew(nn.Module):
            def forward(self, x):
                {body}
                return torch.relu(x)
    """))
    return problem, cand


@pytest.mark.parametrize("name", list(CASES))
def test_a_violating_candidate_is_stopped_and_reported(tmp_path, name):
    body, words = CASES[name]
    problem, cand = _files(tmp_path, f"try:\n                    {body}\n                except OSError:\n"
                                     f"                    pass  # the candidate hides the denial")
    result = run_check_isolated(problem, cand, "kernelbench", device="cpu", timeout_s=60)
    v = result.verdict
    assert v.status is Status.ERROR, v.message
    assert "denied by the sandbox" in v.message and all(w in v.message for w in words), v.message
    assert v.details["sandbox"]["violations"][0]["kind"] == {"list": "read"}.get(name, name)
    assert not (tmp_path / "escaped.txt").exists()


def test_the_kernel_denies_what_bypasses_python(tmp_path):
    """Landlock, not the audit hook, stops a write made through libc directly."""
    body = ("fd = ctypes.CDLL(None, use_errno=True).open(OUTSIDE.encode(), os.O_WRONLY | os.O_CREAT, 0o644)\n"
            "                if fd < 0: raise OSError(ctypes.get_errno(), 'libc open refused')")
    problem, cand = _files(tmp_path, body)
    v = run_check_isolated(problem, cand, "kernelbench", device="cpu", timeout_s=60).verdict
    assert v.status is Status.ERROR and "[Errno 13] libc open refused" in v.message, v.message
    assert "probably denied by the sandbox" in v.message and v.details["sandbox"]["enforced"]
    assert not (tmp_path / "escaped.txt").exists()


def test_a_well_behaved_candidate_is_ok_under_the_sandbox(tmp_path):
    problem, cand = _files(tmp_path, "import tempfile; tempfile.TemporaryFile().write(b'scratch is fine')")
    result = run_check_isolated(problem, cand, "kernelbench", device="cpu", timeout_s=60)
    assert result.verdict.ok, result.verdict.message


def test_no_sandbox_opts_out(tmp_path):
    problem, cand = _files(tmp_path, "open(SECRET).read()")
    r = CliRunner().invoke(check_command, [str(problem), str(cand), "--device", "cpu", "--no-sandbox", "--json"])
    assert r.exit_code == 0 and '"status": "ok"' in r.output, r.output


def test_the_policy_allows_the_problem_the_candidate_and_the_scratch_only(tmp_path):
    problem, cand = _files(tmp_path, "pass")
    policy = sandbox.Sandbox.for_check(problem, cand, tmp_path / "scratch")
    assert policy.may_read(str(problem)) and policy.may_read(str(cand)) and policy.may_read(textwrap.__file__)
    assert not policy.may_read(str(tmp_path / "secret.txt")) and not policy.may_read("/etc/shadow")
    assert policy.may_write(str(tmp_path / "scratch" / "x")) and not policy.may_write(str(tmp_path / "x"))
    assert not policy.may_write(str(cand)) and policy.may_write("/dev/null")


def test_a_kernel_without_landlock_is_refused_with_the_reason(tmp_path, monkeypatch):
    monkeypatch.setattr(sandbox, "landlock_abi", lambda: 0)
    with pytest.raises(sandbox.SandboxUnavailable, match="has no Landlock .*--no-sandbox"):
        sandbox.apply(sandbox.Sandbox.for_check(__file__, __file__, tmp_path / "scratch"))
