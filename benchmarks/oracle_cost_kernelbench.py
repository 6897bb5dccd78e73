"""Cost of ``strongest`` against the official check on KernelBench level 1, at the problems' own shapes.

The issue's performance goal: ``strongest`` on unannotated problems at most 3x the
official checker's 5 trials, median and max over KernelBench level 1 on the H200.
For every level-1 problem (KernelBench as published, read from
``KERNELAUDIT_KERNELBENCH``/``--root``; never copied into the repository) the
candidate is the problem's own ``Model`` (an honest candidate: any rejection is a
false alarm, counted), and this times, on the same device and shapes:

* ``kernelbench``: the official check, 5 trials at the fixed shape;
* ``strongest``: ``bound,shapes,values,tamper`` (``strongest`` less ``static``, which
  reads the candidate's source in about a millisecond and rightly flags this candidate,
  the problem's own ``Model``);

side by side, one untimed round first (compilation, cuDNN/cuBLAS autotuning), then
``--repeats`` rounds (median recorded), each from a fresh case and a freshly loaded
problem: nothing a check caches on the problem (float64 model copies, the derived
error model, the multilinear structure) carries from one round into the next, as it
does not from one ``kernelaudit check`` to the next. Only the small shapes found for
the file stay (cached on disk per file content). The results are written after every
problem, so a run cut short keeps what it measured, and ``--resume`` skips problems
already in ``--out``.

On the H200 the official check of a large problem is minutes of drawing its inputs on the
CPU (5 trials of up to 2^31 normal numbers, one core): ``--kb-jobs J`` times those
(inputs of at least 10^8 elements) first, up to J processes side by side, largest first
while their planned memory fits the device (5 bytes per input byte), one timed round each
after a cheap warm-up (the check at the small shape, one forward at the own shape); every
other check (``strongest`` everywhere, the official one on small inputs, where the ratio
is tightest) then runs alone, as without the option. ``--kb-trials N`` times only the
first N of those large checks' 5 trials: a part of the 5 (same seeds, same order), so
their time bounds the official check's from below and each such ratio is an upper
bound (``ratio_is_upper_bound``; ``ratio_estimate`` scales it by N/5): a fifth of the
device time where an upper bound already shows the goal met.

On a CPU the problems' own shapes mostly take minutes; ``--mid MIB`` runs each problem
at the least shrunk shape within MIB MiB of inputs and outputs and ``MIB * 2^26`` FLOPs
(the search of ``--small``, with a larger budget), large enough that the cost of the
evaluations, not Python, dominates, as at the own shapes on a GPU.

    python benchmarks/oracle_cost_kernelbench.py --kb-jobs 6 --out benchmarks/results/oracle_cost_kernelbench_h200.json
    python benchmarks/oracle_cost_kernelbench.py --limit 20 --skip 40 --resume --out results.json
    python benchmarks/oracle_cost_kernelbench.py --device cpu --small --limit 3 --out /tmp/x.json  # smoke run
    python benchmarks/oracle_cost_kernelbench.py --device cpu --mid 64 --problems 19_ReLU --out /tmp/x.json

Output: JSON with the device, versions, date, git sha, per-problem seconds and
verdicts, and a summary (median and max ratio, problems over 3x, false alarms).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import subprocess
import sys
import time
import types
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import torch

#: The official check's trials (KernelBench's correctness script runs 5).
KERNELBENCH_TRIALS = 5
#: The composite the issue bounds at 3x the official checker.
STRONGEST = "bound,shapes,values,tamper"
#: The acceptance threshold for the ratio.
MAX_RATIO = 3.0


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _git_sha() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True,
                              cwd=Path(__file__).resolve().parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def _default_root() -> Path:
    try:
        from kernelaudit.config import KERNELBENCH

        return Path(KERNELBENCH.get())
    except ImportError:  # an older tree without the knob
        return Path("/work/shared/kernelbench/KernelBench")


def _reference_as_candidate(problem):  # noqa: ANN001, ANN202
    """The problem's own ``Model`` as the candidate ``ModelNew`` (honest by construction)."""
    from kernelaudit.zoo.problems.loader import Candidate

    module = types.ModuleType(f"reference_of_{problem.name}")
    module.ModelNew = problem.Model
    return Candidate(name=f"{problem.name} (reference)", path=problem.path, module=module)


