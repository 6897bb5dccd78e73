"""Timing that cannot be faked: ``kernelaudit check --time``.

Reference (the problem's ``Model``) and candidate (``ModelNew``) are timed the way the
hardened harnesses time them (GPU MODE's ranked runs, SOL-ExecBench), and every
known way of making a kernel *look* fast is a ``wrong`` verdict:

* **fresh inputs every iteration**: each iteration draws new values with
  ``get_inputs()`` under a seed from a secret generator (not timed) and writes them
  *into the same input tensors*: an output cached by input address (or object) is then
  stale, and one cached by content never hits;
* **every output re-checked**: each iteration's candidate output is compared with the
  reference output of the same inputs (shape, then ``allclose`` at the kernelbench
  tolerance, the cheap comparator: the correctness oracles ran before); the first
  wrong output fails the timing with its evidence;
* **interleaved**: reference and candidate alternate, first one then the other, so
  clock and thermal drift hit both;
* **caches flushed**: before every timed call a buffer twice the last-level cache (L2
  on CUDA, the LLC on the CPU) is overwritten;
* **the caller's stream**: a device-wide synchronise, then CUDA events recorded on the
  current (caller's) stream around the call; afterwards the time from the end event to
  a device-wide synchronise is measured: work left running on another stream shows
  up there (``pending``), and once more, deterministically, in a probe call whose side
  streams are made to sleep first (``tamper``'s ``delayed_side_streams``);
* **timers captured before the candidate loads**: :func:`capture_timers` keeps
  ``torch.cuda.Event`` (and its methods), ``torch.cuda.synchronize``,
  ``torch.cuda.current_stream``, ``time.perf_counter`` and friends; the timing calls
  the captured objects (a replaced timer cannot change a measurement) and
  :func:`timer_tampering` rejects the candidate when any was replaced;
* **no work after the return**: an output that is no plain ``torch.Tensor`` (a lazy
  subclass), a Python thread started by the call and still alive when the clock
  stopped, an output that changes after the call returned;
* **no behaviour switch**: the warm-up count is random (5 to 10), so a candidate
  cannot count its way to the first timed call; the error of the timed iterations must
  not exceed :data:`SWITCH_FACTOR` times that of the first calls (the ones a
  correctness checker sees);
* **the physical floor**: a time below the bytes the call must move (inputs, and the
  outputs that do not fit in the cache) over the peak memory bandwidth, times
  :data:`FLOOR_FRACTION`, or below the multiply-adds of a matmul-category corpus
  problem over the peak rate, is impossible and rejected with the figures. Peaks come
  from ``KERNELAUDIT_PEAK_BANDWIDTH``/``KERNELAUDIT_PEAK_FLOPS``, else a per-device
  table (H200: 4.8 TB/s, 989 TFLOP/s dense bf16), else a measured copy bandwidth
  with a margin. When the *reference* also beats the floor, the peaks are wrong: the
  timing is ``skipped`` and says so, never blamed on the candidate.

The result: median and spread of both, the speed-up (median of the per-iteration
ratios, paired by iteration) with a distribution-free 95 % confidence interval, the
floor, and a verdict (``wrong`` on any finding, ``error`` when the candidate raises).
"""

from __future__ import annotations

import math
import secrets
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..config import PEAK_BANDWIDTH, PEAK_FLOPS
from ..errors import InvalidArgument
from ..verdict import Status, Verdict
from .oracles.threads import runs_nothing, settle

#: Timed iterations by default (``--time-iters``).
DEFAULT_ITERS = 20
#: Fewest timed iterations accepted.
MIN_ITERS = 3
#: Untimed warm-up iterations: a random count in this range (inclusive).
WARMUP_RANGE = (5, 10)
#: The first calls a correctness checker sees (KernelBench runs 5 trials).
FIRST_CALLS = 5
#: Timed error above this many times the first calls' error is a behaviour switch.
SWITCH_FACTOR = 8.0
#: ... and above this many machine epsilons (relative to max |reference|).
SWITCH_FLOOR_EPS = 4.0
#: Share of the byte count an honest kernel must move: structure (triangular operands)
#: can halve what it reads, so the floor only counts half.
FLOOR_FRACTION = 0.5
#: Work still pending after the caller's stream finished, beyond the reference's, that
#: is no sync latency (seconds).
PENDING_ABS_S = 50e-6
#: Seconds, in all, to wait for threads the candidate started before reading its outputs again.
THREAD_JOIN_S = 5.0
#: Resolution of the timers (CUDA events: about 0.5 us): a time this close to the floor is no finding.
TIMER_RESOLUTION_S = 1e-6

