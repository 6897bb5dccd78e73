"""The sweep: calibrate tolerances, run every case in isolation, record every verdict.

:func:`run_sweep` is what ``kernelaudit sweep`` calls. It is resumable: cases already
in the run store are never recomputed, tolerances already calibrated are reused.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

from .cases import Case, GridSpec, bracket_key, calibration_batch, grid, in_turns, warm_batch
from .memory import MEMORY_PLANS, asked_bytes
from ..faults import FAULT_MODELS
from ..errors import InvalidArgument, check_choice, check_choices, resolve_device
from ..config import OVERLAP_CALIBRATION, WARM_COMPILES, fused_enabled
from ..executors import EXECUTORS, import_ray, open_executor, parse_devices
from .worker import DEFAULT_CASE_TIMEOUT_S, WorkerConfig, WorkerPool, pool_on
from .rules_out import UNCALIBRATED, uncalibrated
from .runfile import supersedes
from .store import RunStore, environment, now
from ..thresholds import Thresholds
from .timeouts import (TimedOut, held_by, holding_cases, longest_timeouts, projected_beyond, reshaped, slow_cases,
                       unheld_under)
from .tolerance import CALIBRATION_FACTOR, calibrated
from ..verdict import Status, Verdict


#: How cases are judged (``--mode``): ``auto`` (Freivalds and spot checks for matmuls, a
#: chunk with the bits of the op called on it alone needs no reference), ``full`` (the
#: reference everywhere), ``sampled`` (auto on the chunks at the limits, the ends and a few
#: drawn at random, where every output is batched: :mod:`.judge.sampling`).
MODES = ("auto", "full", "sampled")

#: Order in which thresholds are swept.
SCHEDULE = ("2^32", "2^31", "2*2^32")


def _schedule_rank(case) -> int:
    """Elements limits in :data:`SCHEDULE` order; the other size axes' limits after them."""
    return SCHEDULE.index(case.threshold) if case.threshold in SCHEDULE else len(SCHEDULE)


@dataclass
class SweepResult:
    """Counts per status and where the store is."""

    store: RunStore
    counts: dict[str, int]
    ran: int
    resumed: int

    @property
    def failed(self) -> bool:
        return bool(self.counts.get("wrong") or self.counts.get("error"))


def device_info(device: str) -> dict:
    import torch

    d = torch.device(device)
    if d.type == "cuda":
        p = torch.cuda.get_device_properties(d)
        return {"type": "cuda", "name": p.name, "memory_bytes": int(p.total_memory)}
    if d.type == "mps":
        return {"type": "mps", "name": "Apple MPS", "memory_bytes": int(torch.mps.recommended_max_memory())}
    import platform

    from .memory import available_bytes

    return {"type": "cpu", "name": platform.processor() or platform.machine(),
            "memory_bytes": available_bytes(d)}


#: Worker processes that calibrate side by side, per device type. On a GPU, calibration
#: of a fresh sweep is mostly Triton compiling on one CPU core while small cases barely
#: use the device. On the CPU the workers would share its few cores.
CALIBRATION_WORKERS = {"cuda": 4, "mps": 1, "cpu": 1}

#: Worker processes that run cases side by side, per device type (``--workers``). One on
#: every device: on the H200 the same 454-case sub-grid took 58 s of case time with one
#: worker, 75 s with two and 71 s with three (benchmarks/results/2026-12-03-h200-workers-ab-timed-sweep):
#: processes sharing a GPU take turns on it, so their waits add up instead of filling
#: each other's gaps. More workers remain an option for devices whose cases leave it idle.
CASE_WORKERS = {"cuda": 1, "mps": 1, "cpu": 1}


