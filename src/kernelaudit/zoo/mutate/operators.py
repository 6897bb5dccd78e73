"""Mutation operators as data: one small named transform each, applied with libcst.

An :class:`Operator` has a name, a family (the row of the kill-matrix heat map), a
description, an example program it applies to, the node types it looks at, a predicate
``applies(node, ctx)`` and a rewrite. It applies to Triton kernels (``ctx.triton``),
to host code (wrappers that launch kernels, PyTorch ``Model`` code), or to both.
:func:`sites` counts where an operator applies in a program and :func:`mutate` returns
the program with one site changed; the example's changed line is what the operator
table (``kernelaudit mutate list-operators``, docs/mutate.md) shows.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from functools import lru_cache

import libcst as cst

from ...errors import InvalidArgument
from .cst_sites import Applies, Context, Rewrite, apply_at, code_of, count_sites, dotted

#: Families, in the order reports show them.
FAMILIES = ("boundary", "index", "accumulate", "precision", "init", "constant", "arith", "reduction", "branch",
            "memory", "sync")


@dataclass(frozen=True)
class Operator:
    """One mutation operator: a small named transform of a program."""

    name: str
    family: str
    description: str
    example: str
    node_types: tuple[type, ...]
    applies: Applies
    rewrite: Rewrite

    def sites(self, tree: cst.Module, scope=None) -> int:  # noqa: ANN001
        """How many places in ``tree`` (inside ``scope``, a set of top-level names) this operator changes."""
        return count_sites(tree, self.node_types, self.applies, scope)

    def apply(self, tree: cst.Module, site: int, scope=None) -> cst.Module:  # noqa: ANN001
        """``tree`` with site number ``site`` changed."""
        return apply_at(tree, self.node_types, self.applies, self.rewrite, site, scope)

    def example_diff(self) -> tuple[str, str]:
        """(before, after): the example's lines this operator changes at its first site."""
        before = self.example
        after = self.apply(cst.parse_module(before), 0).code
        a, b = before.splitlines(), after.splitlines()
        old, new = [], []
        for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b).get_opcodes():
            if tag != "equal":
                old += a[i1:i2]
                new += b[j1:j2]
        return " / ".join(x.strip() for x in old), " / ".join(x.strip() for x in new)


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------

def _expr(code: str) -> cst.BaseExpression:
    return cst.parse_expression(code)


def _call_name(node: cst.CSTNode) -> str:
    return dotted(node.func) if isinstance(node, cst.Call) else ""


def _kwarg(node: cst.Call, name: str) -> cst.Arg | None:
    return next((a for a in node.args if a.keyword is not None and a.keyword.value == name), None)


def _with_kwarg(node: cst.Call, name: str, value: cst.BaseExpression | None) -> cst.Call:
    """The call with keyword ``name`` set to ``value`` (removed when None)."""
    args = []
    for a in node.args:
        if a.keyword is not None and a.keyword.value == name:
            if value is not None:
                args.append(a.with_changes(value=value))
        else:
            args.append(a)
    if args:  # the last argument carries no trailing comma after a removal
        args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return node.with_changes(args=args)


def _is_number(node: cst.CSTNode, value: float | None = None) -> bool:
    if isinstance(node, (cst.Integer, cst.Float)):
        return value is None or float(node.evaluated_value) == value
    return False


def _mentions_pointer(node: cst.CSTNode) -> bool:
    """Pointer arithmetic (``x_ptr + offs``): a sign flip there reads outside the tensor."""
    return "ptr" in code_of(node)


TL_LOADS = ("tl.load",)
TL_STORES = ("tl.store",)
TL_MEMORY = TL_LOADS + TL_STORES

_CMP_SWAPS = {cst.LessThan: cst.LessThanEqual, cst.LessThanEqual: cst.LessThan,
              cst.GreaterThan: cst.GreaterThanEqual, cst.GreaterThanEqual: cst.GreaterThan}


def _cmp_applies(kind: type) -> Applies:
    def applies(node: cst.CSTNode, ctx: Context) -> bool:
        return isinstance(node, cst.Comparison) and len(node.comparisons) == 1 and \
            isinstance(node.comparisons[0].operator, kind)
    return applies


def _cmp_swap(node: cst.Comparison, ctx: Context) -> cst.CSTNode:
    t = node.comparisons[0]
    op = t.operator
    new_op = _CMP_SWAPS[type(op)](whitespace_before=op.whitespace_before, whitespace_after=op.whitespace_after)
    return node.with_changes(comparisons=[t.with_changes(operator=new_op)])


def _bound_applies(node: cst.CSTNode, ctx: Context) -> bool:
    # offs < n, r[:, None] < R: the upper bound of a mask or a loop test
    return isinstance(node, cst.Comparison) and len(node.comparisons) == 1 and \
        isinstance(node.comparisons[0].operator, (cst.LessThan, cst.LessThanEqual)) and \
        not _is_number(node.comparisons[0].comparator)


def _bound_minus_one(node: cst.Comparison, ctx: Context) -> cst.CSTNode:
    t = node.comparisons[0]
    return node.with_changes(comparisons=[t.with_changes(comparator=_expr(f"({code_of(t.comparator)} - 1)"))])


def _memory_call(names: tuple[str, ...], kw: str | None = None, triton: bool = True) -> Applies:
    def applies(node: cst.CSTNode, ctx: Context) -> bool:
        return ctx.triton == triton and _call_name(node) in names and (kw is None or _kwarg(node, kw) is not None)
    return applies


def _drop_mask(node: cst.Call, ctx: Context) -> cst.CSTNode:
    return _with_kwarg(_with_kwarg(node, "mask", None), "other", None)


def _other_changed(node: cst.Call, ctx: Context) -> cst.CSTNode:
    value = _kwarg(node, "other").value  # type: ignore[union-attr]
    new = "1.0" if _is_number(value, 0.0) else "0.0"
    return _with_kwarg(node, "other", _expr(new))


def _offset(delta: str) -> Rewrite:
    def rewrite(node: cst.Call, ctx: Context) -> cst.CSTNode:
        first = node.args[0]
        return node.with_changes(args=[first.with_changes(value=_expr(f"{code_of(first.value)} {delta}")),
                                       *node.args[1:]])
    return rewrite


