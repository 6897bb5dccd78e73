"""Putting the guard in front of the kernels: two ways, one engine.

**Real backends** (``install()``): one override per covered aten op and overload
(``mm``, ``bmm``, ``addmm``, ``baddbmm``, default and ``out``; the in-place
``addmm_`` and ``baddbmm_``), on the dispatch key of
each device type the policy's rules name (``MPS`` for the ``mps`` policy), and nothing
else: ops and devices no rule covers keep their exact dispatch path. The override is
the native C++ size screen of :mod:`.native` when it builds (Python only past the
floor), else a Python ``torch.library`` kernel. The kernels they replace are captured
first (``torch._C._dispatch_get_computed_kernel_for_dispatch_key``) and called
directly, both for calls let through and for the pieces of a fix, so the pieces never
re-enter the guard. The overrides sit below autograd and autocast, so the backward
pass (whose aten calls are the same ops), ``no_grad``, ``inference_mode`` and autocast
are all covered.

**What-if runs** (``install(fault_model="mps", scale=16)``): a fault model is a
``TorchDispatchMode``, and dispatch modes run *above* the backend keys, so a backend
override would only see the calls after the fault model has corrupted them. The guard
then is a mode too, :class:`GuardMode`, entered *after* (inside) the fault model so
that it sees each call first; the pieces it calls go on to the fault model, which
leaves safe pieces alone. It only handles the covered ops and passes everything else
straight through (the fault model already costs a Python hop per op).
"""

from __future__ import annotations

import contextlib
import math
import threading
import warnings
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..config import GUARD, GUARD_FAULT_MODEL, GUARD_RULES, GUARD_SCALE
from ..errors import InvalidArgument, UnsafeCallError, check_choice
from ..thresholds import REAL, Thresholds
from . import separable as sep  # module level: screen_call runs on every screened call
from .engine import WITH_BIAS, Engine, GuardStats
from .rules import screen_reason
from .policy import ACTIONS, SDPA_MPS, Policy, policy_for

aten = torch.ops.aten

#: Environment variable read by :func:`install` when no action is given.
ENV_ACTION = GUARD.name
#: Fault model and scale for a what-if run (set by ``kernelaudit run``).
ENV_FAULT_MODEL = GUARD_FAULT_MODEL.name
ENV_SCALE = GUARD_SCALE.name
DEFAULT_ACTION = "fix"

#: Overloads overridden per op. The ``out`` overloads are what ``torch.compile``'s
#: extern kernels and user ``out=`` calls reach.
OVERLOADS = ("default", "out")
#: ``inplace`` stands for the in-place op (``aten::addmm_``, ``aten::baddbmm_``): the
#: result overwrites the bias operand ``self``. mm and bmm have none.
INPLACE = "inplace"
OVERLOADS_FOR = {"mm": OVERLOADS, "bmm": OVERLOADS, "addmm": (*OVERLOADS, INPLACE),
                 "baddbmm": (*OVERLOADS, INPLACE)}


def aten_op(op: str, overload: str):
    """The aten overload object of ``op.overload`` (``inplace``: ``op_.default``)."""
    if overload == INPLACE:
        return getattr(aten, f"{op}_").default
    return getattr(getattr(aten, op), overload)


def _qualified(op: str, overload: str) -> str:
    """``aten::`` name of an overload, as the dispatcher spells it."""
    if overload == INPLACE:
        return f"{op}_"
    return op if overload == "default" else f"{op}.{overload}"
#: MPS's fused attention op, intercepted for the attention-score rule.
SDPA_MPS_ATEN = "_scaled_dot_product_attention_math_for_mps"
#: torch device type -> dispatch key name.
DISPATCH_KEYS = {"cpu": "CPU", "cuda": "CUDA", "mps": "MPS", "xpu": "XPU"}


def _kernel(op: str, overload: str, key: str):
    name = f"aten::{_qualified(op, overload)}"
    dk = getattr(torch._C.DispatchKey, key)
    if not torch._C._dispatch_has_kernel_for_dispatch_key(name, dk):
        return None
    return torch._C._dispatch_get_computed_kernel_for_dispatch_key(name, dk)