def run_sweep(spec: GridSpec, out: Path, *, device: str = "auto", fault_model: str = "none",
              resume: bool = False, case_timeout_s: float = DEFAULT_CASE_TIMEOUT_S,
              memory_limit: int | None = None, mode: str = "auto", reference: str = "device",
              progress: Callable | None = None, calibration_workers: int | None = None,
              case_workers: int | None = None, devices: str | Sequence[str] | None = None,
              executor: str = "local", ray_address: str | None = None,
              rerun: Sequence[str] = (), slow_timeout_s: float | None = None,
              memory_plan: str = "strict") -> SweepResult:
    """Run the grid ``spec`` into the run store at ``out``.

    ``slow_timeout_s`` (longer than ``case_timeout_s``; None or 0: none): after the
    other cases, a slow pass runs the planned cases that timed out under a shorter
    timeout, and those their timeouts held back (:class:`TimedOut`), each op's from
    the smallest, the ops in turns, with this many seconds each (:func:`.timeouts.slow_cases`).
    The main pass keeps its short timeout, so a slow op costs it one timeout, and the
    grid still ends with every op judged, or timed out at the longer bound (a
    performance cliff, not a slow op).

    ``rerun`` (with ``resume``): statuses of :data:`RERUN_STATUSES` whose recorded cases
    are judged again (after the judge changed, say); the new verdict is the case's last.

    ``memory_plan`` (:data:`.memory.MEMORY_PLANS`): ``strict`` skips a case whose
    pessimistic estimate exceeds the memory available; ``try`` runs it where the call's
    own tensors fit (an allocation that fails is recorded as a skip for memory), and a
    resumed run tries the cases the strict plan skipped. A resumed run's new cases run
    first (:data:`SCHEDULE` order), then those it judges again (for memory, ``rerun``,
    a longer timeout), the ops in turns (:func:`.cases.in_turns`).

    ``reference``: ``device`` computes the float64 reference on the device under test,
    in chunks far below the thresholds; ``cpu`` computes it on the CPU.
    ``calibration_workers``: worker processes that calibrate tolerances side by side
    (default :data:`CALIBRATION_WORKERS` for the device type).
    ``case_workers``: worker processes that run the cases (default :data:`CASE_WORKERS`
    for the device type). With N > 1, the cases whose planned bytes fit a 1/N share of
    the device's memory run N at a time first; every other case, and any that was
    ``skipped`` or ``error`` side by side, then runs alone (only that verdict is
    recorded). With 1, every case runs in one worker, one after another.

    ``devices`` (``--devices cuda:0,cuda:1``, or ``cpu:0,cpu:1`` stand-ins) spreads the
    sweep over one worker per device, pinned to it; ``executor="ray"`` over one Ray
    actor per GPU of the cluster at ``ray_address`` (a local Ray when None; ``devices``
    then only says how many of which type). Results come back here and this process
    alone writes the store, so it is the same one append-only file either way
    (:mod:`kernelaudit.executors`); each record names the device that ran it."""
    check_choice("fault_model", fault_model, FAULT_MODELS)
    if calibration_workers is not None and calibration_workers < 1:
        raise InvalidArgument(f"Cannot have calibration_workers={calibration_workers}: it must be 1 or more")
    if case_workers is not None and case_workers < 1:
        raise InvalidArgument(f"Cannot have case_workers={case_workers} (--workers): it must be 1 or more")
    check_choice("mode", mode, MODES)
    check_choice("reference", reference, ("device", "cpu"))
    check_choice("memory_plan", memory_plan, MEMORY_PLANS)
    check_choice("executor", executor, EXECUTORS)
    if rerun:
        check_choices("rerun", rerun, RERUN_STATUSES)
    if slow_timeout_s and slow_timeout_s <= case_timeout_s:
        raise InvalidArgument(f"Cannot have slow_timeout_s={slow_timeout_s:g} (--slow-timeout) with "
                              f"case_timeout_s={case_timeout_s:g}: it must be longer, or 0 (no slow pass)")
    spread = devices is not None or executor != "local"
    if ray_address is not None and executor != "ray":
        raise InvalidArgument(f"Cannot have ray_address={ray_address!r} (--ray-address) with executor={executor!r}: "
                              "it needs --executor ray")
    if executor == "ray":
        import_ray()  # missing: refused before anything is written
    if spread and case_workers not in (None, 1):
        raise InvalidArgument(f"Cannot have case_workers={case_workers} (--workers) with --devices or --executor ray: "
                              "each device runs one case at a time; allowed is 1")
    cases = grid(spec)
    controls: list[Case] = []
    if spec.bracket:  # the below cases wait for their probes (second pass, below)
        controls = [c for c in cases if c.position == "below"]
        cases = [c for c in cases if c.position != "below"]
    device, devices = _spread_devices(device, devices, executor) if spread else (resolve_device(device), None)
    th = Thresholds(spec.scale)
    manifest = {
        **environment(),
        "device": device_info(device) if not spread else _spread_device_info(device, devices, executor),
        **({"executor": executor, "devices": list(devices or ())} if spread else {}),
        "thresholds": th.as_dict(),
        "fault_model": fault_model,
        "seeds": [spec.seed],
        "grid": {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(spec).items()},
        "tolerance_rule": f"max({CALIBRATION_FACTOR:g} x worst calibrated error, floor)",
        "tolerances": {},
        "mode": mode,
        "reference": reference,
        "started": now(),
        "argv": list(sys.argv),
        "plan": {"cases": len(cases), **({"controls": len(controls)} if spec.bracket else {})},
    }
    store = RunStore.create(out, manifest, resume=resume)
    capacity = memory_limit or manifest["device"].get("memory_bytes") or 0
    retry_cal = _calibrations_to_retry(store.manifest(), manifest, capacity)
    latest = store.latest() if resume else {}   # read once: every record parsed into a Case
    done = (_done_on(store, capacity, frozenset(rerun), case_timeout_s, retry_cal, latest, memory_plan,
                     manifest.get("cuda_alloc"), {c.key: c for c in (*cases, *controls)}) if resume else set())
    if resume:
        done |= _record_twins(store, cases, done, frozenset(latest.keys() - done))
    tolerances: dict = dict(store.manifest().get("tolerances", {}))
    # 2^32 first: a run cut short by its time budget still maps the main boundary. Cases
    # judged before and tried again (skipped for memory on a smaller device, --rerun) come
    # after the new ones, the ops in turns: a retry cut short has reached every op.
    todo = sorted((c for c in cases if c.key not in done and c.key not in latest), key=_schedule_rank)
    todo += in_turns(c for c in cases if c.key not in done and c.key in latest)
    cfg = WorkerConfig(device=device, fault_model=fault_model, memory_limit=memory_limit, mode=mode,
                       ref_device="cpu" if reference == "cpu" else None, memory_plan=memory_plan)
    need_cal = sorted({k for k in (c.tolerance_key for c in todo) if k not in tolerances or k in retry_cal})
    total = len(need_cal) + len(todo)
    tick = progress or (lambda *a, **k: None)
    tick(total=total, description="calibrating")
    # This invocation's segment of the run, recorded however it ends (an interrupt
    # included): a run resumed over several sessions still adds up its wall time.
    # A resumed run may go on on another machine: each segment names the device and the
    # versions it ran with (the manifest's are the first segment's).
    segment = {"started": now(), "device": manifest["device"], "memory_bytes": capacity,
               **{k: manifest.get(k) for k in ("git", "source", "kernelaudit", "torch", "triton", "cuda", "driver",
                                               "cuda_alloc")},
               "calibrated": 0, "cases_run": 0, "workers_replaced": 0, "completed": False}
    t0 = time.perf_counter()
    n_cal = calibration_workers or CALIBRATION_WORKERS.get(device.split(":")[0], 1)
    n_cases = case_workers or CASE_WORKERS.get(device.split(":")[0], 1)
    segment["case_workers"] = n_cases
    on = None
    if spread:
        on = functools.partial(open_executor, executor, functools.partial(pool_on, cfg, case_timeout_s),
                               devices=devices, device_type=device, ray_address=ray_address)
        n_cal = n_cal if executor == "local" else 1

    def bracket_controls() -> list[Case]:
        """The controls the probes' verdicts call for, added to the plan."""
        needed = _controls_needed(store, controls)
        cases.extend(needed)
        store.update_manifest(plan={"cases": len(cases), "controls": len(controls), "controls_needed": len(needed)})
        more = sorted((c for c in needed if c.key not in done), key=_schedule_rank)
        todo.extend(more)
        tick(total=total + len(more), description="controls below the limits")
        return more

    def slow_pass_cases() -> list[Case]:
        """The cases the slow pass runs (:func:`.timeouts.slow_cases`), added to the progress."""
        latest = store.latest()
        beyond = {c.key for c, _, _ in projected_beyond(latest, cases, slow_timeout_s)}
        more = slow_cases(latest, cases, slow_timeout_s, beyond)
        segment["slow_pass_projected_beyond"] = len(beyond)
        if more:
            tick(total=total + len(more), description=f"slow pass: {len(more)} cases, {slow_timeout_s:g} s each"
                 + (f" ({len(beyond)} projected past it left out)" if beyond else ""))
        return more

    try:
        _run_cases(store, pool_args=(cfg, case_timeout_s), todo=todo, need_cal=need_cal, tolerances=tolerances,
                   tick=tick, segment=segment, calibration_workers=n_cal, case_workers=n_cases, spread=on,
                   then=bracket_controls if controls else None,
                   slow=(slow_timeout_s, slow_pass_cases) if slow_timeout_s else None)
        segment["completed"] = True
    finally:
        segment.update(ended=now(), wall_s=round(time.perf_counter() - t0, 1))
        store.add_segment(segment)
    counts: dict[str, int] = {}
    planned = {c.key for c in cases}
    for key, r in store.latest().items():
        if key in planned:
            s = r["verdict"]["status"]
            counts[s] = counts.get(s, 0) + 1
    store.update_manifest(finished=now(), counts=counts)
    # the findings as guard rules (rules.json next to the verdicts: `kernelaudit run --rules`)
    from .rules_out import write_rules

    write_rules(store)
    return SweepResult(store, counts, len(todo), len(cases) - len(todo))


