"""Run one case on a device and judge it against a reference that never crosses.

:func:`execute` builds the inputs of a :class:`~kernelaudit.sweep.cases.Case` on the device
under test (from the case alone), runs the op (forward, or forward and backward)
under the active fault model, and judges every output against a reference computed
in float64, chunk by chunk, from regenerated inputs: no chunk of the reference, and
no comparison, holds more than :data:`REF_CHUNK_ELEMENTS` elements.

Metrics (each calibrated below the thresholds, see :mod:`kernelaudit.sweep.tolerance`):

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

import math
import time
import traceback
from dataclasses import dataclass, field

import torch

from ...faults import make_fault_model
from ...verdict import Status, Verdict
from .. import gen, phase
from ..cases import Case
from ..ops.spec import DTYPES
from ..tolerance import MissingTolerance, tf32_floor, tolerance_for, with_floor
from .matmul import (_fused_freivalds_enabled, inputs_with_projections, judge_matmul_chunk, judge_matmul_grads,
                     project_at_generation)
from .metrics import Judgement, compare_rows
from .operands import _as_tuple, _sync, device_inputs, materialized, placed_operands
from .reference import RefContext, _reference_chunk, chunk_batches
from .sampling import sampled_chunks


def run_op(case: Case, device, fault_model: str, timing: dict | None = None, aux: dict | None = None):
    """Run the case on ``device``; returns (placed, outputs-to-judge, output rows-per-batch).

    ``timing`` (a dict) receives ``inputs_s``: seconds spent generating the inputs.
    With ``aux`` (a dict) holding ``project=True``, a bilinear forward's inputs are
    generated with their projections, left in ``aux["projections"]``."""
    spec = case.spec
    placed = placed_operands(case)
    bwd = case.direction == "bwd"
    t0 = time.perf_counter()
    phase.enter("inputs")
    if aux is not None and aux.get("project"):
        bases, views, aux["projections"] = inputs_with_projections(case, placed, device)
    else:
        bases, views = device_inputs(placed, device, grad=bwd)
    if timing is not None:
        _sync(device)
        timing["inputs_s"] = time.perf_counter() - t0
    phase.enter("op")
    fm = make_fault_model(fault_model, case.thresholds)
    if spec.call is None:  # a factory op: no inputs, a length
        n = case.batch * spec.out_rows(case.series, case.thresholds)[0]
        if "metamorphic" in spec.extra:  # makes its own inputs (fault model off), judged by a relation
            with fm, torch.no_grad():
                ins, outs = spec.extra["metamorphic"].run(n, DTYPES[case.dtype], device)
            if aux is not None:
                aux["meta_inputs"] = ins
            return placed, tuple(outs), spec.out_rows(case.series, case.thresholds), fm
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
        grad = materialized(base.grad)
        if p.batched:
            got.append(grad.as_strided(p.shape, p.strides, p.offset))
            rows.append(p.operand.rows_per_batch)
        else:
            got.append(grad)
            rows.append(None)
    return placed, tuple(got), tuple(rows), fm


@dataclass
class Outcome:
    """The result of executing a case: verdict plus the worst metric per output."""

    verdict: Verdict
    worst: dict[str, float] = field(default_factory=dict)
    elapsed_s: float = 0.0


#: What torch's CPU allocator says when an allocation fails (a RuntimeError, not an
#: OutOfMemoryError).
CPU_ALLOC_FAILED = "DefaultCPUAllocator: can't allocate memory"

#: What CUDA says when memory a library allocates itself, outside torch's caching
#: allocator, is not there (an ``AcceleratorError``, not an ``OutOfMemoryError``): on the
#: H100 (80 GiB) ``linalg.lu_factor`` at 2^32 float32 elements, whose solver workspace the
#: memory plan does not count. Skipped for memory like the allocator's own failure, so a
#: run resumed on a larger device judges it.
DEVICE_ALLOC_FAILED = "CUDA error: out of memory"

OOM_RETRIES = 1
"""Times a case whose op ran out of memory is run again after the allocator's cache is
returned to the driver (see ``execute``)."""


def execute(case: Case, device="cpu", *, fault_model: str = "none",
            tolerances: dict[str, float] | None = None, ref_device=None,
            mode: str = "auto", ref_chunk: int | None = None) -> Outcome:
    """Run ``case`` on ``device`` and judge it. ``tolerances=None`` calibrates (no verdict
    on correctness: returns the worst metrics). ``mode``: ``auto`` (Freivalds and spot
    checks for matmul forward outputs, full chunked references elsewhere), ``full``, or
    ``sampled`` (``auto`` on the chunks :func:`.sampling.sampled_chunks` picks, where every
    output is batched; the verdict's first output says ``sampled_chunks``: n of m).

    A float32 convolution on CUDA is judged no tighter than TF32's precision where cuDNN
    may use it (:func:`~kernelaudit.sweep.tolerance.tf32_floor`; ``tf32_floor`` in the
    verdict's details).

    If the op runs out of memory, the case runs again (``OOM_RETRIES`` times) after the
    caching allocator's blocks are returned to the driver. The memory plan counts cached
    blocks as free, and they are, but not always in one piece: on the H200 a float32
    backward at 2*2^32 elements failed to find 32 GiB with 44 GiB cached and 15 GiB free.
    A case still out of memory after that is skipped, as before; one that then runs says
    so in its verdict's details (``oom_retry``).

    On CUDA the verdict's details hold ``peak_bytes``, the caching allocator's peak over
    the case (op, reference and judge): what the memory plan's estimate can be checked
    against."""
    device = torch.device(device)
    _reset_peak(device)
    floor = None
    if tolerances:
        floor = tf32_floor(case.op, case.spec.family, case.dtype, device.type, torch.backends.cudnn.allow_tf32)
        if floor is not None:
            tolerances = with_floor(tolerances, floor)
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
    if floor is not None:
        out.verdict.details["tf32_floor"] = floor
    peak = _peak_bytes(device)
    if peak is not None:
        out.verdict.details["peak_bytes"] = peak
    return out


def _reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def _peak_bytes(device: torch.device) -> int | None:
    """The caching allocator's peak allocated bytes since :func:`_reset_peak` (CUDA; None
    elsewhere)."""
    return int(torch.cuda.max_memory_allocated(device)) if device.type == "cuda" else None


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
        if isinstance(e, RuntimeError) and CPU_ALLOC_FAILED in str(e):
            # the CPU allocator says it with a RuntimeError (linalg.pinv's backward asked
            # for 176 GB at 2^20 elements: it grows with the batch squared): skipped
            return Outcome(Verdict.skipped(f"out of memory: {str(e).strip().splitlines()[0][-160:]}",
                                           out_of_memory=True), {}, time.perf_counter() - t0)
        if DEVICE_ALLOC_FAILED in str(e):
            # a library's own cudaMalloc: skipped, and the worker probes its device as after
            # an error (device_error), since CUDA said it and not torch's allocator
            return Outcome(Verdict.skipped(f"out of memory outside the caching allocator: "
                                           f"{type(e).__name__}: {str(e).strip().splitlines()[0][-160:]}",
                                           out_of_memory=True, device_error=True), {}, time.perf_counter() - t0)
        msg = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
        return Outcome(Verdict.error(msg, traceback=traceback.format_exc(limit=3)), {}, time.perf_counter() - t0)
    phase.enter("judge")
    try:
        if "metamorphic" in case.spec.extra:
            from .metamorphic import judge_case
            judgements = judge_case(case, aux.get("meta_inputs", ()), outs, tolerances)
        else:
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
        # each wrong output on its own: the op's precision on its bad batches (ok, saying
        # so), or a finding
        judged = []
        for x in verdicts:
            why = None
            if x.status is Status.WRONG:
                tail = _precision_tail(x, x.details.get("judged_batches", case.batch))
                why = {"precision_tail": tail} if tail else None
                if why is None:
                    phase.enter("recheck")
                    alone = _same_alone(case, placed, outs, out_rows, x, ref_device)
                    why = {"same_alone": alone} if alone else None
            judged.append(x if why is None else
                          Verdict(Status.OK, x.metric, x.value, x.tolerance, x.bad_batches, x.first_bad_index,
                                  x.message, {**x.details, **why}))
        verdicts = judged
        wrong = [v for v in verdicts if v.status is Status.WRONG]
        v = wrong[0] if wrong else max(verdicts, key=lambda v: (v.value or 0) / (v.tolerance or 1), default=Verdict(Status.OK))
        v = Verdict(v.status, v.metric, v.value, v.tolerance, v.bad_batches, v.first_bad_index,
                    _describe(case, placed, outs), {"outputs": [x.to_json() for x in verdicts],
                                                    "fault_calls_changed": dict(fm.stats.changed),
                                                    "timing": {k: round(t, 5) for k, t in timing.items()}})
    return Outcome(v, worst, time.perf_counter() - t0)


def _same_alone(case: Case, placed, outs, out_rows, wrong: Verdict, device) -> str | None:
    """Whether a wrong output is the op's own precision rather than its size: its first
    and its last bad batch, each computed alone (:func:`_matches_alone`), give the same
    outputs as the big call, or err at least :data:`ALONE_ERROR_SHARE` as much against
    the reference (:func:`_errors_alone`). Then the big call is right for that input as far as size
    goes, and only the reference disagrees (an ill-conditioned 5x5 solve, a float16
    gradient at a pole, a sum's rare worst rounding among millions of batches). Returns
    what was found, or None (a fault that grows with size changes those bits and errs far
    more: wrap32, an unwritten tail, a grid limit).
    Batched outputs of batch-local ops only: a shared gradient sums every batch."""
    spec = case.spec
    if (spec.reference is not None or spec.bilinear is not None or "metamorphic" in spec.extra
            or "global" in spec.extra or wrong.bad_batches is None):
        return None
    name = (wrong.metric or "").split(":")[0]
    j = int(name[3:]) if name.startswith("out") else int(name[4:]) if name.startswith("grad") else -1
    if not 0 <= j < len(outs) or out_rows[j] is None:
        return None
    try:
        ctx = RefContext(case, placed, device, exact=True)  # the case's own dtype
    except Exception:  # noqa: BLE001 - no answer either way: the verdict stands
        return None
    shape = (out_rows[j],) + tuple(outs[j].shape[1:])
    notes = []
    # the first and the last bad batch: a size fault past a limit holds the last, whatever
    # precision outlier comes first
    for b in dict.fromkeys((int(wrong.bad_batches.first), int(wrong.bad_batches.last))):
        if _matches_alone(case, ctx, b, b + 1, outs, out_rows, [j], device):
            notes.append(f"batch {b} computed alone ({shape}) gives the same bits")
            continue
        errs = _errors_alone(case, placed, outs, out_rows, j, b, device)
        if errs is None or errs[1] < ALONE_ERROR_SHARE * errs[0]:
            return None
        notes.append(f"batch {b} computed alone ({shape}) errs as much against the reference ({errs[1]:.3g}; "
                     f"the big call {errs[0]:.3g})")
    return (f"{'; '.join(notes)}: {wrong.metric}={wrong.value:.3g} over tolerance {wrong.tolerance:.3g} is the "
            "op's precision there, not its size")


def _precision_tail(wrong: Verdict, batches: int) -> str | None:
    """Whether a wrong output is the far tail of the op's precision: its worst error is
    under :data:`PRECISION_TAIL_RATIO` times the tolerance, on at most
    :data:`PRECISION_TAIL_SHARE` of the batches. A tolerance calibrated on thousands of
    batches meets, among millions, a few batches conditioned worse (the full grid's
    float32 ``std`` backward: 1.9x the tolerance on 47 of 3.1 million batches, below the
    limits; the call alone rounds otherwise, its kernel picked by size). A size fault
    errs by orders of magnitude (every finding of the grid confirmed in plain torch:
    271x the tolerance and more) or on a share of the batches. Returns what was found,
    or None."""
    bb = wrong.bad_batches
    if (bb is None or not wrong.tolerance or not isinstance(wrong.value, (int, float))
            or not math.isfinite(wrong.value) or batches <= 0):
        return None
    ratio, share = wrong.value / wrong.tolerance, bb.count / batches
    if ratio >= PRECISION_TAIL_RATIO or share > PRECISION_TAIL_SHARE:
        return None
    return (f"{wrong.metric}={wrong.value:.3g} is {ratio:.2g}x its tolerance on {bb.count} of {batches} batches: "
            "the tail of the op's precision, not its size")


#: A wrong output within this many tolerances, on at most PRECISION_TAIL_SHARE of the
#: batches, is the tail of the op's precision (:func:`_precision_tail`).
PRECISION_TAIL_RATIO = 4.0
PRECISION_TAIL_SHARE = 1e-4


#: A wrong batch whose bits differ from the op's on that batch alone is still the op's
#: precision if the call alone errs at least this share as much against the reference:
#: a kernel picked by the call's size (softmax's backward past 2^32 elements, a split
#: reduction) rounds otherwise, and among billions of batches meets one ill-conditioned
#: enough to pass a tolerance calibrated on thousands. A size fault (a wrapped index, an
#: unwritten tail) errs far more than the call alone: 1.0 against 1e-3 and less.
ALONE_ERROR_SHARE = 0.25


def _errors_alone(case: Case, placed, outs, out_rows, j: int, b: int, device) -> tuple[float, float] | None:
    """Batch ``b``'s metric of output ``j`` against the reference, for the big call and
    for the op called on that batch alone (its rows regenerated, the case's dtype); None
    where the output's metric is exact (any difference is a finding) or either could not
    be computed."""
    spec = case.spec
    exact = spec.exact if case.direction == "fwd" or spec.exact_bwd is None else spec.exact_bwd
    if exact or not DTYPES[case.dtype].is_floating_point:
        return None
    try:
        ref, scales = _reference_chunk(case, RefContext(case, placed, device), b, b + 1, outs)
        small, _ = _reference_chunk(case, RefContext(case, placed, device, exact=True), b, b + 1, outs, scales=False)
        R = out_rows[j]
        out = []
        for x in (outs[j][b * R:(b + 1) * R].detach().to(device), small[j].detach()):
            jj = Judgement(f"out{j}", "rel", None, x.numel())
            compare_rows(jj, 0, x, ref[j].detach(), False, scales[j] if scales else None)
            out.append(float(jj.worst))
    except Exception:  # noqa: BLE001 - no answer either way: the verdict stands
        return None
    return out[0], out[1]


def _bit_equal_chunk(case, same: dict, b0: int, b1: int, outs, out_rows, batched, js_rows, device) -> bool:
    """Whether batches [b0, b1) of every batched output match the op called on those
    batches alone (:func:`_matches_alone`; one chunk, far below every limit). Then the big
    call is right for them as far as size goes, and the chunk is recorded as error 0
    without computing its float64 reference: a case whose chunks all match costs a pass
    in its own dtype instead of a reference pass in float64. A chunk that differs anywhere
    is judged against the reference as before; if the first chunk differs, the op's bits
    depend on the call's size (a reduction's split chosen by the row count, another
    kernel) and the pre-check is dropped for the case. A size fault (a wrapped index, an
    unwritten tail, a grid limit) changes outputs past the limit, so the chunks holding
    them go to the reference."""
    same["chunks"] += 1
    if not _matches_alone(case, same["ctx"], b0, b1, outs, out_rows, batched, device):
        return False
    for j in batched:
        js_rows[j].add_exact(b0)
    same["equal"] += 1
    return True


def _matches_alone(case, ctx: RefContext, b0: int, b1: int, outs, out_rows, js, device) -> bool:
    """Whether batches [b0, b1) of outputs ``js`` equal, element for element, the op
    called on those batches alone (their rows regenerated in the case's dtype, ``ctx``
    exact, far below every limit); NaN meets NaN (a NaN's payload or sign may follow the
    kernel's code path, not the call's size). Equal bits are the fast path; any failure to
    compute the small call answers False (no claim either way: the caller's verdict or
    the reference stands)."""
    try:
        small, _ = _reference_chunk(case, ctx, b0, b1, outs, scales=False)
    except Exception:  # noqa: BLE001 - no answer: the verdict or the reference stands
        return False
    for j in js:
        R = out_rows[j]
        got = outs[j][b0 * R:b1 * R].detach().to(device)
        alone = small[j].detach()
        if got.shape != alone.shape or got.dtype != alone.dtype:
            return False
        if _same_bits(got, alone):
            continue
        if not bool(((got == alone) | (torch.isnan(got) & torch.isnan(alone))).all()):
            return False
    return True


#: Integer views of a float dtype by size, for a bit comparison.
_BITS = {2: torch.int16, 4: torch.int32, 8: torch.int64}


def _same_bits(got: torch.Tensor, ref: torch.Tensor) -> bool:
    """Whether ``got`` and ``ref`` hold the same bits (same shape and dtype; floats compared
    as integers, so -0 differs from +0 and a NaN only meets its own bits): one pass, and
    where it holds every per-batch metric is 0."""
    if got.shape != ref.shape or got.dtype != ref.dtype:
        return False
    if got.dtype.is_floating_point:
        if got.dtype.itemsize not in _BITS:
            return False
        bits = _BITS[got.dtype.itemsize]
        return torch.equal(got.contiguous().view(bits), ref.contiguous().view(bits))
    return torch.equal(got, ref)


def _term_overflow_expected(got: torch.Tensor, ref: torch.Tensor, scale: torch.Tensor, j) -> torch.Tensor:
    """A shared sum (a broadcast operand's gradient) that is infinite or NaN in the op's
    16-bit dtype where its terms' magnitudes (``scale``, sum |a||g|) pass that dtype's
    range: a term may overflow in the op's own arithmetic (float16 ``__rdiv__``'s
    ``g / x`` near x = 0) though the float32 reference's sum is finite. That is the
    dtype's range at any size, not a size fault; the elements are judged equal to the
    reference and counted in the judgement's details."""
    if not got.dtype.is_floating_point or got.dtype.itemsize > 2:
        return got
    hit = ~torch.isfinite(got) & (scale.to(got.device) > torch.finfo(got.dtype).max)
    n = int(hit.sum())
    if not n:
        return got
    j.details["term_overflow_expected"] = n
    return torch.where(hit, ref.to(got.device, torch.float64), got.to(torch.float64))


def _describe(case, placed, outs) -> str:
    ins = ", ".join(f"{tuple(p.shape)}:{tuple(p.strides)}+{p.offset}" for p in placed)
    o = ", ".join(str(tuple(x.shape)) for x in outs)
    return f"{case.op} {case.dtype} inputs [{ins}] -> [{o}]"


def _judge(case, placed, outs, out_rows, ref_device, tolerances, mode, ref_chunk=None,
           projections=None) -> list[Judgement]:
    spec = case.spec
    exact_spec = spec.exact if case.direction == "fwd" or spec.exact_bwd is None else spec.exact_bwd
    g = spec.extra.get("global")
    ctx = RefContext(case, placed, ref_device, ref_chunk, exact=exact_spec,
                     float64=spec.bilinear is not None or bool(g))
    if g:
        from .global_refs import judge_global
        return judge_global(g, case, ctx, outs, tolerances)
    B = case.batch
    names = [f"out{j}" if case.direction == "fwd" else f"grad{j}" for j in range(len(outs))]

    def tol(name, metric):
        return tolerance_for(tolerances, name, metric)

    auto = mode in ("auto", "sampled")  # sampled: auto's judges on fewer chunks
    if (spec.bilinear is not None and case.direction == "bwd" and auto
            and _fused_freivalds_enabled(ctx.device)):
        js = judge_matmul_grads(case, ctx, outs, tol)
        if js is not None:
            return js
    exact = exact_spec or not DTYPES[case.dtype].is_floating_point
    rel = "exact" if exact else "rel"
    use_freivalds = spec.bilinear is not None and case.direction == "fwd" and auto
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
    same = None  # the bit-equality pre-check (see _bit_equal_chunk), where it applies
    if (auto and tolerances is not None and not use_freivalds and not shared and not exact
            and spec.reference is None and DTYPES[case.dtype].is_floating_point):
        same = {"ctx": RefContext(case, placed, ref_device, ref_chunk, exact=True), "chunks": 0, "equal": 0}
    starts = range(0, B, step)
    if mode == "sampled" and not shared and tolerances is not None and len(starts) > 1:
        # every output batched: a batch left out changes no other batch's verdict
        starts = sampled_chunks(case, placed, outs, out_rows, step)
        if judgements:
            judgements[0].details["sampled_chunks"] = f"{len(starts)} of {-(-B // step)}"
            for j in judgements:
                j.details["judged_batches"] = sum(min(B, b0 + step) - b0 for b0 in starts)
    for b0 in starts:
        b1 = min(B, b0 + step)
        phase.advance(b0, B)
        if same is not None:
            if _bit_equal_chunk(case, same, b0, b1, outs, out_rows, batched, js_rows, ref_device):
                continue
            if same["chunks"] == 1:  # the op's bits depend on the call's size: references only
                same = None
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
            if exact and _same_bits(got, ref[j].detach()):
                # an exact op's reference is in the output's dtype: equal bits are a metric
                # of 0 in every batch, found in one pass instead of the per-batch metric's
                js_rows[j].add_exact(b0)
                continue
            compare_rows(js_rows[j], b0, got, ref[j].detach(), exact, scales[j] if scales else None)
        for j in shared:
            shared_acc[j] = ref[j].detach() if shared_acc[j] is None else shared_acc[j] + ref[j].detach()
            if scales and scales[j] is not None:
                shared_scale[j] = scales[j] if shared_scale[j] is None else shared_scale[j] + scales[j]
    if same is not None and judgements:
        judgements[0].details["bit_equal_chunks"] = f"{same['equal']} of {same['chunks']}"
    if not use_freivalds:
        for j in shared:
            got = outs[j].detach().to(ref_device).reshape(1, -1)
            sc = None
            if shared_scale[j] is not None and not exact:
                # sum |a||g| is the terms' magnitude where the op is multilinear; where it is
                # not (pow's exponent gradient, x^y ln x, evaluated at |x|), it can fall below
                # the sum itself, and |sum t| <= sum |t| holds for any terms
                sc = torch.maximum(shared_scale[j], shared_acc[j].abs()).reshape(1, -1)
                got = _term_overflow_expected(got, shared_acc[j].reshape(1, -1), sc, js_shared[j])
            compare_rows(js_shared[j], 0, got, shared_acc[j].reshape(1, -1), exact, sc)
    return judgements
