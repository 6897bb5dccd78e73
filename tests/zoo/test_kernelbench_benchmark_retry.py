"""``benchmarks/kernelbench_false_rejections.py`` judges again, alone, each problem that ran
out of memory side by side (the H200 own-shape run met other workers' memory): the
records it picks are the out-of-memory ones, as the device wrote them."""

from __future__ import annotations


def test_out_of_memory_records_are_picked_for_a_second_run_alone(benchmark_script):
    oom = benchmark_script("kernelbench_false_rejections").out_of_memory
    device_oom = {"problem": "level1/23_Softmax", "class": "cannot-judge",
                  "reason": "reference: checker-error: OutOfMemoryError: CUDA out of memory. Tried to allocate 12.00 GiB."}
    died = {"problem": "level1/19_ReLU", "class": "cannot-judge",
            "reason": "the worker died while judging it (exit code -9; out of memory or a crash)"}
    checker = {"problem": "level1/1_x", "class": "cannot-judge", "reference": {"status": "checker-oom"}}
    assert oom(device_oom) and oom(died) and oom(checker)
    for fine in ({"problem": "level1/2_x", "class": "ok"},
                 {"problem": "level1/3_x", "class": "false-rejection", "reason": "reference rejected by tamper"},
                 {"problem": "level1/4_x", "class": "cannot-judge", "reason": "timed out after 240 s"}, {}):
        assert not oom(fine), fine