#: Peak memory bandwidth (bytes/s) and dense 16-bit tensor rate (FLOP/s) by device
#: name, highest variant of each name (a higher peak only lowers the floor).
PEAKS_TABLE: dict[str, tuple[float, float]] = {
    "H200": (4.8e12, 989e12),
    "H100": (3.35e12, 989e12),
    "A100": (2.039e12, 312e12),
    "L40S": (0.864e12, 362e12),
}
#: Measured copy bandwidth times this is the assumed peak (CUDA devices not in the table).
MEASURED_MARGIN_CUDA = 2.0
#: ... and on the CPU (caches, prefetchers: a wide margin).
MEASURED_MARGIN_CPU = 4.0


# ---------------------------------------------------------------------------
# timers: captured before the candidate loads
# ---------------------------------------------------------------------------

_TIME_NAMES = ("perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time", "time_ns", "process_time")
_CUDA_NAMES = ("Event", "synchronize", "current_stream", "default_stream", "set_stream", "stream", "Stream")
_EVENT_METHODS = ("record", "elapsed_time", "synchronize", "query", "wait", "__new__", "__init__")
_TENSOR_METHODS = ("zero_", "copy_", "clone", "fill_")


def capture_timers() -> dict[str, Any]:
    """The timing functions as they are now (call it before the candidate loads)."""
    snap: dict[str, Any] = {f"time.{n}": getattr(time, n) for n in _TIME_NAMES}
    snap.update({f"torch.cuda.{n}": getattr(torch.cuda, n) for n in _CUDA_NAMES})
    event = torch.cuda.Event
    snap.update({f"torch.cuda.Event.{n}": event.__dict__.get(n) for n in _EVENT_METHODS})
    snap.update({f"torch.Tensor.{n}": getattr(torch.Tensor, n) for n in _TENSOR_METHODS})
    snap["threading.Thread.start"] = threading.Thread.start
    if hasattr(torch._C, "_cuda_synchronize"):
        snap["torch._C._cuda_synchronize"] = torch._C._cuda_synchronize
    return snap


def _owner(name: str) -> tuple[Any, str]:
    owner, attr = name.rsplit(".", 1)
    objects = {"time": time, "torch.cuda": torch.cuda, "torch.Tensor": torch.Tensor, "torch._C": torch._C,
               "threading.Thread": threading.Thread}
    if owner == "torch.cuda.Event":
        return None, attr
    return objects[owner], attr


def timer_tampering(before: dict[str, Any], *, restore: bool = True) -> list[str]:
    """Names in ``before`` whose object changed since (and put the originals back)."""
    event = before["torch.cuda.Event"]
    changed = []
    for name, obj in before.items():
        owner, attr = _owner(name)
        now = (event.__dict__.get(attr) if owner is None else getattr(owner, attr, None))
        if now is obj:
            continue
        changed.append(name)
        if restore:
            target = event if owner is None else owner
            if obj is None:
                delattr(target, attr)
            else:
                setattr(target, attr, obj)
    return changed


class _Timers:
    """The captured objects, so a replaced timer cannot change a measurement."""

    def __init__(self, snap: dict[str, Any]) -> None:
        self.perf_counter = snap["time.perf_counter"]
        self.Event = snap["torch.cuda.Event"]
        self.record = snap["torch.cuda.Event.record"]
        self.elapsed_time = snap["torch.cuda.Event.elapsed_time"]
        self.event_synchronize = snap["torch.cuda.Event.synchronize"]
        self.synchronize = snap["torch.cuda.synchronize"]
        self.current_stream = snap["torch.cuda.current_stream"]
        self.set_stream = snap["torch.cuda.set_stream"]
        self.zero_ = snap["torch.Tensor.zero_"]
        self.copy_ = snap["torch.Tensor.copy_"]
        self.clone = snap["torch.Tensor.clone"]
        self.thread_start = snap["threading.Thread.start"]


# ---------------------------------------------------------------------------
# peaks and the physical floor
# ---------------------------------------------------------------------------


@dataclass
class Peaks:
    """Peak memory bandwidth (bytes/s), peak arithmetic rate (FLOP/s, or None) and where they come from."""

    bandwidth: float
    flops: float | None
    source: str


def _knob_float(knob) -> float | None:  # noqa: ANN001
    text = knob.get().strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (value > 0 and math.isfinite(value)):
        raise InvalidArgument(f"Cannot have {knob.name}={text!r}: allowed values are a positive number "
                              f"(e.g. 4.8e12) or empty (the per-device table, else a measurement)")
    return value


_MEASURED: dict[str, float] = {}


