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
* **determinism** - runs B and C (same poison, same inputs) must agree bit for bit.

Tamper judges the candidate against itself; it needs no reference (it runs ``Model``
only to decide whether an alias is legitimate).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from ..problems.problem_case import ProblemCase, as_tensors
from ...verdict import Status, Verdict
from .base import Driver, Subject, candidate_error, synchronize

#: Poison of run B and C for floating outputs (finite, and no plausible result).
POISON_B = -31337.0
#: GPU cycles a side stream sleeps before the candidate's work on it (about 25 ms).
SIDE_STREAM_DELAY_CYCLES = 50_000_000

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


class PoisonEmpty(TorchFunctionMode):
    """Fill every uninitialised tensor created while active with the poison of ``run``."""

    def __init__(self, run: str) -> None:
        super().__init__()
        self.run = run
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func in _FACTORIES and isinstance(out, torch.Tensor) and out.numel():
            out.fill_(_poison_value(out.dtype, self.run))
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


class TamperOracle(Driver):
    """Unwritten outputs, input mutation, aliasing, unsynchronised streams, determinism."""

    name = "tamper"

    def _run(
        self, case: ProblemCase, model: torch.nn.Module, run: str
    ) -> tuple[list[torch.Tensor], list[torch.Tensor], list[str], int]:
        """One poisoned run: (outputs after a device sync, copies taken before it, side streams, poisoned count)."""
        streams: list[str] = []
        poison = PoisonEmpty(run)
        with torch.no_grad(), delayed_side_streams(case.device, streams), poison:
            out = as_tensors(model(*case.inputs))
        # Copy on the caller's stream before any device-wide wait: what a caller sees.
        early = [o.clone() for o in out]
        synchronize(case.device)
        return out, early, streams, poison.count

    def drive(self, case: ProblemCase, subject: Subject) -> Verdict:
        try:
            model = subject.model(case)
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - sys.exit() in a kernel is an error too
            return candidate_error(case, exc)
        snapshot = [x.clone() if isinstance(x, torch.Tensor) else None for x in case.inputs]
        findings: list[Verdict] = []
        runs = {}
        try:
            for run in ("A", "B", "C"):
                runs[run] = self._run(case, model, run)
                if run == "A":
                    findings += self._check_inputs(case, snapshot)
                    findings += self._check_alias(case, runs["A"][0])
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - sys.exit() in a kernel is an error too
            return candidate_error(case, exc)
        finally:
            for x, s in zip(case.inputs, snapshot):
                if s is not None:
                    x.copy_(s)  # later oracles must see the original inputs
        streams = sorted({s for r in runs.values() for s in r[2]})
        findings += self._check_streams(case, runs, streams)
        findings += self._check_unwritten(case, runs)
        if findings:
            first = findings[0]
            msg = "; ".join(f.message for f in findings)
            return Verdict(Status.WRONG, metric=first.metric, value=first.value, tolerance=first.tolerance,
                           first_bad_index=first.first_bad_index, message=msg,
                           details={"findings": [f.to_json() for f in findings], "side_streams": streams,
                                    "poisoned_allocations": runs["A"][3]})
        return Verdict.passed("tamper findings", 0.0, 0.0, side_streams=streams, poisoned_allocations=runs["A"][3])

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
                    with torch.no_grad():
                        ref_out = as_tensors(case.model()(*case.inputs))
                    if not (j < len(ref_out) and _overlaps(ref_out[j], x)):
                        out.append(Verdict(Status.WRONG, metric="aliased outputs", value=1.0, tolerance=0.0,
                                           message=f"{case.describe()}: output {j} {tuple(o.shape)} shares memory "
                                                   f"with input {i} (Model returns no such alias)"))
        return out

    def _check_streams(self, case: ProblemCase, runs: dict, streams: list[str]) -> list[Verdict]:
        for run, (out, early, _, _) in runs.items():
            for j, (o, e) in enumerate(zip(out, early)):
                bad = bit_diff(o, e)
                if bool(bad.any()):
                    via = f" (work on {', '.join(streams)})" if streams else ""
                    return [self._finding(case, "elements not ready on the caller's stream", bad,
                                          f"output {j} changed after the call returned, run {run}: it was "
                                          f"computed on a stream the caller's stream does not wait for{via}")]
        return []

    def _check_unwritten(self, case: ProblemCase, runs: dict) -> list[Verdict]:
        (a, *_), (b, *_), (c, *_) = runs["A"], runs["B"], runs["C"]
        out = []
        for j, (x, y, z) in enumerate(zip(a, b, c)):
            if x.shape != y.shape or y.shape != z.shape:
                return [Verdict(Status.WRONG, metric="output shape", message=f"{case.describe()}: output {j} "
                                f"changes shape between runs: {tuple(x.shape)}, {tuple(y.shape)}, {tuple(z.shape)}")]
            nondet = bit_diff(y, z)
            unwritten = bit_diff(x, y) & ~nondet
            if bool(unwritten.any()):
                out.append(self._finding(case, "unwritten output elements", unwritten,
                                         f"output {j} {tuple(x.shape)} {x.dtype} holds elements the kernel never "
                                         "wrote (they follow the poison put in uninitialised memory)"))
            if bool(nondet.any()):
                out.append(self._finding(case, "nondeterministic elements", nondet,
                                         f"output {j} differs bit for bit between two identical runs"))
        return out
