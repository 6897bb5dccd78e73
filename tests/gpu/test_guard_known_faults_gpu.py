"""The shipped sweep-of-record rules on the H200 they came from: the guard hooks the
faulty ``arange`` only where torch / CUDA match, and refuses the call past 2^32 that the
sweep found wrong (pytorch/pytorch#197673), instead of returning wrong values."""

from __future__ import annotations

import pytest
import torch

from kernelaudit.errors import UnsafeCallError
from kernelaudit.guard import intercept
from kernelaudit.guard.rules import RuntimeEnv, active, known_faults

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def test_sweep_rules_gate_and_arange_past_2_32_is_refused_not_wrong():
    rules = active(known_faults(), RuntimeEnv.current())
    if not any(r.op == "arange" for r in rules):
        pytest.skip(f"the arange rule is gated to torch 2.11 / CUDA 13.0 / driver 580; this is "
                    f"{torch.__version__} / {torch.version.cuda}")
    try:
        intercept.install("fix", native=False)
        assert ("arange.start_out", "screen", "cuda") in intercept.hooked()
        small = torch.arange(1000, device="cuda")
        assert torch.equal(small.cpu(), torch.arange(1000))
        with pytest.raises(UnsafeCallError, match="sweep-cuda-arange"):
            torch.arange(2**32 + 16384, dtype=torch.float32, device="cuda")
    finally:
        intercept.uninstall()
        torch.cuda.empty_cache()