def _range_applies(node: cst.CSTNode, ctx: Context) -> bool:
    return _call_name(node) in ("range", "tl.range", "tl.static_range") and 1 <= len(node.args) <= 3 and \
        all(a.keyword is None for a in node.args)


def _range_minus_one(node: cst.Call, ctx: Context) -> cst.CSTNode:
    i = 0 if len(node.args) == 1 else 1  # the stop argument
    args = list(node.args)
    args[i] = args[i].with_changes(value=_expr(f"{code_of(args[i].value)} - 1"))
    return node.with_changes(args=args)


def _cdiv_applies(node: cst.CSTNode, ctx: Context) -> bool:
    return _call_name(node) in ("triton.cdiv", "cdiv", "tl.cdiv") and len(node.args) == 2


def _cdiv_floor(node: cst.Call, ctx: Context) -> cst.CSTNode:
    a, b = (code_of(x.value) for x in node.args)
    return _expr(f"(({a}) // ({b}))")


def _pid_applies(node: cst.CSTNode, ctx: Context) -> bool:
    return ctx.triton and _call_name(node) == "tl.program_id" and len(node.args) >= 1 and \
        isinstance(node.args[0].value, cst.Integer)


def _pid_swap(node: cst.Call, ctx: Context) -> cst.CSTNode:
    axis = int(node.args[0].value.value)  # type: ignore[attr-defined]
    return node.with_changes(args=[node.args[0].with_changes(value=cst.Integer(str(1 if axis == 0 else 0)))])


def _stride_applies(node: cst.CSTNode, ctx: Context) -> bool:
    return ctx.host and isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and \
        node.func.attr.value == "stride" and len(node.args) == 1 and isinstance(node.args[0].value, cst.Integer)


def _stride_swap(node: cst.Call, ctx: Context) -> cst.CSTNode:
    d = int(node.args[0].value.value)  # type: ignore[attr-defined]
    return node.with_changes(args=[node.args[0].with_changes(value=cst.Integer(str(d + 1 if d == 0 else d - 1)))])


def _int64_applies(node: cst.CSTNode, ctx: Context) -> bool:
    return dotted(node) in ("tl.int64", "torch.int64", "torch.long")


def _int64_to_int32(node: cst.CSTNode, ctx: Context) -> cst.CSTNode:
    return _expr("tl.int32" if dotted(node) == "tl.int64" else "torch.int32")


def _aug_applies(kind: type) -> Applies:
    def applies(node: cst.CSTNode, ctx: Context) -> bool:
        return isinstance(node, cst.AugAssign) and isinstance(node.operator, kind)
    return applies


def _aug_to_assign(node: cst.AugAssign, ctx: Context) -> cst.CSTNode:
    return cst.Assign(targets=[cst.AssignTarget(node.target)], value=node.value, semicolon=node.semicolon)


def _aug_to_sub(node: cst.AugAssign, ctx: Context) -> cst.CSTNode:
    return node.with_changes(operator=cst.SubtractAssign())


def _round_to(dtype: str) -> Rewrite:
    def rewrite(node: cst.CSTNode, ctx: Context) -> cst.CSTNode:
        if ctx.triton:
            return _expr(f"({code_of(node)}).to(tl.{dtype}).to(tl.float32)")
        return _expr(f"(_r.to(torch.{dtype}).to(_r.dtype) if (_r := {code_of(node)}).is_floating_point() else _r)")
    return rewrite


def _acc_bf16(node: cst.AugAssign, ctx: Context) -> cst.CSTNode:
    t = code_of(node.target)
    return cst.Assign(targets=[cst.AssignTarget(node.target)],
                      value=_expr(f"({t} + {code_of(node.value)}).to(tl.bfloat16).to(tl.float32)"))


#: torch calls whose result is a computed tensor (not a factory): the precision operators round it.
_NOT_COMPUTE = ("empty", "empty_like", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like", "arange",
                "tensor", "rand", "randn", "randint", "rand_like", "randn_like", "manual_seed", "cuda", "device",
                "Size", "finfo", "iinfo", "no_grad", "stack", "cat")


#: Tensor methods that compute (``x.sum(1)``): the precision operators round their result too.
_COMPUTE_METHODS = ("sum", "mean", "matmul", "mm", "bmm", "exp", "log", "softmax", "log_softmax", "var", "std",
                    "norm", "pow", "sqrt", "tanh", "sigmoid", "relu", "cumsum", "cumprod", "prod", "logsumexp",
                    "abs", "clamp", "max", "min", "amax", "amin", "div", "mul", "add", "sub")


def _torch_compute_applies(node: cst.CSTNode, ctx: Context) -> bool:
    """A call in a forward that computes a tensor: ``torch.*``/``F.*`` (not a factory), a submodule, a method."""
    if not ctx.host or ctx.function != "forward" or not isinstance(node, cst.Call):
        return False
    name = _call_name(node)
    if name.startswith(("torch.", "F.", "nn.functional.")):
        return name.rsplit(".", 1)[-1] not in _NOT_COMPUTE and not name.startswith("torch.cuda")
    if name.startswith("self.") and name.count(".") == 1:
        return True  # a submodule: self.conv(x)
    return isinstance(node.func, cst.Attribute) and node.func.attr.value in _COMPUTE_METHODS and \
        not name.startswith(("tl.", "triton.", "math.", "np."))


def _operand_applies(node: cst.CSTNode, ctx: Context) -> bool:
    """A compute call whose first argument is a tensor expression (not a literal or a keyword)."""
    if not _torch_compute_applies(node, ctx) or not node.args:
        return False
    a = node.args[0]
    if isinstance(node.func, cst.Attribute) and _call_name(node).rsplit(".", 1)[0] not in ("torch", "F") and \
            not _call_name(node).startswith(("self.", "torch.", "F.", "nn.functional.")):
        return True  # x.sum(1): the operand is x itself
    return a.keyword is None and not a.star and not isinstance(a.value, (cst.Integer, cst.Float, cst.SimpleString))


def _round_operand(dtype: str) -> Rewrite:
    def rewrite(node: cst.Call, ctx: Context) -> cst.CSTNode:
        r = f"(_o.to(torch.{dtype}).to(_o.dtype) if (_o := {{x}}).is_floating_point() else _o)"
        if isinstance(node.func, cst.Attribute) and not _call_name(node).startswith(("self.", "torch.", "F.",
                                                                                     "nn.functional.")):
            return node.with_changes(func=node.func.with_changes(value=_expr(r.format(x=code_of(node.func.value)))))
        args = list(node.args)
        args[0] = args[0].with_changes(value=_expr(r.format(x=code_of(args[0].value))))
        return node.with_changes(args=args)
    return rewrite


