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
from .recipe import CONDITIONING, GROWN_DOMAIN, grow_factor, growable, sample_shape, widen_factor, widenable

#: The value domains of :data:`.recipe.DOMAINS` as code appended to a tensor's expression.
DOMAIN_CODE = {"none": "", "pos": ".abs() + 0.5", "ge1": ".abs() + 1.5", "half": " * 0.5", "ge2": ".abs() + 2.5",
               "diagdom": None}   # None: written per operand, from its shape (:func:`_diagdom_code`)


def _diagdom_code(shape: list[int], dim: int | None) -> str | None:
    """``diagdom`` (:data:`.recipe.DOMAINS`) for an operand stored as ``shape``, batch
    dim ``dim``: ``+ max(m, n) * eye(m, n)`` on its last two dims, as the op sees them;
    None where storage moves them (a batch dim other than 0: not rendered)."""
    if len(shape) < 2:
        return ""
    if dim not in (None, 0):
        return None
    m, n = shape[-2], shape[-1]
    return f" + {max(m, n)} * torch.eye({m}, {n}, device=dev, dtype=dt)"


#: The op database's own functions (``opinfo:NAME|VARIANT`` recipes, lambdas inside
#: ``op_db``) as plain torch, copied from torch 2.11's ``common_methods_invocations``;
#: ``tests/sweep/test_plain_torch.py`` checks each gives the op database's bits.
OPINFO_CODE = {
    "opinfo:linalg.pinv|singular": "lambda a, b: torch.linalg.pinv(a @ b.mT)",
    "opinfo:linalg.lstsq|grad_oriented": "lambda a, b, driver: torch.linalg.lstsq(a, b, driver=driver)[:2]",
    **{f"opinfo:polygamma|polygamma_n_{n}": "lambda x, n, **kwargs: torch.polygamma(n, x, **kwargs)"
       for n in range(5)},
    "opinfo:special.polygamma|special_polygamma_n_0":
        "lambda x, n, **kwargs: torch.special.polygamma(n, x, **kwargs)",
}


#: Elements of the scaled operands in one chunk of :func:`plain_check`'s comparison.
CHECK_CHUNK = 2**24

#: Relative tolerance of :func:`plain_check`'s comparison per dtype (on 1 + |want|): a
#: size fault (a wrapped index, an unwritten tail, garbage) misses it by orders of
#: magnitude, and a kernel picked by the call's size rounds within it.
CHECK_TOL = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 5e-2, "float64": 1e-10}


def plain_torch(case: Case, device: str = "cuda", shapes=None) -> str | None:
    """Plain-torch code that runs ``case``'s call (None where the op is not a derived one,
    its function is only reachable through the op database and not in
    :data:`OPINFO_CODE`, or its domain has no one-line form). ``shapes``: the operands'
    storage shapes the sweep recorded; None where this torch's recipe makes others (its
    op database's sample changed since the run), so the code never shows a call that did
    not run."""
    parts = _parts(case, device, shapes)
    if parts is None:
        return None
    lines, call, recipe = parts
    bwd = case.direction == "bwd"
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


