"""How many torch ops one fused matmul judgement launches, counted on the CPU.

Runs the sweep's matmul judgement (``_common.whole_check``, the fused path a GPU takes,
here under the Triton interpreter) once on a small bf16 bmm case and counts the aten
ops it dispatches with a ``TorchDispatchMode``. On a GPU every compute op is one small
kernel launch after the projection kernel; the interpreter's own tensor traffic
(``set_``, ``empty``, ``copy_``, views) is left out of the count.

Usage: python benchmarks/judge_ops.py [--fused-summary 0|1]
"""

from __future__ import annotations

import argparse
import collections
import os

#: ops that are views, allocations or the interpreter's copies, not kernels on a GPU
NOT_KERNELS = {"set_", "empty", "select", "slice", "new_empty", "copy_", "unsqueeze", "as_strided", "view",
               "_local_scalar_dense"}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fused-summary", choices=("0", "1"), default="1",
                    help="summarize by the one-launch Triton kernel (what CUDA runs) or by torch ops")
    args = ap.parse_args()
    os.environ.update(KERNELAUDIT_FUSED_FREIVALDS="1", TRITON_INTERPRET="1",
                      KERNELAUDIT_FUSED_SUMMARY=args.fused_summary)
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from _common import whole_check  # benchmarks/ is on sys.path when a script runs

    from kernelaudit.sweep.cases import Case, batch_for
    from kernelaudit.sweep.judge.execution import run_op
    from kernelaudit.thresholds import Thresholds

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = collections.Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops[func.overloadpacket.__name__] += 1
            return func(*args, **(kwargs or {}))

    dev = torch.device("cpu")
    B = batch_for(Thresholds(16).t32, 16 * 16, "above")
    case = Case("bmm", "bfloat16", "contig", "out", "2^32", "above", B, "fwd", 0, 16)
    placed, outs, _, _ = run_op(case, dev, "none")
    whole_check(case, placed, outs[0], dev)  # caches and compiles
    with Count() as m:
        whole_check(case, placed, outs[0], dev)
    kernels = {k: v for k, v in m.ops.items() if k not in NOT_KERNELS}
    print(f"fused summary {args.fused_summary}: {sum(kernels.values())} compute ops in one judgement "
          f"(projection and spot kernels are Triton, not counted): {dict(sorted(kernels.items()))}")


if __name__ == "__main__":
    main()
