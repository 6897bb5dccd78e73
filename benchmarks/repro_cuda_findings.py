"""Plain-torch reproductions of the wrong and error cases the H200 sweep found.

Each finding of ``kernelaudit sweep --device cuda --full`` is re-run here with nothing
but torch, so that it can be attached to an upstream report, together with a probe
that tells which size actually matters:

* ``arange``: ``torch.arange(N)`` for N > 2^32 on CUDA leaves the elements from index
  2^32 on unwritten (pytorch/pytorch#197673). Checked in int64, where every value is exact.
* ``sdpa_bwd``: the backward of ``scaled_dot_product_attention`` in fp16/bf16 raises
  ``mha_graph.execute(...).is_good()`` at batch 65536 (cuDNN). The probe keeps the
  batch at 65536 and shrinks the sequence, so the score count falls far below 2^32:
  if it still raises, the batch size is the limit, not the 2^32 scores.
* ``sdpa_batch``: the sweep's ``attn_batch`` axis (batch x heads crossing 65536 with
  8x2 heads) raised ``CUDA error: invalid argument`` in fp16/bf16, forward and
  backward. The probe pins each backend (flash, efficient, cuDNN, math) and puts
  65536 on the batch, on the heads, or splits it 256 x 256, to tell which backend
  fails and whether batch, heads or their product is the limit.
* ``cdist`` and ``adaptive_pool``: the quick sweep's OpInfo ops (``cdist`` raising
  ``invalid argument`` or wrong past 2^31 output elements; ``adaptive_avg_pool1d``
  wrong or an illegal memory access near 2^31 and 2^32 elements), each compared with
  the same op run in batch chunks far below the limits (the ops are independent per
  batch row). Run each in its own process: an illegal memory access poisons the
  context.

    python benchmarks/repro_cuda_findings.py --out results.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time

import torch
import torch.nn.functional as F


def _raised(e: BaseException) -> str:
    """What a probe records of an exception the op raised: its type and first line."""
    return "raised: " + type(e).__name__ + ": " + str(e).strip().splitlines()[0][:140]


def arange(n: int) -> dict:
    x = torch.arange(n, dtype=torch.int64, device="cuda")
    t32 = 2**32
    tail = x[t32:]
    want = torch.arange(t32, n, dtype=torch.int64, device="cuda")
    wrong = int((tail != want).sum())
    res = {"n": n, "x[2^32-1]": int(x[t32 - 1]), "x[2^32]": int(x[t32]), "x[-1]": int(x[-1]),
           "wrong_from_2^32_on": wrong, "of": n - t32, "head_correct": bool(x[:1024].eq(torch.arange(1024, device="cuda")).all())}
    del x, tail, want
    torch.cuda.empty_cache()
    return res


def sdpa_bwd(batch: int, seq: int, dtype: torch.dtype, dim: int = 64) -> dict:
    q, k, v = (torch.randn(batch, 1, seq, dim, dtype=dtype, device="cuda", requires_grad=True) for _ in range(3))
    res = {"batch": batch, "seq": seq, "dtype": str(dtype).replace("torch.", ""), "scores": batch * seq * seq}
    try:
        out = F.scaled_dot_product_attention(q, k, v)
        out.backward(torch.ones_like(out))
        torch.cuda.synchronize()
        res["result"] = "ok"
    except RuntimeError as e:
        res["result"] = "raised: " + str(e).strip().splitlines()[0][:160]
    del q, k, v
    torch.cuda.empty_cache()
    return res


def sdpa_batch(backend: str, batch: int, heads: int, dtype: torch.dtype, seq: int = 8, dim: int = 2) -> dict:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    res = {"backend": backend, "batch": batch, "heads": heads, "seq": seq, "dim": dim,
           "dtype": str(dtype).replace("torch.", "")}
    q, k, v = (torch.randn(batch, heads, seq, dim, dtype=dtype, device="cuda", requires_grad=True) for _ in range(3))
    for step in ("fwd", "bwd"):
        try:
            pin = contextlib.nullcontext() if backend == "default" else sdpa_kernel([getattr(SDPBackend, backend)])
            with pin:
                out = F.scaled_dot_product_attention(q, k, v)
                if step == "bwd":
                    out.backward(torch.ones_like(out))
            torch.cuda.synchronize()
            if step == "fwd":  # against the math backend in float32
                want = F.scaled_dot_product_attention(q.float(), k.float(), v.float())
                res["fwd_max_err"] = float((out.float() - want).abs().max())
            res[step] = "ok"
        except Exception as e:  # noqa: BLE001 - the probe records what each backend raises
            res[step] = _raised(e)
            break
    del q, k, v
    torch.cuda.empty_cache()
    return res


def _chunked(fn, xs, chunk: int = 2**22):
    """``fn`` applied to row chunks of ``xs`` (dim 0), concatenated (the reference)."""
    n = xs[0].shape[0]
    return torch.cat([fn(*(x[i:i + chunk] for x in xs)) for i in range(0, n, chunk)])


def _compare(name: str, fn, xs, **meta) -> dict:
    res = {"probe": name, "shapes": [list(x.shape) for x in xs], "dtype": str(xs[0].dtype).replace("torch.", ""),
           **meta}
    try:
        got = fn(*xs)
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001 - the probe records what the op raises
        res["result"] = _raised(e)
        return res
    want = _chunked(fn, xs)
    bad = (got.float() - want.float()).abs() > 1e-3 * (1 + want.float().abs())
    nbad = int(bad.sum())
    res.update(out_shape=list(got.shape), out_numel=got.numel(), wrong=nbad)
    if nbad:
        res["first_bad_flat_index"] = int(bad.flatten().nonzero()[0])
    res["result"] = "wrong" if nbad else "ok"
    return res


def cdist(batch: int) -> dict:
    torch.manual_seed(0)
    x1 = torch.randn(batch, 5, 2, device="cuda")
    x2 = torch.randn(batch, 6, 2, device="cuda")
    return _compare("cdist", torch.cdist, [x1, x2], batch=batch, out_elements=batch * 30)


def _grad_of(fn):
    """The input gradient of ``fn`` for an upstream gradient: ``(x, g) -> dx``."""
    def grad(t, gt):
        t = t.detach().requires_grad_()
        fn(t).backward(gt)
        return t.grad
    return grad


def adaptive_pool(rows: int, out_size: int, dtype: torch.dtype, backward: bool) -> dict:
    torch.manual_seed(0)
    x = torch.randn(rows, 8, device="cuda", dtype=dtype)
    if not backward:
        return _compare("adaptive_avg_pool1d", lambda t: F.adaptive_avg_pool1d(t, out_size), [x], out_size=out_size)
    g = torch.randn(rows, out_size, device="cuda", dtype=dtype)
    return _compare("adaptive_avg_pool1d backward", _grad_of(lambda t: F.adaptive_avg_pool1d(t, out_size)), [x, g],
                    out_size=out_size)


def _first(fn):
    return lambda t: fn(t)[0]  # (values, indices) ops: the values


#: The full grid's pooling findings (H100 segment of 2026-12-05, torch 2.11): name ->
#: (the call as the sweep makes it, the input shape it failed at, dtype, direction).
#: Each is compared with the same call in row chunks far below the limits.
OP_FINDINGS = {
    "adaptive_avg_pool2d": (lambda t: F.adaptive_avg_pool2d(t, (5, 7)), (8388607, 8, 8, 8), "float32", "fwd"),
    "adaptive_avg_pool3d_bwd": (lambda t: F.adaptive_avg_pool3d(t, (5, 7, 4)), (8388600, 8, 8, 8), "float32", "bwd"),
    "adaptive_max_pool1d": (_first(lambda t: F.adaptive_max_pool1d(t, 3, True)), (268435440, 4, 4), "float32", "fwd"),
    "adaptive_max_pool2d_bwd": (_first(lambda t: F.adaptive_max_pool2d(t, (2, 3), True)), (67108855, 4, 4, 4),
                                "float16", "bwd"),
    "adaptive_max_pool3d_bwd": (_first(lambda t: F.adaptive_max_pool3d(t, (None, None, None), True)),
                                (17895696, 4, 4, 3, 5), "float16", "bwd"),
    "avg_pool1d_bwd": (lambda t: F.avg_pool1d(t, 3), (159072840, 3, 9), "float32", "bwd"),
}


def op_finding(name: str) -> dict:
    fn, shape, dt, direction = OP_FINDINGS[name]
    torch.manual_seed(0)
    x = torch.randn(*shape, device="cuda", dtype=getattr(torch, dt))
    if direction == "fwd":
        return _compare(name, fn, [x])
    with torch.no_grad():
        out_shape = fn(x[:1]).shape[1:]
    g = torch.randn(shape[0], *out_shape, device="cuda", dtype=x.dtype)
    return _compare(name, _grad_of(fn), [x, g])


def softmin_bwd(n: int = 858993465, dtype: str = "float16", cols: int = 4096) -> dict:
    """``F.softmin(x, 0)`` of a (5, n) view with strides (1, 5) (a transposed (n, 5)
    tensor, as the sweep places it: 5 * n = 2^32 + 29 elements), backward: the input
    gradient's first and last ``cols`` columns against the same call on those columns
    alone (softmin along dim 0 keeps columns independent)."""
    torch.manual_seed(0)
    dt = getattr(torch, dtype)
    base = torch.randn(n, 5, device="cuda", dtype=dt)
    g = torch.randn(n, 5, device="cuda", dtype=dt).t()
    x = base.t().detach().requires_grad_()
    res = {"probe": "softmin_bwd", "shape": [5, n], "strides": list(x.stride()), "dtype": dtype}
    try:
        F.softmin(x, 0).backward(g)
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001 - the probe records what the op raises
        res["result"] = _raised(e)
        return res
    worst = {}
    for name, sl in (("first", slice(0, cols)), ("last", slice(n - cols, n))):
        xs = x.detach()[:, sl].clone().requires_grad_()
        F.softmin(xs, 0).backward(g[:, sl])
        d = (x.grad[:, sl].float() - xs.grad.float()).abs()
        scale = xs.grad.float().abs().amax(0).clamp_min(1e-4)   # per column
        worst[name] = {"max_abs_diff": float(d.max()),
                       "columns_off_by_1pct": int((d.amax(0) > 1e-2 * scale).sum())}  # rounding is ~1e-3
    res.update(columns=cols, **worst)
    res["result"] = "wrong" if any(w["columns_off_by_1pct"] for w in worst.values()) else "ok"
    return res


def geometric_zeros(n: int, calls: int = 1, p: float = 0.3, dtype: str = "float32") -> dict:
    """How many values of ``geometric_(p)`` fall outside its support {1, 2, ...} (zeros:
    ``ceil(log(u) / log1p(-p))`` at u = 1), over ``calls`` calls of ``n`` samples: the
    same rate per sample at every ``n`` says the fault is not the call's size."""
    torch.manual_seed(0)
    x = torch.empty(n, device="cuda", dtype=getattr(torch, dtype))
    bad = 0
    for _ in range(calls):
        x.geometric_(p)
        bad += int(((x < 1) | ~torch.isfinite(x)).sum())
    res = {"probe": "geometric", "n": n, "calls": calls, "p": p, "dtype": dtype, "out_of_support": bad,
           "per_2^24_samples": bad / (n * calls) * 2**24}
    del x
    torch.cuda.empty_cache()
    return res


