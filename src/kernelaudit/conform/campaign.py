"""`kernelaudit conform int8`: parts 2-4 of the conformance story run on one device.

1. false rejections: the correct implementations through every check (goal: zero);
2. the blindness table: every fault planted in every implementation, the checks that
   see it and those that do not;
3. power-of-two requantization: bit-identity of the reference and every implementation
   in every scale order, and the count of differing outputs with free scales;
4. the accuracy cost of power-of-two scales against free ones.

The result is one JSON-ready dict (:func:`run_int8`); :mod:`.report` renders it.
"""

from __future__ import annotations

import datetime
import platform
import time
from dataclasses import asdict

import torch

from kernelaudit import config

from .cases import Case, suite
from .conformance import IMPLEMENTATIONS, blindness, false_rejections, run_case, supports
from .pow2 import accuracy_cost, agreement

CPU_SHAPES = ((32, 48, 64),)
DEVICE_SHAPES = ((100, 200, 320), (256, 384, 1024))  # one tile config on CUDA: fewer compiles


def environment(device: str) -> dict:
    from importlib.metadata import version  # not `import triton`: it must load after the interpreter switch

    env = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "torch": torch.__version__, "triton": version("triton"), "python": platform.python_version(),
           "device": device}
    if device.startswith("cuda"):
        env["device_name"] = torch.cuda.get_device_name()
        env["cuda"] = torch.version.cuda
    else:
        env["device_name"] = "cpu (Triton interpreter)"
    return env


def run_int8(device: str = "cpu", *, shapes=None, impls=IMPLEMENTATIONS, progress=None) -> dict:
    """Every part of the int8 conformance campaign on ``device``; returns the record."""
    config.use_interpreter_without_cuda()  # before anything (torchao too) imports triton
    shapes = shapes or (CPU_SHAPES if device == "cpu" else DEVICE_SHAPES)
    say = progress or (lambda msg: None)
    t0 = time.time()
    cases = suite(shapes)
    say(f"{len(cases)} cases, implementations {', '.join(impls)}, device {device}")
    result = {"env": environment(device), "shapes": [list(s) for s in shapes], "implementations": list(impls),
              "cases": len(cases)}
    impls, result["not_run"] = runnable(impls, cases, device)
    result["false_rejections"] = false_rejections(cases, impls, device=device)
    small = [c for c in cases if c.m * c.n <= 4096]  # the exact reference is rational arithmetic: small only
    result["false_rejections_vs_exact"] = false_rejections(small, impls, device=device, against="exact")
    result["cases_vs_exact"] = len(small)
    say("false rejections counted")
    own = tuple(i for i in impls if i in IMPLEMENTATIONS)  # faults are planted in the project's own only
    result["blindness"] = [r.as_dict() for r in blindness(cases, own, device=device, progress=say)]
    say("blindness table built")
    result["pow2"] = pow2_section(cases, own, device)
    say("power-of-two agreement checked")
    result["seconds"] = round(time.time() - t0, 1)
    return result


def runnable(impls, cases: list[Case], device) -> tuple[tuple[str, ...], dict[str, str]]:
    """The implementations that run here; a third-party one that cannot (not installed,
    built for another torch) is recorded with the reason instead of ending the run."""
    keep, skipped = [], {}
    for impl in impls:
        if impl in IMPLEMENTATIONS:
            keep.append(impl)
            continue
        case = next((c for c in cases if supports(impl, c)), None)
        try:
            run_case(case, impl, device=device)
            keep.append(impl)
        except Exception as e:  # recorded, shown in the report
            skipped[impl] = f"{type(e).__name__}: {e}"[:300]
    return tuple(keep), skipped


def pow2_section(cases: list[Case], impls, device) -> dict:
    rows = []
    for c in cases:
        a = agreement(c, impls, device=device, exact_too=c.m * c.n <= 4096)
        rows.append({"case": c.label(), "scales": c.scales, "out": c.recipe.out, "outputs": a.outputs,
                     "disagreeing": [list(d) for d in a.disagreeing]})
    free = [r for r in rows if r["scales"] == "free"]
    pow2 = [r for r in rows if r["scales"] == "pow2"]
    costs = [asdict(accuracy_cost(c)) for c in cases if c.scales == "free" and c.recipe.out != "int8"]
    return {"cases": rows,
            "pow2_cases_bit_identical": sum(not r["disagreeing"] for r in pow2), "pow2_cases": len(pow2),
            "free_cases_bit_identical": sum(not r["disagreeing"] for r in free), "free_cases": len(free),
            "free_differing_elements": sum(d[2] for r in free for d in r["disagreeing"]),
            "accuracy_cost": costs}


def verdict(result: dict) -> int:
    """Exit code: 0 when no correct implementation is rejected, every fault changes some
    case's output and bit_exact catches it there, and power-of-two scales give
    bit-identical outputs; 1 otherwise."""
    fr = any(v["bit_exact"] for v in result["false_rejections"].values())
    missed = any(not r["changed_cases"] or r["caught"]["bit_exact"] < r["changed_cases"] for r in result["blindness"])
    p = result["pow2"]
    return 1 if fr or missed or p["pow2_cases_bit_identical"] != p["pow2_cases"] else 0
