"""Where a sweep case's time goes: inputs, op, judging; cold and warm allocator.

Runs representative cases of the ``--full`` grid in this process (no worker pool) at
the real thresholds and records, per case, the phase timings ``execute`` reports
(``inputs_s``, ``op_s``, ``judge_s``) twice: after ``torch.cuda.empty_cache()``
(``cold``: every allocation goes to the driver) and right after the previous run
(``warm``: the caching allocator reuses its blocks). Then a ``torch.profiler`` table of
the top kernels and CPU ops for a few cases.

By default the cases run as calibration (no tolerances: every chunk against its float64
reference). ``--judged`` calibrates each case's tolerances first, as a sweep does, and
runs it judged: the path a sweep of record takes (the bit-equality pre-check, chunk by
chunk, then the float64 reference only where bits differ).

    python benchmarks/sweep_profile.py --out profile.json [--threshold 2^32] [--profile bmm/bfloat16] [--judged]
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import torch

from kernelaudit.sweep.cases import GridSpec, calibration_batch, grid
from kernelaudit.sweep.judge.execution import execute
from kernelaudit.sweep.tolerance import calibrated

#: (op, dtype, direction) triples profiled by default: the grid's most expensive ops and
#: one of each other family.
DEFAULT = ("bmm/float32/fwd,bmm/bfloat16/fwd,bmm/float32/bwd,bmm/bfloat16/bwd,baddbmm/float32/bwd,"
           "mm/float32/fwd,mm/float32/bwd,matmul4d/bfloat16/bwd,linear/float32/bwd,add/float32/fwd,"
           "add/float32/bwd,gelu/bfloat16/bwd,softmax/float32/fwd,softmax/float32/bwd,sum/float32/fwd,"
           "cumsum/float32/fwd,gather/float32/fwd,cat/float32/fwd,sort/float32/fwd,nonzero/int32/fwd,"
           "sdpa/bfloat16/fwd,attention/float16/bwd")


def cases_for(triples: str, threshold: str, layout: str, scale: int = 32):
    out = []
    for t in triples.split(","):
        op, dtype, direction = t.split("/")
        cs = grid(GridSpec(ops=(op,), dtypes=(dtype,), layouts=(layout,), directions=(direction,),
                           thresholds=(threshold,), positions=("at",), scale=scale))
        out += cs[:1]  # one series
    return out


def tolerances(case, dev, judged: bool):  # noqa: ANN001, ANN201
    """None (calibration), or the case's tolerances calibrated below the thresholds as a sweep does."""
    if not judged:
        return None
    cal = case.with_batch(calibration_batch(case), threshold="cal", position="below")
    return calibrated(execute(cal, dev, tolerances=None).worst, case.dtype)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--cases", default=DEFAULT, help="comma list of op/dtype/direction")
    ap.add_argument("--threshold", default="2^32")
    ap.add_argument("--layout", default="contig")
    ap.add_argument("--scale", type=int, default=32, help="threshold bits (smaller for a CPU smoke run)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--judged", action="store_true", help="calibrate, then run judged (a sweep's path)")
    ap.add_argument("--profile", default="bmm/bfloat16/fwd,bmm/float32/bwd,add/float32/bwd,softmax/float32/bwd",
                    help="op/dtype/direction triples to run under torch.profiler")
    args = ap.parse_args()
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    rows = []
    for case in cases_for(args.cases, args.threshold, args.layout, args.scale):
        tol = tolerances(case, dev, args.judged)
        execute(case, dev, tolerances=tol)  # compile kernels, fill the allocator
        if cuda:
            torch.cuda.empty_cache()
        t0 = time.perf_counter()
        cold = execute(case, dev, tolerances=tol)
        t_cold = time.perf_counter() - t0
        t0 = time.perf_counter()
        warm = execute(case, dev, tolerances=tol)
        t_warm = time.perf_counter() - t0
        row = {"case": case.id, "batch": case.batch, "judged": args.judged, "status": cold.verdict.status.value,
               "message": cold.verdict.message[:200], "cold_s": t_cold, "warm_s": t_warm,
               "cold": cold.verdict.details.get("timing") if cold.verdict.details else None,
               "warm": warm.verdict.details.get("timing") if warm.verdict.details else None}
        rows.append(row)
        print(json.dumps(row), flush=True)
    tables = {}
    for t in args.profile.split(","):
        if not t:
            continue
        case = cases_for(t, args.threshold, args.layout, args.scale)[0]
        tol = tolerances(case, dev, args.judged)
        execute(case, dev, tolerances=tol)
        acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
        with torch.profiler.profile(activities=acts) as prof:
            execute(case, dev, tolerances=tol)
        ka = prof.key_averages()
        tables[case.id] = {"cuda": ka.table(sort_by="self_cuda_time_total" if cuda else "cpu_time_total", row_limit=15),
                           "cpu": ka.table(sort_by="self_cpu_time_total", row_limit=15)}
        print(case.id, "\n", tables[case.id]["cuda"], "\n", tables[case.id]["cpu"], flush=True)
    res = {"date": time.strftime("%Y-%m-%d"), "device": torch.cuda.get_device_name() if cuda else "cpu", "torch": torch.__version__,
           "python": platform.python_version(), "rows": rows, "profiles": tables}
    with open(args.out, "w") as f:
        json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