# -- the library overrides -------------------------------------------------------------
def _make_override(engine: Engine, op: str, overload: str, device_type: str, kernels: dict):
    """The Python kernel registered for ``aten::op.overload`` on one dispatch key."""
    kernel = kernels[(op, overload)]
    floor = engine.floor(op, device_type)
    cell_of = engine.counters.cell
    local = engine.counters._tls
    slow = engine.slow
    # Backend kernels ignore the keyset; a constant one spares building one per call.
    keyset = torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, DISPATCH_KEYS[device_type]))

    def run(o, ov, *args, **kwargs):
        return kernels[(o, ov)].call_boxed(keyset, *args, **kwargs)

    # The fast path: a few size reads against the floor, a per-thread counter, the
    # original kernel. Output elements = a.numel() / K * N.
    if WITH_BIAS[op]:
        def override(bias, a, b, **kwargs):
            try:
                local.c[0] += 1
            except AttributeError:
                cell_of()[0] += 1
            na, nb, k = a.numel(), b.numel(), a.shape[-1]
            if na < floor and nb < floor and (na // k if k else 0) * b.shape[-1] < floor:
                return kernel.call_boxed(keyset, bias, a, b, **kwargs)
            return slow(op, overload, (bias, a, b), kwargs, run, device_type)
    else:
        def override(a, b, **kwargs):
            try:
                local.c[0] += 1
            except AttributeError:
                cell_of()[0] += 1
            na, nb, k = a.numel(), b.numel(), a.shape[-1]
            if na < floor and nb < floor and (na // k if k else 0) * b.shape[-1] < floor:
                return kernel.call_boxed(keyset, a, b, **kwargs)
            return slow(op, overload, (a, b), kwargs, run, device_type)
    override.__name__ = f"kernelaudit_guard_{op}_{overload}_{device_type}"
    return override


def _make_attention_override(engine: Engine, kernel, device_type: str):
    floor = engine.floor(SDPA_MPS, device_type)
    cell_of = engine.counters.cell
    keyset = torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, DISPATCH_KEYS[device_type]))

    def override(q, k, v, *args, **kwargs):
        cell_of()[0] += 1
        if max(q.numel(), k.numel(), v.numel(), math.prod(q.shape[:-1]) * k.shape[-2]) < floor:
            return kernel.call_boxed(keyset, q, k, v, *args, **kwargs)

        def run(*a, **kw):
            return kernel.call_boxed(keyset, *a, **kw)
        return engine.attention((q, k, v, *args), kwargs, run)
    return override


#: Backends whose own ``aten::linear`` kernel (and ``aten::linear_backward``) bypasses
#: the matmul ops: ``native_functions.yaml`` gives ``linear`` a ``MPS: _mps_linear``
#: entry, so on MPS ``F.linear`` never reaches ``addmm``/``mm``. The guard intercepts
#: linear there and decomposes the calls past the floor into the guarded matmul ops.
LINEAR_OPS = ("linear", "linear_backward")


def _kernel_named(name: str, key: str, *, alias: bool = False):
    """The computed kernel of ``aten::name`` (``op`` or ``op.overload``) on ``key``, or None
    where nothing is registered on that key itself (``alias``: or through an alias key such
    as ``Autograd``, where VariableType's kernels live)."""
    qual = f"aten::{name}"
    dk = getattr(torch._C.DispatchKey, key)
    has = (torch._C._dispatch_has_computed_kernel_for_dispatch_key(qual, key) if alias
           else torch._C._dispatch_has_kernel_for_dispatch_key(qual, dk))
    if not has:
        return None
    return torch._C._dispatch_get_computed_kernel_for_dispatch_key(qual, dk)


def linear_decomposed(input, weight, bias=None):
    """``F.linear`` as the matmul ops it is made of (what ``aten::linear``'s
    CompositeImplicitAutograd kernel does): ``addmm`` for a 2-D input with a bias, else
    ``matmul`` (``mm``, or ``bmm`` for broadcast batches) plus the bias."""
    if input.dim() == 2 and bias is not None:
        return torch.addmm(bias, input, weight.t())
    out = torch.matmul(input, weight.t())
    return out + bias if bias is not None else out


def linear_backward_decomposed(input, grad_output, weight, output_mask):
    """``aten::linear_backward`` as matmul ops: grad_input = g W, grad_weight = g^T x
    (over the flattened batch), grad_bias = sum of g. Outputs not asked for are empty
    tensors (autograd does not read them)."""
    out_f, in_f = weight.shape[0], weight.shape[-1]
    g2 = grad_output.reshape(-1, out_f)
    gi = torch.matmul(grad_output, weight) if output_mask[0] else grad_output.new_empty(0)
    gw = torch.mm(g2.t(), input.reshape(-1, in_f)) if output_mask[1] else grad_output.new_empty(0)
    gb = g2.sum(0) if output_mask[2] else grad_output.new_empty(0)
    return gi, gw, gb


