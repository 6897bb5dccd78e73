"""conform on CUDA: the Triton kernel and the torch path agree bit for bit with the CPU
reference, every planted fault is caught, power-of-two scales make every scale order
agree at real sizes (skipped without CUDA)."""

from __future__ import annotations

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


@pytest.fixture(scope="module")
def cases():
    from kernelaudit.conform.cases import suite

    return suite(((100, 200, 320),))


def test_triton_and_torch_path_match_the_reference_bit_for_bit_on_cuda(cases):
    from kernelaudit.conform.conformance import false_rejections

    counts = false_rejections(cases, device="cuda")
    assert all(c["bit_exact"] == 0 for c in counts.values()), counts


def test_bit_exact_oracle_catches_every_fault_on_cuda(cases):
    from kernelaudit.conform.conformance import blindness

    rows = blindness(cases, device="cuda")
    assert sum(r.changed_cases for r in rows) > 0  # faults that change no case at this shape cannot be seen
    assert all(r.caught["bit_exact"] == r.changed_cases for r in rows), \
        [(r.fault, r.implementation, r.changed_cases, r.caught["bit_exact"]) for r in rows]


@pytest.mark.parametrize("m", [1, 17, 300])
def test_pow2_scales_make_every_scale_order_agree_at_k4096_on_cuda(m):
    from kernelaudit.conform.cases import Case
    from kernelaudit.conform.pow2 import agreement
    from kernelaudit.conform.recipe import Recipe

    for recipe in (Recipe(out="bf16"), Recipe(out="fp32", bias="none"), Recipe(out="int8")):
        a = agreement(Case(m, 512, 4096, recipe, scales="pow2", seed=m), device="cuda", exact_too=False)
        assert a.bit_identical, a
