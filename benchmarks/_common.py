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
    from kernelaudit.cases import Case, batch_for
    from kernelaudit.oracle import device_inputs, run_op
    from kernelaudit.thresholds import REAL

    B = batch_for(REAL.t32, 256 * 256, "above")
    case = Case("bmm", dtype, "contig", "out", "2^32", "above", B, "fwd", 0, 32)
    placed, outs, _, _ = run_op(case, device, "none")
    _, (a, b) = device_inputs(placed, device, grad=False)
    return case, placed, a, b, outs[0]


def whole_check(case, placed, c, device, projections=None) -> None:
    """kernelaudit's whole check of ``c`` as the sweep runs it (Freivalds projections and
    spot checks; tolerances of 1, verdicts unused): one launch for every batch with the
    fused kernels on CUDA, reference-sized chunks otherwise."""
    from kernelaudit.oracle import (Judgement, RefContext, _fused_freivalds_enabled, default_ref_chunk,
                                    judge_matmul_chunk)

    B, per = case.batch, c[0].numel()
    chunk = default_ref_chunk(device)
    ctx = RefContext(case, placed, device, chunk)
    jf = Judgement("out0", "freivalds", 1.0, per)
    js = Judgement("out0", "spot", 1.0, per)
    step = B if _fused_freivalds_enabled(device) else max(1, chunk // per)
    for b0 in range(0, B, step):
        b1 = min(B, b0 + step)
        judge_matmul_chunk(case, ctx, b0, b1, c[b0:b1], jf, js, 1, projections)
