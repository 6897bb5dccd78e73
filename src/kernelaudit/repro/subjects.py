"""What ``kernelaudit repro op`` probes: one op on a batch of samples, as ``(fn, x)`` for
:func:`~kernelaudit.repro.invariance.check`.

``op`` is a name of :data:`OPS` or any torch function by its dotted name, optionally with
keyword arguments: ``torch.nn.functional.gelu``, ``"torch.cumsum(dim=-1)"``. Samples are
rows of ``x``; K is the size each row reduces over, N the output columns (the GEMMs'
fixed ``[N, K]`` weights) or, for ``attention``, the sequence length:

===================  =====================================  ====================================
op                   samples ``x``                          call
===================  =====================================  ====================================
mm, addmm, linear    [rows, K]                              ``x @ W^T`` (+ bias)
bmm                  [rows, 4, K]                           ``bmm(x, W^T)`` per sample
softmax,             [rows, K]                              over the last dim
log_softmax
layer_norm,          [rows, K]                              over the last dim, weight (and bias)
rms_norm
attention            [rows, 2, N, K]: 2 heads, N tokens     ``scaled_dot_product_attention(x, x, x)``
sum, mean            [rows, K]                              over the last dim (keepdim)
torch.NAME(...)      [rows, K]                              ``NAME(x, **kwargs)``; a tuple: its first
===================  =====================================  ====================================

Under ``--impl ieee`` or ``mma`` the call runs inside :func:`~kernelaudit.repro.deterministic`,
which replaces the GEMMs, softmaxes, norms and attention; every other op runs its own
kernel there too (``sum``, ``mean`` and most dotted functions), so the probe says whether
torch's kernel is invariant on its own.
"""

from __future__ import annotations

import ast
import contextlib

from ..errors import InvalidArgument, check_choice

IMPLS = ("torch", "ieee", "mma")
DTYPES = ("bfloat16", "float16", "float32")
GEMMS = ("mm", "addmm", "linear", "bmm")
OPS = GEMMS + ("softmax", "log_softmax", "layer_norm", "rms_norm", "attention", "sum", "mean")
#: How a dotted op reads in the allowed values of an error message.
DOTTED_HINT = "a torch function by name (torch.nn.functional.gelu, 'torch.cumsum(dim=-1)')"


def impl_context(impl: str):
    """The context ``impl`` runs in: nothing for ``torch``, else ``deterministic(impl)``."""
    if impl == "torch":
        return contextlib.nullcontext()
    from .mode import deterministic
    return deterministic(impl)


def _bad_op(op: str, why: str = "") -> InvalidArgument:
    return InvalidArgument(f"Cannot have op={op!r}{': ' + why if why else ''}: allowed values are "
                           f"{', '.join(OPS)}, or {DOTTED_HINT}")


def _dotted_path(node: ast.AST) -> list[str] | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id] + parts[::-1]


def dotted_op(op: str):
    """``(function, kwargs)`` for ``torch.a.b`` or ``torch.a.b(key=literal, ...)``; raises
    :class:`InvalidArgument` naming ``op`` for anything else (no code is run: the name is
    looked up attribute by attribute under ``torch``, the values read as literals)."""
    import torch

    try:
        node = ast.parse(op.strip(), mode="eval").body
    except SyntaxError:
        raise _bad_op(op) from None
    kwargs = {}
    if isinstance(node, ast.Call):
        if node.args:
            raise _bad_op(op, "pass arguments by keyword (the samples are the first argument)")
        for kw in node.keywords:
            if kw.arg is None:
                raise _bad_op(op, "no **kwargs")
            try:
                kwargs[kw.arg] = ast.literal_eval(kw.value)
            except ValueError:
                raise _bad_op(op, f"{kw.arg}= must be a literal") from None
        node = node.func
    path = _dotted_path(node)
    if not path or path[0] != "torch" or len(path) < 2:
        raise _bad_op(op)
    obj = torch
    for name in path[1:]:
        if name.startswith("_"):
            raise _bad_op(op, "a public name only")
        if not hasattr(obj, name):
            raise _bad_op(op, f"torch has no {'.'.join(path[1:])}")
        obj = getattr(obj, name)
    if not callable(obj):
        raise _bad_op(op, f"{'.'.join(path)} is not a function")
    return obj, kwargs


def check_op(op: str):
    """None for a name of :data:`OPS`, else :func:`dotted_op`'s ``(function, kwargs)``;
    raises :class:`InvalidArgument` naming ``op`` and the allowed values."""
    return None if op in OPS else dotted_op(op)


def describe(op: str, dtype: str, k: int, n: int) -> str:
    """The subject's title: the op, its dtype and the sizes it uses."""
    sizes = f"K={k} N={n}" if op in GEMMS or op == "attention" else f"K={k}"
    return f"{op} {dtype} {sizes}"


def op_subject(op: str, impl: str, dtype: str, k: int, n: int, rows: int, device: str, seed: int = 0):
    """``(fn, x)`` for ``op`` (module docstring): ``x`` holds ``rows`` samples, drawn from
    ``seed`` like any weights, in ``dtype`` on ``device``; ``fn`` runs the op under
    ``impl`` (``torch``: as it is; ``ieee``, ``mma``: inside ``deterministic(impl)``),
    without autograd."""
    import torch

    check_choice("impl", impl, IMPLS)
    check_choice("dtype", dtype, DTYPES)
    call = check_op(op)
    for name, v in (("k", k), ("n", n), ("rows", rows)):
        if v < 1:
            raise InvalidArgument(f"Cannot have {name}={v}: allowed values are integers >= 1")
    dt = getattr(torch, dtype)
    g = torch.Generator().manual_seed(seed)

    def draw(*shape):
        return torch.randn(*shape, generator=g).to(dt).to(device)

    F = torch.nn.functional
    if call is not None:
        f, kwargs = call
        x = draw(rows, k)

        def run(t):
            y = f(t, **kwargs)
            return y[0] if isinstance(y, (tuple, list)) else y
    elif op in GEMMS:
        w, bias = draw(n, k), draw(n)       # [N, K]
        x = draw(rows, 4, k) if op == "bmm" else draw(rows, k)
        run = {"mm": lambda t: t @ w.t(), "addmm": lambda t: torch.addmm(bias, t, w.t()),
               "linear": lambda t: F.linear(t, w, bias),
               "bmm": lambda t: torch.bmm(t, w.t().expand(t.shape[0], k, n))}[op]
    elif op == "attention":
        x = draw(rows, 2, n, k)

        def run(t):
            return F.scaled_dot_product_attention(t, t, t)
    else:
        w, bias = draw(k), draw(k)
        x = draw(rows, k)
        run = {"softmax": lambda t: torch.softmax(t, -1), "log_softmax": lambda t: torch.log_softmax(t, -1),
               "layer_norm": lambda t: F.layer_norm(t, (k,), w, bias),
               "rms_norm": lambda t: F.rms_norm(t, (k,), w),
               "sum": lambda t: t.sum(-1, keepdim=True), "mean": lambda t: t.mean(-1, keepdim=True)}[op]

    def fn(t):
        with impl_context(impl), torch.inference_mode():
            return run(t)
    return fn, x