def _make_linear_overrides(engine: Engine, device_type: str, kernels: dict) -> dict:
    """``{aten name: Python kernel}`` for ``linear`` and ``linear_backward`` on one
    backend key: below the floor of ``addmm``/``mm`` the backend's own kernel
    (``kernels``; decomposed when it has none), past it the decomposition, whose
    matmul calls meet the guard's overrides on the same key."""
    floor = min(engine.floor(op, device_type) for op in ("addmm", "mm", "bmm"))
    keyset = torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, DISPATCH_KEYS[device_type]))
    fwd, bwd = kernels.get("linear"), kernels.get("linear_backward")
    cell_of = engine.counters.cell

    def linear(input, weight, bias=None):
        cell_of()[0] += 1
        n_out = (input.numel() // input.shape[-1] if input.shape[-1] else 0) * weight.shape[0]
        if fwd is not None and max(input.numel(), weight.numel(), n_out) < floor:
            return fwd.call_boxed(keyset, input, weight, bias)
        return linear_decomposed(input, weight, bias)

    def linear_backward(input, grad_output, weight, output_mask):
        cell_of()[0] += 1
        if bwd is not None and max(input.numel(), grad_output.numel(), weight.numel()) < floor:
            return bwd.call_boxed(keyset, input, grad_output, weight, output_mask)
        return linear_backward_decomposed(input, grad_output, weight, output_mask)
    return {"linear": linear, "linear_backward": linear_backward}


def entry_points(policy: Policy, device_type: str, has_kernel=None) -> set[str]:
    """The aten entry points (``op`` or ``op.overload``, as ``native_functions.yaml``
    names them) the guard intercepts on ``device_type``'s dispatch key for ``policy``.
    ``has_kernel(name)``: whether the backend has its own kernel for ``name`` (default:
    ask this build's dispatcher; tests pass the table torch ships)."""
    if has_kernel is None:
        key = DISPATCH_KEYS[device_type]

        def has_kernel(name):
            return _kernel_named(name, key) is not None
    out: set[str] = set()
    ops = set(policy.ops())
    for op in sorted(ops & set(WITH_BIAS)):
        dts = policy.device_types_for(op)
        if dts is not None and device_type not in dts:
            continue
        out.update(_qualified(op, ov) for ov in OVERLOADS_FOR[op])
    if out & {"addmm", "mm"}:
        out.update(name for name in LINEAR_OPS if has_kernel(name))
    if SDPA_MPS in ops:
        dts = policy.device_types_for(SDPA_MPS)
        if (dts is None or device_type in dts) and has_kernel(SDPA_MPS_ATEN):
            out.add(SDPA_MPS_ATEN)
    return out


class _Overrides:
    """The registrations of one engine (removed by :meth:`remove`): per covered op and
    overload, a native (C++) screen with a Python slow path, or a Python override."""

    def __init__(self, engine: Engine, device_types: tuple[str, ...] | None = None,
                 native: bool | None = None) -> None:
        from . import native as nat_mod

        self.lib = torch.library.Library("aten", "IMPL")
        self.registered: list[tuple[str, str, str]] = []
        policy = engine.policy
        plan = []
        for op in sorted(set(policy.ops()) & set(WITH_BIAS)):
            dts = policy.device_types_for(op)
            for dt in (dts if dts is not None else device_types or tuple(DISPATCH_KEYS)):
                if dt in DISPATCH_KEYS:
                    plan.append((op, dt))
        # every original kernel of a key is captured before anything on that key is
        # overridden: the pieces and the checks must never reach an override
        originals = {}
        for dt in {dt for _, dt in plan}:
            kernels = {(o, ov): _kernel(o, ov, DISPATCH_KEYS[dt]) for o in WITH_BIAS for ov in OVERLOADS_FOR[o]}
            if all(k is not None for k in kernels.values()):
                originals[dt] = kernels  # else: this build has no such backend, nothing to guard
        # build (or load) the native screen only when there is something to screen
        wanted = native is not False and any(dt in originals for _, dt in plan)
        self.native = nat_mod.load() if wanted else None
        self.slow_lib = torch.library.Library(nat_mod.SLOW_NS, "IMPL") if self.native else None
        with warnings.catch_warnings():
            # "Overriding a previously registered kernel": that is the point.
            warnings.simplefilter("ignore", UserWarning)
            for op, dt in plan:
                if dt not in originals:
                    continue
                key = DISPATCH_KEYS[dt]
                for ov in OVERLOADS_FOR[op]:
                    # In-place calls are rare in a training step: they take the Python
                    # override even when the native screen is on.
                    if self.native and ov != INPLACE:
                        self.slow_lib.impl(nat_mod.slow_op_name(op, ov), _make_slow(engine, op, ov, dt, originals[dt]),
                                           key)
                        ai, bi = nat_mod.OPERANDS[op]
                        self.native.register_op(op, "" if ov == "default" else ov, key,
                                                min(engine.floor(op, dt), 2**62), ai, bi, nat_mod.SLOW_NS)
                    else:
                        self.lib.impl(_qualified(op, ov), _make_override(engine, op, ov, dt, originals[dt]), key)
                    self.registered.append((op, ov, dt))
            for dt in sorted({dt for op, dt in plan if op in ("addmm", "mm") and dt in originals}):
                self._linear(engine, dt, originals[dt])
            if SDPA_MPS in policy.ops():
                self._attention(engine)
        self.engine = engine
        if self.native:
            self.native.reset_inspected()
            engine.counters.external = self.native.inspected
            engine.counters.external_reset = self.native.reset_inspected

    def _linear(self, engine: Engine, dt: str, originals: dict) -> None:
        """Intercept ``aten::linear``/``linear_backward`` on backends with their own
        kernels for them (MPS): there ``F.linear`` never reaches addmm/mm. Their matmul
        originals are ``originals``, captured before anything was overridden."""
        key = DISPATCH_KEYS[dt]
        kernels = {name: _kernel_named(name, key) for name in LINEAR_OPS}
        if all(k is None for k in kernels.values()):
            return  # linear decomposes into the matmul ops here (CPU, CUDA)
        for name, fn in _make_linear_overrides(engine, dt, kernels).items():
            if kernels[name] is not None:
                self.lib.impl(name, fn, key)
                self.registered.append((name, "default", dt))

    def _attention(self, engine: Engine) -> None:
        dts = engine.policy.device_types_for(SDPA_MPS) or tuple(DISPATCH_KEYS)
        for dt in dts:
            key = DISPATCH_KEYS.get(dt)
            kernel = _kernel(SDPA_MPS_ATEN, "default", key) if key else None
            if kernel is None:
                continue  # the fused op exists on MPS only
            self.lib.impl(SDPA_MPS_ATEN, _make_attention_override(engine, kernel, dt), key)
            self.registered.append((SDPA_MPS, "default", dt))

    def remove(self) -> None:
        if self.native:
            self.native.unregister_all()
            self.slow_lib._destroy()
            # keep the count readable after uninstall (the native counter is global)
            frozen = self.native.inspected()
            self.engine.counters.external = lambda: frozen
            self.engine.counters.external_reset = None
        self.lib._destroy()
        self.registered = []


class _Screens:
    """Overrides for the rules on ops outside the engine (a sweep's findings on
    ``arange``, attention, ...): at each rule's aten entry points, on its backend's key,
    a call the rules flag is fixed in safe pieces (:mod:`.separable`) when they all say
    ``fix`` and the op splits, else refused (``UnsafeCallError``; ``warn``/``off`` let
    it through, counted); every other call goes to the captured original kernel."""

    def __init__(self, engine: Engine, faults, th: Thresholds) -> None:
        from .separable import FACTORY_PIECE, op_of

        self.lib = torch.library.Library("aten", "IMPL")
        self.registered: list[tuple[str, str]] = []
        by_entry: dict = {}
        for f in faults:
            for dt in ((f.device,) if f.device != "any" else tuple(DISPATCH_KEYS)):
                if dt not in DISPATCH_KEYS:
                    continue
                for name in f.aten:
                    by_entry.setdefault((name, dt), []).append(f)
        # every original kernel (and the out= overload a factory's pieces use) is
        # captured before anything is overridden: the pieces must never reach a screen
        originals: dict = {}
        for name, dt in by_entry:
            for n in (name, FACTORY_PIECE.get(op_of(name))):
                if n is not None and (n, dt) not in originals:
                    key = screen_key(n, dt)
                    originals[(n, dt)] = _kernel_named(n, key, alias=key != DISPATCH_KEYS[dt])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            for (name, dt), fs in sorted(by_entry.items(), key=lambda kv: kv[0]):
                if originals[(name, dt)] is None:
                    continue  # this build has no such kernel on that backend
                kernels = {n: k for (n, d), k in originals.items() if d == dt and k is not None}
                self.lib.impl(name, _make_screen(engine, name, dt, kernels, fs, th), screen_key(name, dt))
                self.registered.append((name, dt))

    def remove(self) -> None:
        self.lib._destroy()
        self.registered = []


def _aten_overload(name: str):
    """The aten overload object of entry point ``op`` or ``op.overload``."""
    op, _, overload = name.partition(".")
    return getattr(getattr(aten, op), overload or "default")


def screen_key(name: str, device_type: str) -> str:
    """The dispatch key entry point ``name`` is screened on for a backend: its autograd key
    for the entries whose fault is in their backward formula
    (:data:`.separable.AUTOGRAD_ENTRIES`: ``AutogradCUDA``, ...), else the backend's own."""
    from .separable import AUTOGRAD_ENTRIES

    key = DISPATCH_KEYS[device_type]
    return "Autograd" + key if name in AUTOGRAD_ENTRIES else key


def _make_screen(engine: Engine, name: str, device_type: str, kernels: dict, faults, th: Thresholds):
    """The Python kernel screening ``aten::name`` on one key (:func:`screen_key`);
    ``kernels``: entry point -> its original kernel on that key (the call's own, and its
    pieces')."""
    func = _aten_overload(name)
    key = screen_key(name, device_type)
    keyset = torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, DISPATCH_KEYS[device_type]))
    if key != DISPATCH_KEYS[device_type]:
        # an autograd kernel redispatches to the keys below autograd in the set it is given
        keyset = keyset | torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, key))
    cell_of = engine.counters.cell

    def run(n, *args, **kwargs):
        return kernels[n].call_boxed(keyset, *args, **kwargs)

    def screen(*args, **kwargs):
        cell_of()[0] += 1
        return screen_call(engine, name, device_type, faults, th, func, args, kwargs, run)
    screen.__name__ = f"kernelaudit_screen_{name.replace('.', '_')}_{device_type}"
    return screen


