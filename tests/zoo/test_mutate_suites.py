"""Minimal suites (greedy, exact, held out), suite files and ``--oracle suite:FILE``, the fuzzing baseline."""

from __future__ import annotations

import json
import textwrap

import pytest

from kernelaudit.errors import InvalidArgument
from kernelaudit.verdict import Status
from kernelaudit.zoo.mutate import suites
from kernelaudit.zoo.oracles import Subject, make_oracle, parse_oracle_names
from kernelaudit.zoo.problems import load_candidate, load_problem
from kernelaudit.zoo.problems.problem_case import ProblemCase

PROBLEM = textwrap.dedent('''
    import torch
    import torch.nn as nn

    N = 12

    class Model(nn.Module):
        def __init__(self):
            super().__init__()

        def forward(self, x):
            return torch.relu(x) * 2.0

    def get_inputs():
        return [torch.rand(N)]

    def get_init_inputs():
        return []
''')
CANDIDATE = textwrap.dedent('''
    import torch
    import torch.nn as nn

    class ModelNew(nn.Module):
        def __init__(self):
            super().__init__()

        def forward(self, x):
            return {body}
''')


def _inputs(*labels):
    return [{"shapes": {"N": 12}, "kind": lab, "seed": 1, "label": lab} for lab in labels]


def _records():
    """A synthetic campaign: inputs a..d; greedy takes a (4 kills) then b or c, but {b, c} kills all 6;
    input e kills everything but the clean candidate fails it (ineligible)."""
    kills = {"m1": "ab", "m2": "ab", "m3": "ac", "m4": "ac", "m5": "b", "m6": "c", "m7": "", "m8": "d"}
    ops = {"m1": "op-x", "m2": "op-y", "m3": "op-x", "m4": "op-y", "m5": "op-x", "m6": "op-y", "m7": "op-x",
           "m8": "op-y"}
    recs = [{"type": "subject", "subject": "s", "problem": "/p/s.py", "suite_inputs": _inputs(*"abcde"),
             "clean_inputs": {"a": 0, "b": 0, "c": 0, "d": 0, "e": 1},
             "variant_inputs": {"v": {"a": 0, "b": 0, "c": 0, "d": 0, "e": 0}}}]
    for m, ks in kills.items():
        recs.append({"type": "mutant", "id": m, "subject": "s", "operator": ops[m], "outcome": "killed",
                     "inputs": {lab: int(lab in ks or lab == "e") for lab in "abcde"}})
    return recs


def test_greedy_exact_and_curve_on_a_synthetic_matrix():
    ms = suites.matrices(_records())
    pm = ms["s"]
    assert pm.eligible == list("abcd") and "e" in pm.ineligible  # the clean candidate fails e
    assert len(pm.killable()) == 7  # m7 is killed by no eligible input
    assert [greedy_cover(pm, k) for k in (1, 2, 3, 4)] == [4, 5, 6, 7]
    best = suites.exact(pm, 2)
    assert pm.covered(best) == 6 and set(best) == {"b", "c"}  # greedy's first pick is not in the best pair
    assert set(suites.exact(pm, 2, solver="enumerate")) == {"b", "c"}
    pts = suites.curve(ms, [1, 2, 3], method="exact")
    assert [(p.killed, p.killable) for p in pts] == [(4, 7), (6, 7), (7, 7)]
    assert not suites.false_rejections(ms, {"s": best}, _records())
    assert suites.false_rejections(ms, {"s": ["e"]}, _records()) == ["s (clean)"]


def greedy_cover(pm, k):
    return pm.covered(suites.greedy(pm, k))


@pytest.mark.parametrize("solver", ["milp", "enumerate"])
def test_among_equally_killing_suites_the_stronger_and_more_general_inputs_win(solver):
    """{x, normal} and {x, large} each kill all three mutants (and kill as many alone); {x, normal}
    wins: normal is the more general kind. Candidate order alone would have picked large."""
    kills = {"m1": ("small", "normal", "large", "x"), "m2": ("normal", "large"), "m3": ("x",)}
    pm = suites.ProblemMatrix("s", "/p/s.py", _inputs("small", "large", "normal", "x"),
                              ["small", "large", "normal", "x"],
                              kills={m: frozenset(ks) for m, ks in kills.items()})
    best = suites.exact(pm, 2, solver=solver)
    assert pm.covered(best) == 3 and set(best) == {"x", "normal"}


