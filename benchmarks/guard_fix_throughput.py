"""``fix`` on an unsafe large bmm: throughput relative to the unguarded op, same shapes.

Two unsafe calls of the study's series, just past 2^32 (scaled by ``--scale``):

* ``out-crossing, rule A``: (B,256,64) @ (B,64,256) with the second operand a
  transposed view, output > 2^32 elements;
* ``in-crossing, rule C``: (B,256,256) @ (B,256,64), contiguous, first operand > 2^32.

The unguarded op is the device's honest kernel; the guarded one is the same call with
the ``mps`` rules enforced on this device (``fix``: pieces written in place). Timed with
CUDA events (or perf_counter on CPU), interleaved, median of ``--reps``. Target on the
H200: guarded throughput >= 0.9x unguarded.

    python benchmarks/guard_fix_throughput.py --device cuda --out benchmarks/results/guard_fix_h200.json
    python benchmarks/guard_fix_throughput.py --device cpu --scale 24 --out benchmarks/results/guard_fix_cpu_s24.json
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

from kernelaudit import guard
from kernelaudit.guard.engine import Engine
from kernelaudit.guard.intercept import _Overrides
from kernelaudit.thresholds import Thresholds

from _common import emit  # benchmarks/ is on sys.path when a script runs

#: Acceptance bound: guarded throughput / unguarded throughput (issue 3).
MIN_RATIO = 0.9


def _timer(device):
    if torch.device(device).type == "cuda":
        def t(fn):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            s.record()
            fn()
            e.record()
            torch.cuda.synchronize()
            return s.elapsed_time(e) / 1e3
    else:
        def t(fn):
            s = time.perf_counter()
            fn()
            return time.perf_counter() - s
    return t


def shapes(series: str, th: Thresholds, n: int = 256, k: int = 64):
    """(a shape, b shape, b transposed?) just past 2^32 (scaled)."""
    if series == "out":
        B = th.t32 // (n * n) + 1
        return (B, n, k), (B, n, k), True       # b given as (B, n, k) transposed -> (B, k, n)
    B = th.t32 // (n * n) + 1
    return (B, n, n), (B, n, k), False


def bench(series: str, device, dtype, th: Thresholds, reps: int) -> dict:
    sa, sb, bt = shapes(series, th)
    g = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(sa, device=device, dtype=dtype, generator=g)
    b = torch.randn(sb, device=device, dtype=dtype, generator=g)
    if bt:
        b = b.transpose(1, 2)
    policy = guard.mps_policy(th, device_types=(torch.device(device).type,))
    call = guard.Call.of("bmm", (a, b))
    hits = policy.check(call)
    timer = _timer(device)
    ref = torch.bmm(a, b)
    # One engine per action for the whole run, so that its decision and plan caches are
    # warm (as in any loop that repeats a shape); the overrides are registered around
    # each timed call only, so the unguarded op runs with no override at all.
    engines = {act: Engine(policy, act) for act in ("fix", "verify")}

    def guarded(act):
        ov = _Overrides(engines[act])
        try:
            return timer(lambda: torch.bmm(a, b))
        finally:
            ov.remove()

    for act in engines:  # warm-up: first-call decision and plan
        guarded(act)
    out = {"unguarded": [], "fix": [], "verify": []}
    for r in range(reps):
        out["unguarded"].append(timer(lambda: torch.bmm(a, b)))
        out["fix"].append(guarded("fix"))
        out["verify"].append(guarded("verify"))
    ov = _Overrides(engines["fix"])
    try:
        got = torch.bmm(a, b)
    finally:
        ov.remove()
    plan = engines["fix"].planner.plan(call)
    equal = bool(torch.equal(got, ref))
    del got, ref
    med = {k: statistics.median(v) for k, v in out.items()}
    flops = 2 * call.out_numel * a.shape[-1]
    return {
        "series": series, "rule": [h.rule.name for h in hits], "a": list(sa), "b": list(b.shape),
        "b_strides": list(b.stride()), "out_elements": call.out_numel, "dtype": str(dtype).replace("torch.", ""),
        "plan": plan.describe() if plan else None, "seconds_median": med,
        "tflops_unguarded": flops / med["unguarded"] / 1e12, "tflops_fix": flops / med["fix"] / 1e12,
        "throughput_ratio_fix": med["unguarded"] / med["fix"],
        "throughput_ratio_verify": med["unguarded"] / med["verify"],
        "fix_bitwise_equal": equal, "pass": med["unguarded"] / med["fix"] >= MIN_RATIO,
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--scale", type=int, default=32)
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--out", type=Path, default=None)
    a = p.parse_args(argv)
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        print("skipped: CUDA is not available")
        return 0
    th = Thresholds(a.scale)
    dtype = getattr(torch, a.dtype)
    res = {"benchmark": "guard_fix_throughput", "device": a.device, "scale": a.scale, "min_ratio": MIN_RATIO,
           "results": [bench(s, a.device, dtype, th, a.reps) for s in ("out", "in")],
           "torch": torch.__version__, "python": platform.python_version(),
           "date": time.strftime("%Y-%m-%d", time.gmtime()), "host": platform.node()}
    if a.device.startswith("cuda"):
        res["gpu"] = torch.cuda.get_device_name()
        try:
            import triton
            res["triton"] = triton.__version__
        except ImportError:
            pass
    emit(res, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
