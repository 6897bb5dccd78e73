"""How long a sweep store's grid would take on N devices, from its recorded times.

``kernelaudit sweep --devices cuda:0,...,cuda:N-1`` runs one worker per GPU, each taking
the next case as it finishes (``docs/architecture.md``). This replays that on the times
a store recorded: every case's last record (``elapsed_s``: its worker's time, timeouts
and the slow pass included) handed, in the order the records were written, to whichever
of N devices frees first; calibration (each segment's ``worker_s``, spread over the
devices' calibration workers) before it. A projection from measured per-case times, not
a measurement on N GPUs: it assumes each device as fast as the ones that ran the store
and no case needing more memory than one device has.

    python benchmarks/devices_projection.py runs/h200 --devices 1,2,4,5,6,8 [--json out.json]
"""

from __future__ import annotations

import argparse
import heapq
import json
import sys
from pathlib import Path

from kernelaudit.sweep.report.run import load_run

#: The goal the projection is read against (issue 16: the full grid within 20 minutes).
GOAL_S = 20 * 60.0


def list_schedule(times: list[float], devices: int) -> float:
    """The makespan of ``times`` handed in order to whichever of ``devices`` frees first."""
    if devices < 1:
        raise ValueError(f"Cannot have devices={devices}: allowed values are integers >= 1")
    free = [0.0] * devices
    for t in times:
        heapq.heappush(free, heapq.heappop(free) + t)
    return max(free)


def projection(store: str, devices: list[int], calibration_workers: int = 4,
               saved_s: dict[str, float] | None = None) -> dict:
    """Per device count: calibration, cases and total seconds, and whether the goal holds.
    ``saved_s``: seconds to take off a record's time, by record key (what another judge
    would have saved on it: ``sampled_judge_projection.py``)."""
    run = load_run(store)
    records = sorted(run.records, key=lambda r: r.recorded or "")
    saved_s = saved_s or {}
    times = [max(0.0, float(r.elapsed_s or 0.0) - saved_s.get(r.key, 0.0)) for r in records]
    segments = run.manifest.segments
    calibration_s = sum(float((s.get("calibration") or {}).get("worker_s") or 0.0) for s in segments)
    rows = []
    for n in devices:
        cal = calibration_s / (n * calibration_workers)
        cases = list_schedule(times, n)
        rows.append({"devices": n, "calibration_s": round(cal, 1), "cases_s": round(cases, 1),
                     "total_s": round(cal + cases, 1), "within_goal": cal + cases <= GOAL_S})
    return {"store": str(store), "cases": len(times), "case_time_s": round(sum(times), 1),
            "longest_case_s": round(max(times, default=0.0), 1), "calibration_worker_s": round(calibration_s, 1),
            "calibration_workers_per_device": calibration_workers, "goal_s": GOAL_S, "rows": rows}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("store")
    ap.add_argument("--devices", default="1,2,3,4,5,6,8", help="comma-separated device counts (default 1-6, 8)")
    ap.add_argument("--calibration-workers", type=int, default=4, help="calibration workers a device (default 4)")
    ap.add_argument("--json", type=Path, default=None, help="also write the projection here")
    a = ap.parse_args(argv)
    try:
        devices = [int(x) for x in a.devices.split(",") if x.strip()]
    except ValueError:
        ap.error(f"--devices {a.devices!r}: allowed values are comma-separated integers >= 1")
    if not devices or min(devices) < 1:
        ap.error(f"--devices {a.devices!r}: allowed values are comma-separated integers >= 1")
    p = projection(a.store, devices, a.calibration_workers)
    print(f"{p['cases']} cases, {p['case_time_s']:.0f} s of case time (longest {p['longest_case_s']:.0f} s), "
          f"calibration {p['calibration_worker_s']:.0f} worker-s")
    print(f"{'devices':>7} {'calibration':>11} {'cases':>8} {'total':>8}  within {GOAL_S / 60:.0f} min")
    for r in p["rows"]:
        print(f"{r['devices']:>7} {r['calibration_s']:>10.0f}s {r['cases_s']:>7.0f}s {r['total_s'] / 60:>7.1f}m  "
              f"{'yes' if r['within_goal'] else 'no'}")
    if a.json:
        a.json.write_text(json.dumps(p, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
