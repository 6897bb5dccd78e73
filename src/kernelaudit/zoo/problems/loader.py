"""Load KernelBench-format problem and candidate files by path.

A *problem* file defines ``class Model(nn.Module)``, module-level shape constants,
``get_inputs()`` and ``get_init_inputs()``; a *candidate* file defines ``class
ModelNew`` with the same constructor and forward. Loading executes user code, so each
file is executed in a fresh module with a unique name that is never entered in
``sys.modules`` under a name anything else imports: two problems that both define
``Model`` or ``M = 4096`` never see each other, and a file cannot replace a module
of the checker. A crash while loading becomes a :class:`LoadError` that names the
file, the line and the exception, never a dead checker (process isolation for the
candidate's *execution* lives in :mod:`kernelaudit.zoo.check`).

Optional module-level names a problem may define (the project's corpus defines all):

``SMALL_SHAPES``  dict of shape constant -> smaller value, applied by ``small=True``
                  (CPU tests under the Triton interpreter). Without it, ``small=True``
                  searches for small shapes the reference runs at
                  (:mod:`kernelaudit.zoo.problems.small_shapes`).
``SHAPE_PARAMS``  the names of the constants that are tensor sizes (default: the
                  upper/lower-case int globals that ``get_inputs`` reads and
                  ``get_init_inputs`` does not).
``ERROR_MODEL``   how the op's rounding error grows (see :mod:`kernelaudit.zoo.oracles.bound`).
``INPUT_KINDS``   per input: ``"real"`` (any value), ``"positive"``, ``"probability"``
                  (rows sum to 1 on the last dim), ``"log_probability"``, ``"fixed"``
                  (never changed, e.g. class indexes).
``ALLOW_TF32``    the problem accepts TF32 operand rounding in its products.
``ADVERSARIAL``   extra value kinds the op admits, e.g. ``("neg_inf_rows",)``.
``VALUE_KINDS_SKIP`` dict of value kind -> why the op does not admit it (the ``values``
                  oracle skips it and says so).
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import itertools
import sys
import traceback
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from ...errors import KernelAuditError
from .size_slots import SizeSlots, analyse

#: Names every problem file must define.
PROBLEM_NAMES = ("Model", "get_inputs", "get_init_inputs")
#: Names every candidate file must define.
CANDIDATE_NAMES = ("ModelNew",)
#: Value kinds an input may declare in ``INPUT_KINDS``.
INPUT_KIND_NAMES = ("real", "positive", "probability", "log_probability", "fixed")

_counter = itertools.count()

#: torch functions a checker relies on; a user file that replaces one is refused.
GUARDED_TORCH_NAMES = (
    "allclose", "isclose", "equal", "eq", "ne", "abs", "max", "sum", "where", "isnan", "isinf", "isfinite",
    "manual_seed", "rand", "randn", "randint", "empty", "empty_like",
)
#: torch.Tensor methods a checker relies on.
GUARDED_TENSOR_NAMES = ("__eq__", "__ne__", "__sub__", "__gt__", "__le__", "abs", "max", "any", "all", "item", "to", "clone")


def torch_snapshot() -> dict[str, Any]:
    """Identity of the torch functions and methods the oracles call (see :func:`torch_tampering`)."""
    import torch
    import torch.testing

    snap = {f"torch.{n}": getattr(torch, n) for n in GUARDED_TORCH_NAMES}
    snap.update({f"torch.Tensor.{n}": getattr(torch.Tensor, n) for n in GUARDED_TENSOR_NAMES})
    snap["torch.testing.assert_close"] = torch.testing.assert_close
    return snap


def torch_tampering(before: dict[str, Any], *, restore: bool = True) -> list[str]:
    """Names whose object changed since ``before`` (and put the originals back)."""
    import torch
    import torch.testing

    changed = [k for k, v in torch_snapshot().items() if v is not before[k] and not _dynamo_wrapper_of(v, before[k])]
    if restore:
        for k in changed:
            owner_name, attr = k.rsplit(".", 1)
            owner = {"torch": torch, "torch.Tensor": torch.Tensor, "torch.testing": torch.testing}[owner_name]
            setattr(owner, attr, before[k])
    return changed


def _dynamo_wrapper_of(new: Any, old: Any) -> bool:
    """``new`` is torch's own ``_disable_dynamo`` wrapper around ``old``: what the first
    ``import torch._dynamo`` in a process does to ``torch.manual_seed``, whoever triggers it
    (a lazy import in torch, a candidate that compiles). The wrapper calls ``old`` with the
    same arguments, so nothing a checker relies on changed."""
    import torch

    if getattr(new, "__wrapped__", None) is not old:
        return False
    disable = getattr(torch, "_disable_dynamo", None)
    probe = disable(lambda: None) if disable is not None else None
    return probe is not None and getattr(new, "__code__", None) is getattr(probe, "__code__", False)


class LoadError(KernelAuditError):
    """A problem or candidate file could not be loaded; the message names file and line."""


def _fresh_module_name(path: Path) -> str:
    stem = "".join(c if c.isalnum() else "_" for c in path.stem)
    return f"_kernelaudit_user_{next(_counter)}_{stem}"


def _user_frame(tb: Any, path: Path) -> traceback.FrameSummary | None:
    """The deepest traceback frame that lies in ``path`` (where the user's error is)."""
    found = None
    for frame in traceback.extract_tb(tb):
        if Path(frame.filename).resolve() == path:
            found = frame
    return found


def load_module(path: str | Path) -> ModuleType:
    """Execute ``path`` in a fresh module namespace and return the module.

    Raises :class:`LoadError` naming the file (and line, for a syntax or import error
    or any exception raised while the file runs). ``SystemExit`` raised by the file is
    converted too: loading a file can never end the checker. A file that replaces a
    torch function the oracles rely on (``torch.allclose = lambda *a, **k: True``) is
    refused and the original restored.
    """
    path = Path(path).resolve()
    if not path.is_file():
        raise LoadError(f"{path}: no such file")
    if path.suffix != ".py":
        raise LoadError(f"{path}: not a Python file (expected a .py KernelBench file)")
    name = _fresh_module_name(path)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:  # pragma: no cover - only for odd paths
        raise LoadError(f"{path}: cannot create an import spec")
    module = importlib.util.module_from_spec(spec)
    # Registered only while it executes (dataclasses and pickling look it up), under
    # a name no one else uses, and removed afterwards.
    sys.modules[name] = module
    before = torch_snapshot()
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        raise LoadError(f"{path}:{exc.lineno}: SyntaxError: {exc.msg}") from exc
    except BaseException as exc:  # noqa: BLE001 - user code may raise anything, even SystemExit
        if isinstance(exc, KeyboardInterrupt):
            raise
        frame = _user_frame(exc.__traceback__, path)
        where = f"{path}:{frame.lineno}" if frame else str(path)
        raise LoadError(f"{where}: {type(exc).__name__} while loading: {exc}") from exc
    finally:
        sys.modules.pop(name, None)
    tampered = torch_tampering(before)
    if tampered:
        raise LoadError(f"{path}: replaces {', '.join(tampered)} while loading (restored; the file is refused)")
    return module


def _require(module: ModuleType, path: Path, names: tuple[str, ...], what: str) -> None:
    missing = [n for n in names if not hasattr(module, n)]
    if missing:
        raise LoadError(
            f"{path}: not a KernelBench {what} file: missing {', '.join(missing)} "
            f"(a {what} defines {', '.join(names)})"
        )


def _require_nn_module_class(obj: Any, path: Path, name: str) -> None:
    import torch.nn as nn

    if not (inspect.isclass(obj) and issubclass(obj, nn.Module)):
        raise LoadError(f"{path}: {name} must be a class derived from torch.nn.Module, got {obj!r}")
    if "forward" not in dir(obj) or obj.forward is nn.Module.forward:
        raise LoadError(f"{path}: {name} defines no forward()")


def _require_no_arg_function(obj: Any, path: Path, name: str) -> None:
    if not callable(obj):
        raise LoadError(f"{path}: {name} must be a function, got {type(obj).__name__}")
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):  # pragma: no cover - builtins
        return
    required = [
        p.name
        for p in sig.parameters.values()
        if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]
    if required:
        raise LoadError(
            f"{path}: wrong signature {name}{sig}: {name} must take no arguments "
            f"(it has required {', '.join(required)})"
        )


