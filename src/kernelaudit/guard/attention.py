"""The attention-score rule's actions: MPS's fused attention op, in safe pieces.

On MPS, ``F.scaled_dot_product_attention`` (and its math path, for contiguous inputs
without dropout) ends in one op, ``aten::_scaled_dot_product_attention_math_for_mps``,
that never shows its bmm to the matmul overrides. The guard overrides that op on the
MPS key; a call whose score tensor ``(..., L, S)`` breaks the rule is computed from
pieces along the leading dims (batch, then heads), then along query rows (each output
row depends only on its own row of scores; a causal call's row pieces get the matching
explicit mask), each piece through the original kernel and copied into the output,
allocated once.

``verify`` recomputes a few random query rows in pieces of one row and compares them
with the result. The functions take the kernel as an argument, so CPU tests drive them
with a reference implementation.
"""

from __future__ import annotations

import math

import torch

from ..faults.predicates import TensorMeta
from .policy import SDPA_MPS, Call, Policy
from .verify import VERIFY_RTOL

#: Query rows recomputed by ``verify``.
VERIFY_ROWS = 8
#: The op's schema: (query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
#: dropout_mask=None, *, scale=None) -> (output, attention)
ARG_NAMES = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "dropout_mask")


def normalise(args, kwargs) -> dict:
    """The call's arguments by name, defaults filled in."""
    d = dict(zip(ARG_NAMES, args))
    d.update({k: v for k, v in kwargs.items() if k != "scale"})
    d.setdefault("attn_mask", None)
    d.setdefault("dropout_p", 0.0)
    d.setdefault("is_causal", False)
    d.setdefault("dropout_mask", None)
    d["scale"] = kwargs.get("scale")
    return d


def scores_numel(q: torch.Tensor, k: torch.Tensor) -> int:
    return math.prod(q.shape[:-1]) * k.shape[-2]


def _meta(t: torch.Tensor, index: tuple) -> TensorMeta:
    """Metadata of ``t[index]`` (slices on the leading dims and rows) without building it."""
    shape, offset = list(t.shape), t.storage_offset()
    for d, s in enumerate(index):
        start, stop = s.start or 0, s.stop if s.stop is not None else t.shape[d]
        shape[d] = stop - start
        offset += start * t.stride(d)
    return TensorMeta(tuple(shape), t.stride(), offset)


def _piece_call(q, k, v, qi, ki) -> Call:
    mq, mk, mv = _meta(q, qi), _meta(k, ki), _meta(v, ki)
    return Call(SDPA_MPS, (mq, mk, mv), (*mq.shape[:-1], mv.shape[-1]), q.dtype, q.device.type,
                math.prod(mq.shape[:-1]) * mk.shape[-2])


