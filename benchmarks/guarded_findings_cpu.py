"""Every finding of a sweep store, as its plain-torch program, under the guard, on the CPU.

Before device time is spent on ``repro_store_findings.py --guarded``: each finding (op,
dtype, direction; its first wrong or error case that is neither a timeout nor out of
memory) is rebuilt at a small size (``--scale``), rendered as the same plain-torch
program (the big call, then a reference of small calls on slices of the same tensors),
and run under ``kernelaudit run --guard fix`` with every shipped CUDA rule moved to the
CPU and scaled with the case (:func:`cpu_rules`). A program that does not finish, or
whose guard refused a call, shows a guard defect no GPU is needed to find (the float16
pools' bytes rules refusing the reference's slices, 2026-12-06). The kernels are the
CPU's, so the answers say nothing about CUDA's faults.

    PYTHONPATH=src python benchmarks/guarded_findings_cpu.py runs/h200 --out /tmp/guarded   # about 4 min, 2 cores
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import repro_store_findings as FINDINGS  # noqa: E402 - the plain programs' runner, beside this script

from kernelaudit.guard.rules import known_faults
from kernelaudit.sweep.cases import GridSpec, grid
from kernelaudit.sweep.ops.plain import plain_check
from kernelaudit.thresholds import Thresholds

#: Rule kinds whose ``at_least`` counts elements or bytes: scaled with the case.
SCALED = ("numel", "bytes", "attention-scores")


def cpu_rules(path: Path, scale: int) -> int:
    """Write every shipped CUDA rule that names aten entry points as a CPU rule, its
    element or byte count scaled from 2^31 to the ``scale``'s; how many."""
    f = Thresholds(scale).t31 / 2**31
    rules = []
    for r in known_faults():
        if r.device != "cuda" or not r.aten or not isinstance(r.when.get("at_least"), int):
            continue
        when = dict(r.when)
        if when["kind"] in SCALED:
            when["at_least"] = max(2, int(when["at_least"] * f))
        rule = {"name": r.name, "op": r.op, "device": "cpu", "effect": r.effect, "when": when,
                "aten": list(r.aten), "action": r.action, "dtypes": list(r.dtypes)}
        if r.split_dim is not None:
            rule["split_dim"] = r.split_dim
        rules.append(rule)
    path.write_text(json.dumps({"schema": 1, "rules": rules}))
    return len(rules)


def run_guarded(script: Path, rules: Path, timeout: float) -> dict:
    """``script`` under ``kernelaudit run --guard fix --rules rules``: its result line and
    the guard's counts (``repro_store_findings.run_one``)."""
    prefix = [*FINDINGS.GUARDED[:-1], "--rules", str(rules), "--"]
    return FINDINGS.run_one(script.read_text(), script, timeout, prefix)


def findings(store: str) -> list[dict]:
    """The first finding case of each (op, dtype, direction) in ``store``."""
    from kernelaudit.sweep.report import load_run

    seen: dict[tuple, dict] = {}
    for r in load_run(store).records:
        msg = r.verdict.message or ""
        unjudged = "timed out" in msg or "out of memory" in msg.lower()
        if r.verdict.status.value in ("wrong", "error") and not unjudged:
            seen.setdefault((r.case["op"], r.case["dtype"], r.case["direction"]), r.case)
    return [seen[k] for k in sorted(seen)]


def small_program(c: dict, scale: int) -> tuple[str | None, str]:
    """The plain-torch program of case ``c`` rebuilt at ``scale``, or None and why not."""
    cases = grid(GridSpec(ops=(c["op"],), dtypes=(c["dtype"],), directions=(c["direction"],), layouts=(c["layout"],),
                          thresholds=("2^31", "2^32", "2*2^32"), positions=("below", "above"),
                          axes=(c.get("axis", "elements"),), scale=scale))
    case = next((k for k in cases if k.id == c["id"]), None)
    if case is None:
        return None, "no case of this id at the small scale"
    code = plain_check(case, device="cpu", chunk_elements=2**8)
    return code, "" if code else "no plain rendering"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("store")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--scale", type=int, default=16, help="log2 of the scaled 2^32 (default 16)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per program")
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    rules = a.out / "rules.json"
    print(f"{cpu_rules(rules, a.scale)} shipped CUDA rules as CPU rules at scale {a.scale}", flush=True)

    def one(c: dict) -> dict:
        try:
            code, why = small_program(c, a.scale)
        except Exception as e:  # noqa: BLE001 - an op this torch builds differently
            code, why = None, f"{type(e).__name__}: {e}"[:300]
        if code is None:
            return {"case": c["id"], "result": "not run", "why": why}
        script = a.out / (re.sub(r"[^A-Za-z0-9_.+-]", "_", c["id"]) + ".py")
        script.write_text(code)
        return {"case": c["id"], **run_guarded(script, rules, a.timeout)}

    results = []
    with cf.ThreadPoolExecutor(a.jobs) as ex:
        for e in ex.map(one, findings(a.store)):
            results.append(e)
            print(f"{e['case']:64s} {e['result']:10s} fixed {e.get('fixed', '-')} refused {e.get('refused', '-')} "
                  f"{e.get('error') or e.get('why') or ''}", flush=True)
            (a.out / "results.json").write_text(json.dumps(results, indent=1))
    bad = [e for e in results if e["result"] in ("crashed", "timed out") or e.get("refused")]
    print(f"\n{len(results)} findings: {len(bad)} crashed, timed out or refused under the guard")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
