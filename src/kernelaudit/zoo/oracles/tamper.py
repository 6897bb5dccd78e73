"""``tamper``: catch kernels that pass by accident of memory, streams or luck.

One case, three runs of the candidate (A, B, C), and these checks:

* **unwritten outputs** - every ``torch.empty``/``empty_like``/``empty_strided``/
  ``new_empty`` made during a run is filled with a poison first (NaN in run A, the
  finite value :data:`POISON_B` in runs B and C; integer outputs get the dtype's min
  and max). An element that differs between A and B but not between B and C came
  from the poison: the kernel never wrote it. This is what a returned ``torch.empty``
  that "happens to hold" the right values (freed memory of the reference) turns into.
* **input mutation** - every tensor input is copied before run A and compared bit for
  bit afterwards (a kernel that zeroes or scales its inputs in place is caught even
  when its output is right).
* **aliasing** - an output that shares memory with an input is wrong unless the
  problem's own ``Model`` returns an alias of that input too.
* **streams** - on CUDA, when the candidate makes another stream current (``with
  torch.cuda.stream(s)``, ``torch.cuda.set_stream(s)``, ``with s``), that stream first
  gets a :data:`SIDE_STREAM_DELAY_CYCLES` sleep; the outputs are copied on the
  caller's stream right after the call returns and again after a device-wide
  synchronise. Work the caller's stream does not wait for shows up as a difference.
* **determinism** - runs B and C (same poison, same inputs) must agree bit for bit,
  unless the problem's own ``Model`` is nondeterministic on the device (two identical
  runs differ: cuDNN's transposed convolutions and LSTMs sum with atomics); then an
  element counts as unwritten only where it carries run A's NaN.
* **plain outputs** - every output must be a plain dense ``torch.Tensor`` on the case's
  device: a tensor subclass can defer its work until someone reads it (a timer sees
  nothing) or answer ``torch.allclose`` itself.
* **patched functions and flags** - the functions checks and timers call
  (``torch.allclose``, ``torch.testing.assert_close``, ``torch.cuda.synchronize``,
  ``torch.cuda.Event``, ``time.perf_counter``, the ops a reference calls: see
  :mod:`.integrity`) must be the objects they were before any candidate was loaded, and
  the numerics switches (TF32, matmul precision, default dtype) unchanged by a run.
  Replacements are reported and undone.
* **threads** - no Python thread the candidate started may still run when its forward
  returns (work deferred past the timer and the check). Threads that run nothing, such as
  those ``torch.compile`` leaves behind (a pool worker waiting for work, Inductor's compile
  sidecar between jobs: :mod:`.threads`), are not counted; they are looked at again after
  every later call.
* **history** - the same instance is called :data:`HISTORY_CALLS` more times, each on
  other inputs and judged against the float64 reference at a loose tolerance
  (:data:`HISTORY_TOL`; rounding is ``bound``'s business): new values at the
  *same* input addresses (a cache keyed on pointers or object ids), the same values
  with the largest and smallest of their last row swapped (a cache keyed on a partial
  fingerprint or a sum), and fresh values at new addresses while a decoy of the expected output is alive
  in the caller's frame (a candidate that reads the reference's output through ``gc``
  or stack frames finds the decoy, which holds no answer; writing into it is caught
  too). The reference of a history call is computed after the candidate returns, first
  at the problem's dtype (what ``Model`` computes; a stale or copied answer is off by
  the size of the outputs from either): outputs within the tolerance of it pass; any
  other call is judged against the float64 reference, with the floor below, so a
  verdict of ``wrong`` always rests on the float64 reference. With
  runs A-C that is six calls: more than KernelBench's five correctness trials, so a
  kernel that counts its calls and goes wrong after the trials is caught (the
  ``static`` oracle catches counters of any length).

Tamper judges the candidate against itself, except in the history calls; it runs
``Model`` otherwise only to decide whether an alias is legitimate.

The history tolerance has a floor, :func:`history_floor`: the largest error the derived
error model allows on the original case. Without it a correct kernel whose outputs are
near 0 relative to the computation (a GroupNorm followed by a mean: outputs about
1e-16, rounding about 1e-8) was rejected; stale, cached or copied answers are off by
the size of the outputs, far beyond the rounding. Where the reference raises, the
history calls cannot be judged: tamper reports what runs A-C found (``wrong``), or
``skipped`` saying the history calls could not be judged, never an error of the
candidate. An out-of-memory error in tamper's own copies and comparisons is the
checker's (could not judge); one in the candidate's call is the candidate's error.
Memory: one run's outputs and boolean masks at a time, the history calls' inputs made
when their turn comes, comparisons in chunks.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from ..problems.problem_case import (CheckerOutOfMemory, ProblemCase, ReferenceFailed, as_tensors,
                                     checker_out_of_memory, problem_precision, reference_failure, release_case)
from ...verdict import Status, Verdict
from . import integrity
from .base import Driver, Subject, candidate_error, checker_memory, synchronize
from .compare import (chunk_elements, chunked_compare, chunked_mismatch_verdict, finite_max_or_none, max_abs_finite,
                      structure_verdict)
from .threads import runs_nothing, settle

#: Poison of run B and C for floating outputs (finite, and no plausible result).
POISON_B = -31337.0
#: GPU cycles a side stream sleeps before the candidate's work on it (about 25 ms).
SIDE_STREAM_DELAY_CYCLES = 50_000_000
#: Calls after runs A-C, each on other inputs, judged against the reference.
HISTORY_CALLS = 3
#: Tolerance of a history call against the float64 reference: rtol, and atol as a
#: fraction of the output's largest magnitude (softmax outputs are all below 1e-2, so an
#: absolute 1e-2 would pass anything). A stale, cached or copied answer is wrong far
#: beyond it; rounding is ``bound``'s and ``values``' business, not tamper's.
HISTORY_TOL = 1e-2
#: Seconds, in all, that the threads a candidate left running get to end (or, pool workers,
#: to run nothing) before the next check.
THREAD_GRACE_S = 0.05

_FACTORIES = {
    torch.empty, torch.empty_like, torch.empty_strided,
    torch.Tensor.new_empty, torch.Tensor.new_empty_strided,
}


def _poison_value(dtype: torch.dtype, run: str) -> Any:
    if dtype.is_floating_point or dtype.is_complex:
        return float("nan") if run == "A" else POISON_B
    if dtype == torch.bool:
        return run != "A"
    info = torch.iinfo(dtype)
    return info.min if run == "A" else info.max


def _sizes_only(args: Sequence[Any]) -> bool:
    """``x.new(2, 3)`` or ``x.new((2, 3))``: sizes, so the memory is uninitialised."""
    rest = list(args[1:])
    if len(rest) == 1 and isinstance(rest[0], (tuple, list, torch.Size)):
        rest = list(rest[0])
    return bool(rest) and all(isinstance(r, int) and not isinstance(r, bool) for r in rest)


class PoisonEmpty(TorchFunctionMode):
    """Fill every uninitialised tensor created while active with the poison of ``run``.

    Covers the ``empty`` factories, the legacy ``x.new(sizes)`` and the elements a
    ``resize_`` adds.
    """

    def __init__(self, run: str) -> None:
        super().__init__()
        self.run = run
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        grown_from = args[0].numel() if func is torch.Tensor.resize_ and args else None
        out = func(*args, **(kwargs or {}))
        if not isinstance(out, torch.Tensor) or not out.numel():
            return out
        if func in _FACTORIES or (func is torch.Tensor.new and _sizes_only(args)):
            out.fill_(_poison_value(out.dtype, self.run))
            self.count += 1
        elif grown_from is not None and out.numel() > grown_from and out.is_contiguous():
            out.view(-1)[grown_from:].fill_(_poison_value(out.dtype, self.run))
            self.count += 1
        return out


@contextlib.contextmanager
def delayed_side_streams(device: str, used: list[str]) -> Iterator[None]:
    """On CUDA: make every stream the candidate switches to sleep before its work.

    Covers ``with torch.cuda.stream(s)``, ``torch.cuda.set_stream(s)`` and ``with s``.
    One sleep per stream and run is enough: everything later on that stream queues
    behind it.
    """
    if not (str(device).startswith("cuda") and torch.cuda.is_available()):
        yield
        return
    caller = torch.cuda.current_stream()
    delayed: set[int] = set()
    orig_enter = torch.cuda.StreamContext.__enter__
    orig_set = torch.cuda.set_stream
    cls = torch.cuda.Stream
    had_own_enter = "__enter__" in cls.__dict__
    orig_stream_enter = cls.__dict__.get("__enter__")

    def note_and_delay() -> None:
        cur = torch.cuda.current_stream()
        if cur != caller and cur.cuda_stream not in delayed:
            delayed.add(cur.cuda_stream)
            used.append(str(cur))
            torch.cuda._sleep(SIDE_STREAM_DELAY_CYCLES)

    def enter(self):  # noqa: ANN001
        r = orig_enter(self)
        note_and_delay()
        return r

    def set_stream(stream):  # noqa: ANN001
        orig_set(stream)
        note_and_delay()

    def stream_enter(self):  # noqa: ANN001
        base = orig_stream_enter or getattr(super(cls, self), "__enter__", None)
        r = base(self) if orig_stream_enter else (base() if base else self)
        note_and_delay()
        return r

    torch.cuda.StreamContext.__enter__ = enter
    torch.cuda.set_stream = set_stream
    cls.__enter__ = stream_enter
    try:
        yield
    finally:
        torch.cuda.StreamContext.__enter__ = orig_enter
        torch.cuda.set_stream = orig_set
        if had_own_enter:
            cls.__enter__ = orig_stream_enter
        else:
            del cls.__enter__


def bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's raw bit patterns (so NaN == NaN and -0 != +0)."""
    t = t.detach().contiguous()
    if t.dtype == torch.bool:
        return t
    size = t.element_size()
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[size])


