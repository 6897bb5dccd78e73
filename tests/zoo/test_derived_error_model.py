"""The derived error model: correct orders pass, precision downgrades are caught, with no annotation.

Also the ``ulp`` floor that follows the derived error scale, and part 3 of issue 15:
the detection table recomputed with every error-model annotation stripped from the
corpus catches at least what the committed (annotated) table catches.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
import torch

from kernelaudit.verdict import Status
from kernelaudit.zoo.oracles import BoundOracle, Subject, UlpOracle, make_oracle
from kernelaudit.zoo.oracles.derived import SAFETY, derive
from kernelaudit.zoo.problems import CORPUS_DIR, ProblemCase, load_problem
from kernelaudit.zoo.problems.variants import variant_candidate

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning", "ignore::UserWarning")

DOCS = Path(__file__).resolve().parents[2] / "docs" / "oracles.md"
#: What "annotation" means here: how the op's error grows. The rest of a problem file
#: (INPUT_KINDS, ALLOW_TF32, ADVERSARIAL, VALUE_KINDS_SKIP) states what the problem
#: accepts and which inputs it admits, which no derivation from Model can recover;
#: SMALL_SHAPES only makes the CPU run fast.
ERROR_ANNOTATIONS = ("ERROR_MODEL", "error_scale")


def stripped(name: str):
    """A corpus problem, freshly loaded, without its error-model annotations."""
    problem = load_problem(CORPUS_DIR / f"{name}.py")
    for attr in ERROR_ANNOTATIONS:
        if hasattr(problem.module, attr):
            delattr(problem.module, attr)
    assert problem.error_model is None
    return problem


def _problem_file(tmp_path, forward: str, inputs: str = "[torch.rand(BATCH, DIM)]", name: str = "p") -> Path:
    p = tmp_path / f"{name}.py"
    p.write_text(textwrap.dedent(f"""
        import torch
        import torch.nn as nn

        BATCH = 6
        DIM = 40

        class Model(nn.Module):
            def forward(self, x):
                return {forward}

        def get_inputs():
            return {inputs}

        def get_init_inputs():
            return []
    """))
    return p


@pytest.mark.parametrize("name", ["matmul_square", "softmax", "layernorm", "cumsum", "gelu", "cross_entropy_loss"])
def test_derived_bound_passes_correct_orders_and_catches_downgrades(name):
    problem = stripped(name)
    verdicts = {}
    for kind in ("reference", "split", "bf16", "fp16", "tf32"):
        case = ProblemCase.make(problem, small=True)
        verdicts[kind] = BoundOracle().judge(case, Subject(variant_candidate(problem, kind)))
    assert verdicts["reference"].ok and verdicts["split"].ok, {k: v.message for k, v in verdicts.items()}
    assert verdicts["bf16"].status is Status.WRONG and verdicts["fp16"].status is Status.WRONG
    assert "derived error model" in verdicts["bf16"].message
    if name.startswith("matmul"):  # TF32 rounds matmul and convolution operands only
        assert verdicts["tf32"].status is Status.WRONG, verdicts["tf32"].message
    else:
        assert verdicts["tf32"].ok


def test_tf32_passes_where_the_problem_allows_it_and_a_reordering_still_does():
    problem = stripped("matmul_tf32_allowed")
    for kind in ("tf32", "split", "fp16"):  # fp16 has TF32's 10 mantissa bits
        case = ProblemCase.make(problem, small=True)
        assert BoundOracle().judge(case, Subject(variant_candidate(problem, kind))).ok, kind


def test_multilinear_models_get_their_term_count_and_others_do_not():
    mm = derive(ProblemCase.make(stripped("matmul_square"), shapes={"N": 48}))
    # n is estimated from Rademacher samples: within 15% of the true reduction length
    assert mm.multilinear and abs(mm.length - 48) <= 0.15 * 48
    mean_case = ProblemCase.make(stripped("mean_dim"), small=True)
    mean = derive(mean_case)
    assert mean.multilinear and mean.length == mean_case.shapes["D2"]  # mean over dim 2: every weight 1/D2
    for name in ("layernorm", "softmax", "gelu"):
        assert not derive(ProblemCase.make(stripped(name), small=True)).multilinear, name


def test_a_second_seed_reuses_the_multilinear_tests_and_gets_the_same_model(monkeypatch):
    from kernelaudit.zoo.oracles import derived

    problem = stripped("matmul_square")
    first, second = (ProblemCase.make(problem, shapes={"N": 48}, seed=s) for s in (1, 2))
    calls = []
    real_run = derived._run
    monkeypatch.setattr(derived, "_run", lambda model, inputs: calls.append(1) or real_run(model, inputs))
    full = derived.multilinear(first)
    n_full = len(calls)
    reused = derived.multilinear(second)
    assert full is not None and reused is not None and len(calls) - n_full == 1  # the magnitude only
    problem.__dict__.pop("_multilinear_structures")
    fresh = derived.multilinear(ProblemCase.make(problem, shapes={"N": 48}, seed=2))
    # n is the structure's, estimated once (Rademacher samples: a fresh estimate differs a little)
    assert reused.length == full.length and abs(fresh.length - full.length) <= 0.15 * 48
    assert all(torch.equal(a, b) for a, b in zip(reused.magnitude, fresh.magnitude))
    # a model that is not multilinear is tested in full every time, never cached as one
    relu = stripped("gelu")
    for seed in (1, 2):
        assert derived.multilinear(ProblemCase.make(relu, small=True, seed=seed)) is None
    assert not relu.__dict__.get("_multilinear_structures")


def test_centering_is_affine_but_its_absolute_evaluation_is_no_magnitude(tmp_path):
    case = ProblemCase.make(load_problem(_problem_file(tmp_path, "x - x.mean(dim=-1, keepdim=True)")))
    assert not derive(case).multilinear


def test_outputs_that_barely_depend_on_the_inputs_get_no_term_count_and_a_wrong_one_is_caught(tmp_path):
    # A deep network whose activations die out (KernelBench's MobileNetV1 in eval mode) is
    # about constant: its Rademacher variance is ~0, so n = |model|(1)^2 / var passed 10^50
    # and sqrt(n) allowed any value, 2 * out + 1 included.
    problem = load_problem(_problem_file(tmp_path, "x.sum(dim=-1, keepdim=True) * 1e-30 + 0.5"))
    case = ProblemCase.make(problem)
    dm = derive(case)
    assert not dm.multilinear
    right = case.reference()[0].float()
    assert BoundOracle().judge(ProblemCase.make(problem), right).ok
    v = BoundOracle().judge(ProblemCase.make(problem), right * 2 + 1)
    assert v.status is Status.WRONG and "not multilinear" in v.message


def test_exact_only_where_no_rounding_happens():
    for name in ("max_dim", "argmax_dim", "maxpool2d", "relu"):
        dm = derive(ProblemCase.make(stripped(name), small=True))
        assert dm.allowed == [None], name
    for name in ("cumprod", "mse_loss", "sigmoid"):  # torch's CPU cumprod agrees bit for bit, yet rounds
        dm = derive(ProblemCase.make(stripped(name), small=True))
        assert dm.allowed[0] is not None, name


def test_an_exact_op_rejects_one_ulp():
    case = ProblemCase.make(stripped("max_dim"), small=True)
    got = case.reference()[0].to(torch.float32)
    assert BoundOracle().judge(case, got).ok
    off = got.clone()
    off.view(-1)[5] = torch.nextafter(off.view(-1)[5], torch.tensor(float("inf")))
    v = BoundOracle().judge(case, off)
    assert v.status is Status.WRONG and v.first_bad_index == 5 and "must be exact" in v.message


def test_a_declared_error_model_stays_an_override():
    case = ProblemCase.make(load_problem(CORPUS_DIR / "softmax.py"), small=True)
    v = BoundOracle().judge(case, case.reference()[0].float())
    assert v.ok and "declared error model scaled" in v.details["error_model"]


def test_kernelbench_style_problem_is_judged_by_bound_not_skipped(tmp_path):
    problem = load_problem(_problem_file(tmp_path, "torch.tanh(x) * 2 + x.sum(dim=-1, keepdim=True)"))
    case = ProblemCase.make(problem)
    right = case.reference()[0].float()
    v = BoundOracle().judge(case, right)
    assert v.ok and "derived error model" in v.details["error_model"]
    wrong = right.clone()
    wrong[2, 7] *= 1 + 2.0**-12  # 4096 ULPs at one element: far beyond any correct order
    v = BoundOracle().judge(ProblemCase.make(problem), wrong)
    assert v.status is Status.WRONG and v.first_bad_index == 2 * 40 + 7
    assert "allowed error" in v.message and "SAFETY" in v.message


def test_the_safety_factor_separates_the_measured_sides():
    """SAFETY lies between the largest err/scale of correct variants and the smallest of bf16/fp16."""
    worst_correct, best_wrong = 0.0, float("inf")
    for name in ("matmul_square", "softmax", "layernorm", "sum_dim"):
        problem = stripped(name)
        for kind in ("reference", "split", "bf16", "fp16"):
            case = ProblemCase.make(problem, small=True)
            got = Subject(variant_candidate(problem, kind))(case, [x.clone() for x in case.inputs])[0]
            scale = derive(case).scale[0]
            r = float(((got.double() - case.reference()[0]).abs() / scale).max())
            if kind in ("reference", "split"):
                worst_correct = max(worst_correct, r)
            else:
                best_wrong = min(best_wrong, r)
    assert worst_correct * 4 < SAFETY < best_wrong / 4, (worst_correct, best_wrong)


# -- ulp ---------------------------------------------------------------------------------


def test_ulp_measures_an_output_that_cancels_against_what_was_summed(tmp_path):
    # rows of 1000 + small noise: x - mean(x) is ~1e-3 while its rounding is ~u * 1000
    inputs = "[1000 + 1e-3 * torch.rand(BATCH, DIM)]"
    problem = load_problem(_problem_file(tmp_path, "x - x.mean(dim=-1, keepdim=True)", inputs))
    correct = Subject(variant_candidate(problem, "split"))  # the mean summed in two halves
    assert UlpOracle().judge(ProblemCase.make(problem), correct).ok
    case = ProblemCase.make(problem)
    planted = case.reference()[0].float()
    # legitimate errors here are ~u * 1000 = 6e-5, 5% of the output: a fault must be
    # larger than SAFETY of them to be told apart from a correct order
    planted[1, 3] += 0.05
    v = UlpOracle().judge(case, planted)
    assert v.status is Status.WRONG and v.first_bad_index == 40 + 3


def test_ulp_accepts_an_output_that_is_zero_everywhere_up_to_rounding(tmp_path):
    problem = load_problem(_problem_file(tmp_path, "(x * 0.1) * 10.0 - x"))
    case = ProblemCase.make(problem)
    got = Subject(variant_candidate(problem, "reference"))(case, list(case.inputs))[0]
    assert bool((got != 0).any())  # float32 rounding leaves a residue where the exact answer is 0
    assert UlpOracle().judge(case, got).ok
    assert UlpOracle().judge(ProblemCase.make(problem), got + 1e-3).status is Status.WRONG


def test_ulp_still_rejects_a_bf16_rounded_output():
    for name in ("layernorm", "matmul_square", "softmax"):
        problem = stripped(name)
        case = ProblemCase.make(problem, small=True)
        assert UlpOracle().judge(case, Subject(variant_candidate(problem, "bf16"))).status is Status.WRONG, name


KERNELBENCH = Path("/work/shared/kernelbench/KernelBench/level1")


@pytest.mark.skipif(not KERNELBENCH.is_dir(), reason="KernelBench is not at /work/shared/kernelbench")
@pytest.mark.parametrize("stem, caps", [
    ("34_InstanceNorm", {"batch_size": 2, "features": 4, "dim1": 16, "dim2": 16}),
    ("61_conv_transposed_3D__square_input__square_kernel", {"batch_size": 1, "in_channels": 32, "out_channels": 4,
                                                           "depth": 6, "height": 6, "width": 6}),
])
def test_ulp_and_bound_accept_correct_kernelbench_orders_that_the_old_ulp_cap_rejected(stem, caps):
    problem = load_problem(KERNELBENCH / f"{stem}.py")
    for k, v in caps.items():
        setattr(problem.module, k, v)
    for kind in ("reference", "split"):
        v = make_oracle("ulp,bound").judge(ProblemCase.make(problem), Subject(variant_candidate(problem, kind)))
        assert v.ok, v.message
    v = make_oracle("ulp,bound").judge(ProblemCase.make(problem), Subject(variant_candidate(problem, "bf16")))
    assert v.details["checks"]["ulp"]["status"] == v.details["checks"]["bound"]["status"] == "wrong"


# -- part 3: the detection table with the annotations stripped ----------------------------

#: A subset that fits the test-time budget, with the columns judged: every catch that
#: rests on the error model (bound on a precision downgrade, shapes on a dropped tail,
#: values on a dropped branch and on an exact op's ties), and correct kernels that
#: reorder a matmul, a reduction and use TF32 where allowed. The whole table (25
#: candidates x bound, shapes, values) is ``python benchmarks/derived_error_model.py --table``.
TABLE_SUBSET = {
    "matmul_square__bf16_compute": ("bound",),
    "softmax__pad_zero": ("shapes",),
    "relu__drops_negative_branch": ("values",),
    "argmax_dim__last_tie": ("values",),
    "matmul_square__block16": ("bound",),
    "sum_dim__block4": ("bound", "shapes"),
    "matmul_tf32_allowed__tf32": ("bound",),
}


def committed_cells() -> dict[str, dict[str, str]]:
    """candidate -> column -> cell of the table committed in docs/oracles.md."""
    from kernelaudit.zoo.check import committed_table

    lines = [ln for ln in committed_table(DOCS.read_text()).splitlines() if ln.startswith("| ")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    out = {}
    for ln in lines[1:]:
        cells = [c.strip() for c in ln.strip("|").split("|")]
        out[re.sub(r"[`*]| \(CUDA only\)", "", cells[0])] = dict(zip(head, cells))
    return out


@pytest.mark.usefixtures("triton_interpreter")
def test_table_without_annotations_catches_what_the_annotated_one_catches(monkeypatch):
    import kernelaudit.zoo.problems as problems
    from kernelaudit.zoo.check import detection_table
    from kernelaudit.zoo.problems import known_candidates

    monkeypatch.setattr(problems, "load_problem", lambda path: stripped(Path(path).stem))
    paths = {p.stem: p for p in known_candidates() if p.stem in TABLE_SUBSET}
    assert set(paths) == set(TABLE_SUBSET)
    committed = committed_cells()
    for name, columns in TABLE_SUBSET.items():
        row = detection_table(device="cpu", small=True, columns=columns, candidates=[paths[name]]).rows[0]
        for column in columns:
            if row.expect == "wrong":
                assert "caught" in committed[name][column]  # the subset holds the annotated table's catches
                assert row.flagged(column), (name, column, row.messages[column])
            else:
                assert committed[name][column] == "ok" and row.cells[column] == "ok", (name, column,
                                                                                      row.messages[column])


CLOSURE_PROBLEM = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 8)
        fc = self.fc
        self.apply_fc = lambda x: fc(x)  # a closure: a deep copy shares this Linear with the original

    def forward(self, x):
        return torch.tanh(self.apply_fc(x))

def get_inputs():
    return [torch.randn(4, 16)]

def get_init_inputs():
    return []
'''


def test_a_model_whose_forward_reaches_a_submodule_through_a_closure_is_judged(tmp_path):
    """KernelBench L3 44 (MiniGPTBlock) keeps ``lambda x: m.c_proj(...)``: the float64 copy of
    the model must not call the float32 original's modules."""
    path = tmp_path / "closure.py"
    path.write_text(CLOSURE_PROBLEM)
    problem = load_problem(path)
    case = ProblemCase.make(problem)
    ref = case.reference()[0]
    assert ref.dtype == torch.float64 and problem.__dict__.get("_fresh_models")
    model32 = case.model()
    assert model32.fc.weight.dtype == torch.float32  # the cached model is left as it was
    with torch.no_grad():
        want = torch.tanh(case.inputs[0].double() @ model32.fc.weight.double().T + model32.fc.bias.double())
    assert torch.allclose(ref, want, rtol=0, atol=1e-12)
    correct = Subject(variant_candidate(problem, "reference"))
    assert BoundOracle().judge(case, correct).ok


