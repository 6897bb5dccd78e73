"""The sandbox on CUDA: correct CUDA candidates (pure PyTorch, a compiled Triton kernel from the
corpus, a ``load_inline`` CUDA extension) pass under it; one that writes outside, reads a secret,
opens a socket (from Python or from C) or forks without bound is stopped and reported.

Skipped without CUDA or without Landlock. Each check is an isolated child process that
initialises CUDA (and compiles its kernels) inside the sandbox.
"""

from __future__ import annotations

import os
import shutil
import textwrap

import pytest
import torch

from kernelaudit.verdict import Status
from kernelaudit.zoo import sandbox
from kernelaudit.zoo.check import run_check_isolated
from kernelaudit.zoo.sandbox import seccomp
from kernelaudit.zoo.problems import CORPUS_DIR, SOLUTIONS_DIR

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
    pytest.mark.skipif(sandbox.landlock_abi() < 1, reason="the kernel has no Landlock: the sandbox refuses to run"),
]

TORCH_RELU = '''
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, x):
        return torch.clamp_min(x, 0.0)
'''

INLINE_RELU = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SRC = """
__global__ void relu_kernel(const float* x, float* y, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}
torch::Tensor relu(torch::Tensor x) {
    auto y = torch::empty_like(x);
    long n = x.numel();
    relu_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""
ext = load_inline("sandbox_relu", cpp_sources="torch::Tensor relu(torch::Tensor x);", cuda_sources=SRC,
                  functions=["relu"], verbose=False)

class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu(x.contiguous())
'''


@pytest.fixture(autouse=True)
def compiled_triton(monkeypatch):
    """The child compiles its Triton kernels for the GPU (the CPU tests' conftest may ask for the interpreter)."""
    monkeypatch.setenv("TRITON_INTERPRET", "0")


def _check(problem, cand, timeout_s: float = 300):
    return run_check_isolated(problem, cand, "kernelbench", device="cuda", timeout_s=timeout_s)


def test_a_pure_torch_cuda_candidate_passes_under_the_sandbox(tmp_path):
    cand = tmp_path / "relu_torch.py"
    cand.write_text(TORCH_RELU)
    v = _check(CORPUS_DIR / "relu.py", cand).verdict
    assert v.ok, v.message


@pytest.mark.parametrize("name", ["gelu", "softmax"])
def test_a_compiled_triton_candidate_from_the_corpus_passes_under_the_sandbox(name):
    """ptxas and the C launcher's compiler run inside the box; Triton's cache is in the scratch dir."""
    v = _check(CORPUS_DIR / f"{name}.py", SOLUTIONS_DIR / f"{name}.py").verdict
    assert v.ok, v.message


@pytest.mark.skipif(shutil.which("nvcc") is None and not os.environ.get("CUDA_HOME"), reason="needs nvcc")
def test_a_load_inline_cuda_candidate_passes_under_the_sandbox(tmp_path):
    """KernelBench's usual candidate: ninja and nvcc build an extension in the scratch dir."""
    cand = tmp_path / "relu_inline.py"
    cand.write_text(INLINE_RELU)
    v = _check(CORPUS_DIR / "relu.py", cand, timeout_s=600).verdict
    assert v.ok, v.message


def test_a_violating_cuda_candidate_is_stopped_and_each_violation_reported(tmp_path):
    (tmp_path / "secret.txt").write_text("the secret")
    cand = tmp_path / "cand.py"
    cand.write_text(textwrap.dedent(f"""
        import ctypes, os, socket
        import torch
        import torch.nn as nn

        OUTSIDE = {str(tmp_path / 'escaped.txt')!r}
        SECRET = {str(tmp_path / 'secret.txt')!r}

        class ModelNew(nn.Module):
            def forward(self, x):
                for attempt in (lambda: open(OUTSIDE, "w").write("escaped"), lambda: open(SECRET).read(),
                                lambda: socket.create_connection(("127.0.0.1", 9))):
                    try:
                        attempt()
                    except OSError:
                        pass
                libc = ctypes.CDLL(None, use_errno=True)
                if libc.socket(socket.AF_INET, socket.SOCK_STREAM, 0) != -1:  # seccomp answers EPERM
                    open(OUTSIDE + ".c-socket", "w")
                return torch.relu(x)
    """))
    v = _check(CORPUS_DIR / "relu.py", cand).verdict
    assert v.status is Status.ERROR, v.message
    kinds = [f["kind"] for f in v.details["sandbox"]["violations"]]
    assert kinds[:3] == ["write", "read", "socket"], v.details["sandbox"]
    assert not (tmp_path / "escaped.txt").exists() and not (tmp_path / "escaped.txt.c-socket").exists()
    if not seccomp.available():  # with the filter, socket(AF_INET) from C failed, so nothing tried to record it
        assert not any(".c-socket" in f["message"] for f in v.details["sandbox"]["violations"]), v.details
    print("\n".join(v.details["sandbox"]["enforced"]))


def test_cuda_names_its_threads_inside_the_sandbox_and_the_rest_of_proc_stays_read_only(tmp_path):
    """The one relaxation on CUDA (issue 15): the driver's cuInit writes /proc/<pid>/task/<tid>/comm, denied
    before (error 304). The check's own task directory is writable; its /proc/<pid> files and others' are not."""
    cand = tmp_path / "proc_writes.py"
    cand.write_text(TORCH_RELU.replace("import torch\n", "import ctypes, os, threading\nimport torch\n", 1).replace(
        "        return torch.clamp_min(x, 0.0)",
        "        libc = ctypes.CDLL(None, use_errno=True)\n"
        "        pid = os.getpid()\n"
        "        def writable(path):  # from C: the audit hook does not see it, Landlock does\n"
        "            fd = libc.open(path.encode(), os.O_WRONLY)\n"
        "            return fd >= 0 and libc.close(fd) == 0\n"
        "        own = f'/proc/{pid}/task/{threading.get_native_id()}/comm'\n"
        "        denied = [f'/proc/{pid}/oom_score_adj', f'/proc/{pid}/comm', f'/proc/{os.getppid()}/comm']\n"
        "        if not writable(own) or any(writable(p) for p in denied):\n"
        "            raise RuntimeError(f'own comm {writable(own)}, ' + str({p: writable(p) for p in denied}))\n"
        "        return torch.clamp_min(x, 0.0)"))
    v = _check(CORPUS_DIR / "relu.py", cand).verdict
    assert v.ok, v.message


def test_a_cuda_fork_bomb_is_stopped_and_reported(tmp_path):
    cand = tmp_path / "bomb.py"
    cand.write_text(TORCH_RELU.replace("return", "__import__('subprocess').run(['sh', '-c', 'b() { b | b & }; b'])\n"
                                                 "        return"))
    result = _check(CORPUS_DIR / "relu.py", cand, timeout_s=120)
    v = result.verdict
    assert v.status is Status.ERROR and v.message.startswith("the candidate forked without bound"), v.message
    assert result.seconds < 60, result.seconds
    print(v.message)
