"""kernelaudit conform in one page: declare a recipe, check an implementation bit for bit,
plant a fault that one bf16 spacing cannot see, make two scale orders agree.

    PYTHONPATH=src python examples/conform_quickstart.py      # CPU: Triton runs interpreted
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from kernelaudit import config  # noqa: E402

config.use_interpreter_without_cuda()

import torch  # noqa: E402

import kernelaudit.conform as kc  # noqa: E402
from kernelaudit.conform.conformance import judge, run_case  # noqa: E402


def main() -> None:
    recipe = kc.Recipe(out="bf16", scale_order="act_first", bias="before_cast")
    case = kc.Case(32, 48, 64, recipe, seed=1)
    dev = "cuda" if torch.cuda.is_available() else "cpu"

    got, ref = run_case(case, "triton", device=dev)  # the project's kernel vs the exact reference
    print(judge(got, ref, case, "triton").explain())

    faulty = {"bias_in_bf16": case, "scale_order_swapped": kc.Case(32, 48, 64, recipe.but(out="fp32"), seed=1),
              "truncating_requant": kc.Case(32, 48, 64, recipe.but(out="int8"), seed=1)}
    for fault, c in faulty.items():  # planted faults: which checks see them?
        got, ref = run_case(c, "triton", device=dev, fault=fault)
        seen = {n: not kc.CHECKS[n].passes(got, ref) for n in ("allclose_1e-1", "one_bf16_spacing", "bit_exact")}
        print(f"{fault:20} ({c.recipe.out}): " + ", ".join(f"{n} {'SEES it' if v else 'blind'}" for n, v in seen.items()))
    print(kc.compare_ulp(got, ref, worst=2).summary())

    for scales in ("free", "pow2"):  # every implementation in every scale order, bit for bit?
        a = kc.agreement(kc.Case(32, 48, 64, recipe.but(out="fp32", bias="none"), scales=scales, seed=2),
                         device=dev)
        print(f"{scales:>4} scales: {a.outputs} outputs, bit-identical: {a.bit_identical}")


if __name__ == "__main__":
    main()
