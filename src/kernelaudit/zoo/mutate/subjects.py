"""Subjects of mutation: correct candidates, each a self-contained program with a scope.

Two kinds:

``corpus/<problem>``        a verified Triton solution of the project's corpus, with the
                            kernels it imports from ``solution_kernels`` inlined into one
                            file, so a mutant of the kernel is a candidate of its own. The
                            scope is ``ModelNew`` plus every top-level function it reaches.
``kb/level<L>/<problem>``   a KernelBench problem's ``Model`` program made into a
                            candidate: the class renamed ``ModelNew`` (the PyTorch code a
                            kernel must reproduce). The scope is ``ModelNew``.

The corpus's known-correct variants (``solutions/<problem>__<variant>.py``) are
:func:`correct_variants`: candidates every oracle must pass (false rejections).
KernelBench files are read from where they are (``--kernelbench DIR``, default
``/work/shared/kernelbench/KernelBench``), never copied.
"""

from __future__ import annotations

import ast
import hashlib
import re
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path

import libcst as cst

from ...errors import InvalidArgument
from ..problems import CORPUS_DIR, SOLUTIONS_DIR

#: Where the KernelBench levels are looked for when ``--kernelbench`` is not given.
DEFAULT_KERNELBENCH = Path("/work/shared/kernelbench/KernelBench")
#: The module the corpus solutions import their kernels from.
KERNELS_MODULE = "kernelaudit.zoo.problems.solution_kernels"
KERNELS_FILE = SOLUTIONS_DIR.parent / "solution_kernels.py"
#: Subject groups ``mutate run`` accepts.
GROUPS = ("corpus", "kb1", "kb2", "kb3", "kb")


@dataclass(frozen=True)
class Subject:
    """A correct candidate to mutate: ``source`` defines ``ModelNew``; only ``scope`` is mutated."""

    id: str
    kind: str  # "triton" or "torch"
    problem_path: Path
    source: str
    scope: tuple[str, ...]

    @property
    def digest(self) -> str:
        """Short hash of the source: a store refuses to mix mutants of two versions of a subject."""
        return hashlib.sha256(self.source.encode()).hexdigest()[:12]

    @cached_property
    def tree(self) -> cst.Module:
        if self.kind == "triton" and self.source.startswith(_kernels_source()):
            # the inlined kernels are the same text in every corpus subject: parsed once
            own = cst.parse_module(self.source[len(_kernels_source()):])
            kernels = _kernels_tree()
            first = own.body[0]
            first = first.with_changes(leading_lines=[*kernels.footer, *own.header, *first.leading_lines])
            tree = kernels.with_changes(body=[*kernels.body, first, *own.body[1:]], footer=own.footer)
            if tree.code == self.source:
                return tree
        return cst.parse_module(self.source)


# ---------------------------------------------------------------------------
# corpus solutions: kernels inlined
# ---------------------------------------------------------------------------

#: Helpers of solution_kernels that only switch the package's own module between modes (they reload
#: it through sys.modules): not part of any solution, left out of the inlined copy.
NOT_INLINED = ("interpreted", "set_interpret")


@lru_cache(maxsize=1)
def _kernels_source() -> str:
    text = KERNELS_FILE.read_text()
    lines = text.splitlines(keepends=True)
    for node in sorted((n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name in NOT_INLINED),
                       key=lambda n: -n.lineno):
        start = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
        del lines[start:node.end_lineno]
    text = "".join(lines).rstrip() + "\n\n\n"
    # relative imports of the package become absolute: the mutant lives outside it
    return re.sub(r"^from \.\.\.(\w+)", r"from kernelaudit.\1", text, flags=re.M)


@lru_cache(maxsize=1)
def _kernels_tree() -> cst.Module:
    return cst.parse_module(_kernels_source())


def reachable(source: str, root: str = "ModelNew") -> tuple[str, ...]:
    """Top-level functions and classes that ``root`` reaches by name, ``root`` included (sorted)."""
    tree = ast.parse(source)
    defs = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))}
    if root not in defs:
        raise InvalidArgument(f"Cannot find {root} in the subject's source: a candidate defines class {root}")
    seen, todo = set(), [root]
    while todo:
        name = todo.pop()
        if name in seen or name not in defs:
            continue
        seen.add(name)
        todo += [n.id for n in ast.walk(defs[name]) if isinstance(n, ast.Name)]
    return tuple(sorted(seen))


