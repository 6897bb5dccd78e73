"""KernelBench-format problems: the loader, the project's corpus and its known candidates.

``corpus/``     problems written by the project (``class Model``, shape constants,
                ``get_inputs``, ``get_init_inputs``, plus ``SMALL_SHAPES``, ``ERROR_MODEL``)
``solutions/``  verified Triton solutions (``<problem>.py``) and known-correct variants
                (``<problem>__<variant>.py``)
``mutants/``    known-wrong candidates (``<problem>__<fault>.py``), one fault each
"""

from __future__ import annotations

from pathlib import Path

from .problem_case import KERNELBENCH_SEED, ProblemCase
from .loader import Candidate, LoadError, Problem, load_candidate, load_corpus, load_module, load_problem

#: Where the package keeps its corpus, solutions and mutants.
PACKAGE_DIR = Path(__file__).resolve().parent
CORPUS_DIR = PACKAGE_DIR / "corpus"
SOLUTIONS_DIR = PACKAGE_DIR / "solutions"
MUTANTS_DIR = PACKAGE_DIR / "mutants"

__all__ = [
    "CORPUS_DIR", "KERNELBENCH_SEED", "MUTANTS_DIR", "SOLUTIONS_DIR", "Candidate", "LoadError", "Problem",
    "ProblemCase", "corpus_problem_path", "known_candidates", "load_candidate", "load_corpus", "load_module",
    "load_problem", "solution_path",
]


def corpus_problem_path(name: str) -> Path:
    """Path of a corpus problem by name."""
    return CORPUS_DIR / f"{name}.py"


def solution_path(name: str) -> Path:
    """Path of the verified solution (or variant ``problem__variant``) by name."""
    return SOLUTIONS_DIR / f"{name}.py"


def known_candidates() -> list[Path]:
    """The committed known candidates: every mutant and every solution variant, sorted."""
    wrong = sorted(p for p in MUTANTS_DIR.glob("*.py") if not p.name.startswith("_"))
    right = sorted(p for p in SOLUTIONS_DIR.glob("*__*.py"))
    return wrong + right
