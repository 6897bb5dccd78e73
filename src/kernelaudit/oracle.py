"""Run one case on a device and judge it against a reference that never crosses.

:func:`execute` builds the inputs of a :class:`~kernelaudit.cases.Case` on the device
under test (from the case alone), runs the op (forward, or forward and backward)
under the active fault model, and judges every output against a reference computed
in float64, chunk by chunk, from regenerated inputs: no chunk of the reference, and
no comparison, holds more than :data:`REF_CHUNK_ELEMENTS` elements.

Metrics (each calibrated below the thresholds, see :mod:`kernelaudit.tolerance`):

* ``rel``: per batch, ``max|got - ref| / max|ref|`` (the study's metric);
* ``exact``: per batch, ``max|got - ref|`` with tolerance 0 (copies, indexing, ints);
* ``freivalds``: matmuls, per batch ``|y.C x - y.(A (B x))| / (|y|.|A| |B|.|x|)`` with
  random x, y: an O(n^2) check of an O(n^3) product;
* ``spot``: matmuls, exact fp64 dot products at the first and last element of every
  batch and around every flat index that is a multiple of 2^31, normalised by
  ``sum_k |a_ik b_kj|``;
* ``cond``: full reductions, ``|got - ref| / sum|x|``.
"""

from __future__ import annotations

import functools
import math
import time
import traceback
from dataclasses import dataclass, field

import torch

from . import gen
from .cases import Case
from .errors import CheckerBug
from .faults import make_fault_model
from .ops.spec import DTYPES, Placed, layout_roles, place
from .tolerance import MissingTolerance, tolerance_for
from .verdict import BadBatches, Status, Verdict

#: Largest number of elements any reference chunk or comparison holds at once, per
#: device type (far below 2^31; larger on GPUs to keep per-chunk overhead small).
REF_CHUNK_ELEMENTS = {"cuda": 2**27, "mps": 2**24, "cpu": 2**22}


def default_ref_chunk(device) -> int:
    return REF_CHUNK_ELEMENTS.get(torch.device(device).type, 2**22)
#: Spot checks are placed around every multiple of this many elements (2^31, scaled).
SPOT_NEIGHBOURS = (-1, 0, 1)  # a contiguous range (_spot_indices builds it with arange)
_TINY = 1e-300


def rel_floor(dtype: torch.dtype) -> float:
    """The least denominator of the ``rel`` metric for outputs of ``dtype``: its smallest
    normal number. Below it a float has only absolute precision (subnormals, or flushed
    to zero), so a batch whose every true value lies there is judged on that scale: a
    float16 mean gradient ``g / 16384`` that correctly rounds to 0 is not a wrong batch."""
    return float(torch.finfo(dtype).tiny) if dtype.is_floating_point else _TINY


# -- building inputs --------------------------------------------------------------
def placed_operands(case: Case) -> list[Placed]:
    """The case's operands placed in storage (layouts applied), with their stream keys."""
    spec = case.spec
    ops = spec.operands(case.series, case.batch, case.thresholds)
    roles = layout_roles(case.layout, len(ops), [o.transposable for o in ops]) if ops else []
    out = []
    for i, (o, role) in enumerate(zip(ops, roles)):
        dt = torch.int64 if o.kind == "index" else DTYPES[case.dtype]
        out.append(place(o, role, dt, gen.stream_key(case.seed, f"{case.op}/{case.series}/{i}")))
    return out


def device_inputs(placed: list[Placed], device, *, grad: bool) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """(bases, views): storage tensors (the autograd leaves) and the views the op gets."""
    bases, views = [], []
    for p in placed:
        base = gen.fill_flat(p.storage_numel, p.key, p.dtype, device, high=p.operand.high)
        if grad and p.operand.grad and p.dtype.is_floating_point:
            base.requires_grad_(True)
        bases.append(base)
        views.append(base.as_strided(p.shape, p.strides, p.offset))
    return bases, views


#: Whether bilinear forwards get their projections at generation by default
#: (``$KERNELAUDIT_PROJECT_AT_GENERATION`` = 1 or 0 overrides).
PROJECT_AT_GENERATION = True


def project_at_generation(case: Case, device, ref_device, mode: str) -> bool:
    """Whether the forward of a bilinear op gets its check's projections ``y A`` and
    ``B x`` while its inputs are generated (:func:`inputs_with_projections`): per
    :data:`PROJECT_AT_GENERATION` or ``$KERNELAUDIT_PROJECT_AT_GENERATION``, on CUDA,
    with the fused check on the same device, for the operands the default ``flat``
    kernel does not cover (it regenerates A and B faster than generate-and-project
    makes their projections). The check then streams C alone instead of hashing A and
    B again: on the H200 (2^32-element bf16 bmm) 5.0 ms with the extra generation
    counted, against 8.6 ms for ``rowsum-cspec`` regenerating them
    (``benchmarks/results/2026-12-03-h200-session6``)."""
    import os

    device, ref_device = torch.device(device), torch.device(ref_device)
    if not (case.spec.bilinear is not None and case.direction == "fwd" and mode == "auto"
            and device == ref_device and _fused_freivalds_enabled(device)
            and os.environ.get("KERNELAUDIT_PROJECT_AT_GENERATION", "1" if PROJECT_AT_GENERATION else "0") == "1"):
        return False
    from .kernels.freivalds import ROWSUM_KERNELS, flat_eligible, selected_kernel

    kernel = selected_kernel()
    if kernel == "flat":  # it regenerates A and B faster than they are projected at generation
        ctx = RefContext(case, placed_operands(case), device)
        Am, Bmm, Mm, _, _ = _matmul_operands(case, ctx, 0, case.batch, case.batch, meta=True)
        dM = _desc(ctx, Mm) if Mm is not None else None
        return not flat_eligible(Am.shape[-2], Bmm.shape[-1], _desc(ctx, Am), _desc(ctx, Bmm), dM, Am.shape[-1])
    return kernel in ROWSUM_KERNELS  # the kernels that read precomputed projections


