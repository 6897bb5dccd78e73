"""Suite inputs: the composite value kind ``strata`` (every value kind in one input, by blocks of
rows), and candidates run with uninitialised memory poisoned."""

from __future__ import annotations

import torch

from kernelaudit.zoo.oracles.values import (LARGE_EXP, MIXED_EXP, SMALL_EXP, STRATA_KINDS, VALUE_KINDS, _generator,
                                            draw)


def test_strata_holds_each_value_kind_in_its_block_of_rows():
    v = draw("strata", torch.empty(12, 64), _generator("cpu", 3))
    base = torch.randn(12, 64, generator=_generator("cpu", 3), dtype=torch.float64)
    assert STRATA_KINDS == VALUE_KINDS + ("rand",) == ("normal", "negative", "large", "small", "mixed", "rand")
    assert torch.equal(v[0:2], base[0:2].float())                       # normal
    assert torch.equal(v[2:4], (-base[2:4].abs()).float())             # negative
    assert torch.equal(v[4:6], (base[4:6] * 2.0**LARGE_EXP).float())   # large
    assert torch.equal(v[6:8], (base[6:8] * 2.0**SMALL_EXP).float())   # small
    ratio = (v[8:10].double() / base[8:10]).abs().log2()                # mixed: 2^k, |k| <= 16
    assert ratio.max() <= MIXED_EXP + 1e-6 and ratio.min() >= -MIXED_EXP - 1e-6 and ratio.std() > 1
    rand = v[10:12]                                                     # KernelBench's uniform [0, 1)
    assert (rand >= 0).all() and (rand < 1).all() and rand.std() > 0.1


def test_strata_rows_span_leading_dims_until_every_kind_has_one():
    """A batch shorter than the kinds: rows are the slices along the first two dims (3 x 4 here),
    so every kind still gets whole last-dim rows; with fewer elements than kinds, single elements."""
    v = draw("strata", torch.empty(3, 4, 5), _generator("cpu", 3))
    rows = v.reshape(12, 5)
    assert (rows[2:4] <= 0).all() and rows[4:6].abs().min() > 1 and rows[6:8].abs().max() < 1e-9
    assert ((rows[10:12] >= 0) & (rows[10:12] < 1)).all()
    wide = draw("strata", torch.empty(1, 6, 3), _generator("cpu", 3))
    assert (wide[0, 1] <= 0).all() and wide[0, 2].abs().max() > 100 and wide[0, 3].abs().max() < 1e-9
    tiny = draw("strata", torch.empty(2, 2), _generator("cpu", 3)).flatten()   # blocks of 4 // 6: one each of
    assert tiny[0] <= 0 and tiny[1].abs() > 1 and 0 <= tiny[3] < 1            # negative, large, mixed, rand
    scalar = draw("strata", torch.empty(()), _generator("cpu", 3))
    assert torch.equal(scalar, torch.randn((), generator=_generator("cpu", 3), dtype=torch.float64).float())
    assert draw("strata", torch.empty(0, 5), _generator("cpu", 3)).shape == (0, 5)


def test_the_other_kinds_draw_the_same_values_as_before_strata():
    """The refactor into ``_scaled`` keeps every earlier kind's values (suite files replay them)."""
    like = torch.empty(4, 6)
    base = torch.randn(4, 6, generator=_generator("cpu", 1), dtype=torch.float64)
    assert torch.equal(draw("negative", like, _generator("cpu", 1)), (-base.abs()).float())
    g = _generator("cpu", 1)
    torch.randn(4, 6, generator=g, dtype=torch.float64)
    e = torch.randint(-MIXED_EXP, MIXED_EXP + 1, (4, 6), generator=g)
    assert torch.equal(draw("mixed", like, _generator("cpu", 1)), (base * torch.pow(2.0, e.double())).float())


PROBLEM = '''\
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x) + 0.5


B = 6
D = 8


def get_inputs():
    return [torch.randn(B, D)]


def get_init_inputs():
    return []
'''


