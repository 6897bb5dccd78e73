"""Guard rules and policies: which calls are unsafe on which backend, and why.

A :class:`Rule` is a named predicate over one intercepted call's metadata (shapes,
strides, storage offset, dtype, device type; never data, never a device sync) with a
one-line explanation. A :class:`Policy` is an ordered list of rules, the device types
they apply to and the thresholds they were built at.

Built-in policies:

* ``mps``: rules A, B, C of BACKGROUND section 1 (through the same pure predicates as
  the ``mps`` fault model, :func:`kernelaudit.faults.predicates.mps_matmul_decision`) and
  the attention-score rule, at the exact thresholds of the study, for MPS tensors;
* ``wrap32``: a matmul whose operand or output has more than 2^32 elements (the
  ``wrap32`` fault model's index wrap);
* ``blanket``: the study's own guard, ">= 2^32 elements anywhere"; kept only to
  measure how many correct calls it blocks (:mod:`benchmarks.guard_precision`).

:func:`policy_for` gives the policy that matches a fault model at its scale, so a
what-if run (``--fault-model mps --scale 16``) is guarded by the same rules, scaled.

Adding a rule takes a few lines::

    from kernelaudit.guard import Rule, mps_policy

    def huge_fp16_batch(call):
        if call.dtype == torch.float16 and call.operands[0].shape[0] > 65535:
            return f"batch {call.operands[0].shape[0]} > 65535 in fp16"

    policy = mps_policy().with_rules(
        Rule("fp16-batch", huge_fp16_batch, "CUDA fp16 bmm with batch > 65535 returned zeros",
             device_types=("cuda",)))

A rule that declares ``min_elements`` (it can only fire when some tensor of the call
has at least that many elements) keeps the guard's fast path for small calls; one
that does not is evaluated on every intercepted call of its ops.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable, Iterable, NamedTuple, Sequence

import torch

from ..errors import InvalidArgument, check_choice
from ..faults.predicates import TensorMeta, attention_scores_decision, matmul_decision_fields, mps_matmul_decision
from ..thresholds import REAL, Thresholds

#: The matmul-family aten ops the guard intercepts (matmul, einsum, linear, eager and
#: math-path attention, and every backward decompose into these).
MATMUL_OPS = frozenset({"mm", "bmm", "addmm", "baddbmm"})
#: MPS's fused attention op (``aten::_scaled_dot_product_attention_math_for_mps``).
SDPA_MPS = "sdpa_mps"
#: Every op name a rule may name.
KNOWN_OPS = MATMUL_OPS | {SDPA_MPS}
#: Actions, in the order of severity used when several rules with different actions hit.
ACTIONS = ("fix", "raise", "verify", "warn", "off")
_SEVERITY = {"off": 0, "warn": 1, "verify": 2, "fix": 3, "raise": 4}
#: A named tuple (``TensorMeta``, ``Hit``) from its ready field tuple, skipping the
#: generated Python ``__new__`` (both are built on the first call of a new shape).
_new_meta = tuple.__new__


class Call:
    """What a rule may look at for one intercepted call: metadata only.

    ``operands`` are the two matrix operands of a matmul-family op (``mat1``/``mat2``
    of addmm, ``batch1``/``batch2`` of baddbmm) or ``(q, k, v)`` of attention;
    ``out_shape`` is the result's shape; ``scores_numel`` the attention score count;
    ``packed``: per operand, whether its strides are row-major packed (torch's
    ``is_contiguous()``, read where the tensors were at hand), or None (unknown:
    rules derive it from the strides).
    """

    __slots__ = ("op", "operands", "out_shape", "dtype", "device_type", "scores_numel", "packed", "_memo")

    def __init__(self, op: str, operands: Sequence[TensorMeta], out_shape: Sequence[int],
                 dtype: torch.dtype, device_type: str, scores_numel: int | None = None) -> None:
        self.op = op
        self.operands = tuple(operands)
        self.out_shape = tuple(out_shape)
        self.dtype = dtype
        self.device_type = device_type
        self.scores_numel = scores_numel
        self.packed = None
        self._memo: dict = {}

    @classmethod
    def of(cls, op: str, tensors: Sequence[torch.Tensor]) -> "Call":
        """The call of ``op`` on real (or meta) tensors."""
        if op == SDPA_MPS:
            q, k, v = tensors
            metas = [TensorMeta(tuple(t.shape), t.stride(), t.storage_offset()) for t in tensors]
            return cls(op, metas, (*q.shape[:-1], v.shape[-1]), q.dtype, q.device.type,
                       math.prod(q.shape[:-1]) * k.shape[-2])
        a, b = tensors
        return cls.matmul(op, a.shape, a.stride(), a.storage_offset(), b.shape, b.stride(), b.storage_offset(),
                          a.dtype, a.device.type, (a.is_contiguous(), b.is_contiguous()))

    @classmethod
    def matmul(cls, op: str, a_shape, a_strides, a_offset: int, b_shape, b_strides, b_offset: int,
               dtype: torch.dtype, device_type: str, packed: tuple[bool, bool] | None = None) -> "Call":
        """The call of a matmul-family ``op`` from its operands' metadata, as the guard has
        already read it for its decision cache's key (no second read of the tensors)."""
        # Plain tuples, no generic constructor. The engine's first-call path
        # (Engine.decide_cached) builds the same Call inline (its budget is ~5 us).
        sa, sb = tuple(a_shape), tuple(b_shape)
        self = cls.__new__(cls)
        self.op = op
        self.operands = (_new_meta(TensorMeta, (sa, a_strides, a_offset)),
                         _new_meta(TensorMeta, (sb, b_strides, b_offset)))
        self.out_shape = (*sa[:-1], sb[-1])
        self.dtype = dtype
        self.device_type = device_type
        self.scores_numel = None
        self.packed = packed
        self._memo = {}
        return self

    @property
    def out_numel(self) -> int:
        return math.prod(self.out_shape)

    def memo(self, key, compute: Callable[[], object]):
        """Cache a value several rules share (e.g. the A/B/C decision)."""
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]

    def describe(self) -> str:
        """``bmm float32 [(B,M,K) strides (..) offset 0, ...] -> (B,M,N)``."""
        ops = ", ".join(f"{m.shape} strides {m.strides} offset {m.offset}" for m in self.operands)
        return f"{self.op} {str(self.dtype).replace('torch.', '')} on {self.device_type}: [{ops}] -> {self.out_shape}"


