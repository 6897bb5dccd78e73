"""``benchmarks/devices_projection.py``: a store's recorded case times replayed on N
devices, each taking the next case as it frees (what ``--devices`` does)."""

from __future__ import annotations

import pytest


def test_cases_go_in_order_to_whichever_device_frees_first(benchmark_script):
    mod = benchmark_script("devices_projection")
    assert mod.list_schedule([3, 3, 2, 2, 2], 2) == 7      # 3 | 3, then 2 -> 5, 2 -> 5, 2 -> 7
    assert mod.list_schedule([3, 3, 2, 2, 2], 1) == 12
    assert mod.list_schedule([5, 1, 1, 1, 1, 1], 2) == 5    # the long case alone on one device
    with pytest.raises(ValueError, match="devices=0"):
        mod.list_schedule([1.0], 0)


def test_a_store_projects_less_time_on_more_devices_and_never_below_its_longest_case(benchmark_script, tmp_path):
    from kernelaudit.sweep.cases import GridSpec, grid
    from kernelaudit.sweep.store import RunStore
    from kernelaudit.verdict import Status, Verdict

    mod = benchmark_script("devices_projection")
    store = RunStore.create(tmp_path / "s", {"device": {"type": "cpu", "name": "test"}}, resume=False)
    cases = grid(GridSpec(ops=("add", "mul"), dtypes=("float32",), layouts=("contig",), directions=("fwd",),
                          thresholds=("2^31",), positions=("below", "above"), scale=10))
    for case, t in zip(cases, (4.0, 1.0, 2.0, 3.0)):
        store.append(case, Verdict(Status.OK, "rel", 0.0, 1e-5), t)
    p = mod.projection(str(tmp_path / "s"), [1, 2, 4])
    assert (p["cases"], p["case_time_s"], p["longest_case_s"]) == (4, 10.0, 4.0)
    assert [r["cases_s"] for r in p["rows"]] == [10.0, 6.0, 4.0]   # 4 | 1, 2, 3 in turn; four: 4 alone