@dataclass
class Problem:
    """A loaded KernelBench problem: its module plus the corpus metadata it declares."""

    name: str
    path: Path
    module: ModuleType
    shape_params: tuple[str, ...]
    small_shapes: dict[str, int] = field(default_factory=dict)
    #: Every size the file sets (constants, tuple elements, get_inputs literals): see :mod:`.size_slots`.
    sizes: SizeSlots | None = None

    # -- metadata -------------------------------------------------------------
    @property
    def Model(self) -> type:  # noqa: N802 - the KernelBench name
        return self.module.Model

    @property
    def error_model(self) -> dict[str, Any] | None:
        return getattr(self.module, "ERROR_MODEL", None)

    @property
    def allow_tf32(self) -> bool:
        return bool(getattr(self.module, "ALLOW_TF32", False))

    @property
    def adversarial(self) -> tuple[str, ...]:
        return tuple(getattr(self.module, "ADVERSARIAL", ()))

    @property
    def value_kinds_skip(self) -> dict[str, str]:
        return dict(getattr(self.module, "VALUE_KINDS_SKIP", {}))

    @property
    def category(self) -> str:
        return str(getattr(self.module, "CATEGORY", "external"))

    def input_kinds(self, n: int) -> tuple[str, ...]:
        """The declared value kind of each of ``n`` inputs (default ``real``)."""
        kinds = tuple(getattr(self.module, "INPUT_KINDS", ()))
        return kinds + ("real",) * (n - len(kinds))

    def shapes(self) -> dict[str, int]:
        """The shape constants as the file sets them (the fixed shape)."""
        return {k: getattr(self.module, k) for k in self.shape_params}

    # -- inputs at a shape ----------------------------------------------------
    def size_names(self) -> tuple[str, ...]:
        """Every name :meth:`at_shapes` accepts: the shape constants and the file's size slots."""
        slots = self.sizes.names() if self.sizes else ()
        return tuple(dict.fromkeys((*self.shape_params, *slots)))

    @contextlib.contextmanager
    def at_shapes(self, overrides: Mapping[str, int] | None) -> Iterator[dict[str, int]]:
        """Temporarily set sizes in the problem's namespace.

        ``get_inputs``/``get_init_inputs`` read module globals when called, so this
        moves the whole problem to another shape without editing the file. Besides the
        shape constants, any size slot of the file may be set (``input_shape[0]``,
        ``get_inputs[1]``, a constant ``get_init_inputs`` reads); assignments derived
        from a moved size (``bias_shape = (out_channels, 1, 1)``) follow it. Yields the
        sizes in effect: the shape constants plus every override.
        """
        overrides = {k: int(v) for k, v in (overrides or {}).items()}
        allowed = self.size_names()
        unknown = sorted(set(overrides) - set(allowed))
        if unknown:
            from ...errors import InvalidArgument

            raise InvalidArgument(
                f"Cannot set shape {', '.join(unknown)} of problem {self.name}: "
                f"allowed shape names are {', '.join(allowed) or '(none)'}"
            )
        sizes = self.sizes or SizeSlots({}, [], frozenset(), frozenset(), {})
        with sizes.apply(self.module, overrides):
            yield {**self.shapes(), **overrides}

    def get_inputs(self, shapes: Mapping[str, int] | None = None) -> list[Any]:
        with self.at_shapes(shapes):
            return list(self.module.get_inputs())

    def get_init_inputs(self, shapes: Mapping[str, int] | None = None) -> list[Any]:
        with self.at_shapes(shapes):
            return list(self.module.get_init_inputs())

    def small(self) -> dict[str, int]:
        """Shape overrides for CPU runs: ``SMALL_SHAPES`` when the file declares it, else
        small shapes found by :func:`~kernelaudit.zoo.problems.small_shapes.find_small_shapes`
        (searched once per problem object, cached per file content on disk)."""
        if self.small_shapes:
            return dict(self.small_shapes)
        if "_small_found" not in self.__dict__:
            from .small_shapes import find_small_shapes

            self.__dict__["_small_found"] = find_small_shapes(self)
        return {**self.shapes(), **self.__dict__["_small_found"].shapes}