class Hit(NamedTuple):
    """One rule flagging one call, with the reason in a sentence (``reason``; ``why``
    is what the rule returned: a string, or a :class:`~kernelaudit.faults.predicates.Reason`
    formatted on first read). A named tuple: it is built on the guard's first-call
    path, where a frozen dataclass costs ~1 us."""

    rule: "Rule"
    why: object

    @property
    def reason(self) -> str:
        return str(self.why)

    def explain(self) -> str:
        return f"rule {self.rule.name} ({self.rule.explain}): {self.reason}"


@dataclass(frozen=True)
class Rule:
    """A named predicate over a :class:`Call`: ``check(call)`` returns a reason when the
    call is unsafe (a string, or anything whose ``str()`` is one), ``None`` otherwise. ``explain`` is the one-line why.

    ``ops``: the op names it looks at (see :data:`KNOWN_OPS`); ``device_types``: ``None``
    for the policy's; ``min_elements``: the rule can only fire when an operand, the
    output (or the attention scores) has at least this many elements (0: unknown, which
    disables the fast path for these ops); ``action``: overrides the global action.
    """

    name: str
    check: Callable[[Call], str | None]
    explain: str
    ops: frozenset = MATMUL_OPS
    device_types: tuple[str, ...] | None = None
    min_elements: int = 0
    action: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "ops", frozenset(self.ops))
        unknown = sorted(set(self.ops) - KNOWN_OPS)
        if unknown:
            raise InvalidArgument(f"Cannot have rule ops={unknown}: allowed values are {', '.join(sorted(KNOWN_OPS))}")
        if self.action is not None:
            check_choice("action", self.action, ACTIONS)
        if self.min_elements < 0:
            raise InvalidArgument(f"Cannot have min_elements={self.min_elements} < 0")


