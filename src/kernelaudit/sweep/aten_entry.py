"""The aten entry points of a sweep op, found by tracing it at a tiny size.

A guard rule for an op the engine cannot split is screened at the op's aten entry
points (:mod:`kernelaudit.guard.intercept` overrides them on the backend's dispatch
key). :func:`entry_points` finds them for any op the sweep runs (a hand spec, or one
of the ops derived from PyTorch's OpInfo database): it builds the op's inputs as a
case does (:func:`~kernelaudit.sweep.judge.operands.placed_operands`), at two tiny
batch counts on the CPU, and runs the op (forward; for ``bwd`` the forward outside and
the backward inside) under a :class:`~torch.utils._python_dispatch.TorchDispatchMode`
that records every aten overload it reaches, with the sizes of its tensors. An op
with no kernel of its own on the CPU key (``CompositeExplicitAutograd``: ``arange``,
``sort``, ``convolution``) is followed into the ops its composite kernel calls; views,
metadata and allocations (:data:`METADATA`) are not.

The entry point is the **first** recorded op with a kernel on the rule's backend that
is not a view or an allocation and whose inputs or outputs include the **crossing
tensor** (the tensor of ``batch x per_batch_max`` elements that crosses the size limit,
at both batch counts; a complex tensor counts as its reals), preferring, in order, an
op named for the sweep op (``cumsum`` in cumsum's backward, after a ``flip``;
``nonzero`` after the case's ``x > 0``), then one whose output grows with the batch
count; ops that only move or fill data (:data:`DATA_MOVES`: ``copy_``, ``clone``,
``fill_``, ``*_copy``) are taken only when nothing else touches it. Names are spelt as the guard
resolves them (``op`` for the default overload, else ``op.overload``: ``_cdist_forward``,
``arange.start_out``).

With it come the dim the entry point's crossing tensors grow along (``scaled_dim``),
and ``split_dim``: that dim, when the guard's own split (:func:`kernelaudit.guard.
separable.fix_split`) of each recorded call, in pieces that do not line up with the
batches, gives what the whole call gives, and no other op of the call (but data moves)
touches the crossing tensor (a fix at the entry point then fixes the whole call). An
entry point that takes the dims it works along (a reduction, a scan, softmax) may
split: the guard reads those arguments at each call and never cuts along one of them
(:func:`kernelaudit.guard.separable.dims_worked_along`: another program's ``cumsum`` may
scan the very dim a rule splits).

Backends other than the CPU: the trace runs on the CPU, and an entry point must have a
kernel on the rule's backend (``native_functions.yaml``, shipped with torch in
``torchgen``, says which). A composite with a kernel on that backend (the CUDA
``convolution_backward``) is the entry point there; a composite that picks its kernel
by backend (:data:`BACKEND_CHOICE`: ``_convolution``) lists that backend's kernels;
an op the CPU path reaches that the backend has no kernel for
(``_scaled_dot_product_flash_attention_for_cpu``) is not an entry point there.

What a trace on the CPU cannot show: a choice of kernel per backend made inside a
``CompositeImplicitAutograd`` function, decomposed before any dispatch mode sees it
(``scaled_dot_product_attention``: the hand table of :mod:`.rules_out` lists SDPA's
entry points). And the what-if guard (:class:`~kernelaudit.guard.intercept.GuardMode`,
under a fault model) sees the outermost op a call reaches, not a kernel below a
``CompositeExplicitAutograd`` one (``embedding``'s ``index_select``): it screens the
entry points by op name, so there such an entry point is not reached.

Results are cached per (op, direction, series, dtype, layout, backend) in this process;
a trace costs milliseconds, so nothing is written to disk.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

DK = torch._C.DispatchKey
#: The scale the trace's case is cut at: per-batch shapes of a few elements, as the
#: sweep's tiny-shape axes cut them (rows of 16, matrices of 8x2; a top-8 fits).
TRACE_SCALE = 12
#: The two batch counts traced: what grows between them scales with the case's size
#: (not 1 or 2: size-1 and size-2 dims take special paths in some ops).
TRACE_BATCHES = (3, 5)
#: The backend the trace runs on.
TRACE_DEVICE = "cpu"
#: torch device type -> dispatch key name (as the guard's ``DISPATCH_KEYS``).
DISPATCH_KEYS = {"cpu": "CPU", "cuda": "CUDA", "mps": "MPS", "xpu": "XPU"}

#: Ops that only describe, alias or allocate memory: never entry points, never followed.
#: (Every overload whose schema returns an alias of an input, ``func.is_view``, too.)
METADATA = frozenset({
    "view", "_unsafe_view", "reshape", "_reshape_alias", "expand", "expand_as", "t", "t_", "transpose",
    "transpose_", "permute", "unsqueeze", "unsqueeze_", "squeeze", "squeeze_", "as_strided", "as_strided_",
    "detach", "detach_", "alias", "lift_fresh", "slice", "select", "narrow", "split", "split_with_sizes",
    "chunk", "unbind", "unsafe_split", "unsafe_split_with_sizes", "unsafe_chunk", "movedim", "flatten", "unflatten", "view_as", "view_as_real", "view_as_complex", "_conj",
    "_neg_view", "diagonal", "unfold", "real", "imag",
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "empty_permuted",
    "resize_", "resize_as_", "set_", "_local_scalar_dense", "sym_size", "sym_stride", "sym_numel",
    "sym_storage_offset", "is_same_size", "_has_compatible_shallow_copy_type", "_nested_tensor_size",
})
#: Ops that only copy or fill memory (and factories that fill): entry points only when
#: no other op of the call touches the crossing tensor (a composite one is followed:
#: ``full`` reaches ``fill_``, ``clone`` ``copy_``).
DATA_MOVES = frozenset({
    "copy_", "_copy_from", "_copy_from_and_resize", "_to_copy", "clone", "contiguous", "lift_fresh_copy",
    "fill_", "zero_", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like", "new_zeros", "new_ones",
    "new_full", "scalar_tensor",
})
#: Composites that pick their kernel by backend, so what the CPU trace reaches below
#: them is the CPU's choice: backend -> the kernels they may reach there (from
#: ``select_conv_backend`` in ATen's ``Convolution.cpp``).
BACKEND_CHOICE = {
    "_convolution": {
        "cuda": ("cudnn_convolution", "cudnn_convolution_transpose", "_slow_conv2d_forward", "slow_conv_dilated2d",
                 "slow_conv_dilated3d", "slow_conv_transpose2d", "slow_conv_transpose3d", "_conv_depthwise2d",
                 "conv_depthwise3d", "miopen_convolution", "miopen_convolution_transpose",
                 "miopen_depthwise_convolution"),
        "mps": ("_mps_convolution", "_mps_convolution_transpose"),
    },
}



def entry_name(func) -> str:
    """The guard's spelling of an aten overload: ``op``, or ``op.overload``."""
    return func.name().split("::", 1)[-1]


