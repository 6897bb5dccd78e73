"""Sweep every covered op of the OpInfo-derived catalogue at a small scale; counts per family.

Runs the real sweep (worker processes, calibration, run store) over every op that
``kernelaudit sweep --list-ops`` lists as covered (hand specs, SDPA backends, ops
derived from PyTorch's op database), one dtype, both directions, just below and just
above 2^32 (scaled), and reports ok / wrong / error / skipped per family, the ops
with anything but ok, and the wall time. On a correct device every case should be ok:
each ``wrong`` is a false rejection (or a real bug), each ``error`` an op the catalogue
should not list as covered there.

    python benchmarks/sweep_opinfo.py --device cpu --scale 12 --out benchmarks/results/opinfo-cpu.json
    python benchmarks/sweep_opinfo.py --device cuda --scale 20 --dtypes float32,bfloat16
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

from _common import emit


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--scale", type=int, default=12, help="log2 of the scaled 2^32 threshold")
    ap.add_argument("--dtypes", default="float32")
    ap.add_argument("--directions", default="fwd,bwd")
    ap.add_argument("--ops", default="all", help="--ops of kernelaudit sweep (all, family:NAME, names)")
    ap.add_argument("--fault-model", default="none")
    ap.add_argument("--store", type=Path, default=None, help="run store (default: a temporary directory)")
    ap.add_argument("--out", default=None, help="also write the JSON result here")
    args = ap.parse_args()

    from kernelaudit.sweep.cases import GridSpec, grid
    from kernelaudit.sweep.ops.catalog import op_spec
    from kernelaudit.sweep.ops.coverage import rows, select, summary
    from kernelaudit.sweep.schedule import run_sweep

    t0 = time.perf_counter()
    ops = select(tuple(args.ops.split(",")))
    spec = GridSpec(ops=ops, dtypes=tuple(args.dtypes.split(",")), layouts=("contig",),
                    directions=tuple(args.directions.split(",")), thresholds=("2^32",),
                    positions=("below", "above"), scale=args.scale)
    n_cases = len(grid(spec))
    catalogue_s = time.perf_counter() - t0
    store = args.store or Path(tempfile.mkdtemp(prefix="sweep-opinfo-"))
    t1 = time.perf_counter()
    res = run_sweep(spec, store, device=args.device, fault_model=args.fault_model)
    sweep_s = time.perf_counter() - t1

    family = {r.name: r.family for r in rows()[0]}
    latest = list(res.store.latest().values())  # read the store once
    per_family: dict[str, Counter] = defaultdict(Counter)
    bad: dict[str, list[str]] = defaultdict(list)
    ops_seen: dict[str, set] = defaultdict(set)
    for r in latest:
        op, status = r["case"]["op"], r["verdict"]["status"]
        fam = family.get(op, op_spec(op).family)
        per_family[fam][status] += 1
        ops_seen[fam].add(op)
        if status != "ok":
            bad[status].append(f"{r['case']['id']}: {r['verdict'].get('message', '')[:160]}")
    not_ok_ops = {r["case"]["op"] for r in latest if r["verdict"]["status"] != "ok"}
    ops_ok = {r["case"]["op"] for r in latest} - not_ok_ops
    emit({"device": args.device, "scale": args.scale, "dtypes": args.dtypes, "directions": args.directions,
          "fault_model": args.fault_model, "ops": len(ops), "ops_all_ok": len(ops_ok), "cases": n_cases,
          "counts": res.counts, "catalogue": summary(rows()[0]),
          "per_family": {f: dict(c, ops=len(ops_seen[f])) for f, c in sorted(per_family.items())},
          "not_ok": {k: v for k, v in bad.items()}, "catalogue_s": round(catalogue_s, 1),
          "sweep_wall_s": round(sweep_s, 1), "store": str(res.store.path)}, args.out)


if __name__ == "__main__":
    main()
