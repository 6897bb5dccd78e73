"""The torch path and the Triton kernel (interpreted on the CPU) against the reference:
bit for bit on every recipe, and zero false rejections by any check."""

from __future__ import annotations

import pytest
import torch

from kernelaudit.conform.cases import Case, make_inputs
from kernelaudit.conform.conformance import false_rejections, judge, run_case
from kernelaudit.conform.recipe import Recipe
from kernelaudit.errors import InvalidArgument

RECIPES = [Recipe(out=o, scale_order=s, bias=b) for o in ("bf16", "fp16", "fp32") for s in ("act_first", "weight_first",
           "product") for b in ("none", "before_cast", "after_cast")] + [
    Recipe(out="int8", bias=b, rounding=r, clamp=c) for b in ("none", "before_cast") for r in ("half_even", "half_away")
    for c in ("symmetric", "full")]


@pytest.mark.parametrize("impl", ["torch", "triton"])
def test_every_recipe_matches_the_reference_bit_for_bit_at_ragged_shapes(impl):
    bad = []
    for i, recipe in enumerate(RECIPES):
        case = Case(17, 33, 40, recipe, ("per_row", "per_tensor")[i % 2], ("per_row", "per_tensor")[i // 2 % 2],
                    ("free", "pow2")[i % 3 == 0], seed=i)
        v = judge(*run_case(case, impl), case, impl)
        if not v.ok:
            bad.append(v.explain())
    assert bad == []


def test_correct_implementations_are_never_rejected_by_any_check(small_suite):
    counts = false_rejections(small_suite)
    assert counts == {impl: {c: 0 for c in counts[impl]} for impl in ("torch", "triton")}


def test_free_scales_in_different_orders_disagree_somewhere_but_each_matches_its_own_reference():
    case = Case(32, 48, 64, Recipe(out="fp32", bias="none"), seed=3)
    inp = make_inputs(case)
    outs = {}
    for order in ("act_first", "weight_first"):
        c = Case(32, 48, 64, Recipe(out="fp32", bias="none", scale_order=order), seed=3)
        got, ref = run_case(c, "triton", inputs=inp)
        assert judge(got, ref, c, "triton").ok
        outs[order] = got
    assert not torch.equal(outs["act_first"], outs["weight_first"])


def test_verdict_names_shape_dtype_metric_and_first_bad_index_as_python_int():
    case = Case(4, 8, 16, Recipe(out="bf16", bias="none"))
    got, ref = run_case(case, "torch")
    got = got.clone()
    got.view(-1)[13] = got.view(-1)[13] * 2 + 1
    v = judge(got, ref, case, "torch")
    assert not v.ok and v.first_bad_index == 13 and type(v.first_bad_index) is int
    text = v.explain()
    for part in ("bf16", "(4, 8)", "signed ulp distance", "tolerance 0", "flat index 13", "row 1, column 5"):
        assert part in text


@pytest.mark.parametrize("impl", ["torch", "triton"])
def test_kernels_refuse_the_reference_only_exact_order(impl):
    from kernelaudit.conform.conformance import implementation

    x = torch.ones(2, 8, dtype=torch.int8)
    with pytest.raises(InvalidArgument, match="scale_order='exact'"):
        implementation(impl)(x, x, torch.ones(2), torch.ones(2), recipe=Recipe(scale_order="exact", bias="none"))


def test_torchao_int_scaled_matmul_matches_its_recipe_bit_for_bit_where_installed(small_suite):
    pytest.importorskip("torchao.kernel.intmm")
    from kernelaudit.conform.conformance import supports

    cases = [c for c in small_suite if supports("torchao", c)]
    assert len(cases) >= 6
    assert false_rejections(cases, ("torchao",))["torchao"]["bit_exact"] == 0


def test_bit_exact_against_the_ideal_instead_of_the_matching_variant_rejects_correct_kernels(small_suite):
    counts = false_rejections(small_suite, ("torch",), against="exact")["torch"]
    assert counts["bit_exact"] > 0  # why the oracle compares with the recipe's own variant
    assert counts["allclose_1e-1"] == 0


def test_torch_path_survives_the_int_mm_cpu_bug_with_a_degenerate_stride_operand():
    # torch 2.13 CPU: _int_mm(a, b) with b [1, N] of strides (1, 1) returns uninitialized memory
    case = Case(2, 11, 1, Recipe(out="fp32", bias="none"), scales="pow2", seed=12)
    v = judge(*run_case(case, "torch"), case, "torch")
    assert v.ok, v.explain()