@dataclass
class Candidate:
    """A loaded candidate file: its ``ModelNew`` plus the metadata the known set declares."""

    name: str
    path: Path
    module: ModuleType

    @property
    def ModelNew(self) -> type:  # noqa: N802 - the KernelBench name
        return self.module.ModelNew

    @property
    def problem_name(self) -> str | None:
        return getattr(self.module, "PROBLEM", None)

    @property
    def expect(self) -> str | None:
        """``"correct"`` or ``"wrong"`` for the committed known candidates."""
        return getattr(self.module, "EXPECT", None)

    @property
    def fault(self) -> str:
        """What is wrong (``FAULT``, known-wrong) or what differs (``VARIANT``, known-correct)."""
        return str(getattr(self.module, "FAULT", "") or getattr(self.module, "VARIANT", ""))


def _infer_shape_params(module: ModuleType) -> tuple[str, ...]:
    """Int globals that get_inputs reads and get_init_inputs does not."""
    code = getattr(module.get_inputs, "__code__", None)
    used = set(code.co_names) if code else set()
    init_code = getattr(module.get_init_inputs, "__code__", None)
    init_used = set(init_code.co_names) if init_code else set()
    out = []
    for name in used - init_used:
        v = getattr(module, name, None)
        if isinstance(v, int) and not isinstance(v, bool) and v >= 1:
            out.append(name)
    return tuple(sorted(out))


