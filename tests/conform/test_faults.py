"""Planted faults: each changes outputs by about one bf16 spacing or less, the loose
checks miss it, and the bit-exact oracle catches it, in the kernel and the torch path."""

from __future__ import annotations

from kernelaudit.conform.faults import FAULTS


def test_there_are_at_least_nine_realistic_faults_and_a_control():
    assert len([f for f in FAULTS.values() if not f.control]) >= 9
    assert [f.name for f in FAULTS.values() if f.control] == ["no_saturation"]
    assert len({f.code for f in FAULTS.values()}) == len(FAULTS) and 0 not in {f.code for f in FAULTS.values()}


def test_every_fault_changes_some_output_in_both_implementations(blindness_rows):
    assert {(r.fault, r.implementation) for r in blindness_rows if r.changed_cases == 0} == set()
    assert {r.implementation for r in blindness_rows} == {"torch", "triton"}


def test_bit_exact_oracle_catches_every_fault_wherever_it_changed_the_output(blindness_rows):
    assert [(r.fault, r.implementation) for r in blindness_rows if r.caught["bit_exact"] != r.changed_cases] == []


def test_public_int8_tolerance_misses_most_faults(blindness_rows):
    # rtol 1e-1 / atol 1.0: the public int8 scaled-mm tolerance
    subtle = [r for r in blindness_rows if not r.control and r.fault not in ("neighbour_channel_scale",
                                                                             "neighbour_token_scale")]
    assert all(r.caught["int8_scaled_mm_suite"] <= r.changed_cases // 10 for r in subtle), \
        [(r.fault, r.caught["int8_scaled_mm_suite"], r.changed_cases) for r in subtle]


def test_one_bf16_spacing_misses_some_faults_that_bit_exact_catches(blindness_rows):
    blind = {r.fault for r in blindness_rows if r.changed_cases and r.caught["one_bf16_spacing"] == 0}
    assert {"scale_order_swapped", "half_away_rounding", "truncating_requant", "full_clamp_range"} <= blind


def test_subtle_faults_move_outputs_by_at_most_two_bf16_spacings_normwise(blindness_rows):
    big = {r.fault for r in blindness_rows if r.max_bf16_spacings > 2}
    assert big == {"neighbour_channel_scale", "neighbour_token_scale", "no_saturation"}


def test_the_control_fault_is_caught_by_every_check(blindness_rows):
    for r in blindness_rows:
        if r.control:
            assert all(v == r.changed_cases > 0 for v in r.caught.values()), r.caught


def test_kernel_and_torch_path_fail_the_same_checks_for_each_fault(blindness_rows):
    # on the CPU the kernel's K slice (interpreter BLOCK_K = 32) equals the torch path's PARTIAL_K,
    # so even fp16_partial_sums rounds the same partial sums in both
    by = {}
    for r in blindness_rows:
        by.setdefault(r.fault, []).append((r.changed_cases, r.caught))
    assert all(len(v) == 2 and v[0] == v[1] for v in by.values())
