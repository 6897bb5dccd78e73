"""The checks a conformance test can apply, from the loose ones used in the wild to the
bit-exact oracle. Each takes ``(got, ref)`` (same dtype) and says whether it passes.

| check                  | passes when                                                      |
|------------------------|------------------------------------------------------------------|
| torch_testing_default  | ``torch.testing.assert_close`` with its per-dtype defaults        |
|                        | (bf16 1.6e-2/1e-5, fp16 1e-3/1e-5, fp32 1.3e-6/1e-5, int8 exact)  |
| int8_scaled_mm_suite   | allclose rtol 1e-1, atol 1.0 (public int8 scaled-mm tests)        |
| allclose_1e-1          | allclose rtol = atol = 1e-1                                       |
| kernelbench_1e-2       | allclose rtol = atol = 1e-2                                       |
| kernelbench_1e-4       | allclose rtol = atol = 1e-4                                       |
| one_bf16_spacing       | every element within one bf16 spacing at the reference (int8: 1)  |
| bit_exact              | every element equal, bit for bit, to the matching reference       |
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from .formats import FORMATS, quantum
from .ulp import ulp_distance


def _allclose(rtol: float, atol: float) -> Callable:
    def check(got, ref) -> bool:
        return bool(torch.allclose(got.double(), ref.double(), rtol=rtol, atol=atol, equal_nan=True))
    return check


def _torch_testing(got, ref) -> bool:
    try:
        torch.testing.assert_close(got, ref)
    except AssertionError:
        return False
    return True


def _bit_exact(got, ref) -> bool:
    return int(ulp_distance(got, ref).abs().max()) == 0 if got.numel() else True


def _one_bf16_spacing(got, ref) -> bool:
    if not got.is_floating_point():
        return int((got.long() - ref.long()).abs().max()) <= 1 if got.numel() else True
    r = ref.detach().cpu().double().numpy()
    diff = (got.detach().cpu().double().numpy() - r)
    return bool(np.all(np.abs(diff) <= quantum(r, FORMATS["bf16"])))


@dataclass(frozen=True)
class Check:
    name: str
    passes: Callable[[torch.Tensor, torch.Tensor], bool]


CHECKS: dict[str, Check] = {c.name: c for c in (
    Check("torch_testing_default", _torch_testing),
    Check("int8_scaled_mm_suite", _allclose(1e-1, 1.0)),
    Check("allclose_1e-1", _allclose(1e-1, 1e-1)),
    Check("kernelbench_1e-2", _allclose(1e-2, 1e-2)),
    Check("kernelbench_1e-4", _allclose(1e-4, 1e-4)),
    Check("one_bf16_spacing", _one_bf16_spacing),
    Check("bit_exact", _bit_exact),
)}
