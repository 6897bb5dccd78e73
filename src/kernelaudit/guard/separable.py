"""Fixing calls of ops outside the matmul engine by splitting them into safe pieces.

A screened op (a sweep's finding on ``arange``, attention, ...; see :mod:`.rules`) is
fixed, not refused, when every rule that flags the call says ``fix`` and the op splits:

* **factories** (``arange``, ``linspace``, ``logspace``; :data:`FACTORIES`): the output is computed in
  pieces of offset starts. Element ``i`` is ``start + i*step`` with ``i`` in int64: integer
  dtypes run the original kernel on each piece's slice of the output with start
  ``start + i0*step`` (Python ints: no float rounding of the offset); floating dtypes
  take the piece's indexes in float64, times ``step`` plus ``start`` (what the CPU
  kernel computes in its double accumulator), cast once into the output; ``linspace``
  the same way with the kernels' two-sided formula;
* **any op separable along a dim** (a rule's ``split_dim``): every tensor argument whose
  size along that dim is the call's extent there is cut into pieces under the rule's
  threshold (size-1 tensors broadcast and go whole), the original kernel runs on each,
  and each output is written into its slice of the full output (``out=`` variants:
  straight into the caller's ``out``). A backward pass is its own aten op with its own
  entry point, so forward and backward split the same way.
  ``_scaled_dot_product_cudnn_attention_backward`` (the cuDNN SDPA backward error past
  2^32 scores on the H200) splits along batch, then along heads when one batch alone
  is still too large (:func:`split_dims`).

A piece's safety is decided by the rules that flagged the call, on the piece's
metadata (:func:`kernelaudit.guard.rules.screen_reason`), with the largest safe piece
evened out (no tiny tail). A call that cannot be split safely raises
:class:`CannotSplit`, whose message the caller puts in its refusal.
"""

from __future__ import annotations

import functools
import logging
import math
from typing import Callable, Sequence

import torch
from torch.utils._pytree import tree_flatten, tree_map

from .rules import FACTORIES, own_fixed
from .split import _balanced, _largest

log = logging.getLogger("kernelaudit.guard")

#: The entry point a factory's pieces are computed with (an ``out=`` overload).
FACTORY_PIECE = {"arange": "arange.start_out", "linspace": "arange.start_out", "logspace": "arange.start_out"}
#: A floating ``arange`` (and ``linspace``) goes through float64 temporaries of at most
#: this many elements.
FLOAT_CHUNK = 2**26
#: Arguments passed whole to every piece: a fused attention's random-number state (a
#: seed and an offset, or a 2-element state) and its variable-length offsets (undefined
#: or empty for dense attention; dropout and variable-length calls are refused).
WHOLE = ("philox_seed", "philox_offset", "rng_state", "cum_seq_q", "cum_seq_k")
#: Outputs returned once, not sliced: a fused attention's per-call metadata (its
#: variable-length offsets, sequence maxima, random-number state and debug mask), the
#: same for every piece (dropout is refused).
WHOLE_OUTPUTS = ("cum_seq_q", "cum_seq_k", "max_q", "max_k", "rng_state", "unused", "philox_seed",
                 "philox_offset", "debug_attn_mask")
#: Attention entry points: after the rule's split dim (batch), the heads dim.
ATTENTION_HEADS_DIM = 1

#: ``run(name, *args, **kwargs)``: the unguarded kernel of aten entry point ``name``
#: (``op`` or ``op.overload``).
Runner = Callable[..., object]


class CannotSplit(Exception):
    """The call cannot be computed in safe pieces; the message says why."""


def op_of(name: str) -> str:
    """``arange.start_out`` -> ``arange``."""
    return name.partition(".")[0]


def fixable(fault) -> bool:
    """Whether the guard can fix calls ``fault`` flags on its screened op: the rule says
    ``fix`` and the op is a factory, the rule names a ``split_dim``, it flags a
    normalization's rows (:func:`fix_flatten_normalized`), or every entry point it
    screens has a fix of its own (:data:`OWN_FIX`)."""
    return fault.action == "fix" and (fault.op in FACTORIES or fault.split_dim is not None or fault.flattens
                                      or own_fixed(fault.aten))


def split_dims(faults: Sequence) -> tuple[int, ...]:
    """The dims a call flagged by ``faults`` is cut along, in order (all rules must agree
    on ``split_dim``; attention rules add the heads dim after batch)."""
    dims = {f.split_dim for f in faults}
    if len(dims) != 1 or None in dims:
        raise CannotSplit(f"the rules that flag it name split_dim {sorted(dims, key=str)}: one dim is required")
    d = dims.pop()
    if d == 0 and any(f.when.get("kind") == "attention-scores" for f in faults):
        return (0, ATTENTION_HEADS_DIM)
    return (d,)


def entry_name(func) -> str:
    """An aten overload's entry-point name as rules spell it: ``op`` for the default
    overload, else ``op.overload``."""
    return func._schema.name.split("::", 1)[-1] + ("." + func._overloadname if func._overloadname != "default" else "")


@functools.lru_cache(maxsize=1024)
def _positions(func) -> dict[str, int]:
    """Argument name -> its position in aten overload ``func``'s schema."""
    return {a.name: i for i, a in enumerate(func._schema.arguments)}


class CallArgs:
    """The arguments of one call of ``func`` by name, looked up one at a time (a rule
    reads one or two of them on every call of a screened entry point: building
    :func:`bind`'s dict each time cost more)."""

    __slots__ = ("func", "args", "kwargs")

    def __init__(self, func, args, kwargs) -> None:
        self.func, self.args, self.kwargs = func, args, kwargs

    def get(self, name: str, default=None):
        if name in self.kwargs:
            return self.kwargs[name]
        i = _positions(self.func).get(name)
        return self.args[i] if i is not None and i < len(self.args) else default


def bind(func, args, kwargs) -> dict:
    """Argument name -> value of one call of aten overload ``func`` (defaults left out)."""
    names = [a.name for a in func._schema.arguments]
    out = dict(zip(names, args))
    out.update(kwargs)
    return out


# -- factories ------------------------------------------------------------------------------
def _integral(dtype: torch.dtype) -> bool:
    return not (dtype.is_floating_point or dtype.is_complex)


