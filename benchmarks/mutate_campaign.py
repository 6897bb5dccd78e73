"""The mutation campaign at scale (issue 17): every mutant of the chosen subjects judged, timed.

On the H200 (the lead runs it; about 10k mutants)::

    python benchmarks/mutate_campaign.py --subjects corpus,kb --device cuda --jobs 4 \
        --oracle kernelbench,kernelbench@1e-4,strongest --out runs/mutate-h200 [--limit N] [--resume]

On 2 CPU cores, a corpus slice::

    python benchmarks/mutate_campaign.py --subjects corpus --device cpu --jobs 2 --limit 200 \
        --oracle kernelbench,bound --out runs/mutate-cpu

Prints (and writes to ``--out``/benchmark.json) the wall time, the mutants judged, the
outcome counts and the kill rate of every oracle; the store is resumable (``--resume``),
and ``kernelaudit mutate report DIR`` draws the heat map and the HTML page.
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
                     limit=args.limit, jobs=args.jobs, timeout_s=args.timeout, batch=args.batch, resume=args.resume,
                     on_record=progress)
    wall = time.perf_counter() - start
    _, _, s = load(Path(args.out))
    write_report(Path(args.out))
    result = {"wall_s": round(wall, 1), "judged_this_run": p.done, "outcomes_this_run": p.outcomes,
              "subjects": len(subjects), "scores": s.to_json()}
    (Path(args.out) / "benchmark.json").write_text(json.dumps(result, indent=2))
    print(json.dumps({k: v for k, v in result.items() if k != "scores"} |
                     {"kill": {c: r.rate for c, r in s.kill.items()}}, indent=2))


if __name__ == "__main__":
    main()