#: Calls that are elementwise steps or layers of a forward: ``call-dropped`` replaces one by its input.
def _call_dropped_applies(node: cst.CSTNode, ctx: Context) -> bool:
    if not _torch_compute_applies(node, ctx) or not node.args:
        return False
    name = _call_name(node)
    a = node.args[0]
    if not name.startswith(("torch.", "F.", "nn.functional.", "self.")):
        return False
    return a.keyword is None and not a.star and not isinstance(a.value, (cst.Integer, cst.Float, cst.SimpleString,
                                                                          cst.List, cst.Tuple))


def _call_dropped(node: cst.Call, ctx: Context) -> cst.CSTNode:
    return _expr(f"({code_of(node.args[0].value)})")


def _kwarg_applies(node: cst.CSTNode, ctx: Context) -> bool:
    """A keyword argument of a torch/nn call in host code (a layer's padding, an eps, a slope, a dim)."""
    if not ctx.host or not isinstance(node, cst.Arg) or node.keyword is None or \
            node.keyword.value in ("inplace", "device", "dtype", "out", "non_blocking", "memory_format"):
        return False
    parent = ctx.stack[-1] if ctx.stack else None
    return isinstance(parent, cst.Call) and _call_name(parent).startswith(("torch.", "F.", "nn.", "self."))


def _kwarg_dropped(node: cst.Arg, ctx: Context) -> cst.CSTNode:
    return cst.RemovalSentinel.REMOVE  # the call falls back to the parameter's default


_SUM_MEAN = {"sum": "mean", "mean": "sum"}


def _sum_mean_applies(node: cst.CSTNode, ctx: Context) -> bool:
    return isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and \
        node.func.attr.value in _SUM_MEAN and not _call_name(node).startswith(("tl.", "np.", "math."))


def _sum_mean_swap(node: cst.Call, ctx: Context) -> cst.CSTNode:
    return node.with_changes(func=node.func.with_changes(attr=cst.Name(_SUM_MEAN[node.func.attr.value])))


_NONCOMMUTING = ("torch.matmul", "torch.mm", "torch.bmm", "torch.sub", "torch.div", "torch.subtract",
                 "torch.divide", "torch.pow", "torch.fmod", "torch.remainder")


def _swap_applies(node: cst.CSTNode, ctx: Context) -> bool:
    if isinstance(node, cst.BinaryOperation):
        return isinstance(node.operator, (cst.Subtract, cst.Divide, cst.MatrixMultiply)) and \
            not _mentions_pointer(node) and not ctx.triton
    return ctx.host and _call_name(node) in _NONCOMMUTING and len(node.args) >= 2 and \
        all(a.keyword is None and not a.star for a in node.args[:2])


def _operand_swap(node: cst.CSTNode, ctx: Context) -> cst.CSTNode:
    if isinstance(node, cst.BinaryOperation):
        return node.with_changes(left=_expr(f"({code_of(node.right)})"), right=_expr(f"({code_of(node.left)})"))
    args = list(node.args)
    a0, a1 = args[0], args[1]
    args[0] = a0.with_changes(value=a1.value)
    args[1] = a1.with_changes(value=a0.value)
    return node.with_changes(args=args)


def _int_applies(node: cst.CSTNode, ctx: Context) -> bool:
    # integer constants of host code (a layer's width, a view's size, a kernel size): not 0/1, which are
    # mostly dims and indexes (dim-changed covers those)
    return ctx.host and isinstance(node, cst.Integer) and node.evaluated_value >= 2 and \
        not any(isinstance(n, cst.Subscript) for n in ctx.stack[-3:])


def _int_plus_one(node: cst.Integer, ctx: Context) -> cst.CSTNode:
    return cst.Integer(str(node.evaluated_value + 1))


_MATMULS = ("torch.matmul", "torch.mm", "torch.bmm", "torch.einsum", "F.linear", "torch.nn.functional.linear",
            "torch.addmm", "torch.baddbmm")
_TF32 = "{x}.view(torch.int32).bitwise_and(-8192).view(torch.float32)"


#: Layers whose products run in TF32 on tensor cores when allowed.
_TF32_LAYERS = ("Linear", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d",
                "Bilinear")
_TF32_FUNCS = ("F.conv1d", "F.conv2d", "F.conv3d", "F.conv_transpose1d", "F.conv_transpose2d",
               "F.conv_transpose3d", "torch.conv1d", "torch.conv2d", "torch.conv3d")


def _tf32_applies(node: cst.CSTNode, ctx: Context) -> bool:
    if ctx.triton:
        return _call_name(node) == "tl.dot" and len(node.args) >= 2
    if isinstance(node, cst.BinaryOperation):
        return isinstance(node.operator, cst.MatrixMultiply)
    name = _call_name(node)
    if name.startswith("self.") and name.count(".") == 1:  # self.conv(x): the input operand
        return ctx.function == "forward" and ctx.submodules.get(name[5:]) in _TF32_LAYERS and len(node.args) >= 1 \
            and node.args[0].keyword is None and not node.args[0].star
    if name in _TF32_FUNCS:
        return len(node.args) >= 1 and node.args[0].keyword is None
    return name in _MATMULS and len(node.args) >= 2 and name != "torch.einsum"


def _tf32_operands(node: cst.CSTNode, ctx: Context) -> cst.CSTNode:
    if isinstance(node, cst.BinaryOperation):
        l, r = code_of(node.left), code_of(node.right)
        return _expr(f"({_TF32.format(x=f'({l}).contiguous()')}) @ ({_TF32.format(x=f'({r}).contiguous()')})")
    args = list(node.args)
    single = _call_name(node).startswith("self.") or _call_name(node) in _TF32_FUNCS  # the weights stay fp32
    for i in (0,) if single else (0, 1):
        x = code_of(args[i].value)
        if ctx.triton:
            new = f"(({x}).to(tl.int32, bitcast=True) & -8192).to(tl.float32, bitcast=True)"
        else:
            new = _TF32.format(x=f"({x}).contiguous()")
        args[i] = args[i].with_changes(value=_expr(new))
    return node.with_changes(args=args)


