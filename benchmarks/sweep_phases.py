"""Where a sweep's wall time went, from its run store(s): calibration, cases, per family.

For each store: the last segment's wall time, the time from its start to its first
recorded case (calibration, capacity measurement and worker starts), the case phase
(first to last record), cases per second there, workers replaced, and the summed case
time per op family; the cases the plan still holds, and how long they would take at this
segment's rate. Used to compare sweeps of the same grid run with different
``--workers`` side by side, in one device session.

    python benchmarks/sweep_phases.py runs/ab_w1 runs/ab_w2 [--json out.json]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
from collections import defaultdict

from kernelaudit.sweep.store import RunStore


def phases(path: str) -> dict:
    store = RunStore(path)
    m = store.manifest()
    seg = (m.get("segments") or [{}])[-1]
    started = dt.datetime.fromisoformat(seg["started"])
    rows = [r for r in store.latest().values()
            if dt.datetime.fromisoformat(r["recorded"]) >= started]
    times = sorted((dt.datetime.fromisoformat(r["recorded"]) - started).total_seconds() for r in rows)
    fam = defaultdict(lambda: [0, 0.0])
    for r in rows:
        f = fam[r["case"]["family"]]
        f[0] += 1
        f[1] += float(r.get("elapsed_s") or 0.0)
    first, last = (times[0], times[-1]) if times else (0.0, 0.0)
    planned = (m.get("plan") or {}).get("cases")
    left = None if planned is None else max(0, int(planned) - len(store.latest()))
    rate = len(rows) / max(last - first, 1e-9) if rows else 0.0
    return {"store": path, "planned": planned, "left": left,
            # the rest at this segment's rate: an upper bound where the cases left are smaller
            "left_at_this_rate_min": None if not left or not rate else round(left / rate / 60, 1),
            "case_workers": seg.get("case_workers"), "wall_s": seg.get("wall_s"),
            "completed": seg.get("completed"), "cases": len(rows), "to_first_case_s": round(first, 1),
            "case_phase_s": round(last - first, 1),
            "cases_per_s": round(len(rows) / max(last - first, 1e-9), 2),
            "workers_replaced": seg.get("workers_replaced"), "side_by_side": seg.get("side_by_side"),
            "twins": seg.get("twins"), "calibration": seg.get("calibration"),
            "retried_alone": seg.get("retried_alone"), "warm_compiles": seg.get("warm_compiles"),
            "case_elapsed_s": round(sum(float(r.get("elapsed_s") or 0.0) for r in rows), 1),
            "case_overhead_s": seg.get("case_overhead_s"), "slow_pass": seg.get("slow_pass"),
            "case_time_by_family_s": {k: round(v[1], 1) for k, v in sorted(fam.items())},
            "cases_by_family": {k: v[0] for k, v in sorted(fam.items())}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("stores", nargs="+")
    ap.add_argument("--json")
    args = ap.parse_args()
    res = [phases(p) for p in args.stores]
    for r in res:
        print(json.dumps(r))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