def _add_overhead(segment: dict, res: dict, wall_s: float, recording_s: float) -> None:
    """Add to ``segment["case_overhead_s"]`` where one case's wall time (``wall_s``, the
    pool's run of it) went besides its own ``elapsed_s``: ``round_trip`` in all, made of
    ``worker_start`` (waiting for a worker to start: a spare's after a replacement, or
    its own), ``worker_kill`` (replacing it after the case), ``in_worker`` (the worker's
    own time outside the judged case: the memory plan, freeing the case's tensors, the
    device health check after an error) and ``transport`` (the rest: the pipe, pickling);
    and ``recording``: this thread's (the store's fsync, the progress bar)."""
    elapsed = float(res.get("elapsed_s") or 0.0)
    start, kill = float(res.get("start_s") or 0.0), float(res.get("kill_s") or 0.0)
    in_worker = max(0.0, float(res["worker_s"]) - elapsed) if res.get("worker_s") is not None else 0.0
    parts = {"round_trip": wall_s - elapsed, "worker_start": start, "worker_kill": kill, "in_worker": in_worker,
             "transport": wall_s - elapsed - start - kill - in_worker, "recording": recording_s}
    acc = segment.setdefault("case_overhead_s", {})
    for k, v in parts.items():
        # to the microsecond: a fast worker's part of a case (the memory plan) is well under
        # a millisecond, and a sum rounded to the millisecond at every case would drop it
        acc[k] = round(acc.get(k, 0.0) + v, 6)


def _controls_needed(store: RunStore, controls: list[Case]) -> list[Case]:
    """The ``below`` controls of a bracketed sweep whose probes (the same case at or
    above the limit) were recorded and not all ok. A probe that timed out (or was not run
    because a case of its op timed out) says nothing about the limit and calls for no
    control: its control would only time out too."""
    from .rules_out import unjudged

    flagged = set()
    for r in store.latest().values():
        c = Case.from_json(r["case"])
        v = r["verdict"]
        if (c.position != "below" and v["status"] != Status.OK.value and not unjudged(v)
                and not (v.get("details") or {}).get("after_timeout")):
            flagged.add(bracket_key(c))
    return [c for c in controls if bracket_key(c) in flagged]


#: What torch says, raising from the op itself (a ``RuntimeError: ...`` of the op's call,
#: never kernelaudit's ``kernelaudit failed on this case: ...``), when it refuses a
#: configuration at any size: a pinned SDPA backend without a kernel for the shape (efficient
#: attention at the attention-batch axis' 8 x 2 heads), a solver driver CUDA lacks.
REFUSALS = ("No available kernel", "No viable backend", "is not supported on", "not implemented for")


def _op_refuses(why: str) -> bool:
    """Whether a calibration's failure ``why`` is the op refusing the case's dtype,
    direction or shape at any size (torch's ``NotImplementedError``, e.g. a backward
    without a Half kernel, or a :data:`REFUSALS` message), not kernelaudit failing."""
    return (why.startswith("NotImplementedError")
            or (why.startswith("RuntimeError:") and any(r in why for r in REFUSALS)))


def _uncalibrated(why: str) -> Verdict:
    """The verdict of a case whose tolerance could not be calibrated below the thresholds:
    ``skipped`` where the op refuses it at any size (:func:`_op_refuses`: no finding),
    else ``error`` with the calibration's message."""
    if _op_refuses(why):
        return Verdict.skipped(f"not run: the op refuses this dtype, direction or shape at a small size too "
                               f"({why[:200]})", unsupported=True)
    return Verdict.error(UNCALIBRATED + (f" ({why[:300]})" if why else ""), uncalibrated=True)


def _tensor_key(c: Case) -> tuple | None:
    """What fixes a case's tensors: two cases with the same key run the same op on the same
    tensors, whatever axis placed them (``None`` on axes that cut per-batch shapes small)."""
    from .axes import AXES

    if AXES[c.axis].tiny_shapes:
        return None
    return (c.op, c.dtype, c.layout, c.series, c.batch, c.direction, c.seed, c.scale)


#: Statuses whose recorded cases ``--rerun`` may judge again.
RERUN_STATUSES = ("wrong", "error", "skipped", "ok")


def _calibrations_to_retry(m: dict, now: dict, capacity: int) -> set[str]:
    """The tolerance keys of manifest ``m`` whose calibration failed (None) and is worth
    trying again in a run with environment ``now`` and ``capacity`` bytes: the failure
    was recorded on another device, for want of memory with less than ``capacity``, or
    without saying where (a store older than that); kernelaudit's own failure (or any
    but the op's refusal) also under other code (``source``), and the op's refusal
    (:func:`_op_refuses`: a pinned SDPA backend without a kernel, a missing Half kernel)
    under another torch, the only thing that changes it. The same code on the same
    device fails the same way: trying again would cost each resumed segment its
    calibration (34 keys, 49 s, on the full grid's H100 segment 4, nearly all refusals)."""
    failed = m.get("calibration_failed") or {}
    device = (now.get("device") or {}).get("name")
    out = set()
    for key, tol in (m.get("tolerances") or {}).items():
        if tol is not None:
            continue
        f = failed.get(key)
        if (not isinstance(f, dict) or f.get("device") != device
                or ("memory_bytes" in f and capacity > (f["memory_bytes"] or 0))):
            out.add(key)
        elif _op_refuses(f.get("why") or ""):
            if f.get("torch") != now.get("torch"):   # a record without it: once, to record it
                out.add(key)
        elif f.get("source") != now.get("source"):
            out.add(key)
    return out