def _neg_inf_applies(node: cst.CSTNode, ctx: Context) -> bool:
    c = code_of(node).replace(" ", "").replace("'", '"')
    if isinstance(node, cst.Call):
        return c == 'float("-inf")'
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        return c in ('-float("inf")', "-math.inf", "-torch.inf", "-np.inf")
    return False


def _zero_init_applies(node: cst.CSTNode, ctx: Context) -> bool:
    return _call_name(node) in ("tl.zeros", "torch.zeros", "torch.zeros_like")


def _zero_to_one(node: cst.Call, ctx: Context) -> cst.CSTNode:
    name = _call_name(node)
    if name == "tl.zeros":
        return _expr(f"({code_of(node)} + 1.0)")
    return node.with_changes(func=_expr(name.replace("zeros", "ones")))


def _float_applies(node: cst.CSTNode, ctx: Context) -> bool:
    return isinstance(node, cst.Float) and float(node.evaluated_value) not in (0.0, 1.0)


def _float_perturb(node: cst.Float, ctx: Context) -> cst.CSTNode:
    return cst.Float(repr(float(node.evaluated_value) * 1.01))


def _is_value_name(node: cst.CSTNode, ctx: Context) -> bool:
    """A name read as a value: not a parameter, a keyword, an attribute's name or an assignment target."""
    parent = ctx.stack[-1] if ctx.stack else None
    if parent is None or isinstance(parent, (cst.Param, cst.AssignTarget, cst.Attribute)):
        return False
    return not (isinstance(parent, cst.Arg) and parent.keyword is node)


def _eps_applies(node: cst.CSTNode, ctx: Context) -> bool:
    if isinstance(node, cst.Float):
        return 0.0 < float(node.evaluated_value) < 1e-3
    return isinstance(node, cst.Name) and node.value == "eps" and _is_value_name(node, ctx)


def _eps_times_ten(node: cst.CSTNode, ctx: Context) -> cst.CSTNode:
    if isinstance(node, cst.Float):
        return cst.Float(repr(float(node.evaluated_value) * 10))
    return _expr("(eps * 10)")


def _half_applies(node: cst.CSTNode, ctx: Context) -> bool:
    return _is_number(node, 0.5)


def _half_to_one(node: cst.CSTNode, ctx: Context) -> cst.CSTNode:
    return cst.Float("1.0")


_SQRTS = ("tl.sqrt", "tl.math.sqrt", "torch.sqrt", "math.sqrt", "tl.sqrt_rn", "np.sqrt")


def _sqrt_applies(node: cst.CSTNode, ctx: Context) -> bool:
    return _call_name(node) in _SQRTS and len(node.args) == 1


def _sqrt_dropped(node: cst.Call, ctx: Context) -> cst.CSTNode:
    return _expr(f"({code_of(node.args[0].value)})")


def _binop_applies(kind: type, pointer_ok: bool = True) -> Applies:
    def applies(node: cst.CSTNode, ctx: Context) -> bool:
        return isinstance(node, cst.BinaryOperation) and isinstance(node.operator, kind) and \
            (pointer_ok or not _mentions_pointer(node.left))
    return applies


def _binop_to(kind: type) -> Rewrite:
    def rewrite(node: cst.BinaryOperation, ctx: Context) -> cst.CSTNode:
        op = node.operator
        return node.with_changes(operator=kind(whitespace_before=op.whitespace_before,
                                               whitespace_after=op.whitespace_after))
    return rewrite


def _keep_left(node: cst.BinaryOperation, ctx: Context) -> cst.CSTNode:
    return node.left.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()]) \
        if not node.left.lpar else node.left


_MAXMIN = {"tl.maximum": "tl.minimum", "tl.minimum": "tl.maximum", "tl.max": "tl.min", "tl.min": "tl.max",
           "torch.max": "torch.min", "torch.min": "torch.max", "torch.maximum": "torch.minimum",
           "torch.minimum": "torch.maximum", "torch.amax": "torch.amin", "torch.amin": "torch.amax",
           "torch.argmax": "torch.argmin", "torch.argmin": "torch.argmax", "max": "min", "min": "max"}
_MAXMIN_METHODS = {"max": "min", "min": "max", "amax": "amin", "amin": "amax", "argmax": "argmin",
                   "argmin": "argmax", "clamp_min": "clamp_max", "clamp_max": "clamp_min"}


def _maxmin_applies(node: cst.CSTNode, ctx: Context) -> bool:
    if not isinstance(node, cst.Call):
        return False
    if _call_name(node) in _MAXMIN:
        return True
    return isinstance(node.func, cst.Attribute) and node.func.attr.value in _MAXMIN_METHODS and \
        dotted(node.func) not in _MAXMIN and not dotted(node.func).startswith(("tl.", "torch.", "math."))


def _maxmin_swap(node: cst.Call, ctx: Context) -> cst.CSTNode:
    name = _call_name(node)
    if name in _MAXMIN:
        return node.with_changes(func=_expr(_MAXMIN[name]))
    return node.with_changes(func=node.func.with_changes(attr=cst.Name(_MAXMIN_METHODS[node.func.attr.value])))


def _neg_applies(node: cst.CSTNode, ctx: Context) -> bool:
    return isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus) and \
        not isinstance(node.expression, (cst.Integer, cst.Float)) and not _neg_inf_applies(node, ctx)


def _abs_applies(node: cst.CSTNode, ctx: Context) -> bool:
    return _call_name(node) in ("tl.abs", "torch.abs", "abs") and len(node.args) == 1


def _unwrap_first(node: cst.CSTNode, ctx: Context) -> cst.CSTNode:
    inner = node.expression if isinstance(node, cst.UnaryOperation) else node.args[0].value
    return _expr(f"({code_of(inner)})")


#: torch functions and methods with a reduction dim as second positional argument.
_DIM_FNS = ("sum", "mean", "max", "min", "amax", "amin", "argmax", "argmin", "softmax", "log_softmax", "cumsum",
            "cumprod", "prod", "norm", "std", "var", "logsumexp", "tl.sum", "tl.max", "tl.min", "tl.argmax",
            "tl.argmin", "tl.cumsum", "tl.reduce", "tl.associative_scan")


