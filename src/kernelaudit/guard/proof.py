"""Running the sweep's cases under a fault model with the guard on: the CPU proof.

:func:`run_guarded` runs one :class:`~kernelaudit.sweep.cases.Case` (forward, or backward
for ``bwd`` cases) exactly as the sweep does, with the fault model active and, when
an action is given, the guard above it. :func:`prove` compares the three runs the
guard's promise is about: honest backend, faulty backend, faulty backend + guard.
Tests and ``benchmarks/guard_precision.py`` use it.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch

from ..sweep import gen
from ..sweep.cases import Case
from ..errors import UnsafeCallError
from ..faults import make_fault_model
from ..faults.mps import _math_attention_only
from ..sweep.ops.spec import DTYPES
from .engine import Engine, GuardStats
from .intercept import GuardMode
from .policy import policy_for

#: Tolerance per dtype when a fix is not bitwise equal (the study's calibrated
#: tolerances: about 1.2e-5 for fp32 and 4e-3 for fp16; bf16 by the same 10x rule).
CASE_TOLERANCE = {torch.float32: 1.2e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2, torch.float64: 1e-12}


@dataclass
class Run:
    """Outputs (or the exception) of one run, and what the fault model and guard did."""

    outs: tuple | None
    error: BaseException | None
    fault_changed: dict = field(default_factory=dict)
    stats: GuardStats | None = None


def _call_case(case: Case, device) -> tuple:
    from ..sweep.judge.operands import _as_tuple, device_inputs, placed_operands

    spec = case.spec
    placed = placed_operands(case)
    bwd = case.direction == "bwd"
    bases, views = device_inputs(placed, device, grad=bwd)
    outs = _as_tuple(spec.call(*views))
    if not bwd:
        return tuple(o.detach() for o in outs)
    used = outs[: spec.bwd_outputs]
    grads = [gen.fill_flat(o.numel(), gen.stream_key(case.seed, f"{case.op}/grad{j}"), o.dtype, device).view(o.shape)
             for j, o in enumerate(used)]
    torch.autograd.backward(used, grads)
    return tuple(b.grad for b in bases if b.grad is not None)


def run_guarded(case: Case, *, fault_model: str = "mps", action: str | None = None, device="cpu") -> Run:
    """Run ``case`` under ``fault_model`` (``none``: honest), with the guard's ``action``
    above it (``None``: no guard)."""
    fm = make_fault_model(fault_model, case.thresholds)
    engine = Engine(policy_for(fault_model, case.thresholds), action) if action else None
    # the guard's inputs (generated values) must not pass through the fault model
    # differently from the honest run: generation uses no covered op.
    try:
        # every run takes attention's math path (as the fault models force), so the
        # honest and faulty runs do the same arithmetic
        with _math_attention_only(), fm, (GuardMode(engine) if engine else contextlib.nullcontext()):
            outs = _call_case(case, device)
        return Run(outs, None, dict(fm.stats.changed), engine.stats() if engine else None)
    except (UnsafeCallError, RuntimeError) as e:
        return Run(None, e, dict(fm.stats.changed), engine.stats() if engine else None)


def max_rel_error(got: tuple, ref: tuple) -> float:
    """max |got - ref| / max |ref| over all outputs (inf on a shape mismatch)."""
    worst = 0.0
    for g, r in zip(got, ref):
        if g.shape != r.shape:
            return float("inf")
        g64, r64 = g.double(), r.double()
        scale = r64.abs().max().item() or 1.0
        worst = max(worst, (g64 - r64).abs().max().item() / scale)
    return worst


def bitwise_equal(got: tuple, ref: tuple) -> bool:
    return len(got) == len(ref) and all(g.shape == r.shape and torch.equal(g, r) for g, r in zip(got, ref))


@dataclass
class Proof:
    """One case under the three backends and every action."""

    case: Case
    corrupted: bool            # the faulty backend alone gives a wrong answer or raises
    fault_changed: dict
    runs: dict                 # action -> Run
    ref: tuple

    def fix_error(self) -> float:
        r = self.runs["fix"]
        return float("inf") if r.outs is None else max_rel_error(r.outs, self.ref)

    def fix_bitwise(self) -> bool:
        r = self.runs["fix"]
        return r.outs is not None and bitwise_equal(r.outs, self.ref)


def prove(case: Case, actions=("fix", "raise", "verify"), fault_model: str = "mps", device="cpu") -> Proof:
    """Run ``case`` honest, faulty, and faulty under each guard action, on ``device``."""
    honest = run_guarded(case, fault_model="none", device=device)
    if honest.error is not None:
        raise honest.error
    faulty = run_guarded(case, fault_model=fault_model, device=device)
    corrupted = faulty.error is not None or not bitwise_equal(faulty.outs, honest.outs)
    changed = faulty.fault_changed
    del faulty  # large on a GPU
    runs = {a: run_guarded(case, fault_model=fault_model, action=a, device=device) for a in actions}
    return Proof(case, corrupted, changed, runs, honest.outs)


def tolerance(case: Case) -> float:
    return CASE_TOLERANCE[DTYPES[case.dtype]]


# -- precision: the policy against the study's blanket rule -------------------------------------
class _Recorder(torch.utils._python_dispatch.TorchDispatchMode):
    """On meta tensors: each covered call's verdicts (ours, the blanket rule's, the
    fault model's) and whether any tensor anywhere has >= 2^32 elements."""

    def __init__(self, th) -> None:
        super().__init__()
        from .policy import blanket_policy, mps_policy

        self.th = th
        self.ours = mps_policy(th, device_types=None)
        self.blanket = blanket_policy(th, device_types=None)
        self.calls: list[tuple[bool, bool, bool, bool]] = []  # (ours, blanket, wrong or raises, silent)
        self.any_big = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        from torch.utils._pytree import tree_flatten

        from ..faults.mps import MATMUL_OPERANDS, _out_shape
        from ..faults.predicates import Effect, TensorMeta, mps_matmul_decision
        from .policy import Call

        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        flat = [t for t in tree_flatten((args, kwargs, out))[0] if isinstance(t, torch.Tensor)]
        if any(t.numel() >= self.th.t32 for t in flat):
            self.any_big = True
        pos = MATMUL_OPERANDS.get(func.overloadpacket)
        if pos is not None:
            mats = [args[i] for i in pos]
            call = Call.of(func.overloadpacket.__name__, mats)
            d = mps_matmul_decision(_out_shape(func.overloadpacket, mats), [TensorMeta.of(m) for m in mats], self.th)
            self.calls.append((bool(self.ours.check(call)), bool(self.blanket.check(call)), d.effect is not Effect.OK,
                               d.effect in (Effect.PACKED, Effect.WRAP)))
        return out


