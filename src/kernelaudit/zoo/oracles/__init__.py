"""Pluggable correctness oracles: ``judge(case, got) -> Verdict``, composable into sequences.

====================  ==========================================================
name                  what it checks
====================  ==========================================================
``kernelbench``       the official KernelBench check (seed 42, 5 trials, allclose 1e-2)
``assert-close``      torch.testing default tolerances per dtype
``ulp``               ULP distance (max and distribution) for fp32, fp16, bf16
``bound``             float64 reference and an error bound derived from the problem
``shapes``            boundary shapes (1, primes, one past the fixed size)
``values``            signed, large, small, mixed-scale and adversarial values
``tamper``            unwritten outputs, input mutation, aliasing, streams, determinism,
                      plain outputs, patched functions, threads, call history
``static``            the candidate's source: reference fallbacks, patching, threads,
                      frame and gc reads, caches, tensor subclasses, unsynced streams
``strongest``         shorthand for ``bound,shapes,values,tamper,static``
``fuzz-baseline``     a published fuzzing recipe (NaN/Inf values, NaN check, allclose 1e-3):
                      a baseline with false rejections, not in the detection table
``suite:FILE``        the inputs a suite file lists for the problem, each judged by ``bound``
====================  ==========================================================

In a sequence, ``shapes`` and ``values`` judge each case they make with the
comparators named in the same sequence (``assert-close``, ``ulp``, ``bound``), or with
``bound`` when it names none. See docs/oracles.md.
"""

from __future__ import annotations

from ...errors import InvalidArgument
from .assert_close import AssertCloseOracle
from .base import Comparator, Driver, Oracle, SequenceOracle, Subject
from .bound import BoundOracle, BoundOrClose
from .kernelbench import KERNELBENCH_TOL, KERNELBENCH_TOL_STRICT, KernelBenchOracle
from .shapes import ShapesOracle
from .static import StaticOracle
from .tamper import TamperOracle
from .ulp import UlpOracle
from .values import ValuesOracle

#: Names ``--oracle`` accepts, in the order the table shows them.
ORACLE_NAMES = ("kernelbench", "assert-close", "ulp", "bound", "shapes", "values", "tamper", "static")
#: Shorthands for sequences.
ALIASES = {"strongest": ("bound", "shapes", "values", "tamper", "static")}
#: Baselines ``--oracle`` accepts that are not part of the detection table (they reject correct kernels).
BASELINE_NAMES = ("fuzz-baseline",)
#: ``--oracle suite:FILE``: replay the inputs a suite file lists for the problem (``kernelaudit suite export``).
SUITE_PREFIX = "suite:"
#: Oracles that compare one output with a reference.
COMPARATOR_NAMES = ("assert-close", "ulp", "bound")

_COMPARATORS = {"assert-close": AssertCloseOracle, "ulp": UlpOracle, "bound": BoundOracle}

__all__ = [
    "ALIASES", "COMPARATOR_NAMES", "ORACLE_NAMES", "AssertCloseOracle", "BoundOracle", "Comparator", "Driver",
    "KERNELBENCH_TOL", "KERNELBENCH_TOL_STRICT", "KernelBenchOracle", "Oracle", "SequenceOracle", "ShapesOracle",
    "StaticOracle", "Subject", "TamperOracle", "UlpOracle", "ValuesOracle", "make_oracle", "parse_oracle_names",
]


def parse_oracle_names(spec: str | list[str] | tuple[str, ...]) -> list[str]:
    """Split ``"bound,shapes"`` (or a list), expand aliases, validate, deduplicate in order.

    Raises :class:`InvalidArgument` naming ``--oracle`` and the allowed values.
    """
    raw = spec.split(",") if isinstance(spec, str) else list(spec)
    allowed = list(ORACLE_NAMES) + list(ALIASES) + list(BASELINE_NAMES) + [SUITE_PREFIX + "FILE"]
    names: list[str] = []
    for item in (r.strip() for r in raw):
        if not item:
            continue
        if item.startswith(SUITE_PREFIX) and len(item) > len(SUITE_PREFIX):
            from pathlib import Path

            item = SUITE_PREFIX + str(Path(item[len(SUITE_PREFIX):]).resolve())  # a worker may run elsewhere
            if item not in names:
                names.append(item)
            continue
        if item not in allowed:
            raise InvalidArgument(f"Cannot have --oracle={item!r}: allowed values are {', '.join(allowed)}")
        for name in ALIASES.get(item, (item,)):
            if name not in names:
                names.append(name)
    if not names:
        raise InvalidArgument(f"Cannot have an empty --oracle: allowed values are {', '.join(allowed)}")
    return names


def make_oracle(spec: str | list[str] | tuple[str, ...], *, tol: float | None = None) -> Oracle:
    """Build one oracle or a sequence from ``--oracle`` text such as ``"bound,shapes,tamper"``.

    ``tol`` sets the ``kernelbench`` tolerance (default 1e-2; ``1e-4`` for the newer
    checker). Drivers judge their cases with the sequence's comparators, else ``bound``.
    """
    names = parse_oracle_names(spec)
    comparators = [_COMPARATORS[n]() for n in names if n in COMPARATOR_NAMES]
    if not comparators:
        inner: Comparator = BoundOrClose()
    elif len(comparators) == 1:
        # the drivers fall back to allclose only where no error model can be derived
        only = comparators[0]
        inner = BoundOrClose(only) if isinstance(only, BoundOracle) else only
    else:
        inner = _ComparatorSequence(comparators)
    built: list[Oracle] = []
    for n in names:
        if n == "kernelbench":
            built.append(KernelBenchOracle(tol=KERNELBENCH_TOL if tol is None else tol))
        elif n in COMPARATOR_NAMES:
            built.append(next(c for c in comparators if c.name == n))
        elif n == "shapes":
            # When the sequence's comparators already judged the fixed shape (they come
            # first), shapes does not run the candidate there again.
            done = [c for c in names[:names.index("shapes")] if c in COMPARATOR_NAMES]
            built.append(ShapesOracle(inner, fixed_judged_by=",".join(done) or None))
        elif n == "values":
            built.append(ValuesOracle(inner))
        elif n == "tamper":
            built.append(TamperOracle())
        elif n == "static":
            built.append(StaticOracle())
        elif n == "fuzz-baseline":
            from .fuzz_baseline import FuzzBaselineOracle

            built.append(FuzzBaselineOracle())
        elif n.startswith(SUITE_PREFIX):
            from .suite import SuiteOracle

            built.append(SuiteOracle(n[len(SUITE_PREFIX):]))
    return built[0] if len(built) == 1 else SequenceOracle(built)


class _ComparatorSequence(Comparator):
    """Several comparators judging one output (the subject runs once)."""

    def __init__(self, comparators: list[Comparator]) -> None:
        self.comparators = comparators
        self.name = "+".join(c.name for c in comparators)

    def prepare(self, case) -> None:  # noqa: ANN001
        for c in self.comparators:
            c.prepare(case)

    def compare(self, case, outputs):  # noqa: ANN001
        from .base import combine

        return combine(self.name, {c.name: c.compare(case, outputs) for c in self.comparators})