#: The share of each draw probe's main event under a right kernel: bernoulli's ones
#: (p = 0.3), rrelu's slopes below 1/4 (uniform on [1/8, 3/8]), multinomial's category 0
#: (of 4 equally likely).
DRAW_SHARES = {"bernoulli": 0.3, "rrelu": 0.5, "multinomial": 0.25}


def draws(kind: str, n: int) -> dict:
    """The full grid's random-generator findings (H100, 2026-12-05): ``bernoulli`` of a
    probability tensor and ``rrelu`` in training gave values outside their support at
    2^32 - 16384 elements (unwritten output?); ``multinomial`` with n draws raised an
    illegal memory access. Counts the values outside the support, where the first is,
    and the share of the law's main event against :data:`DRAW_SHARES` (wrong past six
    standard deviations: elements left unwritten show there even where the memory they
    keep is in the support). bernoulli writes into an output filled with NaN first
    (``out=``), so an unwritten element shows as one outside the support."""
    res = {"probe": kind, "n": n}
    try:
        if kind == "bernoulli":
            x = torch.full((n,), float("nan"), device="cuda")
            torch.bernoulli(torch.full((n,), 0.3, device="cuda"), out=x)
            outside, share = (x != 0) & (x != 1), x.eq(1)
        elif kind == "rrelu":
            x = F.rrelu(torch.full((n,), -1.0, device="cuda"), 0.125, 0.375, True)
            outside, share = (x < -0.375) | (x > -0.125) | x.isnan(), x.gt(-0.25)
        else:  # multinomial: n draws with replacement from 4 equally likely categories
            x = torch.multinomial(torch.ones(4, device="cuda"), n, True)
            outside, share = (x < 0) | (x > 3), x.eq(0)
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001 - the probe records what the op raises
        res["result"] = _raised(e)
        return res
    nbad = int(outside.sum())
    got, want = float(share.double().mean()), DRAW_SHARES[kind]
    z = (got - want) / (want * (1 - want) / n) ** 0.5
    res.update(outside_support=nbad, share=got, share_z=z, result="wrong" if nbad or abs(z) > 6 else "ok")
    if nbad:
        res["first_outside"] = int(outside.nonzero()[0])
        res["last_outside"] = int(outside.nonzero()[-1])
    del x, outside, share
    torch.cuda.empty_cache()
    return res