def test_held_out_selects_on_some_operators_and_measures_on_the_others():
    ms = suites.matrices(_records())
    a, b = suites.operator_split(["op-x", "op-y"])
    assert a | b == {"op-x", "op-y"} and not a & b
    h = suites.held_out(ms, 1, method="exact")
    assert h["killable"] == 7  # every killable mutant is measured once, by a suite not chosen on it
    assert 0 < h["killed"] <= h["killable"]


def _matrix(subject, inputs, kills, ops=None):
    """A hand-made kill matrix: ``inputs`` (label, kind, shape N or a dict of shape constants),
    ``kills`` mutant -> killing labels."""
    specs = [{"shapes": {"N": n} if isinstance(n, int) else n, "kind": kind, "seed": 1, "label": lab}
             for lab, kind, n in inputs]
    return suites.ProblemMatrix(subject, f"/p/{subject}.py", specs, [lab for lab, _, _ in inputs],
                                kills={m: frozenset(ks) for m, ks in kills.items()},
                                operator=dict(ops or {m: "op" for m in kills}))


def test_input_role_tells_the_own_shape_from_a_boundary_shape():
    pm = _matrix("s", [("r", "rand", 12), ("n", "normal", 12), ("m7", "mixed", 7)], {})
    assert [suites.input_role(pm, lab) for lab in ("r", "n", "m7")] == [
        ("rand", "own"), ("normal", "own"), ("mixed", "boundary")]


def test_role_credit_gives_a_lone_kill_a_whole_point_and_a_shared_kill_a_share():
    pm = _matrix("s", [("n", "normal", 12), ("m", "mixed", 12), ("m7", "mixed", 7)],
                 {"m1": ("m",), "m2": ("n", "m"), "m3": ("n", "m", "m7"), "m4": ()})
    credit = suites.role_credit({"s": pm})
    assert credit == pytest.approx({("mixed", "own"): 1 + 1 / 2 + 1 / 3, ("normal", "own"): 1 / 2 + 1 / 3,
                                    ("mixed", "boundary"): 1 / 3})
    assert suites.role_credit({"s": pm}, {"s": ["m2"]}) == pytest.approx({("normal", "own"): .5, ("mixed", "own"): .5})
    assert suites.role_credit({"s": pm}, {}) == {}  # a subject left out counts none of its mutants


#: Two inputs of one kind at two shapes of one size (12 x 7 and 7 x 12): their kills, strength and
#: size tie, so only the pooled credit of their roles (own shape, boundary shape) tells them apart.
TWINS = [("a", "mixed", {"N": 12, "M": 7}), ("b", "mixed", {"N": 7, "M": 12})]


@pytest.mark.parametrize("solver", ["milp", "enumerate"])
def test_pooled_credit_breaks_a_tie_toward_the_role_that_makes_lone_kills_elsewhere(solver):
    """Both inputs of p kill p's two mutants: its own mutants cannot choose. In q only the boundary
    shape kills one mutant; pooled over both problems, p's suite takes it where the local rule
    (candidate order among equals) takes the first."""
    ms = {"p": _matrix("p", TWINS, {"p1": "ab", "p2": "ab"}), "q": _matrix("q", TWINS, {"q1": "b", "q2": "ab"})}
    assert suites.exact(ms["p"], 1, solver="enumerate") == ["a"]
    credit = suites.role_credit(ms)
    assert suites.exact(ms["p"], 1, solver=solver, credit=credit) == ["b"]
    assert suites.choose(ms, 1) == {"p": ["b"], "q": ["b"]}


