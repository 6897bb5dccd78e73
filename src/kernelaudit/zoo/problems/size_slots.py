"""The sizes a KernelBench problem file sets, found in its source, and how to move them.

A problem file sets its sizes in three ways, and all three must move together for a
smaller shape to be the same problem:

``constant``  a module-level int: ``batch_size = 16``, ``M = 1024 * 2``,
              ``depth, height, width = (16, 32, 32)``, ``height = width = 128``;
``element``   an int literal inside a module-level tuple or list:
              ``input_shape = (32768,)`` -> ``input_shape[0]``,
              ``layer_sizes = [16384, 16384]`` -> ``layer_sizes[0]``, ``layer_sizes[1]``;
``literal``   an int literal that ``get_inputs`` passes to a tensor factory:
              ``torch.rand(batch_size, 3, 224, 224)`` -> ``get_inputs[0]`` (the 3),
              ``get_inputs[1]``, ``get_inputs[2]``.

Module-level assignments computed from sizes (``bias_shape = (out_channels, 1, 1)``,
``groups = in_channels``) are *derived*: :meth:`SizeSlots.apply` evaluates them again
after it sets the sizes, in file order, so ``bias_shape`` follows ``out_channels``.
``get_inputs`` is recompiled once, at load, with its literal sizes read from module
globals (same code, same line numbers), so a literal moves like a constant.
"""

from __future__ import annotations

import ast
import contextlib
import copy
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import CodeType, ModuleType
from typing import Any

#: Tensor factories whose positional int arguments (or size tuple) are sizes.
SIZE_FACTORIES = frozenset({"rand", "randn", "zeros", "ones", "empty", "randn_like", "rand_like"})
#: Factories whose size is only the tuple/list argument (the others are bounds or fill values).
TUPLE_SIZE_FACTORIES = frozenset({"randint", "full", "normal", "randperm"})
#: Prefix of the module globals that hold ``get_inputs``' literal sizes after the rewrite.
LITERAL_GLOBAL = "__kernelaudit_size_"
#: Literal ints below this are not sizes worth a slot (a channel count of 3 is one; a dim index is not).
LITERAL_MIN = 2


@dataclass(frozen=True)
class Slot:
    """One size the file sets: its name (``batch_size``, ``input_shape[0]``,
    ``get_inputs[1]``), its value in the file and how it is set (``kind``)."""

    name: str
    value: int
    kind: str  # "constant" | "element" | "literal"


@dataclass
class _Derived:
    """A module-level assignment computed from sizes (evaluated again when they move)."""

    target: str
    code: CodeType
    reads: frozenset[str]
    elements: dict[str, str] = field(default_factory=dict)  # slot name -> local identifier in ``code``


def _const_int(node: ast.AST) -> int | None:
    """The value of an int constant expression (``4096``, ``1024 * 2``, ``-1``), else None."""
    if not all(isinstance(n, (ast.Constant, ast.BinOp, ast.UnaryOp, ast.operator, ast.unaryop))
               for n in ast.walk(node)):
        return None
    try:
        value = eval(compile(ast.Expression(body=node), "<size>", "eval"), {"__builtins__": {}})  # noqa: S307
    except Exception:  # noqa: BLE001 - 1 // 0 and friends: not a size
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _names_read(node: ast.AST) -> frozenset[str]:
    return frozenset(n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load))


def _pairs(stmt: ast.stmt) -> list[tuple[str, ast.expr]]:
    """(target name, value expression) for each name a module-level assignment sets."""
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
        return [(stmt.target.id, stmt.value)]
    if not isinstance(stmt, ast.Assign):
        return []
    out = []
    for target in stmt.targets:
        if isinstance(target, ast.Name):
            out.append((target.id, stmt.value))
        elif (isinstance(target, ast.Tuple) and isinstance(stmt.value, (ast.Tuple, ast.List))
              and len(target.elts) == len(stmt.value.elts) and all(isinstance(t, ast.Name) for t in target.elts)):
            out.extend((t.id, v) for t, v in zip(target.elts, stmt.value.elts))
    return out


