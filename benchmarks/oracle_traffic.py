"""Memory traffic of ``strongest`` against the official check, counted per aten call: a
device-independent stand-in for their cost on a GPU, where both are bound by memory.

On the H200 the official check of a KernelBench problem with small inputs and a large
output (L1 7 and 9: 4 M input elements, 1 G output elements) costs little CPU input
generation, so the ratio of the two checks is the ratio of the passes they make over the
outputs. Measured on the CPU under a ``TorchDispatchMode``: every aten call that is not a
view adds the bytes of its tensor arguments and results that hold at least 1/16 of the
output's elements (the big passes; the small shape's extra cases fall below). Reported
in units of one read of the output in float32 ("passes").

    python benchmarks/oracle_traffic.py --mid 64 --problems 7,9,1,60 --out traffic.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parent))

import oracle_cost_kernelbench as ock  # noqa: E402

#: aten ops that move no data (views and aliases).
VIEWS = frozenset({"detach", "lift_fresh", "alias", "_unsafe_view", "view", "slice", "as_strided", "expand",
                   "t", "transpose", "unsqueeze", "select", "squeeze", "permute", "reshape"})


class Traffic(TorchDispatchMode):
    """Bytes of the big tensors each non-view aten call reads or writes."""

    def __init__(self, big: int) -> None:
        super().__init__()
        self.big, self.bytes = big, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        out = func(*args, **(kwargs or {}))
        if func.is_view or func.__name__.split(".")[0] in VIEWS:
            return out
        seen = [a for a in (*args, *(kwargs or {}).values()) if isinstance(a, torch.Tensor)]
        seen += [o for o in (out if isinstance(out, (tuple, list)) else [out]) if isinstance(o, torch.Tensor)]
        self.bytes += sum(t.numel() * t.element_size() for t in seen if t.numel() >= self.big)
        return out


def measure(path: Path, mib: int) -> dict:
    """Passes of the official check and of ``strongest`` on ``path``'s own ``Model`` at ``--mid``."""
    from kernelaudit.zoo.oracles import Subject, make_oracle
    from kernelaudit.zoo.problems import ProblemCase, load_problem

    problem = load_problem(path)
    shapes = ock.mid_shapes(problem, mib)
    with torch.device("meta"):
        out = problem.Model(*problem.get_init_inputs(shapes))(*problem.get_inputs(shapes))
    numel = sum(o.numel() for o in (out if isinstance(out, (tuple, list)) else [out]))
    row = {"problem": path.stem, "shapes": shapes, "output_elements": numel}
    for name, oracle in (("kernelbench", "kernelbench"), ("strongest", ock.STRONGEST)):
        problem = load_problem(path)
        case = ProblemCase.make(problem, device="cpu", shapes=shapes)
        counter = Traffic(max(1, numel // 16))
        with counter:
            v = make_oracle(oracle).judge(case, Subject(ock._reference_as_candidate(problem)))
        row[f"{name}_passes"] = round(counter.bytes / (4 * numel), 1)
        row[f"{name}_status"] = v.status.value
    row["ratio"] = round(row["strongest_passes"] / row["kernelbench_passes"], 2)
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mid", type=int, default=64, metavar="MIB", help="the shape (see oracle_cost_kernelbench --mid)")
    ap.add_argument("--problems", default="7,9,1,60", help="comma-separated level 1 numbers or file stems")
    ap.add_argument("--root", type=Path, default=None, help="KernelBench as published (holding level1)")
    ap.add_argument("--out", type=Path, default=None, help="JSON rows")
    args = ap.parse_args(argv)
    level1 = (args.root or ock._default_root()) / "level1"
    if not level1.is_dir():
        print(f"{level1}: not found (KernelBench as published; set --root)", file=sys.stderr)
        return 3
    rows = []
    for item in args.problems.split(","):
        path = ock.level1_problem(level1, item)
        if path is None:
            print(f"Cannot find problem {item!r} in {level1}", file=sys.stderr)
            return 2
        rows.append(measure(path, args.mid))
        print(json.dumps(rows[-1]), flush=True)
    if args.out:
        args.out.write_text(json.dumps({"mid_mib": args.mid, "torch": torch.__version__, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
