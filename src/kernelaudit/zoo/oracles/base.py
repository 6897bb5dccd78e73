"""The oracle protocol, the subject under test, and sequences of oracles.

Every oracle has one entry point, ``judge(case, got) -> Verdict``:

* ``case`` is a :class:`~kernelaudit.zoo.problems.problem_case.ProblemCase` (problem, inputs,
  init inputs, seed, device, dtype, shapes);
* ``got`` is either the candidate's output for that case (a tensor or a tuple of
  tensors) or a :class:`Subject`, the candidate itself, which can be run on any case.

Comparators (``assert-close``, ``ulp``, ``bound``) accept both: given a subject they
compute the reference first, then run the subject once on copies of the inputs (a
candidate that clobbers its inputs spoils neither the reference nor a later oracle;
catching the clobbering is ``tamper``'s job). Drivers (``kernelbench``, ``shapes``, ``values``,
``tamper``) must run the candidate several times or on other cases, so they need a
subject; given a bare output they raise :class:`~kernelaudit.errors.InvalidArgument`.
"""

from __future__ import annotations

import contextlib
import traceback
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from ...errors import InvalidArgument
from ..problems.problem_case import (CheckerOutOfMemory, ProblemCase, ReferenceFailed, as_tensors,
                                     build_candidate_model, checker_out_of_memory, is_out_of_memory,
                                     memory_held, problem_precision, release_case, release_models)
from ..problems.loader import Candidate
from ...verdict import Status, Verdict, worst


def synchronize(device: str) -> None:
    """Wait for every stream of ``device`` (a no-op on CPU)."""
    if str(device).startswith("cuda") and torch.cuda.is_available():
        torch.cuda.synchronize(torch.device(device))


class Subject:
    """The candidate under test: ``ModelNew`` built per case (seed 42, like ``Model``).

    ``subject(case)`` runs the forward on ``case.inputs`` under ``torch.no_grad()`` at the
    problem's precision (:func:`problem_precision`: no TF32 unless the problem allows
    it), waits for the device and returns the outputs as a list of tensors. Exceptions
    from the candidate propagate; :func:`run_subject` turns them into verdicts.
    """

    def __init__(self, candidate: Candidate) -> None:
        self.candidate = candidate
        self._models: dict[tuple, torch.nn.Module] = {}

    @property
    def name(self) -> str:
        return self.candidate.name

    def fresh(self) -> "Subject":
        """The same candidate with no instance built yet: each oracle of a sequence gets
        one, so a stateful candidate's verdict does not depend on oracle order."""
        return Subject(self.candidate)

    def model(self, case: ProblemCase, *, deterministic: bool = True) -> torch.nn.Module:
        """This subject's ``ModelNew`` instance for the case's shape, device and mode (built
        once): the checks' mode, or with ``deterministic=False`` KernelBench's own."""
        key = (str(case.device), tuple(sorted(case.shapes.items())), deterministic)
        if key not in self._models:
            self._models[key] = build_candidate_model(case, self.candidate, deterministic=deterministic)
        return self._models[key]

    def __call__(self, case: ProblemCase, inputs: Sequence[Any] | None = None) -> list[torch.Tensor]:
        model = self.model(case)
        with torch.no_grad(), problem_precision(case):
            out = model(*(case.inputs if inputs is None else inputs))
        synchronize(case.device)
        return as_tensors(out)


class CandidateFailed(Exception):
    """The candidate raised; carries the error verdict."""

    def __init__(self, verdict: Verdict) -> None:
        super().__init__(verdict.message)
        self.verdict = verdict


#: Device memory other processes may hold before a candidate's out-of-memory counts as the
#: device being shared rather than the candidate's own appetite (a CUDA context is ~0.5 GiB).
SHARED_DEVICE_GIB = 2.0


def memory_of_others_gib(device: str | torch.device) -> float | None:
    """GiB of ``device`` held outside this process's PyTorch allocator (other processes, and
    this process's CUDA context); ``None`` off CUDA."""
    if not str(device).startswith("cuda") or not torch.cuda.is_available():
        return None
    dev = torch.device(device)
    free, total = torch.cuda.mem_get_info(dev)
    return max(0.0, (total - free - torch.cuda.memory_reserved(dev)) / 2**30)