FACTORY_PROBLEM = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 8)

    def forward(self, x):
        h0 = torch.full((x.shape[0], 16), 0.25, device=x.device)  # the default dtype, as KernelBench L3 35's LSTM state
        return self.fc(x) * self.fc(h0)  # a float32 h0 into float64 weights raises

def get_inputs():
    return [torch.randn(4, 16)]

def get_init_inputs():
    return []
'''


def test_a_forward_that_makes_tensors_at_the_default_dtype_has_a_float64_reference(tmp_path):
    """``torch.full(...)`` without a dtype inside forward is float32: the float64 reference
    runs again with float64 the default, instead of failing as the problem's fault."""
    path = tmp_path / "factory.py"
    path.write_text(FACTORY_PROBLEM)
    problem = load_problem(path)
    case = ProblemCase.make(problem)
    ref = case.reference()[0]
    assert ref.dtype == torch.float64 and torch.get_default_dtype() == torch.float32
    model32 = case.model()
    with torch.no_grad():
        w, b = model32.fc.weight.double(), model32.fc.bias.double()
        want = (case.inputs[0].double() @ w.T + b) * (torch.full((4, 16), 0.25, dtype=torch.float64) @ w.T + b)
    assert torch.allclose(ref, want, rtol=0, atol=1e-12)
    assert not problem.__dict__.get("_fresh_models")


def _blocked_cumprod(x: torch.Tensor, block: int = 32) -> torch.Tensor:
    """cumprod along the last dim in another association, as a GPU scan does: a scan
    within blocks, then each block times the running product of the blocks before it."""
    b, n = x.shape
    pad = (-n) % block
    xp = torch.cat([x, torch.ones(b, pad, dtype=x.dtype)], 1) if pad else x
    local = torch.cumprod(xp.view(b, -1, block), 2)
    carry = torch.cumprod(local[:, :, -1], 1)
    carry = torch.cat([torch.ones(b, 1, dtype=x.dtype), carry[:, :-1]], 1)
    return (local * carry.unsqueeze(2)).reshape(b, -1)[:, :n]


def _mixed(shape, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    k = torch.randint(-16, 17, shape, generator=g).to(torch.float32)
    return torch.randn(shape, generator=g) * torch.exp2(k)


def _scan_candidate(tmp_path, body: str) -> Path:
    p = tmp_path / "cand.py"
    p.write_text(textwrap.dedent(f"""
        import torch
        import torch.nn as nn
        from {__name__} import _blocked_cumprod

        class ModelNew(nn.Module):
            def forward(self, x):
                return {body}
    """))
    return p


def test_a_product_scan_whose_intermediates_leave_the_range_accepts_another_association(tmp_path):
    # KernelBench 90_cumprod on `values mixed` (normal x 2^k, k in [-16, 16]): the running
    # product of 512 factors leaves float32's range and comes back, so another correct
    # association overflows an intermediate where the float64 reference is finite (the
    # H200's scan did in 7 elements, this blocked scan in thousands). The values oracle
    # judges it with the multilinear model (shown by its `small` kind) widened by the
    # intermediates' reach.
    from kernelaudit.zoo.oracles.values import ValuesOracle
    from kernelaudit.zoo.problems import load_candidate

    problem = load_problem(_problem_file(tmp_path, "torch.cumprod(x, dim=1)", "[torch.rand(64, 512)]"))
    mixed = ProblemCase.make(problem).with_inputs([_mixed((64, 512), 1)], "mixed")
    assert not torch.isfinite(_blocked_cumprod(mixed.inputs[0])).all()  # the association overflows
    blocked = Subject(load_candidate(_scan_candidate(tmp_path, "_blocked_cumprod(x)")))
    v = ValuesOracle().judge(ProblemCase.make(problem), blocked)
    assert v.ok, v.explain()
    # still caught: a product scan rounded to bfloat16, and a sum scan
    for body in ("_blocked_cumprod(x).bfloat16().float()", "torch.cumsum(x, dim=1)"):
        wrong = Subject(load_candidate(_scan_candidate(tmp_path, body)))
        assert ValuesOracle().judge(ProblemCase.make(problem), wrong).status is Status.WRONG, body


def test_the_intermediate_reach_leaves_a_sum_scan_bound_as_it_was(tmp_path):
    # H = the module on max(|x|, 1): for a sum scan on mixed values it stays far inside
    # float32's range, and its subnormal term (64 x 2^-149 x H) is far below rounding;
    # it is computed only before a rejection (one more float64 evaluation)
    from kernelaudit.zoo.oracles.derived import intermediate_reach, widened_for_reach

    problem = load_problem(_problem_file(tmp_path, "torch.cumsum(x, dim=1)", "[torch.rand(BATCH, DIM)]"))
    case = ProblemCase.make(problem).with_inputs([_mixed((6, 40), 2)], "mixed")
    (h,) = intermediate_reach(case)
    assert float(h.max()) < 2.0**80
    dm = derive(case)
    (wide,) = widened_for_reach(case, dm)
    assert torch.isfinite(wide).all()
    assert float(((wide - dm.allowed[0]) / dm.allowed[0]).max()) < 1e-20
    assert BoundOracle().judge(case, case.reference()[0].float()).ok
