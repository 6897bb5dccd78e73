"""Oracle building blocks: parsing --oracle, ULP arithmetic, the error bound, KernelBench's seeds."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kernelaudit.errors import InvalidArgument
from kernelaudit.zoo.oracles import ORACLE_NAMES, Subject, make_oracle, parse_oracle_names
from kernelaudit.zoo.oracles.bound import BoundOracle, error_bounds
from kernelaudit.zoo.oracles.kernelbench import KernelBenchOracle, trial_seeds
from kernelaudit.zoo.oracles.shapes import prime_below, shape_variants
from kernelaudit.zoo.oracles.ulp import UlpOracle, spacing, ulp_distance
from kernelaudit.zoo.problems import CORPUS_DIR, ProblemCase, load_problem
from kernelaudit.verdict import Status

pytestmark = pytest.mark.usefixtures("triton_interpreter")


# -- parsing ---------------------------------------------------------------------------


def test_oracle_sequence_parses_in_order_expands_strongest_and_deduplicates():
    assert parse_oracle_names("tamper, bound,tamper") == ["tamper", "bound"]
    assert parse_oracle_names("strongest") == ["bound", "shapes", "values", "tamper", "static"]
    assert make_oracle("bound").name == "bound"
    assert make_oracle("bound,tamper").name == "bound,tamper"


@pytest.mark.parametrize(
    "call, kwargs, message",
    [
        (parse_oracle_names, {"spec": "bogus"}, "Cannot have --oracle='bogus': allowed values are kernelbench, assert-close"),
        (parse_oracle_names, {"spec": ""}, "Cannot have an empty --oracle"),
        (parse_oracle_names, {"spec": "bound,Bound"}, "Cannot have --oracle='Bound'"),
        (make_oracle, {"spec": "kernelbench", "tol": -1.0}, "Cannot have --tol=-1.0"),
    ],
)
def test_bad_oracle_arguments_raise_invalid_argument_naming_the_argument(call, kwargs, message):
    with pytest.raises(InvalidArgument) as err:
        call(**kwargs)
    assert message in str(err.value)


@pytest.mark.parametrize("name", ["kernelbench", "shapes", "values", "tamper"])
def test_driver_given_a_bare_output_asks_for_a_subject(name):
    case = ProblemCase.make(load_problem(CORPUS_DIR / "relu.py"), small=True)
    with pytest.raises(InvalidArgument, match="pass got=Subject"):
        make_oracle(name).judge(case, torch.zeros(4, 200))


def test_comparators_accept_a_bare_output():
    case = ProblemCase.make(load_problem(CORPUS_DIR / "relu.py"), small=True)
    good = torch.relu(case.inputs[0])
    for name in ("assert-close", "ulp", "bound"):
        assert make_oracle(name).judge(case, good).ok
    bad = make_oracle("bound").judge(case, good * 1.01)
    assert bad.status is Status.WRONG and bad.first_bad_index is not None
    assert "relu [BATCH=4, DIM=200] float32 on cpu (fixed)" in bad.message
    assert "Mismatched elements" in bad.message and "first bad flat index" in bad.message


# -- ULP -------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype, mantissa", [(torch.float32, 23), (torch.float16, 10), (torch.bfloat16, 7)])
def test_adjacent_floats_are_one_ulp_apart_in_their_own_dtype(dtype, mantissa):
    one = torch.tensor([1.0], dtype=dtype)
    nxt = torch.nextafter(one, torch.tensor([2.0], dtype=dtype)) if dtype != torch.bfloat16 else torch.tensor([1.0 + 2.0**-7], dtype=dtype)
    assert float(nxt - one) == 2.0**-mantissa
    assert ulp_distance(nxt, one).item() == 1
    assert spacing(torch.tensor([1.0]), dtype).item() == 2.0**-mantissa


def test_bfloat16_ulps_count_bfloat16_spacing_not_float16_or_float32():
    a = torch.tensor([1.0], dtype=torch.bfloat16)
    b = torch.tensor([1.0 + 4 * 2.0**-7], dtype=torch.bfloat16)
    assert ulp_distance(b, a).item() == 4  # four bf16 steps
    assert ulp_distance(b.float(), a.float()).item() == 4 * 2**16  # the same gap in float32 ULPs
    assert ulp_distance(b.half(), a.half()).item() == 4 * 2**3


def test_ulp_distance_crosses_zero_and_treats_nan_and_signed_zero():
    tiny = torch.tensor([torch.finfo(torch.float32).tiny * 2.0**-23])  # smallest subnormal
    assert ulp_distance(tiny, -tiny).item() == 2
    assert ulp_distance(torch.tensor([0.0]), torch.tensor([-0.0])).item() == 0
    nan = torch.tensor([float("nan")])
    assert ulp_distance(nan, nan).item() == 0
    assert math.isinf(ulp_distance(nan, torch.tensor([1.0])).item())


def test_ulp_oracle_reports_the_distribution_and_rejects_a_bf16_rounded_fp32_output():
    case = ProblemCase.make(load_problem(CORPUS_DIR / "sigmoid.py"), small=True)
    ref = case.reference()[0]
    ok = UlpOracle().judge(case, ref.float())
    assert ok.ok and ok.value <= 1
    bad = UlpOracle().judge(case, ref.to(torch.bfloat16).float())
    assert bad.status is Status.WRONG and "ULP distribution p50=" in bad.message


# -- bound -----------------------------------------------------------------------------


def _matmul_case(n: int = 64) -> ProblemCase:
    return ProblemCase.make(load_problem(CORPUS_DIR / "matmul_square.py"), shapes={"N": n})


def test_bound_accepts_fp32_accumulation_and_rejects_bf16_operands():
    case = _matmul_case(256)
    a, b = case.inputs
    assert BoundOracle().judge(case, a @ b).ok
    assert BoundOracle().judge(case, (a.double() @ b.double()).float()).ok
    down = BoundOracle().judge(case, a.bfloat16().float() @ b.bfloat16().float())
    assert down.status is Status.WRONG and "u=2^-24" in down.message


def test_bound_is_the_probabilistic_sqrt_k_bound_not_the_worst_case():
    case = _matmul_case(512)
    a, b = case.inputs
    (bnd,) = error_bounds(case)
    worst_case = 512 * 2.0**-24 * (a.abs().double() @ b.abs().double())
    assert bool((bnd < worst_case / 2).all())  # u * (8 * sqrt(512) + 8) |a|.|b| < 512 u |a|.|b| / 2


def test_bound_widens_to_tf32_when_the_problem_allows_it():
    strict = _matmul_case(64)
    loose = ProblemCase.make(load_problem(CORPUS_DIR / "matmul_tf32_allowed.py"), shapes={"N": 64})
    assert float(error_bounds(loose)[0].max()) > 1000 * float(error_bounds(strict)[0].max()) / 8


def test_bound_derives_an_error_model_where_the_problem_declares_none(tmp_path):
    p = tmp_path / "prob.py"
    p.write_text("import torch\nimport torch.nn as nn\nN = 8\nclass Model(nn.Module):\n    def forward(self, x):\n"
                 "        return x * 2\ndef get_inputs():\n    return [torch.rand(N)]\ndef get_init_inputs():\n    return []\n")
    case = ProblemCase.make(load_problem(p))
    v = BoundOracle().judge(case, case.inputs[0] * 2)
    assert v.ok and "derived error model" in v.details["error_model"]
    off = case.inputs[0] * 2
    off[3] += 1e-3
    bad = BoundOracle().judge(case, off)
    assert bad.status is Status.WRONG and bad.first_bad_index == 3


def test_bound_that_cannot_derive_an_error_model_is_skipped_and_says_why(tmp_path):
    p = tmp_path / "prob.py"
    p.write_text("import torch\nimport torch.nn as nn\nN = 8\nclass Model(nn.Module):\n    def forward(self, x):\n"
                 "        if x.dtype != torch.float64:\n            raise TypeError('float64 only')\n"
                 "        return x * 2\ndef get_inputs():\n    return [torch.rand(N)]\ndef get_init_inputs():\n    return []\n")
    case = ProblemCase.make(load_problem(p))
    v = BoundOracle().judge(case, case.inputs[0] * 2)
    assert v.status is Status.SKIPPED and "could not derive an error model" in v.message
    assert "float64 only" in v.message


def test_exact_ops_must_match_bit_for_bit():
    case = ProblemCase.make(load_problem(CORPUS_DIR / "argmax_dim.py"), small=True)
    ref = case.reference()[0]
    assert BoundOracle().judge(case, ref.clone()).ok
    off = ref.clone()
    off.view(-1)[5] += 1
    v = BoundOracle().judge(case, off)
    assert v.status is Status.WRONG and v.first_bad_index == 5


# -- shapes and KernelBench ------------------------------------------------------------


def test_shape_variants_cover_size_one_each_then_prime_below_and_one_past_every_size_at_once():
    variants = shape_variants({"M": 32, "N": 8, "K": 2})
    assert [shapes for _, shapes in variants] == [
        {"M": 1, "N": 8, "K": 2}, {"M": 32, "N": 1, "K": 2}, {"M": 32, "N": 8, "K": 1},
        {"M": 31, "N": 7, "K": 2},   # no prime below 2: K stays
        {"M": 33, "N": 9, "K": 3},
        {"M": 7, "N": 11, "K": 13},
    ]
    assert variants[3][0] == "prime below M=31, N=7, K=2" and variants[-1][0] == "all prime"
    assert prime_below(2048) == 2039 and prime_below(2) is None


def test_kernelbench_trial_seeds_are_drawn_like_the_official_script():
    torch.manual_seed(42)
    expected = [torch.randint(0, 2**32 - 1, (1,)).item() for _ in range(5)]
    assert trial_seeds(5) == expected


def test_kernelbench_tolerance_names_the_column():
    assert KernelBenchOracle().name == "kernelbench"
    assert KernelBenchOracle(tol=1e-4).name == "kernelbench@0.0001"
    assert set(ORACLE_NAMES) == {"kernelbench", "assert-close", "ulp", "bound", "shapes", "values", "tamper",
                                 "static"}
    assert isinstance(Subject, type)


# -- properties of the ULP distance -------------------------------------------------------

_finite32 = st.floats(allow_nan=False, allow_infinity=False, width=32)


@settings(max_examples=200, deadline=None)
@given(_finite32, _finite32)
def test_ulp_distance_is_symmetric_and_counts_floats_between(x, y):
    import numpy as np

    a, b = torch.tensor([x], dtype=torch.float32), torch.tensor([y], dtype=torch.float32)
    d = ulp_distance(a, b).item()
    assert d == ulp_distance(b, a).item()
    assert (d == 0) == (x == y)
    with np.errstate(over="ignore"):  # the float after the largest one is inf
        nxt = torch.tensor([np.nextafter(np.float32(x), np.float32(np.inf))], dtype=torch.float32)
    if torch.isfinite(nxt).all():
        assert ulp_distance(a, nxt).item() == 1


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=0x7F7E))
def test_bfloat16_next_pattern_is_one_ulp_and_a_larger_number(bits):
    a = torch.tensor([bits], dtype=torch.int16).view(torch.bfloat16)
    b = torch.tensor([bits + 1], dtype=torch.int16).view(torch.bfloat16)
    assert ulp_distance(a, b).item() == 1 and b.float().item() > a.float().item()


def test_values_skips_the_kinds_a_problem_excludes_and_says_why():
    from kernelaudit.zoo.oracles.values import ValuesOracle
    from kernelaudit.zoo.problems import load_candidate

    case = ProblemCase.make(load_problem(CORPUS_DIR / "cumprod.py"), small=True)
    # The problem file itself as the candidate: ModelNew = Model, computed by torch.
    v = ValuesOracle().judge(case, Subject(load_candidate(_model_as_candidate(CORPUS_DIR / "cumprod.py"))))
    assert v.ok, v.explain()
    assert "mixed skipped: sub-range products" in v.message and "mixed" in v.details["skipped_kinds"]
    assert "values mixed" not in str(v.details.get("checks", {}))


def test_gelu_bound_allows_the_erf_cancellation_but_not_a_bf16_result():
    case = ProblemCase.make(load_problem(CORPUS_DIR / "gelu.py"), small=True)
    x = -4.5 - torch.rand(case.inputs[0].shape)
    case = case.with_inputs([x], "negative")
    ref = torch.nn.functional.gelu(x.double())
    (bnd,) = error_bounds(case)
    assert bool((bnd >= 0.5 * 2.0**-24 * x.abs().double()).all())  # room for u |x| / 2
    assert BoundOracle().judge(case, ref.float()).ok
    # Where gelu is not tiny the bound stays tight: a bf16-rounded result is rejected.
    y = torch.randn(case.inputs[0].shape, generator=torch.Generator().manual_seed(0))
    normal = case.with_inputs([y], "normal")
    assert BoundOracle().judge(normal, torch.nn.functional.gelu(y.double()).float()).ok
    down = torch.nn.functional.gelu(y.double()).bfloat16().float()
    assert BoundOracle().judge(normal, down).status is Status.WRONG


def _model_as_candidate(problem_path):
    import tempfile
    from pathlib import Path

    d = Path(tempfile.mkdtemp())
    p = d / problem_path.name
    p.write_text(problem_path.read_text() + "\nModelNew = Model\n")
    return p


def test_max_abs_finite_skips_non_finite_values_and_leaves_its_input_alone():
    from kernelaudit.zoo.oracles.compare import max_abs_finite

    t = torch.tensor([-3.0, float("inf"), 2.0, float("nan"), -float("inf")], dtype=torch.float64)
    before = t.clone()
    assert max_abs_finite(t, chunk=2) == 3.0
    assert torch.equal(t.nan_to_num(), before.nan_to_num())  # float64: .to() is no copy, no abs_ in place
    assert max_abs_finite(torch.tensor([float("nan")]), empty=7.0) == 7.0


def test_an_overflow_the_error_bound_reaches_is_legitimate_and_one_it_does_not_is_caught():
    """Near the top of float32 a correct order may overflow where float64 does not (a scan
    of products): an inf of the reference's sign passes where |ref| + allowed reaches past
    float32's largest value, and fails where it does not, or with the wrong sign."""
    import torch

    from kernelaudit.zoo.oracles.compare import chunked_compare

    top = torch.finfo(torch.float32).max
    ref = torch.tensor([8e37, 8e37, -8e37, 1.0], dtype=torch.float64)
    allowed = lambda r, a, b: torch.tensor([1e78, 1e30, 1e78, 1e-6], dtype=torch.float64)[a:b]  # noqa: E731
    got = torch.tensor([float("inf"), float("inf"), float("inf"), 1.0], dtype=torch.float32)
    res = chunked_compare(got, ref, allowed)
    assert res.mismatched == 2 and res.first == 1  # 8e37 + 1e30 stays below 3.4e38; -inf expected at 2
    ref2 = torch.tensor([4e38, 1.0], dtype=torch.float64)  # rounds to inf in float32
    got2 = torch.tensor([top, 1.0], dtype=torch.float32)
    assert chunked_compare(got2, ref2, lambda r, a, b: torch.full_like(r, 1e38)).mismatched == 0
    assert chunked_compare(got2, ref2, lambda r, a, b: torch.full_like(r, 1e30)).mismatched == 1
    # a NaN (inf * 0 of an overflow meeting an underflow) only where the bound alone passes the top
    ref3 = torch.tensor([-7.5e-77, -7.5e-77], dtype=torch.float64)
    got3 = torch.tensor([float("nan"), float("nan")], dtype=torch.float32)
    res3 = chunked_compare(got3, ref3, lambda r, a, b: torch.tensor([1.9e78, 1e30], dtype=torch.float64)[a:b])
    assert res3.mismatched == 1 and res3.first == 1


