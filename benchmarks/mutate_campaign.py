"""The mutation campaign at scale (issue 17): every mutant of the chosen subjects judged, timed.

On the H200 (the lead runs it; about 10k mutants)::

    python benchmarks/mutate_campaign.py --subjects corpus,kb --device cuda --jobs 4 \
        --oracle kernelbench,kernelbench@1e-4,strongest --out runs/mutate-h200 [--limit N] [--resume]

On a Ray cluster (many GPUs, many hosts; every node has kernelaudit installed)::

    python benchmarks/mutate_campaign.py --subjects corpus,kb --device cuda --executor ray \
        --ray-address auto --jobs 0 --out runs/mutate-ray

On 2 CPU cores, a corpus slice::

    python benchmarks/mutate_campaign.py --subjects corpus --device cpu --jobs 2 --limit 200 \
        --oracle kernelbench,bound --out runs/mutate-cpu

On 2 CPU cores, the whole corpus (issue 17's 10-minute goal; estimate in
benchmarks/results/2026-12-03-cpu-mutate-speed/README.md)::

    python benchmarks/mutate_campaign.py --subjects corpus --device cpu --jobs 2 \
        --oracle kernelbench,kernelbench@1e-4,strongest --out runs/mutate-cpu-corpus

Prints (and writes to ``--out``/benchmark.json) the wall time, the mutants judged, the
outcome counts, the kill rate of every oracle, the minimal-suite curve (k = 1, 2) with
its held-out rate and false rejections, and the cost per mutant: median seconds per
stage of the worker (load, first input = compile + one run, equivalence inputs,
oracles, suite inputs, and each oracle column), the floor a faster engine has to beat;
mutants equivalent from coverage alone and crashes that ended a worker process are
classes of their own. The store is resumable
(``--resume``); ``kernelaudit mutate report DIR`` draws the heat map, the suite curve
and the HTML page.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from kernelaudit.zoo.mutate.campaign import parse_columns, run_campaign
from kernelaudit.zoo.mutate.operators import get_operators
from kernelaudit.zoo.mutate.report import load, write_report
from kernelaudit.zoo.mutate.subjects import select_subjects
from kernelaudit.zoo.mutate.suites import summary as suite_summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--subjects", default="corpus,kb", help="comma list: corpus, kb1, kb2, kb3, kb, or single ids")
    ap.add_argument("--oracle", default="kernelbench,kernelbench@1e-4,strongest")
    ap.add_argument("--operators", default="all")
    ap.add_argument("--device", default="cuda", choices=("cpu", "cuda"))
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--batch", type=int, default=60)
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--full-shapes", action="store_true", help="the problems' fixed shapes instead of small ones")
    ap.add_argument("--kernelbench", default=None)
    ap.add_argument("--out", required=True)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--seed", type=int, default=0, help="seed of the --limit sample")
    ap.add_argument("--executor", default="local", choices=("local", "ray"))
    ap.add_argument("--ray-address", default=None)
    ap.add_argument("--no-per-input", action="store_true", help="skip the per-input kill matrix (no suites)")
    args = ap.parse_args()
    subjects = select_subjects(args.subjects.split(","), kernelbench=Path(args.kernelbench) if args.kernelbench else None)
    start = time.perf_counter()
    last = [start]

    def progress(rec, p) -> None:  # noqa: ANN001
        now = time.perf_counter()
        if rec["type"] == "mutant" and now - last[0] > 30:
            last[0] = now
            print(f"[{p.done}/{p.total}] {now - start:.0f} s {dict(sorted(p.outcomes.items()))}", flush=True)

    p = run_campaign(subjects, Path(args.out), columns=parse_columns(args.oracle),
                     operators=get_operators(args.operators), device=args.device, small=not args.full_shapes,
                     limit=args.limit, seed=args.seed, jobs=args.jobs, timeout_s=args.timeout, batch=args.batch,
                     resume=args.resume, executor=args.executor, ray_address=args.ray_address,
                     per_input=not args.no_per_input, on_record=progress)
    wall = time.perf_counter() - start
    _, records, s = load(Path(args.out))
    write_report(Path(args.out))
    sm = suite_summary(records)
    result = {"wall_s": round(wall, 1), "judged_this_run": p.done, "outcomes_this_run": p.outcomes,
              "subjects": len(subjects), "cost": cost(records), "scores": s.to_json(), "suites": sm}
    (Path(args.out) / "benchmark.json").write_text(json.dumps(result, indent=2))
    print(json.dumps({k: v for k, v in result.items() if k not in ("scores", "suites")} |
                     {"kill": {c: r.rate for c, r in s.kill.items()},
                      "false_rejections": {c: len(v) for c, v in s.false_rejections.items()},
                      "suite_curve_exact": sm["curve_exact"][:2], "suite_held_out": sm["held_out"],
                      "suite_false_rejections_k2": len(sm["suite_false_rejections_k2"])}, indent=2))


def cost(records: list[dict]) -> dict:
    """Median and total seconds per mutant and per worker stage, by outcome (what a mutant costs)."""
    import statistics

    out: dict = {}
    muts = [r for r in records if r.get("type") == "mutant" and "seconds" in r]
    for r in muts:  # equivalent from coverage alone (never produced, loaded or run): a class of its own cost
        if r["outcome"] == "equivalent" and "timing" not in r:
            r["_class"] = "equivalent (coverage)"
    for outcome in sorted({r.get("_class", r["outcome"]) for r in muts}):
        rs = [r for r in muts if r.get("_class", r["outcome"]) == outcome]
        row = {"n": len(rs), "median_s": round(statistics.median(r["seconds"] for r in rs), 3),
               "total_s": round(sum(r["seconds"] for r in rs), 1)}
        for stage in ("load", "first_input", "equivalence", "oracles", "inputs"):
            xs = [r["timing"][stage] for r in rs if stage in r.get("timing", {})]
            if xs:
                row[f"median_{stage}_s"] = round(statistics.median(xs), 4)
        columns = sorted({c for r in rs for c in r.get("timing", {}).get("columns", {})})
        for c in columns:  # each oracle column's own seconds: what the column set costs
            xs = [r["timing"]["columns"][c] for r in rs if c in r.get("timing", {}).get("columns", {})]
            row.setdefault("median_column_s", {})[c] = round(statistics.median(xs), 4)
        out[outcome] = row
    for r in muts:
        r.pop("_class", None)
    died = [r for r in records if r.get("type") == "mutant" and "seconds" not in r and r["outcome"] == "crash"]
    if died:  # the worker (or its child) ended: its cost is the restart, not the mutant's own seconds
        out["crash (process died)"] = {"n": len(died)}
    return out


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        import sys
        print("interrupted: every record so far is in the store; continue with --resume", file=sys.stderr)
        sys.exit(130)