#: The outputs' element counts of screened calls already seen, by the call's metadata
#: (:func:`_meta_key`): a meta kernel runs torch's Python decompositions (about 1 ms a
#: call on a CPU: 1.1 ms of guard on every layer norm backward before this cache), and a
#: program calls an op with the same shapes again and again.
_OUT_NUMELS: dict = {}
_OUT_NUMELS_MAX = 4096


def _meta_key(func, leaves) -> tuple | None:
    """A hashable key of a call's metadata (each tensor's shape, strides, offset and dtype;
    every other argument as given), or None where an argument is not hashable."""
    key: list = [func]
    for x in leaves:
        if isinstance(x, torch.Tensor):
            key.append((tuple(x.shape), x.stride(), x.storage_offset(), x.dtype, x.device.type))
        else:
            try:
                hash(x)
            except TypeError:
                return None
            key.append(x)
    return tuple(key)


def _out_numels(func, args, kwargs, tensors, leaves=None) -> list[int]:
    """The element counts of a call's outputs, from the op's meta kernel (no data, no
    mode: a fault model must not see it); the inputs' when it has none. Remembered per
    call metadata (:data:`_OUT_NUMELS`) when ``leaves`` (the call's flattened arguments)
    are given."""
    key = _meta_key(func, leaves) if leaves is not None else None
    if key is not None and key in _OUT_NUMELS:
        return _OUT_NUMELS[key]
    got = _meta_out_numels(func, args, kwargs, tensors)
    if key is not None:
        if len(_OUT_NUMELS) >= _OUT_NUMELS_MAX:
            _OUT_NUMELS.clear()
        _OUT_NUMELS[key] = got
    return got