@dataclass(frozen=True)
class Policy:
    """An ordered list of rules for some device types (``None``: every device type,
    as in a what-if run under a fault model), built at ``thresholds``."""

    name: str
    rules: tuple[Rule, ...]
    device_types: tuple[str, ...] | None = ("mps",)
    thresholds: Thresholds | None = None

    def with_rules(self, *rules: Rule) -> "Policy":
        """This policy plus ``rules`` (checked after the existing ones)."""
        return replace(self, rules=(*self.rules, *rules))

    def on(self, *device_types: str) -> "Policy":
        """The same rules for other device types (``on()`` with no argument: every device)."""
        return replace(self, device_types=tuple(device_types) or None)

    def rule_device_types(self, rule: Rule) -> tuple[str, ...] | None:
        return rule.device_types if rule.device_types is not None else self.device_types

    def ops(self) -> frozenset:
        return frozenset().union(*(r.ops for r in self.rules)) if self.rules else frozenset()

    def device_types_for(self, op: str) -> tuple[str, ...] | None:
        """Device types where ``op`` needs intercepting (``None``: all)."""
        out: set[str] = set()
        for r in self.rules:
            if op in r.ops:
                dts = self.rule_device_types(r)
                if dts is None:
                    return None
                out.update(dts)
        return tuple(sorted(out))

    def floor(self, op: str, device_type: str | None = None) -> int:
        """Below this many elements in every tensor of the call, no rule on ``op`` can fire."""
        mins = [r.min_elements for r in self._rules_for(op, device_type)]
        return min(mins) if mins else 2**62

    def __post_init__(self) -> None:
        # (op, device type) -> its rules; a frozen dataclass still owns its cache.
        object.__setattr__(self, "_rules_cache", {})

    def _rules_for(self, op: str, device_type: str | None) -> list[Rule]:
        return self._steps_for(op, device_type)[0]

    def _steps_for(self, op: str, device_type: str | None) -> tuple[list[Rule], list[tuple]]:
        """(rules, steps) for ``op`` on ``device_type``, cached. A step is ``(None, rule,
        position)``, or ``(decide, {tag: rule}, position)`` for rules whose checks share
        one decision (``check.family``: rules A, B and C), evaluated once per call."""
        key = (op, device_type)
        got = self._rules_cache.get(key)
        if got is None:
            rules = self._select_rules(op, device_type)
            steps, families = [], {}
            for pos, r in enumerate(rules):
                fam = getattr(r.check, "family", None)
                if fam is None:
                    steps.append((None, r, pos))
                elif fam[0] in families:
                    families[fam[0]][1][fam[2]] = r
                else:
                    families[fam[0]] = step = (fam[1], {fam[2]: r}, pos)
                    steps.append(step)
            got = self._rules_cache[key] = (rules, steps)
        return got

    def _select_rules(self, op: str, device_type: str | None) -> list[Rule]:
        out = []
        for r in self.rules:
            if op not in r.ops:
                continue
            dts = self.rule_device_types(r)
            if device_type is not None and dts is not None and device_type not in dts:
                continue
            out.append(r)
        return out

    def check(self, call: Call) -> list[Hit]:
        """Every rule that flags ``call``, in policy order."""
        got = self._rules_cache.get((call.op, call.device_type)) or self._steps_for(call.op, call.device_type)
        steps = got[1]
        if len(steps) == 1:  # the usual policy: one family (rules A, B, C) or one rule
            return self._run_step(steps[0], call, [])
        hits, order = [], []
        for step in steps:
            for h in self._run_step(step, call, []):
                hits.append(h)
                order.append(got[0].index(h.rule))
        if order != sorted(order):  # a family's hit sits at its rule's place
            hits = [h for _, h in sorted(zip(order, hits), key=lambda p: p[0])]
        return hits

    @staticmethod
    def _run_step(step: tuple, call: Call, hits: list) -> list[Hit]:
        decide, rule, _ = step
        if decide is None:
            reason = rule.check(call)
            if reason:
                hits.append(_new_meta(Hit, (rule, reason)))
        else:
            tag, why = decide(call)
            r = rule.get(tag)
            if r is not None:
                hits.append(_new_meta(Hit, (r, why)))
        return hits

    def describe(self) -> str:
        where = ", ".join(self.device_types) if self.device_types else "every device"
        scale = f" at 2^32 = 2^{self.thresholds.bits}" if self.thresholds else ""
        return f"policy {self.name} ({len(self.rules)} rules, {where}{scale})"


# -- the mps policy -----------------------------------------------------------------
def _mps_rule(letter: str, th: Thresholds) -> Callable[[Call], str | None]:
    key = ("mps", th.bits)

    def decide(call: Call) -> tuple[str | None, object]:
        """(letter of the rule that fires, its reason): what a policy calls, once per
        call, for the whole family (rules A, B, C)."""
        d = mps_matmul_decision(call.out_shape, call.operands, th, call.packed)
        return d.rule, d.why
    # The same decision on plain metadata, for the engine's first-call path:
    # ``fn(out_shape, operands, t31, t32, packed)`` -> the Decision's fields (``[1]``:
    # the rule's letter or None, ``[4]``: why).
    decide.metadata = (matmul_decision_fields, th.t31, th.t32)

    def check(call: Call) -> str | None:
        # A rule checked on its own: the three share one decision per call.
        got = call._memo.get(key)
        if got is None:
            got = call._memo[key] = decide(call)
        return got[1] if got[0] == letter else None
    check.__name__ = f"mps_rule_{letter}"
    # (family key, shared decision, this rule's tag): see Policy._steps_for.
    check.family = (key, decide, letter)
    return check


