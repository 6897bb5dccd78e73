"""What every benchmark script shares: print its JSON result and write it to ``--out``."""

from __future__ import annotations

import json
from pathlib import Path


def emit(result: dict, out: Path | str | None) -> None:
    """Print ``result`` as JSON, and write it to ``out`` (parents created) when given."""
    text = json.dumps(result, indent=1)
    print(text)
    if out:
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")


def cuda_median(fn, reps: int = 5) -> float:
    """Median seconds of ``reps`` CUDA-event timed runs of ``fn`` after one untimed run
    (which compiles and warms up)."""
    import torch

    fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e) / 1e3)
    ts.sort()
    return ts[len(ts) // 2]


def crossing_bmm(dtype: str, device):
    """The out-crossing bmm the verify benchmarks time, run once on ``device``:
    (B,256,64) x (B,64,256), B = 65537 (2^32 + 65536 output elements).
    Returns ``(case, placed, a, b, c)``: the case, its placed operands, the device
    inputs and the output."""
    from kernelaudit.sweep.cases import Case, batch_for
    from kernelaudit.sweep.judge.operands import device_inputs
    from kernelaudit.sweep.judge.execution import run_op
    from kernelaudit.thresholds import REAL

    B = batch_for(REAL.t32, 256 * 256, "above")
    case = Case("bmm", dtype, "contig", "out", "2^32", "above", B, "fwd", 0, 32)
    placed, outs, _, _ = run_op(case, device, "none")
    _, (a, b) = device_inputs(placed, device, grad=False)
    return case, placed, a, b, outs[0]


def whole_check(case, placed, c, device, projections=None, **tuning) -> None:
    """kernelaudit's whole check of ``c`` as the sweep runs it (Freivalds projections and
    spot checks; tolerances of 1, verdicts unused): the public
    :func:`kernelaudit.sweep.judge.check_matmul_output`. ``tuning``: ``flat_tile``,
    ``flat_interleave``."""
    from kernelaudit.sweep.judge import check_matmul_output

    check_matmul_output(case, placed, c, device, projections=projections, **tuning)