def _meta_out_numels(func, args, kwargs, tensors) -> list[int]:
    """:func:`_out_numels` without the memory."""
    from torch.utils._pytree import tree_flatten

    try:
        outs, _ = sep.meta_call(func, args, kwargs)
        return [t.numel() for t in tree_flatten(outs)[0] if isinstance(t, torch.Tensor)]
    except Exception:  # no meta kernel: judge on the inputs (and out= tensors) alone
        return [t.numel() for t in tensors]


def _leaves(args, kwargs) -> list:
    """An aten call's arguments, lists (``Tensor[]``, ``int[]``) opened one level: what
    ``tree_flatten`` gives for an aten schema, at a tenth of its cost (every call of a
    screened entry point pays it)."""
    out: list = []
    for v in (*args, *kwargs.values()):
        if isinstance(v, (list, tuple)):
            out.extend(v)
        else:
            out.append(v)
    return out


def screen_call(engine: Engine, name: str, device_type: str, faults, th: Thresholds, func, args, kwargs, run):
    """One call of a screened entry point ``name``: passed to ``run`` when no rule flags
    it, else fixed in pieces, refused, or let through, as :func:`strongest_action` says.
    ``run(entry, *args, **kwargs)`` reaches the unguarded kernels."""
    leaves = _leaves(args, kwargs)
    tensors = [t for t in leaves if isinstance(t, torch.Tensor)]
    op = sep.op_of(name)
    factory = op in sep.FACTORIES
    dtype, known = None, []
    if factory:
        n, dtype = sep.factory_numel_dtype(op, func, args, kwargs)
        known.append([n])

    def call_outs() -> list[int]:
        """The outputs' sizes, asked for only by rules that read them, once."""
        if not known:
            known.append(_out_numels(func, args, kwargs, tensors, leaves))
        return known[0]
    bound = sep.CallArgs(func, args, kwargs)
    hits = [(f, why) for f in faults if (why := screen_reason(f, tensors, call_outs, th, dtype, bound))]
    if not hits:
        return run(name, *args, **kwargs)
    outs = call_outs()
    flagged = [f for f, _ in hits]
    names = [f.name for f in flagged]
    action = strongest_action(engine, flagged)
    shapes = ", ".join(f"{tuple(t.shape)} {str(t.dtype).replace('torch.', '')}" for t in tensors) or \
        f"no tensors, dtype {str(dtype).replace('torch.', '')}"
    text = (f"aten::{name} on {device_type}: [{shapes}] -> {outs} elements; "
            + "; ".join(f"rule {f.name} ({f.explain or f.effect}; {f.provenance.get('source', 'user rule')}): {why}"
                        for f, why in hits))
    if action in ("off", "warn"):
        engine.counters.add_names("ignored" if action == "off" else "warned", names)
        if action == "warn":
            import logging

            logging.getLogger("kernelaudit.guard").warning("unsafe call passed through (action warn): %s", text)
        return run(name, *args, **kwargs)
    why_not = " This op cannot be split by the guard (its rules say raise, or name no split_dim): run it in " \
              "smaller pieces."
    if action == "fix":
        def safe(ts, out_numels) -> bool:
            return all(screen_reason(f, ts, out_numels, th, dtype, bound) is None for f in flagged)
        try:
            if factory:
                out = sep.fix_factory(op, func, args, kwargs, run, lambda k: safe([], [k]))
            elif all(f.flattens for f in flagged):
                out = sep.fix_flatten_normalized(func, args, kwargs, run)
            elif op in sep.OWN_FIX and all(f.split_dim is None for f in flagged):
                out = sep.OWN_FIX[op](func, args, kwargs, run, safe, outs)
            else:
                try:
                    out = sep.fix_split(func, args, kwargs, run, safe, sep.split_dims(flagged), outs)
                except sep.CannotSplit:
                    if op not in sep.OWN_FIX:   # where the rule's dim cannot be cut, the entry's own fix
                        raise
                    out = sep.OWN_FIX[op](func, args, kwargs, run, safe, outs)
        except sep.CannotSplit as e:
            why_not = f" It cannot be split into safe pieces: {e}."
        else:
            engine.counters.add_names("fixed", names)
            return out
    engine.counters.add_names("refused", names)
    raise UnsafeCallError(f"kernelaudit guard refused: {text}.{why_not}")