def measured_copy_bandwidth(device: str, clock: Callable[[], float] | None = None) -> float:
    """Bytes read plus written per second by a large copy on ``device`` (best of 3, measured once).

    ``clock``: the captured ``perf_counter`` (a candidate may have replaced the module's).
    """
    clock = clock or time.perf_counter
    if device in _MEASURED:
        return _MEASURED[device]
    n = 64 << 20
    src = torch.empty(n, dtype=torch.uint8, device=device).fill_(1)
    dst = torch.empty_like(src)
    best = math.inf
    for _ in range(3):
        _sync(device)
        t0 = clock()
        dst.copy_(src)
        _sync(device)
        best = min(best, clock() - t0)
    _MEASURED[device] = 2 * n / best
    return _MEASURED[device]


def device_peaks(device: str, clock: Callable[[], float] | None = None) -> Peaks:
    """The peaks the floor divides by: the knobs, else the table, else a measured copy with a margin
    (timed with ``clock``, the captured ``perf_counter``)."""
    bw, fl = _knob_float(PEAK_BANDWIDTH), _knob_float(PEAK_FLOPS)
    source = []
    if bw is not None:
        source.append(f"{PEAK_BANDWIDTH.name}")
    if fl is not None:
        source.append(f"{PEAK_FLOPS.name}")
    if str(device).startswith("cuda"):
        name = torch.cuda.get_device_name(torch.device(device))
        row = next((v for k, v in PEAKS_TABLE.items() if k in name), None)
        if row is not None:
            bw = row[0] if bw is None else bw
            fl = row[1] if fl is None else fl
            source.append(f"table ({name})")
        elif bw is None:
            bw = MEASURED_MARGIN_CUDA * measured_copy_bandwidth(device, clock)
            source.append(f"measured copy x {MEASURED_MARGIN_CUDA:g} ({name})")
    elif bw is None:
        bw = MEASURED_MARGIN_CPU * measured_copy_bandwidth(device, clock)
        source.append(f"measured copy x {MEASURED_MARGIN_CPU:g} (cpu)")
    return Peaks(float(bw), fl, ", ".join(source))


@dataclass
class Floor:
    """The least time the call can take: bytes and (matmul) FLOPs over the peaks."""

    bytes: int
    flops: int | None
    seconds: float
    peaks: Peaks
    how: str


def last_level_cache_bytes(device: str) -> int:
    """L2 of a CUDA device; the largest CPU cache the kernel reports (32 MiB when unknown)."""
    if str(device).startswith("cuda"):
        return int(torch.cuda.get_device_properties(torch.device(device)).L2_cache_size)
    best = 0
    for p in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        try:
            text = p.read_text().strip().upper()
        except OSError:
            continue
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            best = max(best, int(digits) * mult)
    return best or (32 << 20)


def _nbytes(values: Sequence[Any]) -> int:
    return sum(int(v.numel()) * v.element_size() for v in values if isinstance(v, torch.Tensor))


def matmul_flops(case, outputs: Sequence[torch.Tensor]) -> int | None:  # noqa: ANN001
    """2 x outputs x the accumulated length, for corpus problems of category matmul, else None.

    Only where the problem says what is accumulated (``ERROR_MODEL`` length): other
    problems get the byte floor alone.
    """
    model = case.problem.error_model or {}
    length = model.get("length")
    if case.problem.category != "matmul" or model.get("kind") != "multilinear" or length is None:
        return None
    n = case.shapes.get(length) if isinstance(length, str) else length
    if not isinstance(n, int):
        return None
    return 2 * sum(int(o.numel()) for o in outputs) * int(n)


def physical_floor(case, outputs: Sequence[torch.Tensor], peaks: Peaks, cache_bytes: int) -> Floor:  # noqa: ANN001
    """The floor of one call: inputs (the flush evicted them) plus outputs beyond the cache."""
    in_bytes, out_bytes = _nbytes(case.inputs), _nbytes(outputs)
    must = in_bytes + max(0, out_bytes - cache_bytes)
    t_bytes = FLOOR_FRACTION * must / peaks.bandwidth
    flops = matmul_flops(case, outputs)
    t_flops = flops / peaks.flops if flops is not None and peaks.flops else 0.0
    how = (f"{FLOOR_FRACTION:g} x {must} B (inputs {in_bytes} B + outputs beyond the {cache_bytes >> 20} MiB "
           f"cache) / {peaks.bandwidth:.3g} B/s")
    if t_flops:
        how += f"; {flops} FLOP / {peaks.flops:.3g} FLOP/s"
    return Floor(must, flops, max(t_bytes, t_flops), peaks, how)