def candidate_error(case: ProblemCase, exc: BaseException) -> Verdict:
    """An ``error`` verdict for an exception raised by the candidate on ``case``.

    An out-of-memory in the candidate's own forward stays its error, with how much the
    checker held then, so a reader can tell whose memory it was; but where other processes
    held device memory (a GPU shared by several checks), the candidate was not given the
    device it would have alone: the case is not judged (``skipped``), never blamed on it."""
    tb = traceback.extract_tb(exc.__traceback__)
    where = f" at {tb[-1].filename}:{tb[-1].lineno}" if tb else ""
    held = ""
    if is_out_of_memory(exc):
        held = f" (the checker held {memory_held(case.device)})"
        others = memory_of_others_gib(case.device)
        if others is not None and others > SHARED_DEVICE_GIB:
            return Verdict.skipped(
                f"{case.describe()}: could not judge: the candidate ran out of device memory{where} while other "
                f"processes held {others:.1f} GiB of {case.device}{held}: {str(exc).splitlines()[0][:160]}; "
                "check it again with the device to itself", exception=type(exc).__name__, shared_device_gib=others)
    return Verdict.error(
        f"{case.describe()}: candidate raised {type(exc).__name__}{where}: {exc}{held}",
        exception=type(exc).__name__,
    )


def run_subject(subject: Subject, case: ProblemCase, inputs: Sequence[Any] | None = None) -> list[torch.Tensor]:
    """Run the subject; an exception becomes :class:`CandidateFailed` with an error verdict."""
    try:
        return subject(case, inputs)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - any candidate failure, even sys.exit(), is an error verdict
        raise CandidateFailed(candidate_error(case, exc)) from exc


class Oracle(ABC):
    """``judge(case, got) -> Verdict``; ``name`` is the one ``--oracle`` accepts."""

    name: str = "oracle"

    @abstractmethod
    def judge(self, case: ProblemCase, got: Any) -> Verdict:
        """Judge the candidate (a :class:`Subject`) or its output on ``case``."""

    def __repr__(self) -> str:
        return f"<oracle {self.name}>"


class Comparator(Oracle):
    """An oracle that judges one output against a reference computed from the case."""

    def judge(self, case: ProblemCase, got: Any) -> Verdict:
        if isinstance(got, Subject):
            # A sequence may judge one case with one comparator twice (``bound`` and
            # ``shapes`` both look at the fixed shape): the candidate runs once.
            # Keyed by the candidate, not the subject: every oracle's instance is fresh, so
            # the first run of a fresh instance on this case is the same for every oracle.
            key = ("verdict", type(self).__name__, self.name, id(got.candidate))
            if key not in case._cache:
                case._cache[key] = (got.candidate, self._judge_subject(case, got))  # kept alive: id stays unique
            return case._cache[key][1]
        return self.compare(case, as_tensors(got))

    def _judge_subject(self, case: ProblemCase, got: "Subject") -> Verdict:
        with checker_memory(case, f"{self.name}'s reference and error model"):
            self.prepare(case)  # the reference first
            # Copies, so that a candidate that clobbers its inputs spoils neither this
            # comparison nor the next oracle's: catching that is tamper's job.
            inputs = [x.clone() if isinstance(x, torch.Tensor) else x for x in case.inputs]
        try:
            outputs = run_subject(got, case, inputs)
        except CandidateFailed as failed:
            return failed.verdict
        del inputs
        with checker_memory(case, f"{self.name}'s comparison"):
            return self.compare(case, outputs)

    def prepare(self, case: ProblemCase) -> None:
        """Compute (and cache on the case) whatever reference ``compare`` needs."""
        case.reference()

    @abstractmethod
    def compare(self, case: ProblemCase, outputs: list[torch.Tensor]) -> Verdict:
        """Judge ``outputs`` of the candidate on ``case``."""


class Driver(Oracle):
    """An oracle that runs the candidate itself (on other inputs, shapes or several times)."""

    def judge(self, case: ProblemCase, got: Any) -> Verdict:
        if not isinstance(got, Subject):
            raise InvalidArgument(
                f"Cannot judge a bare output with oracle {self.name}: it runs the candidate "
                f"itself, so pass got=Subject(candidate)"
            )
        return self.drive(case, got)

    @abstractmethod
    def drive(self, case: ProblemCase, subject: Subject) -> Verdict:
        """Run ``subject`` as the oracle needs and judge the results."""


