"""``static``: read the candidate's source for tricks that run-time checks cannot see.

Some exploits give the right answer every time, so no comparison can catch them: the
"kernel" that always raises and falls back to PyTorch in its ``except``, the
``ModelNew`` that inherits from (or calls) the reference ``Model``, the file that
replaces ``torch.cuda.Event.elapsed_time`` only while a timer runs. Others hide from
a run on one device (a side stream on a CPU). This oracle parses the candidate file
with :mod:`ast` and applies the rules below; each finding names the rule, the line and
the code. Rules are narrow on purpose: they flag the trick, not the idioms honest
kernels share with it (module-level ``try: import triton``, ``setattr(self, ...)``,
weights cached in ``forward``, ``data_ptr()`` passed to a launch, a side stream the
caller's stream waits for).

====================  ==========================================================
rule                  flags
====================  ==========================================================
``reference-model``   ``Model`` used: inherited, instantiated, called (defining an
                      unused copy is allowed)
``fallback``          ``try`` inside a function whose ``except`` computes with
                      ``torch`` / ``F`` / ``Model``
``patching``          assignment to, ``setattr``/``delattr`` on, or ``__dict__``
                      writes into a module, a class or anything reached from one
                      (``torch.cuda.Event.elapsed_time = ...``, ``time.perf_counter
                      = ...``, ``setattr(getattr(torch, "cuda"), ...)``)
``global-state``      calls that change numerics or randomness for everyone:
                      ``torch.set_float32_matmul_precision``, ``set_default_dtype``,
                      ``use_deterministic_algorithms``, ``manual_seed``, RNG state
``threads``           ``threading``, ``_thread``, ``multiprocessing``,
                      ``concurrent``, ``asyncio``, ``subprocess``, ``os.fork``
``introspection``     ``gc``, ``inspect``, ``ctypes``, ``sys._getframe``,
                      ``sys.modules``, frame attributes (``f_back``, ``f_locals``...)
``dynamic-code``      ``exec``, ``eval``, ``compile``, ``__import__``, ``importlib``
``files``             ``open``, ``pickle``, ``torch.load``, ``numpy.load``,
                      ``os.listdir``/``scandir``/``walk``, ``glob``
``process-exit``      ``sys.exit``, ``os._exit``, ``atexit``, ``signal``
``tensor-subclass``   a ``torch.Tensor`` subclass, ``__torch_function__`` /
                      ``__torch_dispatch__``, ``_make_subclass``, ``as_subclass``
``unsynced-stream``   a CUDA stream made or entered, and neither a ``synchronize``
                      nor the caller's stream (``current_stream()``) waiting on it
``call-state``        outside ``__init__``: ``self.x += ...`` or ``global`` counters;
                      ``data_ptr()``, ``id()``, ``hash()``, ``tolist()``, ``tobytes()``
                      used as a key or in a comparison (caches of earlier answers)
====================  ==========================================================

The oracle needs the candidate (a :class:`~.base.Subject`), not its output; it never
runs the candidate.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import InvalidArgument
from ..problems.problem_case import ProblemCase
from ...verdict import Status, Verdict
from .base import Oracle, Subject

#: The rules, in the order findings are reported.
RULES = (
    "reference-model", "fallback", "patching", "global-state", "threads", "introspection", "dynamic-code", "files",
    "process-exit", "tensor-subclass", "unsynced-stream", "call-state",
)

_THREAD_MODULES = {"threading", "_thread", "multiprocessing", "concurrent", "asyncio", "subprocess"}
_INTROSPECTION_MODULES = {"gc", "inspect", "ctypes"}
_DYNAMIC_MODULES = {"importlib", "runpy", "marshal"}
_FILE_MODULES = {"pickle", "shelve", "marshal", "glob", "mmap", "shutil", "tempfile", "dill"}
_EXIT_MODULES = {"atexit", "signal"}
_FRAME_ATTRS = {"f_back", "f_locals", "f_globals", "f_builtins", "tb_frame", "gi_frame", "cr_frame", "__globals__",
                "__closure__", "__subclasses__", "_getframe", "modules", "get_objects", "get_referrers"}
_GLOBAL_STATE_CALLS = {
    "set_float32_matmul_precision", "set_default_dtype", "set_default_tensor_type", "set_default_device",
    "use_deterministic_algorithms", "manual_seed", "manual_seed_all", "seed", "seed_all", "set_rng_state",
    "set_rng_state_all", "set_flush_denormal",
}
#: torch calls in an ``except`` that are housekeeping, not a fallback computation.
_NOT_COMPUTE = {"empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full",
                "full_like", "tensor", "as_tensor", "device", "dtype", "Size", "is_tensor", "empty_cache",
                "synchronize", "current_stream", "get_device", "is_available"}
_FILE_CALLS = {"open", "load", "loadtxt", "fromfile", "listdir", "scandir", "walk", "read_text", "read_bytes",
               "memmap"}
_STREAM_MAKERS = {"Stream", "stream", "set_stream", "ExternalStream", "StreamContext"}
_CALLER_STREAMS = {"current_stream", "default_stream"}
_STATE_KEYS = {"data_ptr", "id", "hash", "tolist", "tobytes", "untyped_storage", "storage_offset", "_cdata"}


@dataclass(frozen=True)
class Finding:
    """One rule that matched: where, and the code."""

    rule: str
    line: int
    code: str
    why: str

    def describe(self, path: str) -> str:
        return f"[{self.rule}] {path}:{self.line}: {self.why}: `{self.code}`"


def _root(node: ast.AST) -> str | None:
    """The name at the root of ``a.b.c`` / ``a.b()`` / ``a[0].b`` (``a``), if any."""
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _dotted(node: ast.AST) -> str:
    """``torch.cuda.Event`` for an attribute chain (best effort, for messages and matching)."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    elif isinstance(node, ast.Call):
        parts.append(_dotted(node.func) + "()")
    return ".".join(reversed(parts))


