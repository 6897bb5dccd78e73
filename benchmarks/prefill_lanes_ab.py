"""``ieee`` prefill first-pass variants side by side on one GPU (issue 19): the table's
prefill row, the warp-specialized tile, the 4-warp tile, the cast-once passes and more
(add a variant to :data:`VARIANTS` to try one),
interleaved rounds, beside CastFloat32 (and the ceilings of the same run: the FMA rate,
cuBLAS fp32 and bf16); every variant's output must have
the bits of the first (they compute one order), else the run fails.

    PYTHONPATH=src python benchmarks/prefill_lanes_ab.py --out $OUT/prefill_lanes_ab.json
    PYTHONPATH=src python benchmarks/prefill_lanes_ab.py --m 4096 --rounds 7 --variants ws,w4

Each figure: the median over ``--rounds`` rounds of one call's time (CUDA events around
``--calls`` calls, the weights rotated over two copies); TFLOP/s and the fraction of the
FMA ceiling measured in the same run (``repro_gemm.py``'s ``_fma_peak`` kernel).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import repro_gemm  # noqa: E402  (the FMA ceiling and weights of the repro benchmark)

from kernelaudit.repro import gemm  # noqa: E402
from kernelaudit.repro.tiles import IEEE_LANES_TABLE, Tiles  # noqa: E402

#: name -> the first pass's tiles (``ws``: the warp-specialized tile, the table's large-N
#: prefill row until 2026-12-07; ``table``: the row now; ``w4``: the 4-warp tile).
#: (Lanes paired on an operand's shared address, the threads 2 x 16 down the rows, were
#: tried on an H100 on 2026-12-06: 25% fewer shared-load wavefronts, no fewer stalls,
#: 39.6 TFLOP/s against 42.9: benchmarks/results/2026-12-06-h100-prefill-stalls-slow-pass/.)
VARIANTS = {
    "ws": Tiles(256, 128, 16, 8, 3, split_lanes=True, gluon=True, group_m=8, loader_warps=4),
    "w4": Tiles(128, 128, 16, 4, 1, split_lanes=True, gluon=True, group_m=8),
    # ptxas's register usage level 10: fewer FFMA with their sources in one register bank
    # (a two-bank model of the sm_90 SASS: 1,058 of 2,048 against 1,156;
    # benchmarks/prefill_register_banks.py): 34.1 TFLOP/s against 43.1 on an H100
    # (2026-12-06, benchmarks/results/2026-12-06-h100-poisoned-draws-slow-pass-svd-family/)
    "ws_rul10": Tiles(256, 128, 16, 8, 3, split_lanes=True, gluon=True, group_m=8, loader_warps=4,
                      register_usage_level=10),
    # the feeding (ncu, H100, 2026-12-07: the K step alone keeps the FMA pipe 78.8% busy, the
    # pass 67.4%; 51% of the producers' store wavefronts bank conflicts): producers that store
    # conflict-free. (Persistent programs, one an SM looping over the (tile, lane) items, ran
    # 35.8 TFLOP/s where the same loop with one item a program ran 36.4, and that loop had
    # cost the table tile 15%: H100, 2026-12-07, benchmarks/results/2026-12-07-h100-k-step-vs-pass-ncu-sweep-resume.)
    "ws_rows": Tiles(256, 128, 16, 8, 3, split_lanes=True, gluon=True, group_m=8, loader_warps=4,
                     loader_whole_rows=True),
    # producers that spill less (sm_90, Triton 3.6: 2 local loads and stores for 32)
    "ws_lr48": Tiles(256, 128, 16, 8, 3, split_lanes=True, gluon=True, group_m=8, loader_warps=4,
                     loader_registers=48),
    "ws_rows_lr48": Tiles(256, 128, 16, 8, 3, split_lanes=True, gluon=True, group_m=8, loader_warps=4,
                          loader_whole_rows=True, loader_registers=48),
    # stages handed back in groups: no barrier of the FMA warps inside the K-step loop (Triton
    # 3.6 puts two in each step of the table's), three a group of 3 or 4 steps
    "ws_hb3": Tiles(256, 128, 16, 8, 6, split_lanes=True, gluon=True, group_m=8, loader_warps=4,
                    loader_registers=48, handback_steps=3),
    "ws_rows_hb3": Tiles(256, 128, 16, 8, 6, split_lanes=True, gluon=True, group_m=8, loader_warps=4,
                         loader_whole_rows=True, loader_registers=48, handback_steps=3),
    "ws_rows_hb4": Tiles(256, 128, 16, 8, 8, split_lanes=True, gluon=True, group_m=8, loader_warps=4,
                         loader_whole_rows=True, loader_registers=48, handback_steps=4),
    # (H100, 2026-12-07: none of the three knobs above beat ws: 38.7, 41.9, 43.1 and 33.9-36.0
    # TFLOP/s against 43.2; benchmarks/results/2026-12-07-h100-prefill-feeding-knobs-matrix-rank-wrong.)
    # Operands cast to fp32 once in memory, lane-major, and fed by TMA from one producer warp:
    # the FMA warps' loop as in ws, no thread loading, upcasting or storing an operand (the
    # casts are inside the timed call)
    "cast_s3": Tiles(256, 128, 16, 8, 3, split_lanes=True, gluon=True, group_m=8, cast_once=True),
    "cast_s4": Tiles(256, 128, 16, 8, 4, split_lanes=True, gluon=True, group_m=8, cast_once=True),
    "cast_s6": Tiles(256, 128, 16, 8, 6, split_lanes=True, gluon=True, group_m=8, cast_once=True),
    # (H100, 2026-12-07, the first cast pass: 45.1-45.3 TFLOP/s at 3, 4 and 6 stages against ws's
    # 42.8, the casts 0.88 ms of the call: benchmarks/results/2026-12-07-h100-prefill-cast-once-matrix-rank-plain.)
    # cast-once with the thread tile whose K step ran fastest alone from shared memory (2 x 4:
    # 0.819 of the ceiling against 0.800 at 4 x 4, H100, 2026-12-07; sm_90, Triton 3.6: 160
    # LDS a step against 96, 168 registers, no spills)
    "cast_tt24": Tiles(256, 128, 16, 8, 3, split_lanes=True, gluon=True, group_m=8, cast_once=True,
                       thread_tile=(2, 4)),
    # The table's prefill row (cast_once where a launch allows it, since 2026-12-07)
    "table": IEEE_LANES_TABLE[("prefill", "large")],
}


def _ms(fn, weights, calls: int) -> float:
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for i in range(calls):
        fn(weights[i % len(weights)])
    e1.record()
    torch.cuda.synchronize()
    return e0.elapsed_time(e1) / calls


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--m", type=int, default=4096)
    p.add_argument("--kn", type=int, default=8192)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--calls", type=int, default=4)
    p.add_argument("--variants", default=",".join(VARIANTS),
                   help=f"comma-separated, from {', '.join(VARIANTS)} (the first is the bits' reference)")
    a = p.parse_args(argv)
    names = [v for v in a.variants.split(",") if v]
    bad = [v for v in names if v not in VARIANTS]
    if bad:
        p.error(f"--variants: unknown {bad}; allowed values are {', '.join(VARIANTS)}")
    if not torch.cuda.is_available():
        print("prefill_lanes_ab: needs a CUDA device", file=sys.stderr)
        return 3
    torch.backends.cuda.matmul.allow_tf32 = False
    g = torch.Generator(device="cuda").manual_seed(a.m)
    x = torch.randn(a.m, a.kn, device="cuda", generator=g).to(torch.bfloat16)
    weights = repro_gemm.weights(a.kn, a.kn, 2)
    x32 = x.float()
    fns = {v: (lambda t: (lambda w: gemm.linear(x, w, order="ieee", tiles=t)))(VARIANTS[v]) for v in names}
    fns["cast_fp32"] = lambda w: F.linear(x32, w.float())
    casting = [VARIANTS[v] for v in names if VARIANTS[v].cast_once]
    if casting:   # the cast-once variants' own casts alone: their share of the call
        from kernelaudit.repro import ieee_gluon_tma

        order, bk = gemm.ieee_lanes(a.kn, a.kn, torch.bfloat16), casting[0].bk
        fns["cast_once_alone"] = lambda w: (ieee_gluon_tma.lane_major(x, order, bk, 0.0),
                                            ieee_gluon_tma.lane_major(w, order, bk, -1.0))
    first = None
    bits = {}
    for v in names:
        y = fns[v](weights[0])
        torch.cuda.synchronize()
        if first is None:
            first = y
        bits[v] = bool(torch.equal(y, first))
        del y
    times = {v: [] for v in fns}
    for _ in range(a.rounds):
        for v, fn in fns.items():
            fn(weights[0])  # warm (and compiled) before the events
            times[v].append(_ms(fn, weights, a.calls))
    flops = 2 * a.m * a.kn * a.kn
    ceiling = repro_gemm.fma_ceiling_tflops()
    cast = statistics.median(times["cast_fp32"])
    rows = {}
    for v, ts in times.items():
        ms = statistics.median(ts)
        tflops = flops / ms / 1e9
        rows[v] = {"ms": round(ms, 4), "range_ms": [round(min(ts), 4), round(max(ts), 4)],
                   "tflops": round(tflops, 1), "of_fma_ceiling": round(tflops / ceiling, 3),
                   "vs_cast_fp32": round(cast / ms, 3), **({"same_bits": bits[v]} if v in bits else {}),
                   **({"tiles": str(VARIANTS[v])} if v in VARIANTS else {})}
        print(f"{v:12s} {ms:8.3f} ms {tflops:6.1f} TFLOP/s {tflops / ceiling:6.3f} of FMA  "
              f"{cast / ms:5.3f}x Cast  bits {bits.get(v, '-')}", flush=True)
    out = {"m": a.m, "kn": a.kn, "rounds": a.rounds, "calls": a.calls, "fma_ceiling_tflops": ceiling,
           "ceilings": repro_gemm.RES.get("ceilings"), "rows": rows,
           "env": {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                   "triton": repro_gemm.triton.__version__, "python": platform.python_version()}}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(out, indent=1))
    return 0 if all(bits.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