def load_problem(path: str | Path) -> Problem:
    """Load one problem file; :class:`LoadError` names a missing name or a bad signature."""
    path = Path(path).resolve()
    module = load_module(path)
    _require(module, path, PROBLEM_NAMES, "problem")
    _require_nn_module_class(module.Model, path, "Model")
    _require_no_arg_function(module.get_inputs, path, "get_inputs")
    _require_no_arg_function(module.get_init_inputs, path, "get_init_inputs")
    declared = getattr(module, "SHAPE_PARAMS", None)
    if declared is not None:
        params = tuple(declared)
        bad = [p for p in params if not isinstance(getattr(module, p, None), int)]
        if bad:
            raise LoadError(f"{path}: SHAPE_PARAMS names {', '.join(bad)}, which are not int constants")
    else:
        params = _infer_shape_params(module)
    small = dict(getattr(module, "SMALL_SHAPES", {}) or {})
    bad_small = sorted(set(small) - set(params))
    if bad_small:
        raise LoadError(f"{path}: SMALL_SHAPES sets {', '.join(bad_small)}, not in SHAPE_PARAMS {params}")
    kinds = getattr(module, "INPUT_KINDS", ())
    bad_kinds = [k for k in kinds if k not in INPUT_KIND_NAMES]
    if bad_kinds:
        raise LoadError(
            f"{path}: INPUT_KINDS has {', '.join(map(repr, bad_kinds))}: allowed kinds are {', '.join(INPUT_KIND_NAMES)}"
        )
    sizes = analyse(module, path.read_text(), str(path))
    return Problem(name=path.stem, path=path, module=module, shape_params=params, small_shapes=small, sizes=sizes)


def load_candidate(path: str | Path) -> Candidate:
    """Load one candidate file (it must define ``class ModelNew(nn.Module)``)."""
    path = Path(path).resolve()
    module = load_module(path)
    _require(module, path, CANDIDATE_NAMES, "candidate")
    _require_nn_module_class(module.ModelNew, path, "ModelNew")
    return Candidate(name=path.stem, path=path, module=module)


def load_corpus(directory: str | Path) -> dict[str, Problem]:
    """Load every ``*.py`` problem in a directory (sorted by name), failing on the first bad one."""
    directory = Path(directory)
    if not directory.is_dir():
        raise LoadError(f"{directory}: not a directory of problems")
    problems = {}
    for p in sorted(directory.glob("*.py")):
        if p.name.startswith("_"):
            continue
        problems[p.stem] = load_problem(p)
    if not problems:
        raise LoadError(f"{directory}: contains no problem files (*.py)")
    return problems
