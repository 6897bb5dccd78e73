"""The exact reference: rounding written from the formats' numbers, every recipe step."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import torch

from kernelaudit.conform.formats import FORMATS, round_fraction, round_integer, round_to_format
from kernelaudit.conform.recipe import Recipe
from kernelaudit.conform.reference import exact_accumulate, reference_gemm
from kernelaudit.errors import InvalidArgument

TORCH = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


@pytest.mark.parametrize("fmt", ["bf16", "fp16", "fp32"])
def test_round_to_format_matches_torch_casts_including_ties_subnormals_and_overflow(fmt):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(20000, dtype=torch.float64, generator=g) * torch.exp2(torch.randint(-30, 20, (20000,), generator=g))
    q = float(FORMATS[fmt].max_finite)
    ties = torch.tensor([1 + 2.0**-8, 1 + 3 * 2.0**-8, 1 + 2.0**-11, 2.0**-140, -(2.0**-20), q * 1.01, -q * 1.5, 0.0],
                        dtype=torch.float64)
    x = torch.cat([x, ties, -ties])
    got = round_to_format(x.numpy(), fmt)
    want = x.float().to(TORCH[fmt]).double() if fmt != "fp32" else x.float().double()
    if fmt != "fp32":  # from float64 directly: a float32 step would round twice
        want = torch.from_numpy(np.array([round_fraction(Fraction(float(v)), FORMATS[fmt]) for v in x.tolist()]))
    assert torch.equal(torch.from_numpy(got), want.double())


def test_round_to_format_agrees_with_torch_fp32_to_bf16_cast():
    x = torch.randn(50000) * 100
    assert torch.equal(torch.from_numpy(round_to_format(x.double().numpy(), "bf16")).float(),
                       x.to(torch.bfloat16).float())


def test_round_integer_modes_on_ties_and_near_ties():
    x = np.array([0.5, 1.5, 2.5, -0.5, -2.5, 0.49999997, -1.5000001, 126.5, -127.5])
    assert round_integer(x, "half_even").tolist() == [0, 2, 2, -0, -2, 0, -2, 126, -128]
    assert round_integer(x, "half_away").tolist() == [1, 2, 3, -1, -3, 0, -2, 127, -128]


def test_exact_accumulate_raises_past_int32_with_first_index():
    k = 133_200  # 133200 * 127 * 127 > 2^31 - 1
    xq = torch.full((2, k), 127, dtype=torch.int8)
    wq = torch.ones((3, k), dtype=torch.int8) * 127
    with pytest.raises(InvalidArgument, match=r"first at flat index 0 \(row 0, column 0\)"):
        exact_accumulate(xq, wq)
    assert exact_accumulate(xq[:, :1000], wq[:, :1000])[1, 2] == 1000 * 127 * 127


def test_reference_steps_round_where_the_recipe_says():
    # one element: acc = 3, sx = 1/3 (fp32), sw = 3: act_first rounds 3 * fp32(1/3) = 1 exactly... or not
    xq = torch.tensor([[3]], dtype=torch.int8)
    wq = torch.tensor([[1]], dtype=torch.int8)
    sx = torch.tensor([1 / 3], dtype=torch.float32)
    sw = torch.tensor([3.0])
    outs = {o: float(reference_gemm(xq, wq, sx, sw, recipe=Recipe(out="fp32", bias="none", scale_order=o)))
            for o in ("act_first", "weight_first", "product", "exact")}
    s = np.float32(1 / 3)
    assert outs["act_first"] == float(np.float32(np.float32(3 * s) * np.float32(3)))
    assert outs["weight_first"] == float(np.float32(np.float32(9) * s))
    assert outs["exact"] == float(np.float32(Fraction(float(s)) * 9))


@pytest.mark.parametrize("call,kwargs,match", [
    (Recipe, {"out": "int4"}, "out='int4'"),
    (Recipe, {"scale_order": "w_then_a"}, "scale_order"),
    (Recipe, {"out": "int8", "bias": "after_cast"}, "bias='after_cast'"),
    (Recipe, {"rounding": "stochastic"}, "rounding"),
    (Recipe, {"clamp": "none"}, "clamp"),
])
def test_bad_recipe_arguments_name_the_allowed_values(call, kwargs, match):
    with pytest.raises(InvalidArgument, match=match):
        call(**kwargs)


def test_reference_refuses_bias_or_out_scale_that_does_not_fit_the_recipe():
    xq = torch.ones(2, 4, dtype=torch.int8)
    with pytest.raises(InvalidArgument, match="bias"):
        reference_gemm(xq, xq, torch.ones(2), torch.ones(2), recipe=Recipe(bias="before_cast"))
    with pytest.raises(InvalidArgument, match="out_scale"):
        reference_gemm(xq, xq, torch.ones(2), torch.ones(2), recipe=Recipe(out="int8", bias="none"))
    with pytest.raises(InvalidArgument, match="torch.int8"):
        reference_gemm(xq.float(), xq, torch.ones(2), torch.ones(2), recipe=Recipe(bias="none"))

