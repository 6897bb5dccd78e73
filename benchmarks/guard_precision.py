"""How many correct calls the study's blanket rule blocks that the ``mps`` policy lets through.

On the sweep's grid of matmul-family cases (bmm, baddbmm, mm, addmm, matmul 3-D/4-D,
einsum, linear, SDPA math path, eager attention; fp32 and fp16; every layout; sizes
below, at and above 2^31, 2^32, 2*2^32; forward and backward) at the real thresholds,
from metadata alone (meta tensors: no data, runs in seconds on a laptop):

* the fault rules say which cases are wrong (silently, rules A and C) or raise (B);
* the study's guard refuses a case if any tensor of any op has >= 2^32 elements;
* our policy flags a case if any matmul-family call breaks rule A, B or C.

    python benchmarks/guard_precision.py --out benchmarks/results/guard_precision.json
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from kernelaudit.sweep.cases import GridSpec, grid
from kernelaudit.guard.proof import precision

from _common import emit  # benchmarks/ is on sys.path when a script runs

MATMUL_OPS = ("bmm", "baddbmm", "mm", "addmm", "matmul3d", "matmul4d", "einsum", "linear", "sdpa", "attention")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scale", type=int, default=32)
    p.add_argument("--dtypes", default="float32,float16")
    p.add_argument("--out", type=Path, default=None)
    a = p.parse_args(argv)
    cases = grid(GridSpec(ops=MATMUL_OPS, dtypes=tuple(a.dtypes.split(",")), scale=a.scale))
    t = time.perf_counter()
    res = {"benchmark": "guard_precision", "scale": a.scale, "ops": MATMUL_OPS, "dtypes": a.dtypes.split(","),
           **precision(cases).to_json(), "seconds": round(time.perf_counter() - t, 2), "torch": torch.__version__,
           "date": time.strftime("%Y-%m-%d", time.gmtime())}
    emit(res, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