# ---------------------------------------------------------------------------
# measuring one call
# ---------------------------------------------------------------------------


def _sync(device: str, timers: _Timers | None = None) -> None:
    if str(device).startswith("cuda"):
        (timers.synchronize if timers else torch.cuda.synchronize)(torch.device(device))


class CacheFlusher:
    """Evicts the caches before a timed call by overwriting a buffer twice their size.

    On the CPU the buffer is written by numpy, on the calling thread: torch's
    ``zero_`` would wake its thread pool, which on a busy machine costs more than the
    memset itself and adds noise to the call that follows.
    """

    def __init__(self, device: str, timers: _Timers, nbytes: int | None = None) -> None:
        self.nbytes = int(nbytes if nbytes is not None else 2 * last_level_cache_bytes(device))
        self.buf = torch.empty(max(self.nbytes, 1), dtype=torch.uint8, device=device)
        self.host = None if str(device).startswith("cuda") else self.buf.numpy()
        self.timers = timers
        self.count = 0

    def flush(self) -> None:
        self.count += 1
        if self.host is not None:
            self.host.fill(self.count & 0xFF)  # a new value each time: no page is left untouched
        else:
            self.timers.zero_(self.buf)


@dataclass
class Call:
    """One measured call: seconds, outputs as at the return, the outputs object, host-side findings."""

    seconds: float
    early: list[torch.Tensor]
    outputs: list[torch.Tensor]
    pending_s: float
    threads: list[threading.Thread]
    lazy: list[str]
    stream_left: str = ""


def _as_tensor_list(out: Any) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)) and all(isinstance(t, torch.Tensor) for t in out):
        return list(out)
    raise TypeError(f"expected a tensor or a tuple of tensors as output, got {type(out).__name__}")


def measure(model: torch.nn.Module, inputs: Sequence[Any], device: str, timers: _Timers,
            flusher: CacheFlusher, clock: Callable[[], float]) -> Call:
    """Flush, synchronise the device, time one call on the caller's stream, look behind it."""
    cuda = str(device).startswith("cuda")
    started: list[threading.Thread] = []
    original_start = timers.thread_start

    def start(self):  # noqa: ANN001 - records threads the call starts
        started.append(self)
        return original_start(self)

    flusher.flush()
    _sync(device, timers)
    if cuda:
        stream = timers.current_stream(torch.device(device))
        begin, end = timers.Event(enable_timing=True), timers.Event(enable_timing=True)
        timers.record(begin, stream)
    threading.Thread.start = start
    try:
        t0 = clock()
        with torch.no_grad():
            out = model(*inputs)
        if cuda:
            timers.record(end, stream)
        t1 = clock()
    finally:
        threading.Thread.start = original_start
    alive = [t for t in started if t.is_alive() and not runs_nothing(t)]  # a pool worker waiting defers nothing
    stream_left = ""
    if cuda and timers.current_stream(torch.device(device)) != stream:
        # the candidate left its own stream current: put the caller's back before copying on it
        stream_left = str(timers.current_stream(torch.device(device)))
        timers.set_stream(stream)
    outputs = _as_tensor_list(out)
    lazy = [type(o).__name__ for o in outputs if type(o) is not torch.Tensor]
    early = [] if lazy else [timers.clone(o) for o in outputs]  # on the caller's stream, before any wait
    pending = 0.0
    if cuda:
        timers.event_synchronize(end)
        t2 = clock()
        _sync(device, timers)
        pending = clock() - t2
        seconds = timers.elapsed_time(begin, end) / 1e3
    else:
        seconds = t1 - t0
    settle(alive, THREAD_JOIN_S)
    _sync(device, timers)
    return Call(seconds, early, outputs, pending, alive, lazy, stream_left)


# ---------------------------------------------------------------------------
# statistics
# ---------------------------------------------------------------------------


@dataclass
class Stats:
    """Median, quartiles, extremes of a list of seconds."""

    median: float
    p25: float
    p75: float
    min: float
    max: float
    n: int

    @classmethod
    def of(cls, xs: Sequence[float]) -> "Stats":
        s = sorted(xs)
        q = statistics.quantiles(s, n=4) if len(s) > 1 else [s[0]] * 3
        return cls(statistics.median(s), q[0], q[2], s[0], s[-1], len(s))