def packet(name: str) -> str:
    """``arange.start_out`` -> ``arange``."""
    return name.partition(".")[0]


def kind_of(func) -> str:
    """``metadata``, ``move`` or ``compute``."""
    p = packet(entry_name(func))
    if p in METADATA or getattr(func, "is_view", False):
        return "metadata"
    if p in DATA_MOVES or p.endswith("_copy"):
        return "move"
    return "compute"


# -- kernels per backend --------------------------------------------------------------------
@lru_cache(maxsize=1)
def native_kernels() -> dict[str, frozenset[str]] | None:
    """aten overload name -> the dispatch keys it has a kernel for, from the
    ``native_functions.yaml`` torch ships (in ``torchgen``); a structured op has its
    ``out`` delegate's, a ``ufunc_inner_loop`` op generated CPU and CUDA ones. None
    where that file or PyYAML is missing."""
    try:
        import torchgen
        import yaml
    except ImportError:
        return None
    path = Path(torchgen.__file__).parent / "packaged/ATen/native/native_functions.yaml"
    try:
        entries = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except (OSError, yaml.YAMLError):
        return None
    keys: dict[str, frozenset[str]] = {}
    delegate: dict[str, str] = {}
    for e in entries:
        name = e["func"].split("(", 1)[0].strip()
        ks = set()
        for group in (e.get("dispatch") or {}):
            ks.update(k.strip() for k in group.split(","))
        if e.get("ufunc_inner_loop"):  # codegen'd TensorIterator kernels
            ks.update(("CPU", "CUDA"))
        keys[name] = frozenset(ks)
        if e.get("structured_delegate"):
            delegate[name] = e["structured_delegate"]
    for name, d in delegate.items():
        keys[name] = keys[name] | keys.get(d, frozenset())
    return keys