def _attention_rule(th: Thresholds) -> Callable[[Call], str | None]:
    def check(call: Call) -> str | None:
        q, k = call.operands[0], call.operands[1]
        d = attention_scores_decision(q.shape, k.shape, th)
        return d.why or None
    return check


def mps_rules(th: Thresholds = REAL) -> tuple[Rule, ...]:
    """Rules A, B, C and the attention-score rule at thresholds ``th``."""
    return (
        Rule("A", _mps_rule("A", th),
             "an output over 2^32 elements takes MPS's tiled path, which reads transposed views as packed",
             min_elements=th.t32 + 1),
        Rule("B", _mps_rule("B", th),
             "a view operand with >= 2^31 elements raises 'MPSGraph does not support tensor dims larger "
             "than INT_MAX'", min_elements=th.t31),
        Rule("C", _mps_rule("C", th),
             "a contiguous operand over 2^32 elements has its flat index wrap modulo 2^32",
             min_elements=th.t32 + 1),
        Rule("attention-scores", _attention_rule(th),
             "attention whose score tensor has over 2^32 elements goes through the faulty tiled bmm",
             ops=frozenset({SDPA_MPS}), min_elements=th.t32 + 1),
    )


def mps_policy(th: Thresholds = REAL, device_types: Iterable[str] | None = ("mps",)) -> Policy:
    """Rules A, B, C and the attention-score rule, for ``device_types`` (default MPS)."""
    return Policy("mps", mps_rules(th), tuple(device_types) if device_types is not None else None, th)


# -- other policies ---------------------------------------------------------------------
def _wrap32_check(th: Thresholds) -> Callable[[Call], str | None]:
    def check(call: Call) -> str | None:
        sizes = [m.numel for m in call.operands] + [call.out_numel]
        big = max(sizes)
        return f"a tensor of the call has {big} > {th.t32} elements: its flat index wraps" if big > th.t32 else None
    return check


def wrap32_policy(th: Thresholds = REAL, device_types: Iterable[str] | None = None) -> Policy:
    """A matmul whose operand or output has more than 2^32 elements (index wraps)."""
    rule = Rule("wrap32", _wrap32_check(th), "flat indexes past 2^32 wrap modulo 2^32", min_elements=th.t32 + 1)
    return Policy("wrap32", (rule,), tuple(device_types) if device_types is not None else None, th)


def _blanket_check(th: Thresholds) -> Callable[[Call], str | None]:
    def check(call: Call) -> str | None:
        sizes = [m.numel for m in call.operands] + [call.out_numel]
        if call.scores_numel is not None:
            sizes.append(call.scores_numel)
        return f"a tensor has {max(sizes)} >= {th.t32} elements" if max(sizes) >= th.t32 else None
    return check


def blanket_policy(th: Thresholds = REAL, device_types: Iterable[str] | None = ("mps",)) -> Policy:
    """The study's guard: refuse anything with >= 2^32 elements (for comparison only)."""
    rule = Rule("blanket", _blanket_check(th), "any tensor with >= 2^32 elements", ops=KNOWN_OPS,
                min_elements=th.t32)
    return Policy("blanket", (rule,), tuple(device_types) if device_types is not None else None, th)


def empty_policy() -> Policy:
    return Policy("none", (), None, None)


#: Fault model name -> policy factory (thresholds, device types).
_FAULT_POLICIES = {"mps": mps_policy, "mps-abort": mps_policy, "wrap32": wrap32_policy}


def policy_for(fault_model: str | object, th: Thresholds | None = None) -> Policy:
    """The policy matching a fault model (a name, or a fault-model object with ``name``
    and ``th``), at its thresholds, for every device type (the fault model runs on any)."""
    name = fault_model if isinstance(fault_model, str) else getattr(fault_model, "name", None)
    if th is None:
        th = getattr(fault_model, "th", None) or REAL
    if name == "none":
        return empty_policy()
    check_choice("fault_model", name, ["none", *_FAULT_POLICIES])
    return _FAULT_POLICIES[name](th, device_types=None)


POLICIES = {"mps": mps_policy, "wrap32": wrap32_policy, "blanket": blanket_policy}


def make_policy(name: str, th: Thresholds = REAL, device_types: Iterable[str] | None = ("mps",)) -> Policy:
    """A built-in policy by name."""
    check_choice("policy", name, POLICIES)
    return POLICIES[name](th, device_types=device_types)


def strongest(actions: Iterable[str]) -> str:
    """The most severe of several actions (raise > fix > verify > warn > off)."""
    return max(actions, key=_SEVERITY.__getitem__)