def _call_name(node: ast.Call) -> str:
    """The last name of what is called: ``f`` for ``a.b.f(...)`` and ``f(...)``."""
    f = node.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


class _Scanner(ast.NodeVisitor):
    """One pass over the module, tracking what names refer to modules and classes."""

    def __init__(self, source: str) -> None:
        self.lines = source.splitlines()
        self.findings: list[Finding] = []
        self.modules: dict[str, str] = {}  # local name -> module it names (import torch.nn.functional as F)
        self.module_objects: dict[str, str] = {}  # name -> where it comes from (E = torch.cuda.Event: torch)
        self.classes: set[str] = set()  # classes defined in the file
        self.function_stack: list[str] = []
        self.stream_uses: list[ast.AST] = []
        self.stream_synced = False
        self.caller_streams: set[str] = set()  # names bound to torch.cuda.current_stream()
        self.state_names: set[str] = set()  # locals built from data_ptr()/id()/hash() in the current function

    # -- helpers ---------------------------------------------------------------
    def add(self, rule: str, node: ast.AST, why: str) -> None:
        line = getattr(node, "lineno", 0)
        code = self.lines[line - 1].strip() if 0 < line <= len(self.lines) else ""
        if not any(f.rule == rule and f.line == line for f in self.findings):
            self.findings.append(Finding(rule, line, code[:120], why))

    def module_of(self, node: ast.AST) -> str | None:
        """The module an expression is rooted at (``torch`` for ``F.gelu`` when ``F`` is
        ``torch.nn.functional``), or ``None``."""
        root = _root(node)
        if root in self.modules:
            return self.modules[root]
        return self.module_objects.get(root or "")

    def in_function(self) -> bool:
        return bool(self.function_stack)

    # -- imports ---------------------------------------------------------------
    def _note_import(self, node: ast.AST, module: str) -> None:
        top = module.split(".")[0]
        if top in _THREAD_MODULES:
            self.add("threads", node, f"imports {module}: work can run after forward returns")
        if top in _INTROSPECTION_MODULES:
            self.add("introspection", node, f"imports {module}: reads the checker's objects and frames")
        if top in _DYNAMIC_MODULES:
            self.add("dynamic-code", node, f"imports {module}: code the checker cannot read")
        if top in _FILE_MODULES:
            self.add("files", node, f"imports {module}: reads files or stored answers")
        if top in _EXIT_MODULES:
            self.add("process-exit", node, f"imports {module}: acts when the checking process ends")

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            self._note_import(node, a.name)
            self.modules[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        mod = node.module or ""
        self._note_import(node, mod)
        for a in node.names:
            full = f"{mod}.{a.name}"
            self._note_import(node, full)
            if a.name == "Model":
                self.add("reference-model", node, "imports the reference Model")
            # from torch import cuda / from time import perf_counter: a module or an object of one
            self.module_objects[a.asname or a.name] = full
            if mod.split(".")[0] == "sys" and a.name in ("_getframe", "modules"):
                self.add("introspection", node, f"imports sys.{a.name}")
        self.generic_visit(node)

    # -- definitions -----------------------------------------------------------
    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.classes.add(node.name)
        for base in node.bases:
            name = _dotted(base)
            if name.split(".")[-1] == "Model":
                self.add("reference-model", node, f"class {node.name} inherits from the reference Model")
            if name in ("torch.Tensor", "Tensor") or name.endswith(".Tensor"):
                self.add("tensor-subclass", node, f"class {node.name} subclasses torch.Tensor")
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        if node.name in ("__torch_function__", "__torch_dispatch__"):
            self.add("tensor-subclass", node, f"defines {node.name}: outputs that intercept torch calls")
        self.function_stack.append(node.name)
        saved = self.state_names
        self.state_names = set()
        self.generic_visit(node)
        self.state_names = saved
        self.function_stack.pop()

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_Global(self, node: ast.Global) -> None:
        if self.function_stack and self.function_stack[-1] != "__init__":
            self.add("call-state", node, f"declares global {', '.join(node.names)} in a function: state "
                                         "carried from one call to the next")
        self.generic_visit(node)

    visit_Nonlocal = visit_Global  # type: ignore[assignment]

    # -- statements --------------------------------------------------------------
    def visit_Try(self, node: ast.Try) -> None:
        if self.in_function():
            for handler in node.handlers:
                for sub in ast.walk(ast.Module(body=handler.body, type_ignores=[])):
                    if isinstance(sub, ast.Call):
                        mod = self.module_of(sub.func)
                        torch_compute = (mod and mod.split(".")[0] == "torch" and _call_name(sub) not in _NOT_COMPUTE
                                         and ".cuda." not in f".{_dotted(sub.func)}.")
                        if torch_compute or _root(sub.func) == "Model" or (
                                _call_name(sub) == "forward" and "super" in _dotted(sub.func)):
                            self.add("fallback", handler, f"except falls back to {_dotted(sub.func)}(): the "
                                                          "kernel may never run while the answer is right")
                            break
        self.generic_visit(node)

    visit_TryStar = visit_Try  # type: ignore[assignment]

    def _check_store(self, target: ast.AST, node: ast.AST) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            for t in target.elts:
                self._check_store(t, node)
            return
        if isinstance(target, ast.Attribute):
            mod = self.module_of(target.value)
            if mod is not None or _root(target) in self.classes - {"ModelNew"} and not self._is_self(target):
                what = mod or _root(target)
                self.add("patching", node, f"assigns {_dotted(target)}: replaces an attribute of {what}")
            if _dotted(target.value).endswith("__dict__"):
                self.add("patching", node, f"writes into {_dotted(target.value)}")
        elif isinstance(target, ast.Subscript):
            base = _dotted(target.value)
            if base == "os.environ":
                pass  # build settings of a compiled extension (TORCH_CUDA_ARCH_LIST)
            elif base.endswith("__dict__") or base.startswith(("vars(", "globals(")) or (
                    isinstance(target.value, ast.Call) and _call_name(target.value) in ("vars", "globals")):
                self.add("patching", node, f"writes into {base or 'a namespace'}")
            elif self.module_of(target.value) is not None and isinstance(target.value, ast.Attribute):
                self.add("patching", node, f"writes into {base}")
            self._check_state_key(target.slice, node)

    @staticmethod
    def _is_self(target: ast.AST) -> bool:
        return _root(target) in ("self", "cls")

    def visit_Assign(self, node: ast.Assign) -> None:
        for t in node.targets:
            self._check_store(t, node)
        # E = torch.cuda.Event, o = getattr(torch, "cuda"): names for objects reached from a module
        if self.module_of(node.value) is not None and not isinstance(node.value, ast.Call) or (
                isinstance(node.value, ast.Call) and _call_name(node.value) == "getattr"
                and node.value.args and self.module_of(node.value.args[0]) is not None):
            origin = self.module_of(node.value if not isinstance(node.value, ast.Call) else node.value.args[0])
            for t in node.targets:
                if isinstance(t, ast.Name) and origin:
                    self.module_objects[t.id] = origin
        if isinstance(node.value, ast.Call) and _call_name(node.value) in _CALLER_STREAMS:
            for t in node.targets:
                if isinstance(t, ast.Name):
                    self.caller_streams.add(t.id)
        if self._has_state_call(node.value):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    self.state_names.add(t.id)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._check_store(node.target, node)
        fn = self.function_stack[-1] if self.function_stack else None
        if fn and fn != "__init__" and isinstance(node.target, ast.Attribute) and self._is_self(node.target):
            self.add("call-state", node, f"updates {_dotted(node.target)} on every call: behaviour that depends on "
                                         "the call count (warm-up and trial detection)")
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for t in node.targets:
            if isinstance(t, ast.Attribute) and self.module_of(t.value) is not None:
                self.add("patching", node, f"deletes {_dotted(t)}")
        self.generic_visit(node)

    def visit_With(self, node: ast.With) -> None:
        for item in node.items:
            if isinstance(item.context_expr, ast.Call) and _call_name(item.context_expr) in _STREAM_MAKERS:
                self.stream_uses.append(node)
        self.generic_visit(node)

    # -- expressions -------------------------------------------------------------
    def _has_state_call(self, node: ast.AST) -> bool:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call) and _call_name(sub) in _STATE_KEYS:
                return True
            if isinstance(sub, ast.Attribute) and sub.attr in ("_cdata", "_version"):
                return True
        return False

    def _check_state_key(self, node: ast.AST, where: ast.AST) -> None:
        if not self.in_function():
            return
        uses_name = any(isinstance(s, ast.Name) and s.id in self.state_names for s in ast.walk(node))
        if self._has_state_call(node) or uses_name:
            self.add("call-state", where, "keys on data_ptr()/id()/hash()/contents: returns answers cached from "
                                          "earlier calls")

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if isinstance(node.ctx, ast.Load):
            self._check_state_key(node.slice, node)
        self.generic_visit(node)

    def _is_state(self, node: ast.AST) -> bool:
        """``x.data_ptr()``, ``id(x)``, ``(x.data_ptr(), n)`` or a name built from one: not arithmetic on it."""
        if isinstance(node, ast.Name):
            return node.id in self.state_names
        if isinstance(node, ast.Call):
            return _call_name(node) in _STATE_KEYS
        if isinstance(node, ast.Tuple):
            return any(self._is_state(e) for e in node.elts)
        return False

    def visit_Compare(self, node: ast.Compare) -> None:
        # x.data_ptr() % 16 == 0 (an alignment test) is arithmetic, not a key: only direct operands count
        operands = [node.left, *node.comparators]
        if self.in_function() and any(self._is_state(o) for o in operands) and not all(
                isinstance(o, ast.Constant) for o in operands if not self._is_state(o)):
            self.add("call-state", node, "compares data_ptr()/id()/hash() with a stored value: returns answers "
                                         "cached from earlier calls")
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id == "Model" and isinstance(node.ctx, ast.Load):
            self.add("reference-model", node, "uses the reference Model")
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr in _FRAME_ATTRS:
            root = _root(node)
            if node.attr in ("modules", "get_objects", "get_referrers") and self.modules.get(root or "") not in (
                    "sys", "gc"):
                pass  # model.modules() is a torch.nn.Module method
            else:
                self.add("introspection", node, f"reads {_dotted(node)}: the checker's frames and objects")
        if node.attr in ("_make_subclass", "as_subclass"):
            self.add("tensor-subclass", node, f"calls {node.attr}: an output that is not a plain tensor")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        name = _call_name(node)
        mod = self.module_of(node.func)
        dotted = _dotted(node.func)
        if name in ("setattr", "delattr") and isinstance(node.func, ast.Name) and node.args:
            if not self._is_self(node.args[0]) or _root(node.args[0]) is None and not isinstance(node.args[0],
                                                                                                   ast.Name):
                self.add("patching", node, f"{name}() on {_dotted(node.args[0]) or 'an object'}: replaces an "
                                           "attribute of something the checker uses")
        if name == "__setattr__" and "object" in dotted and node.args and not self._is_self(node.args[0]):
            self.add("patching", node, "object.__setattr__ on another object")
        if isinstance(node.func, ast.Name) and node.func.id == "Model":
            self.add("reference-model", node, "instantiates or calls the reference Model")
        if mod and mod.split(".")[0] in ("torch", "numpy", "random") and name in _GLOBAL_STATE_CALLS:
            self.add("global-state", node, f"calls {dotted}(): changes numerics or randomness for the checker too")
        if isinstance(node.func, ast.Name) and node.func.id in ("exec", "eval", "compile", "__import__"):
            self.add("dynamic-code", node, f"calls {node.func.id}(): code the checker cannot read")
        if (isinstance(node.func, ast.Name) and node.func.id == "open") or (
                name in _FILE_CALLS and mod and mod.split(".")[0] in ("os", "io", "pathlib", "numpy", "torch", "glob")
                and not (name == "load" and "cpp_extension" in f"{mod}.{dotted}")):
            self.add("files", node, f"calls {dotted}(): reads files (stored answers)")
        if name in ("_exit", "exit", "abort", "kill") and mod in ("os", "sys"):
            self.add("process-exit", node, f"calls {dotted}()")
        if name == "fork" and mod == "os":
            self.add("threads", node, "calls os.fork()")
        # frames: sys._getframe and inspect.currentframe by name; "stack" only from inspect or
        # traceback (torch.stack and numpy.stack are ordinary ops: KernelBench L3 30 and 34 use them)
        if name in ("_getframe", "currentframe") or (
                name in ("stack", "extract_stack", "walk_stack", "getouterframes") and mod in ("inspect", "traceback")):
            self.add("introspection", node, f"calls {dotted}(): reads the checker's frames")
        if name in _STREAM_MAKERS and (mod or "").startswith("torch") or name in ("Stream", "ExternalStream") and \
                "cuda" in dotted:
            self.stream_uses.append(node)
        if name == "synchronize":  # the device, a stream or an event: the host waits for the work
            self.stream_synced = True
        if name in ("wait_stream", "wait_event", "wait") and isinstance(node.func, ast.Attribute):
            receiver = node.func.value  # only the caller's stream waiting counts, not the side stream
            if any(c in _dotted(receiver) for c in _CALLER_STREAMS) or _root(receiver) in self.caller_streams:
                self.stream_synced = True
        self.generic_visit(node)

    def finish(self) -> list[Finding]:
        if self.stream_uses and not self.stream_synced:
            self.add("unsynced-stream", self.stream_uses[0], "uses a CUDA stream and never makes the caller's stream "
                                                             "wait for it (no current_stream().wait_stream/wait_event, "
                                                             "no synchronize)")
        order = {r: i for i, r in enumerate(RULES)}
        return sorted(self.findings, key=lambda f: (order[f.rule], f.line))