def has_kernel(name: str, device: str) -> bool:
    """Whether aten overload ``name`` has a kernel of its own on ``device``'s dispatch key
    (what the guard's screen overrides; a composite's is not one): the dispatcher's
    answer on the CPU, ``native_functions.yaml``'s elsewhere (the CPU's answer where
    that file is missing)."""
    if device == TRACE_DEVICE or device not in DISPATCH_KEYS:
        return torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{name}", DK.CPU)
    table = native_kernels()
    if table is None:
        return torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{name}", DK.CPU)
    return DISPATCH_KEYS[device] in table.get(name, ())


def _decomposition(func):
    """The composite dispatch key to follow ``func`` into, or None (it has a CPU kernel,
    or no composite one)."""
    name = func.name()
    if torch._C._dispatch_has_kernel_for_dispatch_key(name, DK.CPU):
        return None
    for key in (DK.CompositeExplicitAutograd, DK.CompositeExplicitAutogradNonFunctional,
                DK.CompositeImplicitAutograd):
        if torch._C._dispatch_has_kernel_for_dispatch_key(name, key):
            return key
    return None


# -- the trace -------------------------------------------------------------------------------
@dataclass
class Call:
    """One aten call the traced op reached."""

    name: str
    func: object
    kind: str
    depth: int
    parent: int | None
    ins: list = field(default_factory=list)       # shapes of its tensor arguments
    outs: list = field(default_factory=list)      # shapes of its tensor outputs
    #: its tensors' (storage address, element counts, dtype): complex tensors count as
    #: reals too (the sweep judges them through ``view_as_real``); no address for a view
    #: of fewer elements than it shows (an expanded tensor), or no storage
    tensors: list = field(default_factory=list)
    followed: bool = False                        # run through its composite kernel (children recorded)
    snapshot: tuple | None = None                 # (args, kwargs), tensors cloned: to re-run it

    @property
    def shapes(self) -> list:
        return self.ins + self.outs


def _shapes(x) -> list:
    return [tuple(t.shape) for t in tree_flatten(x)[0] if isinstance(t, torch.Tensor)]


def _tensors(x, keep: list) -> list[tuple[int | None, frozenset[int], torch.dtype]]:
    """(storage address, element counts, dtype) of each tensor in ``x`` (see
    :attr:`Call.tensors`); ``keep`` holds the tensors, so no address is reused while
    the trace runs."""
    out = []
    for t in tree_flatten(x)[0]:
        if not isinstance(t, torch.Tensor):
            continue
        keep.append(t)
        n = t.numel()
        try:
            st = t.untyped_storage()
            addr = st.data_ptr() if st.nbytes() >= n * t.element_size() and st.data_ptr() else None
        except (RuntimeError, NotImplementedError):  # no storage (sparse, nested)
            addr = None
        out.append((addr, frozenset({n, 2 * n} if t.is_complex() else {n}), t.dtype))
    return out


def _clone(x):
    return tree_map(lambda t: t.detach().clone() if isinstance(t, torch.Tensor) else t, x)


def _wrap_numbers(func, args, kwargs):
    """``args``/``kwargs`` with a Python number where the schema wants a Tensor made a
    0-dim tensor: a composite's wrapped-number tensors reach this mode as numbers
    (``remainder.Scalar`` calling ``remainder.Tensor``), which ``func`` then refuses."""
    schema = func._schema.arguments
    number = (bool, int, float, complex)

    def fix(a, v):
        return torch.tensor(v) if isinstance(v, number) and isinstance(a.type, torch.TensorType) else v
    if not any(isinstance(v, number) for v in (*args, *kwargs.values())):
        return args, kwargs
    by_name = {a.name: a for a in schema}
    return (tuple(fix(a, v) for a, v in zip(schema, args)) + tuple(args[len(schema):]),
            {k: fix(by_name[k], v) if k in by_name else v for k, v in kwargs.items()})


