"""The shipped sweep-of-record rules on the H200 they came from: the guard *fixes* the
faults the sweep found, and each answer is compared with a correct computation.

* ``torch.arange`` past 2^32 elements is wrong (pytorch/pytorch#197673): computed in
  pieces of offset starts (int64: the CUDA kernel per piece; float32: float64 indexes,
  rounded once);
* the cuDNN SDPA backward past 2^32 scores errors (pytorch/pytorch#181085): split
  along batch into pieces under the threshold.

The first test needs the stack the rules are gated to (torch 2.11 / CUDA 13.0 / driver
580) and checks that the faults still reproduce there; the others take the same rules
without their version gate, so they run on any CUDA machine with ~60 GiB free.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from kernelaudit.guard import intercept
from kernelaudit.guard.rules import RuntimeEnv, active, known_faults

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

N = 2**32 + 16384
CUDNN_BWD = "_scaled_dot_product_cudnn_attention_backward"
#: The sweep's failing SDPA shape: (batch, heads, L, E), 2^32 scores.
SDPA_SHAPE = (65536, 1, 256, 64)
CHUNK = 2**28


def _sweep_rules(gated: bool):
    rules = [r for r in known_faults() if r.name.startswith("sweep-cuda-")]
    return rules if gated else [dataclasses.replace(r, versions={}) for r in rules]


def _arange_is_correct(got: torch.Tensor, start: int = 0) -> None:
    """Chunk by chunk against small (correct) aranges: int64 exactly, floats as the
    exact value rounded once."""
    assert got.numel() == N
    for i0 in range(0, N, CHUNK):
        i1 = min(i0 + CHUNK, N)
        if got.dtype == torch.int64:
            ref = torch.arange(start + i0, start + i1, device="cuda")
        else:
            ref = torch.arange(start + i0, start + i1, dtype=torch.float64, device="cuda").to(got.dtype)
        bad = (got[i0:i1] != ref).nonzero()
        assert bad.numel() == 0, (f"arange {got.dtype}: first bad index {i0 + bad[0].item()}: got "
                                  f"{got[i0 + bad[0].item()].item()}, want {ref[bad[0].item()].item()}")


def _sdpa(q, k, v):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        return F.scaled_dot_product_attention(q, k, v)


def _sdpa_grads(dtype, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v, go = (torch.randn(SDPA_SHAPE, generator=g, device="cuda", dtype=dtype) for _ in range(4))
    leaves = [t.requires_grad_() for t in (q, k, v)]
    _sdpa(*leaves).backward(go)
    return (q, k, v, go), [t.grad for t in leaves]


def test_on_the_gated_stack_the_faults_reproduce_and_the_shipped_rules_hook_them():
    rules = active(_sweep_rules(gated=True), RuntimeEnv.current())
    if not {"arange", "sdpa"} <= {r.op for r in rules}:
        pytest.skip(f"the sweep rules are gated to torch 2.11 / CUDA 13.0 / driver 580; this is "
                    f"{torch.__version__} / {torch.version.cuda}")
    bare = torch.arange(N, device="cuda")
    tail = bare[2**32:]
    assert not torch.equal(tail, torch.arange(2**32, N, device="cuda")), "arange past 2^32 is right here now"
    del bare, tail
    with pytest.raises(RuntimeError, match="is_good"):
        _sdpa_grads(torch.float16)
    torch.cuda.empty_cache()
    try:
        intercept.install("fix", native=False)
        hooked = intercept.hooked()
        assert ("arange.start_out", "screen", "cuda") in hooked and (CUDNN_BWD, "screen", "cuda") in hooked
        got = torch.arange(N, device="cuda")
        _arange_is_correct(got)
        assert intercept.stats().fixed == 1
    finally:
        intercept.uninstall()
        torch.cuda.empty_cache()


@pytest.mark.parametrize("dtype", [torch.int64, torch.float32])
def test_arange_past_2_32_under_the_guard_is_correct(dtype):
    try:
        engine = intercept.install("fix", rules=_sweep_rules(gated=False), native=False)
        got = torch.arange(N, dtype=dtype, device="cuda")
        out = torch.empty(0, dtype=dtype, device="cuda")
        torch.arange(5, 5 + N, out=out)  # the out= variant, with an offset start
        st = engine.stats()
        assert st.fixed == 2 and st.refused == 0, st.summary()
        _arange_is_correct(got)
        del got
        _arange_is_correct(out, start=5)
    finally:
        intercept.uninstall()
        torch.cuda.empty_cache()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_sdpa_backward_past_2_32_scores_under_the_guard_is_correct(dtype):
    try:
        engine = intercept.install("fix", rules=_sweep_rules(gated=False), native=False)
        (q, k, v, go), got = _sdpa_grads(dtype)
        st = engine.stats()
        # The batch (65536) also crosses the attention-batch rules of the full grid, so the
        # forward may be split first (then no backward piece reaches 2^32 scores): one
        # fix or two, never a refusal; the gradients below are the proof.
        assert st.fixed >= 1 and st.refused == 0, st.summary()
    finally:
        intercept.uninstall()
    # half-precision grads: a few ulps of max |grad| (bf16 has 8 bits of mantissa, fp16 11)
    tol = {torch.float16: 1e-2, torch.bfloat16: 4e-2}[dtype]
    # correct computation 1: the same cuDNN kernels on batches of 8192 (2^29 scores each)
    for b0 in range(0, SDPA_SHAPE[0], 8192):
        leaves = [t[b0:b0 + 8192].detach().clone().requires_grad_() for t in (q, k, v)]
        _sdpa(*leaves).backward(go[b0:b0 + 8192])
        for name, g, ref in zip("qkv", got, leaves):
            torch.testing.assert_close(g[b0:b0 + 8192], ref.grad, rtol=tol, atol=tol,
                                       msg=lambda m: f"grad {name}, batches {b0}..{b0 + 8191}: {m}")
    # correct computation 2: float64 math attention on the first and the last batch
    for b in (0, SDPA_SHAPE[0] - 1):
        leaves = [t[b:b + 1].detach().double().requires_grad_() for t in (q, k, v)]
        s = torch.softmax(leaves[0] @ leaves[1].transpose(-2, -1) / SDPA_SHAPE[-1] ** 0.5, dim=-1)
        (s @ leaves[2]).backward(go[b:b + 1].double())
        for name, g, ref in zip("qkv", got, leaves):
            err = (g[b:b + 1].double() - ref.grad).abs().max() / ref.grad.abs().max()
            assert err < tol, f"grad {name}, batch {b}: max error {err:.3g} of max |grad|"
    torch.cuda.empty_cache()