#: ``--mid``: FLOPs allowed per byte of the budget (the ratio of ``--small``'s 2^25 FLOPs to 2 MiB is 16).
MID_FLOPS_PER_BYTE = 64


def mid_shapes(problem, mib: int) -> dict[str, int]:  # noqa: ANN001
    """The least shrunk shape of ``problem`` within ``mib`` MiB and ``mib * 2^26`` FLOPs."""
    from kernelaudit.zoo.problems.small_shapes import find_small_shapes

    found = find_small_shapes(problem, max_flops=(mib << 20) * MID_FLOPS_PER_BYTE, max_bytes=mib << 20)
    return dict(found.shapes)


def _warm_forward(problem, oracle, device: str, shapes: dict) -> None:  # noqa: ANN001
    """What the first call of a process pays, paid before timing, cheaply: the oracle once at
    the problem's small shape (the checker's own code paths), then one ``Model`` forward at the
    timed shape with inputs drawn on the device (CUDA context, library handles, the kernels)."""
    from kernelaudit.zoo.oracles import Subject
    from kernelaudit.zoo.problems import ProblemCase

    oracle.judge(ProblemCase.make(problem, device=device, small=True), Subject(_reference_as_candidate(problem)))
    case = ProblemCase.make(problem, device=device, shapes=shapes)
    with torch.device(device), torch.no_grad():
        model = case.model(eval_mode=False)
        model(*problem.get_inputs(case.shapes))
    _sync(device)
    del model, case


def rounds(path: Path, device: str, key: str, repeats: int, small: bool = False, mid: int | None = None,
           warmup: str = "check", trials: int | None = None) -> dict:
    """One oracle on one problem: an untimed warm-up, then ``repeats`` timed rounds, each from a
    freshly loaded problem. ``warmup``: ``check`` (a whole untimed round of the same oracle) or
    ``forward`` (the oracle at the small shape and one ``Model`` forward at the timed shape; used where the official check is timed in
    parallel, its untimed round being minutes of CPU input generation on large problems)."""
    from kernelaudit.zoo.oracles import Subject, make_oracle
    from kernelaudit.zoo.problems import ProblemCase, load_problem

    out: dict = {}
    try:
        problem = load_problem(path)
        shapes = mid_shapes(problem, mid) if mid else {}
    except Exception as exc:  # noqa: BLE001 - a problem file this loader cannot read: recorded, not fatal
        return {"error": f"load: {type(exc).__name__}: {exc}"}
    oracle = make_oracle(ORACLES[key])
    if trials is not None and key == "kernelbench":
        from kernelaudit.zoo.oracles.kernelbench import KernelBenchOracle

        oracle = KernelBenchOracle(trials=trials)  # the official check's first ``trials`` trials
    times: list[float] = []
    try:
        if warmup == "forward":
            _warm_forward(problem, oracle, device, shapes)
        for rep in range(repeats + (warmup == "check")):
            # a fresh problem: no cache of an earlier round (or oracle) helps this one
            problem = load_problem(path)
            subject = Subject(_reference_as_candidate(problem))
            case = ProblemCase.make(problem, device=device, small=small, shapes=shapes)
            out["shapes"] = dict(case.shapes)
            _sync(device)
            t0 = time.perf_counter()
            v = oracle.judge(case, subject)
            _sync(device)
            seconds = time.perf_counter() - t0
            out["verdict"] = {"status": v.status.value, "message": v.message[:400]}
            if rep or warmup != "check":
                times.append(seconds)
                if sum(times) > TIMED_BUDGET_S:
                    break  # a long check varies little round to round: its median needs no more
            del case, subject, problem
            if device.startswith("cuda"):
                torch.cuda.empty_cache()
    except Exception as exc:  # noqa: BLE001 - out of memory, a reference that cannot run: recorded
        return {**out, "error": f"{type(exc).__name__}: {str(exc)[:400]}"}
    return {**out, "runs_s": times}


#: Timed rounds of one oracle on one problem stop once they took this long in all (at
#: least one runs): the minutes-long official checks of large problems need no three.
TIMED_BUDGET_S = 20.0

#: The two oracles compared.
ORACLES = {"kernelbench": "kernelbench", "strongest": STRONGEST}