def test_suite_candidates_hold_strata_at_the_own_and_boundary_shapes_unless_a_kind_is_skipped(tmp_path):
    from kernelaudit.zoo.oracles.suite import candidate_specs
    from kernelaudit.zoo.problems import load_problem

    path = tmp_path / "relu_plus.py"
    path.write_text(PROBLEM)
    problem = load_problem(path)
    specs = candidate_specs(problem)
    strata = [s for s in specs if s.kind == "strata"]
    own = specs[0].shapes
    assert any(s.shapes == own for s in strata) and any(s.shapes != own for s in strata)
    case = strata[0].case(problem)
    assert (case.inputs[0] <= 0).any() and case.inputs[0].abs().max() > 100  # negative and large rows
    assert not [s for s in candidate_specs(problem, strata=False) if s.kind == "strata"]
    path.write_text(PROBLEM + "\nVALUE_KINDS_SKIP = {'large': 'overflows'}\n")
    assert not [s for s in candidate_specs(load_problem(path)) if s.kind == "strata"]


UNWRITTEN = '''\
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        out[: x.shape[0] // 2] = torch.relu(x[: x.shape[0] // 2]) + 0.5  # the tail is never written
        return out
'''


def test_a_suite_input_runs_the_candidate_with_uninitialised_memory_poisoned(tmp_path):
    """Suite inputs (the campaign's kill matrix and a replayed suite file) run the candidate as a
    PoisonedSubject: an output tail it never writes is NaN on every input, whatever the allocator
    hands back; a correct candidate still passes."""
    import math

    from kernelaudit.verdict import Status
    from kernelaudit.zoo.oracles import Subject
    from kernelaudit.zoo.oracles.suite import InputSpec, PoisonedSubject, SuiteOracle, write_suite_file
    from kernelaudit.zoo.problems import ProblemCase, load_problem
    from kernelaudit.zoo.problems.loader import load_candidate

    (tmp_path / "relu_plus.py").write_text(PROBLEM)
    (tmp_path / "unwritten.py").write_text(UNWRITTEN)
    (tmp_path / "right.py").write_text(PROBLEM.replace("class Model(", "class ModelNew("))
    problem = load_problem(tmp_path / "relu_plus.py")
    case = ProblemCase.make(problem)
    got = PoisonedSubject(Subject(load_candidate(tmp_path / "unwritten.py")))(case)[0]
    assert all(math.isnan(v) for v in got[3:].flatten().tolist()) and not got[:3].isnan().any()
    suite = write_suite_file(tmp_path / "suite.json", {problem.name: {
        "path": str(tmp_path / "relu_plus.py"), "inputs": [InputSpec.make(dict(case.shapes), "normal", 1)]}}, k=1)
    oracle = SuiteOracle(suite)
    assert oracle.judge(case, Subject(load_candidate(tmp_path / "unwritten.py"))).status is Status.WRONG
    assert oracle.judge(ProblemCase.make(problem), Subject(load_candidate(tmp_path / "right.py"))).status is Status.OK


def test_the_pooled_rule_takes_a_strata_input_among_equally_killing_sets_by_enumeration_and_ilp():
    from kernelaudit.zoo.mutate import suites
    from kernelaudit.zoo.oracles.values import STRATA

    assert suites.STRATA_KIND == STRATA
    shapes = {"B": 4}
    inputs = [{"label": lab, "kind": kind, "shapes": shapes}
              for lab, kind in (("r", "rand"), ("n", "normal"), ("s", "strata"), ("m", "mixed"))]
    pm = suites.ProblemMatrix("t", "t", inputs, ["r", "n", "s", "m"],
                              kills={"a": frozenset({"r", "s"}), "b": frozenset({"n", "m"}), "c": frozenset({"m"})})
    credit = {("mixed", "own"): 5.0, ("rand", "own"): 3.0}  # credit alone would take r and m
    for solver in ("enumerate", "milp"):
        assert sorted(suites.exact(pm, 2, credit=credit, solver=solver)) == ["m", "s"], solver
    pm.kills["d"] = frozenset({"r", "n"})  # now only {r, m} kills all four: kills come first
    for solver in ("enumerate", "milp"):
        assert sorted(suites.exact(pm, 2, credit=credit, solver=solver)) == ["m", "r"], solver


