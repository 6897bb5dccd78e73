"""What every benchmark script shares: print its JSON result and write it to ``--out``."""

from __future__ import annotations

import json
from pathlib import Path


def emit(result: dict, out: Path | str | None) -> None:
    """Print ``result`` as JSON, and write it to ``out`` (parents created) when given."""
    text = json.dumps(result, indent=1)
    print(text)
    if out:
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")


def cuda_median(fn, reps: int = 5) -> float:
    """Median seconds of ``reps`` CUDA-event timed runs of ``fn`` after one untimed run
    (which compiles and warms up)."""
    import torch

    fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e) / 1e3)
    ts.sort()
    return ts[len(ts) // 2]


def crossing_bmm(dtype: str, device):
    """The out-crossing bmm the verify benchmarks time, run once on ``device``:
    (B,256,64) x (B,64,256), B = 65537 (2^32 + 65536 output elements).
    Returns ``(case, placed, a, b, c)``: the case, its placed operands, the device
    inputs and the output."""
    from kernelaudit.sweep.cases import Case, batch_for
    from kernelaudit.sweep.judge.operands import device_inputs
    from kernelaudit.sweep.judge.execution import run_op
    from kernelaudit.thresholds import REAL

    B = batch_for(REAL.t32, 256 * 256, "above")
    case = Case("bmm", dtype, "contig", "out", "2^32", "above", B, "fwd", 0, 32)
    placed, outs, _, _ = run_op(case, device, "none")
    _, (a, b) = device_inputs(placed, device, grad=False)
    return case, placed, a, b, outs[0]


def whole_check(case, placed, c, device, projections=None, **tuning) -> None:
    """kernelaudit's whole check of ``c`` as the sweep runs it (Freivalds projections and
    spot checks; tolerances of 1, verdicts unused): the public
    :func:`kernelaudit.sweep.judge.check_matmul_output`. ``tuning``: ``flat_tile``,
    ``flat_interleave``."""
    from kernelaudit.sweep.judge import check_matmul_output

    check_matmul_output(case, placed, c, device, projections=projections, **tuning)


#: nvidia-smi's clock event reasons (NVML's ``nvmlClocksEventReason*``), by bit.
CLOCK_EVENTS = {0x1: "gpu_idle", 0x2: "applications_clocks", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
                0x10: "sync_boost", 0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake",
                0x100: "display_clocks"}


def parse_clock_samples(text: str) -> dict:
    """Summary of nvidia-smi lines ``clocks.sm, power.draw, clocks_event_reasons.active``
    (csv, noheader, nounits): samples, the SM clock's median, min and max (MHz), the
    median and max power (W; ``[N/A]`` skipped) and every event reason seen with how many
    samples had it. Lines that are not three fields are ignored (a startup message)."""
    mhz, watts, seen = [], [], {}
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 3:
            continue
        try:
            mhz.append(float(parts[0]))
        except ValueError:
            continue
        try:
            watts.append(float(parts[1]))
        except ValueError:
            pass
        try:
            bits = int(parts[2], 16)
        except ValueError:
            bits = 0
        for bit, name in CLOCK_EVENTS.items():
            if bits & bit:
                seen[name] = seen.get(name, 0) + 1

    def median(xs):
        xs = sorted(xs)
        return xs[len(xs) // 2] if xs else None

    return {"samples": len(mhz), "sm_mhz_median": median(mhz), "sm_mhz_min": min(mhz, default=None),
            "sm_mhz_max": max(mhz, default=None), "power_w_median": median(watts),
            "power_w_max": max(watts, default=None), "clock_events": seen}


class GpuClocks:
    """Samples GPU ``index``'s SM clock, power draw and clock event reasons with
    nvidia-smi every ``interval_ms`` while the block runs; ``summary`` afterwards
    (:func:`parse_clock_samples`), ``None`` where nvidia-smi is missing or failed (its
    reason in ``error``). A kernel's clock under sustained load is what its FLOP/s are
    made of: a power cap lowers it for one kernel and not another."""

    #: the event reasons' field, and its name before NVIDIA's drivers 535
    REASONS = ("clocks_event_reasons.active", "clocks_throttle_reasons.active")

    def __init__(self, index: int = 0, interval_ms: int = 100) -> None:
        self.index, self.interval_ms = index, interval_ms
        self.summary: dict | None = None
        self.error: str | None = None
        self._proc = None

    def __enter__(self) -> "GpuClocks":
        import subprocess
        import tempfile

        self._out = tempfile.TemporaryFile(mode="w+")
        try:
            reasons = next((r for r in self.REASONS if subprocess.run(
                ["nvidia-smi", f"--query-gpu={r}", "--format=csv,noheader", "-i", str(self.index)],
                capture_output=True).returncode == 0), self.REASONS[-1])
            self._proc = subprocess.Popen(
                ["nvidia-smi", f"--query-gpu=clocks.sm,power.draw,{reasons}", "--format=csv,noheader,nounits",
                 "-i", str(self.index), "-lms", str(self.interval_ms)],
                stdout=self._out, stderr=subprocess.STDOUT, text=True)
        except OSError as e:
            self.error = f"nvidia-smi: {e}"
        return self

    def __exit__(self, *exc) -> None:
        if self._proc is None:
            return
        self._proc.terminate()
        try:
            self._proc.wait(timeout=5)
        except Exception:  # noqa: BLE001 - a sampler must never cost the benchmark
            self._proc.kill()
        self._out.seek(0)
        text = self._out.read()
        self._out.close()
        summary = parse_clock_samples(text)
        if summary["samples"]:
            self.summary = summary
        else:
            self.error = f"nvidia-smi gave no samples: {text.strip()[:200]!r}"


def sustained(fn, flop: float, seconds: float = 3.0, index: int = 0) -> dict:
    """Run ``fn`` (one call: ``flop`` floating-point operations on the GPU) back to back
    for ``seconds`` after one untimed call, with :class:`GpuClocks` sampling GPU
    ``index``: calls, seconds, sustained TFLOP/s, the clock summary (or why none)."""
    import time

    import torch

    fn()
    torch.cuda.synchronize()
    with GpuClocks(index) as g:
        time.sleep(0.3)   # the sampler's first lines are of the idle GPU: keep them few
        calls, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            fn()
            calls += 1
            if calls % 8 == 0:
                torch.cuda.synchronize()   # queue at most 8 calls ahead of the clock
        torch.cuda.synchronize()
        elapsed = time.perf_counter() - t0
    return {"calls": calls, "seconds": round(elapsed, 3), "tflops": round(flop * calls / elapsed / 1e12, 2),
            "clocks": g.summary, **({"clocks_error": g.error} if g.error else {})}


def per_clock_vs(rows: dict, base: str) -> None:
    """Add to each row of ``rows`` (name -> :func:`sustained` row) ``vs_<base>``, its
    TFLOP/s over row ``base``'s, and ``flop_per_clock_vs_<base>``, the same a clock (at
    each run's median SM clock): the share a clock-speed difference does not explain."""
    ref = rows[base]
    for row in rows.values():
        row[f"vs_{base}"] = round(row["tflops"] / ref["tflops"], 3)
        if row.get("clocks") and ref.get("clocks"):
            row[f"flop_per_clock_vs_{base}"] = round(
                row["tflops"] / row["clocks"]["sm_mhz_median"] / (ref["tflops"] / ref["clocks"]["sm_mhz_median"]), 3)


def nvidia_smi_index() -> int:
    """nvidia-smi's index of CUDA device 0 (the first of ``CUDA_VISIBLE_DEVICES`` where it
    is a number)."""
    import os

    first = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]
    return int(first) if first.isdigit() else 0