def batched_svd(call: str, n: int = 85_899_348) -> dict:
    """The slow pass's batched-SVD findings (H100): ``torch.pinverse`` of ``n`` 5 x 5
    float32 matrices past 2^31 elements raised an illegal memory access (85,899,348:
    2,147,483,700; 85,899,336 ran right, 2026-12-06), and ``torch.linalg.matrix_rank`` of
    171,798,528 (2^32 - 4,096 elements) came back wrong (2026-12-07). Runs one ``call``
    (``svd``: the batched SVD, ``svdvals``, ``bmm``, ``pinverse``, ``matrix_rank``) on such
    a batch and, if it returns, against the same call on pieces of 2^22 matrices (largest
    difference relative to the piece's largest value; the first matrix that differs)."""
    res = {"probe": "batched_svd", "call": call, "matrices": n, "elements": n * 25}
    fns = {"svd": lambda t: torch.linalg.svd(t, full_matrices=False)[1], "svdvals": torch.linalg.svdvals,
           "bmm": lambda t: torch.bmm(t, t), "pinverse": torch.pinverse, "matrix_rank": torch.linalg.matrix_rank}
    if call not in fns:
        raise SystemExit(f"batched_svd:{call}: allowed calls are {', '.join(fns)}")
    fn = fns[call]
    # 4 I + [0, 0.5) entries: every condition number below 4.4 (every rank 5), so pieces
    # and whole agree to float32 rounding wherever both are right
    x = torch.rand(n, 5, 5, device="cuda", generator=torch.Generator("cuda").manual_seed(0)) * 0.5
    x += 4 * torch.eye(5, device="cuda")
    try:
        got = fn(x)
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001 - the probe records what the op raises
        res["result"] = _raised(e)
        return res
    worst, first_bad, step = 0.0, None, 2**22
    for i in range(0, n, step):
        want = fn(x[i:i + step]).double()
        diff = (got[i:i + step].double() - want).abs()
        scale = float(want.abs().amax().clamp_min(1e-30))
        worst = max(worst, float(diff.amax()) / scale)
        if first_bad is None and float(diff.amax()) > 1e-3 * scale:
            bad = (diff.reshape(diff.shape[0], -1) > 1e-3 * scale).any(1)
            first_bad = i + int(bad.nonzero()[0, 0])   # int64 matrix index
    res.update(result="wrong" if first_bad is not None else "ok", worst_relative=worst, first_bad_matrix=first_bad)
    del x, got
    torch.cuda.empty_cache()
    return res