def combine(row: dict) -> dict:
    """A problem's row once both oracles have run: the medians, the ratio, a false alarm or not."""
    if "error" in row or not all(f"{k}_runs_s" in row for k in ORACLES):
        return row
    kb, st = statistics.median(row["kernelbench_runs_s"]), statistics.median(row["strongest_runs_s"])
    out = {**row, "kernelbench_s": kb, "strongest_s": st, "ratio": st / kb if kb > 0 else float("inf"),
           "false_alarm": row["verdicts"]["strongest"]["status"] in ("wrong", "error")}
    n = row.get("kernelbench_trials", KERNELBENCH_TRIALS)
    if n < KERNELBENCH_TRIALS:
        # The official check's first n trials are a part of its 5 (the same seeds, in order),
        # so their time is a lower bound of the 5 trials' and the ratio an upper bound; the
        # trials draw same-sized inputs, so 5/n of it is the estimate.
        out["ratio_is_upper_bound"] = True
        out["ratio_estimate"] = out["ratio"] * n / KERNELBENCH_TRIALS
    return out


def measure(path: Path, device: str, repeats: int, small: bool = False, mid: int | None = None,
            row: dict | None = None) -> dict:
    """Both oracles on one problem (those ``row`` lacks), one after the other, each warmed up
    by an untimed round of its own."""
    row = dict(row or {"problem": path.stem})
    for key in ORACLES:
        if f"{key}_runs_s" in row:
            continue
        r = rounds(path, device, key, repeats, small, mid)
        row.setdefault("verdicts", {})
        if "verdict" in r:
            row["verdicts"][key] = r["verdict"]
        if "shapes" in r:
            row["shapes"] = r["shapes"]
        if "error" in r:
            return {**row, "error": r["error"]}
        row[f"{key}_runs_s"] = r["runs_s"]
    return combine(row)


def _official_task(args: tuple) -> dict:
    """A pool worker: the official check on one problem, in a process of its own (its first
    ``trials`` trials: see ``--kb-trials``)."""
    path, device, small, mid, trials = args
    # One timed round: the CPU's input generation that dominates it varies little run to run.
    r = rounds(path, device, "kernelbench", 1, small, mid, warmup="forward", trials=trials)
    row = {"problem": path.stem, "kernelbench_warmup": "forward", "kernelbench_trials": trials}
    if "shapes" in r:
        row["shapes"] = r["shapes"]
    if "verdict" in r:
        row["verdicts"] = {"kernelbench": r["verdict"]}
    if "error" in r:
        return {**row, "kernelbench_error": r["error"]}
    return {**row, "kernelbench_runs_s": r["runs_s"]}


#: ``--kb-jobs``: only problems with at least this many input elements have their official
#: check timed beside others. Drawing 10^8 normal numbers on one CPU core takes about 0.5 s a
#: trial, so there the GPU work that processes side by side could slow is a small part; the
#: rest (convolutions on small inputs, where the ratio is tightest) are timed alone.
PARALLEL_MIN_ELEMENTS = 10**8


def input_elements(path: Path, shapes: dict | None = None) -> int:
    """The elements of the problem's inputs at ``shapes`` (default its own), counted on the
    meta device (nothing allocated); -1 where they cannot be counted."""
    from kernelaudit.zoo.problems import load_problem

    try:
        with torch.device("meta"):
            inputs = load_problem(path).get_inputs(shapes or {})
        return sum(t.numel() for t in inputs if isinstance(t, torch.Tensor))
    except Exception:  # noqa: BLE001 - such a problem is timed alone, where its error is recorded
        return -1


def flops_per_input_element(path: Path) -> float:
    """FLOPs of one ``Model`` forward at the problem's own shape per input element,
    counted on the meta device (nothing allocated, nothing run); -1 where they cannot be
    counted. ``strongest`` evaluates the module in float64 at the timed shape, the
    official check draws the inputs on the CPU: the higher this is, the tighter the ratio."""
    from torch.utils.flop_counter import FlopCounterMode

    from kernelaudit.zoo.problems import load_problem

    try:
        problem = load_problem(path)
        with torch.device("meta"):
            model = problem.Model(*problem.get_init_inputs({}))
            inputs = problem.get_inputs({})
            counter = FlopCounterMode(display=False)
            with counter, torch.no_grad():
                model(*inputs)
        n = sum(t.numel() for t in inputs if isinstance(t, torch.Tensor))
        return counter.get_total_flops() / max(n, 1)
    except Exception:  # noqa: BLE001 - such a problem goes last, in KernelBench's order
        return -1.0


#: ``--order``: problems in KernelBench's numbering, or the riskiest first (the most FLOPs
#: per input element), so that a short device session measures where the goal is tight.
ORDERS = ("number", "risk")


