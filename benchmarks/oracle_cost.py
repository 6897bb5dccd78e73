"""Cost of the strongest composite oracle relative to the official KernelBench check.

For every corpus problem (verified solution as the candidate) this times

* ``kernelbench``: the official check, 5 trials at the fixed shape (inputs drawn by
  ``get_inputs()`` on the CPU and moved, as the official script does), and
* ``strongest``: ``bound,shapes,values,tamper``,

on the same device and shapes, and records the ratio ``strongest / kernelbench``
(target: at most 3 on the H200). Each problem is run once untimed first (Triton
compiles a kernel per specialisation, and the shapes oracle meets several), then
``--repeats`` times; the median is recorded. Every timed run starts from a fresh
case, so no reference is reused between runs.

    python benchmarks/oracle_cost.py benchmarks/results/oracle_cost_h200.json
    python benchmarks/oracle_cost.py out.json --device cpu --small --problems relu,softmax

Runs on CUDA when available. Output: JSON with the device, versions, date, git sha,
per-problem seconds, ratios, verdict statuses and a summary.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

#: The composite the issue bounds at 3x the official checker.
STRONGEST = "bound,shapes,values,tamper"
#: The acceptance threshold for the ratio.
MAX_RATIO = 3.0


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _timed(fn, device: str) -> tuple[float, object]:
    _sync(device)
    t0 = time.perf_counter()
    out = fn()
    _sync(device)
    return time.perf_counter() - t0, out


def _git_sha() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True,
                              cwd=Path(__file__).resolve().parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def measure(name: str, device: str, small: bool, repeats: int) -> dict:
    """Median seconds of both oracles on one problem, and their verdicts."""
    from kernelaudit.zoo.oracles import Subject, make_oracle
    from kernelaudit.zoo.problems import CORPUS_DIR, ProblemCase, load_candidate, load_problem, solution_path

    problem = load_problem(CORPUS_DIR / f"{name}.py")
    subject = Subject(load_candidate(solution_path(name)))
    oracles = {"kernelbench": make_oracle("kernelbench"), "strongest": make_oracle(STRONGEST)}
    times: dict[str, list[float]] = {k: [] for k in oracles}
    statuses: dict[str, str] = {}
    for rep in range(repeats + 1):  # the first round is the warm-up
        for key, oracle in oracles.items():
            case = ProblemCase.make(problem, device=device, small=small)
            seconds, verdict = _timed(lambda: oracle.judge(case, subject), device)
            statuses[key] = verdict.status.value
            if rep:
                times[key].append(seconds)
    kb = statistics.median(times["kernelbench"])
    st = statistics.median(times["strongest"])
    return {"problem": name, "category": problem.category, "shapes": dict(case.shapes),
            "kernelbench_s": kb, "strongest_s": st, "ratio": st / kb if kb > 0 else float("inf"),
            "kernelbench_runs_s": times["kernelbench"], "strongest_runs_s": times["strongest"], "verdicts": statuses}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="where to write the JSON results")
    ap.add_argument("--device", default="auto", help="auto (cuda when available), cpu or cuda")
    ap.add_argument("--problems", default="", help="comma-separated problem names (default: the whole corpus)")
    ap.add_argument("--repeats", type=int, default=3, help="timed repetitions per oracle (median reported)")
    ap.add_argument("--small", action="store_true", help="the problems' SMALL_SHAPES (for a CPU run)")
    args = ap.parse_args(argv)

    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    if device == "cpu" and not args.small:
        print("note: on the CPU the Triton interpreter is slow; consider --small", file=sys.stderr)
    from kernelaudit.zoo.problems import CORPUS_DIR

    names = [n for n in args.problems.split(",") if n] or sorted(p.stem for p in CORPUS_DIR.glob("*.py"))
    rows = []
    for name in names:
        row = measure(name, device, args.small, args.repeats)
        rows.append(row)
        flag = "" if row["ratio"] <= MAX_RATIO else "  > 3x"
        print(f"{name:22s} kernelbench {row['kernelbench_s'] * 1e3:9.1f} ms  strongest {row['strongest_s'] * 1e3:9.1f} ms"
              f"  ratio {row['ratio']:5.2f}{flag}  {row['verdicts']}", flush=True)
    import triton

    ratios = [r["ratio"] for r in rows]
    result = {
        "benchmark": "oracle_cost",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name() if device.startswith("cuda") else "cpu (Triton interpreter)",
        "torch": torch.__version__,
        "triton": triton.__version__,
        "git_sha": _git_sha(),
        "small_shapes": args.small,
        "repeats": args.repeats,
        "strongest": STRONGEST,
        "max_ratio_target": MAX_RATIO,
        "summary": {"problems": len(rows), "max_ratio": max(ratios), "median_ratio": statistics.median(ratios),
                    "over_target": [r["problem"] for r in rows if r["ratio"] > MAX_RATIO]},
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(f"max ratio {result['summary']['max_ratio']:.2f}, median {result['summary']['median_ratio']:.2f}; "
          f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
