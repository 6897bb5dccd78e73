"""The rules of the full grid's pooling and factory findings
(``known_faults/full_grid_pools_factories.json``) on a GPU: under the guard,
``torch.linspace`` and ``torch.logspace`` past 2^32 points are computed in pieces and equal
the closed form, and the pooling calls that read or wrote out of
bounds past 2^31 elements (the sweep's shapes, just below 2^32) are split along dim 0 and
equal the same op in small batches; float16 softmin's backward past 2^32 elements runs over
the last dim (``known_faults/full_grid_softmax_backward.json``); a layer or RMS norm backward over
two normalized dims past 65,536 rows is flattened (``known_faults/norm_backward_rows.json``)
and its weight gradient equals the sum over chunks of 65,536 rows; rrelu in training past 2^31
elements, bernoulli past 2^31 + 16 and multinomial past 2^31 - 16384 draw in pieces
(``known_faults/random_draws.json``), every draw checked; unique_consecutive past 2^31
elements is merged from pieces (``known_faults/full_grid_2_31.json``); pinv of one 858,993,410 x 5
matrix, refused bare by cuSOLVER, runs its SVD through a QR of row pieces
(``known_faults/tall_svd.json``), and pinverse of 85,899,348 5 x 5 matrices, an illegal memory
access bare, its batched SVD in pieces of whole matrices (``known_faults/batched_svd.json``); det and slogdet of 2^31 - 8 1 x 1 matrices, failing bare
in cuBLAS's batched LU, run in pieces of the batch, det's backward included
(``known_faults/full_grid_batched_lu_chunk_cat.json``; its solve: ``known_faults/batched_lu_solve.json``);
float32 matrix_exp past 2^31 bytes, batched eigvalsh past 65,535 matrices and layer norm past
2^31 - 1 rows (``full_grid_float32.json``, ``batched_eigh_layer_norm_rows.json``). Bare, the pooling calls end
the process's CUDA context (an illegal memory access), so none is run bare here. The
rules are taken without their version gate; each test needs 20-60 GiB free.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from kernelaudit.guard import intercept
from kernelaudit.guard.rules import load_rules

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

CHUNK = 2**20


def _known(file: str):
    from pathlib import Path

    import kernelaudit.guard as guard

    return Path(guard.__file__).parent / "known_faults" / file


def _rules(op: str, file: str = "full_grid_pools_factories.json"):
    rules = [dataclasses.replace(r, versions={}) for r in load_rules(_known(file)) if r.op == op]
    assert rules, f"no shipped rule for {op}"
    return rules


def _need(gib: float) -> None:
    # an earlier test's tensors are freed but still cached by the allocator
    gc.collect()
    torch.cuda.empty_cache()
    free = torch.cuda.mem_get_info()[0] / 2**30
    if free < gib:
        pytest.skip(f"needs about {gib:.0f} GiB free on the GPU, has {free:.0f}")


def _guarded(rules, fn):
    try:
        engine = intercept.install("fix", rules=rules, native=False)
        out = fn()
        return out, engine.stats()
    finally:
        intercept.uninstall()


def test_linspace_and_logspace_past_2_32_points_under_the_guard_are_the_closed_form():
    _need(40)
    n = 2**32 + 16384
    got, st = _guarded(_rules("linspace"), lambda: torch.linspace(0.0, 1.0, n, device="cuda"))
    assert st.fixed == 1 and st.refused == 0, st.summary()
    step = 1.0 / (n - 1)
    for i0 in (0, 2**31, 2**32 - 8, n - 4096):   # around every limit, and the tail bare leaves 0.0
        i = torch.arange(i0, i0 + 4096, device="cuda", dtype=torch.float64)
        want = torch.where(i < n // 2, i * step, 1.0 - (n - 1 - i) * step).float()
        torch.testing.assert_close(got[i0:i0 + 4096], want, rtol=0, atol=1e-7, msg=lambda m: f"from {i0}: {m}")
    assert got[-1].item() == 1.0
    got = None
    torch.cuda.empty_cache()
    got, st = _guarded(_rules("logspace"), lambda: torch.logspace(0.0, 1.0, n, device="cuda"))
    assert st.fixed == 1 and st.refused == 0, st.summary()
    for i0 in (0, 2**32 - 8, n - 4096):                       # the tail bare leaves 0.0
        i = torch.arange(i0, i0 + 4096, device="cuda", dtype=torch.float64)
        want = torch.pow(10.0, torch.where(i < n // 2, i * step, 1.0 - (n - 1 - i) * step)).float()
        torch.testing.assert_close(got[i0:i0 + 4096], want, rtol=2e-7, atol=0, msg=lambda m: f"from {i0}: {m}")


#: (op, call, input shape, dtype, direction): the sweep's failing shapes
#: (benchmarks/results/2026-12-05-h100-full-grid-segments-and-pool-findings/README.md).
POOLS = [
    ("nn.functional.adaptive_avg_pool2d", lambda t: F.adaptive_avg_pool2d(t, (5, 7)), (8388607, 8, 8, 8),
     torch.float32, "fwd"),
    ("nn.functional.adaptive_max_pool1d", lambda t: F.adaptive_max_pool1d(t, 3), (268435440, 4, 4),
     torch.float32, "fwd"),
    ("nn.functional.adaptive_avg_pool3d", lambda t: F.adaptive_avg_pool3d(t, (5, 7, 4)), (8388600, 8, 8, 8),
     torch.float32, "bwd"),
    ("nn.functional.adaptive_max_pool2d", lambda t: F.adaptive_max_pool2d(t, (2, 3)), (67108855, 4, 4, 4),
     torch.float16, "bwd"),
    ("nn.functional.avg_pool1d", lambda t: F.avg_pool1d(t, 3), (159072840, 3, 9), torch.float32, "bwd"),
]


@pytest.mark.parametrize("op,call,shape,dtype,direction", POOLS, ids=[f"{p[0].split('.')[-1]}-{p[4]}" for p in POOLS])
def test_pooling_past_2_31_under_the_guard_equals_pooling_in_small_batches(op, call, shape, dtype, direction):
    _need(60)
    g = torch.Generator(device="cuda").manual_seed(3)
    x = torch.randn(*shape, generator=g, device="cuda", dtype=dtype)
    n = shape[0]
    if direction == "fwd":
        got, st = _guarded(_rules(op), lambda: call(x))
        want = lambda i0, i1: call(x[i0:i1])  # noqa: E731
    else:
        with torch.no_grad():
            go = torch.randn(n, *call(x[:1]).shape[1:], generator=g, device="cuda", dtype=dtype)
        xg = x.detach().requires_grad_()

        def backward():
            call(xg).backward(go)
            return xg.grad

        got, st = _guarded(_rules(op), backward)

        def want(i0, i1):
            xs = x[i0:i1].detach().requires_grad_()
            call(xs).backward(go[i0:i1])
            return xs.grad
    assert st.fixed >= 1 and st.refused == 0, st.summary()
    for i0 in range(0, n, CHUNK):
        i1 = min(i0 + CHUNK, n)
        if direction == "fwd":
            if not torch.equal(got[i0:i1], want(i0, i1)):
                pytest.fail(f"{op} {direction}: rows {i0}:{i1} differ from the op on them alone")
        else:  # these backwards add with atomics (nondeterministic on CUDA): equal up to rounding
            torch.testing.assert_close(got[i0:i1], want(i0, i1),
                                       msg=lambda m: f"{op} {direction}: rows {i0}:{i1}: {m}")


def test_float16_softmin_backward_past_2_32_elements_runs_over_the_last_dim_under_the_guard():
    # known_faults/full_grid_softmax_backward.json: bare, this backward is silently wrong;
    # the guard runs it over the last dim (the kernel right there) and the columns equal
    # the same backward on a few columns alone, up to the order of a column's sum
    _need(64)
    rules = _rules("nn.functional.softmin", "full_grid_softmax_backward.json")
    g = torch.Generator(device="cuda").manual_seed(4)
    rows = 858993465
    x = torch.randn(rows, 5, generator=g, device="cuda", dtype=torch.float16)
    go = torch.randn(5, rows, generator=g, device="cuda", dtype=torch.float16)

    def backward(i0: int, i1: int):
        xs = x[i0:i1].detach().requires_grad_()
        F.softmin(xs.t(), 0).backward(go[:, i0:i1])
        return xs.grad

    got, st = _guarded(rules, lambda: backward(0, rows))
    assert st.fixed == 1 and st.refused == 0, st.summary()
    for i0 in (0, rows // 2, rows - 4096):
        torch.testing.assert_close(got[i0:i0 + 4096], backward(i0, i0 + 4096), rtol=2e-3, atol=1e-3,
                                   msg=lambda m: f"rows {i0}:{i0 + 4096}: {m}")


#: A user's program that hits the full grid's linspace finding and says whether its tail
#: is right (the closed form at the last 4,096 points).
LINSPACE_PROGRAM = """
import torch
n = 2**32 + 16384
x = torch.linspace(0.0, 1.0, n, device="cuda")
i = torch.arange(n - 4096, n, device="cuda", dtype=torch.float64)
want = (1.0 - (n - 1 - i) / (n - 1)).float()
print("RIGHT" if torch.allclose(x[-4096:], want, rtol=0, atol=1e-7) else "WRONG")
"""


def _bare_and_under_kernelaudit_run(tmp_path, op: str, program: str, gib: float):
    """``program`` run bare and under ``kernelaudit run`` (the shipped database,
    version-gated: skipped where ``op``'s rule is not active on this stack): the bare
    process, and the guarded one's stdout after checking it exited 0 with a fix made."""
    from kernelaudit.guard.rules import RuntimeEnv, active, known_faults

    if not [r for r in active(known_faults(), RuntimeEnv.current()) if r.op == op]:
        pytest.skip(f"the {op} rule is not active on this torch / CUDA / driver")
    _need(gib)
    prog = tmp_path / "prog.py"
    prog.write_text(program)
    bare = subprocess.run([sys.executable, str(prog)], capture_output=True, text=True, timeout=300)
    stats = tmp_path / "stats.json"
    guarded = subprocess.run([sys.executable, "-m", "kernelaudit", "run", "--stats-json", str(stats), "--",
                              sys.executable, str(prog)], capture_output=True, text=True, timeout=300)
    assert guarded.returncode == 0, guarded.stderr[-2000:]
    assert json.loads(stats.read_text())["fixed"] >= 1
    return bare, guarded.stdout.strip()


def test_a_program_hitting_the_linspace_fault_is_wrong_bare_and_right_under_kernelaudit_run(tmp_path):
    bare, guarded = _bare_and_under_kernelaudit_run(tmp_path, "linspace", LINSPACE_PROGRAM, 40)
    assert bare.returncode == 0 and bare.stdout.strip() == "WRONG", bare.stderr[-2000:]
    assert guarded == "RIGHT"


@pytest.mark.parametrize("op", ["nn.functional.rms_norm", "nn.functional.layer_norm"])
def test_a_norm_backward_over_two_dims_past_65536_rows_is_flattened_under_the_guard(op):
    # known_faults/norm_backward_rows.json: bare, the two-pass gamma backward writes past
    # its scratch and autograd rejects the flat weight gradient (pytorch/pytorch PR #192016)
    _need(2)
    rules = [dataclasses.replace(r, versions={}) for r in load_rules(_known("norm_backward_rows.json"))
             if r.op == op]
    shape, rows = (2, 3), 2**20
    g = torch.Generator(device="cuda").manual_seed(5)
    x = torch.randn(rows, *shape, generator=g, device="cuda")
    go = torch.randn(rows, *shape, generator=g, device="cuda")
    w = torch.randn(*shape, generator=g, device="cuda")

    def weight_grad(xs, gs):
        ws = w.clone().requires_grad_()
        y = F.rms_norm(xs, shape, ws) if op.endswith("rms_norm") else F.layer_norm(xs, shape, ws)
        return torch.autograd.grad(y, ws, gs)[0]

    got, st = _guarded(rules, lambda: weight_grad(x, go))
    assert st.fixed >= 1 and st.refused == 0, st.summary()
    want = sum(weight_grad(x[i:i + 65536], go[i:i + 65536]) for i in range(0, rows, 65536))
    assert got.shape == shape
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-3)