def strongest_action(engine: Engine, faults) -> str:
    """A screened call's action. Each rule's is the per-rule setting, else ``raise`` for
    a rule that says so, else the global action. ``warn``/``off`` when every rule's is;
    ``fix`` when every rule's is fix and the guard can split the op
    (:func:`.separable.fixable`); else ``raise`` (a screen does not verify)."""
    from .separable import fixable

    acts = [engine.rule_actions.get(f.name) or ("raise" if f.action == "raise" else engine.action) for f in faults]
    if all(a in ("warn", "off") for a in acts):
        return "warn" if "warn" in acts else "off"
    if all(a == "fix" for a in acts) and all(fixable(f) for f in faults):
        return "fix"
    return "raise"


def _make_slow(engine: Engine, op: str, overload: str, device_type: str, kernels: dict):
    """The Python kernel of ``kernelaudit_guard::op.overload``: the engine's slow path,
    reached from the native screen for calls past the floor."""
    keyset = torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, DISPATCH_KEYS[device_type]))
    slow = engine.slow

    def run(o, ov, *args, **kwargs):
        return kernels[(o, ov)].call_boxed(keyset, *args, **kwargs)

    def slow_path(*args, **kwargs):
        return slow(op, overload, args, kwargs, run, device_type)
    return slow_path


