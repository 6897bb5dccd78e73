"""The guard on a real CUDA device (skipped without one).

* the CPU proof again on CUDA kernels, at scale 20 (fp32 and bf16);
* the ``torch.library`` overrides on the CUDA key at the real 2^32 threshold (the
  ``mps`` rules enforced on CUDA tensors): ``fix`` is bitwise the unguarded result,
  ``raise`` refuses, safe calls pass untouched;
* the study's backward case at the real threshold under the ``mps`` fault model
  emulated on CUDA: (256x64)@(64x256), B = 65537, gradients fixed.

    pytest tests/gpu/test_guard_gpu.py -v
"""

from __future__ import annotations

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

from kernelaudit import guard
from kernelaudit.sweep.cases import GridSpec, grid
from kernelaudit.errors import UnsafeCallError
from kernelaudit.thresholds import REAL, Thresholds

GPU_SCALE = 20
#: bf16 comparison tolerance when a piece's cuBLAS algorithm differs from the whole call's.
BF16_RTOL, BF16_ATOL = 1.6e-2, 1e-2
#: Device memory the real-threshold tests need (bytes).
BIG_TEST_BYTES = 60 * 2**30


def _free_bytes() -> int:
    free, _ = torch.cuda.mem_get_info()
    return free


@pytest.fixture(autouse=True)
def _clean():
    guard.uninstall()
    yield
    guard.uninstall()
    torch.cuda.empty_cache()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_guard_proof_on_cuda_kernels(dtype):
    from kernelaudit.guard.proof import prove, tolerance

    cases = grid(GridSpec(ops=("bmm", "baddbmm", "linear", "attention", "sdpa"), dtypes=(dtype,),
                          thresholds=("2^31", "2^32"), positions=("below", "above"), scale=GPU_SCALE))
    failures, corrupted = [], 0
    for case in cases:
        p = prove(case, device="cuda")
        if p.fix_error() > tolerance(case):
            failures.append(f"{case.id}: fix error {p.fix_error():.3g}")
        if p.corrupted:
            corrupted += 1
            if not isinstance(p.runs["raise"].error, UnsafeCallError):
                failures.append(f"{case.id}: not refused")
            if p.runs["verify"].error is None:
                failures.append(f"{case.id}: verify missed it")
        elif p.runs["fix"].stats.flagged:
            failures.append(f"{case.id}: untouched case was touched")
    assert corrupted > 0
    assert not failures, "\n".join(failures[:20])


def test_cuda_overrides_fix_a_real_2p32_bmm_bitwise():
    if _free_bytes() < 24 * 2**30:
        pytest.skip("needs 24 GiB free")
    B = REAL.t32 // (256 * 256) + 1                         # output just past 2^32
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(B, 256, 64, device="cuda", dtype=torch.bfloat16, generator=g)
    b = torch.randn(B, 256, 64, device="cuda", dtype=torch.bfloat16, generator=g).transpose(1, 2)
    ref = torch.bmm(a, b)
    ref_small = torch.bmm(a[:8], b[:8])
    policy = guard.mps_policy(REAL, device_types=("cuda",))
    with guard.guarding("fix", policy=policy) as e:
        got = torch.bmm(a, b)
        small = torch.bmm(a[:8], b[:8])
    # cuBLAS may pick another algorithm for fewer batches: bitwise is expected, the
    # dtype's tolerance is required
    print(f"fix bitwise equal at the real threshold: {torch.equal(got, ref)}")
    torch.testing.assert_close(got, ref, rtol=BF16_RTOL, atol=BF16_ATOL)
    del got
    assert e.stats().fixed == 1 and e.stats().passed == 1
    assert torch.equal(small, ref_small)  # untouched: the very same kernel call
    with guard.guarding("raise", policy=policy):
        with pytest.raises(UnsafeCallError, match="rule A"):
            torch.bmm(a, b)


def test_study_backward_case_at_the_real_threshold_is_fixed_under_the_fault_model():
    # BACKGROUND 1: contiguous (256x64)@(64x256), B = 65537: forward right, grad_a and
    # grad_b wrong in batch 65536 (rule C in the backward's bmm).
    if _free_bytes() < BIG_TEST_BYTES:
        pytest.skip("needs 60 GiB free")
    backward_case("cuda", REAL, n=256, k=64, dtype=torch.bfloat16)