@pytest.mark.parametrize("solver", ["milp", "enumerate"])
def test_among_equal_sets_the_pooled_rule_spans_two_shapes_before_taking_stronger_inputs(solver):
    """Every input kills the one mutant. n and r (normal and rand, the most general kinds) share the
    problem's shape; the pair takes one of them and m7 (mixed, at a boundary shape): two shapes reach
    more of a kernel's tails. The local rule (strength alone) takes n and r."""
    pm = _matrix("s", [("n", "normal", 12), ("r", "rand", 12), ("m7", "mixed", 7)], {"m1": ("n", "r", "m7")})
    chosen = suites.exact(pm, 2, solver=solver, credit={})
    assert set(chosen) == {"n", "m7"}
    assert set(suites.exact(pm, 2, solver=solver)) == {"n", "r"}


@pytest.mark.parametrize("solver", ["milp", "enumerate"])
def test_then_the_inputs_that_kill_more_on_their_own_before_the_largest(solver):
    """{big, a} and {a, b} kill both mutants at two shapes each; a and b kill both on their own, big
    (the largest input) one: strength comes before size. Once big kills as much, size decides."""
    pm = _matrix("s", [("big", "mixed", 20), ("a", "mixed", 7), ("b", "mixed", 5)],
                 {"m1": ("big", "a", "b"), "m2": ("a", "b")})
    assert set(suites.exact(pm, 2, solver=solver, credit={})) == {"a", "b"}
    pm.kills["m2"] = frozenset({"big", "a", "b"})
    assert "big" in suites.exact(pm, 2, solver=solver, credit={})


@pytest.mark.parametrize("solver", ["milp", "enumerate"])
def test_then_a_set_holding_an_input_with_a_tight_bound_before_stronger_inputs(solver):
    """As in a BatchNorm model in training mode: {n3, s7} and {n7, s3} both kill all four mutants
    with a strata input at two shapes, and n3 + s7 kill more on their own; but only n7's error
    bound is tight (a batch of 3 leaves the model ill-conditioned), and faults smaller than a loose
    bound pass it: the set holding the sharp input wins. Without bounds, strength decides."""
    pm = _matrix("s", [("n3", "normal", 29), ("s7", "strata", 7), ("n7", "normal", 7), ("s3", "strata", 29)],
                 {"m1": ("n3", "n7"), "m2": ("s3", "s7"), "m3": ("n3", "s3"), "m4": ("n3", "s7", "s3")})
    assert set(suites.exact(pm, 2, solver=solver, credit={})) == {"n3", "s7"}
    pm.sharp = suites._sharp(pm.eligible, {"n3": 1.13, "s7": 0.204, "n7": 0.0044, "s3": 0.193})
    assert pm.sharp == {"n7"}
    assert set(suites.exact(pm, 2, solver=solver, credit={})) == {"n7", "s3"}


def test_sharp_inputs_are_those_within_the_factor_of_the_tightest_bound():
    assert suites._sharp(["a", "b", "c"], {"a": 0.004, "b": 0.2, "c": 0.016}) == {"a", "c"}
    assert suites._sharp(["a", "b"], None) == {"a", "b"} == suites._sharp(["a", "b"], {})   # no bounds: neutral


def test_an_input_the_model_bounds_nowhere_is_not_sharp_where_a_sibling_has_a_bound():
    """98_KLDivLoss: only ``rand`` inputs have a finite reference, so only they get a bound; the
    others (NaN outputs, judged exactly) must not pass for sharp, or the suite may hold none
    that sees a fault."""
    assert suites._sharp(["a", "b", "x"], {"a": 0.004, "b": 0.2}) == {"a"}
    assert suites._sharp(["rand", "normal", "strata"], {"rand": 4e-6}) == {"rand"}


