"""Where ``strongest``'s time goes on one KernelBench problem at its own shapes: each of its
oracles timed alone beside the official five-trial check, then the CUDA kernels of one
``strongest`` round under ``torch.profiler`` (top by device time).

    python benchmarks/oracle_profile.py --problems 9,7 --device cuda --out profile.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import oracle_cost_kernelbench as ock  # noqa: E402

#: The parts timed alone, then the whole.
PARTS = ("kernelbench", "bound", "shapes", "values", "tamper", ock.STRONGEST)


def _judge(path: Path, spec: str, device: str, mid: int | None) -> tuple[float, str]:
    from kernelaudit.zoo.oracles import Subject, make_oracle
    from kernelaudit.zoo.problems import ProblemCase, load_problem

    problem = load_problem(path)
    case = ProblemCase.make(problem, device=device, shapes=ock.mid_shapes(problem, mid) if mid else {})
    subject = Subject(ock._reference_as_candidate(problem))
    oracle = make_oracle(spec)
    ock._sync(device)
    t0 = time.perf_counter()
    v = oracle.judge(case, subject)
    ock._sync(device)
    return time.perf_counter() - t0, v.status.value


def profile(path: Path, device: str, top: int, mid: int | None = None, stack: int = 0,
            parts: tuple[str, ...] = PARTS) -> dict:
    """The parts' seconds (second of two rounds) and the top kernels of one ``strongest`` round."""
    row: dict = {"problem": path.stem, "seconds": {}, "status": {}}
    for spec in parts:
        _judge(path, spec, device, mid)  # warm: kernels, handles, caches of the process
        row["seconds"][spec], row["status"][spec] = _judge(path, spec, device, mid)
        print(f"{path.stem[:36]:36s} {spec:28s} {row['seconds'][spec]:8.3f} s {row['status'][spec]}", flush=True)
    acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if device == "cuda" else [])
    with torch.profiler.profile(activities=acts, with_stack=stack > 0) as prof:
        _judge(path, ock.STRONGEST, device, mid)
    key = "self_device_time_total" if device == "cuda" else "self_cpu_time_total"
    events = sorted(prof.key_averages(), key=lambda e: -getattr(e, key, 0))[:top]
    row["top"] = [{"name": e.key[:90], "calls": e.count, "ms": round(getattr(e, key, 0) / 1e3, 2)} for e in events]
    print(prof.key_averages().table(sort_by=key, row_limit=top), flush=True)
    if stack:  # the Python frames of the costliest calls (host-to-device copies: who made them)
        print(prof.key_averages(group_by_stack_n=stack).table(sort_by=key, row_limit=8), flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", default="9,7", help="comma-separated level 1 numbers or file stems")
    ap.add_argument("--root", type=Path, default=None, help="KernelBench as published (holding level1)")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--mid", type=int, default=None, metavar="MIB",
                    help="shrink to about this many MiB of inputs (oracle_cost_kernelbench --mid); default: own shapes")
    ap.add_argument("--top", type=int, default=25, help="kernels listed per problem")
    ap.add_argument("--stack", type=int, default=0, metavar="N", help="also group the profile by N Python frames")
    ap.add_argument("--no-parts", dest="parts", action="store_false", help="time only the whole of strongest")
    ap.add_argument("--out", type=Path, default=None, help="JSON rows")
    args = ap.parse_args(argv)
    root = args.root or ock._default_root()
    if not (root / "level1").is_dir():
        print(f"{root / 'level1'}: not found (KernelBench as published; set --root or KERNELAUDIT_KERNELBENCH)",
              file=sys.stderr)
        return 3
    rows = []
    for want in args.problems.split(","):
        path = ock.level1_problem(root / "level1", want)
        if path is None:
            print(f"--problems: no level 1 problem {want!r} under {root}", file=sys.stderr)
            return 2
        rows.append(profile(path, args.device, args.top, args.mid, args.stack,
                           PARTS if args.parts else (ock.STRONGEST,)))
        if args.out:
            args.out.write_text(json.dumps({"device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
                                            "torch": torch.__version__, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