def inputs_with_projections(case: Case, placed: list[Placed], device):
    """(bases, views, projections) for the forward of a bilinear op: the batched operands
    A and B are written by :func:`~kernelaudit.kernels.freivalds.generate_and_project`,
    which computes ``y A`` / ``B x`` from the values it generates (never from memory the
    op could touch) in the same pass; every other storage as :func:`device_inputs` does.
    A shared weight or a broadcast bias (at most :data:`SMALL_OPERAND` elements) is
    projected from its values regenerated by torch (:func:`_projection_of_values`).
    ``projections`` maps ``"A"`` / ``"B"`` to (nb or 1, H or 1, K, 2) float64 and, with
    a bias, ``"M"`` to ``y M x`` as (nb or 1, H or 1, 1, 2); it is empty when some
    operand can be projected neither way (the check then regenerates every operand)."""
    from .kernels.freivalds import generate_and_project

    ctx = RefContext(case, placed, device)
    B = case.batch
    Am, Bmm, Mm, _, _ = _matmul_operands(case, ctx, 0, B, B, meta=True)
    x = _projection_vector(case.seed, "x", Bmm.shape[-1], torch.device(device))
    y = _projection_vector(case.seed, "y", Am.shape[-2], torch.device(device))
    roles, small = {}, {}
    candidates = [("A", Am, y, False), ("B", Bmm, x, True)]
    if Mm is not None:
        candidates.append(("M", Mm, y, None))  # y M x per matrix
    for role, t, w, keep_rows in candidates:
        i = _operand_of(t)
        p = placed[i]
        full_bias = role != "M" or tuple(t.shape[-2:]) == (Am.shape[-2], Bmm.shape[-1])
        if p.batched and p.storage_numel == p.numel + p.offset and full_bias:
            roles[i] = (role, t, w, keep_rows)
        elif math.prod(t.shape) <= SMALL_OPERAND:
            small[role] = t  # a shared weight or a broadcast bias: projected from its values
    if len({_operand_of(c[1]) for c in candidates}) < len(candidates):
        roles, small = {}, {}  # one storage in two roles: keep the plain path
    if len(roles) + len(small) < len(candidates):
        return (*device_inputs(placed, device, grad=False), {})  # the check regenerates what is missing
    bases, views, projections = [], [], {}
    for i, p in enumerate(placed):
        if i in roles:
            role, t, w, keep_rows = roles[i]
            base = torch.empty(p.storage_numel, dtype=p.dtype, device=device)
            if p.offset:  # storage before the view (the slice layout's leading row)
                base[:p.offset].copy_(gen.fill_flat(p.offset, p.key, p.dtype, device))
            if role == "M":
                projections[role] = generate_and_project(base, _desc(ctx, t), tuple(t.shape), y, False, w2=x)
            else:
                projections[role] = generate_and_project(base, _desc(ctx, t), tuple(t.shape), w, keep_rows)
        else:
            base = gen.fill_flat(p.storage_numel, p.key, p.dtype, device, high=p.operand.high)
        bases.append(base)
        views.append(base.as_strided(p.shape, p.strides, p.offset))
    for role, t in small.items():
        projections[role] = _projection_of_values(ctx, t, role, x, y)
    return bases, views, projections


#: Operands up to this many elements (a shared weight, a broadcast bias) get their
#: projections from values regenerated by torch, in float64, instead of at generation.
SMALL_OPERAND = 2**22