def combine(name: str, verdicts: dict[str, Verdict], *, context: str = "") -> Verdict:
    """One verdict for several: the worst one's status and evidence; all of them in details."""
    if not verdicts:
        return Verdict.skipped(f"{name}: nothing to judge")
    names = list(verdicts)
    w = worst(list(verdicts.values()))
    wname = names[list(verdicts.values()).index(w)]
    counts: dict[str, int] = {}
    for v in verdicts.values():
        counts[v.status.value] = counts.get(v.status.value, 0) + 1
    summary = ", ".join(f"{n} {s}" for s, n in counts.items())
    if w.status is Status.OK:
        message = f"{context}{len(verdicts)} checks ok" if context else f"{len(verdicts)} checks ok"
    else:
        message = f"{context}{summary}; first {w.status.value}: [{wname}] {w.message}"
    unjudged = [k for k, v in verdicts.items() if v.status is Status.SKIPPED and k != wname]
    if unjudged:  # a member that could not judge is never silent, even behind a worse verdict
        message += "; could not judge with " + "; ".join(f"[{k}] {verdicts[k].message}" for k in unjudged)
    return Verdict(
        w.status,
        metric=w.metric,
        value=w.value,
        tolerance=w.tolerance,
        bad_batches=w.bad_batches,
        first_bad_index=w.first_bad_index,
        message=message,
        details={"checks": {k: v.to_json() for k, v in verdicts.items()}, "worst": wname},
    )


class SequenceOracle(Oracle):
    """Several oracles applied in order; the verdict is the worst (error > wrong > skipped > ok).

    The sequence keeps going after a failure so that the evidence of every member is
    recorded in ``details["checks"]``.
    """

    def __init__(self, oracles: Sequence[Oracle]) -> None:
        if not oracles:
            raise InvalidArgument("Cannot have an empty oracle sequence: name at least one oracle")
        self.oracles = list(oracles)
        self.name = ",".join(o.name for o in self.oracles)

    def judge(self, case: ProblemCase, got: Any) -> Verdict:
        verdicts = {}
        for oracle in self.oracles:
            member = got.fresh() if isinstance(got, Subject) else got
            verdicts[oracle.name] = judge_or_unjudged(oracle, case, member)
            free_device_memory(case)  # one oracle's working set at a time
        if len(verdicts) == 1:
            return next(iter(verdicts.values()))
        return combine(self.name, verdicts)


def judge_or_unjudged(oracle: Oracle, case: ProblemCase, got: Any) -> Verdict:
    """``oracle.judge(case, got)``, or ``skipped`` saying why when the reference cannot run
    or the checker runs out of memory.

    A reference that raises is the problem's failure, never the candidate's: the
    oracle could not judge, and a sequence goes on with its other members. The same
    for an out-of-memory error that leaves an oracle: the candidate's own calls turn
    their errors into verdicts where they run (:func:`run_subject`), so what escapes
    was raised by the checker's own computations.
    """
    try:
        return oracle.judge(case, got)
    except CheckerOutOfMemory as exc:
        return Verdict.skipped(f"{oracle.name}: {exc}", reason="checker out of memory")
    except ReferenceFailed as exc:
        return Verdict.skipped(f"{oracle.name}: {exc}", reason="reference failed")
    except (MemoryError, torch.OutOfMemoryError) as exc:
        return Verdict.skipped(f"{oracle.name}: {checker_out_of_memory(case, f'{oracle.name} checks', exc)}",
                               reason="checker out of memory")


@contextlib.contextmanager
def checker_memory(case: ProblemCase, what: str) -> Iterator[None]:
    """Turn an out-of-memory error raised by the checker's own computation (never the
    candidate's forward) into :class:`CheckerOutOfMemory`: could not judge."""
    try:
        yield
    except (MemoryError, torch.OutOfMemoryError) as exc:
        raise checker_out_of_memory(case, what, exc) from exc


def free_device_memory(case: ProblemCase) -> None:
    """Drop the case's large cached tensors and, on CUDA, give the allocator's free blocks
    back: the next oracle's working set then fits where this one's was (the caching
    allocator otherwise keeps blocks sized for the previous working set: fragmentation)."""
    release_case(case)
    if str(case.device).startswith("cuda") and torch.cuda.is_available():
        torch.cuda.empty_cache()


def release_shape(vcase: ProblemCase, subject: Subject) -> None:
    """Free the ``Model`` and ``ModelNew`` instances built for a case at another shape than
    the judged one (a boundary shape, the small shape): they are never used again, and kept
    they add up (a model per shape, 3 GB on a large problem)."""
    release_models(vcase)
    free_device_memory(vcase)
    key = tuple(sorted(vcase.shapes.items()))
    models = getattr(subject, "_models", {})
    for k in [k for k in models if k[1] == key]:
        del models[k]
