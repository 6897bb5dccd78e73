"""One sweep grid run once per ``--devices`` configuration, side by side, in interleaved
rounds: wall time per run, and whether every run recorded the same cases and verdicts.

    # CPU: the default path against two CPU stand-ins
    python benchmarks/devices_ab.py --device cpu --configs default,cpu:0,cpu:0+cpu:1 --rounds 2
    # H200 (one GPU): is the executor path on cuda:0 any slower than the default?
    python benchmarks/devices_ab.py --device cuda --configs default,cuda:0 --rounds 3 \\
        --ops bmm,matmul,add,sum --dtypes float16,float32 --out benchmarks/results/<dir>/devices_ab.json

A configuration is ``default`` (``kernelaudit sweep --device D``, no executor) or a
``--devices`` list with ``+`` between names. Round r runs the configurations in an
order rotated by r (a warm Triton cache or page cache favours no one twice); every run
has a fresh store. Each run's wall time is split at its first case verdict:
``until_first_case_s`` (worker start-up, calibration) and ``cases_s`` (the cases).
Prints JSON (``_common.emit``)."""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from _common import emit


def content(store) -> dict:
    """Case key -> (case, status, metric, first bad index): the verdicts, without
    measured values, which may differ in their last bits between runs on a GPU."""
    return {key: (rec["case"], rec["verdict"]["status"], rec["verdict"]["metric"], rec["verdict"]["first_bad_index"])
            for key, rec in store.latest().items()}


def main() -> None:
    from kernelaudit import GridSpec, run_sweep
    from kernelaudit.sweep.cli import PRESETS

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--configs", default="default,cpu:0+cpu:1")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--ops", default="bmm,matmul,add,sum")
    ap.add_argument("--dtypes", default="float32,float16")
    ap.add_argument("--directions", default="fwd,bwd")
    ap.add_argument("--scale", type=int, default=14, help="threshold scale bits (32: the real sizes)")
    ap.add_argument("--fault-model", default="none")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    quick = PRESETS["quick"]
    spec = GridSpec(ops=tuple(args.ops.split(",")), dtypes=tuple(args.dtypes.split(",")),
                    directions=tuple(args.directions.split(",")), thresholds=quick["thresholds"],
                    positions=quick["positions"], scale=args.scale).validate()
    configs = args.configs.split(",")
    runs: dict[str, list[dict]] = {c: [] for c in configs}
    reference = None
    same = True
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for c in configs[r % len(configs):] + configs[:r % len(configs)]:
                kw = {} if c == "default" else {"devices": c.replace("+", ",")}
                first: list[float] = []  # when the first case verdict came: start-up and calibration before it

                def tick(total=None, advance=0, description="", status=None):
                    if status is not None and not first:
                        first.append(time.perf_counter())

                t0 = time.perf_counter()
                res = run_sweep(spec, Path(tmp) / f"r{r}-{c.replace(':', '').replace('+', '_')}",
                                device=args.device, fault_model=args.fault_model, progress=tick, **kw)
                wall = time.perf_counter() - t0
                before_cases = (first[0] - t0) if first else wall
                got = content(res.store)
                reference = reference if reference is not None else got
                same = same and got == reference
                runs[c].append({"round": r, "wall_s": round(wall, 2), "until_first_case_s": round(before_cases, 2),
                                "cases_s": round(wall - before_cases, 2), "cases": len(got), "counts": res.counts})
    emit({"device": args.device, "grid": {"ops": args.ops, "dtypes": args.dtypes, "directions": args.directions,
                                          "scale": args.scale, "fault_model": args.fault_model},
          "cases": len(reference or {}), "rounds": args.rounds, "same_cases_and_verdicts": same,
          "median_wall_s": {c: statistics.median(x["wall_s"] for x in v) for c, v in runs.items()},
          "median_cases_s": {c: statistics.median(x["cases_s"] for x in v) for c, v in runs.items()},
          "runs": runs, "cpu_count": os.cpu_count(), "load_average_at_end": os.getloadavg()}, args.out)


if __name__ == "__main__":
    main()