def test_rrelu_in_training_past_2_31_is_unwritten_bare_and_every_element_right_under_the_guard():
    # known_faults/random_draws.json: the CUDA kernel's int element count is negative
    # from 2^31 elements, so bare nothing is written (RreluWithNoise.cu)
    _need(40)
    rules = _rules("nn.functional.rrelu", "random_draws.json")
    n, lower, upper = 2**31 + 4096, 0.1, 0.3
    g = torch.Generator(device="cuda").manual_seed(6)
    x = torch.randn(n, generator=g, device="cuda", dtype=torch.float16)

    def right(y: torch.Tensor, noise: torch.Tensor) -> bool:
        # elementwise only: no boolean indexing (nonzero) past 2^31 elements in the check
        pos = x > 0
        slope_ok = torch.where(pos, noise == 1, (noise >= lower) & (noise <= upper))
        return bool(slope_ok.all() and torch.equal(y, x * noise))

    noise = torch.full_like(x, float("nan"))
    bare = torch.ops.aten.rrelu_with_noise(x, noise, lower, upper, True)
    torch.cuda.synchronize()
    assert not right(bare, noise), "rrelu_with_noise past 2^31 is right bare on this stack: the rule is stale"
    del bare
    noise.fill_(float("nan"))
    got, st = _guarded(rules, lambda: torch.ops.aten.rrelu_with_noise(x, noise, lower, upper, True))
    assert st.fixed == 1 and st.refused == 0, st.summary()
    assert right(got, noise)


