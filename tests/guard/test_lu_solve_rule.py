"""The shipped rule ``known_faults/batched_lu_solve.json`` on the CPU: det's backward solves
with the forward's LU factors through ``linalg_lu_solve`` (on the H200 its batched cuBLAS
call fails past 2^31 - 8 matrices, the forward already in pieces under the det rule);
under the rule, its threshold scaled down, the solve runs in pieces of the batch and the
gradient is the bare one bit for bit, as is a direct ``linalg.lu_solve`` call's answer."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from kernelaudit.guard.rules import load_rules
from kernelaudit.guard.intercept import guarding

KNOWN = Path(__file__).resolve().parents[2] / "src/kernelaudit/guard/known_faults"


def _on_cpu(file: str, op: str, at_least: int):
    rules = [dataclasses.replace(r, device="cpu", versions={}, when={**r.when, "at_least": at_least})
             for r in load_rules(KNOWN / file) if r.op == op]
    assert rules, f"no {op} rule in {file}"
    return rules


def test_det_backward_under_the_det_and_lu_solve_rules_is_split_and_bitwise_the_bare_gradient():
    g = torch.Generator().manual_seed(3)
    x = torch.rand(3000, 3, 3, generator=g) - 0.5
    go = torch.rand(3000, generator=g)
    bare = x.clone().requires_grad_()
    torch.linalg.det(bare).backward(go)
    rules = (_on_cpu("full_grid_batched_lu_chunk_cat.json", "linalg.det", 1000)
             + _on_cpu("batched_lu_solve.json", "linalg.lu_solve", 1000))
    xg = x.clone().requires_grad_()
    with guarding("fix", rules=rules, native=False) as engine:
        torch.linalg.det(xg).backward(go)
    st = engine.stats()
    assert st.fixed == 2 and st.refused == 0, st.summary()      # the forward and the solve
    assert torch.equal(xg.grad, bare.grad)


def test_a_direct_lu_solve_past_the_scaled_threshold_equals_the_bare_call():
    g = torch.Generator().manual_seed(4)
    a = torch.rand(700, 4, 4, generator=g) + 4 * torch.eye(4)
    b = torch.rand(700, 4, 2, generator=g)
    lu, piv = torch.linalg.lu_factor(a)
    want = torch.linalg.lu_solve(lu, piv, b)
    with guarding("fix", rules=_on_cpu("batched_lu_solve.json", "linalg.lu_solve", 2000), native=False) as engine:
        got = torch.linalg.lu_solve(lu, piv, b)
    assert engine.stats().fixed == 1, engine.stats().summary()
    assert torch.equal(got, want)