@dataclass
class Precision:
    """Counts over a grid of cases (and over their covered calls)."""

    cases: int = 0
    wrong_cases: int = 0             # the rules say the case is wrong or raises
    silent_cases: int = 0            # ... wrong without an error (rules A, C)
    blanket_misses_silent: int = 0   # silent cases the blanket rule lets through
    ours_blocks: int = 0             # cases with a call our policy flags
    blanket_blocks: int = 0          # cases the study's guard refuses (>= 2^32 anywhere)
    blanket_blocks_correct: int = 0  # ... that are in fact correct
    ours_lets_through_of_those: int = 0
    calls: int = 0
    wrong_calls: int = 0
    ours_flags_calls: int = 0
    blanket_flags_calls: int = 0
    blanket_flags_correct_calls: int = 0
    ours_misses: int = 0             # wrong calls our policy does not flag (must be 0)
    ours_false_alarms: int = 0       # correct calls our policy flags (must be 0)

    def to_json(self) -> dict:
        return dict(self.__dict__)


def precision(cases) -> Precision:
    """Our ``mps`` policy against the blanket rule on ``cases`` (metadata only: meta tensors)."""
    from ..sweep.judge.operands import _as_tuple, placed_operands

    p = Precision()
    for case in cases:
        spec = case.spec
        rec = _Recorder(case.thresholds)
        bwd = case.direction == "bwd"
        views = []
        for pl in placed_operands(case):
            base = torch.empty(pl.storage_numel, dtype=pl.dtype, device="meta")
            if bwd and pl.operand.grad and pl.dtype.is_floating_point:
                base.requires_grad_(True)
            views.append(base.as_strided(pl.shape, pl.strides, pl.offset))
        with _math_attention_only(), rec:
            outs = _as_tuple(spec.call(*views))
            if bwd:
                used = outs[: spec.bwd_outputs]
                torch.autograd.backward(used, [torch.empty(o.shape, dtype=o.dtype, device="meta") for o in used])
        wrong = any(c[2] for c in rec.calls)
        silent = any(c[3] for c in rec.calls)
        ours = any(c[0] for c in rec.calls)
        blanket = rec.any_big
        p.cases += 1
        p.wrong_cases += wrong
        p.silent_cases += silent
        p.blanket_misses_silent += silent and not blanket
        p.ours_blocks += ours
        p.blanket_blocks += blanket
        if blanket and not wrong:
            p.blanket_blocks_correct += 1
            p.ours_lets_through_of_those += not ours
        for o, b, w, _ in rec.calls:
            p.calls += 1
            p.wrong_calls += w
            p.ours_flags_calls += o
            p.blanket_flags_calls += b
            p.blanket_flags_correct_calls += b and not w
            p.ours_misses += w and not o
            p.ours_false_alarms += o and not w
    return p