def spaced(kind: str, n: int) -> dict:
    """``torch.linspace`` / ``logspace`` (float32) of ``n`` points past 2^32: the elements
    from index 2^32 on against the same values computed for the tail alone (the end
    points of a linspace are exact; its step is (end - start) / (n - 1))."""
    t32 = 2**32
    start, end = 0.0, 1.0
    fn = torch.linspace if kind == "linspace" else torch.logspace
    x = fn(start, end, n, device="cuda")
    step = (end - start) / (n - 1)
    i = torch.arange(t32, n, device="cuda", dtype=torch.float64)
    want = start + i * step
    if kind == "logspace":
        want = torch.pow(10.0, want)
    tail = x[t32:].double()
    bad = (tail - want).abs() > 1e-5 * want.abs().clamp_min(1e-30)  # float32 rounding is ~1e-7
    res = {"kind": kind, "n": n, "x[2^32-1]": float(x[t32 - 1]), "x[2^32]": float(x[t32]),
           "want[2^32]": float(want[0]), "x[-1]": float(x[-1]), "wrong_from_2^32_on": int(bad.sum()), "of": n - t32}
    del x, i, want, tail, bad
    torch.cuda.empty_cache()
    return res


def norm_rows(kind: str, rows: int, shape: tuple = (2, 3), dtype: str = "float32", device: str = "cuda") -> dict:
    """``F.rms_norm`` / ``F.layer_norm`` over a multi-dim ``normalized_shape`` with
    ``rows`` rows, backward: the weight gradient's shape and values against the sum of
    the same backward over chunks of 65,536 rows. The full grid's ``rms_norm`` error
    (``invalid gradient at index 1 - got [3] but expected [2, 3]``, from just below 2^31
    elements) matches the two-pass gamma backward past 65,536 rows, which sizes its
    scratch by the last normalized dim (pytorch/pytorch PR #192016): this finds the
    row count, far below 2^31 elements."""
    dt = getattr(torch, dtype)
    x = torch.randn(rows, *shape, device=device, dtype=dt)
    g = torch.randn_like(x)
    w = torch.randn(*shape, device=device, dtype=dt, requires_grad=True)

    def call(xs, gs):
        y = F.rms_norm(xs, shape, w) if kind == "rms_norm" else F.layer_norm(xs, shape, w)
        return torch.autograd.grad(y, w, gs)[0]

    out = {"op": kind, "rows": rows, "normalized_shape": list(shape), "dtype": dtype, "device": device}
    try:
        got = call(x, g)
        if device == "cuda":
            torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001 - the finding may be a raise
        return {**out, "result": "raised", "error": str(e).splitlines()[0][:300]}
    want = sum(call(x[i:i + 65536], g[i:i + 65536]).float() for i in range(0, rows, 65536))
    diff = float((got.float() - want).abs().max())
    return {**out, "result": "ok" if diff <= 1e-2 * (1 + float(want.abs().max())) else "wrong",
            "grad_shape": list(got.shape), "max_abs_diff": diff}


