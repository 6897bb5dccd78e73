"""False rejections on KernelBench as published: the reference, and a reordered variant of it.

For every level 1-3 problem: load it, find small shapes (``--small``, the CPU default;
on ``--device cuda`` the problem's own shapes; ``--mid MIB``: a shape between the two,
where ``shapes``, ``values`` and the derived error model work as at the own shapes,
their extra cases and structure tests at the small shape), and judge with ``--oracle strongest``

(a) the reference itself as the candidate (the problem's source, ``Model`` renamed
    ``ModelNew``), and
(b) a legitimately reordered variant (:mod:`kernelaudit.zoo.problems.variants`: the
    reference in row chunks where it is batch-separable, with its reductions split).

Each problem is classified ``ok`` (both pass), ``false-rejection`` (the oracle that
rejected and its message) or ``cannot-judge`` (with the reason: does not load, needs a
GPU, nondeterministic by design, the reference cannot run, an oracle could not judge,
timed out). Problems run in worker processes (``--jobs``), one problem at a time per
worker, with a timeout per problem: a hang or a crash costs that problem only (the
worker is restarted). Results are appended to ``OUT/results.jsonl`` as they come
(fsynced, :mod:`kernelaudit.jsonstore`), so an interrupted run resumes where it stopped
(a line torn by a kill is set aside to ``OUT/results.torn.jsonl`` and its problem runs
again); ``OUT/table.md`` is written at the end.

    python benchmarks/kernelbench_false_rejections.py --jobs 2
    python benchmarks/kernelbench_false_rejections.py --levels 1 --limit 10 --out /tmp/fr
    python benchmarks/kernelbench_false_rejections.py --levels 1,2 --mid 8 --out /tmp/fr-mid
    python benchmarks/kernelbench_false_rejections.py --device cuda --jobs 1 \\
        --out benchmarks/results/DATE-h200-kernelbench-false-rejections
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "2026-12-03-cpu-kernelbench-false-rejections"
#: A worker whose peak memory passes this is restarted after its problem (frees everything).
RESTART_RSS_MB = 3000
#: Message characters kept per verdict.
MESSAGE_CHARS = 600
#: ``--mid``: FLOPs allowed per byte of the budget (as in ``oracle_cost_kernelbench.py``).
MID_FLOPS_PER_BYTE = 64


# ---------------------------------------------------------------------------
# the worker: one problem at a time
# ---------------------------------------------------------------------------


def _gpu_reason(text: str, device: str = "cpu") -> bool:
    """Whether a failure on the CPU names a GPU (on a GPU, "cuda" is in every case's name)."""
    t = text.lower()
    return not device.startswith("cuda") and ("cuda" in t or "nvidia" in t or "gpu" in t)


def _determinism(case: Any) -> str:
    """How the reference repeats: ``deterministic`` (the same bits under two RNG states),
    ``random`` (other values under another RNG state: random ops in forward; not judged) or
    ``rounding`` (other bits under the same RNG state, within float32 rounding: atomics, as
    in cuDNN's transposed convolutions and LSTMs; judged, tamper then requires no determinism)."""
    import torch

    from kernelaudit.zoo.problems.problem_case import as_tensors, new_model, set_seed

    def run(seed: int) -> list[Any]:
        model = new_model(case.problem.Model, case.init_inputs, case.device)
        set_seed(seed)
        with torch.no_grad():
            return as_tensors(model(*[x.clone() if isinstance(x, torch.Tensor) else x for x in case.inputs]))

    def same(xs: list[Any], ys: list[Any]) -> bool:
        return all(torch.equal(a.nan_to_num(), b.nan_to_num()) for a, b in zip(xs, ys))

    def close(xs: list[Any], ys: list[Any]) -> bool:
        return all(torch.allclose(a.double().nan_to_num(), b.double().nan_to_num(), rtol=1e-4, atol=1e-5 * float(
            a.double().nan_to_num().abs().max().clamp_min(1))) for a, b in zip(xs, ys) if a.is_floating_point())

    first, again, other = run(1), run(1), run(2)
    if same(first, again):
        return "deterministic" if same(first, other) else "random"
    return "rounding" if close(first, again) and close(first, other) else "random"


def _verdict_record(verdict: Any, seconds: float) -> dict[str, Any]:
    details = verdict.details or {}
    worst = details.get("worst")
    return {"status": verdict.status.value, "oracle": worst, "message": (verdict.message or "")[:MESSAGE_CHARS],
            "seconds": round(seconds, 2)}


def judge_problem(path: str, device: str, small: bool, scratch: str, mid: int = 0) -> dict[str, Any]:
    """Classify one problem file (see the module doc); ``mid`` (MiB): at the mid shape instead."""
    import torch

    from kernelaudit.zoo.oracles import Subject, make_oracle
    from kernelaudit.zoo.oracles.base import judge_or_unjudged
    from kernelaudit.zoo.problems import LoadError, ProblemCase, load_problem
    from kernelaudit.zoo.problems.variants import reference_candidate, reordered_candidate

    p = Path(path)
    rec: dict[str, Any] = {"problem": f"{p.parent.name}/{p.stem}", "level": p.parent.name, "device": device,
                           "small": small, "mid_mib": mid or None, "class": None, "reason": None, "shapes": None}
    start = time.perf_counter()

    def done(cls: str, reason: str | None = None) -> dict[str, Any]:
        rec["class"], rec["reason"] = cls, reason
        rec["seconds"] = round(time.perf_counter() - start, 2)
        rec["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
        return rec

    try:
        problem = load_problem(p)
    except LoadError as exc:
        return done("cannot-judge", ("needs GPU: " if _gpu_reason(str(exc), device) else "does not load: ") + str(exc)[:300])
    if small and not problem.small_shapes:
        from kernelaudit.zoo.problems.small_shapes import find_small_shapes

        found = find_small_shapes(problem)
        rec["small_search"] = {"source": found.source, "flops": found.flops, "forward_s": found.forward_s,
                               "note": found.note}
        if found.source == "none":
            return done("cannot-judge", f"reference cannot run at a small shape: {found.note}")
    shapes = None
    if mid:
        from kernelaudit.zoo.problems.small_shapes import find_small_shapes

        found = find_small_shapes(problem, max_flops=(mid << 20) * MID_FLOPS_PER_BYTE, max_bytes=mid << 20)
        if found.source == "none":
            return done("cannot-judge", f"reference cannot run at a mid shape: {found.note}")
        shapes = dict(found.shapes)
    try:
        case = ProblemCase.make(problem, device=device, small=small, shapes=shapes)
        rec["shapes"] = dict(case.shapes)
        case.reference()
        determinism = _determinism(case)
        rec["determinism"] = determinism
    except Exception as exc:  # noqa: BLE001 - the problem's own code failed
        why = f"{type(exc).__name__}: {str(exc)[:300]}"
        return done("cannot-judge", ("needs GPU: " if _gpu_reason(why, device) else "reference cannot run: ") + why)
    if determinism == "random":
        return done("cannot-judge", "nondeterministic by design: the reference gives other bits under another "
                                    "RNG state (random ops in forward)")
    try:
        variant = reordered_candidate(case, scratch)
        rec["variant_kind"] = variant.kind
        candidates = {"reference": reference_candidate(problem, scratch), "reordered": variant.candidate}
    except Exception as exc:  # noqa: BLE001 - building the candidates is this benchmark's job
        return done("cannot-judge", f"could not build the candidates: {type(exc).__name__}: {str(exc)[:300]}")
    # The probe case holds the inputs and the float64 reference (18 GiB for L1 19 at its own
    # shape): free it before strongest builds a fresh case of its own.
    del case
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    oracle = make_oracle("strongest")
    for name, cand in candidates.items():
        t = time.perf_counter()
        try:
            v = judge_or_unjudged(oracle, ProblemCase.make(problem, device=device, small=small, shapes=shapes),
                                  Subject(cand))
            rec[name] = _verdict_record(v, time.perf_counter() - t)
        except MemoryError as exc:
            rec[name] = {"status": "checker-oom", "oracle": None, "message": f"the checker ran out of memory: {exc}",
                         "seconds": round(time.perf_counter() - t, 2)}
        except Exception as exc:  # noqa: BLE001 - the checker itself failed: never the candidate's fault
            rec[name] = {"status": "checker-error", "oracle": None, "seconds": round(time.perf_counter() - t, 2),
                         "message": f"{type(exc).__name__}: {str(exc)[:MESSAGE_CHARS]}"}
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    statuses = {rec[n]["status"] for n in candidates}
    if statuses & {"wrong", "error"}:
        bad = [n for n in candidates if rec[n]["status"] in ("wrong", "error")]
        return done("false-rejection", "; ".join(f"{n} rejected by {rec[n]['oracle']}" for n in bad))
    if statuses != {"ok"}:
        bad = [n for n in candidates if rec[n]["status"] != "ok"]
        return done("cannot-judge", "; ".join(f"{n}: {rec[n]['status']}: {rec[n]['message'][:200]}" for n in bad))
    return done("ok")


def worker_main(device: str, small: bool, threads: int, mid: int = 0) -> None:
    """Read problem paths from stdin, write one JSON result per line to stdout."""
    import gc

    import torch

    from kernelaudit.zoo.check import _triton_mode_for

    if threads:
        torch.set_num_threads(threads)
    _triton_mode_for(device)
    out = sys.stdout
    sys.stdout = sys.stderr  # whatever the problems print must not break the protocol
    for line in sys.stdin:
        path = line.strip()
        if not path:
            continue
        with tempfile.TemporaryDirectory(prefix="kernelaudit-fr-") as scratch:
            try:
                rec = judge_problem(path, device, small, scratch, mid)
            except BaseException as exc:  # noqa: BLE001 - one problem never ends the worker
                rec = {"problem": f"{Path(path).parent.name}/{Path(path).stem}", "class": "cannot-judge",
                       "reason": f"benchmark worker failed: {type(exc).__name__}: {str(exc)[:300]}"}
        out.write(json.dumps(rec) + "\n")
        out.flush()
        gc.collect()


# ---------------------------------------------------------------------------
# the parent: jobs, timeouts, resumable results
# ---------------------------------------------------------------------------


class Worker:
    """A worker process; restarted after a timeout, a crash or a large peak memory."""

    def __init__(self, device: str, small: bool, threads: int, mid: int = 0) -> None:
        self.args = [sys.executable, str(Path(__file__).resolve()), "--worker", "--device", device,
                     "--threads", str(threads)] + (["--small"] if small else ["--full"]) + (
                         ["--mid", str(mid)] if mid else [])
        self.proc: subprocess.Popen | None = None
        self.lines: queue.Queue = queue.Queue()

    def _start(self) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
        self.proc = subprocess.Popen(self.args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True, env=env)
        self.lines = queue.Queue()
        proc, lines = self.proc, self.lines
        threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout] + [lines.put(None)], daemon=True).start()

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def judge(self, path: Path, timeout_s: float) -> dict[str, Any]:
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        name = f"{path.parent.name}/{path.stem}"
        start = time.perf_counter()
        self.proc.stdin.write(str(path) + "\n")
        self.proc.stdin.flush()
        try:
            line = self.lines.get(timeout=timeout_s)
        except queue.Empty:
            self.stop()
            return {"problem": name, "class": "cannot-judge", "reason": f"timed out after {timeout_s:g} s",
                    "seconds": round(time.perf_counter() - start, 2)}
        if line is None:
            code = self.proc.wait()
            self.proc = None
            return {"problem": name, "class": "cannot-judge", "seconds": round(time.perf_counter() - start, 2),
                    "reason": f"the worker died while judging it (exit code {code}; out of memory or a crash)"}
        rec = json.loads(line)
        if rec.get("peak_rss_mb", 0) > RESTART_RSS_MB:
            self.stop()
        return rec