#: ``--kb-jobs``: device memory an official check is planned to hold, per byte of its
#: inputs (the inputs, the two outputs, ``allclose``'s temporaries); problems run side by
#: side only while their plans fit in :data:`PARALLEL_MEMORY_FRACTION` of the device.
PLAN_BYTES_PER_INPUT_BYTE = 5
PARALLEL_MEMORY_FRACTION = 0.8


def _device_bytes(device: str) -> int:
    if device.startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_properties(torch.device(device)).total_memory
    import os

    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def official_in_parallel(paths: list[Path], device: str, small: bool, mid: int | None,
                         jobs: int, done, sizes: dict[str, int] | None = None,  # noqa: ANN001
                         trials: int = KERNELBENCH_TRIALS) -> None:
    """The official checks of ``paths``, up to ``jobs`` processes side by side (a fresh
    process per problem), admitted largest first while their planned memory (inputs' bytes
    times :data:`PLAN_BYTES_PER_INPUT_BYTE`) fits the device; ``done(row)`` is called as each
    finishes. The official check's cost on large problems is drawing every trial's inputs
    on the CPU, one core per process, so processes side by side barely slow each other; a
    problem that ran out of memory beside others runs again alone."""
    import multiprocessing as mp

    sizes = sizes or {}
    plan = {p.stem: max(1, sizes.get(p.stem, 0)) * 4 * PLAN_BYTES_PER_INPUT_BYTE for p in paths}
    budget = _device_bytes(device) * PARALLEL_MEMORY_FRACTION
    queue = sorted(paths, key=lambda p: -plan[p.stem])
    again: list[Path] = []
    while queue:  # a pool whose worker died (a crash in a problem's code) is replaced
        queue = _official_pool(queue, plan, budget, jobs, device, small, mid, done, again, trials)
    for p in again:
        with ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as pool:
            try:
                row = pool.submit(_official_task, (p, device, small, mid, trials)).result()
            except BrokenProcessPool as exc:
                row = {"problem": p.stem, "kernelbench_error": f"the checking process died: {exc}"}
            done({**row, "kernelbench_alone": True})


def _official_pool(queue: list[Path], plan: dict, budget: float, jobs: int, device: str, small: bool,
                   mid: int | None, done, again: list[Path], trials: int = KERNELBENCH_TRIALS) -> list[Path]:  # noqa: ANN001
    """Run ``queue`` in one pool (see :func:`official_in_parallel`); returns the problems
    not yet started when a worker died (those in flight go to ``again``, to run alone)."""
    import multiprocessing as mp

    running: dict = {}
    with ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn"), max_tasks_per_child=1) as pool:
        while queue or running:
            held = sum(plan[p.stem] for p in running.values())
            for p in list(queue):  # the largest that fits; anything when nothing runs
                if len(running) >= jobs:
                    break
                if not running or held + plan[p.stem] <= budget:
                    running[pool.submit(_official_task, (p, device, small, mid, trials))] = p
                    held += plan[p.stem]
                    queue.remove(p)
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for fut in finished:
                p = running.pop(fut)
                try:
                    row = fut.result()
                except BrokenProcessPool:
                    # which process died is unknown: every problem in flight runs again alone
                    # (where a death is its own), results that came back are kept
                    again.append(p)
                    for f, q in running.items():
                        if f.done() and f.exception() is None:
                            done(f.result())
                        else:
                            again.append(q)
                    print(f"a checking process died: {len(again)} problem(s) to run alone", flush=True)
                    return queue
                if "out of memory" in row.get("kernelbench_error", "").lower() and len(running) + len(finished) > 1:
                    again.append(p)
                    print(f"{p.stem[:40]:40s} official check out of memory beside others: again alone", flush=True)
                    continue
                done(row)
    return queue