def _code_names(fn: Any) -> set[str]:
    """Global names a function reads, nested code (comprehensions, lambdas) included."""
    names: set[str] = set()
    stack = [getattr(fn, "__code__", None)]
    while stack:
        code = stack.pop()
        if code is None:
            continue
        names.update(code.co_names)
        stack.extend(c for c in code.co_consts if isinstance(c, CodeType))
    return names


class _LiteralSizes(ast.NodeTransformer):
    """Replace the literal sizes of tensor factory calls with module globals."""

    def __init__(self) -> None:
        self.found: list[tuple[str, int]] = []  # (global name, value)

    def _take(self, node: ast.AST) -> ast.AST:
        value = _const_int(node) if isinstance(node, ast.Constant) else None
        if value is None or value < LITERAL_MIN:
            return node
        ident = f"{LITERAL_GLOBAL}{len(self.found)}"
        self.found.append((ident, value))
        return ast.copy_location(ast.Name(id=ident, ctx=ast.Load()), node)

    def _take_sequence(self, node: ast.AST) -> ast.AST:
        if isinstance(node, (ast.Tuple, ast.List)):
            node.elts = [self._take(e) for e in node.elts]
        return node

    def visit_Call(self, node: ast.Call) -> ast.AST:  # noqa: N802 - the ast API
        self.generic_visit(node)
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name in SIZE_FACTORIES:
            node.args = [self._take_sequence(self._take(a)) for a in node.args]
        elif name in TUPLE_SIZE_FACTORIES:
            node.args = [self._take_sequence(a) for a in node.args]
        if name in SIZE_FACTORIES | TUPLE_SIZE_FACTORIES:
            for kw in node.keywords:
                if kw.arg == "size":
                    kw.value = self._take_sequence(kw.value)
        return node


@dataclass
class SizeSlots:
    """Every size slot of one problem file and what is derived from them."""

    slots: dict[str, Slot]
    derived: list[_Derived]
    used: frozenset[str]  # slots get_inputs or get_init_inputs read (directly or through derived names)
    init_used: frozenset[str]  # of those, the ones get_init_inputs reads (the model's own sizes)
    literal_globals: dict[str, str]  # literal slot name -> the module global that holds it

    def names(self) -> tuple[str, ...]:
        return tuple(self.slots)

    @contextlib.contextmanager
    def apply(self, module: ModuleType, overrides: Mapping[str, int]) -> Iterator[None]:
        """Set ``overrides`` (slot or constant names) in ``module`` and re-derive what
        depends on them; everything is restored on exit."""
        g = module.__dict__
        missing = object()
        saved: list[tuple[str, Any]] = []

        def put(name: str, value: Any) -> None:
            saved.append((name, g.get(name, missing)))
            g[name] = value

        changed: set[str] = set()
        elements: dict[str, int] = {}
        for name, value in overrides.items():
            slot = self.slots.get(name)
            if slot is not None and slot.kind == "element":
                elements[name] = int(value)
            elif slot is not None and slot.kind == "literal":
                put(self.literal_globals[name], int(value))
            else:
                put(name, int(value))
                changed.add(name)
        try:
            for d in self.derived:
                own = {s: elements[s] for s in d.elements if s in elements}
                if d.target in overrides or not (own or d.reads & changed):
                    continue
                local = {ident: elements.get(s, self.slots[s].value) for s, ident in d.elements.items()}
                put(d.target, eval(d.code, g, local))  # noqa: S307 - the problem's own expression
                changed.add(d.target)
            yield
        finally:
            for name, value in reversed(saved):
                if value is missing:
                    g.pop(name, None)
                else:
                    g[name] = value


