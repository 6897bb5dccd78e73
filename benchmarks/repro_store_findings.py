"""Every finding of a sweep store, run again in plain torch.

For each op and direction (``--per-dtype``: and dtype) with a wrong or error case in the
store (cases that say nothing of the op, such as timeouts, are passed over), silent
findings first (wrong, then out-of-bounds accesses, then other errors), the first such
case is rendered
by :func:`kernelaudit.sweep.ops.plain.plain_check`: plain-torch code that makes the
case's tensors (the shapes the sweep recorded, its own random values), runs the call
and compares it with the same call on chunks of whole batches far below every limit.
Each snippet runs in its own process (an illegal memory access poisons the CUDA
context) under a time limit, and is kept beside the results for upstream reports.

    python benchmarks/repro_store_findings.py runs/h200 --out $OUT/plain [--ops a,b] [--timeout 300]

With ``--guarded`` each snippet that showed its fault in plain torch (wrong, raised or
crashed, not out of memory) runs a second time under ``kernelaudit run`` (the
guard, ``fix``, with the shipped known-fault database): a finding the guard fixes reads
``ok`` there, one it refuses ``raised`` with the guard's ``UnsafeCallError`` (the
program as a user would run it: issue 16's end-to-end proof on the GPU).

With ``--done RESULTS`` (an earlier run's ``results.json``, gzipped or not; repeatable) a
finding that run settled (:func:`settled`: not skipped for time, not timed out, not out
of memory) is carried over as it was, ``done_in`` naming the file, and not run again:
successive device calls work through the table.

Writes ``OUT/NN-<case>.py``, ``OUT/results.json`` (one entry per finding: the case,
the store's verdict, the plain result: ok, wrong, raised, timed out or crashed) and
``OUT/results.md`` (the same as a Markdown table) and prints a line per finding. Ops without a plain rendering (hand-specified and metamorphic ops) are
listed as such; ``repro_cuda_findings.py`` holds their hand probes.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from kernelaudit.sweep.cases import Case
from kernelaudit.sweep.memory import allocator_settings
from kernelaudit.sweep.ops.plain import plain_check
from kernelaudit.sweep.report.run import load_run
from kernelaudit.sweep.rules_out import unjudged
from kernelaudit.verdict import Status


def _rank(r) -> int:
    """Silent first: wrong, then an out-of-bounds access, then other errors (explicit
    refusals are loud already)."""
    if r.status is Status.WRONG:
        return 0
    return 1 if "illegal memory access" in (r.verdict.message or "") else 2


def findings(store: str, ops: set[str] | None = None, per_dtype: bool = False) -> list:
    """The first wrong (else error) judged case of each (op, direction), or of each
    (op, dtype, direction) with ``per_dtype``; silent findings first (:func:`_rank`)."""
    run = load_run(store)
    first: dict[tuple, object] = {}
    for r in sorted(run.with_status(Status.WRONG, Status.ERROR), key=_rank):
        if unjudged(r.verdict.to_json()) or (ops and r.op not in ops):
            continue
        first.setdefault((r.op, r.dtype, r.direction) if per_dtype else (r.op, r.direction), r)
    return sorted(first.values(), key=lambda r: (_rank(r), r.op, r.direction, r.dtype))


def _out_of_memory(result: dict) -> bool:
    """Whether a run ran out of memory: its error, or (a program that crashed after the
    call, in its own checking) the last lines of its stderr."""
    return any("OutOfMemoryError" in str(result.get(k, "")) for k in ("error", "stderr_tail"))


def showed_fault(plain: dict) -> bool:
    """Whether a plain-torch run showed its finding (wrong, raised or crashed), so that a
    run under the guard can say whether the guard fixes it; a run that came out right, or
    out of memory, leaves the guard nothing to show."""
    return plain.get("result") in ("wrong", "raised", "crashed") and not _out_of_memory(plain)


def settled(entry: dict) -> bool:
    """Whether an earlier run's entry stands: it ran (or has no rendering) to a result
    that running again would repeat; a snippet not reached, timed out or out of memory
    (a larger GPU may run it) is not settled."""
    p = entry.get("plain", {})
    if p.get("result") in ("not run (time)", "timed out"):
        return False
    return not any(_out_of_memory(entry.get(k, {})) for k in ("plain", "guarded"))


def earlier(paths) -> dict[str, dict]:
    """The settled entries of earlier runs' ``results.json`` files, by case (a later file
    wins), each with ``done_in`` naming its file."""
    out: dict[str, dict] = {}
    for path in paths:
        opener = gzip.open if str(path).endswith(".gz") else open
        with opener(path, "rt") as f:
            for e in json.load(f):
                if settled(e):
                    out[e["case"]] = {**e, "done_in": str(path)}
    return out


#: The command prefix that runs a snippet under the guard (``--guarded``).
GUARDED = [sys.executable, "-m", "kernelaudit", "run", "--guard", "fix", "--"]


def snippet_env() -> dict:
    """The environment a snippet runs in: this one, with the CUDA allocator settings a sweep
    worker sets (:func:`kernelaudit.sweep.memory.allocator_settings`, expandable segments)
    as ``PYTORCH_CUDA_ALLOC_CONF``, so a snippet holds what its case held: without them the
    full grid's ``linalg.matrix_rank`` case of 171,798,528 matrices ran out of memory as a
    snippet on the H100 it had run on (10.9 GiB reserved but unallocated)."""
    env = dict(os.environ)
    if settings := allocator_settings():
        env["PYTORCH_CUDA_ALLOC_CONF"] = settings
    return env


def run_one(code: str, path: Path, timeout: float, prefix: list[str] = ()) -> dict:
    """Run the snippet ``code`` (written to ``path``) in its own process, after ``prefix``
    (:data:`GUARDED`: under the guard); its last JSON line, or why there is none."""
    path.write_text(code)
    t0 = time.perf_counter()
    try:
        p = subprocess.run([*prefix, sys.executable, str(path)], capture_output=True, text=True, timeout=timeout,
                           env=snippet_env())
    except subprocess.TimeoutExpired:
        return {"result": "timed out", "seconds": timeout}
    secs = round(time.perf_counter() - t0, 1)
    lines = [ln for ln in p.stdout.strip().splitlines() if ln.startswith("{")]
    # under the guard, its summary line: how many calls it fixed and refused
    counts = re.search(r"(\d+) fixed, (\d+) refused", p.stderr)
    guard = dict(zip(("fixed", "refused"), map(int, counts.groups()))) if counts else {}
    if p.returncode != 0 or not lines:
        err = p.stderr.strip().splitlines() or ["(no output)"]
        # the last line names the error; the lines before it say where (a guarded run's
        # crash is in the guard's code or the op's): both kept, the tail bounded
        return {"result": "crashed", "rc": p.returncode, "error": err[-1][:300],
                "stderr_tail": "\n".join(err[-25:])[-3000:], "seconds": secs, **guard}
    return {**json.loads(lines[-1]), "seconds": secs, **guard}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("store")
    ap.add_argument("--out", required=True, help="directory for the snippets and results.json")
    ap.add_argument("--ops", default="", help="comma-separated ops (default: every op with a finding)")
    ap.add_argument("--per-dtype", action="store_true", help="one case per op, dtype and direction "
                    "(default: per op and direction)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per snippet")
    ap.add_argument("--until", type=float, default=0.0,
                    help="stop starting snippets this many seconds after the start (0: no limit)")
    ap.add_argument("--guarded", action="store_true",
                    help="run each snippet again under `kernelaudit run --guard fix` (the shipped rules)")
    ap.add_argument("--done", action="append", default=[], metavar="RESULTS",
                    help="an earlier run's results.json(.gz): its settled findings are carried over, not run again")
    a = ap.parse_args(argv)
    for path in a.done:
        if not Path(path).is_file():
            ap.error(f"--done: no such file: {path}")
    done = earlier(a.done)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    results = []
    for i, r in enumerate(findings(a.store, set(filter(None, a.ops.split(","))) or None, a.per_dtype)):
        entry = done.get(r.id) or _run_finding(i, r, a, out, start)
        results.append(entry)
        print(line(entry), flush=True)
        (out / "results.json").write_text(json.dumps(results, indent=1))
        (out / "results.md").write_text(markdown(results))
    # again at the end, the silent findings first: a device call's output keeps its tail
    print(f"\n{len(results)} findings: " + ", ".join(
        f"{n} {k}" for k, n in sorted(Counter(e["plain"]["result"] for e in results).items())))
    for e in sorted(results, key=lambda e: e["store_verdict"] != "wrong"):
        if e["plain"]["result"] not in ("no plain rendering", "not run (time)"):
            print(line(e))
    return 0


def _run_finding(i: int, r, a, out: Path, start: float) -> dict:
    """Finding ``r`` (the ``i``-th) rendered as plain torch and run, bare and with
    ``a.guarded`` under the guard; its results entry."""
    entry = {"case": r.id, "store_verdict": r.status.value, "store_message": (r.verdict.message or "")[:300]}
    try:
        code = plain_check(Case.from_json(r.case), a.device, r.case.get("shapes"))
    except Exception as e:  # noqa: BLE001 - an op this torch does not know
        code, entry["why"] = None, f"{type(e).__name__}: {e}"
    if code is None:
        entry["plain"] = {"result": "no plain rendering"}
    elif a.until and time.monotonic() - start > a.until:
        entry["plain"] = {"result": "not run (time)"}
    else:
        name = f"{i:02d}-{re.sub(r'[^A-Za-z0-9_.+-]', '_', r.id)}.py"
        entry["snippet"] = name
        entry["plain"] = run_one(code, out / name, a.timeout)
        if a.guarded and showed_fault(entry["plain"]):
            entry["guarded"] = run_one(code, out / name, a.timeout, GUARDED)
    return entry


def line(e: dict) -> str:
    """One finding on one line: case, the store's verdict, plain torch's and what it said
    (an error's first line, or the first bad index)."""
    p = e["plain"]
    said = str(p.get("error") or p.get("first_bad") or "").strip().splitlines()
    guarded = f"guarded {e['guarded']['result']:10s} " if "guarded" in e else ""
    g_said = str(e.get("guarded", {}).get("error") or "").strip().splitlines()
    also = f" | guarded: {g_said[0][:110]}" if g_said else ""   # why the guarded run failed too
    return (f"{e['case']:60s} store {e['store_verdict']:6s} plain {p['result']:18s} {guarded}"
            f"{(said or [''])[0][:110]}{also}")


def markdown(results: list[dict]) -> str:
    """The results as a table for a results folder's README: case, the store's verdict,
    the plain-torch result and what it said."""
    guarded = any("guarded" in e for e in results)
    rows = ["| case | sweep | plain torch |" + (" under the guard |" if guarded else "") + " detail |",
            "|---|---|---|" + ("---|" if guarded else "") + "---|"]
    for e in results:
        p = e["plain"]
        detail = p.get("error") or (f"{p['wrong']} of {p['compared']} elements off, first at {p['first_bad']}, "
                                    f"largest difference {p['max_abs_diff']:.3g}" if p.get("wrong") else "")
        g = f" {e['guarded']['result'] if 'guarded' in e else '-'} |" if guarded else ""
        rows.append(f"| `{e['case']}` | {e['store_verdict']} | {p['result']} |{g} {detail.replace('|', '/')} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    sys.exit(main())
