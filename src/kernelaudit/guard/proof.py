"""Running the sweep's cases under a fault model with the guard on: the CPU proof.

:func:`run_guarded` runs one :class:`~kernelaudit.cases.Case` (forward, or backward
for ``bwd`` cases) exactly as the sweep does, with the fault model active and, when
an action is given, the guard above it. :func:`prove` compares the three runs the
guard's promise is about: honest backend, faulty backend, faulty backend + guard.
Tests and ``benchmarks/guard_precision.py`` use it.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch

from .. import gen
from ..cases import Case
from ..errors import UnsafeCallError
from ..faults import make_fault_model
from ..faults.mps import _math_attention_only
from ..ops.spec import DTYPES
from .engine import Engine, GuardStats
from .install import GuardMode
from .rules import policy_for

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
    from ..oracle import _as_tuple, device_inputs, placed_operands

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


def prove(case: Case, actions=("fix", "raise", "verify"), fault_model: str = "mps") -> Proof:
    """Run ``case`` honest, faulty, and faulty under each guard action."""
    honest = run_guarded(case, fault_model="none")
    if honest.error is not None:
        raise honest.error
    faulty = run_guarded(case, fault_model=fault_model)
    corrupted = faulty.error is not None or not bitwise_equal(faulty.outs, honest.outs)
    runs = {a: run_guarded(case, fault_model=fault_model, action=a) for a in actions}
    return Proof(case, corrupted, faulty.fault_changed, runs, honest.outs)


def tolerance(case: Case) -> float:
    return CASE_TOLERANCE[DTYPES[case.dtype]]
