"""Conformance cases: one W8A8 GEMM configuration each, inputs regenerated from the case.

A :class:`Case` holds a shape, the scale granularities, free or power-of-two scales, a
seed and the :class:`Recipe` the implementation under test declares. :func:`make_inputs`
draws float activations and weights from the seed and quantizes them; for int8 output
the output scale is chosen so that some outputs saturate (clamp faults show) and, with
power-of-two scales, so that exact ties occur (rounding faults show).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from .quantize import pow2_scale, quantize_rows
from .recipe import Recipe


@dataclass(frozen=True)
class Case:
    m: int
    n: int
    k: int
    recipe: Recipe
    x_granularity: str = "per_row"
    w_granularity: str = "per_row"
    scales: str = "free"
    seed: int = 0

    def label(self) -> str:
        return (f"{self.m}x{self.n}x{self.k} {self.recipe.describe()} x:{self.x_granularity} "
                f"w:{self.w_granularity} scales:{self.scales} seed:{self.seed}")

    def as_dict(self) -> dict:
        d = asdict(self)
        d["recipe"] = asdict(self.recipe)
        return d


@dataclass
class Inputs:
    xq: torch.Tensor  # [M, K] int8
    wq: torch.Tensor  # [N, K] int8
    sx: torch.Tensor  # [M] or [1] fp32
    sw: torch.Tensor  # [N] or [1] fp32
    bias: torch.Tensor | None  # [N] fp32
    out_scale: torch.Tensor | None  # fp32 scalar (int8 output)

    def to(self, device) -> "Inputs":
        mv = lambda t: None if t is None else t.to(device)  # noqa: E731
        return Inputs(mv(self.xq), mv(self.wq), mv(self.sx), mv(self.sw), mv(self.bias), mv(self.out_scale))

    def kwargs(self, recipe: Recipe) -> dict:
        return {"bias": self.bias, "out_scale": self.out_scale, "recipe": recipe}


def float_operands(case: Case):
    """The float activations ``x [M, K]``, weights ``w [N, K]`` and bias ``[N]`` (or None)
    of a case, drawn on the CPU from ``case.seed`` alone."""
    g = torch.Generator().manual_seed(case.seed)
    x = torch.randn(case.m, case.k, generator=g)
    x = x * torch.exp(torch.randn(case.m, 1, generator=g))  # rows of different size: per-token scales differ
    w = torch.randn(case.n, case.k, generator=g) * torch.exp(0.5 * torch.randn(case.n, 1, generator=g))
    bias = None
    if case.recipe.bias != "none":
        rms = lambda t: t.pow(2).mean().sqrt()  # noqa: E731  (std() of one element is NaN)
        bias = torch.randn(case.n, generator=g) * (rms(x) * rms(w) * case.k**0.5)
    return x, w, bias


def make_inputs(case: Case) -> Inputs:
    """The case's quantized operands (from :func:`float_operands`)."""
    x, w, bias = float_operands(case)
    xq, sx = quantize_rows(x, granularity=case.x_granularity, scales=case.scales)
    wq, sw = quantize_rows(w, granularity=case.w_granularity, scales=case.scales)
    out_scale = None
    if case.recipe.out == "int8":
        amax = (x @ w.T).abs().max().clamp(min=1e-12)
        out_scale = (amax / 100.0).reshape(())  # the largest outputs saturate
        if case.scales == "pow2":
            out_scale = pow2_scale(out_scale) / 2.0  # a power of two <= amax / 100: ties and saturation
    return Inputs(xq, wq, sx, sw, bias, out_scale)


def recipes_for_suite(base: Recipe = Recipe()) -> list[Recipe]:
    """Every output dtype with every bias placement it allows, on ``base``'s other options."""
    out = []
    for dtype in ("bf16", "fp16", "fp32", "int8"):
        for bias in ("none", "before_cast", "after_cast"):
            if dtype == "int8" and bias == "after_cast":
                continue
            out.append(base.but(out=dtype, bias=bias))
    return out


def suite(shapes=((32, 48, 64),), *, base: Recipe = Recipe(), scales=("free", "pow2"), seed: int = 0) -> list[Case]:
    """A conformance suite: each shape x recipe x scale kind, granularities taking turns."""
    cases = []
    grans = (("per_row", "per_row"), ("per_tensor", "per_row"), ("per_row", "per_tensor"))
    for m, n, k in shapes:
        for r in recipes_for_suite(base):
            for sc in scales:
                xg, wg = grans[len(cases) % len(grans)]
                cases.append(Case(m, n, k, r, xg, wg, sc, seed + len(cases)))
    return cases
