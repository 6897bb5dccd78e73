"""``--mode auto`` against ``--mode sampled``, side by side on the same cases: judge time
and verdicts (the check of ``sampled_judge_projection.py``'s projection on a device).

Each case is calibrated once, then judged under ``auto`` and ``sampled`` in turns (the
order alternating from case to case), the op run afresh each time; the result lists
per case both judge times, both statuses and the chunks sampled kept.

    python benchmarks/sampled_ab.py --device cuda --ops linalg.svdvals,norm.nuc,nn.functional.layer_norm \\
        --axes bytes --sizes "2^31 B+" --out DIR/sampled_ab.json
    python benchmarks/sampled_ab.py --device cpu --scale 12 --ops softmax,cumsum --out /tmp/ab.json
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import emit  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--ops", required=True, help="comma list of sweep ops")
    ap.add_argument("--dtypes", default="float32")
    ap.add_argument("--axes", default="bytes", help="comma list of size axes (elements, bytes, dim)")
    ap.add_argument("--thresholds", default="2^31", help="the elements axis' limits (2^31, 2^32)")
    ap.add_argument("--sizes", default=None, help="keep only these size labels (e.g. '2^31 B+,2^32+')")
    ap.add_argument("--positions", default="above")
    ap.add_argument("--directions", default="fwd")
    ap.add_argument("--scale", type=int, default=32)
    ap.add_argument("--budget-s", type=float, default=None, help="start no case after this many seconds")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    import torch

    from kernelaudit.sweep.cases import GridSpec, grid
    from kernelaudit.sweep.judge.execution import execute
    from kernelaudit.sweep.tolerance import calibrated

    if a.device.startswith("cuda") and not torch.cuda.is_available():
        print("sampled_ab: no CUDA device", file=sys.stderr)
        return 3
    spec = GridSpec(ops=tuple(a.ops.split(",")), dtypes=tuple(a.dtypes.split(",")), layouts=("contig",),
                    thresholds=tuple(a.thresholds.split(",")), positions=tuple(a.positions.split(",")),
                    directions=tuple(a.directions.split(",")), axes=tuple(a.axes.split(",")), scale=a.scale)
    sizes = set(a.sizes.split(",")) if a.sizes else None
    t0 = time.perf_counter()
    rows, tols = [], {}
    for i, case in enumerate(c for c in grid(spec) if sizes is None or c.size in sizes):
        if a.budget_s is not None and time.perf_counter() - t0 > a.budget_s:
            break
        if case.tolerance_key not in tols:
            tols[case.tolerance_key] = calibrated(execute(case.with_batch(4), a.device, tolerances=None).worst,
                                                  case.dtype)
        row = {"id": case.id, "batch": case.batch}
        for mode in (("auto", "sampled") if i % 2 == 0 else ("sampled", "auto")):
            out = execute(case, a.device, tolerances=tols[case.tolerance_key], mode=mode)
            v = out.verdict
            timing = v.details.get("timing", {})
            row[mode] = {"status": v.status.value, "judge_s": timing.get("judge_s"), "op_s": timing.get("op_s"),
                         "elapsed_s": round(out.elapsed_s, 4), "first_bad_index": v.first_bad_index,
                         "sampled_chunks": next((o["details"].get("sampled_chunks") for o in v.details.get("outputs", ())
                                                 if o.get("details", {}).get("sampled_chunks")), None)}
        rows.append(row)
        print(f"{case.id}: auto {row['auto']['status']} {row['auto']['judge_s']} s, sampled "
              f"{row['sampled']['status']} {row['sampled']['judge_s']} s ({row['sampled']['sampled_chunks']})",
              file=sys.stderr)
    judge = {m: round(sum(r[m]["judge_s"] or 0.0 for r in rows), 3) for m in ("auto", "sampled")}
    result = {"device": torch.cuda.get_device_name() if a.device.startswith("cuda") else "cpu",
              "torch": torch.__version__, "cases": len(rows), "judge_s": judge,
              "same_status": all(r["auto"]["status"] == r["sampled"]["status"] for r in rows), "rows": rows}
    emit(result, a.out)
    return 0 if result["same_status"] else 1


if __name__ == "__main__":
    sys.exit(main())