def _done_on(store: RunStore, capacity: int, rerun: frozenset = frozenset(),
             case_timeout_s: float = 0.0, retry_cal: set | frozenset = frozenset(),
             latest: dict | None = None, memory_plan: str = "strict",
             allocator: str | None = None, planned: dict[str, Case] | None = None) -> set[str]:
    """The keys a resumed run does not run again: every recorded case but those whose
    status is in ``rerun``, those the plan (``planned``: key -> case) now builds with
    other operand shapes than their record ran with (:func:`.timeouts.reshaped`), those
    left unjudged by a failed calibration of a key in
    ``retry_cal`` (:func:`_calibrations_to_retry`), those that timed
    out (or were not run after a case of their op did) where the longest timeout a case
    of their op ran out of is shorter than ``case_timeout_s`` (:func:`unheld_under`),
    those held back that no timed-out case holds any more (:class:`TimedOut`: under
    half its size),
    and those skipped for want of memory (the plan's skip or an allocation that failed
    despite it) by a segment that had less memory than ``capacity`` (this one's:
    ``memory_limit``, else the device's): a run resumed on a larger GPU judges what a
    smaller one could not hold; under ``memory_plan`` ``try``, also those the ``strict``
    plan's estimate skipped on any device; with ``allocator`` (this
    run's CUDA allocator settings, :func:`.memory.allocator_in_force`), also an allocation
    that failed in a segment whose allocator ran with other settings (expandable segments
    may hold what a fragmented cache could not); never an allocation that asked for more
    than ``capacity`` (:func:`.memory.asked_bytes`). A segment's memory is its
    ``memory_bytes``, else its device's, else the manifest's. A twin (``twin_of``) goes
    with the case whose verdict it copied. ``latest``: the store's :meth:`~.RunStore.latest`,
    where the caller has read it already."""
    m = store.manifest()
    first = (m.get("device") or {}).get("memory_bytes") or 0
    spans = [(s.get("started", ""), s.get("ended", "~"),
              s.get("memory_bytes") or (s.get("device") or {}).get("memory_bytes") or first, s.get("cuda_alloc"))
             for s in m.get("segments") or ()]
    latest = store.latest() if latest is None else latest
    slow = longest_timeouts(latest)
    holding = holding_cases(latest)
    done = set()
    for key, r in latest.items():
        d = r["verdict"].get("details") or {}
        if r["verdict"]["status"] in rerun:
            continue
        if planned is not None and key in planned and reshaped(r["case"], planned[key]):
            continue  # its record is of other shapes: the case as planned now runs
        if unheld_under(d, r["case"]["op"], slow, case_timeout_s):
            continue  # timed out, or held back, under a shorter timeout than this call's
        if (d.get("after_timeout") and (h := holding.get(r["case"]["op"])) is not None
                and not held_by(Case.from_json(r["case"]).crossing_numel, h.crossing_numel)):
            continue  # held back by a case over twice its size (a store older than the rule)
        if ((uncalibrated(r["verdict"]) or d.get("unsupported"))
                and Case.from_json(r["case"]).tolerance_key in retry_cal):
            continue  # its key is calibrated again: judged now, or told why not
        if r["verdict"]["status"] == Status.SKIPPED.value and ("needed_bytes" in d or d.get("out_of_memory")):
            had, alloc = next(((mem, al) for a, b, mem, al in spans if a <= r.get("recorded", "") <= b),
                              (first, None))
            asked = asked_bytes(r["verdict"].get("message") or "") if d.get("out_of_memory") else None
            if asked is not None and capacity and asked > capacity:
                pass  # it asked for more than this device has at all: it would fail again
            elif capacity > had:
                continue
            elif allocator is not None and d.get("out_of_memory") and alloc != allocator:
                continue  # failed under other allocator settings: tried under these
            elif memory_plan == "try" and "needed_bytes" in d and not d.get("memory_plan"):
                continue  # the strict plan's estimate skipped it: tried now
        done.add(key)
    # a twin holds a copy of its case's verdict: judged again with it
    again = {r["case"]["id"] for key, r in latest.items() if key not in done}
    return {key for key in done if latest[key].get("twin_of") not in again}


def _record_twins(store: RunStore, cases: list[Case], done: set[str], stale: frozenset = frozenset(),
                  since: str | None = None) -> set[str]:
    """Record, for each case not yet run whose tensors a recorded case already judged (a
    ``bytes`` case at the very batch of an ``elements`` case, or one limit's case above at
    the batch of the next limit's case below), that verdict with ``twin_of`` naming the
    case it came from; the keys recorded. Running it again would judge the same op on
    the same tensors. Records of the keys in ``stale`` (to be run again), and records made
    before ``since`` (a timestamp: within a run, only its own verdicts), judge nothing:
    a case run again must not be recorded from its own, or its twin's, earlier verdict."""
    wanted = {k for c in cases if c.key not in done and (k := _tensor_key(c)) is not None}
    if not wanted:
        return set()
    judged: dict[tuple, dict] = {}
    for r in store.records():
        if "twin_of" in r or (since is not None and r.get("recorded", "") < since):
            continue
        c = Case.from_json(r["case"])
        if c.key not in stale and (k := _tensor_key(c)) in wanted and (k not in judged or supersedes(r, judged[k])):
            judged[k] = r
    out = set()
    for c in cases:
        if c.key in done or (k := _tensor_key(c)) is None or k not in judged:
            continue
        r = judged[k]
        store.append(c, Verdict.from_json(r["verdict"]), 0.0, twin_of=r["case"]["id"])
        out.add(c.key)
    return out


