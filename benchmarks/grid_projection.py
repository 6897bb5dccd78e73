"""How long a sweep's whole grid takes on one device, projected from a run store's timings.

Every planned case of the grid (``--full`` by default, for the torch here; cases that would
run on the same tensors counted once) is given its kind's cost: the cases of the store with
the same op, dtype, direction and layout, their smallest time per crossing element (the
steady state: a kind's first case also pays its Triton compiles), times the case's crossing
elements. Summed by phase (inputs, op, judge) and by family. Kinds the store has no timed
case of are counted apart. The op phase alone bounds the grid from below on one device.

    python benchmarks/grid_projection.py runs/h200 [--json OUT]
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path


def projection(store: Path) -> dict:
    from kernelaudit.sweep.cases import GridSpec, grid
    from kernelaudit.sweep.cli import PRESETS
    from kernelaudit.sweep.ops.catalog import op_spec
    from kernelaudit.sweep.ops.coverage import select
    from kernelaudit.sweep.store import RunStore

    p = PRESETS["full"]
    cases = grid(GridSpec(ops=select(("all",), device="cuda"), dtypes=p["dtypes"], thresholds=p["thresholds"],
                          positions=p["positions"], axes=p["axes"]))
    per_element: dict[tuple, list] = {}
    timed = 0
    for r in RunStore.open(store).latest().values():
        t = (r["verdict"].get("details") or {}).get("timing")
        c = r["case"]
        n = c.get("crossing_numel")
        if not t or not n or r.get("twin_of"):
            continue
        timed += 1
        key = (c["op"], c["dtype"], c["direction"], c["layout"])
        costs = [t.get("inputs_s", 0.0) / n, t.get("op_s", 0.0) / n, t.get("judge_s", 0.0) / n]
        per_element[key] = [min(a, b) for a, b in zip(per_element.get(key, costs), costs)]
    totals = [0.0, 0.0, 0.0]
    by_family: dict = collections.defaultdict(lambda: [0.0, 0.0, 0.0])
    seen, unmeasured = set(), collections.Counter()
    for c in cases:
        tensors = (c.op, c.dtype, c.layout, c.series, c.batch, c.direction)
        if tensors in seen:
            continue
        seen.add(tensors)
        cost = per_element.get((c.op, c.dtype, c.direction, c.layout))
        family = op_spec(c.op).family
        if cost is None:
            unmeasured[family] += 1
            continue
        for i in range(3):
            totals[i] += cost[i] * c.crossing_numel
            by_family[family][i] += cost[i] * c.crossing_numel
    return {"store": str(store), "planned": len(cases), "distinct": len(seen), "timed_cases": timed,
            "unmeasured": sum(unmeasured.values()), "unmeasured_by_family": dict(unmeasured.most_common()),
            "projected_s": {"inputs": round(totals[0]), "op": round(totals[1]), "judge": round(totals[2])},
            "by_family_s": {f: {"op": round(v[1]), "judge": round(v[2])}
                            for f, v in sorted(by_family.items(), key=lambda kv: -kv[1][1] - kv[1][2])}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("store", type=Path)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    res = projection(a.store)
    s = res["projected_s"]
    print(f"{res['distinct']} distinct cases of {res['planned']} planned ({res['unmeasured']} without a timed kind); "
          f"projected on one device: op {s['op']} s, judge {s['judge']} s, inputs {s['inputs']} s")
    for f, v in list(res["by_family_s"].items())[:10]:
        print(f"  {f:16s} op {v['op']:6d} s  judge {v['judge']:6d} s")
    if a.json:
        a.json.write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
