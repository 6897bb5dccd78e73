"""Peak memory of the checker itself, as a multiple of the problem's inputs + outputs.

On the H200, ``--oracle strongest`` ran out of GPU memory at KernelBench's own shapes
(level 1 problems 19-35: several float64 copies of 6-12 GB tensors resident at once).
This benchmark shows the same on the CPU with a stand-in: an elementwise problem
(``sigmoid``, not multilinear) and a multilinear one (``x * 3.5``, like level 1's
matrix-scalar multiplication) of ``--numel`` fp32 elements, the reference itself as
the candidate, each oracle in a fresh subprocess. It reports the peak resident size
(``ru_maxrss``) above the process's size just before the check (torch, kernelaudit and
the problem loaded), divided by the bytes of inputs + outputs::

    python benchmarks/checker_memory.py                       # this checkout
    python benchmarks/checker_memory.py --src /tmp/old/src    # another checkout's src/, e.g. before a change
    python benchmarks/checker_memory.py --numel 33554432 --oracles bound,tamper,strongest
    python benchmarks/checker_memory.py --device cuda --numel 1610612736   # L1 19's size on the H200

Freed large tensors go back to the OS at once (glibc serves them with mmap), so the
peak resident size is the checker's high-water mark. ``--device cuda`` reports
``torch.cuda.max_memory_allocated`` above what was allocated before the check.
At small sizes fixed costs (oneDNN scratch, thread pools, the chunks of
:data:`~kernelaudit.zoo.oracles.compare.CHUNK_ELEMENTS`) inflate the factor.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PROBLEMS = {
    "sigmoid": "torch.sigmoid(x)",
    "scale": "x * 3.5",
}

PROBLEM = """
import torch
import torch.nn as nn

batch_size = {batch}
dim = {dim}


class Model(nn.Module):
    def forward(self, x):
        return {expr}


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
"""

CHILD = """
import json, resource, sys, time
import torch
from kernelaudit.zoo.check import run_check
from kernelaudit.zoo.problems import load_problem
torch.set_num_threads(int(sys.argv[4]))
device = sys.argv[5]
load_problem(sys.argv[1])
cuda = device.startswith("cuda")
if cuda:
    torch.zeros(1, device=device)  # the context first: not the checker's memory
    torch.cuda.reset_peak_memory_stats()
base = torch.cuda.memory_allocated() / 2**20 if cuda else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
t = time.perf_counter()
v = run_check(sys.argv[1], sys.argv[2], sys.argv[3], device=device).verdict
peak = torch.cuda.max_memory_allocated() / 2**20 if cuda else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"status": v.status.value, "message": v.message[:300], "seconds": time.perf_counter() - t,
                  "base_mb": base, "peak_mb": peak, "measure": "cuda max_memory_allocated" if cuda else "ru_maxrss"}))
"""


def measure(src: Path, problem: Path, candidate: Path, oracle: str, threads: int, device: str = "cpu") -> dict:
    """One check in a fresh process with ``src`` first on the path: its peak memory and verdict."""
    env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run([sys.executable, "-c", CHILD, str(problem), str(candidate), oracle, str(threads), device],
                          capture_output=True, text=True, env=env, timeout=3600)
    if proc.returncode != 0:
        return {"status": "failed", "message": proc.stderr[-500:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", type=Path, default=ROOT / "src", help="the src/ directory to measure (default: this one)")
    ap.add_argument("--numel", type=int, default=32 * 2**20, help="elements of the input (default 32 Mi: 128 MiB fp32)")
    ap.add_argument("--oracles", default="bound,tamper,strongest", help="comma list, each measured on its own")
    ap.add_argument("--problems", default=",".join(PROBLEMS), help=f"comma list of {', '.join(PROBLEMS)}")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu", help="cpu (peak resident size) or cuda (max_memory_allocated)")
    ap.add_argument("--out", type=Path, default=None, help="also append the rows as JSON lines here")
    args = ap.parse_args(argv)
    dim = 4096
    batch = max(2, args.numel // dim)
    io_mb = 2 * batch * dim * 4 / 2**20  # fp32 input + fp32 output
    print(f"src {args.src}; inputs + outputs {io_mb:.0f} MiB ({batch} x {dim} fp32 in, same out)")
    print(f"{'problem':8} {'oracle':10} {'status':8} {'seconds':>8} {'peak-base MiB':>14} {'x (in+out)':>10}")
    with tempfile.TemporaryDirectory(prefix="kernelaudit-mem-") as tmp:
        for name in args.problems.split(","):
            problem = Path(tmp) / f"{name}.py"
            problem.write_text(textwrap.dedent(PROBLEM.format(batch=batch, dim=dim, expr=PROBLEMS[name])))
            candidate = Path(tmp) / f"{name}_ref.py"
            candidate.write_text(problem.read_text().replace("class Model(", "class ModelNew("))
            for oracle in args.oracles.split(","):
                r = measure(args.src, problem, candidate, oracle, args.threads, args.device)
                held = r.get("peak_mb", 0.0) - r.get("base_mb", 0.0)
                row = {"problem": name, "oracle": oracle, "src": str(args.src), "numel": batch * dim,
                       "io_mb": io_mb, "held_mb": held, "factor": held / io_mb, **r}
                print(f"{name:8} {oracle:10} {r['status']:8} {r.get('seconds', 0):8.1f} {held:14.0f} "
                      f"{held / io_mb:10.2f}" + ("" if r["status"] == "ok" else f"  {r['message'][:200]}"), flush=True)
                if args.out:
                    with args.out.open("a") as f:
                        f.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
