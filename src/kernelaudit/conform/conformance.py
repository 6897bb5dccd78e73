"""Conformance runs: implementations under test against the reference, faults planted.

* :func:`judge` compares one output with the matching reference variant and explains
  itself (op, shapes, dtype, metric, tolerance, first bad index).
* :func:`blindness` plants every applicable fault in every implementation and records,
  for each check of :data:`CHECKS`, on how many cases it saw the fault.
* :func:`false_rejections` runs the correct implementations through the same checks:
  every failure there is a false rejection (the goal is zero).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from kernelaudit.errors import check_choice

from .cases import Case, make_inputs
from .checks import CHECKS
from .faults import FAULTS
from .formats import FORMATS, quantum
from .reference import reference_gemm
from .ulp import ulp_distance

IMPLEMENTATIONS = ("torch", "triton")  # the project's own: every recipe, every fault
THIRD_PARTY = ("torchao",)  # their own recipe only, no faults planted


def implementation(name: str):
    """The callable of an implementation under test (each imported only when asked)."""
    check_choice("implementation", name, IMPLEMENTATIONS + THIRD_PARTY)
    if name == "torch":
        from .torch_path import torch_w8a8
        return torch_w8a8
    if name == "torchao":
        from .third_party import torchao_w8a8
        return torchao_w8a8
    from .kernels import triton_w8a8
    return triton_w8a8


def supports(impl: str, case: Case) -> bool:
    if impl == "torchao":
        from .third_party import torchao_supports
        return torchao_supports(case.recipe)
    return True


@dataclass
class Verdict:
    """One output judged bit for bit against the reference variant of its recipe."""

    ok: bool
    case: str
    implementation: str
    dtype: str
    shape: tuple[int, ...]
    differing: int
    max_ulp: int
    first_bad_index: int | None
    got: float | int | None = None
    expected: float | int | None = None

    def explain(self) -> str:
        head = (f"w8a8 gemm [{self.implementation}] {self.case}: output {self.dtype} {self.shape}, "
                f"metric: signed ulp distance to the reference, tolerance 0 (bit-exact)")
        if self.ok:
            return head + ": ok"
        n = self.shape[1]
        return (head + f": WRONG, {self.differing} / {self.shape[0] * n} elements differ, max {self.max_ulp} ulp, "
                f"first at flat index {self.first_bad_index} (row {self.first_bad_index // n}, column "
                f"{self.first_bad_index % n}): got {self.got!r}, expected {self.expected!r}")


def judge(got: torch.Tensor, ref: torch.Tensor, case: Case, impl: str) -> Verdict:
    d = ulp_distance(got, ref).reshape(-1)
    bad = torch.nonzero(d).reshape(-1)
    first = int(bad[0]) if bad.numel() else None
    return Verdict(ok=first is None, case=case.label(), implementation=impl, dtype=case.recipe.out,
                   shape=tuple(got.shape), differing=int(bad.numel()), max_ulp=int(d.abs().max()) if d.numel() else 0,
                   first_bad_index=first, got=None if first is None else got.reshape(-1)[first].item(),
                   expected=None if first is None else ref.reshape(-1)[first].item())


def run_case(case: Case, impl: str, *, fault: str | None = None, device="cpu", inputs=None, ref=None):
    """``(got, ref)`` on the CPU: the implementation's output and the reference's."""
    inputs = inputs or make_inputs(case)
    if ref is None:
        ref = reference_gemm(inputs.xq, inputs.wq, inputs.sx, inputs.sw, **inputs.kwargs(case.recipe))
    dev = inputs.to(device)
    got = implementation(impl)(dev.xq, dev.wq, dev.sx, dev.sw, fault=fault, **dev.kwargs(case.recipe))
    return got.cpu(), ref


def bf16_spacings(got: torch.Tensor, ref: torch.Tensor) -> float:
    """How far a fault moved the output, normwise: ``max |got - ref|`` in bf16 spacings
    at ``max |ref|`` (int8: integer steps). Elementwise spacings mislead near zero, where
    cancellation leaves outputs far smaller than the numbers that produced them."""
    if not got.is_floating_point():
        return float((got.long() - ref.long()).abs().max())
    r = ref.double().numpy()
    top = np.max(np.abs(r[np.isfinite(r)])) if np.isfinite(r).any() else 1.0
    return float(np.max(np.abs(got.double().numpy() - r)) / quantum(np.float64(top), FORMATS["bf16"]))


@dataclass
class FaultRow:
    """One fault in one implementation over the cases it applies to."""

    fault: str
    implementation: str
    control: bool
    cases: int = 0
    changed_cases: int = 0
    changed_elements: int = 0
    elements: int = 0
    max_bf16_spacings: float = 0.0
    caught: dict[str, int] = field(default_factory=lambda: {c: 0 for c in CHECKS})

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def blindness(cases: list[Case], impls=IMPLEMENTATIONS, faults=None, *, device="cpu", progress=None) -> list[FaultRow]:
    """For each fault and implementation: how many applicable cases each check fails."""
    rows = []
    inputs = {c: make_inputs(c) for c in cases}
    refs = {c: reference_gemm(i.xq, i.wq, i.sx, i.sw, **i.kwargs(c.recipe)) for c, i in inputs.items()}
    for name in faults or FAULTS:
        for impl in impls:
            row = FaultRow(name, impl, FAULTS[name].control)
            for case in cases:
                if not FAULTS[name].applies(case.recipe):
                    continue
                got, ref = run_case(case, impl, fault=name, device=device, inputs=inputs[case], ref=refs[case])
                _tally(row, got, ref)
            rows.append(row)
            if progress:
                progress(f"  {name} [{impl}]: changed {row.changed_cases}/{row.cases} cases, "
                         f"bit_exact caught {row.caught['bit_exact']}")
    return rows


def _tally(row: FaultRow, got, ref) -> None:
    row.cases += 1
    changed = int((ulp_distance(got, ref) != 0).sum())
    row.changed_cases += changed > 0
    row.changed_elements += changed
    row.elements += got.numel()
    row.max_bf16_spacings = max(row.max_bf16_spacings, bf16_spacings(got, ref))
    for cname, check in CHECKS.items():
        row.caught[cname] += not check.passes(got, ref)


def false_rejections(cases: list[Case], impls=IMPLEMENTATIONS, *, device="cpu",
                     against: str = "matching") -> dict[str, dict[str, int]]:
    """``{impl: {check: failing cases}}`` for the correct implementations. ``against``:
    ``matching`` compares with the reference variant of the implementation's own recipe
    (goal: all zero); ``exact`` with the single-rounding ideal, as a conformance test
    that ignores the recipe would, where tight checks reject correct implementations."""
    check_choice("against", against, ("matching", "exact"))
    out = {}
    for impl in impls:
        counts = {c: 0 for c in CHECKS}
        for case in cases:
            if not supports(impl, case):
                continue
            ref = None
            if against == "exact":
                i = make_inputs(case)
                ref = reference_gemm(i.xq, i.wq, i.sx, i.sw, **i.kwargs(case.recipe.but(scale_order="exact")))
            got, ref = run_case(case, impl, device=device, ref=ref)
            for cname, check in CHECKS.items():
                counts[cname] += not check.passes(got, ref)
        out[impl] = counts
    return out