def analyse(module: ModuleType, source: str, filename: str) -> SizeSlots:
    """Find the size slots of a loaded problem module from its source.

    Rewrites ``module.get_inputs`` so that its literal sizes are read from module
    globals (unchanged behaviour at the file's values). A source that does not parse
    (it loaded, so it does) or a ``get_inputs`` that is not a plain top-level function
    yields only the constants.
    """
    try:
        tree = ast.parse(source, filename)
    except SyntaxError:  # pragma: no cover - the module loaded from this source
        return SizeSlots({}, [], frozenset(), frozenset(), {})
    slots: dict[str, Slot] = {}
    derived: list[_Derived] = []
    derived_reads: dict[str, frozenset[str]] = {}
    for stmt in tree.body:
        for target, expr in _pairs(stmt):
            value = _const_int(expr)
            if value is not None and isinstance(getattr(module, target, None), int):
                slots[target] = Slot(target, value, "constant")
                continue
            elements: dict[str, str] = {}
            if isinstance(expr, (ast.Tuple, ast.List)):
                expr = copy.deepcopy(expr)  # a private copy to rewrite
                for i, elt in enumerate(expr.elts):
                    v = _const_int(elt)
                    if v is not None and v >= LITERAL_MIN:
                        name = f"{target}[{i}]"
                        ident = f"{LITERAL_GLOBAL}{target}_{i}"
                        slots[name] = Slot(name, v, "element")
                        elements[name] = ident
                        expr.elts[i] = ast.Name(id=ident, ctx=ast.Load())
            reads = _names_read(expr) - set(elements.values())
            if elements or reads & (set(slots) | set(derived_reads)):
                code = compile(ast.fix_missing_locations(ast.Expression(body=expr)), filename, "eval")
                derived.append(_Derived(target, code, reads, elements))
                derived_reads[target] = reads | frozenset(elements)
    literal_globals = _rewrite_get_inputs(module, tree, filename, slots)

    def closure(names: set[str]) -> frozenset[str]:
        """The slots ``names`` reach, through derived assignments."""
        out, todo = set(), list(names)
        while todo:
            n = todo.pop()
            if n in out:
                continue
            out.add(n)
            todo.extend(derived_reads.get(n, ()))
        return frozenset(n for n in out if n in slots)

    init_used = closure(_code_names(module.get_init_inputs))
    used = closure(_code_names(module.get_inputs)) | init_used | frozenset(literal_globals)
    return SizeSlots(slots, derived, used, init_used, literal_globals)


def _rewrite_get_inputs(module: ModuleType, tree: ast.Module, filename: str, slots: dict[str, Slot]) -> dict[str, str]:
    """Recompile ``get_inputs`` with its literal sizes read from globals; their slots."""
    fn = getattr(module, "get_inputs", None)
    code = getattr(fn, "__code__", None)
    node = next((s for s in tree.body if isinstance(s, ast.FunctionDef) and s.name == "get_inputs"), None)
    if node is None or code is None or node.decorator_list or code.co_firstlineno != node.lineno:
        return {}  # not the plain top-level function the file defines: leave it alone
    rewriter = _LiteralSizes()
    new = rewriter.visit(copy.deepcopy(node))  # the copy keeps the file's line numbers for tracebacks
    if not rewriter.found:
        return {}
    new_mod = ast.Module(body=[new], type_ignores=[])
    namespace = module.__dict__
    found = {}
    for i, (ident, value) in enumerate(rewriter.found):
        namespace[ident] = value
        name = f"get_inputs[{i}]"
        slots[name] = Slot(name, value, "literal")
        found[name] = ident
    saved = namespace.get("get_inputs")
    exec(compile(ast.fix_missing_locations(new_mod), filename, "exec"), namespace)  # noqa: S102 - a def only
    if not callable(namespace.get("get_inputs")):  # pragma: no cover - defensive
        namespace["get_inputs"] = saved
        return {}
    return found