def median_ci(xs: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """Distribution-free confidence interval of the median (order statistics): (lo, hi, coverage).

    With fewer than 6 values no interval reaches 95 %: the range is returned with the
    coverage it has.
    """
    s = sorted(xs)
    n = len(s)
    alpha = (1 - level) / 2
    cdf, k = 0.0, 0
    while True:  # largest k with P(Bin(n, 1/2) <= k - 1) <= alpha
        p = math.comb(n, k) / 2**n
        if cdf + p > alpha or k >= n // 2:
            break
        cdf += p
        k += 1
    k = max(k, 1)
    lo_cdf = sum(math.comb(n, i) for i in range(k)) / 2**n
    return s[k - 1], s[n - k], 1 - 2 * lo_cdf


# ---------------------------------------------------------------------------
# the timing run
# ---------------------------------------------------------------------------


@dataclass
class TimingResult:
    """What ``--time`` measured and found."""

    device: str
    iters: int
    warmup: int
    seed: int
    reference: Stats | None = None
    candidate: Stats | None = None
    speedup: float | None = None
    speedup_ci: tuple[float, float] | None = None
    ci_coverage: float | None = None
    floor_s: float | None = None
    floor_how: str = ""
    peaks_source: str = ""
    pending_s: dict[str, float] = field(default_factory=dict)
    first_calls_error: float | None = None
    timed_error: float | None = None
    flush_bytes: int = 0
    verdict: Verdict = field(default_factory=lambda: Verdict.skipped("not timed"))

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["verdict"] = self.verdict.to_json()
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "TimingResult":
        d = dict(d)
        d["verdict"] = Verdict.from_json(d["verdict"])
        for side in ("reference", "candidate"):
            if d.get(side) is not None:
                d[side] = Stats(**d[side])
        if d.get("speedup_ci") is not None:
            d["speedup_ci"] = tuple(d["speedup_ci"])
        return cls(**d)

    def summary(self) -> str:
        """For a terminal: the times, and the timing's verdict unless it is ``wrong``/``error`` (then
        it is the check's verdict, printed already)."""
        if self.reference is None or self.candidate is None:
            return (f"timing: no times: it stopped at its first finding ({self.verdict.status.value}"
                    f"{': ' + self.verdict.metric if self.verdict.metric else ''}); seed {self.seed}")
        r, c = self.reference, self.candidate
        lo, hi = self.speedup_ci or (float("nan"), float("nan"))
        return (f"timing ({self.iters} iterations after {self.warmup} warm-up, fresh inputs, caches flushed, on "
                f"{self.device}): reference median {_ms(r.median)} [IQR {_ms(r.p25)}-{_ms(r.p75)}], candidate "
                f"median {_ms(c.median)} [IQR {_ms(c.p25)}-{_ms(c.p75)}]; speed-up {self.speedup:.3g}x "
                f"[{100 * (self.ci_coverage or 0):.0f}% CI {lo:.3g}-{hi:.3g}]; floor {_ms(self.floor_s or 0.0)}; "
                f"seed {self.seed}"
                + ("" if self.verdict.status in (Status.WRONG, Status.ERROR) else
                   f"\ntiming verdict: {self.verdict.explain()}"))


def _ms(s: float) -> str:
    return f"{s * 1e3:.4g} ms"


def fresh_inputs(case, seed: int) -> list[Any]:  # noqa: ANN001
    """``get_inputs()`` at the case's shapes under ``seed``, generated on the case's device."""
    import contextlib

    from .problems.problem_case import set_seed, to_device

    gen_device = torch.device(case.device) if str(case.device).startswith("cuda") else contextlib.nullcontext()
    with case.problem.at_shapes(case.shapes):
        set_seed(seed)
        with gen_device:
            values = list(case.problem.module.get_inputs())
    return to_device(values, case.device)


def _refill(buffers: list[Any], values: list[Any], timers: _Timers) -> None:
    """Write fresh values into the persistent input tensors (same storage: address caches go stale)."""
    for i, (b, v) in enumerate(zip(buffers, values)):
        if isinstance(b, torch.Tensor) and isinstance(v, torch.Tensor) and b.shape == v.shape and b.dtype == v.dtype:
            timers.copy_(b, v)
        else:
            buffers[i] = v


def _rel_error(got: torch.Tensor, ref: torch.Tensor) -> float:
    if not ref.is_floating_point() or got.numel() == 0:
        return 0.0
    g, r = got.to(torch.float64), ref.to(torch.float64)
    scale = float(r.abs().max())
    diff = float((g - r).abs().nan_to_num(nan=math.inf).max())
    return diff / scale if scale > 0 else diff


def _check_output(case, it: int, got: list[torch.Tensor], ref: list[torch.Tensor], tol: float) -> Verdict | None:  # noqa: ANN001
    """The kernelbench comparison of one timed output: shapes, then allclose(atol=rtol=tol)."""
    from .oracles.compare import mismatch_verdict, structure_verdict

    tcase = case.with_inputs(case.inputs, f"timing iteration {it}")
    bad = structure_verdict(tcase, got, ref, metric="max_diff")
    if bad is not None:
        return bad
    for i, (g, r) in enumerate(zip(got, ref)):
        close = ~torch.isclose(r, g.to(r.dtype), atol=tol, rtol=tol, equal_nan=False)
        if bool(close.any()):
            diff = (g.to(torch.float64) - r.to(torch.float64)).abs().nan_to_num(nan=math.inf)
            return mismatch_verdict(tcase, i, g, r, close, metric="max_diff", value=float(diff.max()), tolerance=tol,
                                    extra="a timed output must be right for its own fresh inputs")
    return None


def _wrong(metric: str, message: str, value: float | None = None, tolerance: float | None = None) -> Verdict:
    return Verdict(Status.WRONG, metric=metric, value=value, tolerance=tolerance, message=message)


def time_candidate(
    case,  # noqa: ANN001 - a ProblemCase
    subject,  # noqa: ANN001 - a Subject
    *,
    timers: dict[str, Any] | None = None,
    iters: int = DEFAULT_ITERS,
    warmup: int | None = None,
    tol: float = 1e-2,
    seed: int | None = None,
    clock: Callable[[], float] | None = None,
    candidate_clock: Callable[[], float] | None = None,
    flush_bytes: int | None = None,
    peaks: Peaks | None = None,
) -> TimingResult:
    """Time ``subject`` against the problem's ``Model`` on ``case``'s shape and device.

    ``timers`` is :func:`capture_timers` taken before the candidate was loaded (else
    now). ``warmup`` defaults to a random count in :data:`WARMUP_RANGE`; ``seed`` (the
    secret seed of the input values and the warm-up count) to a random one, recorded
    in the result. ``clock`` replaces the host clock (both sides), ``candidate_clock``
    the candidate's alone (tests plant impossible times with it); on CUDA the kernel
    time comes from events and the clocks time only the host side. ``flush_bytes``
    overrides the size of the cache flush, ``peaks`` the floor's peaks.
    """
    from .oracles.base import candidate_error
    from .oracles.tamper import bit_diff, delayed_side_streams
    from .problems.problem_case import reference_failure

    if iters < MIN_ITERS:
        raise InvalidArgument(f"Cannot have --time-iters={iters}: at least {MIN_ITERS} timed iterations")
    if warmup is not None and warmup < 0:
        raise InvalidArgument(f"Cannot have warmup={warmup}: a count of iterations, 0 or more")
    snap = timers if timers is not None else capture_timers()
    t = _Timers(snap)
    seed = secrets.randbits(48) if seed is None else int(seed)
    import random

    rng = random.Random(seed)
    warmup = rng.randint(*WARMUP_RANGE) if warmup is None else warmup
    result = TimingResult(str(case.device), iters, warmup, seed)
    device = str(case.device)
    host_clock = clock or t.perf_counter
    cand_clock = candidate_clock or host_clock
    peaks = peaks or device_peaks(device, t.perf_counter)  # a bad knob raises InvalidArgument before the candidate runs
    flusher = CacheFlusher(device, t, flush_bytes)
    result.flush_bytes, result.peaks_source = flusher.nbytes, peaks.source

    def finish(verdict: Verdict) -> TimingResult:
        tampered = timer_tampering(snap)
        if tampered:
            verdict = _wrong("replaced timers", f"{case.describe()}: the candidate replaced {', '.join(tampered)} "
                                                "(restored): timing tampered with; no time of this run counts")
        result.verdict = verdict
        return result

    try:
        ref_model = case.model(deterministic=False)
    except Exception as exc:  # noqa: BLE001
        return finish(Verdict.skipped(str(exc), reason="reference failed"))
    try:
        cand_model = subject.fresh().model(case, deterministic=False)
    except (Exception, SystemExit) as exc:  # noqa: BLE001
        return finish(candidate_error(case, exc))

    first = fresh_inputs(case, rng.getrandbits(63))
    ref_bufs = [v.clone() if isinstance(v, torch.Tensor) else v for v in first]
    cand_bufs = [v.clone() if isinstance(v, torch.Tensor) else v for v in first]
    ref_times: list[float] = []
    cand_times: list[float] = []
    ratios: list[float] = []
    pending = {"reference": [], "candidate": []}
    errors: list[float] = []
    ref_out: list[torch.Tensor] = []
    for it in range(warmup + iters):
        values = first if it == 0 else fresh_inputs(case, rng.getrandbits(63))
        _refill(ref_bufs, values, t)
        _refill(cand_bufs, values, t)
        calls: dict[str, Call] = {}
        for who in (("reference", "candidate") if it % 2 == 0 else ("candidate", "reference")):
            if who == "reference":
                try:
                    calls[who] = measure(ref_model, ref_bufs, device, t, flusher, host_clock)
                except Exception as exc:  # noqa: BLE001 - the problem's code: never the candidate's fault
                    return finish(Verdict.skipped(str(reference_failure(case, "Model.forward", exc)),
                                                  reason="reference failed"))
            else:
                try:
                    calls[who] = measure(cand_model, cand_bufs, device, t, flusher, cand_clock)
                except (Exception, SystemExit) as exc:  # noqa: BLE001 - any candidate failure is an error verdict
                    return finish(candidate_error(case.with_inputs(cand_bufs, f"timed iteration {it}"), exc))
        ref_call, cand_call = calls["reference"], calls["candidate"]
        ref_out = ref_call.early
        label = f"{case.describe()}, iteration {it} ({'warm-up' if it < warmup else 'timed'})"
        if cand_call.lazy:
            return finish(_wrong("lazy outputs", f"{label}: the candidate returned {', '.join(cand_call.lazy)} "
                                 "instead of a plain torch.Tensor: a deferred output computes when it is read, "
                                 "after the clock stopped"))
        if cand_call.stream_left:
            return finish(_wrong("stream left current", f"{label}: the call returned with {cand_call.stream_left} "
                                 "current instead of the caller's stream: work queued there is not what the "
                                 "caller's events time"))
        if cand_call.threads:
            return finish(_wrong("threads left running", f"{label}: the call started {len(cand_call.threads)} "
                                 f"thread(s) still running when it returned ({cand_call.threads[0].name}): their "
                                 "work is not in the measured time", float(len(cand_call.threads)), 0.0))
        for j, (e, o) in enumerate(zip(cand_call.early, cand_call.outputs)):
            if e.shape == o.shape and e.dtype == o.dtype and bool(bit_diff(e, o).any()):
                k = int(bit_diff(e, o).sum())
                return finish(_wrong("outputs changed after the return",
                                     f"{label}: output {j} changed in {k} / {e.numel()} elements after the call "
                                     "returned (work on another stream or thread, outside the measured time)",
                                     float(k), 0.0))
        bad = _check_output(case, it, cand_call.early, ref_out, tol)
        if bad is not None:
            msg = f"timed output wrong: {bad.message}"
            return finish(Verdict(Status.WRONG, metric=bad.metric, value=bad.value, tolerance=bad.tolerance,
                                  bad_batches=bad.bad_batches, first_bad_index=bad.first_bad_index, message=msg,
                                  details={"iteration": it, "warmup": warmup}))
        errors.append(max((_rel_error(g, r) for g, r in zip(cand_call.early, ref_out)), default=0.0))
        if it >= warmup:
            ref_times.append(ref_call.seconds)
            cand_times.append(cand_call.seconds)
            ratios.append(ref_call.seconds / cand_call.seconds if cand_call.seconds > 0 else math.inf)
            pending["reference"].append(ref_call.pending_s)
            pending["candidate"].append(cand_call.pending_s)

    result.reference, result.candidate = Stats.of(ref_times), Stats.of(cand_times)
    result.speedup = statistics.median(ratios)
    lo, hi, coverage = median_ci(ratios)
    result.speedup_ci, result.ci_coverage = (lo, hi), coverage
    result.pending_s = {k: statistics.median(v) for k, v in pending.items()}
    floor = physical_floor(case.with_inputs(cand_bufs, "timed"), ref_out, peaks, last_level_cache_bytes(device))
    result.floor_s, result.floor_how = floor.seconds, floor.how

    # behaviour switch: the first calls are what a correctness checker sees
    k = min(FIRST_CALLS, warmup)
    if k and len(errors) > k:
        base = max(errors[:k])
        timed = statistics.median(errors[warmup:])
        result.first_calls_error, result.timed_error = base, timed
        eps = torch.finfo(case.dtype).eps if case.dtype.is_floating_point else 0.0
        threshold = max(SWITCH_FACTOR * base, SWITCH_FLOOR_EPS * eps)
        if timed > threshold:
            return finish(_wrong("error growth after the first calls",
                                 f"{case.describe()}: the timed iterations err {timed:.3g} (median, relative to max "
                                 f"|reference|) against {base:.3g} in the first {k} calls: the candidate computes "
                                 "differently once it has been called a few times (the calls a correctness check "
                                 f"sees; allowed: {SWITCH_FACTOR:g} x the first calls' error, at least "
                                 f"{SWITCH_FLOOR_EPS:g} eps)", timed, threshold))

    # work left on other streams after the caller's stream finished
    extra = result.pending_s["candidate"] - result.pending_s["reference"]
    if extra > max(PENDING_ABS_S, 0.25 * result.candidate.median):
        return finish(_wrong("pending work after the timed region",
                             f"{case.describe()}: after the candidate's end event the device still had "
                             f"{_ms(result.pending_s['candidate'])} of work (median; the reference: "
                             f"{_ms(result.pending_s['reference'])}): work on a stream the caller's stream does "
                             "not wait for is outside the measured time", extra, PENDING_ABS_S))
    if device.startswith("cuda"):
        probe = _side_stream_probe(case, cand_model, cand_bufs, t, delayed_side_streams, bit_diff)
        if probe is not None:
            return finish(probe)

    # the physical floor
    if result.reference.min + TIMER_RESOLUTION_S < floor.seconds:
        return finish(Verdict.skipped(
            f"{case.describe()}: could not judge the times: even the reference ran in {_ms(result.reference.min)}, "
            f"below the physical floor {_ms(floor.seconds)} ({floor.how}; peaks from {peaks.source}): the peak "
            f"figures are wrong for this device (set {PEAK_BANDWIDTH.name} / {PEAK_FLOPS.name})",
            reason="floor above the reference"))
    if result.candidate.min + TIMER_RESOLUTION_S < floor.seconds:
        return finish(_wrong("time below the physical floor",
                             f"{case.describe()}: the candidate ran in {_ms(result.candidate.min)} (fastest of "
                             f"{iters}), below the physical floor {_ms(floor.seconds)} ({floor.how}; peaks from "
                             f"{peaks.source}): impossible, the time is faked or the work was not done",
                             result.candidate.min, floor.seconds))
    return finish(Verdict(
        Status.OK, details={"speedup": result.speedup},
        message=f"{case.describe()}: speed-up {result.speedup:.3g}x (median of {iters} paired iterations, "
                f"{100 * coverage:.0f}% CI {lo:.3g}-{hi:.3g}); every output right on fresh inputs, timers intact, "
                f"no pending work, above the floor {_ms(floor.seconds)}"))


def check_time_iters(iters: int) -> None:
    """Raise :class:`InvalidArgument` unless ``iters`` is a usable count of timed iterations."""
    if not isinstance(iters, int) or iters < MIN_ITERS:
        raise InvalidArgument(f"Cannot have --time-iters={iters}: allowed values are whole numbers >= {MIN_ITERS}")


def timed_verdict(verdict: Verdict, case, subject, *, timers: dict[str, Any], iters: int = DEFAULT_ITERS,  # noqa: ANN001
                  tol: float | None = None) -> tuple[Verdict, dict[str, Any]]:
    """``check --time``: time the candidate after the oracles judged it (``verdict``).

    Returns the worse of the oracle's verdict and the timing's (the timing's message
    prefixed ``timing:``, the oracle's verdict kept in its details) and the timing as JSON.
    """
    from .oracles.kernelbench import KERNELBENCH_TOL
    from ..verdict import worst

    result = time_candidate(case, subject, timers=timers, iters=iters, tol=KERNELBENCH_TOL if tol is None else tol)
    tv = result.verdict
    if worst([verdict, tv]) is verdict:
        return verdict, result.to_json()
    combined = Verdict(tv.status, metric=tv.metric, value=tv.value, tolerance=tv.tolerance,
                       bad_batches=tv.bad_batches, first_bad_index=tv.first_bad_index,
                       message=f"timing: {tv.message}", details={**tv.details, "oracle": verdict.to_json()})
    return combined, result.to_json()


def _side_stream_probe(case, model, inputs, t: _Timers, delayed, bit_diff) -> Verdict | None:  # noqa: ANN001
    """One untimed call whose side streams sleep first: an output not ready on the caller's stream differs."""
    used: list[str] = []
    with torch.no_grad(), delayed(case.device, used):
        outputs = _as_tensor_list(model(*inputs))
    early = [t.clone(o) for o in outputs]  # on the caller's stream, before any device-wide wait
    _sync(case.device, t)
    for j, (e, o) in enumerate(zip(early, outputs)):
        if e.shape == o.shape and bool(bit_diff(e, o).any()):
            return _wrong("elements not ready on the caller's stream",
                          f"{case.describe()}: output {j} was not ready on the caller's stream when the call returned "
                          f"(work on {', '.join(used) or 'another stream'}): a timer on the caller's stream does not "
                          "see that work", float(int(bit_diff(e, o).sum())), 0.0)
    return None