def scan_source(source: str, filename: str = "<candidate>") -> list[Finding]:
    """Every finding of every rule in ``source``; a syntax error raises :class:`InvalidArgument`."""
    try:
        tree = ast.parse(source, filename=filename)
    except SyntaxError as exc:
        raise InvalidArgument(f"Cannot parse {filename}:{exc.lineno}: {exc.msg}") from exc
    scanner = _Scanner(source)
    scanner.visit(tree)
    return scanner.finish()


def scan_file(path: str | Path) -> list[Finding]:
    """:func:`scan_source` of a file."""
    path = Path(path)
    return scan_source(path.read_text(), str(path))


class StaticOracle(Oracle):
    """Flag, from its source alone, the tricks a candidate can play that no run shows."""

    name = "static"

    def judge(self, case: ProblemCase, got: Any) -> Verdict:
        if not isinstance(got, Subject):
            raise InvalidArgument(
                "Cannot judge a bare output with oracle static: it reads the candidate's source, "
                "so pass got=Subject(candidate)"
            )
        path = got.candidate.path
        findings = scan_file(path)
        if not findings:
            return Verdict.passed("static findings", 0.0, 0.0, rules=len(RULES))
        rules = sorted({f.rule for f in findings}, key=RULES.index)
        return Verdict(
            Status.WRONG, metric="static findings", value=float(len(findings)), tolerance=0.0,
            message=f"{case.problem.name}: {path.name} plays {len(findings)} trick(s) no run may show "
                    f"({', '.join(rules)}): " + "; ".join(f.describe(path.name) for f in findings),
            details={"findings": [f.__dict__ for f in findings]},
        )
