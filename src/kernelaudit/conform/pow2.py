"""Power-of-two requantization: scales that make every epilogue step exact.

With ``sx = 2^a`` and ``sw = 2^b``, ``fp32(acc) * sx * sw`` only moves the exponent, so
every scale order (``act_first``, ``weight_first``, ``product``) gives the same fp32
number, and the one rounding left is the final cast (and the bias addition, which all
implementations then do on the same numbers). When also ``|acc| <= 2^24`` (``K <= 1040``
for int8 operands), ``fp32(acc)`` is exact and the result equals the reference's single
rounding (``exact``) too, unless a bias is added in fp32 before a narrower output
(:func:`single_rounding_expected`): that add rounds, and rounding twice may differ from
rounding once (fp16 output, 14 x 10 x 21: 27.1171865... is below the midpoint between
27.109375 and 27.125, its fp32 sum lands on it, and the tie goes to 27.125).
Implementations must still agree on the bias placement and, for int8 output, on
rounding and clamp: those are rounding steps of their own.

:func:`agreement` checks this for one case; :func:`accuracy_cost` measures what the
rounding of scales to powers of two costs against free scales.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .cases import Case, float_operands, make_inputs
from .conformance import implementation
from .reference import reference_gemm
from .ulp import ulp_distance

STEP_ORDERS = ("act_first", "weight_first", "product")


@dataclass
class Agreement:
    """Outputs of every (implementation, scale order) compared with the reference's."""

    case: str
    outputs: int
    disagreeing: list[tuple[str, str, int]]  # (implementation, scale order, differing elements)

    @property
    def bit_identical(self) -> bool:
        return not self.disagreeing


def single_rounding_expected(recipe) -> bool:
    """Whether power-of-two scales make ``recipe``'s stepwise epilogue round once, as the
    ``exact`` order does: not where a bias is added in fp32 before the cast to a narrower
    output (fp16, bf16, int8), a rounding of its own before the output's."""
    return not (recipe.bias == "before_cast" and recipe.out != "fp32")


def agreement(case: Case, impls=("torch", "triton"), *, device="cpu", exact_too: bool = True) -> Agreement:
    """Run ``case`` through the reference and each implementation in every scale order;
    with power-of-two scales every output should be bit-identical to ``act_first``'s
    reference. ``exact_too``: the reference's single rounding as well, where
    :func:`single_rounding_expected` says it should agree."""
    inputs = make_inputs(case)
    base = reference_gemm(inputs.xq, inputs.wq, inputs.sx, inputs.sw,
                          **inputs.kwargs(case.recipe.but(scale_order="act_first")))
    dev = inputs.to(device)
    outs = []
    exact = exact_too and single_rounding_expected(case.recipe)
    orders = STEP_ORDERS + (("exact",) if exact else ())
    for order in orders:
        r = case.recipe.but(scale_order=order)
        ref = reference_gemm(inputs.xq, inputs.wq, inputs.sx, inputs.sw, **inputs.kwargs(r))
        outs.append(("reference", order, ref))
        if order == "exact":
            continue
        for impl in impls:
            fn = implementation(impl)
            outs.append((impl, order, fn(dev.xq, dev.wq, dev.sx, dev.sw, **dev.kwargs(r)).cpu()))
    bad = [(impl, order, int((ulp_distance(y, base) != 0).sum())) for impl, order, y in outs]
    return Agreement(case.label(), len(outs), [b for b in bad if b[2]])


@dataclass
class AccuracyCost:
    """Error of the W8A8 output against the unquantized float64 product, free vs pow2 scales."""

    case: str
    free_rel_error: float
    pow2_rel_error: float

    @property
    def ratio(self) -> float:
        return self.pow2_rel_error / self.free_rel_error if self.free_rel_error else float("inf")


def accuracy_cost(case: Case) -> AccuracyCost:
    """``||y - x w^T (+ b)|| / ||x w^T (+ b)||`` (Frobenius, float64) with free and with
    power-of-two scales; the float operands are the ones the case quantizes."""
    errs = {}
    for scales in ("free", "pow2"):
        c = Case(case.m, case.n, case.k, case.recipe.but(out="fp32"), case.x_granularity, case.w_granularity,
                 scales, case.seed)
        x, w, b = float_operands(c)
        inp = make_inputs(c)
        y = reference_gemm(inp.xq, inp.wq, inp.sx, inp.sw, **inp.kwargs(c.recipe)).double()
        exact = x.double() @ w.double().T + (0 if b is None else b.double())
        errs[scales] = float(torch.linalg.norm(y - exact) / torch.linalg.norm(exact))
    return AccuracyCost(case.label(), errs["free"], errs["pow2"])

