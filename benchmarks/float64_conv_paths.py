"""float64 evaluations of KernelBench level 1 references on a GPU: cuDNN or cuDNN off.

``strongest`` evaluates the reference ``Model`` in float64 at a problem's own shape (the
reference and the magnitude ``S``: two evaluations). On the H200 the own-shape
false-rejection run spent 23 s in ``strongest`` on L1 68 (a 3-d transposed convolution,
1.3 TFLOP) against an official check of about 4 s, so the float64 convolutions are
where the issue's 3x goal is at risk. With cuDNN off torch runs a CUDA convolution as
im2col and cuBLAS GEMMs, which in float64 reach the tensor cores. This times, per problem
(the riskiest first: most FLOPs per input element), one float64 forward each way after a
warm-up, the float32 forward as KernelBench runs it (cuDNN, TF32 as torch defaults) for
scale and with cuDNN and TF32 off (the derived error model's "cuDNN off" evaluation, also
at the own shape), and the largest difference between the two float64 outputs relative to their
size: ``KERNELAUDIT_FLOAT64_CUDNN`` is then set from these figures.

    python benchmarks/float64_conv_paths.py --out f64_paths.json [--budget-s 500] [--limit 20]
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


def _timed(fn) -> tuple[float, object]:  # noqa: ANN001
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t0, out


def measure(path: Path) -> dict:
    """One problem at its own shape: float32 (cuDNN, TF32 defaults), float64 with and
    without cuDNN (a warm-up, then one timed forward each)."""
    from kernelaudit.zoo.problems import load_problem
    from kernelaudit.zoo.problems.problem_case import tf32_off

    problem = load_problem(path)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = problem.Model(*problem.get_init_inputs({})).eval()
        inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in problem.get_inputs({})]
    row: dict = {"problem": path.stem}
    with torch.no_grad():
        model(*inputs)
        row["float32_s"], _ = _timed(lambda: model(*inputs))
        with torch.backends.cudnn.flags(enabled=False), tf32_off():   # the derived model's "cuDNN off"
            model(*inputs)
            row["float32_native_s"], _ = _timed(lambda: model(*inputs))
        model64 = model.double()
        x64 = [x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]
        del inputs
        outs = {}
        for name, enabled in (("float64_cudnn_s", True), ("float64_native_s", False)):
            with torch.backends.cudnn.flags(enabled=enabled):
                model64(*x64)
                row[name], outs[name] = _timed(lambda: model64(*x64))
        a, b = outs["float64_cudnn_s"], outs["float64_native_s"]
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
            scale = float(a.abs().max()) or 1.0
            row["max_diff_rel_to_max"] = float((a - b).abs().max()) / scale
    row["native_speedup"] = round(row["float64_cudnn_s"] / max(row["float64_native_s"], 1e-9), 2)
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="JSON rows, written after every problem")
    ap.add_argument("--root", type=Path, default=None, help="KernelBench as published (holding level1)")
    ap.add_argument("--limit", type=int, default=40, help="at most this many problems, riskiest first")
    ap.add_argument("--budget-s", type=float, default=500.0, help="stop starting problems after this many seconds")
    ap.add_argument("--resume", action="store_true", help="keep the rows already in --out, skip their problems")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("float64_conv_paths: needs a CUDA device (it compares two CUDA paths)", file=sys.stderr)
        return 3
    level1 = (args.root or ock._default_root()) / "level1"
    paths = sorted(level1.glob("*.py"), key=ock._order)
    risk = {p: ock.flops_per_input_element(p) for p in paths}
    paths = sorted(paths, key=lambda p: -risk[p])[:args.limit]
    rows = json.loads(args.out.read_text())["rows"] if args.resume and args.out.exists() else []
    done = {r["problem"] for r in rows}
    t0 = time.perf_counter()
    for p in paths:
        if p.stem in done:
            continue
        if time.perf_counter() - t0 > args.budget_s:
            print(f"budget of {args.budget_s:.0f} s spent: stopped before {p.stem}", flush=True)
            break
        try:
            row = measure(p)
        except Exception as exc:  # noqa: BLE001 - out of memory, a refused path: recorded
            row = {"problem": p.stem, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        row["flops_per_input_element"] = round(risk[p], 1)
        rows.append(row)
        torch.cuda.empty_cache()
        print(json.dumps(row), flush=True)
        args.out.write_text(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                                        "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