def inline_solution(solution: Path) -> str:
    """One file: ``solution_kernels``' source, then the solution without its import of it."""
    own = [ln for ln in solution.read_text().splitlines()
           if not ln.startswith(f"from {KERNELS_MODULE} import") and not ln.startswith("from __future__")]
    return _kernels_source() + "# ---- the solution " + solution.name + " ----\n" + "\n".join(own) + "\n"


def corpus_subjects(names: list[str] | None = None) -> list[Subject]:
    """The verified Triton solutions of the corpus (variants excluded), sorted by problem."""
    out = []
    for path in sorted(SOLUTIONS_DIR.glob("*.py")):
        if "__" in path.stem or path.name.startswith("_") or (names and path.stem not in names):
            continue
        source = inline_solution(path)
        out.append(Subject(f"corpus/{path.stem}", "triton", CORPUS_DIR / f"{path.stem}.py", source,
                           reachable(source)))
    return out


def correct_variants() -> list[tuple[str, Path, Path]]:
    """(name, problem path, candidate path) of the corpus's known-correct variants."""
    return [(p.stem, CORPUS_DIR / f"{p.stem.split('__')[0]}.py", p) for p in sorted(SOLUTIONS_DIR.glob("*__*.py"))]


# ---------------------------------------------------------------------------
# KernelBench programs: Model renamed ModelNew
# ---------------------------------------------------------------------------

def model_as_candidate(problem_source: str) -> str:
    """The problem's program with the name ``Model`` renamed ``ModelNew`` everywhere (``super(Model, self)``
    too), token by token: strings and comments keep the word."""
    import io
    import tokenize

    lines = problem_source.splitlines(keepends=True)
    hits = [t.start for t in tokenize.generate_tokens(io.StringIO(problem_source).readline)
            if t.type == tokenize.NAME and t.string == "Model"]
    for row, col in reversed(hits):  # right to left: earlier columns stay valid
        line = lines[row - 1]
        lines[row - 1] = line[:col] + "ModelNew" + line[col + len("Model"):]
    return "".join(lines)


def kernelbench_subjects(levels: tuple[int, ...] = (1, 2), root: Path | None = None) -> list[Subject]:
    """Every KernelBench problem of ``levels`` as a subject (missing levels give none), by level then number."""
    root = Path(root) if root is not None else DEFAULT_KERNELBENCH
    out = []
    for level in levels:
        d = root / f"level{level}"
        if not d.is_dir():
            continue
        files = sorted(d.glob("*.py"), key=lambda p: (int(p.stem.split("_")[0]) if p.stem.split("_")[0].isdigit()
                                                      else 10**9, p.stem))
        for path in files:
            try:
                source = model_as_candidate(path.read_text())
            except (SyntaxError, UnicodeDecodeError, __import__("tokenize").TokenError):
                continue  # a file that does not parse is not a subject
            if "class ModelNew" not in source:
                continue
            out.append(Subject(f"kb/level{level}/{path.stem}", "torch", path, source, ("ModelNew",)))
    return out


def select_subjects(groups: list[str], *, kernelbench: Path | None = None, names: list[str] | None = None
                    ) -> list[Subject]:
    """Subjects of the named groups (``corpus``, ``kb1``, ``kb2``, ``kb3``, ``kb`` = 1 and 2), or single ids.

    ``names`` keeps only subjects whose id ends with one of them. Raises
    :class:`InvalidArgument` naming ``SUBJECTS`` and the allowed values.
    """
    out: list[Subject] = []
    for g in groups:
        if g == "corpus":
            got = corpus_subjects()
        elif g in ("kb1", "kb2", "kb3", "kb"):
            levels = (1, 2) if g == "kb" else (int(g[2]),)
            got = kernelbench_subjects(levels, kernelbench)
            if not got:
                raise InvalidArgument(f"Cannot have SUBJECTS={g!r}: no KernelBench problems under "
                                      f"{kernelbench or DEFAULT_KERNELBENCH} (pass --kernelbench DIR)")
        elif g.startswith("corpus/"):
            got = corpus_subjects([g.split("/", 1)[1]])
        elif g.startswith("kb/level"):
            level = int(g[len("kb/level")])
            got = [s for s in kernelbench_subjects((level,), kernelbench) if s.id == g]
        else:
            raise InvalidArgument(f"Cannot have SUBJECTS={g!r}: allowed values are {', '.join(GROUPS)}, "
                                  f"corpus/<problem> or kb/level<L>/<problem>")
        if not got:
            raise InvalidArgument(f"Cannot have SUBJECTS={g!r}: no such subject")
        out += [s for s in got if s not in out]
    if names:
        out = [s for s in out if any(s.id.endswith(n) for n in names)]
    return out
