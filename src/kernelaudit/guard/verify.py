"""The ``verify`` action: a cheap randomized check of a matmul's result (Freivalds).

For ``C = beta * M + alpha * A @ B`` and a random +-1 vector ``x``, compare ``C x`` with
``beta * M x + alpha * A (B x)``: O(n^2) work per matrix instead of the O(n^3) product,
and a wrong block of C is missed only if ``x`` happens to be orthogonal to its error.
The check runs piece by piece on a plan whose every tensor is below the policy's
floor, so its own products are safe calls (under a fault model they pass through it
untouched) and it never builds a full-size temporary.
"""

from __future__ import annotations

import threading

import torch

from .split import Plan, depth_views, piece_views

#: Relative tolerance of the check per dtype: max|C x - A(B x)| / max|A(B x)| per piece.
#: A few times the rounding error of the check's own products in that dtype; the
#: faults it looks for (wrong batches) give errors of order 1.
VERIFY_RTOL = {torch.float64: 1e-9, torch.float32: 1e-3, torch.float16: 2e-2, torch.bfloat16: 8e-2}
#: Dtypes not in the table (ints) are compared exactly.
_EXACT = 0.0
#: Least denominator of the relative error (an all-zero reference).
_SCALE_FLOOR = 1e-30

_GENERATORS: dict = {}
_GEN_LOCK = threading.Lock()
#: Seed of the check's random vectors (a fresh draw per call from one stream per device).
VERIFY_SEED = 0x5EED


def _generator(device: torch.device) -> torch.Generator:
    key = str(device)
    with _GEN_LOCK:
        g = _GENERATORS.get(key)
        if g is None:
            g = torch.Generator(device=device)
            g.manual_seed(VERIFY_SEED)
            _GENERATORS[key] = g
        return g


def _signs(n: int, like: torch.Tensor) -> torch.Tensor:
    g = _generator(like.device)
    x = torch.randint(0, 2, (n, 1), generator=g, device=like.device, dtype=torch.int8)
    return (x.to(like.dtype) * 2 - 1)


class Mismatch:
    """Where a verified result was wrong: first bad batch (or row block) and the error."""

    def __init__(self, where: str, err: float, tol: float) -> None:
        self.where, self.err, self.tol = where, err, tol

    def explain(self) -> str:
        return f"{self.where}: relative error {self.err:.3g} > tolerance {self.tol:.3g}"


def check_pieces(plan: Plan, mm, run) -> Mismatch | None:
    """Check ``mm.out`` (the op's result, already computed) against its inputs.

    ``mm`` is a normalised call (:class:`kernelaudit.guard.engine.Normalised`); ``run``
    calls the underlying (unguarded) kernels. Returns the first mismatch, or None."""
    tol = VERIFY_RTOL.get(mm.out.dtype, _EXACT)
    batched = plan.batch is not None
    op = "bmm" if batched else "mm"
    for piece in plan.pieces():
        a, b, bias, out = piece_views(plan, piece, mm.a, mm.b, mm.bias, mm.out)
        x = _signs(out.shape[-1], out)
        if batched:
            x = x.expand(out.shape[0], *x.shape)
        got = run(op, "default", out, x)
        want = None
        for ks in plan.depths():   # the reduction dim in slices where the plan cuts it
            ak, bk = depth_views(a, b, ks)
            part = run(op, "default", ak, run(op, "default", bk, x))
            want = part if want is None else want + part
        if mm.alpha != 1:
            want = want * mm.alpha
        if bias is not None and mm.beta != 0:
            want = want + mm.beta * run(op, "default", bias, x)
        err_t = (got.double() - want.double()).abs()
        nan_mismatch = (got.isnan() != want.isnan()).any()
        scale = want.double().abs().nan_to_num(0.0).max().clamp_min(_SCALE_FLOOR)
        rel = (err_t.nan_to_num(0.0).max() / scale).item()
        if rel > tol or bool(nan_mismatch):
            return Mismatch(_locate(piece, err_t, scale, tol, batched), rel, tol)
    return None


def _locate(piece, err_t: torch.Tensor, scale, tol: float, batched: bool) -> str:
    bs, rs, cs = piece
    if batched:
        per = (err_t.flatten(1).nan_to_num(float("inf")).amax(1) / scale) > tol
        first = int(per.nonzero()[0, 0]) if per.any() else 0
        return f"batch {bs.start + first}"
    return f"rows [{rs.start}, {rs.stop}) x columns [{cs.start}, {cs.stop})"
