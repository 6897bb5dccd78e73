"""The reference (float64; float32 for 16-bit cases, :data:`REFERENCE_DTYPE`): operands
regenerated chunk by chunk (:class:`RefContext`),
never more than :data:`REF_CHUNK_ELEMENTS` elements at once.
"""

from __future__ import annotations

import torch

from .. import gen
from ..cases import Case
from ..ops.spec import DTYPES, Placed
from .operands import _as_tuple, materialized

#: Largest number of elements any reference chunk or comparison holds at once, per
#: device type (far below 2^31; larger on GPUs to keep per-chunk overhead small).
REF_CHUNK_ELEMENTS = {"cuda": 2**27, "mps": 2**24, "cpu": 2**22}


#: The reference's dtype for a floating case dtype: float64, but float32 for the 16-bit
#: floats. float32 carries 13 (fp16) or 16 (bf16) more significant bits than the case, so
#: its own rounding is at most 2^-13 of the case's tolerance scale, and it moves half the
#: bytes of float64 and runs transcendental ops at float32 speed: on the H200 the judge was
#: 81% of a 2^32-element case (median of 18 OpInfo ops), its float64 passes most of it.
REFERENCE_DTYPE = {torch.float16: torch.float32, torch.bfloat16: torch.float32}


def reference_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a case of ``dtype`` is judged against (integers: int64)."""
    if not dtype.is_floating_point:
        return torch.int64
    return REFERENCE_DTYPE.get(dtype, torch.float64)


def default_ref_chunk(device) -> int:
    return REF_CHUNK_ELEMENTS.get(torch.device(device).type, 2**22)


class RefContext:
    """Regenerates any rows of any operand, in the reference precision, on ``device``."""

    def __init__(self, case: Case, placed: list[Placed], device, chunk: int | None = None, *,
                 exact: bool = False, float64: bool = False) -> None:
        self.chunk = chunk or default_ref_chunk(device)
        self.case = case
        self.placed = placed
        self.device = torch.device(device)
        dt = DTYPES[case.dtype]
        # Exact ops (copies, selections, sorts) only move values: their reference in the
        # case's own dtype is the float64 one bit for bit, at half the memory traffic
        # (and a 32-bit sort key instead of a 64-bit one).
        # ``float64``: judges that need it whatever the case's dtype (matmul's exact spot
        # dot products and Freivalds projections, whole-tensor references).
        self.ref_dtype = dt if exact else (torch.float64 if float64 and dt.is_floating_point else reference_dtype(dt))

    def rows(self, j: int) -> int:
        return self.case.spec.out_rows(self.case.series, self.case.thresholds)[j]

    def _out_dtype(self, p: Placed) -> torch.dtype:
        """The dtype operand ``p``'s regenerated values are stored in: index values keep
        theirs, the others are the reference's (written once, not generated and cast)."""
        return p.dtype if p.operand.kind == "index" else self.ref_dtype

    def _values(self, p: Placed, idx: torch.Tensor) -> torch.Tensor:
        return gen.values_at(idx, p.key, p.dtype, high=p.operand.high, out_dtype=self._out_dtype(p))

    def operand(self, i: int, b0: int, b1: int, *, leaf: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(view, leaf) of operand ``i`` for batches [b0, b1): batched operands are cut
        to their rows, shared ones are whole. ``leaf`` makes a gradient leaf."""
        p = self.placed[i]
        R = p.operand.rows_per_batch
        if p.batched:
            t = gen.values_strided(p.shape, p.strides, p.offset, p.key, p.dtype, self.device,
                                   high=p.operand.high, lead=(b0 * R, b1 * R), out_dtype=self._out_dtype(p))
            if leaf and t.dtype.is_floating_point:
                t.requires_grad_(True)
                return t, t
            return t, None
        storage = gen.fill_flat(p.storage_numel, p.key, p.dtype, self.device, high=p.operand.high,
                                out_dtype=self._out_dtype(p))
        if leaf and storage.dtype.is_floating_point:
            storage.requires_grad_(True)
        if R is None:
            return storage.as_strided(p.shape, p.strides, p.offset), (storage if leaf else None)
        shape = (R * (b1 - b0), *p.shape[1:])
        view = storage.as_strided(shape, p.strides, p.offset + b0 * R * p.strides[0])
        return view, (storage if leaf else None)

    def operand_rows(self, i: int, rows: torch.Tensor) -> torch.Tensor:
        """Operand ``i`` at the given dim-0 rows (an int64 tensor), for indexing ops."""
        p = self.placed[i]
        idx = gen.strided_index(p.shape[1:], p.strides[1:], p.offset, self.device)
        idx = idx.unsqueeze(0) + rows.view(-1, *([1] * (len(p.shape) - 1))) * p.strides[0]
        return self._values(p, idx)


def forward_outputs(case: Case, placed: list[Placed]) -> list[torch.Tensor] | None:
    """The op's forward outputs as meta tensors (shapes, dtypes; no data), or None when
    they depend on data (nonzero) or the op has no call (factories)."""
    if case.spec.call is None:
        return None
    try:
        views = [torch.empty_strided(p.shape, p.strides, dtype=p.dtype, device="meta") for p in placed]
        return list(_as_tuple(case.spec.call(*views)))
    except Exception:
        return None


def chunk_batches(case: Case, placed: list[Placed], outs, chunk: int) -> int:
    """Batches per reference chunk, so that no chunk holds more than ``chunk`` elements.

    In backward, ``outs`` are the input gradients; the reference also regenerates the
    upstream gradient, which has the forward output's size (an embedding's is 4096
    times its index input's), so that counts too."""
    B = case.batch
    per = 1
    for p in placed:
        if p.batched:
            per = max(per, p.numel // B)
    fwd = forward_outputs(case, placed) if case.direction == "bwd" else None
    for o in [*outs, *(fwd or ())]:
        per = max(per, o.numel() // max(B, 1))
    if case.spec.family == "attention":  # the score matrix is the largest intermediate
        n = placed[0].shape[-2]
        per = max(per, n * n * placed[0].shape[1])
    return max(1, chunk // max(per, 1))


def _reference_chunk(case: Case, ctx: RefContext, b0: int, b1: int, outs, *, scales: bool = True
                     ) -> list[torch.Tensor]:
    """Reference outputs (fwd) or input gradients (bwd) for batches [b0, b1), and their
    error scales (None where the op has none, or without ``scales``: a bit comparison
    needs none, and a reduction's scale is one more pass over its inputs)."""
    spec = case.spec
    if spec.reference is not None:
        return list(spec.reference(ctx, b0, b1)), None
    bwd = case.direction == "bwd"
    call = spec.ref_call or spec.call
    views, leaves = [], []
    for i in range(len(ctx.placed)):
        v, leaf = ctx.operand(i, b0, b1, leaf=bwd and ctx.placed[i].operand.grad)
        views.append(v)
        leaves.append(leaf)
    if not bwd:
        with torch.no_grad():
            scale = list(spec.ref_scale(*views)) if spec.ref_scale and scales else None
            return list(_as_tuple(call(*views))), scale
    with torch.enable_grad():
        res = _as_tuple(call(*views))[: spec.bwd_outputs]
        grads_in = []
        for j, r in enumerate(res):
            R = r.numel() // (b1 - b0)
            gv = gen.fill_flat(r.numel(), gen.stream_key(case.seed, f"{case.op}/grad{j}"), DTYPES[case.dtype],
                               ctx.device, start=b0 * R, out_dtype=r.dtype)
            grads_in.append(gv.view(r.shape))
        used = [leaf for leaf in leaves if leaf is not None]
        gs = torch.autograd.grad(res, used, grads_in, allow_unused=True)
        scale = _shared_grad_scales(spec, ctx, views, leaves, grads_in) if scales else None
    out = []
    for leaf, gr in zip(used, gs):
        out.append(materialized(gr) if gr is not None else torch.zeros_like(leaf))
    # Shared leaves return whole-storage gradients; batched leaves their rows.
    return out, scale


def _shared_grad_scales(spec, ctx: RefContext, views, leaves, grads_in):
    """For gradients of shared operands (summed over every batch), the same gradient
    computed from |inputs| and |upstream gradient|: sum |a||g|, the scale of the
    rounding error of a reduction whose length grows with the batch count. Batched
    gradients get None (their usual per-batch scale applies)."""
    shared = [leaf is not None and not p.batched for leaf, p in zip(leaves, ctx.placed)]
    if not any(shared):
        return None
    abs_leaves, abs_views = [], []
    for v, leaf in zip(views, leaves):
        if leaf is None:
            abs_leaves.append(None)
            abs_views.append(v.abs() if v.dtype.is_floating_point else v)
            continue
        a = leaf.detach().abs().requires_grad_(True)
        abs_leaves.append(a)
        abs_views.append(a if v is leaf else a.as_strided(v.shape, v.stride(), v.storage_offset()))
    with torch.enable_grad():
        res = _as_tuple((spec.ref_call or spec.call)(*abs_views))[: spec.bwd_outputs]
        used = [a for a in abs_leaves if a is not None]
        gs = torch.autograd.grad(res, used, [g.abs() for g in grads_in], allow_unused=True)
    flags = [f for f, leaf in zip(shared, leaves) if leaf is not None]
    return [materialized(g.detach()) if (f and g is not None) else None for f, g in zip(flags, gs)]
