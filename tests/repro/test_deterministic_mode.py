"""``deterministic()`` routes a model's ops through the fixed-order kernels, restores the
originals on exit, and makes a small transformer's logits and greedy tokens the same
bits whatever the batch size and the sequence's position."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from kernelaudit.errors import InvalidArgument
from kernelaudit.repro import companions, gemm, mode, tinylm

#: one block is enough: every covered op runs; the interpreter runs each program in Python
SMALL = tinylm.LMConfig(vocab=32, length=16, dim=32, heads=4, hidden=64, layers=1)


@pytest.fixture(autouse=True)
def _clean():
    mode.uninstall()
    yield
    mode.uninstall()


@pytest.fixture
def launches(monkeypatch):
    """Counts the fixed-order kernels each covered op reaches."""
    seen = []
    for name in ("mm", "addmm", "bmm", "linear"):
        real = getattr(gemm, name)
        monkeypatch.setattr(gemm, name, lambda *a, _r=real, _n=name, **k: (seen.append(_n), _r(*a, **k))[1])
    for name in ("softmax", "log_softmax", "layer_norm", "rms_norm", "attention"):
        real = getattr(companions, name)
        monkeypatch.setattr(companions, name, lambda *a, _r=real, _n=name, **k: (seen.append(_n), _r(*a, **k))[1])
    return seen


def test_covered_ops_reach_the_fixed_order_kernels_and_match_torch(launches):
    g = torch.Generator().manual_seed(0)
    x, w, b = torch.randn(3, 5, 16, generator=g), torch.randn(8, 16, generator=g), torch.randn(8, generator=g)
    calls = {
        "linear": lambda: F.linear(x, w, b), "mm": lambda: x[0] @ w.t(), "addmm": lambda: torch.addmm(b, x[0], w.t()),
        "bmm": lambda: torch.bmm(x, x.transpose(1, 2)), "softmax": lambda: torch.softmax(x, 1),
        "log_softmax": lambda: F.log_softmax(x, -1), "layer_norm": lambda: F.layer_norm(x, (16,), w.sum(0).expand(16)),
        "rms_norm": lambda: F.rms_norm(x, (16,), eps=1e-6),
        "attention": lambda: F.scaled_dot_product_attention(x, x, x, is_causal=True)}
    expected = {name: fn() for name, fn in calls.items()}
    with torch.inference_mode(), mode.deterministic():
        for name, fn in calls.items():
            launches.clear()
            got = fn()
            assert name in launches, name
            torch.testing.assert_close(got, expected[name], rtol=1e-5, atol=1e-5)
    launches.clear()
    F.linear(x, w, b)
    assert launches == [] and mode.installed() is None


def test_ops_outside_the_contract_keep_their_original_kernels(launches):
    a = torch.arange(6, dtype=torch.float64).reshape(2, 3)
    with mode.deterministic():
        assert torch.equal(a @ a.t(), torch.tensor([[5.0, 14.0], [14.0, 50.0]], dtype=torch.float64))
        torch.softmax(torch.ones(2, 3, dtype=torch.float64), -1)
        F.layer_norm(torch.ones(2, 3, 4), (3, 4))
    assert launches == []


def test_install_changes_order_and_context_restores_previous():
    mode.install("mma")
    with mode.deterministic("ieee"):
        assert mode.installed() == "ieee"
    assert mode.installed() == "mma"
    mode.uninstall()
    assert mode.installed() is None
    with pytest.raises(InvalidArgument, match="order"):
        mode.install("fastest")
    with pytest.raises(InvalidArgument, match="device_types"):
        mode.install("ieee", device_types=("mps",))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_tiny_lm_logits_same_bits_at_every_batch_size_and_position(dtype):
    model = tinylm.build(SMALL, dtype=dtype)
    ids = torch.randint(0, SMALL.vocab, (5, 6), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode(), mode.deterministic():
        alone = model(ids[2:3])[0]
        batch = model(ids)
        again = model(ids)
        moved = model(ids[[3, 4, 1, 0, 2]])     # sample 2 at position 4 of 5, others moved
    for other in (batch[2], again[2], moved[4]):
        assert torch.equal(other.view(torch.uint8), alone.view(torch.uint8))


def test_tiny_lm_greedy_tokens_same_at_batch_1_and_batch_4():
    model = tinylm.build(SMALL)
    prompts = torch.randint(0, SMALL.vocab, (4, 5), generator=torch.Generator().manual_seed(2))
    with mode.deterministic():
        one = tinylm.generate(model, prompts[3:4], 3)
        four = tinylm.generate(model, prompts, 3)
    assert torch.equal(one[0], four[3])
    assert one.shape == (1, 8)


def _run(code: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter is chosen only without CUDA")
def test_importing_repro_first_keeps_kernels_runnable_after_inductor_loads_triton():
    ok = _run("import torch, kernelaudit.repro, torch._inductor\n"
              "from kernelaudit.repro import companions\n"
              "print(companions.rms_norm(torch.ones(2, 8)).sum().item())")
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.strip() == "16.0"
    late = _run("import torch, torch._inductor\nfrom kernelaudit.repro import gemm")
    assert late.returncode != 0 and "import kernelaudit.repro before" in late.stderr
