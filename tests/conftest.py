"""Shared fixtures: sweeps are run once per session and shared by the tests that read them."""

from __future__ import annotations

import os

import pytest
import torch

from kernelaudit.config import use_interpreter_without_cuda

use_interpreter_without_cuda()  # Triton kernels run on the CPU (in CI) through the interpreter

if os.environ.get("PYTEST_XDIST_WORKER"):
    # One xdist worker a core: torch's own intra-op threads (and those of the sweep
    # workers each test spawns, which inherit OMP_NUM_THREADS) would only contend.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)


#: Fixtures that cost many seconds (session- or module-scoped): the tests that use one
#: share an xdist worker (``--dist loadgroup``), so it is built once, not once per worker.
SHARED_EXPENSIVE = ("mps_run", "table", "one_worker_clean", "forced_phases")


#: Parametrizations that repeat a path CI already covers with another parameter (the
#: float32 twin, the batched or biased form of the same projection): marked ``slow`` and
#: deselected by default so the suite fits its 6 minutes on 2 cores; ``pytest -m slow``
#: (or ``-m ""`` for everything) runs them.
SLOW = (
    "test_fused_freivalds.py::test_the_check_from_projections_made_at_generation_gives_the_regenerating_sums[*bfloat16]",
    "test_fused_freivalds.py::test_inputs_generated_with_their_projections_are_the_plain_inputs_bit_for_bit[bfloat16-*]",
    "test_fused_freivalds.py::test_fused_freivalds_gives_the_same_verdicts_and_metrics_as_the_torch_check[b*-1]",
    "test_fused_freivalds.py::test_inputs_generated_with_their_projections_are_the_plain_inputs_bit_for_bit[float32-matmul4d-contig]",
    "test_fused_freivalds.py::test_the_flat_kernel_gives_the_rowsum_sums_and_flags_exactly_the_corrupted_matrices[bfloat16-masked]",
    "test_sweep_faults.py::test_calibrating_side_by_side_gives_the_same_tolerances_and_verdicts",
    "test_fused_freivalds.py::test_gradients_judged_by_projection_agree_with_the_float64_autograd_reference[m*]",
    "test_fused_freivalds.py::test_gradients_judged_by_projection_agree_with_the_float64_autograd_reference[linear]",
    "test_fused_freivalds.py::test_gradients_judged_by_projection_agree_with_the_float64_autograd_reference[addmm]",
    "test_fused_compare.py::test_fused_comparison_gives_the_same_verdicts_as_torch[sum-wrap32]",
    "test_sweep_workers.py::test_two_workers_record_the_same_cases_and_verdicts_as_one_under_the_mps_fault_model",
)


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(items):
    import re

    slow = re.compile("|".join(".*" + re.escape(p).replace(r"\*", ".*") + "$" for p in SLOW))
    for item in items:
        if slow.match(item.nodeid):
            item.add_marker(pytest.mark.slow)
        for name in SHARED_EXPENSIVE:
            if name in getattr(item, "fixturenames", ()):
                item.add_marker(pytest.mark.xdist_group(name))


@pytest.fixture(scope="session")
def mps_run(tmp_path_factory):
    """The --deep grid (every layout, size axis, size, direction) of the quick ops the
    mps rules act on (the matmul family) and two that stand for the rest (``sum``, a
    reduction with a backward; ``arange``, a factory) under the mps fault model at scale
    14 (thresholds 2^13 / 2^14 / 2^15), in every dtype but float16: the rules treat it as
    bfloat16 (one 16-bit path), and the README demo runs it. The other quick ops' cases
    repeat the "no rule applies" path (all ok: a quarter of the cases, none of the
    findings): ``benchmarks/`` and the README demo run them."""
    from kernelaudit import GridSpec, run_sweep
    from kernelaudit.sweep.cli import PRESETS
    from kernelaudit.sweep.ops.catalog import ALL_OPS, MATMUL, QUICK_OPS

    deep = PRESETS["deep"]
    dtypes = tuple(d for d in deep["dtypes"] if d != "float16")
    ops = tuple(o for o in QUICK_OPS if ALL_OPS[o] in MATMUL or o in ("sum", "arange"))
    spec = GridSpec(**{**deep, "ops": ops, "dtypes": dtypes}, scale=14)
    return run_sweep(spec, tmp_path_factory.mktemp("mps"), device="cpu", fault_model="mps")


