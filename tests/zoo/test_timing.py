"""`kernelaudit check --time`: honest candidates are timed and pass, every CPU timing exploit is caught.

CPU only, tiny shapes (the problems' SMALL_SHAPES), few iterations. The CUDA-only
tricks (side streams, events) are in tests/gpu/test_timing_gpu.py.
"""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from kernelaudit.config import PEAK_BANDWIDTH
from kernelaudit.errors import InvalidArgument
from kernelaudit.verdict import Status
from kernelaudit.zoo.check import check_command
from kernelaudit.zoo.oracles import Subject
from kernelaudit.zoo.problems import CORPUS_DIR, PACKAGE_DIR, ProblemCase, load_candidate, load_problem, solution_path
from kernelaudit.zoo.timing import (
    Peaks, capture_timers, matmul_flops, median_ci, physical_floor, time_candidate, timer_tampering,
)

EXPLOITS = PACKAGE_DIR / "exploits"
RELU = CORPUS_DIR / "relu.py"
#: Peaks for the tests: no copy measurement (it costs 100 ms), a floor far below any real call.
TEST_PEAKS = Peaks(bandwidth=1e11, flops=None, source="test")
#: A small flush: the tests check the procedure, not the caches of this machine.
FLUSH = 1 << 16

#: What --time reports for each CPU timing exploit (the verdict's metric).
CAUGHT_BY = {
    "relu__timing_patch_event": "replaced timers",
    "relu__timing_patch_synchronize": "replaced timers",
    "relu__timing_patch_perf_counter": "replaced timers",
    "relu__timing_pointer_cache": "max_diff",
    "relu__timing_background_thread": "threads left running",
    "relu__timing_lazy_output": "lazy outputs",
    "matmul_square__timing_trial_count": "error growth after the first calls",
}


@pytest.fixture
def timers():
    """Timers captured before the candidate loads; put back whatever a failing test left replaced."""
    snap = capture_timers()
    yield snap
    timer_tampering(snap)


def honest(tmp_path: Path) -> Path:
    path = tmp_path / "honest_relu.py"
    path.write_text(textwrap.dedent("""
        import torch, torch.nn as nn

        class ModelNew(nn.Module):
            def forward(self, x):
                return torch.clamp(x, min=0)
    """))
    return path


def timed(candidate: Path, timers: dict, **kwargs):
    cand = load_candidate(candidate)
    problem = load_problem(CORPUS_DIR / f"{cand.problem_name or 'relu'}.py")
    case = ProblemCase.make(problem, device="cpu", small=True)
    kwargs = {"iters": 4, "warmup": 6, "flush_bytes": FLUSH, "peaks": TEST_PEAKS, "seed": 7, **kwargs}
    return time_candidate(case, Subject(cand), timers=timers, **kwargs)


def test_honest_candidate_is_ok_with_a_plausible_speedup(tmp_path, timers):
    r = timed(honest(tmp_path), timers, iters=8, warmup=None)  # a random warm-up count
    assert r.verdict.status is Status.OK, r.verdict.message
    # clamp(min=0) against torch.relu: the same work, so about 1x (a shared CPU is noisy)
    assert 0.2 < r.speedup < 5
    lo, hi = r.speedup_ci
    assert lo <= r.speedup <= hi and 0.95 < r.ci_coverage < 1
    assert r.reference.n == r.candidate.n == 8 and 5 <= r.warmup <= 10
    assert 0 < r.floor_s < r.candidate.min
    assert "speed-up" in r.verdict.message and "seed 7" in r.summary()


@pytest.mark.usefixtures("triton_interpreter")
def test_corpus_triton_solution_is_not_rejected(timers):
    r = timed(solution_path("relu"), timers, iters=3, warmup=2)
    assert r.verdict.status is Status.OK, r.verdict.message


def pooled(tmp_path: Path, deferred: bool) -> Path:
    """A relu that runs on a thread pool it makes at its first call (as torch.compile's
    Inductor does): waiting for the result, or (``deferred``) returning before it is written."""
    path = tmp_path / f"pooled_relu_{deferred}.py"
    path.write_text(textwrap.dedent(f"""
        import concurrent.futures, time
        import torch, torch.nn as nn

        class ModelNew(nn.Module):
            pool = None

            def forward(self, x):
                self.pool = self.pool or concurrent.futures.ThreadPoolExecutor(1)
                if not {deferred}:
                    return self.pool.submit(torch.clamp, x, min=0).result()
                y = torch.empty_like(x)
                self.pool.submit(lambda: (time.sleep(0.05), y.copy_(torch.clamp(x, min=0))))
                return y
    """))
    return path


def test_a_thread_pool_waiting_for_work_after_the_call_is_no_thread_left_running(tmp_path, timers):
    t0 = time.perf_counter()
    r = timed(pooled(tmp_path, deferred=False), timers)
    assert r.verdict.status is Status.OK, r.verdict.message
    assert time.perf_counter() - t0 < 5.0  # no join of THREAD_JOIN_S on the waiting worker


def test_work_left_running_on_a_thread_pool_is_caught(tmp_path, timers):
    r = timed(pooled(tmp_path, deferred=True), timers)
    assert r.verdict.status is Status.WRONG and r.verdict.metric == "threads left running", r.verdict.message