def _dim_arg(node: cst.Call) -> int | None:
    """Index of the argument that names a reduction dim (``dim=``/``axis=``, or the usual position)."""
    for i, a in enumerate(node.args):
        if a.keyword is not None and a.keyword.value in ("dim", "axis"):
            return i
    name = _call_name(node)
    if not isinstance(node.func, (cst.Attribute, cst.Name)):
        return None
    short = node.func.attr.value if isinstance(node.func, cst.Attribute) else node.func.value
    if name.startswith(("tl.", "torch.", "F.")):
        pos = 1  # torch.sum(x, 1), tl.sum(x, 0)
    elif isinstance(node.func, cst.Attribute):
        pos = 0  # x.sum(1)
    else:
        return None
    if short in _DIM_FNS and len(node.args) > pos and node.args[pos].keyword is None and not node.args[pos].star:
        return pos
    return None


def _dim_applies(node: cst.CSTNode, ctx: Context) -> bool:
    if not isinstance(node, cst.Call):
        return False
    i = _dim_arg(node)
    if i is None:
        return False
    v = node.args[i].value
    return isinstance(v, (cst.Integer, cst.Name, cst.Attribute)) or \
        (isinstance(v, cst.UnaryOperation) and isinstance(v.expression, cst.Integer))


def _dim_changed(node: cst.Call, ctx: Context) -> cst.CSTNode:
    i = _dim_arg(node)
    args = list(node.args)
    v = args[i].value  # type: ignore[index]
    if isinstance(v, (cst.Integer, cst.UnaryOperation)):
        d = int(code_of(v).replace(" ", ""))
        new: cst.BaseExpression = _expr(str(d - 1 if d > 0 else d + 1 if d == 0 else d - 1))
    else:
        new = _expr(f"({code_of(v)} - 1)")
    args[i] = args[i].with_changes(value=new)  # type: ignore[index]
    return node.with_changes(args=args)


def _keepdim_applies(node: cst.CSTNode, ctx: Context) -> bool:
    return isinstance(node, cst.Call) and _kwarg(node, "keepdim") is not None and \
        isinstance(_kwarg(node, "keepdim").value, cst.Name)  # type: ignore[union-attr]


def _keepdim_flip(node: cst.Call, ctx: Context) -> cst.CSTNode:
    v = code_of(_kwarg(node, "keepdim").value)  # type: ignore[union-attr]
    return _with_kwarg(node, "keepdim", _expr("False" if v == "True" else "True" if v == "False" else f"not {v}"))


def _where_applies(node: cst.CSTNode, ctx: Context) -> bool:
    return _call_name(node) in ("tl.where", "torch.where") and len(node.args) == 3


def _where_keep(i: int) -> Rewrite:
    def rewrite(node: cst.Call, ctx: Context) -> cst.CSTNode:
        kept = code_of(node.args[i].value)
        return _expr(f"({kept})")
    return rewrite


def _if_applies(node: cst.CSTNode, ctx: Context) -> bool:
    return isinstance(node, cst.If) and isinstance(node.orelse, (cst.Else, cst.If))


def _if_keep_then(node: cst.If, ctx: Context) -> cst.CSTNode:
    return node.with_changes(test=cst.Name("True"), orelse=None)


def _empty_like_applies(node: cst.CSTNode, ctx: Context) -> bool:
    return ctx.host and _call_name(node) in ("torch.empty_like",) and len(node.args) == 1 and \
        isinstance(node.args[0].value, cst.Name)


def _alias_input(node: cst.Call, ctx: Context) -> cst.CSTNode:
    return node.args[0].value


def _aug_target_applies(node: cst.CSTNode, ctx: Context) -> bool:
    # x = x * s  ->  x *= s: an in-place write, to the caller's input when x is a parameter
    if not (ctx.host and isinstance(node, cst.Assign) and len(node.targets) == 1):
        return False
    t, v = node.targets[0].target, node.value
    return isinstance(t, cst.Name) and isinstance(v, cst.BinaryOperation) and isinstance(v.left, cst.Name) and \
        v.left.value == t.value and type(v.operator) in _AUG
    

_AUG = {cst.Add: cst.AddAssign, cst.Subtract: cst.SubtractAssign, cst.Multiply: cst.MultiplyAssign,
        cst.Divide: cst.DivideAssign}


def _to_inplace(node: cst.Assign, ctx: Context) -> cst.CSTNode:
    v = node.value
    return cst.AugAssign(target=node.targets[0].target, operator=_AUG[type(v.operator)](), value=v.right)


#: torch functions with an in-place Tensor method twin: ``torch.relu(x)`` -> ``x.relu_()``.
_TENSOR_INPLACE = ("relu", "sigmoid", "tanh", "exp", "clamp", "abs", "neg", "mul", "add", "sub", "div", "sqrt",
                   "log", "pow", "clamp_min", "clamp_max", "erf", "exp2", "log1p", "expm1", "square", "reciprocal",
                   "rsqrt", "sin", "cos")
#: torch.nn.functional activations with an ``inplace=`` argument.
_F_INPLACE = ("relu", "hardtanh", "leaky_relu", "elu", "selu", "celu", "silu", "hardswish", "hardsigmoid", "mish",
              "relu6", "rrelu", "threshold", "dropout")


def _inplace_call_applies(node: cst.CSTNode, ctx: Context) -> bool:
    name = _call_name(node)
    if not (ctx.host and ctx.function == "forward" and node.args and node.args[0].keyword is None
            and not node.args[0].star):
        return False
    short = name.rsplit(".", 1)[-1]
    if name.startswith(("F.", "torch.nn.functional.", "nn.functional.")):
        return short in _F_INPLACE
    return name.startswith("torch.") and name.count(".") == 1 and short in _TENSOR_INPLACE


