"""References for ops whose output is not batch-local (flat-index ops).

Each is computed chunk by chunk from regenerated inputs and combined exactly; no
chunk crosses :data:`~kernelaudit.sweep.judge.reference.REF_CHUNK_ELEMENTS`.
"""

from __future__ import annotations

import math

import torch

from .metrics import _TINY, Judgement, compare_rows



def judge_global(kind: str, case, ctx, outs, tolerances) -> list[Judgement]:
    return _KINDS[kind](case, ctx, outs, tolerances)


def _tol(tolerances, name, metric):
    from ..tolerance import tolerance_for
    return tolerance_for(tolerances, name, metric)


def _step(ctx, per: int) -> int:
    """Batches per chunk so that a chunk holds at most ``ctx.chunk`` elements."""
    return max(1, ctx.chunk // max(per, 1))


def _index_select(case, ctx, outs, tolerances):
    B = case.batch
    (got,) = outs
    R = got.shape[1]
    j = Judgement("out0", "exact", _tol(tolerances, "out0", "exact"), R)
    for b0 in range(0, B, _step(ctx, R)):
        b1 = min(B, b0 + _step(ctx, R))
        idx, _ = ctx.operand(1, b0, b1)
        ref = ctx.operand_rows(0, idx)
        compare_rows(j, b0, got[b0:b1].to(ctx.device), ref, True)
    return [j]


def _nonzero(case, ctx, outs, tolerances):
    """Coordinates of the positive elements of a flat tensor; batches are rows of R."""
    B = case.batch
    (got,) = outs
    R = ctx.placed[0].operand.rows_per_batch
    j = Judgement("out0", "exact", _tol(tolerances, "out0", "exact"), R)
    got = got.reshape(-1)
    pos = 0
    for b0 in range(0, B, _step(ctx, R)):
        b1 = min(B, b0 + _step(ctx, R))
        x, _ = ctx.operand(0, b0, b1)
        ref = torch.nonzero(x > 0).reshape(-1) + b0 * R
        g = got[pos: pos + ref.numel()].to(ctx.device)
        pos += ref.numel()
        if g.numel() < ref.numel():  # missing coordinates: pad with an impossible value
            g = torch.cat([g, torch.full((ref.numel() - g.numel(),), -1, dtype=g.dtype, device=g.device)])
        # Per batch: does every coordinate of that row match?
        row = (ref - b0 * R) // R
        bad = (g != ref)
        per = torch.zeros(b1 - b0, dtype=torch.float64, device=ref.device).scatter_reduce(
            0, row, bad.double() * (g - ref).abs().double(), "amax")
        first = {}
        for k in torch.nonzero(bad).flatten()[:1].tolist():
            first[int(row[k])] = int(ref[k]) - (b0 + int(row[k])) * R
        j.add(b0, per, lambda bi: first.get(bi, 0))
    if got.numel() != pos and j.tol is not None:  # extra coordinates past the true count
        j.add(B - 1, torch.tensor([math.inf]), lambda bi: R - 1)
    return [j]


def _sum_all(case, ctx, outs, tolerances):
    """The sum of a flat tensor (cond metric), or its gradient: one broadcast value."""
    B = case.batch
    R = ctx.placed[0].operand.rows_per_batch
    (got,) = outs
    if case.direction == "bwd":  # d(sum)/dx = g everywhere
        from .. import gen
        from ..ops.spec import DTYPES
        gval = gen.values_at(torch.zeros(1, dtype=torch.int64, device=ctx.device),
                             gen.stream_key(case.seed, f"{case.op}/grad0"), DTYPES[case.dtype]).double()
        j = Judgement("grad0", "exact", _tol(tolerances, "grad0", "exact"), R)
        for b0 in range(0, B, _step(ctx, R)):
            b1 = min(B, b0 + _step(ctx, R))
            g = got[b0 * R:b1 * R].to(ctx.device)
            compare_rows(j, b0, g, gval.expand(g.numel()), True)
        return [j]
    total = torch.zeros((), dtype=torch.float64, device=ctx.device)
    absum = torch.zeros((), dtype=torch.float64, device=ctx.device)
    for b0 in range(0, B, _step(ctx, R)):
        b1 = min(B, b0 + _step(ctx, R))
        x, _ = ctx.operand(0, b0, b1)
        total += x.sum()
        absum += x.abs().sum()
    j = Judgement("out0", "cond", _tol(tolerances, "out0", "cond"), 1)
    err = (got.detach().double().to(ctx.device) - total).abs() / absum.clamp_min(_TINY)
    j.add(0, err.reshape(1))
    return [j]


def _argmax_all(case, ctx, outs, tolerances):
    """The first index of the maximum, combined exactly across chunks."""
    B = case.batch
    R = ctx.placed[0].operand.rows_per_batch
    best, best_i = -math.inf, -1
    for b0 in range(0, B, _step(ctx, R)):
        b1 = min(B, b0 + _step(ctx, R))
        x, _ = ctx.operand(0, b0, b1)
        m, i = x.max(0)
        if float(m) > best:  # strictly greater keeps the first occurrence
            best, best_i = float(m), int(i) + b0 * R
    (got,) = outs
    j = Judgement("out0", "exact", _tol(tolerances, "out0", "exact"), 1)
    g = int(got)
    j.add(0, torch.tensor([float(abs(g - best_i))]), lambda bi: 0)
    if j.bad_count:
        j.first_bad_index = best_i
    return [j]


def _unique_consecutive(case, ctx, outs, tolerances):
    """A flat tensor with each run of equal neighbours kept once. The output's length
    depends on the values, so it is not batch-local: a chunk's kept elements (those
    unlike the element before them, the previous chunk's last one included) sit at the
    running count of kept elements before the chunk (int64). A batch is bad where one of
    its kept elements differs or is missing; elements past the true count are bad too."""
    B = case.batch
    R = ctx.placed[0].operand.rows_per_batch
    (got,) = outs
    got = got.reshape(-1)
    j = Judgement("out0", "exact", _tol(tolerances, "out0", "exact"), R)
    pos, prev = 0, None
    for b0 in range(0, B, _step(ctx, R)):
        b1 = min(B, b0 + _step(ctx, R))
        x, _ = ctx.operand(0, b0, b1)
        x = x.reshape(-1)
        before = torch.cat([x[:1] if prev is None else prev, x[:-1]])
        keep = x != before
        if prev is None:
            keep[0] = True
        prev = x[-1:]
        at = torch.nonzero(keep).flatten()
        ref = x[at]
        g = got[pos: pos + ref.numel()].to(ctx.device, torch.float64)
        pos += ref.numel()
        if g.numel() < ref.numel():  # missing elements: pad with a value no input holds
            g = torch.cat([g, torch.full((ref.numel() - g.numel(),), math.nan, dtype=g.dtype, device=g.device)])
        diff = (g - ref).abs().nan_to_num(math.inf)
        row = at // R
        per = torch.zeros(b1 - b0, dtype=torch.float64, device=ref.device).scatter_reduce(0, row, diff, "amax")
        first = {}
        for k in torch.nonzero(diff > 0).flatten()[:1].tolist():
            first[int(row[k])] = int(at[k]) - int(row[k]) * R
        j.add(b0, per, lambda bi: first.get(bi, 0))
    if got.numel() != pos and j.tol is not None:  # extra elements past the true count
        j.add(B - 1, torch.tensor([math.inf]), lambda bi: R - 1)
    return [j]


_KINDS = {"index_select": _index_select, "nonzero": _nonzero, "sum_all": _sum_all, "argmax_all": _argmax_all,
          "unique_consecutive": _unique_consecutive}