@pytest.mark.parametrize("name", sorted(CAUGHT_BY))
def test_every_cpu_timing_exploit_is_caught(name, timers):
    r = timed(EXPLOITS / f"{name}.py", timers)
    assert r.verdict.status is Status.WRONG, r.verdict.message
    assert r.verdict.metric == CAUGHT_BY[name], r.verdict.message
    assert timer_tampering(timers, restore=False) == []  # whatever was replaced is back


def test_replaced_timer_is_named_and_restored(timers):
    r = timed(EXPLOITS / "relu__timing_patch_perf_counter.py", timers)
    assert "replaced time.perf_counter (restored)" in r.verdict.message
    assert time.perf_counter is timers["time.perf_counter"]


def test_every_timing_exploit_file_is_tested_here_or_on_the_gpu(timers):  # loading them replaces timers
    files = {p.stem for p in EXPLOITS.glob("*__timing_*.py")}
    cuda_only = {n for n in files if getattr(load_candidate(EXPLOITS / f"{n}.py").module, "CUDA_ONLY", False)}
    assert files - cuda_only == set(CAUGHT_BY) and len(files) >= 6


def test_time_below_the_floor_is_rejected_with_the_figures(tmp_path, timers):
    ticks = iter(range(10**9))

    def fake_clock() -> float:  # 1 ns per reading: every candidate call "takes" 1 ns
        return next(ticks) * 1e-9

    # a floor of 3.2 us: above the 1 ns the fake clock reports, below any real call of the reference
    r = timed(honest(tmp_path), timers, candidate_clock=fake_clock, peaks=Peaks(5e8, None, "test"))
    assert r.verdict.status is Status.WRONG and r.verdict.metric == "time below the physical floor"
    assert r.verdict.value == pytest.approx(1e-9) and r.verdict.tolerance == pytest.approx(r.floor_s)
    assert "below the physical floor" in r.verdict.message and "B/s" in r.verdict.message


def test_reference_below_the_floor_means_wrong_peaks_not_a_guilty_candidate(tmp_path, timers):
    r = timed(honest(tmp_path), timers, peaks=Peaks(bandwidth=1.0, flops=None, source="a wrong figure"))
    assert r.verdict.status is Status.SKIPPED and "peak figures are wrong" in r.verdict.message


def test_floor_counts_inputs_outputs_beyond_the_cache_and_matmul_flops():
    case = ProblemCase.make(load_problem(CORPUS_DIR / "matmul_square.py"), device="cpu", small=True)
    out = [torch.empty(64, 64)]
    assert matmul_flops(case, out) == 2 * 64**3
    floor = physical_floor(case, out, Peaks(1e9, 1e9, "test"), cache_bytes=0)
    assert floor.bytes == 3 * 64 * 64 * 4
    assert floor.seconds == pytest.approx(max(0.5 * floor.bytes / 1e9, 2 * 64**3 / 1e9))
    relu = ProblemCase.make(load_problem(RELU), device="cpu", small=True)
    assert matmul_flops(relu, [torch.empty(4, 200)]) is None


def test_median_confidence_interval_from_order_statistics():
    lo, hi, cov = median_ci(list(range(1, 21)))
    assert (lo, hi) == (6, 15) and cov == pytest.approx(0.9586, abs=1e-4)
    lo, hi, cov = median_ci([3.0, 1.0, 2.0, 5.0, 4.0])  # too few for 95 %: the range, and what it covers
    assert (lo, hi) == (1.0, 5.0) and cov == pytest.approx(1 - 2 / 32)


def test_bad_arguments_name_the_argument(monkeypatch, tmp_path, timers):
    with pytest.raises(InvalidArgument, match="--time-iters=2"):
        timed(honest(tmp_path), timers, iters=2)
    monkeypatch.setenv(PEAK_BANDWIDTH.name, "fast")
    with pytest.raises(InvalidArgument, match="KERNELAUDIT_PEAK_BANDWIDTH='fast'"):
        timed(honest(tmp_path), timers, peaks=None)
    r = CliRunner().invoke(check_command, [str(RELU), str(honest(tmp_path)), "--time-iters", "1"])
    assert r.exit_code == 2 and "--time-iters=1" in r.output


def test_cli_time_json_and_exit_codes(tmp_path, monkeypatch):
    monkeypatch.setenv(PEAK_BANDWIDTH.name, "1e11")  # no copy measurement: the test checks the plumbing
    base = [str(RELU), "--small", "--device", "cpu", "--no-isolate", "--time-iters", "3", "--json"]
    r = CliRunner().invoke(check_command, [base[0], str(honest(tmp_path)), *base[1:]], catch_exceptions=False)
    d = json.loads(r.output)
    assert r.exit_code == 0 and d["verdict"]["status"] == "ok" and d["timing"]["verdict"]["status"] == "ok"
    assert d["timing"]["speedup"] > 0 and d["timing"]["candidate"]["n"] == 3 and d["timing"]["floor_s"] > 0
    r = CliRunner().invoke(check_command, [base[0], str(EXPLOITS / "relu__timing_lazy_output.py"), *base[1:]],
                           catch_exceptions=False)
    d = json.loads(r.output)
    assert r.exit_code == 1 and d["verdict"]["metric"] == "lazy outputs"
    assert d["verdict"]["message"].startswith("timing: ") and d["verdict"]["details"]["oracle"]["status"] == "ok"