def test_a_cuda_case_is_also_evaluated_on_the_cpu_unless_its_tensors_or_outputs_are_too_large_or_tied_to_cuda(monkeypatch):
    import torch

    from kernelaudit.zoo.oracles import derived

    lin = torch.nn.Linear(4, 3)
    x = torch.randn(2, 4)
    ref = [lin(x).detach().double()]
    out = derived._on_cpu(lin, [x], ref, "cpu")
    assert out is not None and torch.equal(out[0], lin(x).detach())

    class TiedToCuda(torch.nn.Module):
        def forward(self, x):
            return x + torch.ones(1, device="cuda")

    assert derived._on_cpu(TiedToCuda(), [x], ref, "cpu") is None or torch.cuda.is_available()
    monkeypatch.setattr(derived, "CPU_ALTERNATIVE_NUMEL", 10)
    assert derived._on_cpu(lin, [x], ref, "cpu") is None  # 15 parameters + 8 inputs > 10
    # small inputs, a large output (KernelBench L1 7 and 9 at their own shapes): too large
    monkeypatch.setattr(derived, "CPU_ALTERNATIVE_NUMEL", 30)
    assert derived._on_cpu(lin, [x], ref, "cpu") is not None  # 15 + 8 + 6 outputs <= 30
    assert derived._on_cpu(lin, [x], [torch.zeros(8)], "cpu") is None  # 15 + 8 + 8 > 30
