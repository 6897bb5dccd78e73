"""Mutation sites in a libcst tree: where an operator applies, and applying it at one site.

A *site* is the n-th node (in libcst's post-order: children before parents) for which an
operator's ``applies`` returns true, counted only inside the *scope*: the top-level
functions and classes a subject allows to be mutated (a corpus solution's reachable
kernels and wrappers, a KernelBench program's ``ModelNew``). The same tree and scope give
the same numbering every time, so ``(subject, operator, site)`` is a stable mutant id.
Code outside the scope is never visited, which also keeps a mutant cheap to produce.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import libcst as cst

_EMPTY = cst.Module(body=[])


def code_of(node: cst.CSTNode) -> str:
    """The source text of one node."""
    return _EMPTY.code_for_node(node)


def dotted(node: cst.CSTNode) -> str:
    """``tl.load`` for ``Attribute(Name('tl'), 'load')``; ``''`` for anything that is not a dotted name."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        head = dotted(node.value)
        return f"{head}.{node.attr.value}" if head else ""
    return ""


def is_triton_jit(fn: cst.FunctionDef) -> bool:
    """Is the function decorated with ``@triton.jit`` (or ``@jit``, ``@triton.jit(...)``, ``@triton.autotune``)?"""
    for d in fn.decorators:
        target = d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator
        name = dotted(target)
        if name in ("triton.jit", "jit", "triton.autotune", "triton.heuristics"):
            return True
    return False