def test_bernoulli_and_multinomial_past_their_limits_draw_right_under_the_guard():
    # known_faults/random_draws.json: probabilities of 0 and 1, and one category a row,
    # make every draw known; bare, bernoulli left values outside {0, 1} and multinomial
    # read out of bounds (not run bare here: it ends the CUDA context)
    _need(60)
    for n in (2**31 + 16384, 2**32 - 16384):                        # wrong bare from 2^31 + 16
        p = torch.zeros(n, device="cuda")
        p[::3] = 1.0
        got, st = _guarded(_rules("bernoulli", "random_draws.json"), lambda: torch.bernoulli(p))
        assert st.fixed == 1 and st.refused == 0, (n, st.summary())
        assert torch.equal(got, p), n
        got = p = None                                              # 32 GiB back before the next
    rows, draws = 2**22, 1024                                       # 2^32 draws
    cats = torch.arange(rows, device="cuda") % 7
    probs = F.one_hot(cats, 7).float()
    got, st = _guarded(_rules("multinomial", "random_draws.json"),
                       lambda: torch.multinomial(probs, draws, replacement=True))
    assert st.fixed == 1 and st.refused == 0, st.summary()
    assert torch.equal(got, cats[:, None].expand(rows, draws))
    got = probs = cats = None
    one = torch.tensor([0.0, 0.0, 1.0, 0.0], device="cuda")                 # the sweep's call: one law
    got, st = _guarded(_rules("multinomial", "random_draws.json"),
                       lambda: torch.multinomial(one, n, replacement=True))
    assert st.fixed == 1 and st.refused == 0, st.summary()
    assert bool((got == 2).all()) and got.numel() == n