def bit_diff(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Elementwise: do the bit patterns differ?"""
    return bits(a) != bits(b)


def _overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.device != b.device or a.numel() == 0 or b.numel() == 0:
        return False
    sa, sb = a.untyped_storage(), b.untyped_storage()
    return sa.data_ptr() == sb.data_ptr()


def _plain_output_problems(case: ProblemCase, raw: Any) -> list[str]:
    """Why each output is not a plain dense tensor on the case's device (empty when all are)."""
    outs = list(raw) if isinstance(raw, (tuple, list)) else [raw]
    problems = []
    for j, o in enumerate(outs):
        if not isinstance(o, torch.Tensor):
            problems.append(f"output {j} is a {type(o).__name__}, not a tensor")
        elif type(o) is not torch.Tensor:
            problems.append(f"output {j} is a {type(o).__module__}.{type(o).__qualname__}, a torch.Tensor subclass "
                            "(it can defer its work until read, or answer comparisons itself)")
        elif o.layout != torch.strided or o.is_meta or o.device.type != torch.device(case.device).type:
            problems.append(f"output {j} is not a dense tensor on {case.device} (layout {o.layout}, device {o.device})")
    return problems


def _call_with_decoy(model: torch.nn.Module, inputs: list[Any], expected: list[torch.Tensor]) -> Any:
    """Run the candidate from a frame whose locals hold the decoy ``expected`` outputs.

    A candidate that walks the stack or the garbage collector for "the reference's
    output" finds ``expected``: the poison, never an answer.
    """
    with torch.no_grad():
        return _candidate_call(model, inputs)


class _CandidateRaised(Exception):
    """The candidate's own call raised ``exc`` (an out-of-memory there is its error; one
    anywhere else in tamper is the checker's)."""

    def __init__(self, exc: BaseException) -> None:
        super().__init__(str(exc))
        self.exc = exc


def _candidate_call(model: torch.nn.Module, inputs: Sequence[Any]) -> Any:
    try:
        return model(*inputs)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - whatever the candidate raises is its own
        raise _CandidateRaised(exc) from exc


class TamperOracle(Driver):
    """Unwritten outputs, input mutation, aliasing, streams, determinism, plain outputs,
    patched functions, threads and call history."""

    name = "tamper"

    def _run(self, case: ProblemCase, model: torch.nn.Module, run: str) -> tuple[list[torch.Tensor], Verdict | None,
                                                                                 list[str], int]:
        """One poisoned run: (outputs after a device sync, the stream finding or ``None``, side
        streams, poisoned count).

        The outputs are copied on the caller's stream before any device-wide wait (what a
        caller sees) and compared at once; the copies are then dropped, so a run holds
        one extra output, not two per run.
        """
        streams: list[str] = []
        poison = PoisonEmpty(run)
        with torch.no_grad(), delayed_side_streams(case.device, streams), poison:
            raw = _candidate_call(model, case.inputs)
        problems = _plain_output_problems(case, raw)
        if problems:
            raise _NotPlain(problems)
        out = as_tensors(raw)
        early = [o.clone() for o in out]
        synchronize(case.device)
        late = None
        for j, (o, e) in enumerate(zip(out, early)):
            bad = bit_diff(o, e)
            if late is None and bool(bad.any()):
                via = f" (work on {', '.join(streams)})" if streams else ""
                late = self._finding(case, "elements not ready on the caller's stream", bad,
                                     f"output {j} changed after the call returned, run {run}: it was "
                                     f"computed on a stream the caller's stream does not wait for{via}")
        return out, late, streams, poison.count

    def drive(self, case: ProblemCase, subject: Subject) -> Verdict:
        with problem_precision(case):  # inside: the switches the watch sees as "before" are these
            return self._drive(case, subject)

    def _drive(self, case: ProblemCase, subject: Subject) -> Verdict:
        watch = _Watch(case)
        watch.check("before tamper ran (when its file was loaded, or in an earlier oracle's run)")
        try:
            model = subject.model(case)
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - sys.exit() in a kernel is an error too
            watch.check("while its model was built")
            return candidate_error(case, exc)
        watch.check("while its model was built")
        with checker_memory(case, "tamper's copy of the inputs"):
            snapshot = [x.clone() if isinstance(x, torch.Tensor) else None for x in case.inputs]
        findings: list[Verdict] = []
        late: list[Verdict] = []
        unwritten = _Unwritten(case, self._finding)
        streams: set[str] = set()
        poisoned = 0
        history = _History()
        try:
            for run in ("A", "B", "C"):
                out, stream_finding, used, count = self._run(case, model, run)
                streams.update(used)
                late += [stream_finding] if stream_finding is not None and not late else []
                watch.check(f"during run {run}")
                if run == "A":
                    poisoned = count
                    findings += self._check_inputs(case, snapshot)
                    findings += self._check_alias(case, out)
                    seen = [(o.shape, o.dtype, o.device) for o in out]
                unwritten.add(run, out)
                del out  # one run's outputs at a time (and the masks unwritten keeps)
            findings += self._check_history(case, model, snapshot, seen, watch, history)
        except _NotPlain as exc:
            watch.check("while it ran")
            findings.append(Verdict(Status.WRONG, metric="plain tensor outputs", value=float(len(exc.problems)),
                                    tolerance=0.0, message=f"{case.describe()}: " + "; ".join(exc.problems)))
        except _CandidateRaised as raised:
            watch.check("while it ran")
            if not watch.findings:
                return candidate_error(case, raised.exc)
            findings.append(candidate_error(case, raised.exc))
        except ReferenceFailed:
            raise  # the checker's own memory, or the problem's code: could not judge
        except (MemoryError, torch.OutOfMemoryError) as exc:
            # raised by tamper's own copies and comparisons: the candidate's calls are wrapped
            raise checker_out_of_memory(case, "tamper's copies and comparisons", exc) from exc
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - sys.exit() in a kernel is an error too
            watch.check("while it ran")
            if not watch.findings:
                return candidate_error(case, exc)
            findings.append(candidate_error(case, exc))
        finally:
            for x, s in zip(case.inputs, snapshot):
                if s is not None:
                    x.copy_(s)  # later oracles must see the original inputs
            del snapshot
        by_design = unwritten.flagged() and reference_nondeterministic(case)
        findings = watch.findings + watch.finish() + findings + late + unwritten.findings(by_design)
        streams_l = sorted(streams)
        if findings:
            first = findings[0]
            msg = "; ".join(f.message for f in findings)
            if by_design:
                msg += "; the problem's own Model is nondeterministic here, so determinism was not required"
            if history.unjudged:
                msg += f"; could not judge the history calls: {history.unjudged}"
            return Verdict(Status.WRONG, metric=first.metric, value=first.value, tolerance=first.tolerance,
                           first_bad_index=first.first_bad_index, message=msg,
                           details={"findings": [f.to_json() for f in findings], "side_streams": streams_l,
                                    "poisoned_allocations": poisoned, "history_unjudged": history.unjudged})
        if history.unjudged:
            # Runs A-C and every check that needs no reference found nothing, but the
            # history calls are judged against the reference, which could not run: part of
            # tamper could not judge, so tamper says so rather than ``ok``.
            return Verdict.skipped(f"tamper: runs A-C found nothing (unwritten outputs, input mutation, aliasing, "
                                   f"streams, determinism, plain outputs, patched functions, threads); could not "
                                   f"judge the history calls: {history.unjudged}", reason="reference failed",
                                   side_streams=streams_l, poisoned_allocations=poisoned)
        return Verdict.passed("tamper findings", 0.0, 0.0, side_streams=streams_l, poisoned_allocations=poisoned,
                              history_calls=HISTORY_CALLS, nondeterministic_by_design=by_design)

    # -- the checks -----------------------------------------------------------
    def _finding(self, case: ProblemCase, metric: str, bad: torch.Tensor, what: str) -> Verdict:
        k = int(bad.sum())
        first = int(bad.reshape(-1).nonzero()[0]) if k else None
        return Verdict(Status.WRONG, metric=metric, value=float(k), tolerance=0.0, first_bad_index=first,
                       message=f"{case.describe()}: {what}: {k} / {bad.numel()} elements, first bad flat index {first}")

    def _check_inputs(self, case: ProblemCase, snapshot: list) -> list[Verdict]:
        out = []
        for i, (x, s) in enumerate(zip(case.inputs, snapshot)):
            if s is not None:
                bad = bit_diff(x, s)
                if bool(bad.any()):
                    out.append(self._finding(case, "mutated input elements", bad,
                                             f"input {i} {tuple(x.shape)} {x.dtype} was modified by the candidate"))
        return out

    def _check_alias(self, case: ProblemCase, outputs: list[torch.Tensor]) -> list[Verdict]:
        out = []
        tensors = [(i, x) for i, x in enumerate(case.inputs) if isinstance(x, torch.Tensor)]
        for j, o in enumerate(outputs):
            for i, x in tensors:
                if _overlaps(o, x):
                    try:
                        with torch.no_grad():
                            ref_out = as_tensors(case.model()(*case.inputs))
                    except ReferenceFailed:
                        raise
                    except Exception as exc:  # noqa: BLE001 - the problem's code, not the candidate's
                        raise reference_failure(case, "Model.forward, to see whether it aliases", exc) from exc
                    if not (j < len(ref_out) and _overlaps(ref_out[j], x)):
                        out.append(Verdict(Status.WRONG, metric="aliased outputs", value=1.0, tolerance=0.0,
                                           message=f"{case.describe()}: output {j} {tuple(o.shape)} shares memory "
                                                   f"with input {i} (Model returns no such alias)"))
        return out

    def _check_history(self, case: ProblemCase, model: torch.nn.Module, snapshot: list, seen: list[tuple],
                       watch: "_Watch", history: "_History") -> list[Verdict]:
        """Calls 4-6 of the same instance, on other inputs, each judged against the reference.

        The inputs of each call are made when its turn comes and dropped after it (one
        call's inputs, outputs and reference at a time). A reference that raises leaves
        ``history.unjudged`` saying why, and the remaining calls are not made.
        """
        findings = []
        for k, (what, inputs, values) in enumerate(_history_variants(case)):
            label = f"tamper call {4 + k} of {3 + HISTORY_CALLS}: {what}"
            expected = ([torch.full(shape, _decoy_value(dtype), dtype=dtype, device=device)
                         for shape, dtype, device in seen] if "decoy" in what else [])
            decoys = [e.clone() for e in expected]
            raw = _call_with_decoy(model, inputs, expected)
            synchronize(case.device)
            watch.check(f"during {label}")
            problems = _plain_output_problems(case, raw)
            if problems:
                raise _NotPlain(problems)
            outs = as_tensors(raw)
            del raw, inputs
            vcase = case.with_inputs(values, label)  # never given to the candidate: no copy needed
            for j, (e, d) in enumerate(zip(expected, decoys)):
                if bool(bit_diff(e, d).any()):
                    findings.append(self._finding(vcase, "reference output reachable", bit_diff(e, d),
                                                  f"the candidate wrote into decoy {j} of the expected output, a "
                                                  "tensor it was never given (found through gc or the caller's frame)"))
                for i, o in enumerate(outs):
                    if (o.dtype != torch.bool and o.numel() and o.shape == e.shape and o.dtype == e.dtype
                            and not bool(bit_diff(o, e).any())):
                        findings.append(Verdict(Status.WRONG, metric="reference output reachable", value=1.0,
                                                tolerance=0.0, message=f"{vcase.describe()}: output {i} is a copy of "
                                                "the decoy expected output in the caller's frame: the candidate reads "
                                                "the checker's answer instead of computing it"))
            del expected, decoys
            try:
                # the reference runs after the candidate, in another frame
                v = _judge_history_call(vcase, outs, floor=lambda: history_floor(case, snapshot))
            except CheckerOutOfMemory:
                raise
            except ReferenceFailed as exc:
                history.unjudged = str(exc)
                break
            finally:
                release_case(vcase)
            if v is not None:
                findings.append(v)
            del outs, vcase, values  # before the next call's inputs are made
        return findings


def _history_variants(case: ProblemCase) -> Iterator[tuple[str, list[Any], list[Any]]]:
    """(what, the inputs the candidate gets, the values they hold) of each history call, made
    lazily: new values at the case's own input addresses, the same values with the last
    row's extremes swapped, fresh values at new addresses (with a decoy)."""
    fresh1 = _fresh_inputs(case, 1)
    for x, v in zip(case.inputs, fresh1):
        if isinstance(x, torch.Tensor):
            x.copy_(v)
    yield "same input addresses, new values", list(case.inputs), fresh1
    if HISTORY_CALLS < 2:
        return
    swapped = _swap_in_last_row(case, fresh1)
    del fresh1
    yield ("the previous values, largest and smallest of the last row swapped", *_twice(swapped))
    del swapped
    if HISTORY_CALLS < 3:
        return
    yield ("fresh values at new addresses, a decoy of the expected output alive", *_twice(_fresh_inputs(case, 2)))


class _History:
    """What the history calls could not judge (the reference raised), if anything."""

    def __init__(self) -> None:
        self.unjudged: str | None = None


class _Unwritten:
    """Unwritten and nondeterministic elements, from runs A, B and C seen one at a time.

    Keeps boolean masks (A differs from B; A holds NaN where B does not) and one run's
    outputs, never all three runs. Two readings (:meth:`findings`): strict, for problems
    whose own ``Model`` is deterministic (runs B and C must agree bit for bit, and an
    element where A and B differ while B and C agree came from the poison); and, for
    problems nondeterministic by design (cuDNN's transposed convolutions and LSTMs sum
    with atomics), determinism is not required and an element is unwritten only where it
    follows the poison itself (NaN in run A, not in run B; for integers, A and B differ
    where B and C agree).
    """

    def __init__(self, case: ProblemCase, finding) -> None:  # noqa: ANN001
        self.case, self.finding = case, finding
        self.prev: list[torch.Tensor] | None = None
        self.a_vs_b: list[torch.Tensor] = []
        self.follows: list[torch.Tensor] = []
        self.strict: list[Verdict] = []
        self.loose: list[Verdict] = []

    def add(self, run: str, outputs: list[torch.Tensor]) -> None:
        if self.prev is not None:
            for j, (x, y) in enumerate(zip(self.prev, outputs)):
                if x.shape != y.shape:
                    self.strict = self.loose = [Verdict(
                        Status.WRONG, metric="output shape", message=f"{self.case.describe()}: output {j} changes "
                        f"shape between runs: {tuple(x.shape)} in the run before {run}, {tuple(y.shape)} in run {run}")]
                    self.prev = None
                    return
            if run == "B":
                self.a_vs_b = [bit_diff(x, y) for x, y in zip(self.prev, outputs)]
                self.follows = [_follows_poison(x, y, d) for x, y, d in zip(self.prev, outputs, self.a_vs_b)]
            elif run == "C":
                for j, (y, z, ab, follows) in enumerate(zip(self.prev, outputs, self.a_vs_b, self.follows)):
                    nondet = bit_diff(y, z)
                    what = (f"output {j} {tuple(y.shape)} {y.dtype} holds elements the kernel never wrote (they "
                            "follow the poison put in uninitialised memory)")
                    unwritten = ab & ~nondet
                    if bool(unwritten.any()):
                        self.strict.append(self.finding(self.case, "unwritten output elements", unwritten, what))
                    if bool(nondet.any()):
                        self.strict.append(self.finding(self.case, "nondeterministic elements", nondet,
                                                        f"output {j} differs bit for bit between two identical runs"))
                    if bool(follows.any()):
                        self.loose.append(self.finding(self.case, "unwritten output elements", follows, what))
                self.a_vs_b, self.follows = [], []
                self.prev = None
                return
        elif run != "A":
            return
        self.prev = outputs

    def flagged(self) -> bool:
        """Whether the strict reading found anything (only then is the reference's own
        determinism worth a look)."""
        return bool(self.strict)

    def findings(self, nondeterministic_by_design: bool = False) -> list[Verdict]:
        return self.loose if nondeterministic_by_design else self.strict


def _follows_poison(a: torch.Tensor, b: torch.Tensor, differs: torch.Tensor) -> torch.Tensor:
    """Elements that carry run A's poison: NaN in A but not in B (floating outputs; NaN
    propagates through arithmetic, rounding noise never makes one), else where A and B differ."""
    if a.is_floating_point() or a.is_complex():
        return torch.isnan(a) & ~torch.isnan(b)
    return differs


def reference_nondeterministic(case: ProblemCase) -> bool:
    """Whether the problem's own ``Model`` gives other bits on a second identical run on the
    case's device (cached on the case): then nondeterminism is the problem's, not the
    candidate's. A reference that raises counts as deterministic (the strict reading stays)."""
    key = "reference nondeterministic"
    if key not in case._cache:
        try:
            model = case.model()
            runs = []
            for _ in range(2):
                inputs = [x.clone() if isinstance(x, torch.Tensor) else x for x in case.inputs]
                with torch.no_grad(), problem_precision(case):
                    runs.append(as_tensors(model(*inputs)))
                synchronize(case.device)
            case._cache[key] = any(x.shape != y.shape or bool(bit_diff(x, y).any()) for x, y in zip(*runs))
        except Exception:  # noqa: BLE001 - the problem's own failure: judged strictly, reported elsewhere
            case._cache[key] = False
    return case._cache[key]


def history_floor(case: ProblemCase, original_inputs: list[Any]) -> list[float]:
    """Per output, the largest error the derived error model allows on the original case
    (``max(derive(case).allowed)``, 0 for exact outputs): the rounding a correct kernel
    may make at the magnitude of the computation, even where its outputs are near 0
    (a GroupNorm followed by a mean: outputs about 1e-16, rounding about 1e-8).

    Cached on the case (``derived-floor``, kept by :func:`release_case`); computed only
    when a history call fails the plain tolerance. A model that cannot be derived gives
    no floor (the plain tolerance alone).
    """
    if "derived-floor" in case._cache:
        return case._cache["derived-floor"]
    from .derived import derive

    original = case.with_inputs([s if s is not None else x for s, x in zip(original_inputs, case.inputs)],
                                case.label)
    try:
        derive(original)  # stores ``derived-floor`` on ``original``
        floor = original._cache.get("derived-floor", [])
    except CheckerOutOfMemory:
        raise
    except (MemoryError, torch.OutOfMemoryError) as exc:
        raise checker_out_of_memory(case, "the derived error model (tamper's history floor)", exc) from exc
    except Exception:  # noqa: BLE001 - no model derivable: the plain tolerance alone
        floor = []
    finally:
        release_case(original)
    case._cache["derived-floor"] = floor
    return floor


def _judge_history_call(case: ProblemCase, outputs: list[torch.Tensor],
                        floor: Callable[[], list[float]] = lambda: []) -> Verdict | None:
    """``wrong`` unless ``|got - ref| <= HISTORY_TOL * (max|ref| + |ref|) + floor`` against the
    float64 reference (NaN must meet NaN); ``None`` when the outputs pass.

    The outputs are first held against ``Model`` at the problem's dtype (no float64 copy of
    the model, no float64 evaluation: on a CPU a float64 convolution costs 3 to 20 float32
    ones); they pass when within the tolerance of it. Only outputs that do not are judged
    against the float64 reference, and ``floor()`` (per output, see :func:`history_floor`)
    is asked for only when an output fails that without it. Compared in chunks: no float64
    copy of a whole output is made.
    """
    if case.dtype != torch.float64:
        try:
            if _within_history_tol(case, outputs, case.reference(case.dtype)):
                return None
        except CheckerOutOfMemory:
            raise
        except ReferenceFailed:
            pass  # the float64 reference decides (and says why, should it fail too)
    refs = case.reference()
    metric = "history err/(atol+rtol*|ref|)"
    bad_structure = structure_verdict(case, outputs, refs, metric=metric)
    if bad_structure is not None:
        return bad_structure
    floors: list[float] | None = None
    for i, (got, ref) in enumerate(zip(outputs, refs)):
        scale = max_abs_finite(ref)
        result = None
        for _ in range(2):
            extra = floors[i] if floors is not None and i < len(floors) else 0.0
            result = chunked_compare(got, ref, lambda r, lo, hi, s=scale, e=extra: HISTORY_TOL * (s + r.abs()) + e)
            if result.mismatched == 0 or floors is not None:
                break
            floors = floor()
        if result.mismatched:
            extra = floors[i] if floors and i < len(floors) else 0.0
            return chunked_mismatch_verdict(
                case, i, got, ref, result, metric=metric, tolerance=1.0,
                extra=f"wrong on a later call of the same instance (|err| <= {HISTORY_TOL:g} x (max|ref| + |ref|) "
                      f"+ {extra:.3g}, the derived error model's largest allowed error on the original case, "
                      "against the float64 reference): the candidate's answer depends on earlier calls, their "
                      "inputs' addresses or its call count")
    return None


def _within_history_tol(case: ProblemCase, outputs: list[torch.Tensor], refs: list[torch.Tensor]) -> bool:
    """Every output has the reference's shape and lies within the history tolerance of it."""
    if len(outputs) != len(refs) or any(tuple(o.shape) != tuple(r.shape) for o, r in zip(outputs, refs)):
        return False
    for got, ref in zip(outputs, refs):
        scale = max_abs_finite(ref)
        within = _within_loosely(got, ref, scale)
        if within is None:
            within = not chunked_compare(got, ref, lambda r, lo, hi, s=scale: HISTORY_TOL * (s + r.abs())).mismatched
        if not within:
            return False
    return True


#: Output dtypes :func:`_within_loosely` compares in float32.
_LOOSE_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _within_loosely(got: torch.Tensor, ref: torch.Tensor, scale: float) -> bool | None:
    """The history tolerance against a reference at the candidate's own dtype, in float32
    and in fewer passes than :func:`~.compare.chunked_compare`'s float64 (a third of the
    memory traffic; counted on the CPU by ``benchmarks/oracle_traffic.py``, the three history
    comparisons were about a quarter of ``strongest``'s passes over KernelBench L1 7's
    output). ``None`` where it cannot decide: another dtype, or a NaN or an
    infinity anywhere (they must meet their like: the full comparison decides). float32
    rounds the error and the allowance by at most 2^-24 of themselves, nothing against
    the tolerance's 1e-2; and ``False`` here is no verdict: the outputs are then judged
    against the float64 reference (:func:`_judge_history_call`)."""
    if got.dtype != ref.dtype or got.dtype not in _LOOSE_DTYPES or got.shape != ref.shape:
        return None
    gf, rf = got.reshape(-1), ref.reshape(-1)
    step = chunk_elements(got.device)
    for lo in range(0, gf.numel(), step):
        g, r = gf[lo:lo + step].float(), rf[lo:lo + step].float()
        err = torch.sub(g, r).abs_()
        if finite_max_or_none(err) is None:   # NaN or inf in either: not decided here
            return None
        allowed = r.abs().mul_(HISTORY_TOL).add_(HISTORY_TOL * scale)
        if bool((err > allowed).any()):
            return False
    return True


def _twice(values: list[Any]) -> tuple[list[Any], list[Any]]:
    """(inputs at new addresses, the values they hold) for a history call."""
    return [v.clone() if isinstance(v, torch.Tensor) else v for v in values], values


def _fresh_inputs(case: ProblemCase, k: int) -> list[Any]:
    """The problem's own inputs at the case's shape for another seed (on the case's device)."""
    return ProblemCase.make(case.problem, seed=case.seed + 7919 * k, device=case.device, shapes=case.shapes).inputs


def _swap_in_last_row(case: ProblemCase, values: list[Any]) -> list[Any]:
    """``values`` with the largest and smallest elements of the last row of each floating input swapped.

    Sums, means, row sums (so probabilities stay normalised), the multiset of values and
    every earlier row are unchanged: what a partial fingerprint of the input would hash.
    The two extremes make the largest change a swap can.
    """
    kinds = case.problem.input_kinds(len(values))
    out = []
    for v, kind in zip(values, kinds):
        if isinstance(v, torch.Tensor) and v.is_floating_point() and kind != "fixed" and v.numel() >= 2:
            v = v.clone().contiguous()
            row = v.view(-1, v.shape[-1] if v.dim() else 1)[-1]
            hi, lo = int(row.argmax()), int(row.argmin())
            row[hi], row[lo] = row[lo].clone(), row[hi].clone()
        out.append(v)
    return out


def _decoy_value(dtype: torch.dtype) -> Any:
    if dtype.is_floating_point or dtype.is_complex:
        return POISON_B
    return True if dtype == torch.bool else torch.iinfo(dtype).max


class _NotPlain(Exception):
    """An output is not a plain dense tensor: nothing else about it can be trusted."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


class _Watch:
    """Patched functions, changed switches and threads left running, seen around each call."""

    def __init__(self, case: ProblemCase) -> None:
        self.case = case
        self.flags = integrity.flags()
        self.threads = set(threading.enumerate())
        self.started: list[threading.Thread] = []
        self.findings: list[Verdict] = []
        self._seen: set[str] = set()

    def check(self, when: str) -> None:
        """Record (and undo) every replaced function and changed switch, and every thread the
        candidate left running, saying when it happened."""
        names = [n for n in integrity.replaced() if n not in self._seen]
        self._seen.update(names)
        if names:
            self.findings.append(Verdict(
                Status.WRONG, metric="patched functions", value=float(len(names)), tolerance=0.0,
                message=f"{self.case.describe()}: the candidate replaced {', '.join(names)} {when} (restored): "
                        "checks and timers that call them would be fooled"))
        changed = integrity.flag_changes(self.flags)
        if changed:
            self.findings.append(Verdict(
                Status.WRONG, metric="changed global switches", value=float(len(changed)), tolerance=0.0,
                message=f"{self.case.describe()}: the candidate changed {'; '.join(changed)} {when} (restored): "
                        "the reference computed after it would share its numerics"))
        # a pool worker waiting for work is looked at again after each later call
        left = [t for t in threading.enumerate()
                if t not in self.threads and t.is_alive() and not runs_nothing(t)]
        self.threads.update(left)
        self.started += left
        if left:
            names_t = ", ".join(f"{t.name!r}" + (" (daemon)" if t.daemon else "") for t in left)
            self.findings.append(Verdict(
                Status.WRONG, metric="threads left running", value=float(len(left)), tolerance=0.0,
                message=f"{self.case.describe()}: the candidate started thread(s) {names_t} that were still running "
                        f"when its call returned ({when}): work deferred past the timer and the check"))

    def finish(self) -> list[Verdict]:
        """Give the threads it left a moment to end, so they do not write into later checks."""
        settle(self.started, THREAD_GRACE_S)
        return []