def _split_twins(cases: list[Case]) -> tuple[list[Case], list[Case]]:
    """(firsts, followers) of ``cases`` in order: a follower has the tensors of an earlier
    case of the list (:func:`_tensor_key`), so it is recorded from that case's verdict
    once it is in (:func:`_record_twins`) instead of running."""
    seen: set[tuple] = set()
    firsts, followers = [], []
    for c in cases:
        k = _tensor_key(c)
        if k is not None and k in seen:
            followers.append(c)
        else:
            if k is not None:
                seen.add(k)
            firsts.append(c)
    return firsts, followers


def _spread_devices(device: str, devices, executor: str) -> tuple[str, tuple[str, ...] | None]:
    """(device type, devices) of a sweep spread over an executor: ``devices`` checked
    (:func:`~kernelaudit.executors.parse_devices`; with ray only their form, since the
    cluster's GPUs are not this host's), and ``device`` left ``auto`` or of their type.
    Ray without ``devices``: every GPU of the cluster (``device=cpu``: every CPU)."""
    if devices is None:
        return ("cpu" if device == "cpu" else "cuda"), None
    devices = parse_devices(devices, here=executor == "local")
    kind = devices[0].split(":")[0]
    if device != "auto" and device.split(":")[0] != kind:
        raise InvalidArgument(f"Cannot have device={device!r} with devices={','.join(devices)!r}: --devices names "
                              f"the devices; leave --device at auto or make it {kind}")
    return kind, devices


def _spread_device_info(kind: str, devices, executor: str) -> dict:
    """The manifest's ``device``: the first local device, or the device type of a Ray
    cluster whose GPUs this process may not see (then name and memory are unknown)."""
    if executor == "local":
        return device_info(devices[0] if kind == "cuda" else "cpu")
    import torch

    if kind == "cuda" and not torch.cuda.is_available():
        return {"type": "cuda", "name": "unknown (GPUs of the Ray cluster)", "memory_bytes": None}
    return device_info(kind)