def test_a_suite_of_a_problem_without_training_mutants_holds_its_one_bounded_input():
    """No training mutant to choose by: the tie-breaks decide, and a set holding the one input
    with a finite reference (and so a bound) beats the strata input and two shapes without one."""
    inputs = [{"label": "rand", "kind": "rand", "shapes": {"n": 256}},
              {"label": "normal", "kind": "normal", "shapes": {"n": 256}},
              {"label": "strata251", "kind": "strata", "shapes": {"n": 251}},
              {"label": "normal257", "kind": "normal", "shapes": {"n": 257}}]
    labels = [i["label"] for i in inputs]
    pm = suites.ProblemMatrix("kl", "kl", inputs, labels, {}, sharp=suites._sharp(labels, {"rand": 4e-6}))
    pm.kills.update({"m1": frozenset({"rand"}), "m2": frozenset({"rand"})})
    pm.operator.update({"m1": "test-op", "m2": "test-op"})
    chosen = suites.exact(pm, 2, [], credit={})
    assert "rand" in chosen and pm.covered(chosen, ["m1", "m2"]) == 2


@pytest.mark.parametrize("solver", ["milp", "enumerate"])
def test_pooled_credit_never_outranks_killing_more_mutants(solver):
    pm = _matrix("s", [("n", "normal", 12), ("m", "mixed", 12)], {"m1": "n", "m2": "n", "m3": "m"})
    assert suites.exact(pm, 1, solver=solver, credit={("mixed", "own"): 100.0}) == ["n"]


def test_held_out_reports_each_split_in_both_directions_and_the_least():
    ms = suites.matrices(_records())
    h = suites.held_out(ms, 1, method="exact", salts=("x", "y", "z"))
    assert [(s["salt"], s["direction"]) for s in h["splits"]] == [
        (salt, d) for salt in "xyz" for d in ("1->2", "2->1")]
    for s in h["splits"]:
        assert s["rate"] == pytest.approx(s["killed"] / s["killable"])
    worst = min(h["splits"], key=lambda s: s["rate"])
    assert h["min_rate"] == worst["rate"] and h["min_split"] == f"{worst['salt']} {worst['direction']}"
    assert h["all_killed"] == sum(s["killed"] for s in h["splits"])
    assert h["all_killable"] == sum(s["killable"] for s in h["splits"]) == 3 * 7
    # the keys the report reads: the first salt's split, both directions pooled
    first = h["splits"][:2]
    assert (h["killed"], h["killable"]) == (sum(s["killed"] for s in first), sum(s["killable"] for s in first))
    assert sorted(sum(h["operators"], [])) == ["op-x", "op-y"]
    assert {x["k"] for x in suites.summary(_records())["held_out"]} == {1, 2}
    assert all("splits" in x and "min_rate" in x for x in suites.summary(_records())["held_out"])


def test_held_out_takes_the_pooled_credit_from_the_training_operators_only():
    """Trained on op-x: only the boundary shape (b) kills q's op-x mutant, so p (whose op-x mutant
    both inputs kill) takes b and kills its op-y mutant, which only b kills. Had the credit counted
    the held-out op-y mutants too (three of q's, the own shape alone kills them), p would have taken
    a: killed 0."""
    ms = {"p": _matrix("p", TWINS, {"px": "ab", "py": "b"}, {"px": "op-x", "py": "op-y"}),
          "q": _matrix("q", TWINS, {"qx": "b", "qy1": "a", "qy2": "a", "qy3": "a"},
                       {"qx": "op-x", "qy1": "op-y", "qy2": "op-y", "qy3": "op-y"})}
    h = suites.held_out(ms, 1, method="exact", salts=("suites",))
    on_y = [s for s in h["splits"] if s["killable"] == 4]  # measured on op-y: py and q's three
    on_x = [s for s in h["splits"] if s["killable"] == 2]  # measured on op-x: px and qx
    assert len(on_y) == len(on_x) == 1
    assert on_y[0]["killed"] == 1  # py, by b
    assert on_x[0]["killed"] == 1  # px, by a (trained on op-y, the own shape carries the credit); qx missed


def test_leave_one_operator_out_measures_each_operator_on_suites_chosen_on_the_others():
    ms = suites.matrices(_records())
    loo = suites.leave_one_operator_out(ms, 2)
    assert set(loo["operators"]) == {"op-x", "op-y"}
    assert loo["killable"] == sum(v[1] for v in loo["operators"].values()) == 7
    assert 0 < loo["killed"] <= loo["killable"] and loo["rate"] == pytest.approx(loo["killed"] / 7)
    with pytest.raises(InvalidArgument, match="tie_break"):
        suites.held_out(ms, 2, method="exact", tie_break="oracle")