def summarise(rows: list[dict]) -> dict:
    """Median and max ratio over the problems measured, those over the target, the false alarms."""
    done = [r for r in rows if "ratio" in r]
    ratios = [r["ratio"] for r in done]
    return {
        "problems": len(rows), "measured": len(done),
        "median_ratio": statistics.median(ratios) if ratios else None,
        "max_ratio": max(ratios) if ratios else None,
        "max_ratio_problem": max(done, key=lambda r: r["ratio"])["problem"] if done else None,
        "over_target": sorted(r["problem"] for r in done if r["ratio"] > MAX_RATIO),
        "ratio_upper_bounds": sorted(r["problem"] for r in done if r.get("ratio_is_upper_bound")),
        "false_alarms": sorted(r["problem"] for r in done if r["false_alarm"]),
        "kernelbench_rejects_reference": sorted(r["problem"] for r in done
                                                if r["verdicts"]["kernelbench"]["status"] in ("wrong", "error")),
        "unjudged_by_strongest": sorted(r["problem"] for r in done if r["verdicts"]["strongest"]["status"] == "skipped"),
        "could_not_run": {r["problem"]: r.get("error", r.get("kernelbench_error")) for r in rows
                          if "error" in r or "kernelbench_error" in r},
    }


def is_problem(path: Path, want: str) -> bool:
    """Whether ``want`` (a ``--problems`` item: a file stem or a level 1 number) names ``path``."""
    return path.stem == want or path.stem.split("_")[0] == want


def level1_problem(level1: Path, want: str) -> Path | None:
    """The level 1 file ``want`` names (a file stem or a number), if any."""
    return next((p for p in sorted(level1.glob("*.py")) if is_problem(p, want)), None)