def _run_cases(store: RunStore, *, pool_args, todo, need_cal, tolerances: dict, tick, segment: dict,
               calibration_workers: int = 1, case_workers: int = 1, spread: Callable | None = None,
               then: Callable[[], list[Case]] | None = None,
               slow: tuple[float, Callable[[], list[Case]]] | None = None) -> None:
    """Calibrate the missing tolerance keys, then run every case in ``todo``, appending
    each verdict to ``store`` as it comes (``segment`` counts what this call did); then
    the slow pass, if ``slow`` = (seconds a case, the cases) asks for one: those cases,
    one at a time with that timeout, a timeout holding back the rest of its op
    (``segment["slow_pass"]``); then the cases ``then()`` returns, chosen from those
    verdicts, in the same workers.

    With ``case_workers`` > 1, the cases that fit a 1/N share of the device run side by
    side first (:func:`_cases_side_by_side`); the rest, and any that failed there, then
    run alone in this function's one worker, exactly as with ``case_workers`` = 1.
    With ``spread`` (slots per device -> an executor, :func:`~kernelaudit.executors.open_executor`),
    calibration and cases run on the executor's devices instead, one case per device
    at a time (calibration side by side first, ``calibration_workers`` per device, as
    on one device); this function's worker is never started.
    Everything that touches the store, ``segment`` or ``tick`` runs in this thread."""
    # Calibration sizes sit far below every threshold (cases.calibration_batch), where
    # no fault model changes anything, so calibration runs in workers like the cases'.
    with WorkerPool(*pool_args) as pool, (spread(slots_per_device=1) if spread else contextlib.nullcontext()) as ex:
        # Its start (seconds: imports, the device) overlaps calibration's: it measures
        # the device's capacity right after, and takes the jobs that must run alone.
        if todo and ex is None:
            pool.prestart()
        if ex is not None:
            segment["devices"] = list(ex.devices)
        by_key = {}
        for c in todo:
            by_key.setdefault(c.tolerance_key, c)
        jobs = {key: by_key[key].with_batch(calibration_batch(by_key[key]), threshold="cal", position="below")
                for key in need_cal}
        overlap = ex is None and bool(todo) and OVERLAP_CALIBRATION.flag()
        if (calibration_workers > 1 and ex is None and not overlap
                and fused_enabled(WARM_COMPILES, pool_args[0].device.split(":")[0])):
            jobs.update(_warm_jobs(todo, jobs))

        t_cal = time.perf_counter()

        def record(key: str, res: dict) -> None:
            status = res["verdict"]["status"]
            _note_calibration(segment, key, res, time.perf_counter() - t_cal)
            cal_skipped[key] = status == Status.SKIPPED.value
            if status != Status.OK.value:
                cal_failed[key] = res["verdict"].get("message") or status
                store.update_manifest(calibration_failed={key: {
                    "why": cal_failed[key][:300], "source": segment.get("source"),
                    "device": (segment.get("device") or {}).get("name"), "torch": segment.get("torch"),
                    # skipped for want of memory: worth trying where there is more
                    **({"memory_bytes": segment.get("memory_bytes")} if cal_skipped[key] else {})}}, defer=True)
            elif cal_failed.pop(key, None) is not None:  # failed before (other code, device, memory): no longer
                store.update_manifest(calibration_failed={key: None}, defer=True)
            tolerances[key] = calibrated(res["worst"], by_key[key].dtype) if status == Status.OK.value else None
            store.update_manifest(tolerances={key: tolerances[key]}, defer=True)
            segment["calibrated"] += 1
            tick(advance=1, description=f"calibrated {key}")

        cal_skipped: dict[str, bool] = {}
        # why, for the keys whose calibration was not ok (a resumed run's earlier reasons too)
        cal_failed: dict[str, str] = {k: f.get("why", "") if isinstance(f, dict) else str(f)
                                      for k, f in (store.manifest().get("calibration_failed") or {}).items()
                                      if f is not None}   # None: failed once, calibrated since
        retry = [k for k in jobs if not k.startswith(WARM_PREFIX)]   # a warm run is never retried
        pending: set[str] = set()  # keys whose side-by-side calibration is not in yet
        side_iter = None

        def settle(key: str | None = None) -> None:
            """Take side-by-side calibration results until ``key`` (None: every key) is in."""
            while pending and (key is None or key in pending):
                try:
                    k, res = next(side_iter)
                except StopIteration:
                    pending.clear()
                    break
                pending.discard(k)
                if k.startswith(WARM_PREFIX):   # its kernels are compiled: nothing to keep
                    warm = segment.setdefault("warm_compiles", {"jobs": 0, "worker_s": 0.0})
                    warm["jobs"] += 1
                    warm["worker_s"] = round(warm["worker_s"] + float(res.get("elapsed_s") or 0.0), 3)
                elif res["verdict"]["status"] == Status.OK.value:
                    record(k, res)
                else:
                    retry.append(k)

        if calibration_workers > 1 and len(jobs) > 1:
            # Side by side: Triton compiles (CPU-bound) and small GPU cases overlap.
            # Anything but ok is tried again below, alone: it may have met another
            # worker's memory, not its own limit. Overlapped (one device,
            # OVERLAP_CALIBRATION): the calibration runs on in its workers while this
            # thread runs cases, each case waiting for its own key; a key that failed side
            # by side is calibrated again alone once the others are done, then its cases run.
            retry = []
            if ex is not None and hasattr(ex, "prestart"):
                ex.prestart()  # the cases' workers start while calibration runs, as pool's does
            side_iter = iter(_calibrate_side_by_side(pool_args, jobs, calibration_workers) if ex is None
                             else _calibrate_spread(spread, jobs, calibration_workers))
            pending = set(jobs)
            if not overlap:
                settle()  # every key before the first case
                side_iter = None
        if ex is not None:  # alone on each device
            for key, res in _results(ex, {key: {"case": jobs[key].to_json(), "tolerances": None} for key in retry}):
                record(key, res)
            retry = []
        for key in retry:
            record(key, pool.run({"case": jobs[key].to_json(), "tolerances": None}))

        def tolerance(c: Case) -> dict | None:
            tol = tolerances.get(c.tolerance_key)
            if tol is None and cal_skipped.get(c.tolerance_key):
                tol = {}  # the case cannot fit either: the worker's plan will say so
            return tol

        def record_case(c: Case, v: Verdict, elapsed_s: float, **extra) -> None:
            store.append(c, v, elapsed_s, **extra)
            segment["cases_run"] += 1
            tick(advance=1, description=c.id, status=v.status.value)

        timed_out = TimedOut(store, pool_args[1])

        deferred: list[Case] = []

        def run(cases: list[Case]) -> None:
            alone = cases
            if side_iter is not None:
                for c in cases:
                    if c.tolerance_key in pending:
                        settle(c.tolerance_key)
                    if c.tolerance_key in retry:
                        deferred.append(c)
                    else:
                        run_alone([c])
                return
            if ex is not None:
                alone = _cases_on(ex, cases, tolerance=tolerance, record=record_case, segment=segment)
            elif case_workers > 1:
                alone = _cases_side_by_side(pool, cases, tolerance=tolerance, record=record_case, tick=tick,
                                            segment=segment, workers=case_workers)
            run_alone(alone)

        def run_alone(alone: list[Case], held: TimedOut = timed_out, timeout_s: float | None = None) -> None:
            """Each case in this thread's worker; ``timeout_s`` replaces the pool's, and
            ``held`` says which ops' cases a timeout holds back."""
            for c in alone:
                tol = tolerance(c)
                if tol is None:
                    record_case(c, _uncalibrated(cal_failed.get(c.tolerance_key, "")), 0.0)
                    continue
                skipped = held.verdict(c)
                if skipped is not None:
                    record_case(c, skipped, 0.0)
                    continue
                t_case = time.perf_counter()
                res = pool.run({"case": c.to_json(), "tolerances": tol,
                                **({"timeout_s": timeout_s} if timeout_s else {})})
                t_res = time.perf_counter()
                segment["workers_replaced"] += bool(res.get("worker_replaced"))
                v = Verdict.from_json(res["verdict"])
                if v.details.get("timed_out"):
                    held.note(c)
                # the case's wall time through the pool and its worker's own time: where a
                # segment's overhead goes, case by case (``_add_overhead`` sums it)
                times = {"wall_s": round(t_res - t_case, 4)}
                if res.get("worker_s") is not None:
                    times["worker_s"] = round(float(res["worker_s"]), 4)
                record_case(c, v, res["elapsed_s"], **times)
                _add_overhead(segment, res, t_res - t_case, time.perf_counter() - t_res)

        def run_slow(timeout_s: float, cases: list[Case]) -> None:
            """The slow pass (:func:`.timeouts.slow_cases`): alone, or on the executor's devices
            (there every case runs: nothing holds back a device's queue)."""
            if not cases:
                return
            t_slow = time.perf_counter()
            first_record = segment["cases_run"]
            if ex is not None:
                run_alone(_cases_on(ex, cases, tolerance=tolerance, record=record_case, segment=segment,
                                    timeout_s=timeout_s), TimedOut(None), timeout_s)
            else:
                run_alone(cases, TimedOut(None), timeout_s)
            latest = store.latest()
            verdicts = [(latest.get(c.key) or {}).get("verdict") or {} for c in cases]
            segment["slow_pass"] = {
                "timeout_s": timeout_s, "cases": len(cases), "recorded": segment["cases_run"] - first_record,
                "timed_out": sum(bool((v.get("details") or {}).get("timed_out")) for v in verdicts),
                "held_back": sum(bool((v.get("details") or {}).get("after_timeout")) for v in verdicts),
                "judged": sum(v.get("status") in (Status.OK.value, Status.WRONG.value) for v in verdicts),
                "wall_s": round(time.perf_counter() - t_slow, 1)}

        def untwinned(cases: list[Case]) -> list[Case]:
            """``cases`` less those recorded from a judged twin (:func:`_record_twins`)."""
            twins = _record_twins(store, cases, set(), since=segment.get("started"))
            segment["twins"] = segment.get("twins", 0) + len(twins)
            for c in cases:
                if c.key in twins:
                    tick(advance=1, description=f"{c.id}: twin")
            return [c for c in cases if c.key not in twins]

        # A case with the tensors of an earlier one (another axis or limit placing the
        # same batch) runs after every other case, and only if that one's verdict is not in.
        firsts, followers = _split_twins(todo)
        run(firsts)
        if side_iter is not None:  # the keys that failed side by side: again alone, then their cases
            settle()
            side_iter = None
            for key in retry:
                record(key, pool.run({"case": jobs[key].to_json(), "tolerances": None}))
            run(deferred)
        run(untwinned(followers))
        if slow is not None:
            run_slow(slow[0], slow[1]())
        if then is not None:  # cases chosen from these verdicts (a bracket's controls), same workers;
            # each shares its probe's tolerance key, calibrated or not as the probe's
            firsts, followers = _split_twins(untwinned(then()))
            run(firsts)
            run(untwinned(followers))