def scan(kind: str, n: int, dtype: str = "float32", chunk: int = 2**20) -> dict:
    """``torch.cummax`` / ``cummin`` (``kind``) of a 1-d tensor of ``n`` elements: the full
    grid's metamorphic scan cases raised an illegal memory access at a dimension of
    2^31 - 16 (float32 and float16, H100, 2026-12-07). Values and indices of the first
    and the last ``chunk`` elements against the same op on those elements alone (the
    tail carried from the element before it)."""
    torch.manual_seed(0)
    x = torch.rand(n, device="cuda", dtype=getattr(torch, dtype))
    res = {"probe": kind, "n": n, "dtype": dtype}
    try:
        values, indices = getattr(torch, kind)(x, 0)
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001 - the probe records what the op raises
        res["result"] = _raised(e)
        return res
    combine = torch.maximum if kind == "cummax" else torch.minimum
    head = getattr(torch, kind)(x[:chunk], 0).values
    tail = combine(getattr(torch, kind)(x[-chunk:], 0).values, values[-chunk - 1])
    wrong = int((values[:chunk] != head).sum()) + int((values[-chunk:] != tail).sum())
    bad_index = int(((indices[-chunk:] < 0) | (indices[-chunk:] >= n)).sum())
    res.update(wrong_values=wrong, indices_out_of_range=bad_index,
               result="wrong" if wrong or bad_index else "ok")
    return res


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=None)
    p.add_argument("--only", default="arange,sdpa_bwd,sdpa_batch",
                   help="comma-separated probes: arange, sdpa_bwd, sdpa_batch, cdist:BATCH, "
                        "pool:ROWS:OUT_SIZE:DTYPE:fwd|bwd, linspace, logspace, softmin_bwd, geometric, "
                        "bernoulli, rrelu, multinomial, rms_norm, layer_norm, op:NAME (NAME of OP_FINDINGS), "
                        "batched_svd:svd|svdvals|bmm|pinverse|matrix_rank[:MATRICES], scan:cummax|cummin:N:DTYPE ("
                        "each in its own process: an illegal memory access poisons the context)")
    a = p.parse_args(argv)
    only = set(a.only.split(","))
    res = {"torch": torch.__version__, "cuda": torch.version.cuda, "device": torch.cuda.get_device_name(),
           "cudnn": torch.backends.cudnn.version(), "date": time.strftime("%Y-%m-%d", time.gmtime())}
    if "arange" in only:
        res["arange"] = [arange(2**32 + 5), arange(2**32 + 16384)]
    if "sdpa_bwd" in only:
        res["sdpa_bwd"] = [sdpa_bwd(b, s, dt) for dt in (torch.float16, torch.bfloat16)
                           for b, s in ((65535, 256), (65536, 256), (65536, 16), (65536, 1))]
    if "sdpa_batch" in only:
        res["sdpa_batch"] = [sdpa_batch(be, b, h, dt) for dt in (torch.float16, torch.bfloat16)
                             for be in ("default", "FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH")
                             for b, h in ((65535, 1), (65536, 1), (1, 65536), (256, 256), (65536, 4))]
        from torch.nn.attention import SDPBackend  # which backend the default dispatch picks
        res["sdpa_default_order"] = [str(b) for b in getattr(torch._C, "_get_sdp_priority_order", lambda: [])()] \
            if hasattr(torch._C, "_get_sdp_priority_order") else None
        del SDPBackend
    for item in sorted(only):
        kind, _, rest = item.partition(":")
        if kind == "cdist":
            res.setdefault("cdist", []).append(cdist(int(rest)))
        elif kind in ("linspace", "logspace"):
            res.setdefault("spaced", []).append(spaced(kind, 2**32 + 16384))
        elif kind == "softmin_bwd":
            res["softmin_bwd"] = softmin_bwd()
        elif kind == "geometric":  # the same sample count in one call and in 16
            res["geometric"] = [geometric_zeros(2**32 + 16384), geometric_zeros(2**28, 16)]
        elif kind in ("bernoulli", "rrelu", "multinomial"):  # from below 2^31 to past 2^32
            sizes = (2**31 - 16384, 2**31 + 16, 2**31 + 16384, 2**32 - 16384) if kind == "bernoulli" else \
                (2**31 - 16384, 2**31 + 16384, 2**32 - 16384)
            res.setdefault("draws", []).extend(draws(kind, n) for n in sizes)
        elif kind in ("rms_norm", "layer_norm"):  # the rows where the gamma backward takes its two-pass path
            res.setdefault("norm_rows", []).extend(norm_rows(kind, r) for r in (65536, 65537, 2**20))
        elif kind == "op":
            res.setdefault("ops", []).append(op_finding(rest))
        elif kind == "scan":
            k, n, dt = rest.split(":")
            res.setdefault("scan", []).append(scan(k, int(n), dt))
        elif kind == "batched_svd":
            call, _, n = rest.partition(":")
            res.setdefault("batched_svd", []).append(batched_svd(call, int(n)) if n else batched_svd(call))
        elif kind == "pool":
            rows, size, dt, step = rest.split(":")
            res.setdefault("adaptive_pool", []).append(
                adaptive_pool(int(rows), int(size), getattr(torch, dt), step == "bwd"))
    print(json.dumps(res, indent=1))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
