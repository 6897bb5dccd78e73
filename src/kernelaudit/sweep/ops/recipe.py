"""A derived op as data: the JSON recipe of an op taken from PyTorch's op database, and
the :class:`~.spec.OpSpec` built from it.

A recipe names the op's function (a dotted path such as ``torch.nn.functional.conv2d``,
or ``opinfo:NAME|VARIANT`` for a function only the op database holds), the sample's
arguments with every tensor replaced by ``{"t": i}``, and per tensor operand its
sample shape and the dim the sweep scales (``None``: shared by every batch). The
sweep stores operands batch-first (that dim outermost in storage); the call moves it
back, so the op sees the sample's dim order, and returns every judged output with
its batch dim first again.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any, Callable

import torch

from .routes import ROUTES
from .spec import Operand, OpSpec, Series

#: Value transforms tried, in order, when the generated values ([-1, 1)) leave an op's
#: domain (log, sqrt, acosh, ...): the transform is part of the op's call.
DOMAINS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "none": lambda t: t,
    "pos": lambda t: t.abs() + 0.5,
    "ge1": lambda t: t.abs() + 1.5,
    "half": lambda t: t * 0.5,
    # Conditioning (applied at load, see CONDITIONING): away from poles and roots ...
    "ge2": lambda t: t.abs() + 2.5,
    # ... and matrices strongly diagonally dominant (singular values near their size).
    "diagdom": lambda t: t + max(t.shape[-2:]) * torch.eye(t.shape[-2], t.shape[-1], dtype=t.dtype,
                                                             device=t.device) if t.dim() >= 2 else t,
}

#: Ops whose sampled inputs make the float32 result ill-conditioned (a correct CPU gave
#: 1.1x-16x their calibrated tolerance at scale 12, benchmarks/results/
#: 2026-12-03-cpu-sweep-opinfo-scale12.json): the domain they are judged on instead.
#: Matrix ops: diagonally dominant inputs (well-conditioned inverse, QR, LU, Cholesky
#: factor); digamma/polygamma: x in [2.5, 3.5), away from their poles (0, -1, ...) and
#: digamma's root (1.46); acos/asin: |x| < 0.5, away from the gradient's poles at +-1.
CONDITIONING = {
    "linalg.inv": "diagdom", "linalg.inv_ex": "diagdom", "linalg.solve_ex": "diagdom",
    "linalg.pinv.hermitian": "diagdom", "qr": "diagdom", "linalg.qr": "diagdom",
    "cholesky_solve": "diagdom", "linalg.lu_factor_ex": "diagdom",
    "polygamma.polygamma_n_2": "ge2", "polygamma.polygamma_n_4": "ge2",
    "special.polygamma.special_polygamma_n_0": "ge2", "digamma": "ge2",
    "acos": "half", "asin": "half",
}
#: Directions that no value domain makes judgeable against a float64 reference: the
#: result is discontinuous in the input, so float32 and float64 land on different sides.
NOT_JUDGEABLE = {
    "round.decimals_3": {"fwd": "rounding to 3 decimals is discontinuous: float32 inputs near a half-way "
                                "point round the other way than their float64 reference",
                         "bwd": "rounding to 3 decimals is discontinuous"},
    "__rmod__": {"bwd": "the remainder's gradient, -floor(x/y), jumps where x/y is an integer: float32 and "
                        "the float64 reference disagree there"},
    # at 2^32 elements some x/y land next to an integer in any dtype (float16 at scale 10 already)
    "remainder": {"bwd": "the remainder's gradient, -floor(x/y), jumps where x/y is an integer: float32 and "
                         "the float64 reference disagree there"},
    "fmod": {"bwd": "fmod's gradient, -trunc(x/y), jumps where x/y is an integer: the case's dtype and its "
                    "reference disagree there"},
    # bilinear sampling's gradient in the grid is the difference of neighbouring pixels, and
    # which pixels are the neighbours jumps where a coordinate crosses one (at scale 22 on
    # the CPU, one batch of 27,960: rel 0.14)
    **{name: {"bwd": "the gradient in the grid jumps where a coordinate crosses a pixel: the case's dtype "
                     "and its reference land on different sides there"}
       for name in ("nn.functional.grid_sample", "grid_sampler_2d", "grid_sampler_3d")},
}


def judged_directions(name: str, directions) -> tuple[str, ...]:
    """``directions`` less those :data:`NOT_JUDGEABLE` says no reference can judge."""
    bad = NOT_JUDGEABLE.get(name, {})
    return tuple(d for d in directions if d not in bad)
_INDEX_TAGS = {"int64": torch.int64, "int32": torch.int32, "bool": torch.bool, "uint8": torch.uint8,
               "int16": torch.int16, "int8": torch.int8}
#: Explicit SDPA backends, one op each (``torch.nn.attention.SDPBackend`` member names).


class NotScalable(Exception):
    """A sample (or a whole entry) that cannot become a scaled op; the message says why."""


# -- the sample's arguments as JSON ------------------------------------------------------
def encode(x: Any, tensors: list[torch.Tensor]) -> Any:
    """``x`` (a sample's input, args or kwargs) as JSON, every tensor replaced by
    ``{"t": i}`` and appended to ``tensors``. Raises :class:`NotScalable` on a value
    JSON cannot hold (a dtype or a device argument would change what is computed)."""
    if isinstance(x, torch.Tensor):
        tensors.append(x)
        return {"t": len(tensors) - 1}
    if isinstance(x, bool) or x is None or isinstance(x, (int, str)):
        return x
    if isinstance(x, float):
        if not math.isfinite(x):
            return {"float": repr(x)}
        return x
    if isinstance(x, torch.Size):
        return {"tuple": list(x)}
    if isinstance(x, tuple):
        return {"tuple": [encode(v, tensors) for v in x]}
    if isinstance(x, list):
        return [encode(v, tensors) for v in x]
    if isinstance(x, dict):
        if not all(isinstance(k, str) for k in x):
            raise NotScalable("sample has a dict argument with non-string keys")
        return {"dict": {k: encode(v, tensors) for k, v in x.items()}}
    raise NotScalable(f"sample has an argument of type {type(x).__name__}")


def decode(x: Any, tensors: list[torch.Tensor]) -> Any:
    """The inverse of :func:`encode`, with ``tensors`` put back in their places."""
    if isinstance(x, list):
        return [decode(v, tensors) for v in x]
    if isinstance(x, dict):
        if "t" in x:
            return tensors[x["t"]]
        if "tuple" in x:
            return tuple(decode(v, tensors) for v in x["tuple"])
        if "float" in x:
            return float(x["float"])
        return {k: decode(v, tensors) for k, v in x["dict"].items()}
    return x


def resolve_fn(ref: str) -> Callable:
    """The function a recipe names: a dotted path (``torch.nn.functional.conv2d``), or
    ``opinfo:NAME|VARIANT`` for an entry whose function is only reachable through the
    op database (a lambda there): that imports it, once per process."""
    if ref.startswith("opinfo:"):
        name, _, variant = ref[len("opinfo:"):].partition("|")
        return _opinfo_entries()[(name, variant)].op
    obj: Any = torch
    for part in ref.split(".")[1:]:
        obj = getattr(obj, part)
    return obj


@lru_cache(maxsize=1)
def _opinfo_entries() -> dict:
    frozen = torch.backends.flags_frozen()
    from torch.testing._internal.common_methods_invocations import op_db
    if not frozen and torch.backends.flags_frozen():
        # importing torch's test utilities freezes the backends' flags for the whole process
        # (common_utils calls disable_global_flags): a later `torch.backends.cudnn.allow_tf32
        # = False` in the caller's code, or in a judged kernel, would raise. Give them back.
        # (torch.backends is a module wrapper: the flag lives in its functions' globals)
        torch.backends.flags_frozen.__globals__["__allow_nonbracketed_mutation_flag"] = True
    return {(o.name, o.variant_test_name): o for o in op_db}


def fn_ref(op) -> str:
    """A dotted path that resolves to ``op.op`` itself, else ``opinfo:NAME|VARIANT``."""
    for path in (f"torch.{op.name}", f"torch.Tensor.{op.name}"):
        try:
            if resolve_fn(path) is op.op:
                return path
        except AttributeError:
            pass
    return f"opinfo:{op.name}|{op.variant_test_name}"


# -- recipe -> OpSpec ---------------------------------------------------------------------
def _flat_outputs(res) -> list[torch.Tensor]:
    if isinstance(res, torch.Tensor):
        res = (res,)
    out = []
    for r in res if isinstance(res, (tuple, list)) else ():
        if isinstance(r, torch.Tensor):
            out.append(torch.view_as_real(r) if r.is_complex() else r)
        elif isinstance(r, (tuple, list)):
            out.extend(_flat_outputs(r))
    return out


def make_call(recipe: dict, widen: bool = False, fn: Callable | None = None, grow: bool = False) -> Callable:
    """The call of a derived op: operands arrive batch-first (the scaled dim is dim 0 of
    storage), go back to the sample's dim order, through the domain transform, into the
    function (the recipe's, or ``fn``: a route to its values, :mod:`.routes`); the judged
    outputs leave batch-first. ``grow``: a growable recipe (:func:`growable`), whose
    grown matrices (larger than the sample's) take :data:`GROWN_DOMAIN`."""
    fn_cache: list = [] if fn is None else [fn]
    operands, outs, template = recipe["operands"], recipe["outs"], recipe["template"]
    sampled, grown = DOMAINS[recipe.get("domain", "none")], DOMAINS[GROWN_DOMAIN]

    def call(*tensors):
        if not fn_cache:
            fn_cache.append(resolve_fn(recipe["fn"]))
        domain = grown if grow and tensors[0].shape[-1] != operands[0]["shape"][-1] else sampled
        ts = []
        for t, od in zip(tensors, operands):
            if od["dim"] is not None:
                t = t.movedim(0, od["dim"])
            if od["kind"] == "index":
                tag = _INDEX_TAGS[od["tag"]]
                t = t if t.dtype == tag else t.to(tag)
            else:
                t = domain(t)
            ts.append(t)
        if widen:  # the operand's last dim tells how much it was widened
            k = ts[0].shape[-1] // operands[0]["shape"][-1]
            inp, args, kwargs = _widened_size(template, k, ts)
        else:
            inp, args, kwargs = decode(template, ts)
        flat = _flat_outputs(fn_cache[0](inp, *args, **kwargs))
        return tuple(flat[o["index"]].movedim(o["dim"], 0) for o in outs)

    return call


# -- interpolation: wider images ---------------------------------------------------------
#: The most an interpolation sample's last spatial dim (and its output ``size``) is widened.
#: PyTorch's CUDA upsample kernels run one thread per output position and loop over batch x
#: channels in it: the op database's 4-wide samples stacked to 2^31 elements made a few
#: threads loop 5*10^8 times, and ``interpolate(nearest)`` timed out at 2^31 elements on
#: the H200 (20 s). Widened 1024x, the same elements are 1024x fewer rows of 3072 outputs.
WIDEN_MAX = 1024
#: Batches below 2^31 elements a widened sample still leaves (so the limits stay crossable
#: in many batches, and small ``--scale`` runs are not widened at all).
WIDEN_MIN_BATCHES = 2**12


def _size_arg(template: list) -> tuple[str, Any] | None:
    """Where a sample passes its output ``size`` (``("arg", 0)`` or ``("kw", "size")``), if
    it is a tuple of ints."""
    _, args, kwargs = template
    if args and isinstance(args[0], dict) and "tuple" in args[0]:
        return ("arg", 0)
    kw = kwargs.get("dict", {}) if isinstance(kwargs, dict) else {}
    if isinstance(kw.get("size"), dict) and "tuple" in kw["size"]:
        return ("kw", "size")
    return None


def widenable(family: str, recipe: dict) -> bool:
    """An interpolation sample with one batch-scaled input and an explicit output size."""
    ops = recipe["operands"]
    return (family == "interpolation" and len(ops) == 1 and ops[0]["dim"] == 0 and ops[0]["kind"] == "value"
            and len(ops[0]["shape"]) >= 3 and _size_arg(recipe["template"]) is not None)


def widen_factor(recipe: dict, th) -> int:  # noqa: ANN001 - Thresholds
    """How much the sample's last dim is widened at thresholds ``th``: at most
    :data:`WIDEN_MAX`, leaving at least :data:`WIDEN_MIN_BATCHES` batches below 2^31."""
    per = int(recipe["per_batch"])
    return max(1, min(WIDEN_MAX, th.t31 // (per * WIDEN_MIN_BATCHES)))


def _widened_size(template: list, k: int, tensors: list) -> tuple[Any, list, dict]:
    """The decoded call with the output size's last entry times ``k``."""
    inp, args, kwargs = decode(template, tensors)
    where = _size_arg(template)
    if k == 1 or where is None:
        return inp, args, kwargs
    kind, key = where
    size = args[key] if kind == "arg" else kwargs[key]
    size = (*size[:-1], size[-1] * k)
    if kind == "arg":
        args = [size, *args[1:]]
    else:
        kwargs = {**kwargs, key: size}
    return inp, args, kwargs


# -- batched matrices that a CUDA kernel takes one at a time: larger ones ----------------
#: Batched matrix ops whose CUDA kernels run one matrix at a time (a cuSOLVER call, or
#: several, per matrix: QR's geqrf and orgqr, LDL's sytrf). On the full grid of
#: 2026-12-07 they took 70 to 290 us a 5 x 5 matrix (their cases at a dimension of 2^16,
#: H100 and H200, torch 2.11), every other batched linalg op 2.4 us or less, so the op
#: database's 5 x 5 samples stacked past 2^31 bytes were projected at 1,504 to 50,044 s a
#: case (163 h for 48 cases). A call's fixed costs are per matrix, so the same limits are
#: crossed with larger matrices, far fewer of them.
GROWN = frozenset({"qr", "linalg.qr", "linalg.ldl_factor", "linalg.ldl_factor_ex"})
#: The judgement runs the op again in float64 over every batch, so a case took twice its
#: op: 45 us a 5 x 5 QR, 143 us an LDL factorization. cuSOLVER factorizes column by column
#: (9 and 29 us a column there), so a matrix of n columns costs about n times that, and a
#: case of E elements E / n times: from the sample's 5 to 2,045 columns, 409x less.
#: ``GROW_SIDE``: the largest side a grown matrix reaches (the sample's side times a
#: whole factor).
GROW_SIDE = 2048
#: Batches below 2^31 elements a grown sample still leaves (so the limits stay crossable in
#: many batches, and small ``--scale`` runs and the tiny-shape axes are not grown at all).
GROW_MIN_BATCHES = 2**5
#: The domain of grown matrices: diagonally dominant. Random matrices of hundreds of rows
#: are ill-conditioned: LDL of 256 x 256 ones in [-1, 1) spread their float32 error 7x to 10x
#: from median to maximum (CPU, float64 reference), 2x diagonally dominant.
GROWN_DOMAIN = "diagdom"


def growable(name: str, recipe: dict) -> bool:
    """A :data:`GROWN` op's sample: one batch-scaled operand of square matrices."""
    ops = recipe["operands"]
    return (name in GROWN and len(ops) == 1 and ops[0]["dim"] == 0 and ops[0]["kind"] == "value"
            and len(ops[0]["shape"]) == 3 and ops[0]["shape"][1] == ops[0]["shape"][2])


def grow_factor(recipe: dict, th) -> int:  # noqa: ANN001 - Thresholds
    """How much a growable sample's matrix sides are multiplied at thresholds ``th``: at
    most to :data:`GROW_SIDE`, leaving at least :data:`GROW_MIN_BATCHES` batches below 2^31
    elements; 1 on an axis that cuts per-batch shapes small (``shape_bits``)."""
    if th.shape_bits is not None:
        return 1
    per, side = int(recipe["per_batch"]), int(recipe["operands"][0]["shape"][-1])
    return max(1, min(GROW_SIDE // side, math.isqrt(th.t31 // (per * GROW_MIN_BATCHES))))


def sample_shape(od: dict, k: int = 1, g: int = 1) -> list[int]:
    """An operand's sample shape (``od``: a recipe's operand) widened ``k`` times along its
    last dim (widenable recipes: one batch-scaled operand of 3+ dims) and grown ``g`` times
    along its last two (growable recipes: one batch-scaled operand of square matrices)."""
    shape = list(od["shape"])
    if k != 1:
        shape[-1] *= k
    if g != 1:
        shape[-2] *= g
        shape[-1] *= g
    return shape


def _operand_objects(recipe: dict, B: int, k: int = 1, g: int = 1) -> list[Operand]:
    ops = []
    for od in recipe["operands"]:
        shape = sample_shape(od, k, g)
        kw = dict(kind="index", high=od["high"], grad=False) if od["kind"] == "index" else dict(grad=od["grad"])
        if od["dim"] is None:
            ops.append(Operand(tuple(shape), rows_per_batch=None, **kw))
        else:
            s = shape.pop(od["dim"])
            ops.append(Operand((B * s, *shape), rows_per_batch=s, **kw))
    return ops


def spec_from_recipe(name: str, family: str, recipe: dict) -> OpSpec:
    """The :class:`OpSpec` of a derived op."""
    per = int(recipe["per_batch"])
    rows = tuple(o["rows"] for o in recipe["outs"])
    if name in CONDITIONING:
        recipe = {**recipe, "domain": CONDITIONING[name]}
    wide, grow = widenable(family, recipe), growable(name, recipe)

    def k(th) -> int:  # noqa: ANN001
        return widen_factor(recipe, th) if wide else 1

    def g(th) -> int:  # noqa: ANN001
        return grow_factor(recipe, th) if grow else 1

    def tag(th) -> str:  # noqa: ANN001 - grown matrices calibrate apart from the sample's
        side = recipe["operands"][0]["shape"][-1] * g(th)
        return f"{side}x{side}" if g(th) != 1 else ""

    return OpSpec(
        name, family, make_call(recipe, widen=wide, grow=grow),
        lambda s, B, th: _operand_objects(recipe, B, k(th), g(th)),
        {recipe["series"]: Series(recipe["series"], lambda th: per * k(th) * g(th) ** 2)},
        dtypes=tuple(recipe["dtypes"]), directions=judged_directions(name, recipe["directions"]),
        out_rows=lambda s, th: rows, exact=bool(recipe.get("exact")), bwd_outputs=len(rows),
        ref_call=(make_call(recipe, widen=wide, fn=ROUTES[recipe["fn"]], grow=grow) if recipe["fn"] in ROUTES
                  else None),
        shape_tag=tag if grow else None,
        notes=f"derived from OpInfo {recipe['opinfo']}", extra={"opinfo": recipe["opinfo"], "recipe": recipe})


# -- reduction variants ------------------------------------------------------------------
#: Suffix of a reduction's last-dim variant (the op database samples reduce over dim 0).
DIM_LAST = ".dim_last"


def dim_last_recipe(recipe: dict) -> dict | None:
    """The same reduction over the **last** dim of a (batch, n) operand, from a recipe
    that reduces dim 0 of an (n, batch) one: the scaled dim becomes dim 0 and the
    reduced dim the last (``dim=-1``, other arguments kept). None where the recipe is
    not such a reduction (one tensor operand of 2 dims, scaled along dim 1, ``dim=0``)."""
    ops, outs, template = recipe["operands"], recipe["outs"], recipe["template"]
    kwargs = template[2].get("dict", {}) if isinstance(template[2], dict) else {}
    if (len(ops) != 1 or len(ops[0]["shape"]) != 2 or ops[0]["dim"] != 1 or kwargs.get("dim") != 0
            or template[1] != [] or template[0] != {"t": 0}):
        return None
    n, b = ops[0]["shape"]
    new_outs = []
    for o in outs:
        # keepdim: (1, b) scaled along 1 -> (b, 1) along 0; else (b,) along 0 either way.
        new_outs.append({**o, "dim": 0})
    return {**recipe, "operands": [{**ops[0], "shape": [b, n], "dim": 0}], "outs": new_outs,
            "template": [template[0], [], {"dict": {**kwargs, "dim": -1}}], "variant_of": "dim 0"}


def dim_last_records(entries: list[dict]) -> list[dict]:
    """Catalogue records of the last-dim variants of every covered dim-0 reduction."""
    out = []
    for r in entries:
        if r.get("family") != "reduction" or not r.get("fwd") or not r.get("recipe"):
            continue
        v = dim_last_recipe(r["recipe"])
        if v is not None:
            out.append({**r, "name": r["name"] + DIM_LAST, "recipe": v,
                        "reason": (r.get("reason") or "") or ""})
    return out



def dim_last_spec(name: str) -> OpSpec | None:
    """The :class:`OpSpec` of a reduction's last-dim variant ``NAME.dim_last``, or None."""
    from .opinfo import CatalogueUnavailable, catalogue

    try:
        entries = catalogue()["entries"]
    except CatalogueUnavailable:
        return None
    base = name[: -len(DIM_LAST)]
    for r in dim_last_records([e for e in entries if e["name"] == base]):
        return spec_from_recipe(r["name"], r["family"], r["recipe"])
    return None