def out_of_memory(rec: dict[str, Any]) -> bool:
    """Whether a problem's record says it ran out of memory (the checker's or the device's),
    or its worker died: worth judging again alone."""
    text = json.dumps(rec).lower()
    return ("out of memory" in text or "outofmemoryerror" in text or "checker-oom" in text
            or "the worker died" in text)


def problem_files(root: Path, levels: list[int]) -> list[Path]:
    def key(p: Path) -> tuple[int, int]:
        head = p.stem.split("_", 1)[0]
        return (int(p.parent.name[5:]), int(head) if head.isdigit() else 10**6)

    files = [p for lv in levels for p in (root / f"level{lv}").glob("*.py")]
    return sorted(files, key=key)


def write_table(out: Path, meta: dict[str, Any]) -> str:
    """``table.md`` from ``results.jsonl``: totals, then one row per problem."""
    from kernelaudit.jsonstore import read_jsonl

    recs: dict[str, dict] = {}
    for _, r in read_jsonl(out / "results.jsonl")[0]:  # a torn last line (a killed run) is skipped
        recs[r["problem"]] = r
    rows = sorted(recs.values(), key=lambda r: (r["problem"].split("/")[0],
                                                int(r["problem"].split("/")[1].split("_")[0])))
    totals: dict[str, int] = {}
    for r in rows:
        totals[r["class"]] = totals.get(r["class"], 0) + 1
    judged_s = sum(r.get("seconds") or 0 for r in rows)
    lines = [
        "# KernelBench levels 1-3: false rejections of `--oracle strongest`",
        "",
        f"Generated by `benchmarks/kernelbench_false_rejections.py` ({meta.get('command', '')}).",
        f"Device: {meta.get('device')}; shapes: "
        f"{_shapes_words(meta)}; "
        f"jobs: {meta.get('jobs')}; torch {meta.get('torch')}; machine: {meta.get('machine')}.",
        f"Wall time of the last run: {meta.get('wall_s', 0):.0f} s for {meta.get('run_count', 0)} problems "
        f"(sum of per-problem times over all {len(rows)} rows: {judged_s:.0f} s).",
        "",
        "Totals: " + ", ".join(f"**{k}** {v}" for k, v in sorted(totals.items())) + f" (of {len(rows)}).",
        "",
        "Candidates: the reference itself (the problem's source with `Model` renamed `ModelNew`) and a reordered "
        "variant (row chunks where batch-separable, verified in float64, and split reductions).",
        "",
        "| problem | class | shapes | variant | reference | reordered | s | reason |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        shapes = ", ".join(f"{k}={v}" for k, v in (r.get("shapes") or {}).items())
        cells = []
        for n in ("reference", "reordered"):
            v = r.get(n)
            cells.append("" if not v else v["status"] + (f" ({v['oracle']})" if v["status"] != "ok" and v.get("oracle")
                                                          else ""))
        reason = (r.get("reason") or "").replace("|", "\\|").replace("\n", " ")[:220]
        lines.append(f"| {r['problem']} | {r['class']} | {shapes[:80]} | {r.get('variant_kind', '')} | {cells[0]} | "
                     f"{cells[1]} | {r.get('seconds', '')} | {reason} |")
    text = "\n".join(lines) + "\n"
    (out / "table.md").write_text(text)
    return text


def _shapes_words(meta: dict[str, Any]) -> str:
    if meta.get("mid_mib"):
        return f"mid (searched within {meta['mid_mib']} MiB, --mid {meta['mid_mib']})"
    return "small (searched, --small)" if meta.get("small") else "own"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--levels", default="1,2,3", help="comma list of levels (default 1,2,3)")
    ap.add_argument("--limit", type=int, default=0, help="at most this many problems per level (0: all)")
    ap.add_argument("--only", default="", help="comma list of problem numbers (5) or level/number (1/5) to run")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--small", dest="small", action="store_true", default=None, help="searched small shapes")
    ap.add_argument("--full", dest="small", action="store_false", help="the problems' own shapes")
    ap.add_argument("--mid", type=int, default=0, metavar="MIB",
                    help="shapes within MIB MiB of inputs and outputs and MIB * 2^26 FLOPs: larger than the small "
                         "shapes, so shapes, values and the derived model work as at the own shapes (CPU)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads per worker (default: 1 when jobs > 1)")
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds per problem (default 180)")
    ap.add_argument("--kernelbench", type=Path, default=None, help="KernelBench root (default: the config knob)")
    ap.add_argument("--fresh", action="store_true", help="start over instead of resuming OUT/results.jsonl")
    ap.add_argument("--table-only", action="store_true", help="rewrite OUT/table.md from OUT/results.jsonl")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    small = (args.device == "cpu") if args.small is None else args.small
    if args.mid:
        if args.mid < 0 or args.small:
            ap.error(f"Cannot have --mid={args.mid}{' with --small' if args.small else ''}: allowed is --mid >= 1, "
                     "without --small")
        small = False
    if args.worker:
        worker_main(args.device, small, args.threads, args.mid)
        return 0
    sys.path.insert(0, str(ROOT / "src"))
    from kernelaudit.config import KERNELBENCH

    import torch

    args.out.mkdir(parents=True, exist_ok=True)
    meta_path = args.out / "meta.json"
    if args.table_only:
        print(write_table(args.out, json.loads(meta_path.read_text()) if meta_path.exists() else {}))
        return 0
    root = args.kernelbench or Path(KERNELBENCH.get())
    if not root.is_dir():
        print(f"--kernelbench {root}: not a directory (set {KERNELBENCH.name})", file=sys.stderr)
        return 2
    try:
        levels = [int(x) for x in args.levels.split(",") if x.strip()]
    except ValueError:
        print(f"Cannot have --levels={args.levels!r}: allowed values are comma lists of 1, 2, 3", file=sys.stderr)
        return 2
    files = problem_files(root, levels)
    if args.limit:
        files = [f for lv in levels for f in [g for g in files if g.parent.name == f"level{lv}"][:args.limit]]
    if args.only:
        wanted = {w.strip() for w in args.only.split(",") if w.strip()}
        bad = [w for w in wanted if not all(part.isdigit() for part in w.split("/"))]
        if bad:
            print(f"Cannot have --only={args.only!r}: allowed values are problem numbers (5) or level/number "
                  "(1/5), comma separated", file=sys.stderr)
            return 2
        num = lambda f: f.name.split("_", 1)[0]  # noqa: E731 - "5_Matrix_scalar_multiplication.py" -> "5"
        files = [f for f in files if num(f) in wanted or f"{f.parent.name[5:]}/{num(f)}" in wanted]
    results = args.out / "results.jsonl"
    if args.fresh and results.exists():
        results.unlink()
    from kernelaudit.jsonstore import append_jsonl, read_jsonl, set_aside_torn

    # A run killed mid-write leaves a torn last line: set aside, so its problem runs again
    # and the next record starts on a line of its own.
    set_aside_torn(results, args.out / "results.torn.jsonl")
    # done: the problems with a record, but for one that ran out of memory side by side and
    # was not judged alone yet (a run stopped before its retries)
    latest = {r["problem"]: r for _, r in read_jsonl(results)[0]}
    done = {p for p, r in latest.items() if r.get("alone") or not out_of_memory(r)}
    todo = [f for f in files if f"{f.parent.name}/{f.stem}" not in done]
    print(f"{len(files)} problems, {len(files) - len(todo)} already in {results}, {len(todo)} to judge "
          f"with {args.jobs} jobs", flush=True)
    threads = args.threads or (1 if args.jobs > 1 else 0)
    pending: queue.Queue = queue.Queue()
    for f in todo:
        pending.put(f)
    lock = threading.Lock()
    counter = {"n": 0}
    start = time.perf_counter()

    def run_jobs() -> None:
        worker = Worker(args.device, small, threads, args.mid)
        try:
            while True:
                try:
                    f = pending.get_nowait()
                except queue.Empty:
                    return
                rec = worker.judge(f, args.timeout)
                with lock:
                    counter["n"] += 1
                    append_jsonl(results, rec)
                    print(f"[{counter['n']}/{len(todo)} {time.perf_counter() - start:6.0f}s] {rec['problem']}: "
                          f"{rec['class']} ({rec.get('seconds', '?')} s) {(rec.get('reason') or '')[:150]}", flush=True)
        finally:
            worker.stop()

    pool = [threading.Thread(target=run_jobs) for _ in range(max(1, args.jobs))]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    if args.jobs > 1:
        # Side by side, a problem may have met the other workers' memory, not its own limit:
        # each one that ran out (or whose worker died) is judged again alone; its last record counts.
        latest = {r["problem"]: r for _, r in read_jsonl(results)[0]}
        again = [f for f in todo if out_of_memory(latest.get(f"{f.parent.name}/{f.stem}", {}))]
        if again:
            print(f"{len(again)} problems ran out of memory side by side: judging them again alone", flush=True)
            worker = Worker(args.device, small, args.threads, args.mid)
            try:
                for f in again:
                    rec = {**worker.judge(f, args.timeout), "alone": True}
                    append_jsonl(results, rec)
                    print(f"[alone {time.perf_counter() - start:6.0f}s] {rec['problem']}: {rec['class']} "
                          f"({rec.get('seconds', '?')} s) {(rec.get('reason') or '')[:150]}", flush=True)
            finally:
                worker.stop()
    wall = time.perf_counter() - start
    meta = {"command": "python benchmarks/kernelbench_false_rejections.py " + " ".join(argv or sys.argv[1:]),
            "device": args.device, "small": small, "mid_mib": args.mid or None, "jobs": args.jobs,
            "torch": torch.__version__,
            "machine": f"{os.cpu_count()} CPUs" + (f", {torch.cuda.get_device_name()}" if args.device == "cuda"
                                                   else ""),
            "wall_s": wall, "run_count": len(todo)}
    meta_path.write_text(json.dumps(meta, indent=2))
    print(write_table(args.out, meta).split("\n| problem")[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