def _inplace_call(node: cst.Call, ctx: Context) -> cst.CSTNode:
    name = _call_name(node)
    short = name.rsplit(".", 1)[-1]
    if not name.startswith("torch.") or name.startswith("torch.nn."):
        plain = _with_kwarg(node, "inplace", None)
        return plain.with_changes(args=[*plain.args[:-1], plain.args[-1].with_changes(
            comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
            cst.Arg(keyword=cst.Name("inplace"), value=cst.Name("True"))])
    x = code_of(node.args[0].value)
    rest = ", ".join(code_of(a).strip().rstrip(",") for a in node.args[1:])
    return _expr(f"({x}).{short}_({rest})")


def _launch_applies(node: cst.CSTNode, ctx: Context) -> bool:
    """``kernel[grid](...)`` where ``kernel`` is a ``@triton.jit`` function of the program."""
    return ctx.host and isinstance(node, cst.Call) and isinstance(node.func, cst.Subscript) and \
        dotted(node.func.value) in ctx.jit_names


def _scratch_applies(node: cst.CSTNode, ctx: Context) -> bool:
    # the output argument of a launch: the last plain name argument assigned from torch.empty*
    return _launch_applies(node, ctx) and _output_arg(node) is not None


def _output_arg(node: cst.Call) -> int | None:
    names = [i for i, a in enumerate(node.args) if a.keyword is None and isinstance(a.value, cst.Name)
             and a.value.value in ("y", "out", "o", "c", "C", "output", "losses", "parts", "result", "res")]
    return names[-1] if names else None


def _scratch_store(node: cst.Call, ctx: Context) -> cst.CSTNode:
    i = _output_arg(node)
    args = list(node.args)
    args[i] = args[i].with_changes(value=_expr(f"torch.empty_like({code_of(args[i].value)})"))  # type: ignore[index]
    return node.with_changes(args=args)


def _return_applies(node: cst.CSTNode, ctx: Context) -> bool:
    return ctx.host and ctx.function == "forward" and isinstance(node, cst.Return) and node.value is not None \
        and not isinstance(node.value, cst.Tuple)


def _return_unwritten(node: cst.Return, ctx: Context) -> cst.CSTNode:
    return node.with_changes(value=_expr(f"torch.empty_like({code_of(node.value)})"))


def _sync_applies(node: cst.CSTNode, ctx: Context) -> bool:
    return ctx.host and isinstance(node, cst.Expr) and isinstance(node.value, cst.Call) and \
        (_call_name(node.value).endswith((".synchronize", ".wait_stream", ".wait_event", ".record_stream")))


def _sync_removed(node: cst.Expr, ctx: Context) -> cst.CSTNode:
    return node.with_changes(value=cst.Name("None"))


def _launch_line_applies(node: cst.CSTNode, ctx: Context) -> bool:
    """A statement line that is one kernel launch."""
    return isinstance(node, cst.SimpleStatementLine) and len(node.body) == 1 and \
        isinstance(node.body[0], cst.Expr) and _launch_applies(node.body[0].value, ctx)


def _side_stream(node: cst.SimpleStatementLine, ctx: Context) -> cst.CSTNode:
    # the launch goes to a new stream nobody waits for (on CUDA); on the CPU it runs as before
    head = cst.parse_statement("with torch.cuda.stream(torch.cuda.Stream()) if torch.cuda.is_available() "
                               "else torch.no_grad():\n    pass\n")
    return head.with_changes(body=cst.IndentedBlock(body=[node.with_changes(leading_lines=[])]),
                             leading_lines=node.leading_lines)


# ---------------------------------------------------------------------------
# the examples
# ---------------------------------------------------------------------------

_TRITON_EX = '''\
@triton.jit
def k(x_ptr, y_ptr, n, eps, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(y_ptr + offs, x, mask=mask)
'''


_JIT_K = "@triton.jit\ndef k(x_ptr, y_ptr, n):\n    pass\n\n\n"


def _tk(body: str, head: str = "def k(x_ptr, y_ptr, n, eps, BLOCK: tl.constexpr):") -> str:
    lines = "\n".join("    " + ln for ln in body.strip("\n").splitlines())
    return f"@triton.jit\n{head}\n{lines}\n"


def _fwd(body: str, args: str = "x") -> str:
    lines = "\n".join("        " + ln for ln in body.strip("\n").splitlines())
    return f"class ModelNew(nn.Module):\n    def forward(self, {args}):\n{lines}\n"


_LOOP = _tk('''
acc = tl.zeros((BLOCK,), tl.float32)
for c0 in range(0, n, BLOCK):
    acc += tl.load(x_ptr + c0 + tl.arange(0, BLOCK), mask=c0 + tl.arange(0, BLOCK) < n, other=0.0)
tl.store(y_ptr, tl.sum(acc, 0))
''')


def _op(name, family, description, example, types, applies, rewrite) -> Operator:  # noqa: ANN001
    return Operator(name, family, description, example, types, applies, rewrite)


_C, _B, _A, _F, _N, _I, _U = cst.Call, cst.BinaryOperation, cst.AugAssign, cst.Float, cst.Name, cst.If, cst.UnaryOperation

OPERATORS: tuple[Operator, ...] = (
    # boundary: comparisons and masks
    _op("lt-to-le", "boundary", "`<` becomes `<=`: a mask or bound admits one element too many",
        _TRITON_EX, (cst.Comparison,), _cmp_applies(cst.LessThan), _cmp_swap),
    _op("le-to-lt", "boundary", "`<=` becomes `<`: one element too few (a causal diagonal, a last index)",
        _tk("ok = offs <= n"), (cst.Comparison,), _cmp_applies(cst.LessThanEqual), _cmp_swap),
    _op("gt-to-ge", "boundary", "`>` becomes `>=`: the boundary value takes the other branch",
        _tk("y = tl.where(x > 0, x, 0.0)"), (cst.Comparison,), _cmp_applies(cst.GreaterThan), _cmp_swap),
    _op("ge-to-gt", "boundary", "`>=` becomes `>`: the boundary value takes the other branch",
        _tk("ok = (pos >= 0) & (pos < n)"), (cst.Comparison,), _cmp_applies(cst.GreaterThanEqual), _cmp_swap),
    _op("bound-minus-one", "boundary", "an upper bound `i < n` becomes `i < n - 1`: the tail is dropped",
        _TRITON_EX, (cst.Comparison,), _bound_applies, _bound_minus_one),
    _op("mask-dropped", "boundary", "`mask=`/`other=` removed from a `tl.load`/`tl.store`: the tail reads or writes "
        "out of bounds", _TRITON_EX, (_C,), _memory_call(TL_MEMORY, "mask"), _drop_mask),
    _op("other-changed", "boundary", "the padding value `other=` of a masked load changed (0 to 1, -inf to 0)",
        _TRITON_EX, (_C,), _memory_call(TL_LOADS, "other"), _other_changed),
    # index: offsets, loop bounds, program ids, strides, index width
    _op("offset-plus-one", "index", "a load's or store's address moved one element forward",
        _TRITON_EX, (_C,), _memory_call(TL_MEMORY), _offset("+ 1")),
    _op("offset-minus-one", "index", "a load's or store's address moved one element back",
        _TRITON_EX, (_C,), _memory_call(TL_MEMORY), _offset("- 1")),
    _op("loop-bound-minus-one", "index", "a loop's stop bound less one: the last block or element is skipped",
        _LOOP, (_C,), _range_applies, _range_minus_one),
    _op("grid-tail-dropped", "index", "`triton.cdiv(n, B)` becomes `n // B`: the last partial block gets no program",
        "def launch(x, n):\n    grid = (triton.cdiv(n, 1024),)\n", (_C,), _cdiv_applies, _cdiv_floor),
    _op("program-id-swap", "index", "`tl.program_id(0)` and `tl.program_id(1)` swapped",
        _TRITON_EX, (_C,), _pid_applies, _pid_swap),
    _op("stride-swap", "index", "a stride argument `t.stride(0)` replaced by its neighbour `t.stride(1)`",
        "def launch(a):\n    k[grid](a, a.stride(0), a.stride(1))\n", (_C,), _stride_applies, _stride_swap),
    _op("index-int32", "index", "64-bit index arithmetic narrowed to int32 (`tl.int64` -> `tl.int32`)",
        _tk("row = tl.program_id(0).to(tl.int64)"), (cst.Attribute,), _int64_applies, _int64_to_int32),
    # accumulate
    _op("acc-assign", "accumulate", "`acc += e` becomes `acc = e`: only the last contribution counts",
        _LOOP, (_A,), _aug_applies(cst.AddAssign), _aug_to_assign),
    _op("acc-subtract", "accumulate", "`acc += e` becomes `acc -= e`", _LOOP, (_A,), _aug_applies(cst.AddAssign),
        _aug_to_sub),
    # precision
    _op("load-fp16", "precision", "a Triton load rounded through fp16 (an fp32 kernel computing in half)",
        _TRITON_EX, (_C,), _memory_call(TL_LOADS), _round_to("float16")),
    _op("load-bf16", "precision", "a Triton load rounded through bf16", _TRITON_EX, (_C,), _memory_call(TL_LOADS),
        _round_to("bfloat16")),
    _op("acc-bf16", "precision", "an accumulation rounded to bf16 at every step (`acc += e` in a bf16 register)",
        _LOOP, (_A,), lambda n, c: c.triton and isinstance(n.operator, cst.AddAssign), _acc_bf16),
    _op("result-fp16", "precision", "a PyTorch op's result rounded through fp16 (the op run in half precision)",
        _fwd("return torch.relu(self.conv(x))"), (_C,), _torch_compute_applies, _round_to("float16")),
    _op("result-bf16", "precision", "a PyTorch op's result rounded through bf16",
        _fwd("return torch.relu(self.conv(x))"), (_C,), _torch_compute_applies, _round_to("bfloat16")),
    _op("operand-fp16", "precision", "the input of a PyTorch op rounded through fp16",
        _fwd("return torch.relu(self.conv(x))"), (_C,), _operand_applies, _round_operand("float16")),
    _op("operand-bf16", "precision", "the input of a PyTorch op rounded through bf16",
        _fwd("return torch.relu(self.conv(x))"), (_C,), _operand_applies, _round_operand("bfloat16")),
    _op("operands-tf32", "precision", "the operands of a product truncated to TF32 (10 mantissa bits) when the "
        "problem does not allow it", _fwd("return torch.matmul(a, b)", "a, b"), (_C, _B), _tf32_applies,
        _tf32_operands),
    # init
    _op("neg-inf-to-zero", "init", "an initial value or padding of `-inf` becomes `0` (a max over negatives breaks)",
        _tk('m = tl.full((BLOCK,), float("-inf"), tl.float32)'), (_C, _U), _neg_inf_applies,
        lambda n, c: cst.Float("0.0")),
    _op("zero-init-to-one", "init", "a zero initialisation (`tl.zeros`, `torch.zeros`) starts at one",
        _LOOP, (_C,), _zero_init_applies, _zero_to_one),
    # constants
    _op("float-constant-perturb", "constant", "a floating-point constant off by 1% (a coefficient, a threshold)",
        _tk("y = 0.7071067811865476 * x"), (_F,), _float_applies, _float_perturb),
    _op("eps-times-ten", "constant", "an epsilon ten times too large", _tk("s = 1.0 / tl.sqrt(v + eps)"),
        (_F, _N), _eps_applies, _eps_times_ten),
    _op("int-constant-plus-one", "constant", "an integer constant of host code plus one (a width, a size, a "
        "kernel size)", "class ModelNew(nn.Module):\n    def __init__(self):\n        self.fc = nn.Linear(16, 8)\n",
        (cst.Integer,), _int_applies, _int_plus_one),
    _op("kwarg-dropped", "constant", "a keyword argument of a torch call dropped, so its default applies "
        "(`eps=`, `negative_slope=`, `padding=`)", _fwd("return F.leaky_relu(x, negative_slope=0.2)"), (cst.Arg,),
        _kwarg_applies, _kwarg_dropped),
    _op("half-to-one", "constant", "a constant 0.5 becomes 1.0 (GELU's missing half)",
        _tk("y = 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476))"), (_F,), _half_applies, _half_to_one),
    _op("sqrt-dropped", "constant", "`sqrt(v)` becomes `v` (RMSNorm's missing sqrt, attention's 1/sqrt(d))",
        _tk("s = 1.0 / tl.sqrt(v + eps)"), (_C,), _sqrt_applies, _sqrt_dropped),
    # arithmetic
    _op("add-to-sub", "arith", "`+` becomes `-` (not in pointer arithmetic)", _tk("y = x + eps"), (_B,),
        _binop_applies(cst.Add, pointer_ok=False), _binop_to(cst.Subtract)),
    _op("sub-to-add", "arith", "`-` becomes `+` (not in pointer arithmetic)", _tk("y = x - eps"), (_B,),
        _binop_applies(cst.Subtract, pointer_ok=False), _binop_to(cst.Add)),
    _op("mul-to-div", "arith", "`*` becomes `/`", _tk("y = x * eps"), (_B,), _binop_applies(cst.Multiply),
        _binop_to(cst.Divide)),
    _op("max-min-swap", "arith", "`max` and `min` swapped (`tl.maximum`, `torch.max`, `x.amax()`, ...)",
        _tk("y = tl.maximum(x, 0.0)"), (_C,), _maxmin_applies, _maxmin_swap),
    _op("add-term-dropped", "arith", "`a + b` becomes `a`: a term (a bias, a residual, a carry) is dropped",
        _tk("y = x + eps"), (_B,), _binop_applies(cst.Add), _keep_left),
    _op("sub-term-dropped", "arith", "`a - b` becomes `a` (softmax without its max subtraction)",
        _tk("y = tl.exp(x - eps)"), (_B,), _binop_applies(cst.Subtract), _keep_left),
    _op("factor-dropped", "arith", "`a * b` (or `a / b`) becomes `a`: a scale or a normaliser is dropped",
        _tk("y = x * eps"), (_B,), lambda n, c: isinstance(n.operator, (cst.Multiply, cst.Divide)), _keep_left),
    _op("call-dropped", "arith", "a step of a forward skipped: `torch.relu(x)` or `self.bn(x)` becomes `x`",
        _fwd("return torch.relu(self.bn(x))"), (_C,), _call_dropped_applies, _call_dropped),
    _op("operand-swap", "arith", "the operands of a non-commuting op swapped: `a - b` -> `b - a`, "
        "`matmul(a, b)` -> `matmul(b, a)`", _fwd("return torch.matmul(a, b)", "a, b"), (_B, _C), _swap_applies,
        _operand_swap),
    _op("negation-dropped", "arith", "`-x` becomes `x`", _tk("y = -x"), (_U,), _neg_applies, _unwrap_first),
    _op("abs-dropped", "arith", "`abs(x)` becomes `x`", _tk("y = x / (1.0 + tl.abs(x))"), (_C,), _abs_applies,
        _unwrap_first),
    # reduction
    _op("dim-changed", "reduction", "the reduction axis or dim changed by one (`dim=1` -> `dim=0`)",
        _fwd("return torch.sum(x, dim=1)"), (_C,), _dim_applies, _dim_changed),
    _op("sum-mean-swap", "reduction", "`x.sum(...)` and `x.mean(...)` swapped (a normaliser dropped or added)",
        _fwd("return x.sum(dim=1)"), (_C,), _sum_mean_applies, _sum_mean_swap),
    _op("keepdim-flipped", "reduction", "`keepdim=True` and `False` swapped",
        _fwd("return torch.mean(x, dim=1, keepdim=True)"), (_C,), _keepdim_applies, _keepdim_flip),
    # branches
    _op("where-true-only", "branch", "`where(c, a, b)` becomes `a`: the else branch (negative inputs, masked "
        "lanes) is dropped", _tk("y = tl.where(x > 0, x, 0.0)"), (_C,), _where_applies, _where_keep(1)),
    _op("where-false-only", "branch", "`where(c, a, b)` becomes `b`: the then branch is dropped",
        _tk("y = tl.where(x > 0, x, 0.0)"), (_C,), _where_applies, _where_keep(2)),
    _op("else-dropped", "branch", "`if c: A else: B` becomes `A`: the other branch never runs",
        _tk("if x > 0:\n    y = x\nelse:\n    y = 0.0"), (_I,), _if_applies, _if_keep_then),
    # memory
    _op("output-aliases-input", "memory", "the output buffer is the input (`torch.empty_like(x)` -> `x`): the "
        "kernel writes its input in place", "def f(x):\n    y = torch.empty_like(x)\n    return y\n", (_C,),
        _empty_like_applies, _alias_input),
    _op("assign-to-inplace", "memory", "`x = x * s` becomes `x *= s`: an in-place write, to the caller's tensor "
        "when `x` is an input", _fwd("x = x * 2.0\nreturn x"), (cst.Assign,), _aug_target_applies, _to_inplace),
    _op("inplace-call", "memory", "`torch.relu(x)` becomes `x.relu_()`: the op overwrites its argument",
        _fwd("return torch.relu(x)"), (_C,), _inplace_call_applies, _inplace_call),
    _op("scratch-store", "memory", "a launch writes a scratch buffer instead of the output, which stays "
        "unwritten", _JIT_K + "def f(x):\n    y = torch.empty_like(x)\n    k[grid](x, y, n)\n    return y\n", (_C,),
        _scratch_applies, _scratch_store),
    _op("output-unwritten", "memory", "`return y` becomes `return torch.empty_like(y)`: an unwritten output that "
        "may hold stale memory", _fwd("return torch.relu(x)"), (cst.Return,), _return_applies, _return_unwritten),
    # sync
    _op("sync-removed", "sync", "a `synchronize()` / `wait_stream()` call removed", "def f(s):\n    "
        "torch.cuda.synchronize()\n", (cst.Expr,), _sync_applies, _sync_removed),
    _op("side-stream-launch", "sync", "a kernel launch moved to a side stream nobody waits for (CUDA only)",
        _JIT_K + "def f(x):\n    k[grid](x, y, n)\n", (cst.SimpleStatementLine,), _launch_line_applies,
        _side_stream),
)

OPERATORS_BY_NAME = {op.name: op for op in OPERATORS}


def get_operators(spec: str | None = None) -> tuple[Operator, ...]:
    """Operators named by ``spec`` (comma list of names or families; None or ``all``: every one).

    Raises :class:`InvalidArgument` naming ``--operators`` and the allowed values.
    """
    if spec is None or spec.strip() in ("", "all"):
        return OPERATORS
    out: list[Operator] = []
    for item in (s.strip() for s in spec.split(",") if s.strip()):
        if item in OPERATORS_BY_NAME:
            chosen = [OPERATORS_BY_NAME[item]]
        elif item in FAMILIES:
            chosen = [op for op in OPERATORS if op.family == item]
        else:
            raise InvalidArgument(f"Cannot have --operators={item!r}: allowed values are all, the families "
                                  f"{', '.join(FAMILIES)}, or operator names {', '.join(OPERATORS_BY_NAME)}")
        out += [op for op in chosen if op not in out]
    return tuple(out)


@lru_cache(maxsize=None)
def operator_table() -> tuple[tuple[str, str, str, str, str], ...]:
    """(name, family, description, before, after) for every operator, from its example."""
    rows = []
    for op in OPERATORS:
        before, after = op.example_diff()
        rows.append((op.name, op.family, op.description, before, after))
    return tuple(rows)