#: How far into the cases to run the warm runs of :func:`_warm_jobs`: about a segment's
#: worth (2.5 cases a second for 10 minutes on the H100 of 2026-12-05) and more.
WARM_AHEAD = 2000

#: Job keys of :func:`_warm_jobs` (never a tolerance key: those are op/dtype/layout/direction).
WARM_PREFIX = "warm:"


def _warm_jobs(todo: list[Case], jobs: dict[str, Case]) -> dict[str, Case]:
    """Calibration-sized runs of the matmul cases at their :func:`~.cases.warm_batch`, one
    per distinct run, keyed ``warm:<case key>/B<batch>``: side by side with calibration they make
    Triton compile each specialisation of the judge's kernels (Freivalds, spot checks,
    hashing) that the cases will launch, so the one case worker finds them in Triton's
    cache. On the H200 the first case of each specialisation had paid its compiles alone,
    0.3-2.4 s (343 cases, 266 of the 779 case-seconds of the 2026-12-04 hand-spec grid:
    ``benchmarks/results/2026-12-05-h200-sweep-judged-profile-full-grid-start``). Their
    results are not kept (a warm run calibrates nothing); ops without a bilinear judge
    have no specialised kernels of that kind and get none. A run equal to a calibration
    job's (same case, same batch) is not repeated. Only the first :data:`WARM_AHEAD` cases
    of ``todo`` are looked at: a resumed run's warm runs for cases hours away held its
    first case back 60-90 s (1,096 warm runs, 188-233 worker-seconds, on an H100)."""
    have = {(c.key, c.batch) for c in jobs.values()}   # a case's key does not name its batch
    out: dict[str, Case] = {}
    for c in todo[:WARM_AHEAD]:
        if c.spec.bilinear is None:
            continue
        b = warm_batch(c)
        if b is None:
            continue
        w = c.with_batch(b, threshold="cal", position="below")
        if (w.key, w.batch) not in have:
            out.setdefault(f"{WARM_PREFIX}{w.key}/B{w.batch}", w)
    return out


#: Slowest calibration keys a segment names (key, seconds): where a device's per-key cost goes.
SLOWEST_KEYS = 10


def _note_calibration(segment: dict, key: str, res: dict, since_start_s: float) -> None:
    """Add one calibration result to the segment's ``calibration`` account: keys, the
    workers' seconds for them (``worker_s``: the jobs' own time; side by side these
    overlap), that time by phase (``timing_s``: inputs, op, judge; the rest of
    ``worker_s`` is the plan, imports and first calls), ``wall_s``, the time from the
    start of calibration to this key, and the :data:`SLOWEST_KEYS` slowest keys."""
    cal = segment.setdefault("calibration", {"keys": 0, "worker_s": 0.0, "timing_s": {}, "wall_s": 0.0,
                                             "slowest": []})
    elapsed = float(res.get("elapsed_s") or 0.0)
    cal["keys"] += 1
    cal["worker_s"] = round(cal["worker_s"] + elapsed, 3)
    for phase, t in ((res["verdict"].get("details") or {}).get("timing") or {}).items():
        cal["timing_s"][phase] = round(cal["timing_s"].get(phase, 0.0) + float(t), 3)
    cal["wall_s"] = round(since_start_s, 1)
    cal["slowest"] = sorted(cal["slowest"] + [[key, round(elapsed, 3)]], key=lambda kv: -kv[1])[:SLOWEST_KEYS]


#: Verdicts of a case run side by side that are not kept: the case runs again alone
#: (it may have met another worker's memory, or a crash of the shared device).
RETRY_ALONE = (Status.SKIPPED.value, Status.ERROR.value)


def _measure_capacity(pool: WorkerPool) -> tuple[int, int]:
    """(capacity, total) bytes of the device: what one process may use on it now
    (:func:`~kernelaudit.sweep.memory.available_bytes`) and its total memory.

    On a GPU it is asked of ``pool``'s worker (started if needed), not measured here:
    on CUDA, ``mem_get_info`` would create a CUDA context in the sweep's own process,
    which would hold device memory for the whole run; the worker's own allocator cache
    counts as usable. On the CPU it is measured here. (0, 0) when the worker cannot
    say: then every case runs alone."""
    import torch

    from . import memory as plan

    device = torch.device(pool.cfg.device)
    try:
        mem = plan.device_memory(device) if device.type == "cpu" else pool.device_memory()
    except RuntimeError:  # the worker cannot start: running alone will say so
        mem = None
    if not mem:
        return 0, 0
    return int(mem["available"]), int(mem["total"])


