"""The sweep on a real CUDA device (skipped without one)."""

from __future__ import annotations

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


def test_mps_fault_model_on_cuda_is_classified_as_the_rules_predict(tmp_path):
    from kernelaudit import GridSpec, run_sweep
    from kernelaudit.sweep.schedule import check_against_rules

    spec = GridSpec(ops=("bmm", "linear", "attention", "addmm"), dtypes=("float32", "bfloat16"),
                    thresholds=("2^31", "2^32"), positions=("below", "above"), scale=20)
    res = run_sweep(spec, tmp_path, device="cuda", fault_model="mps")
    checked, bad = check_against_rules(res.store, "mps")
    assert checked > 100 and not bad, bad[:10]
    # The rules' errors are raised cleanly: the device stays healthy, no worker is replaced.
    assert res.counts.get("error", 0) > 0
    assert res.store.manifest()["segments"][-1]["workers_replaced"] == 0


def test_real_bmm_just_past_2p32_outputs_is_judged_ok_on_cuda(tmp_path):
    from kernelaudit import GridSpec, run_sweep

    spec = GridSpec(ops=("bmm",), dtypes=("float16",), layouts=("contig", "aT"), directions=("fwd",),
                    thresholds=("2^32",), positions=("above",), scale=32)
    res = run_sweep(spec, tmp_path, device="cuda")
    assert res.counts.get("ok", 0) + res.counts.get("skipped", 0) == res.store.manifest()["plan"]["cases"]


def test_real_mm_backward_with_transposed_gradients_past_2p32_is_judged_ok_on_cuda(tmp_path):
    """The abT mm backward writes gradients laid out transposed: one column of a
    2^32-element gradient is 2^24 elements from the next, so column offsets pass 2^31.
    The projection kernels once multiplied them in int32 and read outside C (an illegal
    address, then every later case of the worker failed; the full H200 sweep of
    2026-12-03 found 5 wrong and 12 error cases there): now every case is ok."""
    from kernelaudit import GridSpec, run_sweep

    spec = GridSpec(ops=("mm",), dtypes=("bfloat16",), layouts=("abT",), directions=("bwd",),
                    thresholds=("2^32",), positions=("below", "above"), scale=32)
    res = run_sweep(spec, tmp_path, device="cuda")
    assert res.counts.get("ok", 0) == res.store.manifest()["plan"]["cases"], res.counts
    assert res.store.manifest()["segments"][-1]["workers_replaced"] == 0


def test_sweep_workers_allocate_in_expandable_segments_and_the_run_records_it(tmp_path, monkeypatch):
    import os
    import subprocess
    import sys

    from kernelaudit import GridSpec, run_sweep
    from kernelaudit.sweep import memory

    for var in memory.ALLOC_CONF_VARS:
        monkeypatch.delenv(var, raising=False)
    spec = GridSpec(ops=("add",), dtypes=("float32",), directions=("fwd",), thresholds=("2^31",),
                    positions=("above",), scale=24)
    res = run_sweep(spec, tmp_path, device="cuda")
    m = res.store.manifest()
    assert m["cuda_alloc"] == m["segments"][-1]["cuda_alloc"] == "expandable_segments:True"
    # A process started as a worker starts (CUDA initialised, the settings set, then the
    # first allocation): every segment of its caching allocator is expandable.
    code = ("import torch; from kernelaudit.sweep.memory import set_allocator; d = torch.device('cuda'); "
            "torch.cuda.init(); set_allocator(d); x = torch.empty(2**28, device=d); "
            "segs = torch.cuda.memory_snapshot(); print(len(segs) > 0 and all(s.get('is_expandable') for s in segs))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ), timeout=120)
    assert out.stdout.strip() == "True", out.stderr[-2000:]


@pytest.mark.parametrize("fault", ["none", "wrap32", "unwritten-tail", "bytes32"])
def test_sampled_judge_gives_autos_verdicts_on_cuda_on_fewer_chunks(fault):
    """--mode sampled on the device: the verdict and first bad index auto gives, for every
    case of a small grid, with the judge cut into many chunks so sampling leaves some out."""
    from kernelaudit.sweep.cases import GridSpec, grid
    from kernelaudit.sweep.judge.execution import execute
    from kernelaudit.sweep.tolerance import calibrated

    cases = grid(GridSpec(ops=("add", "softmax", "cat", "sort", "linalg.svdvals"), dtypes=("float32", "float16"),
                          thresholds=("2^31", "2^32"), positions=("above",), axes=("elements", "bytes"), scale=20))
    tols, kept_all, total_all, statuses = {}, 0, 0, []
    for case in cases:
        if case.tolerance_key not in tols:
            tols[case.tolerance_key] = calibrated(execute(case.with_batch(4), "cuda", tolerances=None).worst,
                                                  case.dtype)
        auto = execute(case, "cuda", fault_model=fault, tolerances=tols[case.tolerance_key], ref_chunk=2**14).verdict
        sampled = execute(case, "cuda", fault_model=fault, tolerances=tols[case.tolerance_key], ref_chunk=2**14,
                          mode="sampled").verdict
        assert (sampled.status, sampled.first_bad_index) == (auto.status, auto.first_bad_index), case.id
        statuses.append(auto.status.value)
        n = next((o["details"]["sampled_chunks"] for o in sampled.details.get("outputs", ())
                  if o.get("details", {}).get("sampled_chunks")), None)
        if n:
            kept, total = map(int, n.split(" of "))
            kept_all, total_all = kept_all + kept, total_all + total
    assert kept_all < 0.8 * total_all, (kept_all, total_all)
    if fault == "none":
        assert set(statuses) == {"ok"}, statuses
    else:
        assert "wrong" in statuses, statuses