def test_then_the_set_with_the_largest_input_by_enumeration_and_ilp():
    """No strata input to take: among sets killing as many, the one whose largest input is largest
    (more programs and loop iterations), where credit and strength cannot tell and candidate order
    would take the small one."""
    from kernelaudit.zoo.mutate import suites

    inputs = [{"label": "own", "kind": "normal", "shapes": {"B": 8, "D": 64}},
              {"label": "tiny", "kind": "mixed", "shapes": {"B": 7, "D": 11}},
              {"label": "past", "kind": "mixed", "shapes": {"B": 9, "D": 65}}]
    pm = suites.ProblemMatrix("t", "t", inputs, ["own", "tiny", "past"],
                              kills={"a": frozenset({"own"}), "b": frozenset({"tiny", "past"})})
    assert suites.input_size(pm, "past") == 9 * 65
    credit = {("mixed", "boundary"): 1.0}  # both boundary inputs have this role: credit cannot tell
    for solver in ("enumerate", "milp"):
        assert sorted(suites.exact(pm, 2, credit=credit, solver=solver)) == ["own", "past"], solver


ELU = (PROBLEM.replace("torch.relu(x) + 0.5", "torch.nn.functional.elu(x)")
       .replace("B = 6", "B = 12").replace("D = 8", "D = 16"))


def test_a_strata_input_bounds_each_block_by_its_own_magnitude(tmp_path):
    """ELU through exp(x) - 1 loses every negative value below 2^-24 (their fp32 exp is 1): wrong on
    the own-shape ``small`` input. In a ``strata`` input those values sit in rows beside rows of
    2^12, and a floor at the whole output's rms hid the error; each block's own rms shows it, and
    the correct ELU still passes every block."""
    from dataclasses import replace

    from kernelaudit.verdict import Status
    from kernelaudit.zoo.oracles.base import judge_or_unjudged
    from kernelaudit.zoo.oracles import Subject
    from kernelaudit.zoo.oracles.suite import InputSpec, PoisonedSubject, default_comparator
    from kernelaudit.zoo.problems import load_problem
    from kernelaudit.zoo.problems.loader import load_candidate

    (tmp_path / "elu.py").write_text(ELU)
    (tmp_path / "exp_minus_one.py").write_text(ELU.replace("class Model(", "class ModelNew(").replace(
        "torch.nn.functional.elu(x)", "torch.where(x > 0, x, torch.exp(x) - 1)"))
    (tmp_path / "right.py").write_text(ELU.replace("class Model(", "class ModelNew("))
    problem = load_problem(tmp_path / "elu.py")
    spec = InputSpec.make({"B": 12, "D": 16}, "strata", 3)
    case = spec.case(problem)
    assert case.block_floor and not InputSpec.make({"B": 12, "D": 16}, "normal", 1).case(problem).block_floor
    compare = default_comparator()

    def judge(c, name):
        return judge_or_unjudged(compare, c, PoisonedSubject(Subject(load_candidate(tmp_path / name)))).status

    assert judge(case, "exp_minus_one.py") is Status.WRONG
    assert judge(spec.case(problem), "right.py") is Status.OK
    whole = replace(spec.case(problem), block_floor=False, _cache={})   # the floor of the whole output
    assert judge(whole, "exp_minus_one.py") is Status.OK


def test_block_rms_is_the_rms_of_the_kind_block_each_element_was_drawn_in():
    from kernelaudit.zoo.oracles.values import block_rms, strata_rows

    v = draw("strata", torch.empty(12, 4), _generator("cpu", 5)).double()
    got = block_rms(v).reshape(12, 4)
    for i in range(6):  # two rows a kind
        block = v[2 * i:2 * i + 2]
        assert torch.allclose(got[2 * i:2 * i + 2], block.pow(2).mean().sqrt().expand(2, 4))
    assert got[4:6].min() > 1e3 * got[0:2].max() and got[6:8].max() < 1e-9   # large and small blocks
    assert strata_rows((3, 10, 6)) == 30 and strata_rows((7, 5)) == 7 and strata_rows((2, 2)) == 4
    assert block_rms(torch.empty(0, 3)).numel() == 0
