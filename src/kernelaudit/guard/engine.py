"""The guard's decision and actions for one intercepted call.

:class:`Engine` owns a policy, the action per rule, the plan cache and the counters.
Its callers (the ``torch.library`` overrides in :mod:`.intercept`, or the what-if
:class:`~kernelaudit.guard.intercept.GuardMode`) hand it the call and a ``run`` function
that reaches the unguarded kernels; the engine never calls a guarded op itself, so
the pieces of a fix cannot re-enter the guard.

The fast path (a call whose every tensor is below the policy's floor, i.e. no rule
can fire) costs a few ``numel()`` reads and one counter increment; only calls past
the floor build a :class:`~kernelaudit.guard.policy.Call` and ask the rules.
"""

from __future__ import annotations

import logging
import math
import threading
from dataclasses import dataclass, field

import torch

from ..errors import UnsafeCallError, check_choice
from ..faults.predicates import TensorMeta
from .policy import ACTIONS, SDPA_MPS, Call, Hit, Policy, strongest
from .split import Plan, Planner, depth_views, piece_views
from .verify import check_pieces

log = logging.getLogger("kernelaudit.guard")

#: Build a plain object / a named tuple from its ready fields without a Python
#: ``__init__``/``__new__`` (the first call of a new shape builds a Call, two TensorMeta
#: and a Hit).
_new_object = object.__new__
_new_tuple = tuple.__new__
_NO_FAST: dict = {}

#: Decisions cached per engine (call signatures past the floor).
DECISION_CACHE_SIZE = 4096
#: The ops an engine handles, and whether each carries ``self``/``beta``/``alpha``.
WITH_BIAS = {"mm": False, "bmm": False, "addmm": True, "baddbmm": True}


@dataclass(slots=True)
class Normalised:
    """``out = beta * bias + alpha * a @ b`` with bias expanded to the output's shape."""

    op: str
    a: torch.Tensor
    b: torch.Tensor
    bias: torch.Tensor | None
    beta: float
    alpha: float
    out: torch.Tensor | None

    @classmethod
    def of(cls, op: str, args, kwargs) -> "Normalised":
        if WITH_BIAS[op]:
            bias, a, b = args[0], args[1], args[2]
            beta, alpha = kwargs.get("beta", 1), kwargs.get("alpha", 1)
        else:
            a, b = args[0], args[1]
            bias, beta, alpha = None, 0, 1
        return cls(op, a, b, bias, beta, alpha, kwargs.get("out"))

    @property
    def out_shape(self) -> tuple[int, ...]:
        return (*self.a.shape[:-1], self.b.shape[-1])


def matrix_operands(op: str, args) -> tuple[torch.Tensor, torch.Tensor]:
    """The two matrix operands of a matmul-family call's positional arguments."""
    return (args[1], args[2]) if WITH_BIAS[op] else (args[0], args[1])


@dataclass(frozen=True)
class GuardStats:
    """How many intercepted calls the guard inspected and what it did with them.

    ``passed``: no rule flagged them (untouched); ``fixed``/``refused``/``verified``/
    ``warned``: flagged and handled by that action; ``ignored``: flagged under action
    ``off`` (counted, passed through); ``mismatches``: verified calls that
    failed the check (they are also counted in ``verified`` and raised);
    ``by_rule``: flagged calls per rule name."""

    inspected: int = 0
    passed: int = 0
    fixed: int = 0
    refused: int = 0
    verified: int = 0
    warned: int = 0
    ignored: int = 0
    mismatches: int = 0
    by_rule: dict = field(default_factory=dict)

    @property
    def flagged(self) -> int:
        return self.inspected - self.passed

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in ("inspected", "passed", "fixed", "refused", "verified", "warned",
                                               "ignored", "mismatches", "by_rule")}

    def summary(self) -> str:
        rules = ", ".join(f"rule {k}: {v}" for k, v in sorted(self.by_rule.items()))
        return (f"kernelaudit guard: {self.inspected} calls inspected, {self.passed} untouched, "
                f"{self.fixed} fixed, {self.refused} refused, {self.verified} verified "
                f"({self.mismatches} mismatches), {self.warned} warned, {self.ignored} ignored" + (f" [{rules}]" if rules else ""))