def _order(p: Path) -> tuple[int, str]:
    head = p.stem.split("_", 1)[0]
    return (int(head) if head.isdigit() else 10**6, p.stem)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="where to write the JSON results (after every problem)")
    ap.add_argument("--root", type=Path, default=None, help="KernelBench as published (holding level1); default "
                                                            "KERNELAUDIT_KERNELBENCH")
    ap.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"),
                    help="auto: cuda when available (the goal is measured on the H200)")
    ap.add_argument("--limit", type=int, default=None, help="at most this many problems (after --skip)")
    ap.add_argument("--skip", type=int, default=0, help="skip the first N problems (in KernelBench's numbering)")
    ap.add_argument("--problems", default="", help="comma-separated problem names (file stems) or numbers to run only")
    ap.add_argument("--repeats", type=int, default=3, help="timed rounds per oracle (median reported)")
    ap.add_argument("--small", action="store_true", help="small shapes (a CPU smoke run of this script; the goal "
                                                         "is measured at the problems' own shapes)")
    ap.add_argument("--mid", type=int, default=None, metavar="MIB",
                    help="shapes within MIB MiB of inputs and outputs and MIB * 2^26 FLOPs (a CPU stand-in for "
                         "the own shapes)")
    ap.add_argument("--kb-jobs", type=int, default=1, metavar="J",
                    help="time the official checks of problems with large inputs first, J processes side by "
                         "side (a fresh process per problem, one timed round; their cost is drawing inputs on the "
                         "CPU, one core each), then every other check one at a time")
    ap.add_argument("--kb-trials", type=int, default=5, metavar="N",
                    help="with --kb-jobs: time the first N of the official check's 5 trials on the large problems "
                         "(their time bounds the 5 trials' from below, so each such ratio is an upper bound; "
                         "5/N of it is the estimate); default 5")
    ap.add_argument("--order", default="number", choices=ORDERS,
                    help="number: KernelBench's numbering; risk: the most FLOPs per input element first (float64 "
                         "convolutions and matmuls on small inputs, where the ratio is tightest), counted on the "
                         "meta device; --skip and --limit apply after the order")
    ap.add_argument("--resume", action="store_true", help="keep the rows already in --out and skip their problems")
    args = ap.parse_args(argv)
    if args.repeats < 1 or args.skip < 0 or (args.limit is not None and args.limit < 1) or args.kb_jobs < 1:
        ap.error(f"Cannot have --repeats={args.repeats}, --skip={args.skip}, --limit={args.limit}, "
                 f"--kb-jobs={args.kb_jobs}: allowed are --repeats >= 1, --skip >= 0, --limit >= 1, --kb-jobs >= 1")
    if not 1 <= args.kb_trials <= KERNELBENCH_TRIALS:
        ap.error(f"Cannot have --kb-trials={args.kb_trials}: allowed are 1 to {KERNELBENCH_TRIALS}")
    if args.mid is not None and (args.mid < 1 or args.small):
        ap.error(f"Cannot have --mid={args.mid}{' with --small' if args.small else ''}: allowed is --mid >= 1, "
                 "without --small")

    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    if device == "cuda" and not torch.cuda.is_available():
        ap.error("Cannot have --device=cuda: this torch sees no CUDA device; allowed: auto, cpu")
    level1 = (args.root or _default_root()) / "level1"
    if not level1.is_dir():
        print(f"{level1}: not found (KernelBench as published; set --root or KERNELAUDIT_KERNELBENCH)",
              file=sys.stderr)
        return 3
    paths = sorted(level1.glob("*.py"), key=_order)
    wanted = {p for p in args.problems.split(",") if p}
    if wanted:
        paths = [p for p in paths if any(is_problem(p, w) for w in wanted)]
        if not paths:
            print(f"--problems: none of {sorted(wanted)} is a level 1 file stem or number under {level1}",
                  file=sys.stderr)
            return 2
    if args.order == "risk":
        risk = {p: flops_per_input_element(p) for p in paths}
        paths.sort(key=lambda p: -risk[p])     # stable: ties (and uncountable ones) keep the numbering
    paths = paths[args.skip:]
    if args.limit is not None:
        paths = paths[:args.limit]
    rows: list[dict] = []
    if args.resume and args.out.exists():
        rows = json.loads(args.out.read_text()).get("rows", [])
    if device == "cpu" and not args.small and not args.mid:
        print("note: on the CPU at the problems' own shapes some problems take minutes; the goal is measured on "
              "the H200", file=sys.stderr)
    import triton

    head = {
        "benchmark": "oracle_cost_kernelbench",
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "torch": torch.__version__, "triton": triton.__version__, "git_sha": _git_sha(),
        "level1": str(level1), "repeats": args.repeats, "small_shapes": args.small, "mid_mib": args.mid,
        "problem_caches": "cold: the problem is loaded again for every round and oracle", "strongest": STRONGEST, "max_ratio_target": MAX_RATIO,
        "candidate": "each problem's own Model (honest: a strongest rejection is a false alarm)",
        "kb_jobs": args.kb_jobs, "kb_trials": args.kb_trials,
    }
    by_name = {r["problem"]: r for r in rows}

    def write() -> None:
        result = {**head, "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                  "summary": summarise(list(by_name.values())), "rows": list(by_name.values())}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(result, indent=1))
        tmp.replace(args.out)  # a kill mid-write leaves the last whole file

    def report(row: dict) -> None:
        if "ratio" in row:
            flag = "  > 3x" if row["ratio"] > MAX_RATIO else ""
            alarm = "  FALSE ALARM" if row["false_alarm"] else ""
            le = "<=" if row.get("ratio_is_upper_bound") else "  "
            print(f"{row['problem'][:40]:40s} kernelbench {row['kernelbench_s'] * 1e3:9.1f} ms  strongest "
                  f"{row['strongest_s'] * 1e3:9.1f} ms  ratio {le}{row['ratio']:6.2f}{flag}{alarm}", flush=True)
        elif "error" in row or "kernelbench_error" in row:
            print(f"{row['problem'][:40]:40s} could not run: {row.get('error', row.get('kernelbench_error'))[:120]}",
                  flush=True)
        else:
            print(f"{row['problem'][:40]:40s} kernelbench {statistics.median(row['kernelbench_runs_s']):9.2f} s",
                  flush=True)

    def finished(r: dict) -> bool:
        return "ratio" in r or "error" in r or "kernelbench_error" in r

    if args.kb_jobs > 1:  # phase 1: every official check, side by side
        sizes = {p.stem: input_elements(p) for p in paths}
        todo = [p for p in paths if "kernelbench_runs_s" not in by_name.get(p.stem, {})
                and not finished(by_name.get(p.stem, {})) and sizes[p.stem] >= PARALLEL_MIN_ELEMENTS]
        print(f"{len(todo)} official checks (inputs of at least {PARALLEL_MIN_ELEMENTS:.0e} elements) "
              f"{args.kb_jobs} at a time; the other problems one at a time after", flush=True)

        def official_done(row: dict) -> None:
            by_name[row["problem"]] = {**by_name.get(row["problem"], {}), **row}
            report(row)
            write()

        official_in_parallel(todo, device, args.small, args.mid, args.kb_jobs, official_done, sizes, args.kb_trials)
    for path in paths:  # then each problem's strongest (and, without --kb-jobs, its official check) alone
        row = by_name.get(path.stem, {"problem": path.stem})
        if finished(row):
            continue
        row = measure(path, device, args.repeats, args.small, args.mid, row)
        by_name[path.stem] = row
        report(row)
        write()
    rows = list(by_name.values())
    s = summarise(rows)
    print(json.dumps(s, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
