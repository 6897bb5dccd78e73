"""The rules of the H200 quick sweep of OpInfo ops (``known_faults/quick_sweep_opinfo.json``)
on a GPU: the guard splits ``torch.cdist`` past 2^32 outputs (silently wrong bare) and
``F.adaptive_avg_pool1d`` past 2^31 elements (an illegal memory access bare) and nearest
``F.interpolate`` past 2^31 input elements (wrong, or an illegal memory access, bare) along
dim 0, and the answers equal the same op run in small batches. Of the bare faults only
interpolate's is re-run, in a child process: an illegal memory access would end this
process's CUDA context. The rules are taken
without their version gate, so the tests run on any CUDA machine with about 60 GiB free.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from kernelaudit.guard import intercept
from kernelaudit.guard.rules import known_faults

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

#: The sweep's sizes (benchmarks/results/2026-12-04-h200-quick-sweep-opinfo-families/README.md).
CDIST_B = 143_165_580          # (B, 5, 2) x (B, 6, 2): 4,294,967,400 outputs, just past 2^32
POOL_FWD_N = 536_870_880       # (N, 8) -> (N, 5): input just below 2^32, output past 2^31
# (N, 8) -> (N, 8): past 2^31 elements, and at or past the forward rule's 2,147,483,969 so
# that the forward is split too: bare, its output past 2^31 faults (at 268,435,496 rows,
# 321 elements below that rule, the H200 raised an illegal memory access in this test)
POOL_BWD_N = 268_435_497
CHUNK = 2**22


def _rules(op: str):
    rules = [dataclasses.replace(r, versions={}) for r in known_faults() if r.op == op]
    assert rules, f"no shipped rule for {op}"
    return rules


def _free_gib() -> float:
    return torch.cuda.mem_get_info()[0] / 2**30


def _equal_in_chunks(got: torch.Tensor, ref_fn, n: int, chunk: int = CHUNK) -> None:
    """``got`` equals ``ref_fn(i0, i1)`` over row batches of ``chunk``: each below the fault."""
    for i0 in range(0, n, chunk):
        i1 = min(i0 + chunk, n)
        want = ref_fn(i0, i1)
        if not torch.equal(got[i0:i1], want):
            bad = (got[i0:i1] != want).nonzero()[0]
            pytest.fail(f"rows {i0}:{i1}: first bad index {(i0 + bad[0].item(), *bad[1:].tolist())}: "
                        f"got {got[i0:i1][tuple(bad)].item()}, want {want[tuple(bad)].item()}")


def test_cdist_past_2_32_outputs_under_the_guard_equals_cdist_in_small_batches():
    if _free_gib() < 45:
        pytest.skip(f"needs about 45 GiB free on the GPU, has {_free_gib():.0f}")
    g = torch.Generator(device="cuda").manual_seed(0)
    x1 = torch.randn(CDIST_B, 5, 2, generator=g, device="cuda")
    x2 = torch.randn(CDIST_B, 6, 2, generator=g, device="cuda")
    try:
        engine = intercept.install("fix", rules=_rules("cdist"), native=False)
        got = torch.cdist(x1, x2)
        st = engine.stats()
        assert st.fixed == 1 and st.refused == 0, st.summary()
    finally:
        intercept.uninstall()
    _equal_in_chunks(got, lambda i0, i1: torch.cdist(x1[i0:i1], x2[i0:i1]), CDIST_B)
    del x1, x2, got
    torch.cuda.empty_cache()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_adaptive_avg_pool1d_past_2_31_under_the_guard_equals_pooling_in_small_batches(dtype):
    if _free_gib() < 40:
        pytest.skip(f"needs about 40 GiB free on the GPU, has {_free_gib():.0f}")
    g = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(POOL_FWD_N, 8, generator=g, device="cuda", dtype=dtype)
    try:
        engine = intercept.install("fix", rules=_rules("nn.functional.adaptive_avg_pool1d"), native=False)
        got = F.adaptive_avg_pool1d(x, 5)
        assert engine.stats().fixed == 1, engine.stats().summary()
    finally:
        intercept.uninstall()
    _equal_in_chunks(got, lambda i0, i1: F.adaptive_avg_pool1d(x[i0:i1], 5), POOL_FWD_N)
    del x, got
    torch.cuda.empty_cache()
    # the backward past 2^31 elements (output size 8: every input element gets one gradient)
    x = torch.randn(POOL_BWD_N, 8, generator=g, device="cuda", dtype=dtype, requires_grad=True)
    go = torch.randn(POOL_BWD_N, 8, generator=g, device="cuda", dtype=dtype)
    try:
        engine = intercept.install("fix", rules=_rules("nn.functional.adaptive_avg_pool1d"), native=False)
        F.adaptive_avg_pool1d(x, 8).backward(go)
        assert engine.stats().fixed >= 1, engine.stats().summary()
    finally:
        intercept.uninstall()

    def ref(i0, i1):
        xs = x.detach()[i0:i1].clone().requires_grad_()
        F.adaptive_avg_pool1d(xs, 8).backward(go[i0:i1])
        return xs.grad

    _equal_in_chunks(x.grad, ref, POOL_BWD_N)


#: The bracketed quick sweep's float32 heads case: 65537 heads of 256 x 256 scores, past 2^32.
HEADS = 65_537


def test_float32_attention_with_65537_heads_under_the_guard_equals_attention_by_heads():
    # Bare, the forward raised "CUDA error: invalid argument" on the H200 (torch 2.11);
    # the rule of known_faults/sdpa_heads_float32.json splits along the heads.
    if _free_gib() < 30:
        pytest.skip(f"needs about 30 GiB free on the GPU, has {_free_gib():.0f}")
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(1, HEADS, 256, 64, generator=g, device="cuda") for _ in range(3))
    rules = [r for r in _rules("sdpa.heads") if r.dtypes == ("float32",)]
    try:
        engine = intercept.install("fix", rules=rules, native=False)
        got = F.scaled_dot_product_attention(q, k, v)
        st = engine.stats()
        assert st.fixed == 1 and st.refused == 0, st.summary()
    finally:
        intercept.uninstall()
    step = 4096
    for h0 in range(0, HEADS, step):
        want = F.scaled_dot_product_attention(q[:, h0:h0 + step], k[:, h0:h0 + step], v[:, h0:h0 + step])
        # each head is computed on its own; a tight tolerance, not equality, in case the
        # backend picks another tile for another head count
        torch.testing.assert_close(got[:, h0:h0 + step], want, rtol=1e-5, atol=1e-6,
                                   msg=lambda m: f"heads {h0}:{h0 + step}: {m}")


#: The quick sweep's interpolate(nearest) case at 2^31+ (benchmarks/results/
#: 2026-12-04-h200-quick-sweep-146s-interpolate-past-2p31): (N, 3, 4096) -> (N, 3, 3072),
#: 2,147,696,640 input elements, the output below 2^31.
INTERP_N = 174_780


#: The bare call in a child process: on the H200 (torch 2.11) it has come out wrong past
#: 2^31 input elements (the sweep) and has raised an illegal memory access (this test, 2026-12-05),
#: which ends a process's CUDA context. Prints ``ok``, ``wrong`` or nothing (a crash).
_BARE = """
import sys, torch, torch.nn.functional as F
dtype = getattr(torch, sys.argv[1]); n = int(sys.argv[2])
g = torch.Generator(device="cuda").manual_seed(2)
x = torch.randn(n, 3, 4096, generator=g, device="cuda", dtype=dtype)
bare = F.interpolate(x, size=3072, mode="nearest")
ok = all(torch.equal(bare[i:i + 4096], F.interpolate(x[i:i + 4096], size=3072, mode="nearest"))
         for i in range(0, n, 4096))