def _projection_of_values(ctx, t, role: str, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The projection :func:`~kernelaudit.kernels.freivalds.generate_and_project` makes,
    (a, b, K, 2) float64 (value, |value|), computed from regenerated values of the small
    canonical view ``t`` (a traced meta view; size-1 dims broadcast): ``y A`` for role A,
    ``B x`` for B, ``y M x`` as (a, b, 1, 2) for M."""
    d = _desc(ctx, t)
    p = ctx.placed[_operand_of(t)]
    v = gen.values_strided(tuple(t.shape), d.strides, d.offset, d.key, p.dtype, ctx.device,
                           out_dtype=torch.float64)
    if role == "A":
        pv, pa = (v * y[:, None]).sum(-2), (v.abs() * y.abs()[:, None]).sum(-2)
    elif role == "B":
        pv, pa = (v * x).sum(-1), (v.abs() * x.abs()).sum(-1)
    else:
        pv = ((v * x).sum(-1) * y).sum(-1, keepdim=True)
        pa = ((v.abs() * x.abs()).sum(-1) * y.abs()).sum(-1, keepdim=True)
    return torch.stack([pv, pa], -1)


def _as_tuple(x) -> tuple:
    if isinstance(x, torch.Tensor):
        return (x,)
    return tuple(x)


def _sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def run_op(case: Case, device, fault_model: str, timing: dict | None = None, aux: dict | None = None):
    """Run the case on ``device``; returns (placed, outputs-to-judge, output rows-per-batch).

    ``timing`` (a dict) receives ``inputs_s``: seconds spent generating the inputs.
    With ``aux`` (a dict) holding ``project=True``, a bilinear forward's inputs are
    generated with their projections, left in ``aux["projections"]``."""
    spec = case.spec
    placed = placed_operands(case)
    bwd = case.direction == "bwd"
    t0 = time.perf_counter()
    if aux is not None and aux.get("project"):
        bases, views, aux["projections"] = inputs_with_projections(case, placed, device)
    else:
        bases, views = device_inputs(placed, device, grad=bwd)
    if timing is not None:
        _sync(device)
        timing["inputs_s"] = time.perf_counter() - t0
    fm = make_fault_model(fault_model, case.thresholds)
    if spec.call is None:  # a factory op: no inputs, a length
        n = case.batch * spec.out_rows(case.series, case.thresholds)[0]
        with fm:
            outs = (spec.extra["factory"](n, DTYPES[case.dtype], device),)
        return placed, outs, spec.out_rows(case.series, case.thresholds), fm
    with fm:
        outs = _as_tuple(spec.call(*views))
    if bwd:
        used = outs[: spec.bwd_outputs]
        # Upstream gradients are generated outside the fault model: they are inputs.
        grads_in = [gen.fill_flat(o.numel(), gen.stream_key(case.seed, f"{case.op}/grad{j}"), o.dtype,
                                  device).view(o.shape) for j, o in enumerate(used)]
        with fm:
            torch.autograd.backward(used, grads_in)
    if not bwd:
        return placed, outs, spec.out_rows(case.series, case.thresholds), fm
    got, rows = [], []
    for p, base in zip(placed, bases):
        if base.grad is None:
            continue
        if p.batched:
            got.append(base.grad.as_strided(p.shape, p.strides, p.offset))
            rows.append(p.operand.rows_per_batch)
        else:
            got.append(base.grad)
            rows.append(None)
    return placed, tuple(got), tuple(rows), fm


# -- reference --------------------------------------------------------------------
class RefContext:
    """Regenerates any rows of any operand, in the reference precision, on ``device``."""

    def __init__(self, case: Case, placed: list[Placed], device, chunk: int | None = None, *,
                 exact: bool = False) -> None:
        self.chunk = chunk or default_ref_chunk(device)
        self.case = case
        self.placed = placed
        self.device = torch.device(device)
        dt = DTYPES[case.dtype]
        # Exact ops (copies, selections, sorts) only move values: their reference in the
        # case's own dtype is the float64 one bit for bit, at half the memory traffic
        # (and a 32-bit sort key instead of a 64-bit one).
        self.ref_dtype = dt if exact else (torch.float64 if dt.is_floating_point else torch.int64)

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


# -- comparison --------------------------------------------------------------------
@dataclass
class Judgement:
    """Accumulates per-batch metrics of one output over the chunks."""

    name: str
    metric: str
    tol: float | None
    numel_per_batch: int
    worst: float = 0.0
    bad_first: int | None = None
    bad_last: int | None = None
    bad_count: int = 0
    first_bad_index: int | None = None
    worst_batch: int | None = None
    located: bool = False  # the first bad element of a Freivalds-localised batch was found

    def add(self, b0: int, per_batch: torch.Tensor, first_bad_local=None) -> None:
        """Record metrics of batches b0.. (``first_bad_local(b) -> flat index within batch``)."""
        if per_batch.numel():
            self.add_summary(b0, summarize(per_batch.detach().reshape(1, -1), [self.tol]).cpu()[0], first_bad_local)

    def add_summary(self, b0: int, summary: torch.Tensor, first_bad_local=None) -> None:
        """Record batches b0.. from their :func:`summarize` row (worst, its batch, bad
        count, first and last bad batch; batches counted from 0 at b0)."""
        worst, arg, count, first, last = summary.tolist()
        if worst > self.worst or self.worst_batch is None:
            self.worst, self.worst_batch = worst, b0 + int(arg)
        if self.tol is None or not count:
            return
        if self.bad_first is None:
            self.bad_first = b0 + int(first)
            local = first_bad_local(int(first)) if first_bad_local else 0
            self.first_bad_index = self.bad_first * self.numel_per_batch + int(local)
        self.bad_last = b0 + int(last)
        self.bad_count += int(count)

    def verdict(self) -> Verdict:
        if self.bad_count:
            return Verdict(Status.WRONG, f"{self.name}:{self.metric}", self.worst, self.tol,
                           BadBatches(self.bad_first, self.bad_last, self.bad_count), self.first_bad_index)
        return Verdict(Status.OK, f"{self.name}:{self.metric}", self.worst, self.tol)


def summarize(per_batch: torch.Tensor, tols: list[float | None]) -> torch.Tensor:
    """(k, 5) float64 on ``per_batch``'s device, for k rows of per-batch metrics (NaN
    counts as inf) and a tolerance per row: the worst metric, its batch, how many
    batches exceed the tolerance (None: none do), the first and the last of them (0
    when none). Batch indexes stay far below 2^53, exact in float64. Computed where the
    metrics are, so that a GPU check moves 5 numbers a row to the host, not a batch's.
    On CUDA one Triton launch (:mod:`.kernels.summary`) does what takes about twenty
    small torch kernels here."""
    if _fused_summary_enabled(per_batch.device):
        from .kernels.summary import MAX_ROWS, summary_rows

        if 1 <= per_batch.shape[0] <= MAX_ROWS and per_batch.shape[1] >= 1:
            return summary_rows(per_batch, tols)
    pb = per_batch.double()
    pb = torch.where(torch.isnan(pb), torch.full_like(pb, math.inf), pb)
    worst, arg = pb.max(1)
    # row by row against Python floats: a tensor of tolerances would be a host-to-device
    # copy, which can wait for the GPU's queued work
    bad = torch.stack([pb[i] > (math.inf if t is None else t) for i, t in enumerate(tols)]).to(torch.int32)
    n = pb.shape[1]
    first = bad.argmax(1)
    count = bad.sum(1)
    last = torch.where(count > 0, n - 1 - bad.flip(1).argmax(1), 0)  # as documented: 0 when none
    return torch.stack([worst, arg.double(), count.double(), first.double(), last.double()], 1)


def _batch_view(t: torch.Tensor, nb: int) -> torch.Tensor:
    return t.reshape(nb, -1)


def compare_rows(j: Judgement, b0: int, got: torch.Tensor, ref: torch.Tensor, exact: bool,
                 scale: torch.Tensor | None = None) -> None:
    """Per-batch rel (or exact) metric of a chunk; both tensors hold whole batches.

    ``scale`` (per element, optional) replaces the batch's ``max|ref|`` as the error's
    denominator: reductions pass ``sum|x|`` so a sum near zero is not a false alarm.
    On CUDA the per-batch maxima come from one fused pass (:mod:`.kernels.compare`)."""
    nb = _nb_of(j, got)
    g = _batch_view(got.detach(), nb)
    r = _batch_view(ref.detach(), nb)  # float64, or the case's dtype for exact ops
    if g.shape != r.shape:
        raise CheckerBug(f"{j.name}: got chunk {tuple(g.shape)} vs reference {tuple(r.shape)}")
    sc = _batch_view(scale.detach().to(torch.float64), nb) if scale is not None and not exact else None
    if _fused_compare_enabled(r.device):
        from .kernels.compare import row_max

        err_max, ref_max = row_max(g, r, sc, _TINY)
    else:
        g64, r = g.to(torch.float64), r.to(torch.float64)
        err = (g64 - r).abs()
        if sc is not None:
            err = err / sc.clamp_min(_TINY)
        err = torch.where(torch.isnan(g64) | torch.isnan(r), torch.full_like(err, math.inf), err)
        err_max, ref_max = err.amax(1), r.abs().amax(1)
    floor = rel_floor(got.dtype)
    per = err_max if (exact or sc is not None) else err_max / ref_max.clamp_min(floor)

    def local(bi: int) -> int:
        """First element of batch ``bi`` over the tolerance (one row, in torch)."""
        gi, ri = g[bi].to(torch.float64), r[bi].to(torch.float64)
        e = (gi - ri).abs()
        tol = j.tol if j.tol is not None else 0.0
        if exact:
            thresh = torch.zeros_like(e)
        elif sc is not None:
            e = e / sc[bi].clamp_min(_TINY)
            thresh = torch.full_like(e, tol)
        else:
            thresh = torch.full_like(e, tol * float(ri.abs().amax().clamp_min(floor)))
        e = torch.where(torch.isnan(gi) | torch.isnan(ri), torch.full_like(e, math.inf), e)
        over = torch.nonzero(e > thresh).flatten()
        return int(over[0]) if over.numel() else 0

    j.add(b0, per, local)


def _fused_summary_enabled(device: torch.device) -> bool:
    """The one-launch judgement summary (``KERNELAUDIT_FUSED_SUMMARY``)."""
    return _fused_enabled(device, "KERNELAUDIT_FUSED_SUMMARY", "summary")


def _fused_compare_enabled(device: torch.device) -> bool:
    """The fused per-batch comparison (``KERNELAUDIT_FUSED_COMPARE``)."""
    return _fused_enabled(device, "KERNELAUDIT_FUSED_COMPARE", "compare")


def _nb_of(j: Judgement, got: torch.Tensor) -> int:
    return max(1, got.numel() // max(1, j.numel_per_batch))


def _canonical(t: torch.Tensor | None, nb: int, rows: int | None) -> torch.Tensor | None:
    """Matmul operand/output as (nb or 1, H or 1, M, N) for broadcasting."""
    if t is None:
        return None
    if rows is not None and rows > 1 and t.dim() == 2:
        t = t.reshape(nb, rows, t.shape[-1])
    while t.dim() < 3:
        t = t.unsqueeze(0)
    if t.dim() == 3:
        t = t.unsqueeze(1)
    return t


def _spot_indices(b0: int, b1: int, per: int, t31: int, device=None) -> torch.Tensor:
    """Flat indexes (global) to spot-check in batches [b0, b1), built on ``device``.

    Ordered so that, within any batch, the first listed index that is bad is also the
    smallest bad one: each batch's first element, then the neighbours of multiples of
    2^31 (ascending), then each batch's last element. Duplicates are harmless."""
    firsts = torch.arange(b0, b1, dtype=torch.int64, device=device) * per
    lo, hi = b0 * per, b1 * per
    k0 = max(1, -(-lo // t31))
    ks = torch.arange(k0, (hi - 1) // t31 + 2, dtype=torch.int64, device=device) * t31
    # built on the device without a copy from the host or a boolean selection: either
    # would wait for the GPU's queued work (the projection kernel) before going on
    near = (ks[:, None] + torch.arange(SPOT_NEIGHBOURS[0], SPOT_NEIGHBOURS[-1] + 1, dtype=torch.int64,
                                       device=device)[None, :]).reshape(-1)
    near = near.clamp(lo, hi - 1)  # out-of-range neighbours become a batch end: a duplicate
    return torch.cat([firsts, near, firsts + per - 1])


#: Judgements of at most this many batches keep their spot coordinates cached (two of
#: them at a time): five int64 vectors of about 2 nb elements, at most 21 MB a shape, so
#: at most 42 MB held between cases. Bigger ones (many tiny batches) rebuild theirs.
SPOT_CACHE_MAX_BATCHES = 2**18


def _spot_coords(b0: int, nb: int, H: int, Mdim: int, Ndim: int, t31: int, device) -> tuple[torch.Tensor, ...]:
    """(flat, batch, head, row, col) of the spot checks of batches [b0, b0 + nb) of an
    (nb, H, M, N) output, flat indexes counted from batch b0 (:func:`_spot_indices`).
    Cached up to :data:`SPOT_CACHE_MAX_BATCHES` (callers must not modify them): the sweep
    judges the same shapes case after case, and building them took about fifteen small
    kernels a judgement."""
    if nb <= SPOT_CACHE_MAX_BATCHES:
        return _spot_coords_cached(b0, nb, H, Mdim, Ndim, t31, device)
    return _build_spot_coords(b0, nb, H, Mdim, Ndim, t31, device)


def _build_spot_coords(b0: int, nb: int, H: int, Mdim: int, Ndim: int, t31: int, device) -> tuple[torch.Tensor, ...]:
    per_batch = H * Mdim * Ndim
    flat = _spot_indices(b0, b0 + nb, per_batch, t31, device) - b0 * per_batch
    bb, rem = flat // per_batch, flat % per_batch
    hh, rem = rem // (Mdim * Ndim), rem % (Mdim * Ndim)
    return flat, bb, hh, rem // Ndim, rem % Ndim


_spot_coords_cached = functools.lru_cache(maxsize=2)(_build_spot_coords)


#: Operand tag stride for descriptor tracing (storage offsets stay far below it).
_TAG = 2**50


def _fused_enabled(device: torch.device, env: str, module: str) -> bool:
    """A fused Triton kernel runs on CUDA, and on the CPU interpreter when ``$env`` is
    ``1``; ``0`` turns it off. False when its module cannot be imported (no Triton)."""
    import importlib
    import os

    flag = os.environ.get(env)
    if flag == "0" or (device.type != "cuda" and flag != "1"):
        return False
    try:
        importlib.import_module(f".kernels.{module}", __package__)
    except Exception:
        return False
    return True


def _fused_freivalds_enabled(device: torch.device) -> bool:
    """The fused projection check (``KERNELAUDIT_FUSED_FREIVALDS``)."""
    return _fused_enabled(device, "KERNELAUDIT_FUSED_FREIVALDS", "freivalds")


def _matmul_operands(case, ctx, b0, b1, nb, *, meta: bool):
    """The bilinear decomposition (A, B, M, alpha, beta) of batches [b0, b1), canonical
    (nb or 1, H or 1, rows, cols). ``meta=True`` traces it on meta tensors whose storage
    offsets tag the operand, giving strided descriptors instead of values."""
    views = []
    for i, p in enumerate(ctx.placed):
        if meta:
            R = p.operand.rows_per_batch
            base = torch.empty(0, device="meta", dtype=p.dtype)
            if R is not None:
                v = base.as_strided((R * nb, *p.shape[1:]), p.strides,
                                    (i + 1) * _TAG + p.offset + b0 * R * p.strides[0])
            else:
                v = base.as_strided(p.shape, p.strides, (i + 1) * _TAG + p.offset)
        else:
            v, _ = ctx.operand(i, b0, b1)
        views.append(_canonical(v, nb, p.operand.rows_per_batch if p.batched else None))
    A, Bm, M, alpha, beta = case.spec.bilinear(*views)
    return _canonical(A, nb, None), _canonical(Bm, nb, None), _canonical(M, nb, None), alpha, beta


def _desc(ctx, t):
    """A traced meta view -> the fused kernel's descriptor (size-1 dims broadcast)."""
    from .kernels.freivalds import Desc

    i, off = divmod(t.storage_offset(), _TAG)
    strides = tuple(0 if n == 1 else st for n, st in zip(t.shape, t.stride()))
    return Desc(ctx.placed[i - 1].key, off, strides)


def judge_matmul_chunk(case, ctx, b0, b1, got_chunk, jf: Judgement, js: Judgement, out_rows,
                       projections: dict | None = None):
    """Freivalds projection and exact spot checks for batches [b0, b1) of a matmul output.

    On CUDA the projection is one fused Triton pass over C with A and B regenerated in
    registers, or, for the operands in ``projections`` (made while the inputs were
    generated, all batches), read from there; elsewhere it is computed with float64
    torch ops on regenerated chunks."""
    nb = b1 - b0
    fused = _fused_freivalds_enabled(ctx.device)
    C = _canonical(got_chunk if fused else got_chunk.to(torch.float64), nb, out_rows)
    H, Mdim, Ndim = C.shape[1], C.shape[-2], C.shape[-1]
    if fused:
        from .kernels.freivalds import ACCUMULATE, PROJECTED_OK, freivalds, lhs_partials, selected_kernel, spots

        dt = DTYPES[case.dtype]
        xa = _projection_vector(case.seed, "x", Ndim, ctx.device, ACCUMULATE[dt])
        ya = _projection_vector(case.seed, "y", Mdim, ctx.device, ACCUMULATE[dt])
        pre = projections or {}
        early = None
        if pre.get("A") is not None and pre.get("B") is not None and selected_kernel() in PROJECTED_OK:
            # the stream over C goes first: the host's tracing below overlaps it
            early = lhs_partials(C, xa, ya, dt)
        Am, Bmm, Mm, alpha, beta = _matmul_operands(case, ctx, b0, b1, nb, meta=True)
        dA, dB = _desc(ctx, Am), _desc(ctx, Bmm)
        dM = _desc(ctx, Mm) if Mm is not None else None
        K = Am.shape[-1]
        res = freivalds(C, xa, ya, dA, dB, dM, K, alpha, beta, dt, pre_a=pre.get("A"),
                        pre_b=pre.get("B"), pre_m=pre.get("M"), lhs=early)
        lhs, rhs, bound = res[..., 0], res[..., 1], res[..., 2]

        def spot_values(bb, hh, ii, jj):
            return spots(C, dA, dB, dM, K, alpha, beta, DTYPES[case.dtype], bb, hh, ii, jj)
    else:
        x = _projection_vector(case.seed, "x", Ndim, ctx.device)
        y = _projection_vector(case.seed, "y", Mdim, ctx.device)
        A, Bm, M, alpha, beta = _matmul_operands(case, ctx, b0, b1, nb, meta=False)
        lhs = (C @ x) @ y
        rhs = alpha * ((A @ (Bm @ x).unsqueeze(-1)).squeeze(-1) @ y)
        bound = abs(alpha) * ((A.abs() @ (Bm.abs() @ x.abs()).unsqueeze(-1)).squeeze(-1) @ y.abs())
        if M is not None:
            Mb = torch.broadcast_to(M, C.shape)
            rhs = rhs + beta * ((Mb @ x) @ y)
            bound = bound + abs(beta) * ((Mb.abs() @ x.abs()) @ y.abs())
        Ab = torch.broadcast_to(A, (nb, H, *A.shape[-2:]))
        Bb = torch.broadcast_to(Bm, (nb, H, *Bm.shape[-2:]))

        def spot_values(bb, hh, ii, jj):
            rows, cols = Ab[bb, hh, ii, :], Bb[bb, hh, :, jj]
            prod = rows * cols
            ref = alpha * prod.sum(-1)
            scale = abs(alpha) * prod.abs().sum(-1)
            if M is not None:
                mv = torch.broadcast_to(M, C.shape)[bb, hh, ii, jj]
                ref = ref + beta * mv
                scale = scale + abs(beta) * mv.abs()
            return C[bb, hh, ii, jj].to(torch.float64), ref, scale
    _judge_projection(case, C, b0, lhs, rhs, bound, spot_values, jf, js)


@functools.lru_cache(maxsize=64)
def _projection_vector(seed: int, name: str, n: int, device: torch.device,
                       dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """The Freivalds vector ``x`` or ``y`` of length ``n`` (generated in float64, held in
    ``dtype``; cached: a sweep uses a handful of lengths; callers must not modify it)."""
    if dtype != torch.float64:
        return _projection_vector(seed, name, n, device).to(dtype)
    return gen.values_at(torch.arange(n, device=device), gen.stream_key(seed, f"freivalds-{name}"), torch.float64)


def _judge_projection(case, C, b0: int, lhs, rhs, bound, spot_values, jf: Judgement, js: Judgement) -> None:
    """Record Freivalds metrics (per (batch, head) ``lhs``, ``rhs``, ``bound``) and exact
    spot checks of the canonical (nb, H, M, N) output ``C`` whose batches start at
    ``b0``; ``spot_values(bb, hh, ii, jj) -> (got, ref, scale)`` gives exact float64
    values of any elements. A batch the projection flags is searched element by element
    for its first bad index."""
    nb, H, Mdim, Ndim = C.shape
    per = ((lhs - rhs).abs() / bound.clamp_min(_TINY))  # NaN (a NaN lhs) counts as inf in summarize
    # spot checks: exact float64 dot products at chosen elements. Everything up to the
    # one transfer below is queued without waiting, so on a GPU the host's work here
    # overlaps the projection kernel instead of following it.
    per_batch = C[0].numel()
    device = C.device
    flat, bb, hh, ii, jj = _spot_coords(b0, nb, H, Mdim, Ndim, case.thresholds.t31, device)
    got, ref, scale = spot_values(bb, hh, ii, jj)
    err = (got - ref).abs() / scale.clamp_min(_TINY)
    err = torch.where(torch.isnan(got), torch.full_like(err, math.inf), err)
    per_b = torch.zeros(nb, dtype=torch.float64, device=err.device).scatter_reduce(0, bb, err, "amax")
    # the one transfer: 5 numbers per judgement
    summary = summarize(torch.stack([per.reshape(nb, -1).amax(1), per_b]), [jf.tol, js.tol]).cpu()
    jf.add_summary(b0, summary[0])
    tol = js.tol if js.tol is not None else math.inf
    bad_local = {}
    if summary[1, 2] > 0:  # only then are the bad spots' indexes fetched
        bad = torch.nonzero(err > tol).flatten()
        for b_, f_ in zip(bb[bad].tolist(), flat[bad].tolist()):  # one transfer, not one per spot
            bad_local.setdefault(b_, f_ - b_ * per_batch)
    js.add_summary(b0, summary[1], lambda bi: bad_local.get(bi, 0))
    # Freivalds localises to a batch; find the element exactly (one batch is small).
    if jf.tol is not None and jf.bad_first is not None and jf.bad_first >= b0 and not jf.located:
        bi = jf.bad_first - b0
        n_el = H * Mdim * Ndim
        e_flat = torch.arange(n_el, device=device)
        eh, erem = e_flat // (Mdim * Ndim), e_flat % (Mdim * Ndim)
        ei, ej = erem // Ndim, erem % Ndim
        eb = torch.full_like(e_flat, bi)
        got_b, full, _ = spot_values(eb, eh, ei, ej)
        e = (got_b - full).abs()
        scale_b = full.abs().amax().clamp_min(_TINY)
        over = torch.nonzero(e > jf.tol * scale_b).flatten()
        jf.first_bad_index = jf.bad_first * per_batch + (int(over[0]) if over.numel() else int(e.argmax()))
        jf.located = True


def _operand_of(t) -> int:
    """Index of the operand a traced meta view comes from (its storage-offset tag)."""
    return t.storage_offset() // _TAG - 1


def _transposed(d):
    from .kernels.freivalds import Desc

    s = d.strides
    return Desc(d.key, d.offset, (s[0], s[1], s[3], s[2]))


def judge_matmul_grads(case, ctx, outs, tol) -> list[Judgement] | None:
    """Backward of a bilinear op ``C = alpha A B + beta M``, judged by projections.

    With G the (generated) upstream gradient, the gradients are again products of
    generated operands: ``dA = alpha G B^T``, ``dB = alpha A^T G``, ``dM = beta G``
    (summed over the dims M broadcasts). So each is checked like a forward output: a
    fused Freivalds pass (and, for per-batch gradients, exact spot checks) instead of a
    float64 autograd reference. A gradient shared by every batch (a weight, a stride-0
    operand) is one matrix: its projection is compared with the sum of every batch's.
    A bias broadcast over rows is checked against ``beta * sum(G)``, computed in chunks.
    Returns None when the op's gradients do not map onto A, B, M (the caller falls
    back to the full reference)."""
    from .kernels.freivalds import Desc, freivalds, spots

    spec, placed, B = case.spec, ctx.placed, case.batch
    dt = DTYPES[case.dtype]
    grad_ops = [i for i, p in enumerate(placed) if p.operand.grad and p.dtype.is_floating_point]
    if len(grad_ops) != len(outs):
        return None
    Am, Bmm, Mm, alpha, beta = _matmul_operands(case, ctx, 0, B, B, meta=True)
    roles = {_operand_of(Am): "A", _operand_of(Bmm): "B"}
    if Mm is not None:
        roles[_operand_of(Mm)] = "M"
    if sorted(roles) != sorted(grad_ops):
        return None
    dA, dB = _desc(ctx, Am), _desc(ctx, Bmm)
    H = max(Am.shape[1], Bmm.shape[1])
    Mdim, K, N = Am.shape[-2], Am.shape[-1], Bmm.shape[-1]
    dG = Desc(gen.stream_key(case.seed, f"{case.op}/grad0"), 0, (H * Mdim * N, Mdim * N, N, 1))
    # The got gradients seen through the same decomposition (transposes included).
    views = []
    for i, p in enumerate(placed):
        if i in grad_ops:
            g = outs[grad_ops.index(i)]
            views.append(g if p.batched else g.as_strided(p.shape, p.strides, p.offset))
        else:
            views.append(torch.empty(0, device="meta", dtype=p.dtype).as_strided(p.shape, p.strides, p.offset))
    got_roles = dict(zip("ABM", spec.bilinear(*views)[:3]))
    judgements = []
    for j, i in enumerate(grad_ops):
        name, role, p = f"grad{j}", roles[i], placed[i]
        Cg = _canonical(got_roles[role].detach(), B, p.operand.rows_per_batch if p.batched else None)
        if role == "M" and (Cg.shape[-2] != Mdim or (Cg.shape[0] == 1 and B > 1)):
            judgements.append(_judge_bias_grad(case, ctx, name, Cg, dG, beta, (B, H, Mdim, N), tol))
            continue
        if role == "A":
            dX, dY, dM, inner, al, be, shape = dG, _transposed(dB), None, N, alpha, 0.0, (B, H, Mdim, K)
        elif role == "B":
            dX, dY, dM, inner, al, be, shape = _transposed(dA), dG, None, Mdim, alpha, 0.0, (B, H, K, N)
        else:  # a full-size M: dM = beta G, batch by batch
            dX, dY, dM, inner, al, be, shape = dA, dB, dG, 0, 0.0, beta, (B, H, Mdim, N)
        C = Cg.expand(shape)
        x = _projection_vector(case.seed, "x", shape[3], ctx.device)
        y = _projection_vector(case.seed, "y", shape[2], ctx.device)
        res = freivalds(C, x, y, dX, dY, dM, inner, al, be, dt)
        if p.batched:
            jf = Judgement(name, "freivalds", tol(name, "freivalds"), C[0].numel())
            js = Judgement(name, "spot", tol(name, "spot"), C[0].numel())

            def spot_values(bb, hh, ii, jj, C=C, dX=dX, dY=dY, dM=dM, inner=inner, al=al, be=be):
                return spots(C, dX, dY, dM, inner, al, be, dt, bb, hh, ii, jj)
            _judge_projection(case, C, 0, res[..., 0], res[..., 1], res[..., 2], spot_values, jf, js)
            judgements += [jf, js]
            continue
        # One matrix shared by every batch (and by every head where it broadcasts):
        # its projection against the sum of the batches' contributions.
        over_h = Cg.shape[1] == 1 or Cg.stride(1) == 0
        lhs = res[0, 0, 0] if over_h else res[0, :, 0]
        rhs = res[..., 1].sum((0, 1)) if over_h else res[..., 1].sum(0)
        bound = res[..., 2].sum((0, 1)) if over_h else res[..., 2].sum(0)
        metric = (lhs - rhs).abs() / bound.clamp_min(_TINY)
        metric = torch.where(torch.isnan(lhs), torch.full_like(metric, math.inf), metric)
        jf = Judgement(name, "freivalds", tol(name, "freivalds"), outs[j].numel())
        jf.add(0, metric.reshape(1, -1).amax(1))
        if jf.bad_count:  # rare: only now pay for the full reference, to point at the element
            jf.first_bad_index = _first_bad_in_shared_grad(case, ctx, outs, j, jf.tol)
        judgements.append(jf)
    return judgements


def _first_bad_in_shared_grad(case, ctx, outs, j: int, tol: float) -> int:
    """Flat index (in its storage) of the first element of shared gradient ``j`` that is
    off its float64 reference by more than ``tol * max|ref|``: the reference summed over
    every batch in chunks, as the full check does."""
    step = chunk_batches(case, ctx.placed, outs, ctx.chunk)
    ref = None
    for b0 in range(0, case.batch, step):
        part = _reference_chunk(case, ctx, b0, min(case.batch, b0 + step), outs)[0][j].detach()
        ref = part if ref is None else ref + part
    got = outs[j].detach().reshape(-1).to(torch.float64)
    ref = ref.reshape(-1).to(torch.float64)
    e = (got - ref).abs()
    e = torch.where(torch.isnan(got), torch.full_like(e, math.inf), e)
    over = torch.nonzero(e > tol * ref.abs().amax().clamp_min(_TINY)).flatten()
    return int(over[0]) if over.numel() else int(e.argmax())


def _judge_bias_grad(case, ctx, name, got, dG, beta, out_shape, tol) -> Judgement:
    """``got`` (canonical, broadcast over some of (batch, head, row)) against
    ``beta * sum(G)`` over those dims, summed in float64 over chunks of batches, with
    the ``cond`` metric ``|got - ref| / (|beta| sum |G|)``. G is regenerated in its own
    dtype and summed with float64 accumulation, not copied to float64 first (a
    2^32-element G was five full float64 passes per case)."""
    B, H, Mdim, N = out_shape
    dims = tuple(d for d in range(3) if got.shape[d] == 1 and out_shape[d] > 1)
    step = max(1, ctx.chunk // (H * Mdim * N))
    ref = scale = None
    f64 = torch.float64
    for b0 in range(0, B, step):
        b1 = min(B, b0 + step)
        g = gen.values_strided((b1 - b0, H, Mdim, N), dG.strides, dG.offset + b0 * dG.strides[0], dG.key,
                               DTYPES[case.dtype], ctx.device)
        r = g.sum(dims, keepdim=True, dtype=f64) if dims else g.to(f64)
        a = g.abs().sum(dims, keepdim=True, dtype=f64) if dims else g.abs().to(f64)
        if ref is None:
            ref, scale = r, a
        elif 0 in dims:  # summed over batches: accumulate
            ref, scale = ref + r, scale + a
        else:            # one slice per batch: append
            ref, scale = torch.cat([ref, r]), torch.cat([scale, a])
    ref, scale = beta * ref, abs(beta) * scale
    j = Judgement(name, "cond", tol(name, "cond"), got.numel())
    compare_rows(j, 0, got.reshape(1, -1), ref.reshape(1, -1), False, scale.reshape(1, -1))
    return j


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


# -- judging a whole case ----------------------------------------------------------
@dataclass
class Outcome:
    """The result of executing a case: verdict plus the worst metric per output."""

    verdict: Verdict
    worst: dict[str, float] = field(default_factory=dict)
    elapsed_s: float = 0.0


OOM_RETRIES = 1
"""Times a case whose op ran out of memory is run again after the allocator's cache is
returned to the driver (see ``execute``)."""


def execute(case: Case, device="cpu", *, fault_model: str = "none",
            tolerances: dict[str, float] | None = None, ref_device=None,
            mode: str = "auto", ref_chunk: int | None = None) -> Outcome:
    """Run ``case`` on ``device`` and judge it. ``tolerances=None`` calibrates (no verdict
    on correctness: returns the worst metrics). ``mode``: ``auto`` (Freivalds and spot
    checks for matmul forward outputs, full chunked references elsewhere) or ``full``.

    If the op runs out of memory, the case runs again (``OOM_RETRIES`` times) after the
    caching allocator's blocks are returned to the driver. The memory plan counts cached
    blocks as free, and they are, but not always in one piece: on the H200 a float32
    backward at 2*2^32 elements failed to find 32 GiB with 44 GiB cached and 15 GiB free.
    A case still out of memory after that is skipped, as before; one that then runs says
    so in its verdict's details (``oom_retry``)."""
    device = torch.device(device)
    out = _execute_once(case, device, fault_model, tolerances, ref_device, mode, ref_chunk)
    first = out
    for _ in range(OOM_RETRIES):
        if not out.verdict.details.get("out_of_memory"):
            break
        release_cached_memory(device)
        out = _execute_once(case, device, fault_model, tolerances, ref_device, mode, ref_chunk)
        out.elapsed_s += first.elapsed_s
    if out is not first:
        out.verdict.details["oom_retry"] = first.verdict.message
    return out


def release_cached_memory(device: torch.device) -> None:
    """Drop unreachable tensors and return the allocator's cached blocks to the driver."""
    import gc

    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _execute_once(case: Case, device: torch.device, fault_model: str, tolerances, ref_device,
                  mode: str, ref_chunk: int | None) -> Outcome:
    t0 = time.perf_counter()
    ref_device = torch.device(ref_device) if ref_device is not None else device
    timing: dict[str, float] = {}
    aux = {"project": project_at_generation(case, device, ref_device, mode)}
    try:
        placed, outs, out_rows, fm = run_op(case, device, fault_model, timing, aux)
        _sync(device)
        t_op = time.perf_counter()
        timing["op_s"] = t_op - t0 - timing.get("inputs_s", 0.0)
    except torch.OutOfMemoryError as e:  # the plan was too optimistic: not the op's fault
        return Outcome(Verdict.skipped(f"out of memory despite the memory plan: {str(e).splitlines()[0]}",
                                       out_of_memory=True), {}, time.perf_counter() - t0)
    except Exception as e:  # the op raised: that is the 'error' class
        msg = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
        return Outcome(Verdict.error(msg, traceback=traceback.format_exc(limit=3)), {}, time.perf_counter() - t0)
    try:
        judgements = _judge(case, placed, outs, out_rows, ref_device, tolerances, mode, ref_chunk,
                            aux.get("projections"))
    except MissingTolerance as e:
        return Outcome(Verdict.error(str(e), checker_bug=True), {}, time.perf_counter() - t0)
    _sync(device)
    timing["judge_s"] = time.perf_counter() - t_op
    worst = {f"{j.name}:{j.metric}": j.worst for j in judgements}
    verdicts = [j.verdict() for j in judgements]
    if tolerances is None:
        v = Verdict(Status.OK, message="calibration", details={"timing": {k: round(t, 5) for k, t in timing.items()}})
    else:
        wrong = [v for v in verdicts if v.status is Status.WRONG]
        v = wrong[0] if wrong else max(verdicts, key=lambda v: (v.value or 0) / (v.tolerance or 1), default=Verdict(Status.OK))
        v = Verdict(v.status, v.metric, v.value, v.tolerance, v.bad_batches, v.first_bad_index,
                    _describe(case, placed, outs), {"outputs": [x.to_json() for x in verdicts],
                                                    "fault_calls_changed": dict(fm.stats.changed),
                                                    "timing": {k: round(t, 5) for k, t in timing.items()}})
    return Outcome(v, worst, time.perf_counter() - t0)


def _describe(case, placed, outs) -> str:
    ins = ", ".join(f"{tuple(p.shape)}:{tuple(p.strides)}+{p.offset}" for p in placed)
    o = ", ".join(str(tuple(x.shape)) for x in outs)
    return f"{case.op} {case.dtype} inputs [{ins}] -> [{o}]"


def _judge(case, placed, outs, out_rows, ref_device, tolerances, mode, ref_chunk=None,
           projections=None) -> list[Judgement]:
    spec = case.spec
    exact_spec = spec.exact if case.direction == "fwd" or spec.exact_bwd is None else spec.exact_bwd
    ctx = RefContext(case, placed, ref_device, ref_chunk, exact=exact_spec)
    g = spec.extra.get("global")
    if g:
        from .global_refs import judge_global
        return judge_global(g, case, ctx, outs, tolerances)
    B = case.batch
    names = [f"out{j}" if case.direction == "fwd" else f"grad{j}" for j in range(len(outs))]

    def tol(name, metric):
        return tolerance_for(tolerances, name, metric)

    if (spec.bilinear is not None and case.direction == "bwd" and mode == "auto"
            and _fused_freivalds_enabled(ctx.device)):
        js = judge_matmul_grads(case, ctx, outs, tol)
        if js is not None:
            return js
    exact = exact_spec or not DTYPES[case.dtype].is_floating_point
    rel = "exact" if exact else "rel"
    use_freivalds = spec.bilinear is not None and case.direction == "fwd" and mode == "auto"
    judgements: list[Judgement] = []
    batched = [j for j in range(len(outs)) if out_rows[j] is not None]
    shared = [j for j in range(len(outs)) if out_rows[j] is None]
    if use_freivalds:
        jf = Judgement("out0", "freivalds", tol("out0", "freivalds"), outs[0].numel() // B)
        js = Judgement("out0", "spot", tol("out0", "spot"), outs[0].numel() // B)
        judgements += [jf, js]
    else:
        js_rows = {j: Judgement(names[j], rel, tol(names[j], rel), outs[j].numel() // B) for j in batched}
        # A shared output (a weight's gradient) sums over every batch: its error grows
        # with the batch count, so it is measured against sum |a||g| ("cond"), which
        # grows with it, and the tolerance calibrated at a small size still applies.
        shared_metric = rel if exact else "cond"
        js_shared = {j: Judgement(names[j], shared_metric, tol(names[j], shared_metric), outs[j].numel())
                     for j in shared}
        judgements += list(js_rows.values()) + list(js_shared.values())
        shared_acc = {j: None for j in shared}
        shared_scale = {j: None for j in shared}
    step = chunk_batches(case, placed, outs, ctx.chunk)
    if use_freivalds and _fused_freivalds_enabled(ctx.device):
        step = B  # the fused check reads C in place and holds no chunk: one launch for all batches
    for b0 in range(0, B, step):
        b1 = min(B, b0 + step)
        if use_freivalds:
            R = out_rows[0]
            got = outs[0][b0 * R:b1 * R].to(ref_device)
            judge_matmul_chunk(case, ctx, b0, b1, got, jf, js, R,
                               projections if (b0, b1) == (0, B) else None)
            continue
        ref, scales = _reference_chunk(case, ctx, b0, b1, outs)
        for j in batched:
            R = out_rows[j]
            got = outs[j][b0 * R:b1 * R].detach().to(ref_device)
            compare_rows(js_rows[j], b0, got, ref[j].detach(), exact, scales[j] if scales else None)
        for j in shared:
            shared_acc[j] = ref[j].detach() if shared_acc[j] is None else shared_acc[j] + ref[j].detach()
            if scales and scales[j] is not None:
                shared_scale[j] = scales[j] if shared_scale[j] is None else shared_scale[j] + scales[j]
    if not use_freivalds:
        for j in shared:
            got = outs[j].detach().to(ref_device).reshape(1, -1)
            sc = shared_scale[j].reshape(1, -1) if shared_scale[j] is not None and not exact else None
            compare_rows(js_shared[j], 0, got, shared_acc[j].reshape(1, -1), exact, sc)
    return judgements


def _reference_chunk(case: Case, ctx: RefContext, b0: int, b1: int, outs) -> list[torch.Tensor]:
    """Reference outputs (fwd) or input gradients (bwd) for batches [b0, b1)."""
    spec = case.spec
    if spec.reference is not None:
        return list(spec.reference(ctx, b0, b1)), None
    bwd = case.direction == "bwd"
    views, leaves = [], []
    for i in range(len(ctx.placed)):
        v, leaf = ctx.operand(i, b0, b1, leaf=bwd and ctx.placed[i].operand.grad)
        views.append(v)
        leaves.append(leaf)
    if not bwd:
        with torch.no_grad():
            scales = list(spec.ref_scale(*views)) if spec.ref_scale else None
            return list(_as_tuple(spec.call(*views))), scales
    with torch.enable_grad():
        res = _as_tuple(spec.call(*views))[: spec.bwd_outputs]
        grads_in = []
        for j, r in enumerate(res):
            R = r.numel() // (b1 - b0)
            gv = gen.fill_flat(r.numel(), gen.stream_key(case.seed, f"{case.op}/grad{j}"), DTYPES[case.dtype],
                               ctx.device, start=b0 * R, out_dtype=r.dtype)
            grads_in.append(gv.view(r.shape))
        used = [leaf for leaf in leaves if leaf is not None]
        gs = torch.autograd.grad(res, used, grads_in, allow_unused=True)
        scales = _shared_grad_scales(spec, ctx, views, leaves, grads_in)
    out = []
    for leaf, gr in zip(used, gs):
        out.append(gr if gr is not None else torch.zeros_like(leaf))
    # Shared leaves return whole-storage gradients; batched leaves their rows.
    return out, scales


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
        res = _as_tuple(spec.call(*abs_views))[: spec.bwd_outputs]
        used = [a for a in abs_leaves if a is not None]
        gs = torch.autograd.grad(res, used, [g.abs() for g in grads_in], allow_unused=True)
    flags = [f for f, leaf in zip(shared, leaves) if leaf is not None]
    return [g.detach() if (f and g is not None) else None for f, g in zip(flags, gs)]