def arange_spec(func, args, kwargs) -> tuple:
    """(start, end, step, dtype, device, out) of any ``aten::arange`` overload."""
    b = bind(func, args, kwargs)
    start, end, step, out = b.get("start", 0), b["end"], b.get("step", 1), b.get("out")
    start, end, step = (x.item() if isinstance(x, torch.Tensor) else x for x in (start, end, step))
    dtype = b.get("dtype") or (out.dtype if out is not None else None)
    if dtype is None:  # torch's inference: integers give int64, any float the default dtype
        dtype = torch.int64 if all(isinstance(x, int) for x in (start, end, step)) else torch.get_default_dtype()
    device = out.device if out is not None else torch.device(b.get("device") or "cpu")
    return start, end, step, dtype, device, out


def arange_numel(start, end, step, dtype: torch.dtype) -> int:
    """The number of elements ``arange`` gives, as ATen computes it (RangeFactories:
    integer dtypes take start, end and step as int64 first; the size is the ceiling of
    a double division)."""
    if _integral(dtype):
        start, end, step = int(start), int(end), int(step)
    if step == 0:
        return 0  # not flagged: the kernel refuses it with torch's own error
    return max(0, math.ceil(float(end - start) / float(step)))


def fix_arange(func, args, kwargs, run: Runner, safe_len: Callable[[int], bool]) -> torch.Tensor:
    """``aten::arange`` (any overload) in safe pieces; ``safe_len(k)``: whether a piece of
    ``k`` elements is safe. Returns the output (the caller's ``out`` when given)."""
    start, end, step, dtype, device, out = arange_spec(func, args, kwargs)
    n = arange_numel(start, end, step, dtype)
    k = _largest(safe_len, n)
    if k == 0:
        raise CannotSplit("even a 1-element piece is unsafe")
    k = _balanced(k, n)
    if out is None:
        out = torch.empty(n, dtype=dtype, device=device)
    elif tuple(out.shape) != (n,):
        out.resize_(n)  # what arange_out does with an out of another size
    piece = FACTORY_PIECE["arange"]
    if _integral(dtype):
        # ATen reads start and step as int64 for integer outputs (truncation)
        s, st = int(start), int(step)
        for i0 in range(0, n, k):
            i1 = min(i0 + k, n)
            run(piece, s + i0 * st, s + i1 * st, st, out=out[i0:i1])
        return out
    s, st = float(start), float(step)
    chunk = min(k, FLOAT_CHUNK)
    tmp = torch.empty(chunk, dtype=torch.float64, device=out.device)
    for i0 in range(0, n, chunk):
        i1 = min(i0 + chunk, n)
        t = tmp[: i1 - i0]
        run(piece, i0, i1, 1, out=t)  # the indexes, exact in float64 below 2^53
        t.mul_(st).add_(s)
        out[i0:i1].copy_(t)
    return out


def linspace_spec(func, args, kwargs) -> tuple:
    """(start, end, steps, dtype, device, out) of any ``aten::linspace`` (or ``logspace``) overload."""
    b = bind(func, args, kwargs)
    start, end, out = b["start"], b["end"], b.get("out")
    start, end = (x.item() if isinstance(x, torch.Tensor) else x for x in (start, end))
    dtype = b.get("dtype") or (out.dtype if out is not None else torch.get_default_dtype())
    device = out.device if out is not None else torch.device(b.get("device") or "cpu")
    return start, end, int(b["steps"]), dtype, device, out


def fix_linspace(func, args, kwargs, run: Runner, safe_len: Callable[[int], bool]) -> torch.Tensor:
    """``aten::linspace`` in safe pieces, with the kernels' formula (from the start up
    to ``steps // 2``, from the end after, so both ends are exact) in float64 on int64
    indexes, rounded once to the dtype (integer dtypes: truncated, as a cast does).
    ``aten::logspace`` the same way: ``base`` to the power of those points, in float64."""
    start, end, steps, dtype, device, out = linspace_spec(func, args, kwargs)
    base = float(bind(func, args, kwargs).get("base", 10.0)) if entry_name(func).startswith("logspace") else None
    k = _largest(safe_len, steps)
    if k == 0:
        raise CannotSplit("even a 1-element piece is unsafe")
    if out is None:
        out = torch.empty(steps, dtype=dtype, device=device)
    elif tuple(out.shape) != (steps,):
        out.resize_(steps)
    if steps == 1:
        out.fill_(start if base is None else base ** float(start))
        return out
    step = (float(end) - float(start)) / (steps - 1)
    half = steps // 2
    chunk = min(_balanced(k, steps), FLOAT_CHUNK)
    tmp = torch.empty(chunk, dtype=torch.float64, device=out.device)
    for i0 in range(0, steps, chunk):
        i1 = min(i0 + chunk, steps)
        t = tmp[: i1 - i0]
        run(FACTORY_PIECE["linspace"], i0, i1, 1, out=t)
        lo = t[: max(0, min(half, i1) - i0)]
        hi = t[lo.numel():]
        lo.mul_(step).add_(float(start))                          # start + step * i
        hi.sub_(steps - 1).mul_(step).add_(float(end))            # end - step * (steps - 1 - i)
        if base is not None:
            torch.pow(base, t, out=t)                             # logspace: base ** point, in float64
        out[i0:i1].copy_(t)
    return out


def factory_numel_dtype(op: str, func, args, kwargs) -> tuple[int, torch.dtype]:
    """The output size and dtype of a factory call (no data)."""
    if op in ("linspace", "logspace"):
        _, _, steps, dtype, _, _ = linspace_spec(func, args, kwargs)
        return max(steps, 0), dtype
    start, end, step, dtype, _, _ = arange_spec(func, args, kwargs)
    return arange_numel(start, end, step, dtype), dtype


def fix_factory(op: str, func, args, kwargs, run: Runner, safe_len: Callable[[int], bool]) -> torch.Tensor:
    """:func:`fix_arange` or :func:`fix_linspace`."""
    return (fix_linspace if op in ("linspace", "logspace") else fix_arange)(func, args, kwargs, run, safe_len)


# -- normalizations over several dims ------------------------------------------------------------
#: Arguments of a normalization's backward shaped like the input (flattened to rows x N),
#: like its statistics (rows x 1), and like the normalized dims (N).
_AS_INPUT, _AS_STATS, _AS_NORMALIZED = ("grad_out", "input"), ("mean", "rstd"), ("weight", "bias")