# -- the what-if mode ---------------------------------------------------------------------
class GuardMode(TorchDispatchMode):
    """The guard as a dispatch mode, for what-if runs under a fault model (enter it
    inside the fault model). Only the covered ops reach the engine."""

    def __init__(self, engine: Engine, screens=(), th: Thresholds = REAL) -> None:
        super().__init__()
        self.engine = engine
        ops = set(engine.policy.ops()) & set(WITH_BIAS)
        self.table = {aten_op(op, ov): (op, ov) for op in ops for ov in OVERLOADS_FOR[op]}
        # screened rules match every overload of their entry points' ops: above the
        # backend, ``torch.arange(n)`` is ``aten.arange.default``, not ``start_out``
        self.screens: dict = {}
        for f in screens:
            for packet in {name.partition(".")[0] for name in f.aten}:
                if hasattr(aten, packet):
                    self.screens.setdefault(getattr(aten, packet), []).append(f)
        self.th = th

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        entry = self.table.get(func)
        if entry is not None:
            return self.engine.intercept(entry[0], entry[1], args, kwargs, _mode_run)
        faults = self.screens.get(func.overloadpacket)
        if faults:
            self.engine.counters.cell()[0] += 1
            name = func.name().split("::", 1)[-1]
            return screen_call(self.engine, name, "what-if", faults, self.th, func, args, kwargs, _mode_run_named)
        if _composite(func):
            # Under inference_mode, composite ops (matmul, linear, einsum, attention)
            # reach the modes undecomposed: decompose them with this mode on, so their
            # bmm/mm calls come back here.
            with self:
                out = func.decompose(*args, **kwargs)
            if out is not NotImplemented:
                return out
        return func(*args, **kwargs)


_COMPOSITE: dict = {}


def _composite(func) -> bool:
    c = _COMPOSITE.get(func)
    if c is None:
        c = _COMPOSITE[func] = torch._C._dispatch_has_kernel_for_dispatch_key(
            func.name(), torch._C.DispatchKey.CompositeImplicitAutograd)
    return c


def _mode_run_named(name, *args, **kwargs):
    # as _mode_run, for a screened entry point named ``op`` or ``op.overload``
    return _aten_overload(name)(*args, **kwargs)


def _mode_run(op, overload, *args, **kwargs):
    # Inside __torch_dispatch__ this mode is off: the call goes on to the modes below
    # it (the fault model) and then to the kernels.
    return aten_op(op, overload)(*args, **kwargs)


# -- global installation ---------------------------------------------------------------------
@dataclass
class _Installed:
    engine: Engine
    config: tuple
    overrides: _Overrides | None = None
    screens: _Screens | None = None
    fault: object = None
    mode: GuardMode | None = None

    def remove(self) -> None:
        if self.overrides is not None:
            self.overrides.remove()
        if self.screens is not None:
            self.screens.remove()
        if self.mode is not None:
            self.mode.__exit__(None, None, None)
        if self.fault is not None:
            self.fault.__exit__(None, None, None)


_LOCK = threading.RLock()
_STATE: _Installed | None = None
#: Counters of the last engine, kept after uninstall so a summary can still be read.
_LAST: Engine | None = None
#: (active rules, thresholds) -> (policy, screened rules): an equal set of rules gives
#: the same policy object, so install() stays idempotent.
_RULE_POLICIES: dict = {}


def _env_action() -> str:
    a = GUARD.raw().strip().lower() or DEFAULT_ACTION
    check_choice(ENV_ACTION, a, ACTIONS)
    return a


def policy_from_rules(faults, th: Thresholds = REAL) -> tuple[Policy, tuple]:
    """(policy of the engine-op rules, the screened rules) for active rules ``faults``."""
    import json

    from .rules import rules_policy, screened

    key = (tuple(json.dumps(f.to_json(), sort_keys=True) for f in faults), th.bits)
    got = _RULE_POLICIES.get(key)
    if got is None:
        got = _RULE_POLICIES[key] = (rules_policy(faults, th), tuple(screened(faults)))
    return got


def install(action: str | None = None, *, policy: Policy | None = None, rules=None, rule_actions: dict | None = None,
            fault_model: str | None = None, scale: int | None = None, native: bool | None = None) -> Engine | None:
    """Guard every later call the active rules cover. Idempotent and thread-safe.

    ``action``: ``fix`` (default), ``raise``, ``verify``, ``warn`` or ``off`` (same as
    :func:`uninstall`); when omitted, ``$KERNELAUDIT_GUARD`` decides.

    Which calls: by default the known-fault database shipped with kernelaudit
    (:mod:`.rules`: the MPS study's rules, the rules of the sweeps of record) plus the
    rule files of ``$KERNELAUDIT_GUARD_RULES``, **gated**: only rules whose backend this
    process has and whose torch / CUDA / driver versions match are hooked; when none
    matches, nothing is hooked. ``rules``: a rule file (or a list of files and
    :class:`~.rules.KnownFault` objects) added to the database; a list of
    ``KnownFault`` objects alone replaces it. ``policy``: a hand-built policy instead
    (no gating). ``fault_model`` (``mps``, ``wrap32``, ...) starts a what-if run on this
    thread: the fault model and the guard above it, with the fault model's own policy
    at ``scale``, or ``rules`` (gated on versions only: a what-if run has every
    device). ``rule_actions``: per-rule actions, e.g. ``{"mps-B": "raise"}``.
    ``native``: ``None`` (default) uses the C++ fast path when it builds
    (``$KERNELAUDIT_GUARD_NATIVE``), ``False`` forces the Python overrides. Returns the
    engine (``None`` when the action is ``off``; with a fault model, ``off`` runs the
    fault model alone and only counts the calls the guard would flag).
    """
    from .rules import active, gather

    action = action or _env_action()
    check_choice("action", action, ACTIONS)
    if fault_model is None and scale is not None:
        raise InvalidArgument(f"Cannot have scale={scale} without a fault model: scale moves a fault model's thresholds")
    th = Thresholds(scale) if scale is not None else REAL
    what_if = fault_model is not None and fault_model != "none"
    screens: tuple = ()
    if policy is None:
        if what_if and rules is None:
            policy = policy_for(fault_model, th)
        else:
            policy, screens = policy_from_rules(active(gather(rules), what_if=what_if), th)
    config = (action, policy, tuple(sorted((rule_actions or {}).items())), fault_model, th.bits, native, screens)
    return _install(config)