def test_suite_file_round_trip_and_replay(tmp_path):
    problem_path = tmp_path / "relu2.py"
    problem_path.write_text(PROBLEM)
    good, bad = tmp_path / "good.py", tmp_path / "bad.py"
    good.write_text(CANDIDATE.format(body="torch.clamp(x, min=0) + torch.clamp(x, min=0)"))
    bad.write_text(CANDIDATE.format(body="x * 2.0"))  # drops the negative branch: passes torch.rand inputs
    recs = _records()
    recs[0]["problem"] = str(problem_path)
    specs = [{"shapes": {"N": 12}, "kind": "rand", "seed": 42}, {"shapes": {"N": 7}, "kind": "negative", "seed": 1},
             {"shapes": {"N": 12}, "kind": "normal", "seed": 3}, {"shapes": {"N": 5}, "kind": "rand", "seed": 1},
             {"shapes": {"N": 12}, "kind": "large", "seed": 1}]
    from kernelaudit.zoo.oracles.suite import InputSpec

    recs[0]["suite_inputs"] = [{**s, "label": lab} for s, lab in zip(specs, "abcde")]
    out = tmp_path / "suites.json"
    path, n = suites.export_suites(recs, out, k=2)
    data = json.loads(out.read_text())
    assert n == 1 and data["format"] == "kernelaudit-suite/1" and data["k"] == 2
    entry = data["problems"]["relu2"]
    assert [i["kind"] for i in entry["inputs"]] == ["negative", "normal"]  # b and c, regenerable
    assert InputSpec.from_json(entry["inputs"][0]).label == entry["inputs"][0]["label"]

    problem = load_problem(problem_path)
    case = ProblemCase.make(problem)
    oracle = make_oracle(f"suite:{out}")
    assert oracle.name.startswith("suite:")
    v_bad = oracle.judge(case, Subject(load_candidate(bad)))
    assert v_bad.status is Status.WRONG and "negative (N=7) seed 1" in v_bad.message
    assert make_oracle(f"suite:{out}").judge(case, Subject(load_candidate(good))).status is Status.OK
    # the official check passes the faulty candidate: the suite is what catches it
    assert make_oracle("kernelbench").judge(case, Subject(load_candidate(bad))).status is Status.OK

    other = tmp_path / "other.py"
    other.write_text(PROBLEM.replace("* 2.0", "* 3.0"))
    v = make_oracle(f"suite:{out}").judge(ProblemCase.make(load_problem(other)), Subject(load_candidate(bad)))
    assert v.status is Status.SKIPPED and "not in" in v.message  # never a silent pass


def test_suite_oracle_names_a_bad_file(tmp_path):
    with pytest.raises(InvalidArgument, match="suite:.*no such file"):
        make_oracle(f"suite:{tmp_path / 'missing.json'}")
    (tmp_path / "x.json").write_text(json.dumps({"format": "other"}))
    with pytest.raises(InvalidArgument, match="allowed is 'kernelaudit-suite/1'"):
        make_oracle(f"suite:{tmp_path / 'x.json'}")
    assert parse_oracle_names(["bound", "fuzz-baseline"]) == ["bound", "fuzz-baseline"]


def test_fuzz_baseline_catches_a_fault_and_rejects_a_correct_kernel_on_nan(tmp_path):
    problem_path = tmp_path / "relu2.py"
    problem_path.write_text(PROBLEM.replace("N = 12", "N = 256"))  # room for the injected special values
    good, bad = tmp_path / "good.py", tmp_path / "bad.py"
    good.write_text(CANDIDATE.format(body="torch.relu(x) * 2.0"))
    bad.write_text(CANDIDATE.format(body="x * 2.0"))
    case = ProblemCase.make(load_problem(problem_path))
    oracle = make_oracle("fuzz-baseline")
    v = oracle.judge(case, Subject(load_candidate(bad)))
    assert v.status is Status.WRONG and "fuzz fixed normal" in v.message
    # a correct kernel propagates the NaN the recipe injects: the recipe's NaN check rejects it (its
    # documented false rejection, counted in scores)
    v = oracle.judge(case, Subject(load_candidate(good)))
    assert v.status is Status.WRONG and "NaN" in v.message