def fix_flatten_normalized(func, args, kwargs, run: Runner):
    """A normalization's backward (``native_layer_norm_backward``,
    ``_fused_rms_norm_backward``) over several normalized dims, run over one: the
    normalized dims flattened into N (inputs as rows x N, statistics as rows x 1, weight
    and bias as N), the gradients shaped back. Layer and RMS norm see only the N values
    of a row, so the call is the same computation; CUDA's gamma backward past 65,536
    rows sizes its scratch by the last normalized dim and writes past it, and over one
    dim that dim is N (pytorch/pytorch PR #192016)."""
    bound = bind(func, args, kwargs)
    shape = [int(x) for x in bound["normalized_shape"]]
    x = bound["input"]
    if len(shape) < 2 or tuple(x.shape[x.dim() - len(shape):]) != tuple(shape):
        raise CannotSplit(f"normalized_shape {shape} is not the trailing dims of an input of shape {tuple(x.shape)}")
    lead, n = tuple(x.shape[:x.dim() - len(shape)]), math.prod(shape)
    new = dict(bound, normalized_shape=[n])
    for name in _AS_INPUT:
        new[name] = bound[name].reshape(*lead, n)
    for name in _AS_STATS:
        if isinstance(bound.get(name), torch.Tensor):
            new[name] = bound[name].reshape(*lead, 1)
    for name in _AS_NORMALIZED:
        if isinstance(bound.get(name), torch.Tensor):
            new[name] = bound[name].reshape(n)
    names = [a.name for a in func._schema.arguments]
    outs = run(entry_name(func), *[new[a] for a in names if a in new])
    grad_input, *grads = outs
    shaped = [grad_input.reshape(x.shape) if isinstance(grad_input, torch.Tensor) else grad_input]
    shaped += [g.reshape(shape) if isinstance(g, torch.Tensor) and g.numel() == n else g for g in grads]
    return tuple(shaped)


# -- ops separable along a dim ------------------------------------------------------------------
#: Arguments naming the dims an op works along (reduces, scans, sorts, normalises,
#: joins, moves): a call is never cut along one of them.
WORKS_ALONG = ("dim", "dims", "dim0", "dim1", "axis", "dimension", "start_dim", "end_dim", "source", "destination")
#: Ops that work along their input's last dim without an argument saying so: a
#: ``multinomial`` draws from each row's categories (a 1-d input is one distribution).
WORKS_ALONG_LAST = ("multinomial",)
#: Ops whose output at a position depends on elements anywhere in the input, along every
#: dim (``unique`` sorts the whole tensor; ``unique_consecutive`` merges equal neighbours,
#: also across a cut): never cut generically (``unique_consecutive`` has a fix of its own,
#: pieces merged at the cuts); the empty outputs they return for what was not asked for are
#: kept whole like any placeholder, so this list, not those, refuses them.
WHOLE_INPUT = ("unique_consecutive", "unique_dim_consecutive", "_unique", "_unique2", "unique_dim")
#: Entry points that work on matrices, their input's last two dims (linear algebra):
#: only the batch dims before them are cut.
MATRIX_PREFIXES = ("linalg_", "_linalg_")


def dims_worked_along(bound: dict, ndim: int) -> set[int] | None:
    """The dims (0 .. ``ndim`` - 1) a call works along, read from its arguments
    (:data:`WORKS_ALONG`, and ``normalized_shape``'s trailing dims); None where it works
    along every dim (``dim=None`` or ``dim=[]``: a reduction over the whole tensor). Read
    at each call: a rule's ``split_dim`` holds for the calls its sweep traced, and another
    program may reduce or scan along that very dim."""
    out: set[int] = set()
    for name in WORKS_ALONG:
        if name not in bound:
            continue
        v = bound[name]
        if v is None or (isinstance(v, (list, tuple)) and not v):
            if name in ("dim", "dims", "axis"):
                return None
            continue
        for x in v if isinstance(v, (list, tuple)) else (v,):
            if isinstance(x, int) and not isinstance(x, bool):
                out.add(x % ndim if ndim else x)
    ns = bound.get("normalized_shape")
    if ns is not None:
        out.update(range(max(0, ndim - len(ns)), ndim))
    return out


def _preconditions(bound: dict) -> None:
    """Calls whose pieces would not be independent: dropout (each piece would draw its
    own mask, not the forward's), variable-length (nested) attention, and a loss or its
    backward with ``reduction`` mean or sum (each piece would reduce, or scale its
    gradient, over its own rows: a backward's pieces would be silently wrong)."""
    r = bound.get("reduction")
    if isinstance(r, int) and not isinstance(r, bool) and r != 0:
        raise CannotSplit(f"reduction={'mean' if r == 1 else 'sum' if r == 2 else r}: each piece would reduce "
                          "over its own rows (only reduction='none' splits)")
    p = bound.get("dropout_p")
    if p:
        raise CannotSplit(f"dropout_p={p} > 0: each piece would draw another dropout mask than the whole call")
    for name in ("cum_seq_q", "cum_seq_k"):
        t = bound.get(name)
        if isinstance(t, torch.Tensor) and t.numel() > 0:
            raise CannotSplit(f"{name} is set (variable-length attention): its rows are not separable by batch")


MIN_PIECES = 8
"""The fewest pieces a split call is cut into: the whole output is allocated once and
each piece's output copied into it, so the fix needs 1/MIN_PIECES of the outputs more
memory than the bare call (two pieces of adaptive_max_pool1d's 39 GiB of values and
indices ran out of an H100's 80 GiB)."""


