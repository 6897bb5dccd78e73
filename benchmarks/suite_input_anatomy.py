"""Why a suite-candidate input kills a mutant or not: the derived bound and the mutant's error
per input (issue 17, the misses of held-out suites).

For each subject, every suite-candidate input (:func:`~kernelaudit.zoo.oracles.suite.candidate_specs`,
as the campaign builds them) is prepared once; for each the script prints the bound's size
relative to the reference (``rms(allowed) / rms(ref)``, and the largest ``allowed / |ref|``),
the evaluations the derived model used with each one's largest deviation from the float64
reference relative to ``max |ref|``, then for every mutant named: its verdict on that input
and ``err / bound`` (``value`` of the verdict). An input whose bound is as large as the output
cannot kill any mutant that keeps the output's magnitude.

    PYTHONPATH=src python benchmarks/suite_input_anatomy.py --device cuda \\
        --kernelbench .kb/KernelBench kb/level3/22_EfficientNetB0:int-constant-plus-one:11 ...

Arguments are mutant ids (``<subject>:<operator>:<site>``) or subject ids (the clean subject
only). Writes JSON to ``--out`` too.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def _rel(a, ref) -> float:  # noqa: ANN001
    """max |a - ref| / max |ref| (NaN in ``a`` counts as infinitely far)."""
    if not ref.numel():
        return 0.0
    den = float(ref.abs().max())
    d = float((a.double() - ref.double()).abs().nan_to_num(float("inf")).max())
    return d / den if den else (0.0 if d == 0 else float("inf"))


def input_anatomy(case) -> dict:  # noqa: ANN001
    """The bound's size and the derived model's evaluations for one prepared input."""
    from kernelaudit.zoo.oracles import derived

    ref = [r.detach().double().cpu() for r in case.reference()]
    out: dict = {"outputs": []}
    try:
        dm = derived.derive(case)
    except Exception as exc:  # noqa: BLE001 - no derived model: allclose judges this input
        out["derive_error"] = f"{type(exc).__name__}: {exc}"[:300]
        return out
    out.update(multilinear=dm.multilinear, length=dm.length, alternatives=dm.alternatives, notes=dm.notes[:6])
    for k, r in enumerate(ref):
        a = dm.allowed[k] if k < len(dm.allowed) else None
        row = {"shape": list(r.shape), "rms_ref": float(r.pow(2).mean().sqrt()) if r.numel() else 0.0}
        if a is None:
            row["allowed"] = "exact"
        else:
            a = a.double().cpu()
            row["rms_allowed_over_rms_ref"] = float(a.pow(2).mean().sqrt()) / max(row["rms_ref"], 1e-300)
            row["max_allowed_over_abs_ref"] = float((a / r.abs().clamp_min(1e-300)).max())
        out["outputs"].append(row)
    try:
        evals = derived.alternatives(case)
        out["evaluation_rel_dev"] = {name: [_rel(o.detach().cpu(), r) for o, r in zip(outs, ref)]
                                     for name, outs in evals.items()}
    except Exception as exc:  # noqa: BLE001
        out["evaluation_error"] = f"{type(exc).__name__}: {exc}"[:300]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("ids", nargs="+", help="mutant ids (subject:operator:site) or subject ids")
    p.add_argument("--device", default="cpu")
    p.add_argument("--kernelbench", type=Path, default=None)
    p.add_argument("--full-shapes", action="store_true", help="the problems' own shapes (default: small)")
    p.add_argument("--out", type=Path)
    a = p.parse_args(argv)

    import torch

    from kernelaudit.errors import InvalidArgument
    from kernelaudit.verdict import Status
    from kernelaudit.zoo.oracles import Subject
    from kernelaudit.zoo.oracles.suite import PoisonedSubject
    from kernelaudit.zoo.mutate.generate import Mutant, materialise
    from kernelaudit.zoo.mutate.subjects import select_subjects
    from kernelaudit.zoo.mutate.worker import suite_cases
    from kernelaudit.zoo.problems import load_candidate, load_problem

    by_subject: dict[str, list[str]] = {}
    for i in a.ids:
        sub = i.rsplit(":", 2)[0] if i.count(":") >= 2 else i
        by_subject.setdefault(sub, [])
        if sub != i:
            by_subject[sub].append(i)
    result = {}
    scratch = Path("runs/anatomy-scratch")
    scratch.mkdir(parents=True, exist_ok=True)
    for sid, mids in by_subject.items():
        try:
            (subject,) = select_subjects([sid], kernelbench=a.kernelbench)
        except (InvalidArgument, ValueError) as exc:
            print(f"{sid}: {exc}", file=sys.stderr)
            return 2
        problem = load_problem(subject.problem_path)
        t0 = time.perf_counter()
        cases = suite_cases(problem, a.device, not a.full_shapes)
        entry = {"inputs": {}, "mutants": {}, "prepare_s": round(time.perf_counter() - t0, 2)}
        for spec, case, comp in cases:
            entry["inputs"][spec.label] = input_anatomy(case)
            o = entry["inputs"][spec.label]["outputs"]
            ev = entry["inputs"][spec.label].get("evaluation_rel_dev", {})
            print(f"{sid} | {spec.label}\n    bound rms/ref rms {[x.get('rms_allowed_over_rms_ref') for x in o]}"
                  f"  evaluations {({k: [f'{v:.2g}' for v in vs] for k, vs in ev.items()})}", flush=True)
        for n, mid in enumerate(mids):
            m = Mutant.parse(mid)
            mat = materialise(subject, m)
            path = scratch / f"{sid.replace('/', '_')}_{n}.py"
            path.write_text(mat.source)
            subject_run = PoisonedSubject(Subject(load_candidate(path)))  # as the campaign runs it
            ratios, kills = {}, {}
            for spec, case, comp in cases:
                try:
                    inputs = [x.clone() if isinstance(x, torch.Tensor) else x for x in case.inputs]
                    v = comp.compare(case, subject_run(case, inputs))
                    ratios[spec.label] = [v.status.name, v.value]
                    if v.status is not Status.SKIPPED:  # the campaign's kill matrix (worker.judge_inputs)
                        kills[spec.label] = int(v.status is not Status.OK)
                except Exception as exc:  # noqa: BLE001 - raising on an input is a kill there
                    ratios[spec.label] = ["RAISED", f"{type(exc).__name__}"]
                    kills[spec.label] = 1
            entry["mutants"][mid] = {"before": mat.before, "after": mat.after, "kills": kills, "verdicts": ratios}
            print(f"{mid}: {mat.before.strip()!r} -> {mat.after.strip()!r}")
            for lab, (st, val) in ratios.items():
                print(f"    {st:7s} err/bound {val if isinstance(val, str) else f'{val:.3g}' if val is not None else '-':>9}  {lab}")
        result[sid] = entry
    if a.out:
        a.out.write_text(json.dumps(result, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