def test_unique_consecutive_past_2_31_raises_bare_and_is_merged_from_pieces_under_the_guard():
    # known_faults/full_grid_2_31.json: CUB counts its items in an int
    _need(40)
    n, run = 2**31 + 16384, 1000
    x = (torch.arange(n, device="cuda") // run % 5).to(torch.float16)
    with pytest.raises(RuntimeError, match="too big"):
        torch.unique_consecutive(x)
    rules = _rules("unique_consecutive", "full_grid_2_31.json")
    (out, counts), st = _guarded(rules, lambda: torch.unique_consecutive(x, return_counts=True))
    assert st.fixed == 1 and st.refused == 0, st.summary()
    runs = -(-n // run)
    assert torch.equal(out, (torch.arange(runs, device="cuda") % 5).to(torch.float16))
    assert bool((counts[:-1] == run).all()) and int(counts[-1]) == n - (runs - 1) * run


def test_float16_matrix_exp_past_2_31_is_computed_in_pieces_of_its_batch_forward_and_backward():
    # known_faults/full_grid_2_31.json: bare, CUBLAS_STATUS_INTERNAL_ERROR from its batched
    # GEMMs, forward and backward (the backward by the entry's own fix). The backward's
    # 10 x 10 block matrices ran an H100's 80 GB out of memory (2026-12-06): an H200 test
    _need(100)
    rules = _rules("matrix_exp", "full_grid_2_31.json")
    batch = 85899360                                                 # the grid's 2^31+ case
    g = torch.Generator(device="cuda").manual_seed(7)
    a = (torch.randn(batch, 5, 5, generator=g, device="cuda") / 4).to(torch.float16)
    go = torch.randn(batch, 5, 5, generator=g, device="cuda", dtype=torch.float16)

    def both(i0, i1):
        x = a[i0:i1].detach().requires_grad_()
        y = torch.linalg.matrix_exp(x)
        y.backward(go[i0:i1])
        return y.detach(), x.grad

    (y, dx), st = _guarded(rules, lambda: both(0, batch))
    assert st.fixed >= 2 and st.refused == 0, st.summary()
    for i0 in (0, batch // 2, batch - 4096):
        wy, wdx = both(i0, i0 + 4096)
        torch.testing.assert_close(y[i0:i0 + 4096], wy, rtol=1e-3, atol=1e-3)
        torch.testing.assert_close(dx[i0:i0 + 4096], wdx, rtol=1e-3, atol=1e-3)


def test_pinv_of_one_tall_matrix_at_2_32_elements_raises_bare_and_is_right_under_the_guard():
    # known_faults/tall_svd.json: bare, cusolverDnSgesvdj_bufferSize refuses the SVD under
    # pinv of one 858,993,410 x 5 float32 matrix; guarded, a QR of row pieces (TSQR).
    # Checked against the normal equations in float64: pinv(A) = (A^T A)^-1 A^T (full rank)
    _need(60)
    rules = _rules("linalg.pinv", "tall_svd.json")
    m, n = 858993410, 5                                              # the grid's 2^32- case
    g = torch.Generator(device="cuda").manual_seed(11)
    a = torch.randn(m, n, generator=g, device="cuda")
    if torch.__version__.startswith("2.11"):
        with pytest.raises(RuntimeError, match="CUSOLVER|cusolver"):
            torch.linalg.pinv(a)
    p, st = _guarded(rules, lambda: torch.linalg.pinv(a, rtol=0.0))   # default rtol: eps * m > 1, all zero
    assert st.fixed == 1 and st.refused == 0, st.summary()
    assert p.shape == (n, m)
    gram = torch.zeros(n, n, dtype=torch.float64, device="cuda")
    for i0 in range(0, m, 2**26):
        x = a[i0:i0 + 2**26].double()
        gram += x.T @ x
    inv = torch.linalg.inv(gram)
    for i0 in (0, m // 2, m - 4096):
        want = inv @ a[i0:i0 + 4096].double().T
        torch.testing.assert_close(p[:, i0:i0 + 4096].double(), want, rtol=1e-3, atol=1e-3 * float(want.abs().max()))


DET_PROGRAM = """
import torch
b = 2**31 - 8                     # 1 x 1 matrices: a batch count below INT_MAX
x = torch.rand(b, 1, 1, device="cuda") + 0.5
d = torch.linalg.det(x)
print("RIGHT" if torch.equal(d, x.view(-1)) else "WRONG")
"""


def test_a_program_taking_det_of_2_31_matrices_fails_bare_and_is_right_under_kernelaudit_run(tmp_path):
    # known_faults/full_grid_batched_lu_chunk_cat.json: bare, cublasSgetrfBatched fails
    # (CUBLAS_STATUS_EXECUTION_FAILED); guarded, pieces of the batch
    bare, guarded = _bare_and_under_kernelaudit_run(tmp_path, "linalg.det", DET_PROGRAM, 60)
    assert bare.returncode != 0 and "CUBLAS" in bare.stderr, (bare.returncode, bare.stdout, bare.stderr[-2000:])
    assert guarded == "RIGHT"


def test_slogdet_and_det_backward_of_2_31_matrices_are_computed_in_pieces_of_the_batch():
    # the same file's slogdet rule forward, and det's backward under the fix (the sweep's
    # backward cases errored in their forward). For 1 x 1 matrices the answers are closed
    # forms: sign(x), log|x|, and d det / dx = 1
    _need(70)
    b = 2**31 - 8
    x = torch.rand(b, 1, 1, device="cuda") - 0.5
    file = "full_grid_batched_lu_chunk_cat.json"
    (sign, logabs), st = _guarded(_rules("linalg.slogdet", file), lambda: torch.linalg.slogdet(x))
    assert st.fixed >= 1 and st.refused == 0, st.summary()
    assert torch.equal(sign, x.view(-1).sign())
    torch.testing.assert_close(logabs, x.view(-1).abs().log(), rtol=1e-6, atol=0)
    del sign, logabs
    xg = x.requires_grad_()

    def det_backward():
        d = torch.linalg.det(xg)
        d.backward(torch.ones_like(d))
        return d.detach()

    # det's backward keeps x, its gradient and the LU pieces: with 66 GiB held, an 8 GiB piece ran
    # an 80 GB H100 out of memory (2026-12-06)
    _need(100)
    # bare, det's backward fails in cublasSgetrsBatched (H200, 2026-12-06) even with the
    # forward in pieces: its linalg_lu_solve runs in pieces too (known_faults/batched_lu_solve.json)
    d, st = _guarded(_rules("linalg.det", file) + _rules("linalg.lu_solve", "batched_lu_solve.json"), det_backward)
    assert st.fixed >= 2 and st.refused == 0, st.summary()
    assert torch.equal(d, x.detach().view(-1))
    assert bool((xg.grad == 1).all()), "d det / dx of a 1 x 1 matrix is 1"


def test_float32_matrix_exp_past_2_31_bytes_is_wrong_bare_and_right_in_pieces_under_the_guard():
    # known_faults/full_grid_float32.json: the grid's 2^31 B+ case (21,474,840 5 x 5
    # matrices) read wrong from flat index 0 on an H100; the guard runs pieces of the batch
    _need(20)
    batch = 21474840
    g = torch.Generator(device="cuda").manual_seed(5)
    a = torch.rand(batch, 5, 5, generator=g, device="cuda") * 2 - 1
    want = {i0: torch.linalg.matrix_exp(a[i0:i0 + 4096]) for i0 in (0, batch // 2, batch - 4096)}
    bare = torch.linalg.matrix_exp(a)
    bare_bad = sum(int(((bare[i0:i0 + 4096] - w).abs() > 1e-4 * (1 + w.abs())).sum()) for i0, w in want.items())
    del bare
    got, st = _guarded(_rules("matrix_exp", "full_grid_float32.json"), lambda: torch.linalg.matrix_exp(a))
    assert st.fixed == 1 and st.refused == 0, st.summary()
    for i0, w in want.items():
        torch.testing.assert_close(got[i0:i0 + 4096], w, rtol=1e-5, atol=1e-5)
    print(f"bare: {bare_bad} of {3 * 4096 * 25} checked elements wrong")   # the fault, recorded (-s)


def test_batched_eigvalsh_past_65535_matrices_raises_bare_and_is_split_under_the_guard():
    # known_faults/batched_eigh_layer_norm_rows.json: cusolverDnXsyevBatched fails past
    # 65,535 matrices (the grid's dim axis: 65,572 5 x 5); eigvalsh, matrix_rank and pinv
    # (hermitian) reach it through _linalg_eigh, which the guard runs in pieces
    _need(2)
    g = torch.Generator(device="cuda").manual_seed(9)
    x = torch.rand(65572, 5, 5, generator=g, device="cuda") * 2 - 1
    x = x + x.mT
    # bare, in a process of its own: a cuSOLVER failure may leave this one's context unusable
    bare = subprocess.run([sys.executable, "-c", "import torch; x = torch.rand(65572, 5, 5, device='cuda'); "
                           "torch.linalg.eigvalsh(x + x.mT); torch.cuda.synchronize()"],
                          capture_output=True, text=True, timeout=120)
    assert bare.returncode != 0 and "CUSOLVER_STATUS" in bare.stderr, bare.stderr[-2000:]
    rules = _rules("linalg.eigvalsh", "batched_eigh_layer_norm_rows.json")
    want = torch.cat([torch.linalg.eigvalsh(x[i:i + 8192]) for i in range(0, x.shape[0], 8192)])
    (w, rank, p), st = _guarded(rules, lambda: (torch.linalg.eigvalsh(x), torch.linalg.matrix_rank(x, hermitian=True),
                                                torch.linalg.pinv(x, hermitian=True)))
    assert st.fixed == 3 and st.refused == 0, st.summary()
    torch.testing.assert_close(w, want, rtol=1e-6, atol=1e-6)
    assert torch.equal(rank, torch.cat([torch.linalg.matrix_rank(x[i:i + 8192], hermitian=True)
                                        for i in range(0, x.shape[0], 8192)]))
    torch.testing.assert_close(p[:8192], torch.linalg.pinv(x[:8192], hermitian=True), rtol=1e-4, atol=1e-4)


def test_layer_norm_past_2_31_rows_raises_bare_and_runs_in_row_pieces_under_the_guard():
    # known_faults/batched_eigh_layer_norm_rows.json: "M should be less than maximum CUDA
    # grid size" past 2^31 - 1 rows (the grid's 2,147,483,904 rows of 2, float16), in the
    # forward and (PyTorch's source: the same check) the backward
    _need(60)
    rows = 2147483904
    x = torch.randn(rows, 2, device="cuda", dtype=torch.float16)
    go = torch.randn(rows, 2, device="cuda", dtype=torch.float16) / 1024   # its sums over 2^31 rows fit float16
    w = torch.tensor([1.5, -0.5], device="cuda", dtype=torch.float16)
    b = torch.tensor([0.25, 2.0], device="cuda", dtype=torch.float16)
    with pytest.raises(RuntimeError, match="maximum CUDA grid size"):
        F.layer_norm(x, (2,), w, b)
    rules = [dataclasses.replace(r, versions={}) for r in load_rules(_known("batched_eigh_layer_norm_rows.json"))
             if r.when["kind"] == "rows"]

    def forward_backward():
        xs, ws = x.requires_grad_(), w.detach().requires_grad_()
        y = F.layer_norm(xs, (2,), ws, b)
        y.backward(go)
        return y.detach(), xs.grad, ws.grad

    (y, dx, dw), st = _guarded(rules, forward_backward)
    assert st.fixed == 2 and st.refused == 0, st.summary()
    for i0 in (0, 2**31 - 4096, rows - 4096):
        xs, ws = x[i0:i0 + 4096].detach().requires_grad_(), w.detach().requires_grad_()
        ys = F.layer_norm(xs, (2,), ws, b)
        ys.backward(go[i0:i0 + 4096])
        torch.testing.assert_close(y[i0:i0 + 4096], ys, rtol=1e-3, atol=1e-3)
        torch.testing.assert_close(dx[i0:i0 + 4096], xs.grad, rtol=1e-3, atol=1e-3)
    # the weight's gradient, a sum over every row: against float32 sums of 2^24-row chunks
    want = torch.zeros(2, device="cuda", dtype=torch.float64)
    for i0 in range(0, rows, 2**24):
        xc = x[i0:i0 + 2**24].detach().float()
        xhat = (xc - xc.mean(1, keepdim=True)) * torch.rsqrt(xc.var(1, unbiased=False, keepdim=True) + 1e-5)
        want += (go[i0:i0 + 2**24].float() * xhat).sum(0).double()
    torch.testing.assert_close(dw.double(), want, rtol=1e-2, atol=1e-2 * float(want.abs().max()))


def _guarded_or_why(rules, fn):
    """(result, stats, the exception or None): a guarded call that raises still shows
    whether the rule fired (fixed) and what the pieces raised."""
    engine = intercept.install("fix", rules=rules, native=False)
    try:
        return fn(), engine.stats(), None
    except Exception as e:  # noqa: BLE001 - reported by the test with the guard's counts
        return None, engine.stats(), e
    finally:
        intercept.uninstall()


def test_chunk_cat_past_2_31_output_elements_under_the_guard_equals_chunk_cat_of_row_pieces():
    # known_faults/chunk_cat_grid_z.json: the grid's _chunk_cat raised `invalid argument`
    # at every size (grid z = the elements before dim); under kernelaudit run with the
    # sweep's size rules it still raised on an H100 (2026-12-06): their pieces were too big
    _need(20)
    rows = 214748352                       # two (rows, 2, 3) inputs, 5 chunks: 2^32 - 128 x 2 output elements
    with pytest.raises(RuntimeError, match="invalid argument"):
        torch._chunk_cat([torch.zeros(32768, 2, 3, device="cuda")] * 2, -1, 5)   # 65,536 leading: bare, refused
    torch.cuda.synchronize()
    x0 = torch.randn(rows, 2, 3, device="cuda", dtype=torch.float16)
    x1 = torch.randn(rows, 2, 3, device="cuda", dtype=torch.float16)
    got, st, err = _guarded_or_why(_rules("_chunk_cat", "chunk_cat_grid_z.json"),
                                   lambda: torch._chunk_cat([x0, x1], -1, 5))
    assert err is None, f"{type(err).__name__}: {str(err)[:300]} ({st.summary()})"
    assert st.fixed == 1 and st.refused == 0, st.summary()
    for i0 in (0, rows // 2, rows - 4096):
        torch.testing.assert_close(got[i0:i0 + 4096], torch._chunk_cat([x0[i0:i0 + 4096], x1[i0:i0 + 4096]], -1, 5),
                                   rtol=0, atol=0)


def test_addmm_with_2_31_output_columns_under_the_guard_equals_addmm_of_column_pieces():
    # full_grid_2_31.json's addmm rule: cuBLAS refuses m past INT_MAX bare, and refused the
    # guard's pieces too until they ran on compact copies (ldc, H100, 2026-12-06)
    _need(40)
    n = 2**31 + 121
    g = torch.Generator(device="cuda").manual_seed(5)
    m = torch.randn(n, 2, device="cuda", dtype=torch.float16, generator=g).t()
    b = torch.randn(n, 2, device="cuda", dtype=torch.float16, generator=g).t()
    a = torch.randn(2, 2, device="cuda", dtype=torch.float16, generator=g)
    with pytest.raises(RuntimeError, match="less than 2147483647"):
        torch.addmm(m, a, b)
    rules = [r for r in _rules("addmm", "full_grid_2_31.json") if r.dtypes == ("float16",)]
    got, st, err = _guarded_or_why(rules, lambda: torch.addmm(m, a, b))
    assert err is None, f"{type(err).__name__}: {str(err)[:300]} ({st.summary()})"
    assert st.fixed == 1 and st.refused == 0, st.summary()
    for i0 in (0, 2**31 - 2048, n - 4096):
        torch.testing.assert_close(got[:, i0:i0 + 4096], torch.addmm(m[:, i0:i0 + 4096], a, b[:, i0:i0 + 4096]),
                                   rtol=1e-3, atol=1e-3)


def test_mm_with_k_past_2_31_under_the_guard_equals_the_sum_of_its_k_slices():
    # cublas_int_dims.json: the grid's addmm.decomposed backward, grad (2 x N) @ B (N x 2)
    # with N = 2^31 + 121, refused k under the guard until k was cut (H100, 2026-12-06)
    _need(40)
    k = 2**31 + 121
    g = torch.Generator(device="cuda").manual_seed(8)
    # centred and scaled: a sum of 2^31 products stays far inside float16's range
    a = ((torch.rand(k, 2, device="cuda", generator=g) * 2 - 1) / 4).half().t()
    b = (torch.rand(k, 2, device="cuda", generator=g) * 2 - 1).half()
    with pytest.raises(RuntimeError, match="less than 2147483647"):
        torch.mm(a, b)
    got, st, err = _guarded_or_why(_rules("mm", "cublas_int_dims.json"), lambda: torch.mm(a, b))
    assert err is None, f"{type(err).__name__}: {str(err)[:300]} ({st.summary()})"
    assert st.fixed == 1 and st.refused == 0, st.summary()
    half = k // 2
    want = (torch.mm(a[:, :half].float(), b[:half].float()) + torch.mm(a[:, half:].float(), b[half:].float()))
    # one float16 rounding of a float32 sum (its spacing near 2,000: 1-2), and float32's
    # own rounding over 2^31 terms in two orders
    assert want.abs().max() < 2**14
    torch.testing.assert_close(got.float(), want, rtol=2e-3, atol=4.0)


def test_multilabel_margin_loss_backward_past_2_31_under_the_guard_equals_small_batches():
    # the forward rule (full_grid_2_31.json) and the backward's (multilabel_margin_loss_backward.json):
    # bare, and with the forward alone in pieces, an illegal memory access (H100, 2026-12-06)
    _need(60)
    rows = 429496860
    g = torch.Generator(device="cuda").manual_seed(6)
    x = torch.rand(rows, 5, device="cuda", generator=g)
    target = torch.randint(-1, 5, (rows, 5), device="cuda", generator=g)
    go = torch.rand(rows, device="cuda", generator=g)
    rules = (_rules("nn.functional.multilabel_margin_loss", "full_grid_2_31.json")
             + _rules("nn.functional.multilabel_margin_loss", "multilabel_margin_loss_backward.json"))

    def forward_backward():
        xs = x.requires_grad_()
        F.multilabel_margin_loss(xs, target, reduction="none").backward(go)
        return xs.grad

    dx, st, err = _guarded_or_why(rules, forward_backward)
    assert err is None, f"{type(err).__name__}: {str(err)[:300]} ({st.summary()})"
    assert st.fixed == 2 and st.refused == 0, st.summary()
    for i0 in (0, 2**31 // 5 - 2048, rows - 4096):
        xs = x[i0:i0 + 4096].detach().requires_grad_()
        F.multilabel_margin_loss(xs, target[i0:i0 + 4096], reduction="none").backward(go[i0:i0 + 4096])
        torch.testing.assert_close(dx[i0:i0 + 4096], xs.grad, rtol=0, atol=0)


@pytest.mark.parametrize("shape, file", [((65575, 3), "full_grid_reflect_pad_rows.json"),
                                         ((2, 65575, 3), "reflect_pad_planes.json")])
def test_reflect_pad_backward_past_65535_planes_raises_bare_and_runs_in_plane_pieces_under_the_guard(shape, file):
    # reflection_pad1d_backward's grid holds 65,535 planes: a 2-d input's rows (the grid's
    # dim axis: 65,575 raised `invalid argument`, 65,532 ran; full_grid_reflect_pad_rows.json)
    # and a 3-d input's dim 1 (reflect_pad_planes.json, written from PyTorch's launch)
    dim = len(shape) - 2
    x = torch.rand(*shape, device="cuda") * 2 - 1
    go = torch.rand(*shape[:-1], shape[-1] + 3, device="cuda")

    def grad():
        xs = x.clone().requires_grad_()
        F.pad(xs, (1, 2), "reflect").backward(go)
        return xs.grad

    with pytest.raises(RuntimeError, match="invalid argument"):
        grad()
        torch.cuda.synchronize()
    rules = [dataclasses.replace(r, versions={}) for r in load_rules(_known(file))]
    got, st, err = _guarded_or_why(rules, grad)
    assert err is None, f"{type(err).__name__}: {str(err)[:300]} ({st.summary()})"
    assert st.fixed == 1 and st.refused == 0, st.summary()
    for i0 in (0, 32768, 65575 - 4096):
        xs = x.narrow(dim, i0, 4096).clone().requires_grad_()
        F.pad(xs, (1, 2), "reflect").backward(go.narrow(dim, i0, 4096))
        torch.testing.assert_close(got.narrow(dim, i0, 4096), xs.grad, rtol=0, atol=0)


def test_pinv_backward_of_a_tall_matrix_runs_under_the_guard_without_its_m_by_m_products():
    # known_faults/pinv_backward_tall.json: PyTorch's pinv_backward builds two m x m matrices
    # of a tall m x n input (the grid's 858,993,410 x 5 asked for more than 1 EB under the
    # guard, H100, 2026-12-06); 250,000 x 5 needs 250 GB that way, a few MB reassociated
    from kernelaudit.guard.separable import _pinv_backward_tall

    g = torch.Generator(device="cuda").manual_seed(9)
    a = torch.rand(250_000, 5, device="cuda", generator=g) * 2 - 1
    up = torch.rand(5, 250_000, device="cuda", generator=g)

    def grad():
        x = a.clone().requires_grad_()
        torch.linalg.pinv(x).backward(up)
        return x.grad

    with pytest.raises(torch.cuda.OutOfMemoryError):
        grad()
    got, st, err = _guarded_or_why(_rules("linalg.pinv", "pinv_backward_tall.json"), grad)
    assert err is None, f"{type(err).__name__}: {str(err)[:300]} ({st.summary()})"
    assert st.fixed == 1 and st.refused == 0, st.summary()
    a64 = a.double()
    want = _pinv_backward_tall(up.double(), torch.linalg.pinv(a64), a64)
    torch.testing.assert_close(got.double(), want, rtol=1e-3, atol=1e-3 * float(want.abs().max()))


def test_pinverse_of_a_batch_past_2_31_elements_under_the_guard_meets_the_penrose_conditions():
    # known_faults/batched_svd.json: bare, an illegal memory access at 2^31 + 300 elements
    # (not run bare here: it ends the CUDA context; benchmarks/repro_cuda_findings.py
    # --only batched_svd:svd probes the bare SVD). Judged per matrix by A P A = A and
    # P A P = P (an unwritten or misplaced piece fails both), and against pinverse on
    # pieces of 2^22 matrices; 4 I + [0, 0.5) entries keep every condition number below
    # 4.4, so float32 rounding stays far below the tolerances
    _need(50)
    n = 85_899_348                                                  # 2,147,483,700 elements
    x = torch.rand(n, 5, 5, device="cuda", generator=torch.Generator("cuda").manual_seed(0)) * 0.5
    x += 4 * torch.eye(5, device="cuda")
    got, st = _guarded(_rules("pinverse", "batched_svd.json"), lambda: torch.pinverse(x))
    assert st.fixed == 1 and st.refused == 0, st.summary()
    assert got.shape == x.shape and bool(got.isfinite().all())
    step, same = 2**22, 0
    for i in range(0, n, step):
        a, p = x[i:i + step], got[i:i + step]
        scale_a = a.abs().amax(dim=(-2, -1), keepdim=True)
        scale_p = p.abs().amax(dim=(-2, -1), keepdim=True)
        assert float(((a @ p @ a - a).abs() / scale_a).amax()) < 1e-4, i
        assert float(((p @ a @ p - p).abs() / scale_p).amax()) < 1e-4, i
        want = torch.pinverse(a)
        torch.testing.assert_close(p, want, rtol=1e-4, atol=1e-5)
        same += int(torch.equal(p, want))
    print(f"pieces of 2^22 matrices bitwise equal to pinverse of the piece: {same} of {-(-n // step)}")


def test_matrix_rank_of_a_batch_past_2_32_elements_under_the_guard_equals_the_pieces():
    # known_faults/batched_svd.json: the grid's float32 case of 171,798,528 5 x 5 matrices
    # came back with ranks off by up to 5 from matrix 86,035,275 on (H100, 2026-12-07; not
    # run bare here: the same SVD ended the CUDA context for pinverse, and
    # benchmarks/repro_store_findings.py runs the grid's case bare). The grid's input
    # (uniform in [-1, 1)); every rank against matrix_rank on pieces of 2^22 matrices
    _need(60)
    n = 171_798_528                                                 # 2^32 - 4,096 elements
    x = torch.rand(n, 5, 5, device="cuda", generator=torch.Generator("cuda").manual_seed(0)) * 2 - 1
    got, st = _guarded(_rules("pinverse", "batched_svd.json"), lambda: torch.linalg.matrix_rank(x))
    assert st.fixed == 1 and st.refused == 0, st.summary()
    step = 2**22
    for i in range(0, n, step):
        assert torch.equal(got[i:i + step], torch.linalg.matrix_rank(x[i:i + step])), i


def test_pinverse_backward_of_a_batch_past_2_31_elements_under_the_guard_equals_the_pieces():
    # known_faults/batched_svd.json: the sweep's backward case failed in its forward's SVD;
    # under the guard the forward runs in pieces and autograd's pinv_backward (batched
    # GEMMs) runs whole: the gradient against the same backward on pieces of 2^22 matrices.
    # pinv_backward's products of the whole batch need an H200: the grid's backward case
    # just below 2^31 ran out of an H100's memory (8 GiB asked, 6 free)
    _need(100)
    n = 85_899_348                                                  # 2,147,483,700 elements
    x = torch.rand(n, 5, 5, device="cuda", generator=torch.Generator("cuda").manual_seed(1)) * 0.5
    x += 4 * torch.eye(5, device="cuda")
    x.requires_grad_()

    def grad():
        torch.pinverse(x).sum().backward()
        return x.grad

    got, st = _guarded(_rules("pinverse", "batched_svd.json"), grad)
    assert st.fixed == 1 and st.refused == 0, st.summary()
    assert bool(got.isfinite().all())
    step = 2**22
    for i in range(0, n, step):
        xp = x.detach()[i:i + step].clone().requires_grad_()
        torch.pinverse(xp).sum().backward()
        torch.testing.assert_close(got[i:i + step], xp.grad, rtol=1e-4, atol=1e-5)


def test_mode_past_2_31_elements_returns_under_the_guard_and_equals_the_pieces():
    # known_faults/mode_2_31.json: bare, the grid's call had not returned after 120 s (not
    # run bare here); under the guard its rows run in pieces along dim 0
    import time

    _need(40)
    x = torch.randint(0, 4, (85_899_385, 5, 5), device="cuda", dtype=torch.int8).float()
    t0 = time.perf_counter()
    got, st = _guarded(_rules("mode", "mode_2_31.json"), lambda: torch.mode(x))
    torch.cuda.synchronize()
    took = time.perf_counter() - t0
    assert st.fixed == 1 and st.refused == 0, st.summary()
    print(f"mode of {x.numel()} elements under the guard: {took:.1f} s")
    step = 2**22
    for i in range(0, x.shape[0], step):
        want = torch.mode(x[i:i + step])
        assert torch.equal(got.values[i:i + step], want.values), i
        # which of tied elements an index names is the kernel's choice: it must hold the mode
        picked = x[i:i + step].gather(-1, got.indices[i:i + step].unsqueeze(-1)).squeeze(-1)
        assert torch.equal(picked, want.values), i


@pytest.mark.parametrize("op", ["cummax", "cummin"])
def test_a_1d_scan_with_indices_past_the_limit_is_refused_before_it_crashes(op):
    # known_faults/scan_with_indices_2_31.json: bare, 2^31 - 16 elements raised an illegal
    # memory access (H100, 2026-12-07; not run bare here: it poisons the context); under
    # the guard the call is refused, and the context still runs the same op below the limit
    from kernelaudit.errors import UnsafeCallError

    _need(40)
    x = torch.rand(2**31 - 16, device="cuda")
    fn = getattr(torch, op)
    with pytest.raises(UnsafeCallError):
        _guarded(_rules(op, "scan_with_indices_2_31.json"), lambda: fn(x, 0))
    below = x[: 2**31 - 16384]
    got, st = _guarded(_rules(op, "scan_with_indices_2_31.json"), lambda: fn(below, 0))
    assert st.refused == 0 and st.fixed == 0, st.summary()
    tail = 2**20
    want = fn(below[-tail:], 0).values
    want = (torch.maximum if op == "cummax" else torch.minimum)(want, got.values[-tail - 1])
    assert torch.equal(got.values[-tail:], want)
