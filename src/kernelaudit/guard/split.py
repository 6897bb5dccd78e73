"""Splitting a matmul-family call into pieces that are each safe.

A call is normalised to ``out[b, i, j] = beta * bias[b, i, j] + alpha * sum_k a[b, i, k] b[b, k, j]``
(no batch dim for mm/addmm). A :class:`Plan` cuts it into pieces of at most ``batch``
batches x ``rows`` rows x ``cols`` columns; every piece is a view of the operands and
of the final output, so the fix writes each piece in place and never builds a
full-size temporary or a contiguous copy of a large view.

The plan is the largest piece the policy says is safe, evened out so that all pieces
have about the same size (no tiny tail piece): first whole batches (the
arithmetic of each batch is unchanged, so the result is bitwise the unsplit one on
backends whose batched kernels work batch by batch), then rows of one matrix when a
single batch is too large, then columns when one row block still is. Safety of a
piece is decided by the same rules, on the piece's metadata, at its first and last
position (the first piece of a packed operand has offset 0, later ones are views).
When even a 1 x 1 output piece is unsafe because the reduction dim ``k`` is too long
(cuBLAS takes ``k`` and the leading dimensions as ``int``), the plan also cuts ``k``
into ``depth`` pieces whose products the fix sums (:meth:`Plan.depths`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
import threading
from typing import Iterator

import torch

from ..faults.predicates import TensorMeta
from .policy import Call, Policy

#: Plans are cached per call signature: a training loop repeats the same shapes.
PLAN_CACHE_SIZE = 1024


@dataclass(frozen=True)
class Plan:
    """Pieces of ``batch`` batches (``None`` for mm/addmm) x ``rows`` x ``cols``, each
    summed over ``depth`` slices of the reduction dim when ``depth`` is set."""

    batch: int | None
    rows: int
    cols: int
    #: The full extents (B, M, N), B = None for 2-D ops.
    extent: tuple[int | None, int, int]
    #: The largest safe count along the split dim (before evening the pieces out).
    largest: int = 0
    #: Slices of the reduction dim at most this long (None: the whole of it).
    depth: int | None = None
    #: The reduction dim's length K (read with ``depth``).
    reduction: int = 0

    @property
    def count(self) -> int:
        B, M, N = self.extent
        nb = 1 if B is None else -(-B // self.batch)
        nk = 1 if self.depth is None else -(-self.reduction // self.depth)
        return nb * -(-M // self.rows) * -(-N // self.cols) * nk

    def depths(self, most: int | None = None) -> list[slice]:
        """Slices of the reduction dim, each at most ``depth`` (and ``most``) long."""
        if self.depth is None:
            return [slice(None)]
        step = self.depth if most is None else max(1, min(self.depth, most))
        return [slice(k, min(k + step, self.reduction)) for k in range(0, self.reduction, step)]

    @property
    def piece_out_numel(self) -> int:
        return (self.batch or 1) * self.rows * self.cols

    def describe(self) -> str:
        B, M, N = self.extent
        lead = "1 batch x " if B is not None else ""
        if self.depth is not None:
            return (f"{lead}{self.rows} of {M} rows x {self.cols} of {N} columns x {self.largest} of "
                    f"{self.reduction} along k (fix: {self.count} products summed in pieces)")
        if B is not None and self.rows == M and self.cols == N:
            return f"{self.largest} of {B} batches (fix: {self.count} pieces of <= {self.batch})"
        if self.cols == N:
            return f"{lead}{self.largest} of {M} rows (fix: {self.count} pieces of <= {self.rows})"
        return (f"{lead}{self.rows} of {M} rows x {self.largest} of {N} columns "
                f"(fix: {self.count} pieces)")

    def pieces(self) -> Iterator[tuple[slice | None, slice, slice]]:
        """(batch slice or None, row slice, column slice) of every piece, in order."""
        B, M, N = self.extent
        bsl = [None] if B is None else [slice(b, min(b + self.batch, B)) for b in range(0, B, self.batch)]
        for bs in bsl:
            for r in range(0, M, self.rows):
                for c in range(0, N, self.cols):
                    yield bs, slice(r, min(r + self.rows, M)), slice(c, min(c + self.cols, N))


def _sliced(m: TensorMeta, dim: int, start: int, length: int) -> TensorMeta:
    """The metadata of ``t.narrow(dim, start, length)`` without building it."""
    shape = list(m.shape)
    shape[dim] = length
    return TensorMeta(tuple(shape), m.strides, m.offset + start * m.strides[dim])


def _piece_call(call: Call, nb: int | None, nr: int, nc: int, at_end: bool, limit: int | None,
                nd: int | None = None) -> Call | None:
    """The call on one piece (at the first or the last position), ``nd`` of the reduction
    dim when set; None if over ``limit``."""
    a, b = call.operands
    batched = len(a.shape) == 3
    B, M, N = (a.shape[0] if batched else None), a.shape[-2], b.shape[-1]
    r0 = M - nr if at_end else 0
    c0 = N - nc if at_end else 0
    pa = _sliced(a, -2 % len(a.shape), r0, nr)
    pb = _sliced(b, -1 % len(b.shape), c0, nc)
    if nd is not None:
        k0 = a.shape[-1] - nd if at_end else 0
        pa, pb = _sliced(pa, -1 % len(a.shape), k0, nd), _sliced(pb, -2 % len(b.shape), k0, nd)
    out = (nr, nc)
    if batched:
        b0 = B - nb if at_end else 0
        pa, pb = _sliced(pa, 0, b0, nb), _sliced(pb, 0, b0, nb)
        out = (nb, nr, nc)
    if limit is not None and max(pa.numel, pb.numel, math.prod(out)) >= limit:
        return None
    return Call(call.op, (pa, pb), out, call.dtype, call.device_type)


def _safe(policy: Policy, call: Call, nb, nr, nc, limit, nd=None) -> bool:
    for at_end in (False, True):
        piece = _piece_call(call, nb, nr, nc, at_end, limit, nd)
        if piece is None or policy.check(piece):
            return False
    return True


def _largest(lo_safe_ok, n: int) -> int:
    """Largest k in [1, n] with ok(k) (assumed monotone: smaller pieces are safer); 0 if none."""
    if not lo_safe_ok(1):
        return 0
    lo, hi = 1, n
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if lo_safe_ok(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _balanced(k: int, n: int) -> int:
    """Pieces of at most ``k`` of ``n``, made as equal as possible (no tiny tail piece)."""
    pieces = -(-n // k)
    return -(-n // pieces)


def make_plan(policy: Policy, call: Call, *, limit: int | None = None) -> Plan | None:
    """The plan with the largest safe pieces, or None when even a 1 x 1 output piece
    over a single element of the reduction dim is unsafe.

    The reduction dim is cut only when a 1 x 1 output piece over the whole of it is unsafe
    (one row of ``a`` or column of ``b`` too long alone): its pieces' sums are then added.
    ``limit``: additionally keep every piece tensor below this many elements (the
    verifier's own products must be safe calls too)."""
    a, b = call.operands
    plan = _plan_at_depth(policy, call, limit, None)
    if plan is not None:
        return plan
    K = a.shape[-1]
    one = 1 if len(a.shape) == 3 else None
    nd = _largest(lambda k: _safe(policy, call, one, 1, 1, limit, k), K)
    if not nd:
        return None
    plan = _plan_at_depth(policy, call, limit, _balanced(nd, K))
    return None if plan is None else dataclasses.replace(plan, largest=nd)


def _plan_at_depth(policy: Policy, call: Call, limit: int | None, nd: int | None) -> Plan | None:
    """The largest safe pieces of batches, rows, then columns over ``nd`` of the reduction
    dim (None: all of it); None when a 1 x 1 output piece is unsafe."""
    a, b = call.operands
    batched = len(a.shape) == 3
    B, M, N = (a.shape[0] if batched else None), a.shape[-2], b.shape[-1]
    depth = {} if nd is None else {"depth": nd, "reduction": a.shape[-1]}
    if batched:
        nb = _largest(lambda k: _safe(policy, call, k, M, N, limit, nd), B)
        if nb:
            return Plan(_balanced(nb, B), M, N, (B, M, N), nb, **depth)
    one = 1 if batched else None
    nr = _largest(lambda k: _safe(policy, call, one, k, N, limit, nd), M)
    if nr:
        return Plan(one, _balanced(nr, M), N, (B, M, N), nr, **depth)
    nc = _largest(lambda k: _safe(policy, call, one, 1, k, limit, nd), N)
    if not nc:
        return None
    largest_cols = nc
    nc = _balanced(nc, N)
    nr = _largest(lambda k: _safe(policy, call, one, k, nc, limit, nd), M)
    return Plan(one, _balanced(nr, M), nc, (B, M, N), largest_cols, **depth)


class Planner:
    """:func:`make_plan` for one policy, with a bounded cache per call signature."""

    def __init__(self, policy: Policy, size: int = PLAN_CACHE_SIZE) -> None:
        self.policy = policy
        self.size = size
        self._cache: dict = {}
        self._lock = threading.Lock()

    def plan(self, call: Call, *, limit: int | None = None) -> Plan | None:
        key = (call.op, call.operands, call.out_shape, call.dtype, call.device_type, limit)
        try:
            return self._cache[key]
        except KeyError:
            pass
        p = make_plan(self.policy, call, limit=limit)
        with self._lock:
            if len(self._cache) >= self.size:
                self._cache.pop(next(iter(self._cache)))
            self._cache[key] = p
        return p


# -- running the pieces ----------------------------------------------------------------------
def piece_views(plan: Plan, piece, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None,
                out: torch.Tensor):
    """(a, b, bias, out) views of one piece. ``bias`` is already expanded to out's shape."""
    bs, rs, cs = piece
    if bs is None:
        return a[rs, :], b[:, cs], (None if bias is None else bias[rs, cs]), out[rs, cs]
    return a[bs, rs, :], b[bs, :, cs], (None if bias is None else bias[bs, rs, cs]), out[bs, rs, cs]


def depth_views(a: torch.Tensor, b: torch.Tensor, ks: slice) -> tuple[torch.Tensor, torch.Tensor]:
    """The slices of a piece's ``a`` and ``b`` over ``ks`` of the reduction dim."""
    return a[..., ks], b[..., ks, :]