class _Submodules(cst.CSTVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.found: dict[str, str] = {}

    def visit_Assign(self, node: cst.Assign) -> None:  # noqa: N802
        if isinstance(node.value, cst.Call):
            cls = dotted(node.value.func)
            for t in node.targets:
                name = dotted(t.target)
                if name.startswith("self.") and name.count(".") == 1 and cls.startswith(("nn.", "torch.nn.")):
                    self.found[name[5:]] = cls.rsplit(".", 1)[-1]


def submodule_types(cls: cst.ClassDef) -> dict[str, str]:
    """``{"conv": "Conv2d"}`` for every ``self.conv = nn.Conv2d(...)`` in the class."""
    v = _Submodules()
    cls.visit(v)
    return v.found


@dataclass
class Context:
    """Where a node is: inside a Triton kernel or host code, in which function and class."""

    triton: bool = False
    function: str = ""
    cls: str = ""
    params: tuple[str, ...] = ()
    jit_names: frozenset[str] = frozenset()
    #: ``self.conv = nn.Conv2d(...)`` in the class: {"conv": "Conv2d"}
    submodules: dict[str, str] = field(default_factory=dict)
    stack: list[cst.CSTNode] = field(default_factory=list)

    @property
    def host(self) -> bool:
        return not self.triton


#: ``applies(node, ctx) -> bool`` and ``rewrite(node, ctx) -> node``.
Applies = Callable[[cst.CSTNode, Context], bool]
Rewrite = Callable[[cst.CSTNode, Context], cst.CSTNode]


class _Walker(cst.CSTTransformer):
    """Counts (and, with ``target`` set, rewrites) the sites of one operator inside the scope.

    With ``many`` set (a list of (node types, applies) pairs) it only counts, every
    operator of the list in one walk: ``counts[i]`` for the i-th.
    """

    def __init__(self, node_types: tuple[type, ...], applies: Applies, rewrite: Rewrite | None,
                 scope: frozenset[str] | None, target: int | None,
                 many: list[tuple[tuple[type, ...], Applies]] | None = None,
                 edits: list[tuple[tuple[type, ...], Applies, Rewrite]] | None = None) -> None:
        super().__init__()
        self.node_types = node_types
        self.applies = applies
        self.rewrite = rewrite
        self.scope = scope
        self.target = target
        self.count = 0
        self.many = many
        self.counts = [0] * len(many or edits or ())
        #: With ``edits`` set: per operator, (original node, rewritten node or the exception) per site.
        self.edits = edits
        self.found: list[list[tuple[cst.CSTNode, cst.CSTNode | Exception]]] = [[] for _ in edits or ()]
        self.lines: list[int] = []
        self.ctx = Context()
        self._saved: list[Context] = []
        self._depth = 0  # nesting of FunctionDef/ClassDef
        self.applied = False
        self._skipped: set[int] = set()  # out-of-scope definitions: not entered, so not left

    # -- scope and context ----------------------------------------------------
    def _enter(self, node: cst.CSTNode) -> bool:
        if self._depth == 0 and self.scope is not None and node.name.value not in self.scope:  # type: ignore[attr-defined]
            self._skipped.add(id(node))
            return False
        self._depth += 1
        self._saved.append(self.ctx)
        c = Context(self.ctx.triton, self.ctx.function, self.ctx.cls, self.ctx.params, self.ctx.jit_names,
                    self.ctx.submodules)
        if isinstance(node, cst.ClassDef):
            c.cls = node.name.value
            c.submodules = submodule_types(node)
        else:
            c.function = node.name.value  # type: ignore[attr-defined]
            c.triton = c.triton or is_triton_jit(node)  # type: ignore[arg-type]
            c.params = tuple(p.name.value for p in node.params.params)  # type: ignore[attr-defined]
        self.ctx = c
        return True

    def _leave(self) -> None:
        self._depth -= 1
        self.ctx = self._saved.pop()

    def visit_Module(self, node: cst.Module) -> bool:  # noqa: N802
        self.ctx.jit_names = frozenset(s.name.value for s in node.body
                                       if isinstance(s, cst.FunctionDef) and is_triton_jit(s))
        return True

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:  # noqa: N802
        return self._enter(node)

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:  # noqa: N802
        return self._enter(node)

    def on_visit(self, node: cst.CSTNode) -> bool:
        go = super().on_visit(node)
        if go and not isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            self.ctx.stack.append(node)
        return go

    def on_leave(self, original_node, updated_node):  # noqa: ANN001
        if isinstance(original_node, (cst.FunctionDef, cst.ClassDef)):
            if id(original_node) in self._skipped:
                return updated_node
            self._leave()
            return updated_node
        if self.ctx.stack and self.ctx.stack[-1] is original_node:
            self.ctx.stack.pop()
        if self._depth == 0 and self.scope is not None:
            return updated_node
        if self.edits is not None:
            for i, (types, applies, rewrite) in enumerate(self.edits):
                if isinstance(original_node, types) and applies(original_node, self.ctx):
                    try:
                        new: cst.CSTNode | Exception = rewrite(updated_node, self.ctx)
                    except Exception as exc:  # noqa: BLE001 - the mutant is not produced: stillborn later
                        new = exc
                    self.found[i].append((original_node, new))
            return updated_node
        if self.many is not None:
            for i, (types, applies) in enumerate(self.many):
                if isinstance(original_node, types) and applies(original_node, self.ctx):
                    self.counts[i] += 1
            return updated_node
        if isinstance(original_node, self.node_types) and self.applies(original_node, self.ctx):
            n = self.count
            self.count += 1
            if self.target is None:
                return updated_node
            if n == self.target and self.rewrite is not None:
                self.applied = True
                return self.rewrite(updated_node, self.ctx)
        return updated_node


def count_sites(tree: cst.Module, node_types: tuple[type, ...], applies: Applies,
                scope: Iterable[str] | None = None) -> int:
    """How many sites the operator has in ``tree`` inside ``scope`` (all of it when None)."""
    w = _Walker(node_types, applies, None, None if scope is None else frozenset(scope), None)
    tree.visit(w)
    return w.count


def count_sites_many(tree: cst.Module, operators: list[tuple[tuple[type, ...], Applies]],
                     scope: Iterable[str] | None = None) -> list[int]:
    """Sites of several operators (node types, applies) in one walk, in the order given."""
    w = _Walker((), lambda n, c: False, None, None if scope is None else frozenset(scope), None, many=operators)
    tree.visit(w)
    return w.counts


def apply_at(tree: cst.Module, node_types: tuple[type, ...], applies: Applies, rewrite: Rewrite, site: int,
             scope: Iterable[str] | None = None) -> cst.Module:
    """``tree`` with the operator applied at site number ``site`` (IndexError when there is no such site)."""
    w = _Walker(node_types, applies, rewrite, None if scope is None else frozenset(scope), site)
    out = tree.visit(w)
    if not w.applied:
        raise IndexError(f"site {site} does not exist: the operator has {w.count} sites here")
    return out


@dataclass(frozen=True)
class SiteEdit:
    """One site as a text edit of the module's source: ``source[start:end]`` becomes ``new``.

    ``new`` is None where the edit cannot be spliced exactly (the node or its rewrite spans
    several lines, whose text depends on the enclosing indentation): apply the operator to
    the tree then. ``error`` is set when the rewrite itself raised. ``lines`` are the
    1-based source lines the node spans (one more either side where ``new`` is None): a
    superset of the lines the mutation changes.
    """

    start: int
    end: int
    new: str | None
    lines: tuple[int, ...]
    error: str | None = None


def site_edits(tree: cst.Module, operators: list[tuple[tuple[type, ...], Applies, Rewrite]],
               scope: Iterable[str] | None = None) -> list[list[SiteEdit]]:
    """Every site of several operators (node types, applies, rewrite) in one walk, each as a text edit.

    One walk (with positions resolved once) instead of a walk per mutant: the sites, their
    numbering and their rewrites are those of :func:`apply_at`, which is the reference this
    is tested against; a single-line node whose standalone text is exactly the source text
    at its position is spliced, anything else is left to :func:`apply_at` (``new`` None).
    """
    from libcst.metadata import MetadataWrapper, WhitespaceInclusivePositionProvider

    source = tree.code
    starts = [0]
    for line in source.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    positions = MetadataWrapper(tree, unsafe_skip_copy=True).resolve(WhitespaceInclusivePositionProvider)
    w = _Walker((), lambda n, c: False, None, None if scope is None else frozenset(scope), None, edits=operators)
    tree.visit(w)
    out: list[list[SiteEdit]] = []
    for found in w.found:
        row = []
        for node, new in found:
            r = positions[node]
            a = starts[r.start.line - 1] + r.start.column
            b = starts[r.end.line - 1] + r.end.column
            lines = tuple(range(r.start.line, r.end.line + 1))
            if isinstance(new, Exception):
                row.append(SiteEdit(a, b, None, lines, f"{type(new).__name__}: {new}"))
                continue
            old_text = code_of(node)
            try:
                new_text = code_of(new)
            except Exception:  # noqa: BLE001 - a rewrite that does not print: apply_at says why
                row.append(SiteEdit(a, b, None, lines))
                continue
            exact = old_text == source[a:b] and "\n" not in old_text and "\n" not in new_text \
                and "\r" not in old_text + new_text
            if not exact:  # printed whole later, where a line diff may name a neighbour line: widen by one
                lines = tuple(range(max(1, r.start.line - 1), r.end.line + 2))
            row.append(SiteEdit(a, b, new_text if exact else None, lines))
        out.append(row)
    return out