def pieces(policy: Policy, q, k, v) -> list[tuple[tuple, tuple]] | None:
    """(query index, key/value index) of every piece, or None if one query row of one
    (batch, head) is still unsafe. Indexes are tuples of slices over the leading dims
    (and query rows)."""
    lead = q.dim() - 2
    L = q.shape[-2]

    def safe(qi, ki) -> bool:
        return not policy.check(_piece_call(q, k, v, qi, ki))

    def index(fixed: list[int], d: int, lo: int, hi: int, rows=None):
        qi = [slice(i, i + 1) for i in fixed] + [slice(lo, hi)]
        qi += [slice(None)] * (lead - len(qi))
        ki = list(qi)
        qi.append(rows if rows is not None else slice(None))
        ki.append(slice(None))
        # k/v leading dims may broadcast (size 1): index them at 0
        ki = [slice(0, 1) if d_ < lead and k.shape[d_] == 1 else s for d_, s in enumerate(ki)]
        return tuple(qi), tuple(ki)

    def largest(ok, n) -> int:
        if not ok(1):
            return 0
        lo, hi = 1, n
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if ok(mid) else (lo, mid - 1)
        return lo

    def split(fixed: list[int]) -> list | None:
        d = len(fixed)
        if d < lead:
            n = q.shape[d]
            c = largest(lambda c: safe(*index(fixed, d, 0, c)) and safe(*index(fixed, d, n - c, n)), n)
            if c:
                c = -(-n // -(-n // c))  # even pieces
                return [index(fixed, d, s, min(s + c, n)) for s in range(0, n, c)]
            # one entry of dim d is too big: plan entry 0, then repeat it for every entry
            sub = split(fixed + [0])
            if sub is None:
                return None
            out = []
            for i in range(n):
                kd = slice(0, 1) if k.shape[d] == 1 else slice(i, i + 1)
                out.extend((qi[:d] + (slice(i, i + 1),) + qi[d + 1:], ki[:d] + (kd,) + ki[d + 1:]) for qi, ki in sub)
            return out
        # one (batch, head) slice is too big: split its query rows
        qi0 = [slice(i, i + 1) for i in fixed]
        ki = tuple(slice(0, 1) if k.shape[j] == 1 else qi0[j] for j in range(lead)) + (slice(None),)
        c = largest(lambda c: safe(tuple(qi0 + [slice(0, c)]), ki), L)
        if not c:
            return None
        c = -(-L // -(-L // c))
        return [(tuple(qi0 + [slice(s, min(s + c, L))]), ki) for s in range(0, L, c)]

    if lead == 0:
        return None
    return split([])


def _mask_piece(mask, full_shape, qi) -> torch.Tensor | None:
    if mask is None:
        return None
    return mask.expand(full_shape)[qi]


def _causal_rows(rows: slice, S: int, like: torch.Tensor) -> torch.Tensor:
    """The additive mask of rows [r0, r1) of a causal call: keys j <= i (is_causal's
    top-left alignment). Additive, not boolean: the SDPA front end has already turned
    boolean masks into additive ones before this op."""
    i = torch.arange(rows.start, rows.stop, device=like.device)[:, None]
    allowed = torch.arange(S, device=like.device)[None, :] <= i
    return torch.zeros(allowed.shape, dtype=like.dtype, device=like.device).masked_fill(~allowed, float("-inf"))


def run_pieces(policy: Policy, d: dict, kernel, plan) -> tuple:
    """The call computed piece by piece: (output, attention or whatever the kernel's
    second result is for the pieces)."""
    q, k, v = d["query"], d["key"], d["value"]
    lead = q.dim() - 2
    L, S = q.shape[-2], k.shape[-2]
    score_shape = (*q.shape[:-1], S)
    out = torch.empty((*q.shape[:-1], v.shape[-1]), dtype=q.dtype, device=q.device)
    attn = None
    for qi, ki in plan:
        rows = qi[lead]
        mask = _mask_piece(d["attn_mask"], score_shape, qi)
        causal = d["is_causal"]
        if causal and (rows.start not in (None, 0) or (rows.stop not in (None, L))):
            mask, causal = _causal_rows(rows, S, q), False
        dmask = _mask_piece(d["dropout_mask"], score_shape, qi)
        r = kernel(q[qi], k[ki], v[ki], mask, d["dropout_p"], causal, dmask, scale=d["scale"])
        o, a = (r[0], r[1]) if isinstance(r, (tuple, list)) else (r, None)
        out[qi].copy_(o)
        if isinstance(a, torch.Tensor) and a.numel() and a.shape[-1] == S:
            if attn is None:
                attn = torch.empty(score_shape, dtype=a.dtype, device=a.device)
            attn[qi].copy_(a)
        elif attn is None:
            attn = a
    return out, attn


def verify_rows(d: dict, result, kernel, generator: torch.Generator | None = None) -> str | None:
    """Recompute :data:`VERIFY_ROWS` random query rows; a mismatch's description, or None."""
    q, k, v = d["query"], d["key"], d["value"]
    lead = q.dim() - 2
    S = k.shape[-2]
    out = result[0] if isinstance(result, (tuple, list)) else result
    g = generator or torch.Generator().manual_seed(0)
    tol = VERIFY_RTOL.get(out.dtype, 0.0)
    score_shape = (*q.shape[:-1], S)
    for _ in range(VERIFY_ROWS):
        idx = [int(torch.randint(0, n, (1,), generator=g)) for n in q.shape[:-1]]
        qi = tuple(slice(i, i + 1) for i in idx)
        ki = tuple(slice(0, 1) if k.shape[j] == 1 else qi[j] for j in range(lead)) + (slice(None),)
        mask = _mask_piece(d["attn_mask"], score_shape, qi)
        causal = d["is_causal"]
        if causal:
            mask, causal = _causal_rows(qi[lead], S, q), False
        dmask = _mask_piece(d["dropout_mask"], score_shape, qi)
        r = kernel(q[qi], k[ki], v[ki], mask, d["dropout_p"], causal, dmask, scale=d["scale"])
        want = (r[0] if isinstance(r, (tuple, list)) else r).double()
        got = out[qi].double()
        err = ((got - want).abs().max() / want.abs().max().clamp_min(1e-30)).item()
        if not err <= tol:
            return f"query row {idx}: relative error {err:.3g} > tolerance {tol:.3g}"
    return None
