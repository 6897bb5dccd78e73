"""ULP tools: signed distances across zero and binades, errors against a precise
reference in the format's own spacing, the sign test, the worst elements, the plot."""

from __future__ import annotations

import pytest
import torch

from kernelaudit.conform.ulp import binomial_two_sided, compare_ulp, plot_ulp, ulp_distance, ulp_error
from kernelaudit.errors import InvalidArgument


def test_ulp_distance_counts_representable_numbers_across_zero_and_binades():
    a = torch.tensor([1.0, 0.0, -0.0, 2.0, 1e-40, 1.0], dtype=torch.float32).bfloat16()
    b = torch.tensor([1.0078125, -0.0, 0.0, 1.9921875, -1e-40, float("inf")], dtype=torch.float32).bfloat16()
    d = ulp_distance(a, b).tolist()
    assert d[:4] == [-1, 0, 0, 1]
    assert d[4] == 2 * int(torch.tensor(1e-40).bfloat16().view(torch.int16))  # through zero, +0 == -0
    assert d[5] == -(0x7F80 - 0x3F80)


def test_ulp_error_uses_the_spacing_at_the_reference_not_eps_times_value():
    ref = torch.tensor([1.0 + 2**-8 + 2**-12, 2.0 - 2**-9], dtype=torch.float64)  # bf16 spacing 2^-7 at both
    got = ref.bfloat16()  # 1 + 2^-7 and 2.0 (where the spacing is 2^-6)
    assert ulp_error(got, ref).tolist() == [0.5 - 2**-5, 0.25]


def test_sign_test_sees_a_biased_rounding_and_stays_quiet_on_round_to_nearest():
    x = torch.rand(20000, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 10
    nearest = compare_ulp(x.bfloat16(), x)
    truncated = compare_ulp((x.float().view(torch.int32) & ~0xFFFF).view(torch.float32).bfloat16(), x)
    assert nearest.sign.centred and nearest.max_abs <= 0.5
    assert not truncated.sign.centred and truncated.sign.positive == 0 and truncated.max_abs < 1


def test_binomial_two_sided_matches_small_exact_values():
    assert binomial_two_sided(0, 1) == 1.0
    assert binomial_two_sided(0, 10) == pytest.approx(2 / 1024)
    assert binomial_two_sided(5000, 10000) == 1.0


def test_compare_ulp_reports_histogram_worst_elements_and_nan_mismatch_with_int_indexes(tmp_path):
    ref = torch.arange(1, 13, dtype=torch.float32).reshape(3, 4).bfloat16()
    got = ref.clone()
    flat = got.view(-1)
    flat[5] = torch.nextafter(flat[5].float(), torch.tensor(100.0)).bfloat16()  # not a bf16 step: rounds back
    got.view(torch.int16).view(-1)[7] += 3
    flat[10] = float("nan")
    c = compare_ulp(got, ref, worst=2)
    assert c.differing == 2 and c.nan_mismatch == 1 and c.histogram[3] == 1
    assert c.worst[0]["index"] == 10 and type(c.worst[0]["index"]) is int and c.worst[1]["coords"] == [1, 3]
    assert "3 above" not in c.summary() and "differ" in c.summary()
    plot_ulp(c, tmp_path / "h.png")
    assert (tmp_path / "h.png").stat().st_size > 1000


def test_compare_ulp_refuses_other_shapes_and_unknown_float_formats():
    with pytest.raises(InvalidArgument, match="shapes"):
        compare_ulp(torch.zeros(2), torch.zeros(3))
    with pytest.raises(InvalidArgument, match="float64"):
        ulp_distance(torch.zeros(2, dtype=torch.float64), torch.zeros(2, dtype=torch.float64))
