"""A shared sum (a broadcast operand's gradient) whose terms pass a 16-bit dtype's range
is the dtype's limit, not a size fault; an infinity anywhere else stays wrong."""

import math

import torch

from kernelaudit import GridSpec, run_sweep
from kernelaudit.sweep.judge.execution import _term_overflow_expected
from kernelaudit.sweep.judge.metrics import Judgement

from .test_sweep_faults import _records


def test_float16_rdiv_gradient_of_the_broadcast_operand_is_ok_and_says_why(tmp_path):
    # other / x: the gradient in `other` sums g / x over a million rows; float16 overflows
    # at |x| < 1.5e-5, where the float32 reference does not
    spec = GridSpec(ops=("__rdiv__",), dtypes=("float16",), thresholds=("2^31",), positions=("above",),
                    directions=("bwd",), scale=20)
    (case, v), = _records(run_sweep(spec, tmp_path, device="cpu", fault_model="none").store)
    assert v.status.value == "ok", v.explain()
    shared = v.details["outputs"][1]
    assert shared["details"]["term_overflow_expected"] > 0


def test_an_infinite_shared_sum_whose_terms_fit_the_dtype_stays_wrong():
    ref = torch.tensor([[1.0, 2.0, 3.0]], dtype=torch.float64)
    got = torch.tensor([[1.0, math.inf, math.nan]], dtype=torch.float16)
    scale = torch.tensor([[1e3, 1e3, 1e6]], dtype=torch.float64)  # only the third passes 65504
    j = Judgement("grad1", "cond", 1e-3, 3)
    out = _term_overflow_expected(got, ref, scale, j)
    assert out[0, 1].item() == math.inf and out[0, 2].item() == 3.0
    assert j.details == {"term_overflow_expected": 1}


def test_float32_shared_sums_are_left_as_they_are():
    got = torch.tensor([[math.inf]], dtype=torch.float32)
    j = Judgement("grad1", "cond", 1e-3, 1)
    assert _term_overflow_expected(got, torch.ones(1, 1, dtype=torch.float64), torch.full((1, 1), 1e300, dtype=torch.float64), j) is got
    assert j.details == {}