def _relu_subject(tmp_path):
    from kernelaudit.zoo.mutate.subjects import Subject as MutSubject, model_as_candidate

    problem_path = tmp_path / "relu2.py"
    problem_path.write_text(PROBLEM)
    return MutSubject("kb/level0/relu2", "torch", problem_path, model_as_candidate(PROBLEM), ("ModelNew",))


def _check_per_input_records(recs):
    subj = [r for r in recs if r["type"] == "subject"][0]
    mutant = [r for r in recs if r["type"] == "mutant"][0]
    assert mutant["operator"] == "call-dropped" and mutant["outcome"] == "survived"  # relu(x) * 2 -> x * 2
    assert mutant["oracles"] == {"kernelbench": "survived"}  # torch.rand inputs: the official check misses it
    assert set(subj["clean_inputs"].values()) == {0} and len(subj["suite_inputs"]) >= 5
    assert set(mutant["inputs"]) == {s["label"] for s in subj["suite_inputs"]}
    # relu(x) * 2 is exact in float32: judged exactly, no bound recorded (the suites count it 0)
    assert subj["clean_bounds"] == {}
    killers = {lab for lab, k in mutant["inputs"].items() if k}
    assert killers and all(not lab.startswith("rand ") for lab in killers)  # only signed inputs kill it
    assert {"load", "equivalence", "oracles", "inputs"} <= set(mutant["timing"])
    ms = suites.matrices(recs)
    assert ms[subj["subject"]].covered(suites.exact(ms[subj["subject"]], 1)) == 1


def test_worker_records_which_input_kills_each_mutant(tmp_path):
    """The per-input kill matrix a suite is chosen from: every suite-candidate input judged alone."""
    import pickle

    from kernelaudit.zoo.mutate.campaign import Unit, UnitTask
    from kernelaudit.zoo.mutate.generate import enumerate_mutants
    from kernelaudit.zoo.mutate.operators import get_operators
    from kernelaudit.zoo.mutate.worker import Job

    subject = _relu_subject(tmp_path)
    ids = [m.id for m in enumerate_mutants([subject], get_operators("call-dropped"))]
    events = []
    job = {"subject": {"id": subject.id, "kind": "torch", "problem_path": str(subject.problem_path),
                       "source": subject.source, "scope": ["ModelNew"]},
           "mutants": ids[:1], "columns": ["kernelbench"], "device": "cpu", "small": True, "timeout_s": 60,
           "check_clean": True, "scratch": str(tmp_path / "scratch"), "per_input": True}
    Job(job, events.append).run()
    _check_per_input_records([e for e in events if e["type"] != "start"])
    task = pickle.loads(pickle.dumps(UnitTask(Unit(subject, ids, True), {"log": "/nonexistent/w.log"})))
    assert task.unit.subject == subject  # a batch travels to another host whole (--executor ray)


MATMUL_PROBLEM = textwrap.dedent('''
    import torch
    import torch.nn as nn

    N = 16

    class Model(nn.Module):
        def __init__(self):
            super().__init__()

        def forward(self, a, b):
            return a @ b

    def get_inputs():
        return [torch.rand(N, N), torch.rand(N, N)]

    def get_init_inputs():
        return []
''')


def test_input_bounds_give_each_rounded_input_its_bound_over_its_output(tmp_path):
    from kernelaudit.zoo.mutate.worker import input_bounds, suite_cases

    path = tmp_path / "mm.py"
    path.write_text(MATMUL_PROBLEM)
    cases = suite_cases(load_problem(path), "cpu", True)
    bounds = input_bounds(cases)
    assert set(bounds) == {spec.label for spec, _, _ in cases}   # every input has a derived bound
    assert all(0 < b < 1e-3 for b in bounds.values())             # float32 rounding of 16-term sums
