"""Figure of a `conform_bench.py` record: throughput by M for each path, one panel per K = N.

    python benchmarks/conform_plot.py benchmarks/results/2026-12-03-h200-conform-int8/conform_bench.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

SERIES = (("triton_tops", "Triton W8A8 + epilogue"), ("int_mm_tops", "torch._int_mm (int32 out)"),
          ("int_mm_epilogue_tops", "torch._int_mm + epilogue"), ("cublas_bf16_tflops", "cuBLAS bf16 (TFLOP/s)"))


def main(path: str) -> None:
    rec = json.loads(Path(path).read_text())
    kns = sorted({p["K"] for p in rec["points"] if "triton_ms" in p})
    fig, axes = plt.subplots(1, len(kns), figsize=(5 * len(kns), 3.6), squeeze=False)
    for ax, kn in zip(axes[0], kns):
        pts = [p for p in rec["points"] if p["K"] == kn and "triton_ms" in p]
        for key, label in SERIES:
            ax.plot([p["M"] for p in pts], [p[key] for p in pts], marker="o", label=label)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("M")
        ax.set_ylabel("TOPS")
        ax.set_title(f"K = N = {kn}", fontsize=9)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    e = rec["env"]
    fig.suptitle(f"{e['device']}, torch {e['torch']}, triton {e['triton']}, {e['date'][:10]} "
                 f"(timer: {rec.get('timer', 'eager')})", fontsize=9)
    fig.tight_layout()
    out = Path(path).with_name("conform_bench.png")
    fig.savefig(out, dpi=110)
    print(out)


if __name__ == "__main__":
    main(sys.argv[1])
