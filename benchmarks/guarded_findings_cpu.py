"""Every finding of a sweep store, as its plain-torch program, under the guard, on the CPU.

Before device time is spent on ``repro_store_findings.py --guarded``: each finding (op,
dtype, direction; its first wrong or error case that is neither a timeout nor out of
memory) is rebuilt at a small size (``--scale``), rendered as the same plain-torch
program (the big call, then a reference of small calls on slices of the same tensors),
and run under ``kernelaudit run --guard fix`` with every shipped CUDA rule moved to the
CPU and scaled with the case (:func:`cpu_rules`). A program that does not finish, or
whose guard refused a call, shows a guard defect no GPU is needed to find (the float16
pools' bytes rules refusing the reference's slices, 2026-12-06); so does one the guard
leaves unfixed where a rule moved here should have fired (``unfixed``: ``should_fire``
names them). The kernels are the CPU's, so the answers say nothing about CUDA's faults.

    PYTHONPATH=src python benchmarks/guarded_findings_cpu.py runs/h200 --out /tmp/guarded   # about 5 min, 2 cores
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

from kernelaudit.guard.intercept import _kernel_named
from kernelaudit.guard.rules import known_faults
from kernelaudit.sweep.cases import GridSpec, grid
from kernelaudit.sweep.ops.plain import plain_check
from kernelaudit.thresholds import Thresholds

#: Rule kinds whose ``at_least`` counts elements or bytes: scaled with the case.
SCALED = ("numel", "bytes", "attention-scores")


def cpu_rules(path: Path, scale: int) -> list[dict]:
    """Write every shipped CUDA rule that names aten entry points, and every rule of the
    matmul engine, as a CPU rule, its element or byte count scaled from 2^31 to the
    ``scale``'s; the rules written."""
    f = Thresholds(scale).t31 / 2**31
    rules = []
    for r in known_faults():
        if r.device != "cuda" or not (r.aten or r.engine) or not isinstance(r.when.get("at_least"), int):
            continue
        when = dict(r.when)
        if when["kind"] in SCALED:
            when["at_least"] = max(2, int(when["at_least"] * f))
        rule = {"name": r.name, "op": r.op, "device": "cpu", "effect": r.effect, "when": when,
                "aten": list(r.aten), "action": r.action, "dtypes": list(r.dtypes)}
        if r.split_dim is not None:
            rule["split_dim"] = r.split_dim
        rule["provenance"] = {"cases": list((r.provenance or {}).get("cases") or ())}
        rules.append(rule)
    path.write_text(json.dumps({"schema": 1, "rules": rules}))
    return rules


#: Rule kind -> the unit of a case measure it compares with.
UNIT = {"numel": "elements", "bytes": "bytes"}


def should_fire(c: dict, rules: list[dict], small: dict | None = None) -> list[str]:
    """The CPU rules that must fix something in finding ``c``'s program: rules of its op
    (by name, or a case of their provenance) and dtype whose size this scaling moved
    (:data:`SCALED`) and whose entry points this CPU screens (a kernel of their own here,
    or the engine's matmul ops). A program they leave unfixed shows a rule that does not
    reach its op's call (``_chunk_cat``'s and ``addmm``'s, 2026-12-06). With ``small``
    (the case rebuilt at the small scale, as JSON), a rule whose scaled threshold that
    case's measure falls short of is not expected (rounding: slogdet's 2^31 - 8 matrices
    meet their rule at full size, one short of it at scale 16)."""
    out = []
    for r in rules:
        ops = {r["op"]} | {k.split("/")[0] for k in r["provenance"]["cases"]}
        if c["op"] not in ops or (r["dtypes"] and c["dtype"] not in r["dtypes"]) or r["when"]["kind"] not in SCALED:
            continue
        if small and UNIT.get(r["when"]["kind"]) == small.get("unit") and small.get("measure", 0) < r["when"]["at_least"]:
            continue
        # the guard's screens register where this is so (intercept._Screens)
        if not r["aten"] or all(_kernel_named(e, "CPU") is not None for e in r["aten"]):
            out.append(r["name"])
    return out


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


def small_program(c: dict, scale: int) -> tuple[str | None, str, dict | None]:
    """The plain-torch program of case ``c`` rebuilt at ``scale`` (or None and why not),
    and that case as JSON."""
    cases = grid(GridSpec(ops=(c["op"],), dtypes=(c["dtype"],), directions=(c["direction"],), layouts=(c["layout"],),
                          thresholds=("2^31", "2^32", "2*2^32"), positions=("below", "above"),
                          axes=(c.get("axis", "elements"),), scale=scale))
    case = next((k for k in cases if k.id == c["id"]), None)
    if case is None:
        return None, "no case of this id at the small scale", None
    code = plain_check(case, device="cpu", chunk_elements=2**8)
    return code, "" if code else "no plain rendering", case.to_json()


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
    moved = cpu_rules(rules, a.scale)
    print(f"{len(moved)} shipped CUDA rules as CPU rules at scale {a.scale}", flush=True)

    def one(c: dict) -> dict:
        try:
            code, why, small = small_program(c, a.scale)
        except Exception as e:  # noqa: BLE001 - an op this torch builds differently
            code, why, small = None, f"{type(e).__name__}: {e}"[:300], None
        if code is None:
            return {"case": c["id"], "result": "not run", "why": why}
        script = a.out / (re.sub(r"[^A-Za-z0-9_.+-]", "_", c["id"]) + ".py")
        script.write_text(code)
        got = {"case": c["id"], **run_guarded(script, rules, a.timeout), "should_fire": should_fire(c, moved, small)}
        if got["result"] == "ok" and got["should_fire"] and not got.get("fixed"):
            got["result"] = "unfixed"   # right only because the CPU's kernel has no such fault
        return got

    results = []
    with cf.ThreadPoolExecutor(a.jobs) as ex:
        for e in ex.map(one, findings(a.store)):
            results.append(e)
            print(f"{e['case']:64s} {e['result']:10s} fixed {e.get('fixed', '-')} refused {e.get('refused', '-')} "
                  f"{e.get('error') or e.get('why') or ''}", flush=True)
            (a.out / "results.json").write_text(json.dumps(results, indent=1))
    bad = [e for e in results if e["result"] in ("crashed", "timed out", "unfixed") or e.get("refused")]
    print(f"\n{len(results)} findings: {len(bad)} crashed, timed out, refused, or left unfixed by a rule "
          "that should fire under the guard")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