def backward_case(device, th, n, k, dtype):
    """Honest, faulty and guarded gradients of a contiguous (n x k)@(k x n) bmm with
    B = 2^32 / (n*n) + 1 batches (scaled by ``th``)."""
    import contextlib

    from kernelaudit.faults import make_fault_model

    B = th.t32 // (n * n) + 1
    g = torch.Generator(device=device).manual_seed(0)
    a0 = torch.randn(B, n, k, device=device, dtype=dtype, generator=g)
    b0 = torch.randn(B, k, n, device=device, dtype=dtype, generator=g)
    go = torch.randn(B, n, n, device=device, dtype=dtype, generator=g)

    def grads(ctx):
        a, b = a0.clone().requires_grad_(), b0.clone().requires_grad_()
        with ctx:
            torch.bmm(a, b).backward(go)
        return a.grad, b.grad

    ref = grads(contextlib.nullcontext())
    bad = grads(make_fault_model("mps", th))
    assert not torch.equal(bad[0][B - 1], ref[0][B - 1])      # the last batch is corrupted
    assert torch.equal(bad[0][: B - 1], ref[0][: B - 1])      # and only it
    del bad
    with guard.guarding("fix", fault_model="mps", scale=th.bits) as e:
        a, b = a0.clone().requires_grad_(), b0.clone().requires_grad_()
        torch.bmm(a, b).backward(go)
    assert e.stats().fixed >= 1
    for got, want in ((a.grad, ref[0]), (b.grad, ref[1])):
        if dtype == torch.bfloat16:
            torch.testing.assert_close(got, want, rtol=BF16_RTOL, atol=BF16_ATOL)
        else:
            torch.testing.assert_close(got, want)


@pytest.mark.parametrize("native", [None, False], ids=["native-if-available", "python-overrides"])
def test_cuda_overrides_pass_small_calls_untouched_and_fix_unsafe_ones(native):
    policy = guard.mps_policy(Thresholds(24), device_types=("cuda",))
    a = torch.randn(300, 256, 64, device="cuda")
    b = torch.randn(300, 256, 64, device="cuda").transpose(1, 2)   # output 2^24 * 1.17: rule A at scale 24
    ref = torch.bmm(a, b)
    small = torch.bmm(a[:4], b[:4])
    with guard.guarding("fix", policy=policy, native=native) as e:
        got = torch.bmm(a, b)
        got_small = torch.bmm(a[:4], b[:4])
    torch.testing.assert_close(got, ref)
    assert torch.equal(got_small, small)
    assert e.stats().fixed == 1 and e.stats().passed == 1


@pytest.mark.parametrize("dim", [0, 1], ids=["batch", "heads"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_flash_attention_past_batch_or_heads_65535_raises_and_the_shipped_rules_fix_it(dtype, dim):
    """The H200 sweeps' ``attn_batch`` findings (flash attention, forward and backward,
    raises ``CUDA error: invalid argument`` at 65536 on the batch or on the heads dim):
    under the guard with the shipped database the same calls run in pieces along that
    dim and match the math backend."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F

    torch.manual_seed(0)
    shape = (65536, 1, 8, 2) if dim == 0 else (1, 65536, 8, 2)
    q, k, v = (torch.randn(*shape, device="cuda", dtype=dtype, requires_grad=True) for _ in range(3))
    with pytest.raises(Exception, match="invalid argument"):
        F.scaled_dot_product_attention(q, k, v)
        torch.cuda.synchronize()
    g = torch.randn(*shape, device="cuda", dtype=dtype)
    engine = guard.install("fix")
    out = F.scaled_dot_product_attention(q, k, v)
    out.backward(g)
    torch.cuda.synchronize()
    got = (out.detach(), q.grad, k.grad, v.grad)
    guard.uninstall()
    assert engine.stats().fixed >= 2, engine.stats().summary()  # the forward and the backward
    # the fix is the same kernel on pieces: bitwise what flash gives on those pieces (the
    # largest safe piece is 32768, but a split takes at least MIN_PIECES)
    from kernelaudit.guard.separable import MIN_PIECES

    step = 65536 // MIN_PIECES
    pieces = []
    for start in range(0, 65536, step):
        qs, ks, vs = (t.detach().narrow(dim, start, step).clone().requires_grad_() for t in (q, k, v))
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            o = F.scaled_dot_product_attention(qs, ks, vs)
        o.backward(g.narrow(dim, start, step))
        pieces.append((o.detach(), qs.grad, ks.grad, vs.grad))
    for i, a in enumerate(got):
        assert torch.equal(a, torch.cat([p[i] for p in pieces], dim=dim)), i
    # and close to the float32 math backend, relative to each tensor's scale
    q2, k2, v2 = (t.detach().float().requires_grad_() for t in (q, k, v))
    with sdpa_kernel([SDPBackend.MATH]):
        want = F.scaled_dot_product_attention(q2, k2, v2)
    want.backward(g.float())
    bound = 2.0**-8 if dtype == torch.float16 else 2.0**-5
    for a, b in zip(got, (want, q2.grad, k2.grad, v2.grad)):
        b = b.detach()
        assert float((a.float() - b).abs().max()) <= bound * float(b.abs().max())
