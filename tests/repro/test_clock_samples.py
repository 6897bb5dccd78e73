"""``benchmarks/_common.py``'s clock sampler: what nvidia-smi printed while a benchmark's
kernel ran, summarised (the clock a kernel's FLOP/s are made of)."""

from __future__ import annotations


def test_clock_samples_summarise_clock_power_and_event_reasons_and_skip_what_is_not_a_sample(benchmark_script):
    common = benchmark_script("_common")
    text = ("1980, 650.5, 0x0000000000000000\n"
            "1755, 699.9, 0x0000000000000004\n"
            "1740, [N/A], 0x0000000000000084\n"
            "Failed to read something\n")
    got = common.parse_clock_samples(text)
    assert got["samples"] == 3
    assert (got["sm_mhz_min"], got["sm_mhz_median"], got["sm_mhz_max"]) == (1740.0, 1755.0, 1980.0)
    assert (got["power_w_median"], got["power_w_max"]) == (699.9, 699.9)   # [N/A] is not a reading
    assert got["clock_events"] == {"sw_power_cap": 2, "hw_power_brake": 1}


def test_a_sampler_without_nvidia_smi_says_why_and_gives_no_summary(benchmark_script, monkeypatch, tmp_path):
    common = benchmark_script("_common")
    monkeypatch.setenv("PATH", str(tmp_path))   # no nvidia-smi on it
    with common.GpuClocks() as g:
        pass
    assert g.summary is None and "nvidia-smi" in g.error
