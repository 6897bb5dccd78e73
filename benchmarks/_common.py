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