def _cases_side_by_side(pool: WorkerPool, todo: list[Case], *, tolerance, record, tick, segment: dict,
                        workers: int) -> list[Case]:
    """Phase 1 of running ``todo`` with ``workers`` worker processes; returns phase 2,
    the cases still to run alone (in ``todo``'s order).

    The device's capacity is measured once (:func:`_measure_capacity`), and ``pool``'s
    worker is stopped so that its memory is back before the N workers start. Each of the ``workers`` processes gets a share of
    capacity / N: its plan's memory limit is that share less the plan's usual headroom
    (:data:`~kernelaudit.sweep.memory.MEMORY_HEADROOM`, the same margin a worker alone keeps), and
    on CUDA its caching allocator is capped at the share
    (``torch.cuda.set_per_process_memory_fraction``), so N workers together stay within
    the capacity. Cases whose planned bytes (:func:`~kernelaudit.sweep.memory.estimate_bytes`,
    with the workers' reference chunk) fit that limit run side by side, in ``todo``'s
    order, and their verdicts are recorded as they come, except ``skipped`` or ``error``
    ones: those cases run again alone in phase 2 and only that verdict is recorded."""
    import dataclasses

    import torch

    from . import memory as plan
    from .judge.reference import default_ref_chunk

    cfg, timeout_s = pool.cfg, pool.case_timeout_s
    candidates = [c for c in todo if tolerance(c) is not None]
    if len(candidates) < 2:
        return todo
    capacity, total = _measure_capacity(pool)
    pool.stop()  # its memory (a CUDA context, calibration's cache) back before phase 1
    share = capacity // workers
    limit = int(share * plan.MEMORY_HEADROOM)
    if cfg.memory_limit is not None:
        limit = min(limit, cfg.memory_limit)
    ref_chunk = cfg.ref_chunk or default_ref_chunk(torch.device(cfg.device))
    side = {c.key: c for c in candidates if plan.estimate_bytes(c, cfg.fault_model, ref_chunk) <= limit}
    segment.update(capacity_bytes=capacity, side_by_side=0, retried_alone=0)
    if len(side) < 2:
        return todo
    fraction = None
    if torch.device(cfg.device).type == "cuda" and total > 0:
        fraction = min(1.0, share / total)
    side_cfg = dataclasses.replace(cfg, memory_limit=limit, memory_fraction=fraction)
    jobs = {key: {"case": c.to_json(), "tolerances": tolerance(c)} for key, c in side.items()}
    again: set[str] = set()
    alone_planned = len(todo) > len(side)
    for n, (key, res) in enumerate(_side_by_side((side_cfg, timeout_s), jobs, workers), 1):
        c = side[key]
        if len(jobs) - n < workers and (alone_planned or again):
            pool.prestart()  # phase 2's worker starts while the last cases finish
        segment["workers_replaced"] += bool(res.get("worker_replaced"))
        if res["verdict"]["status"] in RETRY_ALONE:
            again.add(key)
            segment["retried_alone"] += 1
            tick(advance=0, description=f"{c.id}: again, alone")
        else:
            segment["side_by_side"] += 1
            record(c, Verdict.from_json(res["verdict"]), res["elapsed_s"])
    return [c for c in todo if c.key not in side or c.key in again]


def _calibrate_side_by_side(pool_args, jobs: dict, workers: int):
    """Yield (key, result) for every calibration job (key -> calibration case), run by
    ``workers`` worker processes at once, as they finish (:func:`_side_by_side`). A
    worker takes every key of one op in a row: the op's first call in a process (its
    kernels loaded on a GPU) is paid once, not in every worker."""
    return _side_by_side(pool_args, {key: {"case": case.to_json(), "tolerances": None} for key, case in jobs.items()},
                         workers, group=lambda key: jobs[key].op)


def _results(ex, jobs: dict, group=None):  # noqa: ANN001
    """Yield (key, result) for every job (key -> the job a worker runs) run on the
    executor ``ex``, as they finish; each result names its ``device``, and a job its
    worker could not run (the executor's ``error``: the actor died, the worker could
    not start) becomes an ``error`` verdict saying so. ``group``: as the executor's ``map``."""
    for d in ex.map(jobs, group=group):
        res = d.value if d.ok else {"verdict": Verdict.error(f"the worker on {d.device} could not run it: {d.error}",
                                                             device=d.device).to_json(),
                                    "worst": {}, "elapsed_s": 0.0}
        yield d.key, {**res, "device": d.device}


def _calibrate_spread(spread, jobs: dict, workers: int):
    """As :func:`_calibrate_side_by_side` (every key of one op in a row), with ``workers``
    slots on each of the executor's devices (stopped at the end, so the devices' memory
    is back)."""
    with spread(slots_per_device=workers) as ex:
        yield from _results(ex, {key: {"case": case.to_json(), "tolerances": None} for key, case in jobs.items()},
                            group=lambda key: jobs[key].op)


def _cases_on(ex, todo: list[Case], *, tolerance, record, segment: dict,
              timeout_s: float | None = None) -> list[Case]:
    """Run every case of ``todo`` that has a tolerance on the executor ``ex``, in
    ``todo``'s order, one at a time per device, recording each verdict as it comes with
    the device that ran it; return the others (the caller records why they cannot run).
    ``timeout_s``: each case's, instead of its worker pool's."""
    cases = {c.key: c for c in todo if tolerance(c) is not None}
    extra = {"timeout_s": timeout_s} if timeout_s else {}
    for key, res in _results(ex, {k: {"case": c.to_json(), "tolerances": tolerance(c), **extra}
                                  for k, c in cases.items()}):
        segment["workers_replaced"] += bool(res.get("worker_replaced"))
        record(cases[key], Verdict.from_json(res["verdict"]), res["elapsed_s"], device=res["device"])
    return [c for c in todo if c.key not in cases]


def _side_by_side(pool_args, jobs: dict, workers: int, group=None):  # noqa: ANN001
    """Yield (key, result) for every job (key -> the job a worker runs), run by
    ``workers`` worker processes at once on the one device (a
    :class:`~kernelaudit.executors.LocalExecutor` whose slots are :class:`WorkerPool`:
    case timeouts and crash isolation as alone), as they finish. Jobs are started in
    ``jobs``' order. Results are handed to the caller's thread, so the store, the
    progress bar and the counters are only ever touched from there. At the end every
    worker is stopped, so that what runs next finds the device's memory back; on an
    interrupt each stops after its current job, whose result is never recorded (a
    resumed run runs it). ``group``: see :meth:`~kernelaudit.executors.LocalExecutor.map`."""
    from ..executors import LocalExecutor

    def slot(_device: str) -> WorkerPool:
        return WorkerPool(*pool_args)

    with LocalExecutor((pool_args[0].device,), slot, slots_per_device=workers) as ex:
        for d in ex.map(jobs, group=group):
            # A worker that cannot start fails its job here: that job is retried alone.
            yield d.key, d.value if d.ok else {"verdict": Verdict.error(d.error).to_json(), "worst": {},
                                               "elapsed_s": 0.0}


def check_against_rules(store: RunStore, fault_model: str) -> tuple[int, list[str]]:
    """(cases checked, mismatches): every verdict compared with what the fault model's
    rules predict for it from metadata (:func:`~kernelaudit.sweep.predict.predict`)."""
    from .predict import EITHER, predict

    checked, bad = 0, []
    for r in store.latest().values():
        case = Case.from_json(r["case"])
        got = r["verdict"]["status"]
        if got == Status.SKIPPED.value:
            continue
        expected, why = predict(case, fault_model)
        checked += 1
        if expected == "unknown" or (expected == EITHER and got in ("ok", "wrong")):
            continue
        if got != expected:
            bad.append(f"{case.id} B={case.batch}: sweep says {got}, rules say {expected} ({why})")
    return checked, bad