def plain_check(case: Case, device: str = "cuda", shapes=None, chunk_elements: int = CHECK_CHUNK) -> str | None:
    """Plain-torch code that runs ``case``'s call and compares it with the same call on
    chunks of whole batches (rows of the scaled operands, at most ``chunk_elements``
    elements a chunk: far below every limit), the outputs (forward) or the batched
    operands' gradients (backward, the same upstream gradient sliced). It prints one JSON
    line: ``result`` ok, wrong (elements off by more than ``tol`` (1 + |want|), the first
    one's index counted batch-major (the scaled dim outermost) and the largest
    difference) or raised (the exception); None where
    :func:`plain_torch` has no rendering. Nothing of kernelaudit runs."""
    parts = _parts(case, device, shapes)
    if parts is None:
        return None
    lines, call, recipe = parts
    n_ops = len(recipe["operands"])
    names = ", ".join(f"x{i}" for i in range(n_ops))
    batched = [od["dim"] is not None for od in recipe["operands"]]
    grads = [od["dim"] is not None and od["grad"] and od["kind"] == "value" for od in recipe["operands"]]
    tol = CHECK_TOL.get(case.dtype, CHECK_TOL["float32"])
    lines = ["import json, sys", *lines, "",
             f"def call({names}):",
             f"    return {recipe['fn']}({call})",
             "",
             f"xs, B, batched, grads = [{names}], {case.batch}, {batched!r}, {grads!r}",
             f"outs_at = {[(o['index'], o['dim']) for o in recipe['outs']]!r}",
             f"chunk = {chunk_elements}  # elements a chunk at most, far below every limit",
             f"tol = {tol!r}",
             "",
             "def picked(out):",
             "    out = (out,) if isinstance(out, torch.Tensor) else tuple(out)",
             "    return [out[i] for i, _ in outs_at]",
             "",
             "res = {'result': 'ok', 'wrong': 0, 'compared': 0, 'first_bad': None, 'max_abs_diff': 0.0}",
             "",
             "def compare(got, want, base):",
             "    got, want = got.detach().double(), want.detach().double()",
             "    same = (got == want) | (got.isnan() & want.isnan())  # equal infinities too",
             "    bad = ~(((got - want).abs() <= tol * (1 + want.abs())) | same)",
             "    res['compared'] += got.numel()",
             "    diff = (got - want).abs().nan_to_num(float('inf')).masked_fill(same, 0)",
             "    res['max_abs_diff'] = max(res['max_abs_diff'], float(diff.max()) if diff.numel() else 0.0)",
             "    nbad = int(bad.sum())",
             "    if nbad and res['first_bad'] is None:",
             "        res['first_bad'] = base + int(bad.flatten().nonzero()[0])",
             "    res['wrong'] += nbad",
             "",
             "try:"]
    if case.direction == "fwd":
        lines += ["    with torch.no_grad():",
                  f"        big = picked(call({names}))"]
    else:
        lines += [f"    big = picked(call({names}))",
                  "    ups = [torch.rand_like(y) * 2 - 1 for y in big]",
                  "    torch.autograd.backward(big, ups)"]
    if device.startswith("cuda"):
        lines.append("    torch.cuda.synchronize()")
    lines += ["except Exception as e:  # the call's own error is the finding",
              "    print(json.dumps({'result': 'raised', 'error': f'{type(e).__name__}: ' + str(e).strip()[:300]}))",
              "    sys.exit(0)",
              "",
              "# whole batches a chunk, counted on the tensors made (a widened sample's too)",
              "per = max([x.numel() // B for x, bat in zip(xs, batched) if bat] + [g.numel() // B for g in big] + [1])",
              "cb = max(1, chunk // per)",
              "for b0 in range(0, B, cb):",
              "    b1 = min(B, b0 + cb)",
              "    rows = [x.shape[0] // B if bat else None for x, bat in zip(xs, batched)]",
              "    part = [x.detach()[b0 * r:b1 * r] if r else x.detach() for x, r in zip(xs, rows)]"]
    if case.direction == "fwd":
        lines += ["    with torch.no_grad():",
                  "        small = picked(call(*part))",
                  "    for (i, d), g, w in zip(outs_at, big, small):",
                  "        r = g.shape[d] // B",
                  "        compare(g.narrow(d, b0 * r, (b1 - b0) * r), w, b0 * r * (g.numel() // g.shape[d]))"]
    else:
        lines += ["    part = [p.requires_grad_() if gr else p for p, gr in zip(part, grads)]",
                  "    small = picked(call(*part))",
                  "    # compact: a narrow view keeps the whole gradient's row length, a leading",
                  "    # dimension past what a BLAS takes (cuBLAS: INT_MAX) once that passes 2^31",
                  "    sl = [u.narrow(d, b0 * (u.shape[d] // B), (b1 - b0) * (u.shape[d] // B)).contiguous()",
                  "          for (i, d), u in zip(outs_at, ups)]",
                  "    torch.autograd.backward(small, sl)",
                  "    for x, p, r, gr in zip(xs, part, rows, grads):",
                  "        if gr and (x.grad is None) != (p.grad is None):  # a gradient only one call gives",
                  "            res['wrong'] += 1",
                  "        elif gr and x.grad is not None:",
                  "            compare(x.grad[b0 * r:b1 * r], p.grad, b0 * r * (x.numel() // x.shape[0]))"]
    lines += ["if res['wrong']:",
              "    res['result'] = 'wrong'",
              "print(json.dumps(res))"]
    return "\n".join(lines) + "\n"


def _parts(case: Case, device: str, shapes):
    """The tensor lines (imports, device, dtype, operands), the call's argument list and
    the recipe of ``case``; None where it has no plain rendering (see :func:`plain_torch`)."""
    recipe = case.spec.extra.get("recipe")
    if recipe is None or (recipe["fn"].startswith("opinfo:") and recipe["fn"] not in OPINFO_CODE):
        return None
    domain = CONDITIONING.get(case.op, recipe.get("domain", "none"))
    g = grow_factor(recipe, case.thresholds) if growable(case.op, recipe) else 1
    if g != 1:
        domain = GROWN_DOMAIN
    if domain not in DOMAIN_CODE:
        return None
    k = widen_factor(recipe, case.thresholds) if widenable(case.spec.family, recipe) else 1
    bwd = case.direction == "bwd"
    lines = ["import torch", f"dev, dt = {device!r}, torch.{case.dtype}"]
    if recipe["fn"] in OPINFO_CODE:  # a function only the op database holds, written out
        lines.append(f"op = {OPINFO_CODE[recipe['fn']]}  # {case.op} in PyTorch's op database")
        recipe = {**recipe, "fn": "op"}
    views, made = {}, []
    for i, od in enumerate(recipe["operands"]):
        shape = sample_shape(od, k, g)
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
            code = DOMAIN_CODE[domain] if DOMAIN_CODE[domain] is not None else _diagdom_code(shape, d)
            if code is None:
                return None
            if code:
                expr = f"({expr}){code}"
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
    return lines, call, recipe


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
