"""``suite:FILE``: replay a per-problem test suite (a few chosen inputs) and judge each.

A *suite* is, per problem, a short list of inputs, each one an :class:`InputSpec`
(shape constants, value kind, seed): enough to regenerate the input anywhere with the
problem file alone, so any harness can replay it. ``kernelaudit mutate`` chooses the
inputs (:mod:`kernelaudit.zoo.mutate.suites`: the ones that kill the most mutants)
and ``kernelaudit suite export`` writes the file; ``--oracle suite:FILE`` judges a
candidate on its problem's inputs, each with the derived error model comparator
(``bound``, falling back to allclose where no model can be derived).

File format (JSON, ``"format": "kernelaudit-suite/1"``)::

    {"format": "kernelaudit-suite/1", "k": 2, "source": "<campaign dir>",
     "problems": {"<problem name>": {"path": "<problem file>", "killed": 40, "killable": 41,
                  "inputs": [{"shapes": {"N": 17}, "kind": "normal", "seed": 1,
                              "label": "normal (N=17) seed 1"}, ...]}}}

``kind`` is ``rand`` (the problem's own ``get_inputs()`` at ``seed``) or a value kind
of :mod:`.values` (``normal``, ``negative``, ``large``, ``small``, ``mixed``,
``neg_inf_rows``, ``ties``) drawn with ``seed`` over the shapes and dtypes
``get_inputs()`` gives at those shape constants.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import InvalidArgument
from ...verdict import Verdict
from ..problems.problem_case import KERNELBENCH_SEED, ProblemCase, release_models
from .base import Comparator, Driver, Subject, combine, judge_or_unjudged

#: The ``format`` field of a suite file.
SUITE_FORMAT = "kernelaudit-suite/1"
#: Input kinds: the problem's own draw, or a value kind of :mod:`.values`.
RAND = "rand"


@dataclass(frozen=True)
class InputSpec:
    """One regenerable input: every shape constant, a value kind and a seed."""

    shapes: tuple[tuple[str, int], ...]
    kind: str
    seed: int

    @classmethod
    def make(cls, shapes: dict[str, int], kind: str, seed: int) -> "InputSpec":
        return cls(tuple(sorted((str(k), int(v)) for k, v in shapes.items())), str(kind), int(seed))

    @property
    def label(self) -> str:
        """``normal (N=17) seed 1``: stable, the key of a kill-matrix column (no ``[...]``: rich markup)."""
        return f"{self.kind} ({', '.join(f'{k}={v}' for k, v in self.shapes)}) seed {self.seed}"

    def to_json(self) -> dict[str, Any]:
        return {"shapes": dict(self.shapes), "kind": self.kind, "seed": self.seed, "label": self.label}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "InputSpec":
        try:
            return cls.make(dict(d["shapes"]), d["kind"], d["seed"])
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidArgument(f"Cannot read suite input {d!r}: it needs shapes (name -> int), kind and seed "
                                  f"({exc})") from exc

    def case(self, problem, device: str = "cpu") -> ProblemCase:  # noqa: ANN001
        """The input as a case of ``problem`` on ``device`` (raises when the reference rejects the shape)."""
        from .values import ADVERSARIAL_KINDS, STRATA, VALUE_KINDS, value_inputs

        allowed = (RAND,) + VALUE_KINDS + (STRATA,) + ADVERSARIAL_KINDS
        if self.kind not in allowed:
            raise InvalidArgument(f"Cannot have suite input kind {self.kind!r}: allowed are {', '.join(allowed)}")
        base = ProblemCase.make(problem, seed=self.seed, device=device, shapes=dict(self.shapes), label=self.label)
        if self.kind == RAND:
            return base
        return base.with_inputs(value_inputs(base, self.kind, self.seed), self.label, block_floor=self.kind == STRATA)


def candidate_specs(problem, *, small: bool = True, device: str = "cpu",  # noqa: ANN001
                    strata: bool = True) -> list[InputSpec]:
    """The suite-candidate inputs of a problem: the inputs a suite is chosen from.

    At the problem's shape (small shape when ``small``): its own ``get_inputs()`` at the
    KernelBench seed, every value kind (and the adversarial kinds it lists, less the
    kinds it skips); at the boundary shapes of :mod:`.shapes` (largest prime below,
    one past, all small primes): mixed magnitudes and signed normal values (a boundary
    shape with mixed values stresses tails and value ranges in one input, so two-input
    suites chosen on some operators' mutants catch more of the others'). With ``strata``
    (unless the problem skips a value kind) the composite kind too, at the problem's shape
    and at each boundary shape: every value kind in one input, in blocks of rows.
    """
    from .shapes import shape_variants
    from .values import ADVERSARIAL_KINDS, STRATA, VALUE_KINDS

    base = ProblemCase.make(problem, device=device, small=small)
    shapes = dict(base.shapes)
    skip = problem.value_kinds_skip
    kinds = [k for k in VALUE_KINDS + tuple(k for k in problem.adversarial if k in ADVERSARIAL_KINDS)
             if k not in skip]
    strata = strata and not any(k in skip for k in VALUE_KINDS)
    specs = [InputSpec.make(shapes, RAND, KERNELBENCH_SEED)] + [InputSpec.make(shapes, k, 1) for k in kinds]
    if strata:
        specs.append(InputSpec.make(shapes, STRATA, 3))
    for label, other in shape_variants(shapes):
        if label.startswith(("prime below", "one past", "all prime")):
            specs.append(InputSpec.make(other, RAND if "mixed" in skip else "mixed", KERNELBENCH_SEED))
            if "normal" not in skip:
                specs.append(InputSpec.make(other, "normal", 2))
            if strata:
                specs.append(InputSpec.make(other, STRATA, 3))
    out = []
    for spec in dict.fromkeys(specs):
        c = None
        try:
            c = spec.case(problem, device)
            c.reference()
        except InvalidArgument:
            raise
        except Exception:  # noqa: BLE001 - the reference rejects that shape: not a candidate input
            continue
        finally:
            if c is not None:
                release_models(c)
        out.append(spec)
    return out


def default_comparator() -> Comparator:
    """The judge of one input: the derived error model (``bound``, allclose where none derives)."""
    try:
        from .bound import BoundOrClose

        return BoundOrClose()
    except ImportError:  # an older layout: the declared-bound comparator alone
        from .bound import BoundOracle

        return BoundOracle()


# -- suite files ----------------------------------------------------------------


def write_suite_file(path: Path, problems: dict[str, dict[str, Any]], *, k: int, source: str = "") -> Path:
    """Write ``problems`` (name -> {"path", "inputs": [InputSpec | dict], ...}) as a suite file."""
    body = {}
    for name, entry in sorted(problems.items()):
        inputs = [s.to_json() if isinstance(s, InputSpec) else InputSpec.from_json(s).to_json()
                  for s in entry["inputs"]]
        body[name] = {**{k2: v for k2, v in entry.items() if k2 != "inputs"}, "inputs": inputs}
    Path(path).write_text(json.dumps({"format": SUITE_FORMAT, "k": k, "source": source, "problems": body},
                                     indent=2, sort_keys=True))
    return Path(path)


def read_suite_file(path: str | Path) -> dict[str, dict[str, Any]]:
    """name -> {"path", "inputs": [InputSpec]} of a suite file; :class:`InvalidArgument` when unreadable."""
    p = Path(path)
    try:
        data = json.loads(p.read_text())
    except FileNotFoundError:
        raise InvalidArgument(f"Cannot have --oracle suite:{path}: no such file (allowed: a file written by "
                              "`kernelaudit suite export`)") from None
    except json.JSONDecodeError as exc:
        raise InvalidArgument(f"Cannot have --oracle suite:{path}: not JSON ({exc})") from exc
    if not isinstance(data, dict) or data.get("format") != SUITE_FORMAT:
        raise InvalidArgument(f"Cannot have --oracle suite:{path}: format {data.get('format') if isinstance(data, dict) else None!r}, "
                              f"allowed is {SUITE_FORMAT!r}")
    return {name: {**e, "inputs": [InputSpec.from_json(s) for s in e.get("inputs", [])]}
            for name, e in data.get("problems", {}).items()}


class PoisonedSubject(Subject):
    """``subject`` run with every uninitialised allocation of its forward filled with NaN
    (integers: their minimum; ``tamper``'s run A): an output the candidate never writes
    then fails on every input, not only where the allocator happens to hand back memory
    holding something else. The judge of a suite input, in a campaign's per-input kill
    matrix and when a suite file is replayed alike."""

    def __init__(self, subject: Subject) -> None:
        super().__init__(subject.candidate)
        self._models = subject._models  # the same instances: built outside the poison

    def fresh(self) -> "PoisonedSubject":
        return PoisonedSubject(Subject(self.candidate))

    def __call__(self, case: ProblemCase, inputs=None) -> list:  # noqa: ANN001
        from .tamper import PoisonEmpty

        self.model(case)  # build (and initialise) the instance first
        with PoisonEmpty("A"):
            return super().__call__(case, inputs)


class SuiteOracle(Driver):
    """The inputs a suite file lists for the case's problem, each judged by ``compare``
    (the candidate run as a :class:`PoisonedSubject`).

    The problem is found by its file path, else by its name; a problem the suite does
    not list is *skipped* (unjudged), never passed.
    """

    name = "suite"

    def __init__(self, path: str | Path, compare: Comparator | None = None) -> None:
        self.path = str(path)
        self.suites = read_suite_file(path)
        self.compare = compare or default_comparator()
        self.name = f"suite:{self.path}"

    def inputs_for(self, problem) -> list[InputSpec] | None:  # noqa: ANN001
        where = str(Path(problem.path).resolve())
        for e in self.suites.values():
            if e.get("path") and str(Path(e["path"]).resolve()) == where:
                return e["inputs"]
        e = self.suites.get(problem.name)
        return None if e is None else e["inputs"]

    def drive(self, case: ProblemCase, subject: Subject) -> Verdict:
        specs = self.inputs_for(case.problem)
        if specs is None:
            return Verdict.skipped(f"suite: {case.problem.name} is not in {self.path} (it lists "
                                   f"{', '.join(sorted(self.suites)[:8])}{', ...' if len(self.suites) > 8 else ''})",
                                   reason="problem not in suite")
        verdicts = {}
        for spec in specs:
            try:
                c = spec.case(case.problem, case.device)
            except Exception as exc:  # noqa: BLE001 - the problem file changed since the suite was made
                verdicts[spec.label] = Verdict.skipped(f"suite input {spec.label} cannot be built: "
                                                       f"{type(exc).__name__}: {exc}", reason="input not built")
                continue
            verdicts[spec.label] = judge_or_unjudged(self.compare, c, PoisonedSubject(subject))
        return combine(self.name, verdicts, context=f"suite ({len(specs)} inputs): ")
