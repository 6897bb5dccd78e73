"""Detection matrix of the metamorphic judges: relation x planted fault, on the CPU.

For every op judged by a relation (:data:`kernelaudit.sweep.judge.metamorphic_ops.META_OPS`),
every dtype it takes, and sizes past each threshold at a small ``--scale``, it runs the op
correctly and under each fault model (``wrap32``, ``unwritten-tail``) from the same
random state, and counts:

* **effective**: faulty runs whose output differs from the correct run's (a fault that
  leaves the right answer, like a tail of zeros in ``new_zeros``, is not a miss);
* **detected**: effective faulty runs the relation judged ``wrong``;
* **false rejections**: correct runs judged ``wrong`` (over ``--seeds`` random states).

    python benchmarks/metamorphic_faults.py --scale 12 --seeds 3 [--json out.json]
    python benchmarks/metamorphic_faults.py --device cuda --scale 24 --seeds 2 --faults wrap32
    python benchmarks/metamorphic_faults.py --device cuda --scale 32 --seeds 1 --faults none --ops randn,take

About 25 s on a CPU core at scale 12 (measured with the machine shared). ``--faults none``
runs only the correct op: the false rejections at real sizes.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from kernelaudit.faults import make_fault_model
from kernelaudit.sweep.judge.metamorphic import chunk_len, judge_outputs
from kernelaudit.sweep.judge.metamorphic_ops import META_OPS
from kernelaudit.sweep.ops.spec import DTYPES
from kernelaudit.thresholds import Thresholds

FAULTS = ("wrap32", "unwritten-tail")


def sizes(th: Thresholds) -> dict[str, int]:
    """Sizes past each threshold: just past (one chunk), and well past (half a threshold)."""
    c = chunk_len(th, th.t33)
    return {"2^31+half": th.t31 + th.t31 // 2, "2^32+chunk": th.t32 + c, "2^32+half": th.t32 + th.t32 // 2,
            "2*2^32+chunk": th.t33 + c}


def run(op, n, dtype, th, fault, seed, device="cpu"):
    torch.manual_seed(seed)
    fm = make_fault_model(fault, th)
    with torch.no_grad(), fm:
        ins, outs = op.run(n, dtype, torch.device(device))
    return ins, outs, bool(fm.stats.changed)


def same(a, b) -> bool:
    return all(x.shape == y.shape and torch.equal(torch.nan_to_num(x.double(), nan=1.2345e300),
                                                   torch.nan_to_num(y.double(), nan=1.2345e300))
               for x, y in zip(a, b)) and len(a) == len(b)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=int, default=12)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--json", default=None)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--ops", default="", help="comma list of op names (default: every one)")
    ap.add_argument("--faults", default=",".join(FAULTS), help="comma list of fault models, or none")
    a = ap.parse_args()
    faults = [f for f in a.faults.split(",") if f and f != "none"]
    names = [x for x in a.ops.split(",") if x] or list(META_OPS)
    th = Thresholds(a.scale)
    t0 = time.perf_counter()
    matrix: dict[str, dict[str, dict[str, int]]] = {}
    misses, false_rej, clean_runs = [], [], 0
    for name in names:
        op = META_OPS[name]
        for dt in op.dtypes:
            dtype = DTYPES[dt]
            for label, n in sizes(th).items():
                for seed in range(a.seeds):
                    ins, good, _ = run(op, n, dtype, th, "none", seed, a.device)
                    v = judge_outputs(op, n, dtype, th, ins, good)
                    clean_runs += 1
                    if not v.ok:
                        false_rej.append(v.message)
                for fault in faults:
                    cell = matrix.setdefault(op.relation, {}).setdefault(
                        fault, {"runs": 0, "effective": 0, "detected": 0})
                    ins, good, _ = run(op, n, dtype, th, "none", 0, a.device)
                    fins, bad, changed = run(op, n, dtype, th, fault, 0, a.device)
                    cell["runs"] += 1
                    if not changed or same(good, bad):
                        continue
                    cell["effective"] += 1
                    v = judge_outputs(op, n, dtype, th, fins, bad)
                    if v.status.value == "wrong":
                        cell["detected"] += 1
                    else:
                        misses.append(f"{name} {dt} {label} {fault}: {v.message}")
    secs = time.perf_counter() - t0
    print(f"{a.device}, scale {a.scale} (2^32 -> {th.t32} elements), {len(names)} ops, {secs:.1f} s")
    print(f"{'relation':12s} {'fault':15s} {'runs':>5s} {'effective':>9s} {'detected':>8s}")
    for rel, row in matrix.items():
        for fault, c in row.items():
            print(f"{rel:12s} {fault:15s} {c['runs']:5d} {c['effective']:9d} {c['detected']:8d}")
    print(f"false rejections: {len(false_rej)} of {clean_runs} correct runs")
    for m in false_rej[:20]:
        print("  FALSE REJECTION", m)
    print(f"missed effective faults: {len(misses)}")
    for m in misses:
        print("  MISS", m)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"scale": a.scale, "seconds": round(secs, 1), "matrix": matrix, "misses": misses,
                       "false_rejections": false_rej, "clean_runs": clean_runs}, f, indent=1)


if __name__ == "__main__":
    main()