class _Counters:
    """Thread-safe counters: the hot ``inspected`` count is per thread (no lock on the
    fast path) and summed on read; the rare flagged-call counts take a lock."""

    def __init__(self) -> None:
        self._tls = threading.local()
        self._threads: list[list[int]] = []
        self._lock = threading.Lock()
        self._flagged: dict[str, int] = {}
        self._rules: dict[str, int] = {}
        #: Calls counted outside Python (the native fast path's counter) and its reset.
        self.external = None
        self.external_reset = None

    def cell(self) -> list[int]:
        """This thread's [inspected] cell (created on first use)."""
        try:
            return self._tls.c
        except AttributeError:
            c = self._tls.c = [0]
            with self._lock:
                self._threads.append(c)
            return c

    def add(self, what: str, hits: list[Hit] = ()) -> None:
        with self._lock:
            self._flagged[what] = self._flagged.get(what, 0) + 1
            for h in hits:
                self._rules[h.rule.name] = self._rules.get(h.rule.name, 0) + 1

    def add_names(self, what: str, names) -> None:
        """:meth:`add` for calls flagged by rules known by name (the screened ops' rules)."""
        with self._lock:
            self._flagged[what] = self._flagged.get(what, 0) + 1
            for n in names:
                self._rules[n] = self._rules.get(n, 0) + 1

    def snapshot(self) -> GuardStats:
        with self._lock:
            inspected = sum(c[0] for c in self._threads) + (self.external() if self.external else 0)
            f = dict(self._flagged)
            rules = dict(self._rules)
        flagged = sum(v for k, v in f.items() if k not in ("mismatches",))
        return GuardStats(inspected, inspected - flagged, f.get("fixed", 0), f.get("refused", 0),
                          f.get("verified", 0), f.get("warned", 0), f.get("ignored", 0), f.get("mismatches", 0),
                          rules)

    def reset(self) -> None:
        with self._lock:
            for c in self._threads:
                c[0] = 0
            if self.external_reset:
                self.external_reset()
            self._flagged.clear()
            self._rules.clear()