@pytest.fixture(scope="module")
def triton_interpreter():
    """Run the corpus's Triton kernels on CPU tensors (interpreter mode) for a test
    module, whatever the machine; modules opt in with ``usefixtures``."""
    from kernelaudit.zoo.problems import solution_kernels as kernels

    before = kernels.set_interpret(True)
    yield
    kernels.set_interpret(before)


@pytest.fixture
def clean_guard():
    """No guard installed before or after the test (modules opt in with ``usefixtures``)."""
    from kernelaudit import guard

    guard.uninstall()
    yield
    guard.uninstall()


@pytest.fixture
def summary_cases():
    """(per-batch metrics, tolerances) for the judgement summary: ties at the maximum,
    NaN and inf, no tolerance, a zero tolerance on both rows, rows longer than one
    block, float32 metrics, one batch."""
    g = torch.Generator().manual_seed(3)
    a = torch.rand(2, 2500, dtype=torch.float64, generator=g)
    a[0, [7, 1800]] = 5.0  # a tie at the maximum: the first batch is reported
    a[1, 2400] = float("nan")  # NaN counts as inf
    a[1, 3] = float("inf")
    return [(a, [0.9, 0.5]), (a, [None, 0.0]),
            (torch.zeros(2, 1030, dtype=torch.float64), [0.0, 0.0]),  # nothing above a zero tolerance
            (a[:1, :1029].float(), [0.95]),
            (torch.tensor([[float("nan")]], dtype=torch.float64), [1.0])]


#: The full grid's run store of record (cumulative: every segment so far), compressed.
FULL_GRID_STORE = ("benchmarks/results/2026-12-08-h100-small-prefill-row-grown-qr-ldl-2p32-ok/store/"
                   "verdicts.jsonl.gz")


@pytest.fixture(scope="session")
def full_grid_findings() -> dict[str, list[str]]:
    """op -> ids of the full grid's cases whose last verdict (as the run store reads it:
    a later not-run skip keeps a judged verdict) is a finding: wrong, or an error that
    is neither unjudged (a timeout, kernelaudit's own failure, a failed calibration) nor
    CUDA out of memory inside a library (a memory skip since)."""
    import gzip
    import json
    from pathlib import Path

    from kernelaudit.sweep.judge.execution import DEVICE_ALLOC_FAILED
    from kernelaudit.sweep.rules_out import unjudged
    from kernelaudit.sweep.runfile import supersedes

    path = Path(__file__).resolve().parents[1] / FULL_GRID_STORE
    if not path.exists():
        pytest.skip("the full grid's store of record is not in this checkout")
    latest: dict = {}
    with gzip.open(path, "rt") as f:
        for line in f:
            r = json.loads(line)
            key = r["case"]["id"]
            if key not in latest or supersedes(r, latest[key]):
                latest[key] = r
    out: dict[str, list[str]] = {}
    for r in latest.values():
        v = r["verdict"]
        if v["status"] == "wrong" or (v["status"] == "error" and not unjudged(v)
                                      and DEVICE_ALLOC_FAILED not in (v.get("message") or "")):
            out.setdefault(r["case"]["op"], []).append(r["case"]["id"])
    return out


@pytest.fixture(scope="session")
def benchmark_script():
    """A loader of ``benchmarks/NAME.py`` as a module (the benchmarks are scripts, not a
    package): ``benchmark_script("repro_store_findings").run_one(...)``."""
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "benchmarks"
    loaded = {}

    def load(name: str):
        if name not in loaded:
            spec = importlib.util.spec_from_file_location(name, root / f"{name}.py")
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            loaded[name] = mod
        return loaded[name]
    return load