def _install(config: tuple) -> Engine | None:
    global _STATE, _LAST
    action, policy, rule_actions, fault_model, bits, native, screens = config
    what_if = fault_model is not None and fault_model != "none"
    with _LOCK:
        if action == "off" and not what_if:
            uninstall()
            return None
        if _STATE is not None and _STATE.config == config:
            return _STATE.engine
        uninstall()
        engine = Engine(policy, action, dict(rule_actions))
        state = _Installed(engine, config)
        try:
            if what_if:
                # action "off" here still counts what the guard would flag
                from ..faults import make_fault_model

                state.fault = make_fault_model(fault_model, Thresholds(bits))
                state.fault.__enter__()
                state.mode = GuardMode(engine, screens, Thresholds(bits))
                state.mode.__enter__()
            else:
                if policy.rules:
                    state.overrides = _Overrides(engine, native=native)
                if screens:
                    state.screens = _Screens(engine, screens, Thresholds(bits))
        except Exception:
            state.remove()
            raise
        _STATE = state
        _LAST = engine
        return engine


def hooked() -> list[tuple[str, str, str]]:
    """What the installed guard registered: ``(aten op, overload, device type)`` per
    override (empty when nothing is installed, or when no rule matched this process)."""
    st = _STATE
    if st is None:
        return []
    out = list(st.overrides.registered) if st.overrides is not None else []
    out += [(name, "screen", dt) for name, dt in (st.screens.registered if st.screens is not None else [])]
    return out


def uninstall() -> None:
    """Remove the guard (a no-op when none is installed)."""
    global _STATE
    with _LOCK:
        if _STATE is not None:
            state, _STATE = _STATE, None
            state.remove()


def is_installed() -> bool:
    return _STATE is not None


def current() -> Engine | None:
    """The installed engine, or None."""
    return _STATE.engine if _STATE is not None else None


def stats() -> GuardStats:
    """Counters of the installed guard (or of the last one, after uninstall)."""
    e = current() or _LAST
    return e.stats() if e is not None else GuardStats()


def reset_stats() -> None:
    e = current() or _LAST
    if e is not None:
        e.counters.reset()


@contextlib.contextmanager
def guarding(action: str | None = None, **kwargs):
    """``install(...)`` for the body of a ``with`` block, then restore what was there.

    Yields the engine: ``with guarding("fix") as g: ...; g.stats()``."""
    with _LOCK:
        prev = _STATE.config if _STATE is not None else None
        engine = install(action, **kwargs)
    try:
        yield engine
    finally:
        with _LOCK:
            uninstall()
            if prev is not None:
                _install(prev)


def install_from_env() -> Engine | None:
    """Install as ``$KERNELAUDIT_GUARD``, ``$KERNELAUDIT_FAULT_MODEL`` and
    ``$KERNELAUDIT_SCALE`` say (what ``kernelaudit run`` sets up in the child)."""
    fm = GUARD_FAULT_MODEL.raw() or None
    scale = GUARD_SCALE.raw()
    what_if = bool(fm and fm != "none")
    # in a what-if run, rule files given to `kernelaudit run --rules` replace the fault
    # model's own policy (the database's real-hardware rules do not apply there)
    user = None
    if what_if and GUARD_RULES.raw().strip():
        from .rules import load_rules, user_rule_paths

        user = [r for p in user_rule_paths() for r in load_rules(p)]
    return install(_env_action(), rules=user, fault_model=fm if what_if else None,
                   scale=int(scale) if (scale and what_if) else None)