class Engine:
    """Decides and acts on intercepted matmul-family calls for one policy.

    ``action``: the global action (``fix``, ``raise``, ``verify``, ``warn``, ``off``);
    ``rule_actions``: rule name -> action, overriding the global one (and a rule's own
    ``action``). When several rules flag one call, the most severe action wins."""

    def __init__(self, policy: Policy, action: str = "fix", rule_actions: dict | None = None) -> None:
        check_choice("action", action, ACTIONS)
        for name, a in (rule_actions or {}).items():
            check_choice(f"action for rule {name}", a, ACTIONS)
        self.policy = policy
        self.action = action
        self.rule_actions = dict(rule_actions or {})
        self.planner = Planner(policy)
        self.counters = _Counters()
        self._floors: dict = {}
        self._decisions: dict = {}
        #: device type -> op -> the first-call decision's shortcut (see _fast_decision).
        self._fast: dict = {}

    # -- fast path ----------------------------------------------------------------------
    def floor(self, op: str, device_type: str | None = None) -> int:
        """Below this many elements in every tensor, no rule on ``op`` can fire."""
        key = (op, device_type)
        f = self._floors.get(key)
        if f is None:
            f = self._floors[key] = self.policy.floor(op, device_type)
        return f

    def intercept(self, op: str, overload: str, args, kwargs, run):
        """Handle one call of ``op.overload`` (the entry point of the what-if mode)."""
        cell = self.counters.cell()
        cell[0] += 1
        a, b = matrix_operands(op, args)
        device_type = a.device.type
        floor = self.floor(op, device_type)
        if a.numel() < floor and b.numel() < floor and \
                math.prod(a.shape[:-1]) * b.shape[-1] < floor:
            return run(op, overload, *args, **kwargs)
        return self.slow(op, overload, args, kwargs, run, device_type)

    # -- flagged calls --------------------------------------------------------------------
    def decide(self, call: Call) -> tuple[str, list[Hit]]:
        """(action, hits) for a call: ``pass`` when no rule flags it."""
        hits = self.policy.check(call)
        if not hits:
            return "pass", hits
        if len(hits) == 1:  # the usual case: rules A, B and C exclude one another
            return self.action_for(hits[0].rule), hits
        return strongest([self.action_for(h.rule) for h in hits]), hits

    def action_for(self, rule) -> str:
        """The action for a call ``rule`` flags: per-rule setting, else the rule's own, else global."""
        return self.rule_actions.get(rule.name) or rule.action or self.action

    def decide_cached(self, op: str, a: torch.Tensor, b: torch.Tensor,
                      device_type: str | None = None) -> tuple[Call, str, list[Hit]]:
        """(call, action, hits) for ``op`` on matrix operands ``a``, ``b``, cached per call
        signature: loops repeat shapes. ``device_type``: the operands' device type when
        the caller knows it (an override is registered per device type; reading it
        again costs ~0.3 us)."""
        key = (op, a.shape, a.stride(), a.storage_offset(), b.shape, b.stride(), b.storage_offset(), a.dtype,
               device_type or a.device.type)
        hit = self._decisions.get(key)
        if hit is not None:
            return hit
        # A new signature (the first call of a shape; budget ~5 us in all). The call is
        # built from the metadata just read for the key (not read again), by hand: plain
        # tuples, no generic constructor (what Call.matmul builds); contiguity from torch.
        _, sa, ta, oa, sb, tb, ob, dtype, dt = key
        sa, sb = tuple(sa), tuple(sb)
        packed = (a.is_contiguous(), b.is_contiguous())
        call = _new_object(Call)
        call.op = op
        call.operands = operands = (_new_tuple(TensorMeta, (sa, ta, oa)), _new_tuple(TensorMeta, (sb, tb, ob)))
        nd = len(sa)  # (*sa[:-1], sb[-1]), spelled out for bmm and mm (half the cost)
        call.out_shape = out_shape = ((sa[0], sa[1], sb[-1]) if nd == 3 else (sa[0], sb[-1]) if nd == 2
                                      else (*sa[:-1], sb[-1]))
        call.dtype = dtype
        call.device_type = dt
        call.scores_numel = None
        call.packed = packed
        call._memo = {}
        fast = self._fast.get(dt, _NO_FAST).get(op)
        if fast is None:
            fast = self._fast_decision(op, dt)
        if fast:
            # The policy's rules on this op are one family that decides on plain
            # metadata (rules A, B, C): what Policy.check does, without its generic steps.
            fn, t31, t32, rules = fast
            d = fn(out_shape, operands, t31, t32, packed)
            rule = rules.get(d[1])
            if rule is None:
                hit = (call, "pass", [])
            else:  # Engine.action_for, inline
                ra = self.rule_actions
                hit = (call, (ra and ra.get(rule.name)) or rule.action or self.action,
                       [_new_tuple(Hit, (rule, d[4]))])
        else:
            hit = (call, *self.decide(call))
        if len(self._decisions) >= DECISION_CACHE_SIZE:
            self._decisions.clear()  # rare: more distinct large shapes than the cache holds
        self._decisions[key] = hit
        return hit

    def _fast_decision(self, op: str, device_type: str | None):
        """``(fn, t31, t32, {tag: rule})`` when the policy's rules for ``op`` on
        ``device_type`` are a single family with a decision on plain metadata (the
        ``mps`` policy's rules A, B, C), else ``False`` (every rule through
        :meth:`Policy.check`). Cached per (op, device type)."""
        steps = self.policy._steps_for(op, device_type)[1]
        fast = False
        if len(steps) == 1 and steps[0][0] is not None:
            decide, rules, _ = steps[0]
            meta = getattr(decide, "metadata", None)
            if meta is not None:
                fn, t31, t32 = meta
                fast = (fn, t31, t32, dict(rules))
        self._fast.setdefault(device_type, {})[op] = fast
        return fast

    def slow(self, op: str, overload: str, args, kwargs, run, device_type: str | None = None):
        """A call past the floor: decide (cached per signature), then act. The call is
        normalised (bias, alpha, beta, out) only when an action needs it."""
        a, b = matrix_operands(op, args)
        call, action, hits = self.decide_cached(op, a, b, device_type)
        if action == "pass" or action == "off":
            if action == "off":
                self.counters.add("ignored", hits)
            return run(op, overload, *args, **kwargs)
        mm = Normalised.of(op, args, kwargs)
        inplace = overload == "inplace"
        if inplace:
            mm.out = mm.bias  # addmm_ / baddbmm_: the result overwrites self
        if action == "warn":
            self.counters.add("warned", hits)
            log.warning("unsafe call passed through (action warn): %s; %s", call.describe(),
                        "; ".join(h.explain() for h in hits))
            return run(op, overload, *args, **kwargs)
        if action == "raise":
            self.counters.add("refused", hits)
            raise UnsafeCallError(refusal_message(call, hits, self.planner.plan(call)))
        if action == "verify":
            # In place, the call overwrites its bias: keep a copy to verify against.
            bias_before = mm.bias.clone() if inplace else None
            result = run(op, overload, *args, **kwargs)
            mm.out = result
            if inplace:
                mm.bias = bias_before
            if mm.bias is not None:
                mm.bias = mm.bias.expand(mm.out_shape)
            plan = self.planner.plan(call, limit=self._verify_limit(call))
            self.counters.add("verified", hits)
            if plan is None:
                raise UnsafeCallError(refusal_message(call, hits, None, "cannot be verified in safe pieces"))
            bad = check_pieces(plan, mm, run)
            if bad is not None:
                self.counters.add("mismatches")
                raise UnsafeCallError(f"kernelaudit guard: verification failed for {call.describe()}: "
                                      f"{bad.explain()}; flagged by " + "; ".join(h.explain() for h in hits))
            return result
        plan = self.planner.plan(call)
        if plan is None:
            self.counters.add("refused", hits)
            raise UnsafeCallError(refusal_message(call, hits, None, "cannot be split into safe pieces"))
        out = self.fix(mm, plan, run)
        self.counters.add("fixed", hits)
        return out

    def attention(self, args, kwargs, kernel):
        """MPS's fused attention op (the attention-score rule); ``kernel`` is the original."""
        from . import attention as att

        d = att.normalise(args, kwargs)
        call = Call.of(SDPA_MPS, (d["query"], d["key"], d["value"]))
        action, hits = self.decide(call)
        if action in ("pass", "off", "warn"):
            if action != "pass":
                self.counters.add("warned" if action == "warn" else "ignored", hits)
            if action == "warn":
                log.warning("unsafe call passed through (action warn): %s; %s", call.describe(),
                            "; ".join(h.explain() for h in hits))
            return kernel(*args, **kwargs)
        plan = att.pieces(self.policy, d["query"], d["key"], d["value"])
        if action == "raise" or plan is None:
            self.counters.add("refused", hits)
            chunk = (f"largest safe chunk: query {tuple(d['query'][plan[0][0]].shape)} per piece "
                     f"({len(plan)} pieces)" if plan else "no safe chunk")
            raise UnsafeCallError(f"kernelaudit guard refused: {call.describe()}; "
                                  + "; ".join(h.explain() for h in hits) + f"; {chunk}.")
        if action == "verify":
            result = kernel(*args, **kwargs)
            self.counters.add("verified", hits)
            bad = att.verify_rows(d, result, kernel)
            if bad is not None:
                self.counters.add("mismatches")
                raise UnsafeCallError(f"kernelaudit guard: verification failed for {call.describe()}: {bad}")
            return result
        out = att.run_pieces(self.policy, d, kernel, plan)
        self.counters.add("fixed", hits)
        return out

    def _verify_limit(self, call: Call) -> int:
        f = self.floor(call.op, call.device_type)
        th = self.policy.thresholds
        return f if 0 < f < 2**62 else (th.t31 if th else 2**31)

    def fix(self, mm: Normalised, plan: Plan, run) -> torch.Tensor:
        """Compute the call piece by piece into its output (allocated once). A piece's
        view whose matrix stride a BLAS cannot take as a leading dimension (one past
        ``int`` range: the whole output's row length, ``addmm`` past 2^31 - 1 columns)
        runs on a compact copy, its result copied into place."""
        shape = mm.out_shape
        out = mm.out
        if out is None:
            out = torch.empty(shape, dtype=mm.a.dtype, device=mm.a.device)
        elif tuple(out.shape) != shape:
            out.resize_(shape)
        bias = mm.bias.expand(shape) if mm.bias is not None else None
        th = self.policy.thresholds
        ld_max = (th.t31 if th else 2**31) - 2   # cuBLAS: a leading dimension below INT_MAX
        if plan.depth is not None:
            return _fix_in_depth(mm, plan, run, out, bias, ld_max)
        for piece in plan.pieces():
            a, b, bp, o = piece_views(plan, piece, mm.a, mm.b, bias, out)
            a, b = _compact(a, ld_max), _compact(b, ld_max)
            into = o if _leading_dim(o) <= ld_max else torch.empty(o.shape, dtype=o.dtype, device=o.device)
            if bp is None:
                run(mm.op, "out", a, b, out=into)
            else:
                run(mm.op, "out", _compact(bp, ld_max), a, b, beta=mm.beta, alpha=mm.alpha, out=into)
            if into is not o:
                o.copy_(into)
        return out

    def stats(self) -> GuardStats:
        return self.counters.snapshot()


