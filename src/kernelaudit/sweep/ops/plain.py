"""A derived op's case as plain torch: the code that makes its tensors and calls its op,
with nothing of kernelaudit, for a finding's upstream report.

The recipe (:mod:`.recipe`) holds everything the call needs: the function's dotted path,
the sample's arguments with ``{"t": i}`` for tensor ``i``, each operand's sample shape
and the dim the sweep scales. The rendered tensors are stored as the sweep stores them, the
scaled dim first (``batch`` times its sample size; an interpolation's last dim widened),
and passed moved back to the sample's dim order, random values in the sweep's range [-1, 1) and its value domain
(``.abs() + 0.5`` for a log, ...), index operands below their bound, and
``requires_grad`` where a backward case takes a gradient; a backward case then calls
``backward`` on the judged outputs. The values are not the sweep's (those come from its
hash generator): a size fault shows with any values, and the snippet says which slice to
compare the call with.
"""

from __future__ import annotations

from typing import Any

from ..cases import Case
from .recipe import CONDITIONING, widen_factor, widenable

#: The value domains of :data:`.recipe.DOMAINS` as code appended to a tensor's expression.
DOMAIN_CODE = {"none": "", "pos": ".abs() + 0.5", "ge1": ".abs() + 1.5", "half": " * 0.5", "ge2": ".abs() + 2.5"}


def plain_torch(case: Case, device: str = "cuda", shapes=None) -> str | None:
    """Plain-torch code that runs ``case``'s call (None where the op is not a derived one,
    its function is only reachable through the op database, or its domain has no
    one-line form). ``shapes``: the operands' storage shapes the sweep recorded; None
    where this torch's recipe makes others (its op database's sample changed since the
    run), so the code never shows a call that did not run."""
    recipe = case.spec.extra.get("recipe")
    if recipe is None or recipe["fn"].startswith("opinfo:"):
        return None
    domain = CONDITIONING.get(case.op, recipe.get("domain", "none"))
    if domain not in DOMAIN_CODE:
        return None
    k = widen_factor(recipe, case.thresholds) if widenable(case.spec.family, recipe) else 1
    bwd = case.direction == "bwd"
    lines = ["import torch", f"dev, dt = {device!r}, torch.{case.dtype}"]
    views, made = {}, []
    for i, od in enumerate(recipe["operands"]):
        shape = list(od["shape"])
        if k != 1:
            shape[-1] *= k
        d = od["dim"]
        if d is not None:  # stored batch-first, as the sweep stores it; the op sees it moved back
            shape.insert(0, shape.pop(d) * case.batch)
            if d != 0:
                views[i] = f"x{i}.movedim(0, {d})"
        made.append(shape)
        size = "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"
        if od["kind"] == "index":
            tag = od.get("tag", "int64")
            expr = (f"torch.randint({od['high']}, {size}, device=dev)"
                    + (".bool()" if tag == "bool" else "" if tag == "int64" else f".to(torch.{tag})"))
        else:
            expr = f"torch.rand({size}, device=dev, dtype=dt) * 2 - 1"
            if DOMAIN_CODE[domain]:
                expr = f"({expr}){DOMAIN_CODE[domain]}"
            if bwd and od["grad"]:
                expr = f"({expr}).requires_grad_()"
        lines.append(f"x{i} = {expr}")
    if shapes is not None and [list(x) for x in shapes] != made:
        return None
    inp, args, kwargs = recipe["template"]
    if k != 1:
        args, kwargs = _widened(recipe["template"], k)
    call = ", ".join([_code(inp, views)] + [_code(a, views) for a in args]
                     + [f"{key}={_code(v, views)}"
                        for key, v in (kwargs.get("dict", {}) if isinstance(kwargs, dict) else {}).items()])
    lines.append(f"out = {recipe['fn']}({call})")
    outs = [o["index"] for o in recipe["outs"]]
    if bwd:
        if outs == [0]:
            lines.append("y = out if isinstance(out, torch.Tensor) else out[0]")
            lines.append("y.backward(torch.rand_like(y) * 2 - 1)")
        else:
            lines.append(f"ys = [out[i] for i in {tuple(outs)!r}]")
            lines.append("torch.autograd.backward(ys, [torch.rand_like(y) * 2 - 1 for y in ys])")
    if device.startswith("cuda"):
        lines.append("torch.cuda.synchronize()")
    scaled = next((i for i, od in enumerate(recipe["operands"]) if od["dim"] is not None), None)
    if scaled is not None:
        od = recipe["operands"][scaled]
        what = f"x{scaled}.grad" if bwd else "out"
        lines.append(f"# compare {what} with the same call on rows of x{scaled} (dim 0 here, "
                     f"{od['shape'][od['dim']]} a batch), far below the limits")
    return "\n".join(lines) + "\n"


def _widened(template: list, k: int) -> tuple[list, dict]:
    """The template's args and kwargs with the output size's last entry times ``k``
    (:func:`.recipe._widened_size` on the encoded form)."""
    from .recipe import _size_arg

    _, args, kwargs = template
    where = _size_arg(template)
    if where is None:
        return args, kwargs
    kind, key = where
    size = args[key] if kind == "arg" else kwargs["dict"][key]
    wide = {"tuple": [*size["tuple"][:-1], size["tuple"][-1] * k]}
    if kind == "arg":
        return [wide, *args[1:]], kwargs
    return args, {"dict": {**kwargs["dict"], key: wide}}


def _code(x: Any, views: dict[int, str]) -> str:
    """Python source for an encoded argument (:func:`.recipe.encode`'s form); tensor ``i``
    is ``views[i]`` where it is passed as a view of its batch-first storage."""
    if isinstance(x, list):
        return "[" + ", ".join(_code(v, views) for v in x) + "]"
    if isinstance(x, dict):
        if "t" in x:
            return views.get(x["t"], f"x{x['t']}")
        if "tuple" in x:
            items = [_code(v, views) for v in x["tuple"]]
            return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
        if "float" in x:
            return f"float({x['float']!r})"
        return "{" + ", ".join(f"{k!r}: {_code(v, views)}" for k, v in x["dict"].items()) + "}"
    return repr(x)