class Recorder(TorchDispatchMode):
    """Records every aten call under it (:class:`Call`); follows composites into the
    calls their kernels make."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[Call] = []
        self._open: list[int] = []
        self._funcs: list = []
        self.keep: list = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        args, kwargs = _wrap_numbers(func, args, kwargs or {})
        if func in self._funcs:  # a composite kernel calling its own op again: below this mode
            return func(*args, **kwargs)
        kind = kind_of(func)
        call = Call(entry_name(func), func, kind, depth=len(self._open),
                    parent=self._open[-1] if self._open else None, ins=_shapes((args, kwargs)))
        if kind != "metadata":
            call.snapshot = _clone((args, kwargs))
        self.calls.append(call)
        key = _decomposition(func) if kind != "metadata" else None
        self._open.append(len(self.calls) - 1)
        self._funcs.append(func)
        try:
            if key is not None:
                call.followed = True
                with self:  # the composite's own calls come back here
                    out = func.decompose(*args, **kwargs) if key == DK.CompositeImplicitAutograd else \
                        func._op_dk(key, *args, **kwargs)
            else:
                out = func(*args, **kwargs)
        finally:
            self._open.pop()
            self._funcs.pop()
        call.outs = _shapes(out)
        call.tensors = _tensors((args, kwargs), self.keep) + _tensors(out, self.keep)
        return out


def tiny_case(op: str, direction: str, *, series: str | None = None, dtype: str | None = None,
              layout: str = "contig", batch: int = TRACE_BATCHES[0]):
    """The case the trace runs: ``op`` at ``batch`` batches, cut at :data:`TRACE_SCALE`."""
    from .cases import Case
    from .ops.catalog import op_spec

    spec = op_spec(op)
    series = series or next(iter(spec.series))
    if dtype is None:
        dtype = "float32" if "float32" in spec.dtypes else spec.dtypes[0]
    return Case(op, dtype, layout, series, "2^32", "at", batch, direction, 0, TRACE_SCALE)


def trace(case, device: str = TRACE_DEVICE) -> list[Call]:
    """The aten calls ``case`` reaches (forward; for ``bwd`` the backward's alone), run on
    ``device`` with no fault model: operands as the case places them, each a leaf."""
    from . import gen
    from .judge.operands import _as_tuple, placed_operands
    from .ops.spec import DTYPES

    spec = case.spec
    rec = Recorder()
    if spec.call is None:
        if "metamorphic" in spec.extra:
            raise NotTraceable("it makes its own inputs (judged by a metamorphic relation): its calls cannot be "
                               "told from its input generation")
        n = case.batch * spec.out_rows(case.series, case.thresholds)[0]
        with rec:
            spec.extra["factory"](n, DTYPES[case.dtype], device)
        return rec.calls
    bwd = case.direction == "bwd"
    views = []
    for p in placed_operands(case):
        base = gen.fill_flat(p.storage_numel, p.key, p.dtype, device, high=p.operand.high)
        v = base.as_strided(p.shape, p.strides, p.offset).detach()  # a leaf: its backward stops here
        if bwd and p.operand.grad and p.dtype.is_floating_point:
            v.requires_grad_(True)
        views.append(v)
    if not bwd:
        with torch.no_grad(), rec:
            spec.call(*views)
        return rec.calls
    outs = _as_tuple(spec.call(*views))
    used = [o for o in outs[: spec.bwd_outputs] if o.requires_grad]
    if not used:
        raise NotTraceable("its outputs take no gradient")
    grads = [gen.fill_flat(o.numel(), gen.stream_key(case.seed, f"{case.op}/grad{j}"), o.dtype, device).view(o.shape)
             for j, o in enumerate(used)]
    with rec:
        torch.autograd.backward(used, grads)
    return rec.calls


class NotTraceable(Exception):
    """The op cannot be traced; the message says why."""


# -- entry points ----------------------------------------------------------------------------
@dataclass(frozen=True)
class EntryPoints:
    """Where a sweep op's calls are screened on one backend."""

    op: str
    direction: str
    device: str
    #: The aten entry points (empty: none found, ``reason`` says why).
    aten: tuple[str, ...] = ()
    #: The dim the entry point's crossing tensors grow along (None: not one dim).
    scaled_dim: int | None = None
    #: ``scaled_dim`` where the guard's split there was verified and fixes the whole call.
    split_dim: int | None = None
    #: Every op of the call past views touching the crossing tensor, in order.
    chain: tuple[str, ...] = ()
    #: Why no entry point (or no split dim).
    reason: str = ""

    def to_json(self) -> dict:
        return {"op": self.op, "direction": self.direction, "device": self.device, "aten": list(self.aten),
                "scaled_dim": self.scaled_dim, "split_dim": self.split_dim, "chain": list(self.chain),
                "reason": self.reason}


_CACHE: dict[tuple, EntryPoints] = {}


def entry_points(op: str, direction: str, *, device: str = TRACE_DEVICE, series: str | None = None,
                 dtype: str | None = None, layout: str = "contig") -> EntryPoints:
    """The aten entry points of sweep op ``op`` in ``direction`` on backend ``device``
    (a torch device type), traced at a tiny size on the CPU with the case's ``series``,
    ``dtype`` and ``layout`` (defaults: the op's first series, float32, contig; a dtype
    the CPU cannot run is traced in float32). Cached in this process."""
    key = (op, direction, device, series, dtype, layout)
    hit = _CACHE.get(key)
    if hit is None:
        try:
            hit = _derive(op, direction, device, series, dtype, layout)
        except Exception as e:  # noqa: BLE001 - a rule file is still written for the other ops
            hit = EntryPoints(op, direction, device, reason=f"deriving them failed: {type(e).__name__}: {e}"[:300])
        _CACHE[key] = hit
    return hit


def _traces(op, direction, series, dtype, layout):
    """(case at each traced batch count, its calls) for both counts."""
    out = []
    for b in TRACE_BATCHES:
        case = tiny_case(op, direction, series=series, dtype=dtype, layout=layout, batch=b)
        out.append((case, trace(case)))
    return out


def _derive(op, direction, device, series, dtype, layout) -> EntryPoints:
    def none(why: str, chain=()) -> EntryPoints:
        return EntryPoints(op, direction, device, chain=tuple(chain), reason=why)

    try:
        try:
            traces = _traces(op, direction, series, dtype, layout)
        except NotTraceable:
            raise
        except Exception:
            if dtype in (None, "float32"):
                raise
            traces = _traces(op, direction, series, "float32", layout)  # the CPU lacks a kernel in dtype
    except NotTraceable as e:
        return none(f"cannot trace it: {e}")
    except Exception as e:  # noqa: BLE001 - a surprise in one op must not lose the others
        return none(f"tracing it at a tiny size failed: {type(e).__name__}: {str(e).strip().splitlines()[0][:160]}"
                    if str(e).strip() else f"tracing it at a tiny size failed: {type(e).__name__}")
    from .ops.catalog import per_batch_max
    from .ops.spec import DTYPES

    (_, t1), (_, t2) = traces
    crossing = [c.batch * per_batch_max(c.spec, c.series, c.thresholds) for c, _ in traces]
    twin = _pair(t1, t2)
    marked = [_crossing_storages(t, n) for t, n in zip((t1, t2), crossing)]
    touches = [twin[i] is not None and _touches(c, crossing[1], marked[1])
               and _touches(t1[twin[i]], crossing[0], marked[0]) for i, c in enumerate(t2)]
    grows_out = [twin[i] is not None and _numels(c.outs) != _numels(t1[twin[i]].outs) for i, c in enumerate(t2)]
    # composites that reach the crossing tensor through other ops (not by their own code)
    parents = {c.parent for j, c in enumerate(t2) if c.parent is not None and touches[j] and c.kind != "metadata"}
    picks: list[int] = []      # screenable calls touching the crossing tensor, in order
    stuck: list[int] = []      # calls touching it that the guard cannot screen on this backend
    skip_below: int | None = None
    # walk the calls outermost first: an op with a kernel on the backend runs whole there
    for i, c in enumerate(t2):
        if skip_below is not None:
            if c.depth > skip_below:
                continue
            skip_below = None
        if c.kind == "metadata":
            skip_below = c.depth
            continue
        if has_kernel(c.name, device):
            if touches[i]:
                picks.append(i)
            skip_below = c.depth
            continue
        if device != TRACE_DEVICE and c.name in BACKEND_CHOICE and touches[i]:
            picks.append(i)  # what it reaches below is the CPU's choice: its backend's kernels stand in
            skip_below = c.depth
            continue
        if touches[i] and i not in parents:
            stuck.append(i)
    compute = [i for i in picks if t2[i].kind == "compute"]
    chain = tuple(dict.fromkeys(t2[i].name for i in compute))
    base = base_name(op)
    dtype_of = DTYPES[traces[1][0].dtype]

    def rank(i: int) -> tuple:
        # named for the op, then on a crossing tensor of the case's dtype (not its
        # indices), then with an output that grows, then first
        return (not (base and base in packet(t2[i].name)), not _touches(t2[i], crossing[1], marked[1], dtype_of),
                not grows_out[i], i)

    ranked = sorted(compute, key=rank) or [i for i in picks if t2[i].kind == "move"]
    if not ranked:
        seen = list(dict.fromkeys(t2[i].name for i in stuck))
        why = ("the crossing tensor reaches no aten op past views and allocations" if not seen else
               f"the ops it reaches on the crossing tensor ({', '.join(seen)}) have no kernel of their own on "
               f"{device}: the guard cannot screen them there")
        return none(why)
    first = t2[ranked[0]]
    if first.name in BACKEND_CHOICE:
        aten = BACKEND_CHOICE[first.name].get(device, ())
        if not aten:
            return none(f"{first.name} picks its kernel by backend, and none is known for {device}", chain)
    else:
        aten = (first.name,)
    same = [i for i in picks if t2[i].name == first.name]
    dim = _scaled_dim([(t2[i], t1[twin[i]]) for i in same], TRACE_BATCHES)
    reason = ""
    split = None
    others = [n for n in chain if n != first.name] + [t2[i].name for i in stuck if t2[i].kind == "compute"]
    if dim is None:
        reason = "its crossing tensors do not grow along one dim at the entry point: no split dim"
    elif others:
        reason = (f"other ops of the call touch the crossing tensor too ({', '.join(dict.fromkeys(others))}): a fix "
                  "at the entry point alone would not fix the call, no split dim")
    else:
        bad = next((why for i in same if (why := verify_split(t2[i], dim))), None)
        if bad:
            reason = f"{first.name} does not split along dim {dim}: {bad}"
        else:
            split = dim
    return EntryPoints(op, direction, device, tuple(aten), dim, split, chain, reason)


#: Namespaces an op name may start with (``nn.functional.conv2d``: ``conv2d``).
_NAMESPACES = ("torch", "ops", "aten", "nn", "functional", "linalg", "fft", "special", "masked", "sparse")


def base_name(op: str) -> str:
    """The name an aten op of the sweep op would carry: ``max.reduction_with_dim`` ->
    ``max``, ``nn.functional.interpolate.nearest`` -> ``interpolate`` (empty when
    shorter than 3 letters)."""
    parts = op.split(".")
    while len(parts) > 1 and parts[0] in _NAMESPACES:
        parts = parts[1:]
    name = parts[0].strip("_")
    return name if len(name) >= 3 else ""


def _crossing_storages(calls: list[Call], crossing: int) -> set[int]:
    """The storages of the tensors of ``crossing`` elements (their views share them)."""
    return {addr for c in calls for addr, counts, _ in c.tensors if addr is not None and crossing in counts}


def _touches(call: Call, crossing: int, storages: set[int], dtype: torch.dtype | None = None) -> bool:
    """Whether ``call`` reads or writes the crossing tensor: a tensor of ``crossing``
    elements, or a view of one's storage (``storages``: a slice of it); of ``dtype``
    when given."""
    return any((crossing in counts or (addr is not None and addr in storages)) and dtype in (None, dt)
               for addr, counts, dt in call.tensors)


def _numels(shapes) -> list[int]:
    return [math.prod(s) for s in shapes]


def _pair(t1: list[Call], t2: list[Call]) -> list[int | None]:
    """For each call of ``t2``, the index of the same call in ``t1`` (its name's k-th
    occurrence), or None."""
    seen: dict = {}
    where: dict = {}
    for i, c in enumerate(t1):
        k = seen[c.name] = seen.get(c.name, -1) + 1
        where[(c.name, k)] = i
    seen.clear()
    out = []
    for c in t2:
        k = seen[c.name] = seen.get(c.name, -1) + 1
        out.append(where.get((c.name, k)))
    return out


def _scaled_dim(pairs, batches) -> int | None:
    """The one dim every tensor of these calls that grows with the batch count grows
    along, by exactly the batch ratio; None where there is not one."""
    dims = set()
    b1, b2 = batches
    for big, small in pairs:
        if len(big.shapes) != len(small.shapes):
            return None
        for s2, s1 in zip(big.shapes, small.shapes):
            if s2 == s1:
                continue
            if len(s2) != len(s1):
                return None
            diff = [d for d, (x, y) in enumerate(zip(s2, s1)) if x != y]
            if len(diff) != 1 or s2[diff[0]] * b1 != s1[diff[0]] * b2:
                return None
            dims.add(diff[0])
    return dims.pop() if len(dims) == 1 else None


def verify_split(call: Call, dim: int) -> str | None:
    """Why the guard's split of ``call`` along ``dim`` (pieces of about a third, which do
    not line up with the batches, whatever the guard's fewest pieces) does not give the
    whole call's result; None when it does."""
    from ..guard.separable import CannotSplit, fix_split

    if call.snapshot is None:
        return "its arguments were not recorded"
    func = call.func
    args, kwargs = call.snapshot
    try:
        whole = func(*_clone(args), **_clone(kwargs))
    except Exception as e:  # noqa: BLE001
        return f"it cannot be run again ({type(e).__name__})"
    ts = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor) and t.dim() > dim]
    n_all = max((t.shape[dim] for t in ts), default=0)
    if n_all < 2:
        return f"no tensor argument has more than one slice along dim {dim}"
    cap = max(1, n_all // 3)

    def safe(pieces, out_numels) -> bool:
        return all(t.shape[dim] <= cap or t.shape[dim] == 1 for t in pieces if t.dim() > dim)

    outs = [t.numel() for t in tree_flatten(whole)[0] if isinstance(t, torch.Tensor)]
    try:
        got = fix_split(func, *_clone((tuple(args), kwargs)), run=lambda _n, *a, **kw: func(*a, **kw), safe=safe,
                        dims=(dim,), out_numels=outs, min_pieces=1)
    except CannotSplit as e:
        return str(e)
    except Exception as e:  # noqa: BLE001
        return f"the pieces fail ({type(e).__name__}: {str(e).strip()[:120]})"
    a = tree_flatten(whole)[0]
    b = tree_flatten(got)[0]
    if len(a) != len(b):
        return "the pieces give another number of outputs"
    for x, y in zip(a, b):
        if isinstance(x, torch.Tensor) != isinstance(y, torch.Tensor):
            return "the pieces give another kind of output"
        if not isinstance(x, torch.Tensor):
            if x != y:
                return "the pieces give another output"
            continue
        if x.shape != y.shape:
            return f"the pieces give shape {tuple(y.shape)}, the whole call {tuple(x.shape)}"
        close = torch.allclose(x, y, rtol=1e-4, atol=1e-5, equal_nan=True) if (
            x.is_floating_point() or x.is_complex()) else torch.equal(x, y)
        if not close:
            return "the pieces give other values than the whole call"
    return None


def table(ops, directions=("fwd", "bwd"), device: str = TRACE_DEVICE) -> list[EntryPoints]:
    """:func:`entry_points` of every op and direction it takes."""
    from .ops.catalog import op_spec

    out = []
    for op in ops:
        spec = op_spec(op)
        for d in directions:
            if d in spec.directions:
                out.append(entry_points(op, d, device=device))
    return out


def main(argv: list[str]) -> None:
    """``python -m kernelaudit.sweep.aten_entry [--device cuda] OP...``: the table."""
    device = TRACE_DEVICE
    if argv[:1] == ["--device"]:
        device, argv = argv[1], argv[2:]
    for e in table(argv, device=device):
        print(f"{e.op:40s} {e.direction}  {', '.join(e.aten) or '-':40s} split_dim={e.split_dim} "
              f"chain={','.join(e.chain)}" + (f"  ({e.reason})" if e.reason else ""))


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