#: Most elements of one operand's slice copied (upcast, or compacted) at a time when a
#: fix sums a product over slices of its reduction dim (a 16-bit operand's float32 copy).
DEPTH_COPY_ELEMENTS = 2**27


def _fix_in_depth(mm: Normalised, plan: Plan, run, out: torch.Tensor, bias, ld_max: int) -> torch.Tensor:
    """Each output piece as the sum of its products over slices of the reduction dim,
    accumulated in float32 (float64 for float64) and rounded to the output's dtype once,
    as a BLAS that accumulates in float32 rounds its result; ``beta * bias`` added last."""
    batched = mm.a.dim() == 3
    prod, prod_acc = ("bmm", "baddbmm") if batched else ("mm", "addmm")
    acc_dtype = mm.a.dtype if mm.a.dtype in (torch.float64, torch.complex128) or not mm.a.is_floating_point() \
        else torch.float32
    for piece in plan.pieces():
        a, b, bp, o = piece_views(plan, piece, mm.a, mm.b, bias, out)
        most = max(1, DEPTH_COPY_ELEMENTS // max(math.prod(a.shape[:-1]), math.prod(b.shape[:-2]) * b.shape[-1], 1))
        acc = None
        for ks in plan.depths(most):
            ak, bk = depth_views(a, b, ks)
            ak, bk = _compact(ak.to(acc_dtype), ld_max), _compact(bk.to(acc_dtype), ld_max)
            if acc is None:
                acc = run(prod, "default", ak, bk)
            else:
                run(prod_acc, "out", acc, ak, bk, out=acc)
        if mm.alpha != 1:
            acc.mul_(mm.alpha)
        if bp is not None and mm.beta != 0:
            acc.add_(bp.to(acc_dtype), alpha=mm.beta)
        o.copy_(acc)
    return out


def _leading_dim(t: torch.Tensor) -> int:
    """The larger matrix stride of ``t`` (its last two dims; a dim of one element or a
    broadcast stride of 0 needs none): the leading dimension a BLAS would be given."""
    return max((st for st, n in zip(t.stride()[-2:], t.shape[-2:]) if n > 1), default=0)


def _compact(t: torch.Tensor, ld_max: int) -> torch.Tensor:
    """``t``, or a contiguous copy where its leading dimension passes ``ld_max``."""
    return t if _leading_dim(t) <= ld_max else t.contiguous()


def refusal_message(call: Call, hits: list[Hit], plan: Plan | None, why: str = "refused") -> str:
    """The ``UnsafeCallError`` text: op, shapes, strides, dtype, rule, largest safe chunk."""
    chunk = (f"largest safe chunk: {plan.describe()}"
             if plan is not None else "no safe chunk: one row of a or one column of b is unsafe alone")
    return (f"kernelaudit guard {why}: {call.describe()}; "
            + "; ".join(h.explain() for h in hits)
            + f"; {chunk}. Use action 'fix' to split it automatically.")