def _piece_len(k: int, n: int, min_pieces: int) -> int:
    """The length of the pieces of ``n`` a fix runs: at most the largest safe ``k``, at
    least ``min_pieces`` of them, as equal as possible."""
    return _balanced(min(k, -(-n // min_pieces)), n)


def fix_split(func, args, kwargs, run: Runner, safe: Callable, dims: Sequence[int], out_numels: Sequence[int],
              min_pieces: int = MIN_PIECES):
    """Run ``func`` (an aten overload) in pieces along ``dims[0]`` (then ``dims[1]`` inside
    a single slice when one slice alone is unsafe), at least ``min_pieces`` of them.
    ``safe(tensors, out_numels)``: whether a piece with these tensor arguments and output
    sizes is safe; ``out_numels``: the whole call's output sizes. Returns what ``func``
    returns."""
    _preconditions(bind(func, args, kwargs))
    name = entry_name(func)
    return _split(func, name, args, kwargs, run, safe, tuple(dims), tuple(out_numels), min_pieces)


def _split(func, name: str, args, kwargs, run: Runner, safe, dims, out_numels, min_pieces: int):
    d = dims[0]
    names = [a.name for a in func._schema.arguments]
    outs_kw = [a.name for a in func._schema.arguments if a.is_out]

    def each(fn):
        """(args, kwargs) with ``fn`` applied to every tensor not in :data:`WHOLE`."""
        def one(arg, v):
            return v if arg in WHOLE else tree_map(lambda x: fn(x) if isinstance(x, torch.Tensor) else x, v)
        return ([one(names[i] if i < len(names) else "", v) for i, v in enumerate(args)],
                {k: one(k, v) for k, v in kwargs.items()})

    cuttable: list = []
    each(cuttable.append)
    out_ids = {id(kwargs[k]) for k in outs_kw if isinstance(kwargs.get(k), torch.Tensor)}
    lead = next((t for t in cuttable if t.dim() > d and id(t) not in out_ids), None)
    if lead is None:
        raise CannotSplit(f"no tensor argument has a dim {d}")
    bound = {**dict(zip(names, args)), **kwargs}
    along = dims_worked_along(bound, lead.dim())
    if along is not None and op_of(name) in WORKS_ALONG_LAST:
        along.add(lead.dim() - 1)
    if along is not None and op_of(name).startswith(MATRIX_PREFIXES):
        along.update(range(max(0, lead.dim() - 2), lead.dim()))
    if along is None or d in along:
        raise CannotSplit(f"{name} works along dim {d} here (its dim arguments): its pieces would not be independent")
    if op_of(name) in WHOLE_INPUT:
        raise CannotSplit(f"{name} relates elements across the whole input: its pieces would not be independent")
    n_all = lead.shape[d]
    for k_ in outs_kw:   # an out= tensor not yet of the call's shape: resized first, as its kernel would
        o = kwargs.get(k_)
        if isinstance(o, torch.Tensor) and (o.dim() <= d or o.shape[d] != n_all):
            o.resize_(_out_shape(func, args, kwargs, k_))
    for t in cuttable:
        if t.dim() > d and t.shape[d] not in (n_all, 1):
            raise CannotSplit(f"tensor arguments of sizes {t.shape[d]} and {n_all} along dim {d}: not separable there")

    mutated = _returned_in_place(func)   # an in-place op: its pieces write into the caller's tensor
    written = out_ids | {id(bound[m]) for m in mutated if isinstance(bound.get(m), torch.Tensor)}

    def piece(i0: int, n: int, rebase=None):
        """The call's arguments for rows ``i0 : i0 + n``; with ``rebase``, every read-only
        tensor argument passed through it (a copy: its storage starts at the piece)."""
        def cut(x):
            v = x.narrow(d, i0, n) if x.dim() > d and x.shape[d] == n_all and n_all != 1 else x
            return rebase(v) if rebase is not None and id(x) not in written else v
        pa, pk = each(cut)
        return _sized(pa, pk, names, d, n_all, n)

    def judged(pa, pk, n: int) -> bool:
        ts = [x for x in tree_flatten((pa, pk))[0] if isinstance(x, torch.Tensor)]
        return safe(ts, [m * n // n_all if n_all else m for m in out_numels])

    def ok(n: int) -> bool:
        # the first and the last piece: a view's storage offset grows along the split dim,
        # and a bytes rule reads it (every piece between lies within those two)
        return all(judged(*piece(i0, n), n) for i0 in {0, n_all - n})

    def ok_rebased(n: int) -> bool:
        # judged on metadata only: a copy of the piece, without its data
        return judged(*piece(0, n, _meta_copy), n)

    k, rebase = _largest(ok, n_all), None
    if k == 0:
        # unsafe only where they lie in their storage (a bytes rule's offsets)? Then the
        # pieces run on copies of the read-only arguments, which start their own storage
        k = _largest(ok_rebased, n_all)
        rebase = _copy if k else None
    inner = None
    if k == 0:
        if len(dims) < 2:
            raise CannotSplit(f"even one slice along dim {d} is unsafe")
        k, inner = 1, dims[1:]
    else:
        k = _piece_len(k, n_all, min_pieces)

    def pieces_of(k: int):
        full = None
        for i0 in range(0, n_all, k):
            n = min(k, n_all - i0)
            pa, pk = piece(i0, n, rebase)
            if inner is not None:
                res = _split(func, name, pa, pk, run, safe, inner, [m * n // n_all for m in out_numels], min_pieces)
            else:
                res = run(name, *pa, **pk)
            if out_ids or mutated:
                continue  # the pieces wrote into their slices of the caller's out (or self)
            items = list(res) if isinstance(res, (tuple, list)) else [res]
            if full is None:
                rets = [a.name for a in func._schema.returns]
                full = [_alloc(r, d, n, n_all, rets[i] if i < len(rets) else "") for i, r in enumerate(items)]
            for f, r in zip(full, items):
                if isinstance(f, _Whole):
                    f.check(r)
                elif f is not None:
                    f.narrow(d, i0, n).copy_(r)
        if out_ids:
            outs = [kwargs[k_] for k_ in outs_kw]
            return outs[0] if len(outs) == 1 else tuple(outs)
        if mutated:
            outs = [bound[n] for n in mutated]
            return outs[0] if len(outs) == 1 else tuple(outs)
        full = [f.value if isinstance(f, _Whole) else f for f in full]
        return full[0] if not isinstance(res, (tuple, list)) else type(res)(full)

    while True:
        try:
            return pieces_of(k)
        except RuntimeError as e:
            # a piece its kernel refused for its size before running: the rule's limit lies
            # lower than it says (a grid's rows, not its elements). Halve the pieces; not
            # where pieces already wrote into the caller's tensors, nor past one slice.
            if inner is not None or k <= 1 or out_ids or mutated or not size_refusal(e):
                raise
            smaller = _balanced(k // 2, n_all)
            log.warning("%s: pieces of %d along dim %d were refused (%s); trying pieces of %d (the rule's limit "
                        "lies lower than it says)", name, k, d, str(e).splitlines()[0][:160], smaller)
            k = smaller


#: Errors a kernel or library raises before it runs anything, when a size passes what it
#: takes (a launch's grid, a 32-bit argument check): the process and its CUDA context stay
#: usable, so smaller pieces may be tried. An illegal memory access is not among them: it
#: ends the context.
SIZE_REFUSALS = ("invalid argument", "invalid configuration argument", "must fit into 32-bit index math",
                 "maximum CUDA grid size", "less than 2147483647", "integer out of range", "cuda_int_cast",
                 "is too big")


def size_refusal(e: BaseException) -> bool:
    """Whether ``e`` is a refusal for size (:data:`SIZE_REFUSALS`), after which smaller pieces may run."""
    text = str(e)
    return "illegal memory access" not in text and any(w in text for w in SIZE_REFUSALS)


def _copy(x: torch.Tensor) -> torch.Tensor:
    """``x`` in a storage of its own, contiguous, starting at its first element."""
    return x.clone(memory_format=torch.contiguous_format)


def _meta_copy(x: torch.Tensor) -> torch.Tensor:
    """What :func:`_copy` would give, without data (for judging a piece's safety)."""
    return torch.empty(x.shape, dtype=x.dtype, device="meta")


#: Arguments that spell a tensor's shape (an upsampling backward's ``input_size``, the
#: shape of the gradient it returns): their extent along the split dim is the piece's.
SIZE_ARGS = ("input_size",)


def _sized(args: list, kwargs: dict, names: list, d: int, n_all: int, n: int) -> tuple[list, dict]:
    """A piece's arguments with every :data:`SIZE_ARGS` list whose dim ``d`` is the whole
    call's extent ``n_all`` set to the piece's ``n``."""
    def fit(v):
        if isinstance(v, (list, tuple)) and len(v) > d and v[d] == n_all:
            v = list(v)
            v[d] = n
        return v

    args = [fit(v) if i < len(names) and names[i] in SIZE_ARGS else v for i, v in enumerate(args)]
    return args, {k: fit(v) if k in SIZE_ARGS else v for k, v in kwargs.items()}


def meta_call(func, args, kwargs) -> tuple:
    """(outputs, keyword arguments) of ``func`` run by its meta kernel on meta copies of
    the arguments (a ``device`` argument made ``meta``): shapes without data, outside
    every dispatch mode (a fault model must not see it); an ``out=`` among the keyword
    arguments holds the shape the call gives it. Raises what the meta kernel raises."""
    from torch.utils._python_dispatch import _disable_current_modes

    def to_meta(x):
        return x.to("meta") if isinstance(x, torch.Tensor) else x

    with _disable_current_modes():
        kw = {k: ("meta" if k == "device" else tree_map(to_meta, v)) for k, v in kwargs.items()}
        return func(*tree_map(to_meta, args), **kw), kw


def _out_shape(func, args, kwargs, name: str) -> tuple[int, ...]:
    """The shape the call's ``out=`` argument ``name`` takes, from the op's meta kernel."""
    try:
        _, kw = meta_call(func, args, kwargs)
    except Exception as e:
        raise CannotSplit(f"{name}= is not of the call's output shape and the op's meta kernel cannot say what "
                          f"it is ({type(e).__name__}): pass an {name}= of the output's shape") from None
    return tuple(kw[name].shape)


def _returned_in_place(func) -> tuple[str, ...]:
    """The names of the arguments ``func`` writes in place and returns, one per return
    (``bernoulli_.Tensor``: ``("self",)``), or () where some return is a new tensor.
    Arguments written in place but not returned (``rrelu_with_noise``'s ``noise``) are cut
    like any other: each piece writes its slice."""
    written = {frozenset(a.alias_info.before_set): a.name for a in func._schema.arguments
               if a.alias_info is not None and a.alias_info.is_write and not a.is_out}
    names = tuple(written.get(frozenset(r.alias_info.before_set)) if r.alias_info is not None else None
                  for r in func._schema.returns)
    return names if names and all(names) else ()


class _Whole:
    """An output that is not sliced along the split dim but the same for every piece
    (:data:`WHOLE_OUTPUTS`). The first piece's is returned; every other piece's must
    agree in kind and shape (ints: in value)."""

    def __init__(self, value) -> None:
        self.value = value

    def check(self, r) -> None:
        a, b = self.value, r
        if isinstance(a, torch.Tensor) != isinstance(b, torch.Tensor) or (
                isinstance(a, torch.Tensor) and a.shape != b.shape) or (
                not isinstance(a, torch.Tensor) and a != b):
            raise CannotSplit(f"an output not sliced along the split dim differs between pieces ({a!r}, {b!r})")


def _alloc(r, d: int, n: int, n_all: int, name: str = ""):
    """The whole-call output a piece's output ``r`` (returned as ``name``) is a slice of
    (None stays None; per-call metadata, :data:`WHOLE_OUTPUTS`, and an empty output that is
    not a slice, are kept whole)."""
    if r is None:
        return None
    if name in WHOLE_OUTPUTS or isinstance(r, (int, float)):
        return _Whole(r)
    if isinstance(r, torch.Tensor) and r.numel() == 0 and (r.dim() <= d or r.shape[d] != n):
        return _Whole(r)   # an output the call did not compute (eigh's vectors without compute_v): empty
    if not isinstance(r, torch.Tensor) or r.dim() <= d or r.shape[d] != n:
        what = f"shape {tuple(r.shape)}" if isinstance(r, torch.Tensor) else type(r).__name__
        raise CannotSplit(f"an output ({what}) is not a slice along dim {d} of the whole call's")
    shape = list(r.shape)
    shape[d] = n_all
    return r.new_empty(shape)


# -- draws ---------------------------------------------------------------------------------------
def fix_multinomial(func, args, kwargs, run: Runner, safe: Callable, out_numels: Sequence[int],
                    min_pieces: int = MIN_PIECES):
    """``multinomial`` (or ``multinomial.out``) in safe pieces. With replacement every draw
    is independent of the others, so the draws are made in pieces of ``num_samples``
    (each piece's draws from every row, into the output's slice along its last dim): the
    sweep's finding is one distribution drawn 2^32 times. Without replacement a row's
    draws depend on each other, and where one draw from every row is already unsafe,
    the rows split (:func:`fix_split`); one distribution without replacement cannot be.
    The pieces draw from the law a correct kernel draws from, not its values."""
    b = bind(func, args, kwargs)
    probs, n, replacement = b["self"], int(b["num_samples"]), bool(b.get("replacement", False))
    rows = probs.shape[0] if probs.dim() == 2 else 1
    k = _largest(lambda m: safe([probs], [rows * m]), n) if replacement else 0
    if k == 0:
        if probs.dim() < 2:
            raise CannotSplit("even one draw is unsafe" if replacement else
                              "draws without replacement from one distribution depend on each other")
        plain = {key: v for key, v in kwargs.items() if key != "out"}
        got = fix_split(torch.ops.aten.multinomial.default, args, plain, run, safe, (0,), out_numels, min_pieces)
        return got if "out" not in kwargs else _into(kwargs["out"], got)
    k = _piece_len(k, n, min_pieces)
    shape = (*probs.shape[:-1], n)
    out = kwargs.get("out")
    if out is None:
        out = torch.empty(shape, dtype=torch.int64, device=probs.device)
    elif tuple(out.shape) != shape:
        out.resize_(shape)
    for j0 in range(0, n, k):
        m = min(k, n - j0)
        out.narrow(-1, j0, m).copy_(run("multinomial", probs, m, True, generator=b.get("generator")))
    return out


def _into(out: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """``value`` written into ``out`` (resized to it), as an ``out=`` overload returns."""
    if out.shape != value.shape:
        out.resize_(value.shape)
    return out.copy_(value)


def fix_unique_consecutive(func, args, kwargs, run: Runner, safe: Callable, out_numels: Sequence[int],
                           min_pieces: int = MIN_PIECES):
    """``unique_consecutive`` over the flattened input (``dim=None``, or a 1-d input) in
    safe pieces, merged: where a piece's first value equals (``==``, as the kernel
    compares: NaN never does) the previous piece's last unique value, its first run
    continues that one (its count added, its inverse indexes shifted back by one). The
    same output, inverse and counts as the whole call (CUB counts its items in an
    ``int``: CUDA refuses 2^31 or more). Along a dim of a tensor of 2 or more dims the
    call compares slices: not split."""
    b = bind(func, args, kwargs)
    x, dim = b["self"], b.get("dim")
    inverse, counts = bool(b.get("return_inverse", False)), bool(b.get("return_counts", False))
    if dim is not None and x.dim() > 1:
        raise CannotSplit(f"unique_consecutive along dim {dim} of a {x.dim()}-d tensor compares slices")
    flat = x.reshape(-1)
    n = flat.numel()
    k = _largest(lambda m: safe([flat.narrow(0, 0, m)], [m, m if inverse else 0, m if counts else 0]), n)
    if k == 0:
        raise CannotSplit("even one element is unsafe")
    k = _piece_len(k, n, min_pieces)
    outs, invs, cnts, last, found = [], [], [], None, 0
    tail = None   # the counts tensor holding the last run's count (a piece can be all one run)
    for i0 in range(0, n, k):
        o, inv, c = run("unique_consecutive", flat.narrow(0, i0, min(k, n - i0)), inverse, counts, None)
        merged = last is not None and bool(o[0] == last)   # a run across the cut
        if inverse:
            invs.append(inv + (found - 1 if merged else found))
        last = o[-1]
        if merged:
            if counts:
                tail[-1] += c[0]
                c = c[1:]
            o = o[1:]
        outs.append(o)
        cnts.append(c)
        if counts and c.numel():
            tail = c
        found += o.numel()
    empty = x.new_empty(0, dtype=torch.int64)
    return (torch.cat(outs), torch.cat(invs).reshape(x.shape) if inverse else empty,
            torch.cat(cnts) if counts else empty)


def fix_softmax_backward_last_dim(func, args, kwargs, run: Runner, safe: Callable, out_numels: Sequence[int]):
    """``_softmax_backward_data`` / ``_log_softmax_backward_data`` over a dim that is not
    the last, run over the last: ``grad_output`` and ``output`` with that dim moved last
    (contiguous copies), the gradient moved back (a view of the last-dim result: at 2^32
    elements a contiguous copy would cost another 8 GiB in float16).
    CUDA's spatial kernel, the one a non-last dim with an inner extent selects, is wrong
    in float16 past 2^32 elements; over the last dim another kernel runs, right there
    (the full grid: softmin and the masked softmax family wrong, softmax and log_softmax
    over the last dim right; :data:`~kernelaudit.guard.rules.INNER_OF`). The same
    formula, so the same values up to the order of one row's sum (float32 inside)."""
    b = bind(func, args, kwargs)
    g, y, dim, dtype = b["grad_output"], b["output"], int(b["dim"]), b["input_dtype"]
    d = dim % g.dim() if g.dim() else 0
    if d == g.dim() - 1 or g.dim() == 0:
        raise CannotSplit(f"dim {dim} is already the last: no other kernel to run it on")
    moved = run(entry_name(func), g.movedim(d, -1).contiguous(), y.movedim(d, -1).contiguous(), -1, dtype)
    return moved.movedim(-1, d)


def fix_batched_matrices(func, args, kwargs, run: Runner, safe: Callable, out_numels: Sequence[int]):
    """A linear-algebra entry (``linalg_matrix_exp``) over a batch of matrices in pieces of
    the batch (dim 0; a single matrix is refused: its rows are not separable). Its own fix
    because the rule writer finds no split dim where the call also runs other ops on the
    crossing tensor (matrix_exp's backward assembles block matrices with ``cat``); the
    fault is in the entry's batched GEMMs, which the pieces keep under the limit."""
    return fix_split(func, args, kwargs, run, safe, (0,), out_numels)


def _norm_rows(b: dict) -> tuple[list[int], tuple[int, ...], int]:
    """(normalized shape, the dims before it, rows) of a normalization call (``b``: its
    arguments by name); :class:`CannotSplit` where the normalized dims leave no rows."""
    x, shape = b["input"], [int(s) for s in b["normalized_shape"]]
    k = len(shape)
    if x.dim() <= k or tuple(x.shape[x.dim() - k:]) != tuple(shape):
        raise CannotSplit(f"normalized_shape {shape} leaves no rows of an input of shape {tuple(x.shape)}")
    lead = tuple(x.shape[:x.dim() - k])
    return shape, lead, math.prod(lead)


def _row_piece(per_row: Sequence[torch.Tensor], whole: Sequence[torch.Tensor], m: int, safe: Callable,
               out_numels: Sequence[int], min_pieces: int) -> int:
    """The rows a piece of a normalization takes: ``per_row`` tensors are cut along dim 0
    (their rows), ``whole`` ones (weight, bias) go whole to every piece."""
    k = _largest(lambda n: safe([*(t.narrow(0, 0, n) for t in per_row), *whole], [o * n // m for o in out_numels]), m)
    if k == 0:
        raise CannotSplit("even one row is unsafe")
    return _piece_len(k, m, min_pieces)


def fix_layer_norm_rows(func, args, kwargs, run: Runner, safe: Callable, out_numels: Sequence[int],
                        min_pieces: int = MIN_PIECES):
    """``native_layer_norm`` in pieces of its rows: the input viewed as rows x the
    normalized dims, cut along the rows; weight and bias (shaped like the normalized dims)
    go whole to every piece. CUDA's forward launches a block a row and refuses more rows
    than its grid holds ('M should be less than maximum CUDA grid size'); each row is
    normalized alone, so the pieces are the same computation. Its own fix because the
    rule writer sees weight and bias as tensors not separable along dim 0."""
    b = bind(func, args, kwargs)
    shape, lead, m = _norm_rows(b)
    rows = b["input"].reshape(m, *shape)
    whole = [t for t in (b.get("weight"), b.get("bias")) if isinstance(t, torch.Tensor)]
    step = _row_piece([rows], whole, m, safe, out_numels, min_pieces)
    out = torch.empty_like(rows, memory_format=torch.contiguous_format)
    stats = None
    for i0 in range(0, m, step):
        n = min(step, m - i0)
        o, *st = run(entry_name(func), rows.narrow(0, i0, n), shape, b.get("weight"), b.get("bias"), b["eps"])
        if stats is None:
            stats = [s.new_empty((m, *s.shape[1:])) for s in st]
        out.narrow(0, i0, n).copy_(o)
        for full, s in zip(stats, st):
            full.narrow(0, i0, n).copy_(s)
    return (out.reshape(b["input"].shape), *(s.reshape(*lead, *s.shape[1:]) for s in stats))


def fix_layer_norm_backward_rows(func, args, kwargs, run: Runner, safe: Callable, out_numels: Sequence[int],
                                 min_pieces: int = MIN_PIECES):
    """``native_layer_norm_backward`` in pieces of its rows, as the forward
    (:func:`fix_layer_norm_rows`): CUDA's backward refuses as many rows as its forward
    (the same grid check). The input's gradient is assembled from the pieces'; the
    weight's and bias's gradients, sums over every row, are summed here from each
    piece's rows in float32 (or the statistics' wider dtype) and cast once, rather than
    added up from the pieces' own, each already rounded to the weight's dtype."""
    b = bind(func, args, kwargs)
    shape, lead, m = _norm_rows(b)
    ones = [1] * len(shape)
    go, x = b["grad_out"].reshape(m, *shape), b["input"].reshape(m, *shape)
    mean, rstd = b["mean"].reshape(m, *ones), b["rstd"].reshape(m, *ones)
    w, bias = b.get("weight"), b.get("bias")
    want_x, want_w, want_b = (bool(v) for v in b["output_mask"])
    whole = [t for t in (w, bias) if isinstance(t, torch.Tensor)]
    step = _row_piece([go, x, mean, rstd], whole, m, safe, out_numels, min_pieces)
    acc = torch.promote_types(mean.dtype, torch.float32)
    dx = torch.empty_like(x, memory_format=torch.contiguous_format) if want_x else None
    dw = torch.zeros(shape, dtype=acc, device=x.device) if want_w and w is not None else None
    db = torch.zeros(shape, dtype=acc, device=x.device) if want_b and bias is not None else None
    for i0 in range(0, m, step):
        n = min(step, m - i0)
        g, xs, mu, rs = (t.narrow(0, i0, n) for t in (go, x, mean, rstd))
        if dx is not None:
            got = run(entry_name(func), g, xs, shape, mu, rs, w, bias, [True, False, False])
            dx.narrow(0, i0, n).copy_(got[0])
        if dw is not None:
            dw += (g.to(acc) * (xs.to(acc) - mu.to(acc)) * rs.to(acc)).sum(0)
        if db is not None:
            db += g.to(acc).sum(0)
    return (dx.reshape(b["input"].shape) if dx is not None else None,
            dw.to(w.dtype) if dw is not None else None, db.to(bias.dtype) if db is not None else None)


#: Row pieces of a tall matrix's QR stay under this many elements (cuSOLVER's 32-bit
#: counts), whatever the SVD rule allows.
QR_PIECE_ELEMENTS = 2**31 - 1


def _tsqr_svd(a: torch.Tensor, compute_uv: bool, svd, safe_rows: int, min_pieces: int):
    """The thin SVD of one tall matrix ``a`` (m >= n) through a QR of row pieces (TSQR):
    each piece ``a_i = Q_i R_i``, the stacked ``R_i`` = ``Q2 R``, ``R = U_r S Vh`` (``svd``:
    the op's own kernel on an n x n matrix), so ``a = (blockdiag(Q_i) Q2 U_r) S Vh``. U is
    written piece by piece (``U_i = Q_i (Q2_i U_r)``): the whole Q is never held. The
    pieces' QR runs twice (R first, then Q for U) and must give the same R both times."""
    m, n = a.shape
    k = _piece_len(max(min(safe_rows, QR_PIECE_ELEMENTS // max(n, 1)), n), m, min_pieces)
    starts = range(0, m, k)
    rs = [torch.linalg.qr(a.narrow(0, i0, min(k, m - i0)), mode="r")[1] for i0 in starts]
    q2, r = torch.linalg.qr(torch.cat(rs))
    u_r, sv, vh = svd(r)
    if not compute_uv:
        return None, sv, None
    u = a.new_empty(m, n)
    row = 0
    for i0, r_i in zip(starts, rs):
        q_i, r_again = torch.linalg.qr(a.narrow(0, i0, min(k, m - i0)))
        if not torch.equal(r_again, r_i):
            raise CannotSplit("the QR of a row piece gave another R when run again")
        u.narrow(0, i0, q_i.shape[0]).copy_(q_i @ (q2.narrow(0, row, r_i.shape[0]) @ u_r))
        row += r_i.shape[0]
    return u, sv, vh


def fix_tall_svd(func, args, kwargs, run: Runner, safe: Callable, out_numels: Sequence[int],
                 min_pieces: int = MIN_PIECES):
    """``_linalg_svd`` (the SVD under ``linalg.svd``, ``svdvals`` and ``pinv``) of tall or
    wide matrices, thin (``full_matrices=False``), through a QR of row pieces
    (:func:`_tsqr_svd`; a wide matrix through its conjugate transpose): the singular values
    of ``a`` are those of the n x n R, so only an n x n SVD runs whole. cuSOLVER refuses
    the SVD of one 858,993,410 x 5 float32 matrix (``gesvdj``'s buffer size: the full grid's
    ``linalg.pinv``), a matrix no split along a dim can cut. The same singular values and
    subspaces to rounding; singular vectors are unique only up to sign (phase), as between
    any two SVD drivers, so ``U`` and ``Vh`` may differ from another driver's by that, and
    ``pinv`` (``Vh^H S^-1 U^H``) does not. A batch of matrices runs in the largest safe
    pieces of whole matrices (the batched SVD past 2^31 elements, ``torch.pinverse`` of
    85,899,348 5 x 5 float32 matrices on the H100: an illegal memory access), and matrix by
    matrix through row pieces only where one matrix alone is unsafe. ``full_matrices=True``
    of a non-square matrix is refused (its m x m U is the size the rule flags)."""
    b = bind(func, args, kwargs)
    a = b["A"]
    full, compute_uv, driver = bool(b.get("full_matrices", False)), bool(b.get("compute_uv", True)), b.get("driver")
    m, n = a.shape[-2], a.shape[-1]
    if full and m != n:
        raise CannotSplit(f"full_matrices=True asks for a {max(m, n)} x {max(m, n)} factor")

    def svd(x):
        return run("_linalg_svd", x, False, True, driver=driver)

    def one(x):
        if safe([x], [x.numel() if compute_uv else 0, min(m, n), min(m, n) ** 2 if compute_uv else 0]):
            return run("_linalg_svd", x, full, compute_uv, driver=driver)
        tall = x if m >= n else x.mH
        rows = _largest(lambda r: safe([tall.narrow(0, 0, r)], [r * tall.shape[1], tall.shape[1],
                                                                tall.shape[1] ** 2]), tall.shape[0])
        if rows < tall.shape[1]:
            raise CannotSplit(f"even {tall.shape[1]} rows of a {tuple(tall.shape)} matrix are unsafe")
        u, sv, vh = _tsqr_svd(tall, compute_uv, svd, rows, min_pieces)
        if not compute_uv:
            return x.new_empty(0), sv, x.new_empty(0)
        return (u, sv, vh) if m >= n else (vh.mH, sv, u.mH)

    batch = a.shape[:-2]
    if not batch:
        got = one(a)
    else:
        flat = a.reshape(-1, m, n)
        count, k = flat.shape[0], min(m, n)
        per = [m * (m if full else k) if compute_uv else 0, k, (n if full else k) * n if compute_uv else 0]
        most = _largest(lambda c: safe([flat.narrow(0, 0, c)], [c * o for o in per]), count)
        if most:   # pieces of whole matrices: a batch's fault (gesvdjBatched past 2^31 elements)
            step = _piece_len(most, count, min_pieces)
            parts = [run("_linalg_svd", flat.narrow(0, s, min(step, count - s)), full, compute_uv, driver=driver)
                     for s in range(0, count, step)]
        else:      # even one matrix is unsafe: matrix by matrix, each through row pieces
            parts = [tuple(t.unsqueeze(0) for t in one(x)) for x in flat]
        got = tuple(torch.cat([p[j] for p in parts]).reshape(*batch, *parts[0][j].shape[1:])
                    if compute_uv or j == 1 else a.new_empty(0) for j in range(3))
    if "U" in b:   # the out= overload
        return tuple(_into(b[name], g) for name, g in zip(("U", "S", "Vh"), got))
    return got


#: The entry point every ``linalg.pinv`` call reaches (its float overload is a composite of it).
PINV_ENTRY = "linalg_pinv.atol_rtol_tensor"
#: Entry points screened at their backend's autograd key (``AutogradCUDA``, ...) rather
#: than its backend key: their fault is in the backward formula autograd runs.
AUTOGRAD_ENTRIES = frozenset({PINV_ENTRY})


def _pinv_backward_tall(grad: torch.Tensor, pinv_a: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """PyTorch's ``pinv_backward`` for a tall ``a`` (m > n), its products associated so that
    none is m x m: ``P^H K P A`` as ``(P^H K)(P A)`` and ``(G^H - A K) P P^H`` as
    ``(G^H - A K)(P P^H)``, with ``K = P G^H`` (n x n). The same terms, so the same gradient
    to rounding; PyTorch's left-to-right order builds two m x m matrices (2.9 EB for the
    grid's 858,993,410 x 5 input)."""
    pinv_ah, grad_h = pinv_a.mH, grad.mH
    k = pinv_a @ grad_h                      # n x n
    pinv_ah_k = pinv_ah @ k                  # m x n
    return (-(k @ pinv_a).mH + pinv_ah_k - pinv_ah_k @ (pinv_a @ a)
            + (grad_h - a @ k) @ (pinv_a @ pinv_ah))


class _TallPinv(torch.autograd.Function):
    """``linalg_pinv.atol_rtol_tensor`` with :func:`_pinv_backward_tall` as its backward;
    the forward is the original kernel's (below autograd: ``run`` with grad mode off)."""

    @staticmethod
    def forward(ctx, a, atol, rtol, hermitian, run):
        out = run(PINV_ENTRY, a, atol=atol, rtol=rtol, hermitian=hermitian)
        ctx.save_for_backward(a, out)
        return out

    @staticmethod
    def backward(ctx, grad):
        a, out = ctx.saved_tensors
        return _pinv_backward_tall(grad, out, a), None, None, None, None


def fix_pinv_tall_backward(func, args, kwargs, run: Runner, safe: Callable, out_numels: Sequence[int]):
    """``linalg.pinv`` of tall matrices whose gradient is wanted: the call recorded with a
    backward that forms no m x m product (:func:`_pinv_backward_tall`). A call autograd
    does not record, or of a matrix that is not tall (PyTorch's formula then forms no m x m
    product), runs as it is."""
    b = bind(func, args, kwargs)
    a = b["self"]
    if not (torch.is_grad_enabled() and a.requires_grad) or a.shape[-2] <= a.shape[-1]:
        return run(PINV_ENTRY, *args, **kwargs)
    return _TallPinv.apply(a, b.get("atol"), b.get("rtol"), bool(b.get("hermitian", False)), run)


#: Screened ops with a fix of their own, called as ``fix(func, args, kwargs, run, safe,
#: out_numels)`` instead of the generic split where no rule that flags the call names a
#: ``split_dim``.
OWN_FIX = {"multinomial": fix_multinomial, "unique_consecutive": fix_unique_consecutive,
           "_softmax_backward_data": fix_softmax_backward_last_dim,
           "_log_softmax_backward_data": fix_softmax_backward_last_dim,
           "linalg_matrix_exp": fix_batched_matrices, "_linalg_svd": fix_tall_svd,
           "native_layer_norm": fix_layer_norm_rows, "native_layer_norm_backward": fix_layer_norm_backward_rows,
           "linalg_pinv": fix_pinv_tall_backward}