print("ok" if ok else "wrong")
"""


def _bare_interpolation(dtype: torch.dtype) -> str:
    """``ok``, ``wrong`` or ``crash``: the unguarded call, run where a crash cannot end this process."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _BARE, str(dtype).split(".")[-1], str(INTERP_N)],
                          capture_output=True, text=True, timeout=300)
    out = done.stdout.strip().splitlines()
    return out[-1] if done.returncode == 0 and out else "crash"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_nearest_interpolation_past_2_31_inputs_under_the_guard_equals_it_in_small_batches(dtype):
    # Bare, the H200 (torch 2.11) got the rows past 2^31 input elements wrong (the sweep's
    # case) or faulted (_BARE); the shipped rule splits along dim 0.
    if _free_gib() < 30:
        pytest.skip(f"needs about 30 GiB free on the GPU, has {_free_gib():.0f}")
    bare = _bare_interpolation(dtype)
    g = torch.Generator(device="cuda").manual_seed(2)
    x = torch.randn(INTERP_N, 3, 4096, generator=g, device="cuda", dtype=dtype)
    rows = 4096

    def ref(i0, i1):
        return F.interpolate(x[i0:i1], size=3072, mode="nearest")

    rules = [r for r in _rules("nn.functional.interpolate.nearest") if r.action == "fix"
             and r.dtypes == (str(dtype).split(".")[-1],)]
    try:
        engine = intercept.install("fix", rules=rules, native=False)
        got = F.interpolate(x, size=3072, mode="nearest")
        st = engine.stats()
        assert st.fixed == 1 and st.refused == 0, st.summary()
    finally:
        intercept.uninstall()
    _equal_in_chunks(got, ref, INTERP_N, rows)  # one batch of CHUNK rows would be past 2^31 itself
    if torch.__version__.startswith("2.11"):  # the version the sweep found it on
        assert bare != "ok", "the bare call was right: the fault did not reproduce"
    del x, got
    torch.cuda.empty_cache()


def test_nearest_interpolation_backward_past_2_31_inputs_is_split_with_its_sizes_under_the_guard():
    # Bare, upsample_nearest1d_backward refuses 2^31 or more input elements; the shipped
    # rule splits it along dim 0, its input_size argument cut with it (separable.SIZE_ARGS)
    if _free_gib() < 30:
        pytest.skip(f"needs about 30 GiB free on the GPU, has {_free_gib():.0f}")
    g = torch.Generator(device="cuda").manual_seed(3)
    x = torch.randn(INTERP_N, 3, 4096, generator=g, device="cuda", dtype=torch.float16)
    go = torch.randn(INTERP_N, 3, 3072, generator=g, device="cuda", dtype=torch.float16)

    def grad(i0, i1):
        xs = x[i0:i1].detach().requires_grad_()
        F.interpolate(xs, size=3072, mode="nearest").backward(go[i0:i1])
        return xs.grad

    rules = [r for r in _rules("nn.functional.interpolate.nearest") if r.dtypes == ("float16",)]
    assert {r.action for r in rules} == {"fix"}
    try:
        engine = intercept.install("fix", rules=rules, native=False)
        got = grad(0, INTERP_N)
        st = engine.stats()
        assert st.fixed >= 2 and st.refused == 0, st.summary()    # the forward and the backward
    finally:
        intercept.uninstall()
    _equal_in_chunks(got, grad, INTERP_N, 4096)
