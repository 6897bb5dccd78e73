"""repro (product 5) on one GPU: tile sweep, performance ratios, bit proofs, invariance.

Everything one lease needs, in one run, each section timed and fenced (a failing section
records its error and the next one runs):

1. ceilings: the fp32 FMA rate a Triton kernel reaches (independent FMA chains);
2. decode: M = 1, 2, 4, 8, 16 x K = N = 4096, 8192: cuBLAS bf16, CastFloat32 (weights
   cast to fp32 in memory each call, fp32 matmul without TF32), ``mma``, and ``ieee`` in
   the table's order for the shape (K lanes here: the table row and the K-lanes kernel
   candidates), in other K-lanes orders, and in the sequential order (its table row, the
   register-tiled candidates, the old dot row), side by side (CUDA graphs over weight
   copies rotated past L2: no launch overhead, cold weights). Every ieee contender must
   give its order's bits, and each order's first 64 columns must equal the emulator;
   per bucket and order, the tiles with the least time summed over its shapes go into
   the tables the later sections use (the goals are judged on those, shape by shape),
   and ``fastest_order`` says which order won each shape (input to ``tiles.IEEE_LANES``);
3. prefill: M = 1024, 4096, 8192 x K = N = 8192: the same baselines, the table's order
   (K lanes: the lane-after-lane fp32 ``tl.dot`` path, its table row and candidates)
   beside the sequential order's table row (fp32 ``tl.dot``) and a register-tiled
   candidate, TFLOP/s and the fraction of the FMA ceiling measured in this run;
4. bits: the compiled ``ieee`` kernels (every path of both orders, the decode and
   prefill winners, other K-lanes orders) against the CPU emulator (column slices, in
   the order of the whole shape), several dtypes, tails, signed zeros, an empty lane;
5. invariance: ``kernelaudit repro``'s checker on cuBLAS bf16, ``ieee`` and ``mma``
   linear (M up to 8192), the companions, and the small transformer (logits, greedy
   tokens at batch 1 and 64) with its end-to-end time under ``deterministic()``.

    PYTHONPATH=src python benchmarks/repro_gemm.py --out $OUT
    PYTHONPATH=src python benchmarks/repro_gemm.py --out /tmp/smoke --smoke   # CPU dry run

(``--sections sweep,perf`` still runs the previous tile sweep and perf table.) The tables'
other rows: ``--sections decode --decode-kn 4096 --n 512`` (the ``ieee`` small-N decode
rows), ``--sections prefill --prefill-ms 4096 --n 512`` (its small-N prefill row),
``--sections decode --decode-kn 512 --n 4096`` (K under 1024: the sequential order's rows),
``--sections mma_rows`` (the ``mma`` rows but large/large).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import platform
import sys
import time
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F

try:  # repro imports only kernelaudit.config/errors; survive a half-restructured top level
    import kernelaudit  # noqa: F401  (pyflakes: used for its side effect)
except ImportError:
    import types
    _pkg = types.ModuleType("kernelaudit")
    _pkg.__path__ = [str(Path(__file__).resolve().parents[1] / "src" / "kernelaudit")]
    sys.modules["kernelaudit"] = _pkg

from kernelaudit.repro import companions, emulate, gemm, tinylm
from kernelaudit.repro.invariance import check
from kernelaudit.repro.mode import deterministic
from kernelaudit.repro.report import figure, summary
from kernelaudit.repro.tiles import SEQUENTIAL, Lanes, Tiles

import triton
import triton.language as tl

RES: dict = {}
DEV = "cuda"
#: where main() writes RES (repro_gemm.json); a long section writes what it has so far
OUT_JSON: Path | None = None


def write_partial() -> None:
    """Write RES as it stands (a section stopped by a time limit keeps its rows)."""
    if OUT_JSON is not None:
        OUT_JSON.write_text(json.dumps(RES, indent=1, default=str) + "\n")
#: shapes; --smoke shrinks them to run the whole script on a CPU (interpreter) first
S = {"decode": (4096, 8192), "ms": (1, 2, 4, 8, 16), "prefill": (1024, 2048, 4096, 8192), "pk": 8192,
     "prefill_ms": (1024, 4096, 8192),
     "sweep": (4, 8192, 2048, 4096, 4096, 8192), "inv_k": 4096, "inv_m": 8192, "kv": 512, "norm": 4096,
     "heads": 16, "norm_rows": 1024,
     "lm": dict(vocab=8192, length=256, dim=2048, heads=16, hidden=8192, layers=4), "lm_batch": (64, 128),
     "bits_scale": 1, "wdtype": torch.bfloat16}
SMOKE = {"decode": (1024,), "ms": (1, 4), "prefill": (64,), "prefill_ms": (40,), "n": 24,
         "pk": 1024, "sweep": (4, 64, 64, 64, 64, 64),
         "inv_k": 64, "inv_m": 128, "kv": 16, "norm": 64, "heads": 1, "norm_rows": 64,
         "lm": dict(vocab=64, length=32, dim=32, heads=4, hidden=64, layers=1), "lm_batch": (64, 8),
         "bits_scale": 64, "mma_ms": (32,),
         "mma_shapes": {("small", "small"): ((32, 32),), ("small", "large"): ((32, 64),),
                        ("large", "small"): ((64, 32),)}}


def bench(fn, rep_ms: float = 60.0) -> float:
    """Median ms (triton.testing.do_bench: events, L2 flushed before each timed run)."""
    return triton.testing.do_bench(fn, warmup=10, rep=rep_ms, return_mode="median")


def section(name):
    def wrap(f):
        def run(*a, **k):
            t0 = time.perf_counter()
            try:
                RES[name] = f(*a, **k)
            except Exception as e:  # one broken section must not cost the others
                RES[name] = {"error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-2000:]}
                print(f"!! {name}: {type(e).__name__}: {e}", flush=True)
            RES.setdefault("seconds", {})[name] = round(time.perf_counter() - t0, 1)
            print(f"== {name} done in {RES['seconds'][name]} s", flush=True)
        return run
    return wrap


# -- 1. the fp32 FMA ceiling ---------------------------------------------------------------
@triton.jit
def _fma_peak(out, ITERS: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x0 = offs.to(tl.float32) * 1e-9
    x1, x2, x3, x4, x5, x6, x7 = x0 + 1, x0 + 2, x0 + 3, x0 + 4, x0 + 5, x0 + 6, x0 + 7
    for _ in range(ITERS):  # 8 independent chains: latency hidden, issue-bound
        x0 = tl.fma(x0, 0.999, 0.001)
        x1 = tl.fma(x1, 0.999, 0.001)
        x2 = tl.fma(x2, 0.999, 0.001)
        x3 = tl.fma(x3, 0.999, 0.001)
        x4 = tl.fma(x4, 0.999, 0.001)
        x5 = tl.fma(x5, 0.999, 0.001)
        x6 = tl.fma(x6, 0.999, 0.001)
        x7 = tl.fma(x7, 0.999, 0.001)
    tl.store(out + offs, x0 + x1 + x2 + x3 + x4 + x5 + x6 + x7)


def fma_peak_run():
    """(one call of the FMA ceiling kernel on CUDA device 0, its floating-point operations):
    16 programs of 1,024 threads an SM, 8,192 steps of 8 independent FMA chains."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    block, iters, grid = 1024, 8192, sms * 16
    out = torch.empty(grid * block, device="cuda")
    return (lambda: _fma_peak[(grid,)](out, ITERS=iters, BLOCK=block, num_warps=8)), 2 * 8 * iters * block * grid


@section("ceilings")
def ceilings():
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    peak, flop = fma_peak_run()
    fma_tflops = flop / bench(peak) / 1e9
    a = torch.randn(8192, 8192, device=DEV, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=DEV, dtype=torch.bfloat16)
    bf16 = 2 * 8192**3 / bench(lambda: a @ b) / 1e9
    torch.backends.cuda.matmul.allow_tf32 = False
    a32, b32 = a.float(), b.float()
    fp32 = 2 * 8192**3 / bench(lambda: a32 @ b32, 200) / 1e9
    return {"fp32_fma_tflops": round(fma_tflops, 1), "cublas_bf16_tflops_8192": round(bf16, 1),
            "cublas_fp32_no_tf32_tflops_8192": round(fp32, 1), "sms": sms}


@section("clocks")
def clocks(seconds: float = 3.0):
    """Each contender run back to back for ``seconds`` at M = 4096, K = N = 8192 (bf16
    weights) while nvidia-smi samples the SM clock, the power and the clock event reasons
    (:func:`_common.sustained`): the FMA ceiling kernel, ``ieee`` (the table's tiles),
    CastFloat32 (cuBLAS fp32) and cuBLAS bf16. Per contender: sustained TFLOP/s, the
    median SM clock, and its FLOP a clock against the ceiling kernel's: the share of the
    ceiling that issue, not the clock, loses (a power cap lowers one kernel's clock and not
    another's; do_bench's 60-ms runs are too short to show it)."""
    from _common import nvidia_smi_index, per_clock_vs, sustained

    if DEV != "cuda":
        return {"skipped": "needs CUDA and nvidia-smi"}
    index = nvidia_smi_index()
    m, kn = 4096, S["pk"]
    x = torch.randn(m, kn, device=DEV).to(torch.bfloat16)
    w = torch.randn(kn, kn, device=DEV).to(torch.bfloat16)
    x32, w32 = x.float(), w.float()
    torch.backends.cuda.matmul.allow_tf32 = False
    runs = {"fma_ceiling": fma_peak_run(),
            "ieee": (lambda: gemm.linear(x, w, order="ieee"), 2 * m * kn * kn),
            "cast_fp32": (lambda: F.linear(x32, w32), 2 * m * kn * kn),
            "cublas_bf16": (lambda: F.linear(x, w), 2 * m * kn * kn)}
    rows = {}
    for name, (fn, flop) in runs.items():
        rows[name] = sustained(fn, flop, seconds, index)
        print(name, rows[name], flush=True)
    per_clock_vs(rows, "fma_ceiling")
    return {"m": m, "k": kn, "n": kn, "seconds_each": seconds, "nvidia_smi_index": index, "rows": rows}


# -- operands ---------------------------------------------------------------------------------
def weights(n, k, copies, dtype=None):
    """``copies`` weight sets [N, K] (rotated so that L2, ~60 MB, never holds the next one),
    in ``dtype`` (default the run's ``--weight-dtype``)."""
    g = torch.Generator(device=DEV).manual_seed(n + k)
    return [torch.randn(n, k, device=DEV, generator=g).to(dtype or S["wdtype"]) for _ in range(copies)]


def rotating(fn, ws):
    state = {"i": 0}

    def call():
        state["i"] = (state["i"] + 1) % len(ws)
        return fn(ws[state["i"]])
    return call


def impls(x, order_tiles=None):
    """name -> f(w): the four contenders on activations x (bf16)."""
    x32 = x.float()
    t = order_tiles or {}
    return {
        "cublas_bf16": lambda w: F.linear(x, w),
        "cast_fp32": lambda w: F.linear(x32, w.float()),
        "ieee": lambda w: gemm.linear(x, w, order="ieee", tiles=t.get("ieee")),
        "mma": lambda w: gemm.linear(x, w, order="mma", tiles=t.get("mma")),
    }


# -- 2. sweep -----------------------------------------------------------------------------------
IEEE_DECODE = [Tiles(16, 64, 64, 4, 3, dot=True), Tiles(16, 128, 64, 4, 3, dot=True),
               Tiles(16, 64, 64, 8, 3, dot=True), Tiles(16, 64, 128, 4, 2, dot=True),
               Tiles(16, 128, 32, 8, 4, dot=True), Tiles(16, 64, 8, 4, 3, tile8=True),
               Tiles(16, 128, 8, 4, 3, tile8=True), Tiles(8, 64, 8, 2, 3, tile8=True)]
IEEE_PREFILL = [Tiles(128, 128, 32, 8, 2, dot=True), Tiles(128, 128, 16, 4, 2, dot=True),
                Tiles(128, 128, 16, 4, 3, dot=True), Tiles(128, 256, 16, 8, 2, dot=True),
                Tiles(256, 128, 16, 8, 2, dot=True), Tiles(128, 128, 32, 4, 2, dot=True),
                Tiles(128, 128, 16, 8, 2, dot=True),
                # more programs an SM: the 128 x 128 rows hold one (244-255 registers a thread
                # at 8 warps, spills at 4); these compile for sm_90 (Triton 3.6) to 128-168
                # registers, no spills, FFMA share of the K loop 0.84-0.85
                Tiles(128, 64, 16, 4, 3, dot=True, group_m=8), Tiles(64, 128, 16, 4, 4, dot=True, group_m=8),
                Tiles(128, 64, 32, 8, 3, dot=True, group_m=8)]
MMA_PREFILL = [Tiles(128, 128, 64, 8, 3), Tiles(128, 256, 64, 8, 3), Tiles(128, 128, 64, 4, 4)]


@section("sweep")
def sweep(quick: bool):
    torch.backends.cuda.matmul.allow_tf32 = False
    out = {}
    d_m, d_k, p_m, p_k, q_m, q_k = S["sweep"]
    for label, m, kn, configs, order in (("ieee_decode", d_m, d_k, IEEE_DECODE, "ieee"),
                                         ("ieee_prefill", p_m, p_k, IEEE_PREFILL, "ieee"),
                                         ("mma_prefill", q_m, q_k, MMA_PREFILL, "mma")):
        ws = weights(kn, kn, 3 if kn == 8192 else 6)
        x = torch.randn(m, kn, device=DEV).bfloat16()
        rows = []
        ref = None
        for t in (configs[:3] if quick and order == "mma" else configs):
            try:
                y = gemm.linear(x, ws[0], order=order, tiles=t)
                same = None if ref is None else bool(torch.equal(y, ref))
                ref = y if ref is None else ref
                ms = bench(rotating(lambda w: gemm.linear(x, w, order=order, tiles=t), ws))
                rows.append({"tiles": t.__dict__, "ms": round(ms, 4), "tflops": round(2 * m * kn * kn / ms / 1e9, 1),
                             "same_bits_as_first": same})
            except Exception as e:
                rows.append({"tiles": t.__dict__, "error": f"{type(e).__name__}: {str(e)[:300]}"})
            print(label, rows[-1], flush=True)
        ok = [r for r in rows if "ms" in r]
        out[label] = {"m": m, "k": kn, "n": kn, "rows": rows,
                      "best": min(ok, key=lambda r: r["ms"])["tiles"] if ok else None}
        del ws
        torch.cuda.empty_cache()
    return out


def best_tiles(label):
    b = RES.get("sweep", {}).get(label, {}).get("best")
    return Tiles(**b) if b else None


def table_from_sweep() -> dict:
    """Measure with the table this sweep would write: the ``ieee`` rows for large N take
    the sweep's best tiles (the model section runs through the table, like users)."""
    from kernelaudit.repro import tiles as tiles_mod

    for rows, label in (("decode", "ieee_decode"), ("prefill", "ieee_prefill")):
        if best_tiles(label) is not None:
            tiles_mod.IEEE_TABLE[(rows, "large")] = best_tiles(label)
    return {f"{r}/{n}": t.__dict__ for (r, n), t in tiles_mod.IEEE_TABLE.items()}


# -- 3. perf -----------------------------------------------------------------------------------
@section("perf")
def perf(quick: bool):
    torch.backends.cuda.matmul.allow_tf32 = False
    rows = []
    plan = [(m, kn, False) for kn in S["decode"] for m in S["ms"]]
    plan += [(m, S["pk"], True) for m in (S["prefill"][::2] if quick else S["prefill"])]
    for m, kn, prefill in plan:
        tiles = {"ieee": best_tiles("ieee_prefill" if prefill else "ieee_decode"),
                 "mma": best_tiles("mma_prefill") if prefill else None}
        ws = weights(kn, kn, 2 if prefill else (6 if kn <= 4096 else 3))
        x = torch.randn(m, kn, device=DEV).bfloat16()
        row = {"m": m, "k": kn, "n": kn}
        for name, f in impls(x, tiles).items():
            ms = bench(rotating(f, ws), 100 if prefill else 40)
            row[name + "_ms"] = round(ms, 4)
            row[name + "_tflops"] = round(2 * m * kn * kn / ms / 1e9, 2)
        row["ieee_vs_cast_fp32"] = round(row["cast_fp32_ms"] / row["ieee_ms"], 3)
        row["ieee_vs_cublas"] = round(row["cublas_bf16_ms"] / row["ieee_ms"], 3)
        row["mma_vs_cublas"] = round(row["cublas_bf16_ms"] / row["mma_ms"], 3)
        rows.append(row)
        print({k: row[k] for k in ("m", "k", "cublas_bf16_ms", "cast_fp32_ms", "ieee_ms", "mma_ms",
                                   "ieee_vs_cast_fp32", "ieee_vs_cublas", "mma_vs_cublas")}, flush=True)
        del ws, x
        torch.cuda.empty_cache()
    return rows


# -- decode and prefill: every candidate beside the baselines, in one run ----------------------
def timed(f, ws, rounds: int = 4) -> tuple[float, str]:
    """Median ms of one ``f(w)``: a CUDA graph of ``rounds`` passes over the weight copies
    (each pass evicts the previous copy from L2; no launch overhead in the figure), five
    replays; do_bench over the rotated copies if capture fails."""
    if DEV != "cuda":
        t0 = time.perf_counter()
        f(ws[0])
        return (time.perf_counter() - t0) * 1e3, "cpu"
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for w in ws:
                f(w)  # compiles, warms the allocator
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(rounds):
                for w in ws:
                    f(w)
        g.replay()
        torch.cuda.synchronize()
        times = []
        for _ in range(5):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            g.replay()
            e1.record()
            torch.cuda.synchronize()
            times.append(e0.elapsed_time(e1) / (rounds * len(ws)))
        del g
        return sorted(times)[2], "cuda_graph"
    except Exception as e:  # noqa: BLE001 - record and fall back, never lose the row
        print(f"graph capture failed ({type(e).__name__}: {str(e)[:200]}); do_bench", flush=True)
        torch.cuda.synchronize()
        return bench(rotating(f, ws), 25), "do_bench"


def decode_candidates(rows: int) -> list[Tiles]:
    """Register-tiled ``ieee`` decode configurations for one M bucket (``bm`` = the
    bucket): columns per program, K tile, warps, register prefetch or the compiler's
    pipelining. K tiles shrink as rows grow (every thread holds the whole activation
    tile); all compile for sm_90 without spills (checked with ptxas, Triton 3.9)."""
    bk = {1: 64, 2: 64, 4: 32, 8: 16, 16: 8}[rows]
    last = (Tiles(rows, 32, bk, 1, 3, tiled=True) if rows <= 2 else
            Tiles(rows, 128 if rows == 4 else 64, bk, 4, 1, tiled=True, prefetch=True))
    return [Tiles(rows, 32, bk, 1, 1, tiled=True, prefetch=True),
            Tiles(rows, 16, bk, 1, 1, tiled=True, prefetch=True),
            Tiles(rows, 64, bk, 2, 1, tiled=True, prefetch=True),
            Tiles(rows, 32, bk, 2, 3, tiled=True),
            last]


#: the decode table row before the register-tiled kernel (fp32 tl.dot, 0.35 ms at K = N = 8192)
PREVIOUS_DECODE = Tiles(16, 64, 64, 4, 3, dot=True)

PREFILL_CANDIDATES = [Tiles(64, 64, 4, 2, 2, tiled=True, group_m=8),
                      Tiles(128, 128, 4, 4, 2, tiled=True, group_m=8),
                      Tiles(64, 128, 4, 4, 2, tiled=True, group_m=8),
                      Tiles(128, 64, 4, 4, 2, tiled=True, group_m=8)]


def lanes_decode_candidates(rows: int) -> list[Tiles]:
    """K-lanes kernel decode configurations for one M bucket (``bm`` = the bucket), for
    the table's 8 x 8 order (bf16): columns per program and warps (``bn x 8`` lane
    chains: 16 x 8 over 4 warps is one per thread at M = 1), K step (``bk``: whole
    rounds of 64 k; more bytes in flight per step, fewer steps), register prefetch or
    Triton's pipelining. All compile for sm_90 without spills (Triton 3.9, ptxas)."""
    big = {1: 512, 2: 256, 4: 256, 8: 256, 16: 256}[rows]
    # (tiles of M / 2 and M / 4 rows, row blocks side by side, were slower at every M on
    # the H200: benchmarks/results/2026-12-05-h200-repro-decode-row-blocks/)
    # from 4 rows: 64 columns over 4 warps, 4 columns a thread, so each activation value
    # read from shared memory (the layout change of the broadcast) feeds 4 FMAs, not 1.
    # Compiled for sm_90 with the H200's Triton 3.6 (bf16 weights read as words), the K
    # loop's FFMA share at 4 / 8 / 16 rows is 0.58 / 0.72 / 0.78 at bk 64 against the table
    # tile's 0.49 / 0.56 / 0.57, no spills; bk 128 only at 4 rows (0.58): it spills 16 bytes
    # at 8 rows and 3.9 KB at 16 (benchmarks/repro_ieee_compile.py)
    wide = ([Tiles(rows, 64, 128, 4, 1, tiled=True, prefetch=True)] if rows == 4 else []) + \
        ([Tiles(rows, 64, 64, 4, 1, tiled=True, prefetch=True)] if rows >= 4 else [])
    # weight tiles by TMA, pipelined in shared memory (tiles.Tiles.tma): the register
    # prefetch tiles hold one step in flight in registers, and registers cap them at 2
    # programs an SM at 4 rows (214 registers) where the programs of a decode GEMM need 3-4:
    # about 2 MB in flight over the H200, where 4 MB (2 rows' tile) ran 1.7x as fast. These
    # compile for sm_90 (Triton 3.6; activations upcast by the launch) to 62-166 registers,
    # 19-70 KB of stages, no spills; K loops of 158-364 instructions for 64-256 FFMA at 4-16 rows
    # (40-70% FFMA, three barriers a step; sass.loop_opcodes, innermost loop). At 16
    # rows the table tile (72 registers, 2 KB a step) keeps only about 1 MB in flight.
    # On the H200 (2026-12-05) 4 x 32 x 128 with 4 stages won at 4 rows (0.054 ms at K = N =
    # 8192, 0.62x cuBLAS): 256 programs, about 2 an SM, where registers (115) and shared
    # memory (30 KB) allow 4. Hence 16 columns (512 programs) and 6 stages at 2 and 4 rows:
    # 56-96 registers, 26-51 KB, no spills (sm_90, Triton 3.6).
    tma = {1: [Tiles(1, 32, 512, 8, 3, tiled=True, tma=True)],
           2: [Tiles(2, 16, 256, 4, 4, tiled=True, tma=True), Tiles(2, 32, 128, 4, 6, tiled=True, tma=True),
               Tiles(2, 16, 128, 4, 6, tiled=True, tma=True)],
           4: [Tiles(4, 16, 256, 4, 3, tiled=True, tma=True), Tiles(4, 16, 256, 4, 5, tiled=True, tma=True),
               Tiles(4, 32, 128, 4, 4, tiled=True, tma=True), Tiles(4, 32, 128, 4, 6, tiled=True, tma=True),
               Tiles(4, 16, 128, 4, 6, tiled=True, tma=True),
               # 8 warps a program: 2 programs an SM at N = 8192 (256 of them) hold 2 warps a
               # scheduler at 4 warps, where the K loop (240 instructions a step, 53% FFMA) waits on
               # shared loads. sm_90, Triton 3.6: 100-102 registers, 31-51 KB, no spills
               Tiles(4, 32, 128, 8, 4, tiled=True, tma=True), Tiles(4, 32, 128, 8, 6, tiled=True, tma=True),
               Tiles(4, 16, 256, 8, 4, tiled=True, tma=True)],
           8: [Tiles(8, 16, 128, 4, 4, tiled=True, tma=True), Tiles(8, 16, 64, 4, 6, tiled=True, tma=True)],
           16: [Tiles(16, 16, 64, 4, 4, tiled=True, tma=True), Tiles(16, 16, 64, 4, 6, tiled=True, tma=True),
                Tiles(16, 32, 64, 4, 4, tiled=True, tma=True)]}[rows]
    # the same tiles with the activations 16-bit in their shared stages (act16): every warp
    # of a program reads all of a K step's activations, 4 rows x 64 k a round, as LDS.128
    # (each served in four 8-thread phases, two-way bank conflicts within a phase): 128 of
    # the 144 shared wavefronts a warp-step the H100's ncu counted for the 4-row table tile
    # (2026-12-06: 7.2 a load, L1 82% busy, DRAM 77%). 16-bit halves those loads; the launch
    # also skips its upcast kernel. sm_90, Triton 3.6: 12 LDS.128 a step for 20, 328
    # instructions for 240, 80 registers for 115
    tma += [dataclasses.replace(t, act16=True) for t in tma]
    # (the lanes as programs, split_lanes, ran 0.24-0.46 TFLOP/s at 2 rows on an H100, K = N
    # = 4096, against 4.1 for the register-tiled tiles: dropped,
    # benchmarks/results/2026-12-05-h100-full-grid-segments-6-8-and-decode/)
    # the Gluon kernel (kernelaudit.repro.ieee_gluon_decode): a thread holds one lane of
    # bn / (4 * warps) columns for every row, bk / 64 rounds a step; compiled for sm_90 with
    # Triton 3.6 these K loops are 42-67% FFMA with no shared memory (the Triton kernel's
    # table tiles: 28-70%) and 52-216 registers, no spills at these tiles. H100, 2026-12-06:
    # 1.3-1.8x slower than the best Triton tile at 2 and 4 rows (one step of weights in
    # flight in registers: decode is bound by bytes in flight, not instructions)
    gluon = {1: [(16, 256, 4), (32, 256, 4), (16, 512, 4)],
             2: [(16, 256, 4), (32, 128, 4), (16, 512, 4), (32, 256, 8)],
             4: [(16, 128, 4), (32, 128, 4), (16, 256, 4), (32, 256, 8), (32, 256, 4), (64, 128, 4)],
             8: [(16, 128, 4), (32, 128, 4)],
             16: [(16, 64, 4), (32, 64, 4)]}[rows]
    gluon = [Tiles(rows, bn, bk, w, 1, tiled=True, gluon=True) for bn, bk, w in gluon]
    # the same kernel with its weights num_stages - 1 steps ahead in shared memory by cp.async
    # (each thread reads back only what it copied); sm_90, Triton 3.6: 44-92 registers,
    # 24-64 KB, no spills. H100, 2026-12-06, K = N = 8192: the same bits, and faster than the
    # register kernel at 2 rows (0.061 ms against 0.083) but not at 4 (0.091 against 0.087);
    # the best Triton tiles 0.050 and 0.056 (benchmarks/results/2026-12-06-h100-prefill-k-unroll-ncu-segment-10/)
    gluon += [Tiles(rows, bn, bk, w, st, tiled=True, gluon=True)
              for bn, bk, w, st in {1: [(16, 256, 4, 4), (16, 256, 4, 6)],
                                    2: [(16, 256, 4, 4), (16, 256, 4, 6), (16, 512, 4, 4), (32, 256, 8, 4)],
                                    4: [(16, 256, 4, 4), (16, 128, 4, 6), (16, 128, 4, 8), (32, 128, 4, 4)],
                                    8: [(16, 128, 4, 4)], 16: [(16, 64, 4, 4)]}[rows]]
    return [Tiles(rows, 16, big, 4, 1, tiled=True, prefetch=True),
            Tiles(rows, 16, 128, 4, 1, tiled=True, prefetch=True),
            Tiles(rows, 32, 128 if rows >= 8 else big, 8, 1, tiled=True, prefetch=True),
            Tiles(rows, 8, 128, 2, 1, tiled=True, prefetch=True),
            Tiles(rows, 16, 64, 4, 1, tiled=True, prefetch=True),
            Tiles(rows, 16, 128, 4, 3, tiled=True)] + wide + tma + gluon


def other_orders(rows: int) -> list[tuple[Lanes, Tiles]]:
    """Other K-lanes orders than the table's, one or two tiles each: the decode section
    times them so that the table's order (tiles.IEEE_LANES) can be chosen from the H200.
    Each gives other bits than the table's (checked against the emulator, not the table)."""
    return [(Lanes(16, 8), Tiles(rows, 16, 256, 8, 1, tiled=True, prefetch=True)),
            (Lanes(16, 8), Tiles(rows, 8, 256, 4, 1, tiled=True, prefetch=True)),
            (Lanes(4, 8), Tiles(rows, 32, 256 if rows <= 4 else 128, 4, 1, tiled=True, prefetch=True)),
            (Lanes(8, 16), Tiles(rows, 16, 256 if rows <= 4 else 128, 4 if rows <= 4 else 8, 1, tiled=True,
                                 prefetch=True))]


#: K-lanes prefill (the table's order at K = N = 8192) with ``split_lanes`` (one program
#: per tile and lane, one accumulator live, the lane sums through an fp32 scratch): the
#: sequential order's tiles (:data:`IEEE_PREFILL`'s best three at 44% of the FMA ceiling),
#: open to the K-lanes order. (The lane-after-lane dot tiles timed before them, 10.6-10.9
#: TFLOP/s on the H200, are left out: benchmarks/results/2026-12-05-h200-repro-prefill-split-lanes.)
LANES_PREFILL_CANDIDATES = [
    # the tl.dot first pass: the table row until 2026-12-05 (24.7-25.3 TFLOP/s on the H200; the
    # seven other dot tiles timed that day 13.0-24.0), kept as the reference
    Tiles(128, 128, 32, 4, 2, dot=True, split_lanes=True, group_m=8)] + [
    # the Gluon first pass (explicit 4 x 4 thread sub-tiles, K steps through shared memory,
    # two LDS.128 of each operand per 64 FFMA; sm_90, Triton 3.6: 91-254 registers, no spills,
    # K loop FFMA share 0.81-0.91). H200, 2026-12-05: 128 x 128 x 16 at 4 warps 39.4-41.5
    # TFLOP/s (the table row), 8 warps 31.5-32.9. 128 x 128 x 8 at 4 warps halves the
    # unrolled K step (1,133 instructions, 18 KB, against 2,273 and 36 KB; 254 registers)
    Tiles(bm, bn, bk, w, 1, split_lanes=True, gluon=True, group_m=8)
    for bm, bn, bk, w in ((128, 128, 16, 8), (128, 128, 8, 8), (128, 128, 32, 8), (256, 128, 16, 8),
                          (128, 128, 16, 4), (64, 128, 16, 4), (128, 64, 16, 4), (64, 64, 16, 4),
                          (128, 128, 8, 4))]
LANES_PREFILL_CANDIDATES += [
    # 3 blocks an SM instead of 2 (3 warps a scheduler, where ncu found 2 leave 29% of issue
    # slots idle), the registers capped at 168: sm_90, Triton 3.6: at bk 8, 26 spill loads and
    # stores per 1,024 FFMA (the K loop 86.7% FFMA); at bk 16, 86 per 2,048 (86.0%)
    Tiles(128, 128, bk, 4, 1, split_lanes=True, gluon=True, group_m=8, max_registers=168) for bk in (8, 16)]
LANES_PREFILL_CANDIDATES += [
    # 8 warps capped at 128 registers: 2 blocks an SM (16 warps, 4 a scheduler) instead of
    # one. sm_90, Triton 3.6: at bk 16, 137 registers uncapped; capped, 1 spill load per
    # 1,024 FFMA (24 stack bytes); at bk 8, 4 spill loads and stores per 512 FFMA
    Tiles(128, 128, bk, 8, 1, split_lanes=True, gluon=True, group_m=8, max_registers=128) for bk in (16, 8)]
LANES_PREFILL_CANDIDATES += [
    # warp-specialized (``loader_warps``): 4 producer warps load and upcast the K steps into a
    # ring of stages, the FMA warps only compute. sm_90, Triton 3.6: at 80 registers (two
    # blocks an SM: 16 FMA warps) the FMA warps get 104 and their K loop no spills
    Tiles(bm, 128, bk, 8, st, split_lanes=True, gluon=True, group_m=8, max_registers=cap, loader_warps=4)
    for bm, bk, st, cap in ((128, 16, 3, 80), (128, 8, 4, 80), (128, 16, 3, 0), (256, 16, 3, 0))]
# H200, 2026-12-06, M = 4096: 40.6, 42.7, 42.4 and 43.2 TFLOP/s (the last the table row since;
# the plain 4-warp tile 41.1): benchmarks/results/2026-12-06-h200-warp-specialized-prefill-segment-11/.
# At 256 x 128 (128 accumulators a thread) bk 16 leaves 72 stack bytes (sm_90, Triton 3.6);
# bk 8 with 6 or 4 stages none, at the price of a hand-over every 8 k
LANES_PREFILL_CANDIDATES += [
    Tiles(256, 128, 8, 8, st, split_lanes=True, gluon=True, group_m=8, loader_warps=4) for st in (6, 4)]
# (a K step run as a loop of 4 or 8 k instead of unrolled whole, 541 instructions against
# 2,273, ran slower on the H100 at M = 4096: 39.3-39.4 TFLOP/s against 41.4, and bk 32 at 4
# warps 33.1; the unrolled code's size is not what holds the pass at 63% of the FMA ceiling.
# ncu there: 2 warps a scheduler (registers), 71% of issue slots used, the FMA pipe 64% busy,
# the shared stores 2.1-way bank conflicted:
# benchmarks/results/2026-12-06-h100-prefill-k-unroll-ncu-segment-10/)


def fma_ceiling_tflops() -> float:
    if "fp32_fma_tflops" not in RES.get("ceilings", {}):
        ceilings()
    return RES.get("ceilings", {}).get("fp32_fma_tflops")


def _order_name(lanes: Lanes) -> str:
    return "sequential" if lanes.sequential else f"lanes{lanes.count}x{lanes.block}"


def _contenders(x, m, kn, plan):
    """name -> (f(w), tiles or None, order or None): baselines, then ``plan``'s ieee
    entries (name, tiles, lanes) in the order given (the first of each order is its
    reference for the bits)."""
    x32 = x.float()
    out = {"cublas_bf16": (lambda w: F.linear(x, w), None, None),
           "cast_fp32": (lambda w: F.linear(x32, w.float()), None, None),
           "mma": (lambda w: gemm.linear(x, w, order="mma"), None, None)}
    if S["wdtype"].itemsize == 4:
        # fp32 weights: cast_fp32 is cuBLAS's fp32 GEMM on them as they are (nothing to
        # cast); no bf16 GEMM and no mma order (16-bit weights only) to set beside them
        del out["cublas_bf16"], out["mma"]
    for name, t, lanes in plan:
        out[name] = ((lambda w, t=t, lanes=lanes: gemm.linear(x, w, order="ieee", tiles=t, lanes=lanes)), t, lanes)
    return out


def _n(kn: int) -> int:
    """N of a [kn, kn] GEMM row (--smoke narrows it: the interpreter is slow)."""
    return S.get("n") or kn


def _ieee_plan(m, kn, candidates, sequential, others=()):
    """The ieee entries of a row: the table (its order, its tiles), the table order's
    candidates, other K-lanes orders, and the sequential order (its table row and its
    candidates) when the table's order is not sequential already."""
    from kernelaudit.repro import tiles as tiles_mod

    table_order = tiles_mod.ieee_lanes(_n(kn), kn, S["wdtype"])
    plan = [("ieee_table", tiles_mod.pick("ieee", _n(kn), kn, S["wdtype"], m=m), table_order)]
    plan += [(f"ieee_cand{i}", t, table_order) for i, t in enumerate(candidates)]
    for i, (lanes, t) in enumerate(others):
        plan.append((f"ieee_{_order_name(lanes)}_cand{i}", t, lanes))
    if not table_order.sequential:
        seq = tiles_mod.SEQUENTIAL
        plan.append(("seq_table", tiles_mod.pick("ieee", _n(kn), kn, S["wdtype"], m=m, lanes=seq), seq))
        plan += [(f"seq_cand{i}", t, seq) for i, t in enumerate(sequential)]
    return table_order, plan


def _measure_row(m, kn, plan, copies, rounds, table_order, emulate_cols: int = 64):
    """Time every contender on [m, kn] x [kn, kn] (bf16 activations, ``--weight-dtype``
    weights); the ieee ones are grouped by
    order: each must give its order's first entry's bits, and that entry's first
    ``emulate_cols`` columns must equal the CPU emulator in that order."""
    torch.backends.cuda.matmul.allow_tf32 = False
    n = _n(kn)
    ws = weights(n, kn, copies)
    x = torch.randn(m, kn, device=DEV).bfloat16()
    row = {"m": m, "k": kn, "n": n, "table_order": _order_name(table_order), "candidates": [], "orders": {}}
    refs = {}
    for name, (f, t, lanes) in _contenders(x, m, kn, plan).items():
        order = _order_name(lanes) if lanes is not None else None
        try:
            same = None
            if t is not None:  # every ieee tile must give its order's bits
                y = f(ws[0])
                if order not in refs:
                    refs[order] = y
                    if emulate_cols:
                        want = emulate.linear_ieee(x.cpu(), ws[0][:emulate_cols].cpu(), lanes=lanes)
                        row["orders"][order] = {"lanes": lanes.__dict__, "reference": name,
                                                "emulator_equal_first_cols": emulate.same_bits(
                                                    y[:, :emulate_cols].cpu(), want),
                                                "columns_checked": min(emulate_cols, n)}
                else:
                    same = bool(torch.equal(y, refs[order]))
            ms, how = timed(f, ws, rounds)
        except Exception as e:  # noqa: BLE001 - one config failing to compile must not cost the row
            row["candidates"].append({"name": name, "tiles": t.__dict__ if t else None, "order": order,
                                      "error": f"{type(e).__name__}: {str(e)[:300]}"})
            print(m, kn, name, "ERROR", row["candidates"][-1]["error"], flush=True)
            continue
        entry = {"name": name, "tiles": t.__dict__ if t else None, "order": order, "ms": round(ms, 5),
                 "tflops": round(2 * m * kn * n / ms / 1e9, 2), "timing": how}
        if t is not None:
            entry["same_bits_as_order_reference"] = same
        row["candidates"].append(entry)
        print(m, kn, name, order or "", entry["ms"], "ms", entry["tflops"], "TFLOP/s", t or "", flush=True)
    got = {c["name"]: c for c in row["candidates"] if "ms" in c}
    for order in {c["order"] for c in row["candidates"] if c.get("order") and "ms" in c}:
        best = min((c for c in row["candidates"] if c.get("order") == order and "ms" in c), key=lambda c: c["ms"])
        rec = row["orders"].setdefault(order, {})
        rec["best"] = {"name": best["name"], "tiles": best["tiles"], "ms": best["ms"]}
        for base in ("cast_fp32", "cublas_bf16"):
            if base in got:
                rec[f"best_vs_{base}"] = round(got[base]["ms"] / best["ms"], 3)
    table_rec = row["orders"].get(_order_name(table_order), {})
    if "best" in table_rec:   # what users get once the table takes the winner: the table's order
        row["ieee_best"] = table_rec["best"]
        for base in ("cast_fp32", "cublas_bf16"):
            if base in got:
                row[f"ieee_best_vs_{base}"] = round(got[base]["ms"] / row["ieee_best"]["ms"], 3)
                if "ieee_table" in got:
                    row[f"ieee_table_vs_{base}"] = round(got[base]["ms"] / got["ieee_table"]["ms"], 3)
    seq = row["orders"].get("sequential", {})
    if "best" in seq and "ieee_best" in row and not table_order.sequential:
        row["lanes_speedup_over_sequential"] = round(seq["best"]["ms"] / row["ieee_best"]["ms"], 3)
    if "mma" in got and "cublas_bf16" in got:
        row["mma_vs_cublas_bf16"] = round(got["cublas_bf16"]["ms"] / got["mma"]["ms"], 3)
    row["all_ieee_bits_equal"] = all(c.get("same_bits_as_order_reference") in (None, True)
                                     for c in row["candidates"])
    row["all_orders_equal_emulator"] = all(o.get("emulator_equal_first_cols", True) for o in row["orders"].values())
    del ws, x
    if DEV == "cuda":
        torch.cuda.empty_cache()
    return row


def least_total_tiles(rows: list[dict], order: str | None = None) -> dict[str, dict]:
    """Per rows class, the tiles whose time summed over every shape of the class is least,
    among tiles measured (and giving their order's bits) at all of them. ``order``: the
    candidates' order name (default: each row's table order)."""
    from kernelaudit.repro import tiles as tiles_mod

    by_bucket: dict[str, dict[str, dict]] = {}
    shapes: dict[str, int] = {}
    for row in rows:
        bucket = tiles_mod.rows_class(row["m"])
        shapes[bucket] = shapes.get(bucket, 0) + 1
        want = order or row["table_order"]
        for c in row["candidates"]:
            if (c.get("tiles") is None or not c.get("ms") or c.get("order") != want
                    or c.get("same_bits_as_order_reference") is False):
                continue
            key = json.dumps(c["tiles"], sort_keys=True)
            rec = by_bucket.setdefault(bucket, {}).setdefault(key, {"tiles": c["tiles"], "ms": 0.0, "shapes": set()})
            if (row["m"], row["k"]) not in rec["shapes"]:
                rec["shapes"].add((row["m"], row["k"]))
                rec["ms"] += c["ms"]
    out = {}
    for bucket, recs in by_bucket.items():
        full = [r for r in recs.values() if len(r["shapes"]) == shapes[bucket]]
        if full:
            out[bucket] = min(full, key=lambda r: r["ms"])["tiles"]
    return out


@section("decode")
def decode():
    """M = 1..16 x K = N = 4096, 8192: the table's order (K lanes at these shapes) with
    its table row and the K-lanes kernel candidates, other K-lanes orders, the
    sequential order (its table row, the register-tiled candidates, the old dot row),
    cuBLAS bf16, CastFloat32 and mma, side by side."""
    from kernelaudit.repro import tiles as tiles_mod

    rows_out = []
    for kn in S["decode"]:
        for m in S["ms"]:
            bucket = tiles_mod.rows_class(m)
            r = int(bucket[len("decode"):])
            if tiles_mod.ieee_lanes(_n(kn), kn, S["wdtype"]).sequential:   # K under 1024
                table_order, plan = _ieee_plan(m, kn, decode_candidates(r) + [PREVIOUS_DECODE], [])
            else:
                table_order, plan = _ieee_plan(m, kn, lanes_decode_candidates(r),
                                               decode_candidates(r) + [PREVIOUS_DECODE], other_orders(r))
            row = _measure_row(m, kn, plan, 6 if kn <= 4096 else 3, 4, table_order)
            rows_out.append(row)
            print({k: v for k, v in row.items() if k != "candidates"}, flush=True)
            RES["decode_rows_so_far"] = rows_out  # kept if the section is stopped (write_partial)
            write_partial()
    RES.pop("decode_rows_so_far", None)
    # the tables the later sections use: per bucket and order, the tile with the least time
    # summed over every K of the bucket (2026-12-06: "the tile that won most shapes" took a
    # tile that won at K = 4096 by 5% and lost at 8192 by 37%)
    lanes_shape = not tiles_mod.ieee_lanes(_n(S["decode"][0]), S["decode"][0], S["wdtype"]).sequential
    own = least_total_tiles(rows_out)   # in the shapes' own order: the table the goals are judged on
    tables = [(tiles_mod.IEEE_LANES_TABLE, "lanes", own) if lanes_shape else (tiles_mod.IEEE_TABLE, "sequential", own)]
    if lanes_shape:
        tables.append((tiles_mod.IEEE_TABLE, "sequential", least_total_tiles(rows_out, "sequential")))
    table = {}
    n_class = tiles_mod.size_class(_n(S["decode"][0]))
    for target, prefix, by_bucket in tables:
        for bucket, tiles in by_bucket.items():
            target[(bucket, n_class)] = Tiles(**tiles)
            table[f"{prefix}/{bucket}/{n_class}"] = tiles
    RES["ieee_table_used"] = {f"{r}/{n}": t.__dict__ for (r, n), t in tiles_mod.IEEE_TABLE.items()}
    RES["ieee_lanes_table_used"] = {f"{r}/{n}": t.__dict__ for (r, n), t in tiles_mod.IEEE_LANES_TABLE.items()}
    # which order was fastest at each shape (input to tiles.IEEE_LANES)
    fastest = {f"m{r['m']}_k{r['k']}": min(((o, v["best"]["ms"]) for o, v in r["orders"].items() if "best" in v),
                                           key=lambda ov: ov[1], default=(None, None))[0] for r in rows_out}
    # the goals, judged on what users get: the table just written, at each shape
    written, small_m = {}, []
    for row in rows_out:
        got = {c["name"]: c["ms"] for c in row["candidates"] if c.get("ms")}
        tiles = own.get(tiles_mod.rows_class(row["m"]))
        ms = next((c["ms"] for c in row["candidates"] if c.get("ms") and c["tiles"] == tiles
                   and c["order"] == row["table_order"]), None)
        if ms and "cublas_bf16" in got and "cast_fp32" in got:
            w = {"ms": ms, "vs_cublas_bf16": round(got["cublas_bf16"] / ms, 3),
                 "vs_cast_fp32": round(got["cast_fp32"] / ms, 3)}
            written[f"m{row['m']}_k{row['k']}"] = w
            if row["m"] <= 4:
                small_m.append(w)
    targets = {"ieee_2x_cast_every_m": bool(written) and all(w["vs_cast_fp32"] >= 2 for w in written.values()),
               "ieee_0.8x_cublas_m_le_4": bool(small_m) and all(w["vs_cublas_bf16"] >= 0.8 for w in small_m),
               "table_written_by_shape": written}
    return {"rows": rows_out, "table_written": table, "fastest_order": fastest, "targets": targets}


@section("prefill")
def prefill():
    """M = 1024..8192 x K = N = 8192 (``--prefill-k``, ``--n``): the table's order (K
    lanes: ``split_lanes``, the Gluon first pass since 2026-12-05) with its candidates,
    beside the sequential order's table row (the dot path of 2026-12-04), a register-tiled
    candidate and the Gluon pass with one lane at 8 and 4 warps (4 warps won the K-lanes
    order on 2026-12-05). Where the table's order is sequential (K under 1024) its
    candidates are the dot and register-tiled tiles."""
    from kernelaudit.repro import tiles as tiles_mod

    ceiling = fma_ceiling_tflops() if DEV == "cuda" else None
    rows_out = []
    for m in S["prefill_ms"]:
        kn = S["pk"]
        if tiles_mod.ieee_lanes(_n(kn), kn, S["wdtype"]).sequential:
            table_order, plan = _ieee_plan(m, kn, IEEE_PREFILL + PREFILL_CANDIDATES, [])
        else:
            table_order, plan = _ieee_plan(m, kn, LANES_PREFILL_CANDIDATES, PREFILL_CANDIDATES[2:3] + [
                Tiles(128, 128, 16, 8, 1, split_lanes=True, gluon=True, group_m=8),
                Tiles(128, 128, 16, 4, 1, split_lanes=True, gluon=True, group_m=8)])
        row = _measure_row(m, kn, plan, 2, 1, table_order, emulate_cols=16 if m <= 1024 else 0)
        if ceiling:
            for c in row["candidates"]:
                if c.get("order") and "tflops" in c:
                    c["fraction_of_fma_ceiling"] = round(c["tflops"] / ceiling, 3)
            for rec in row["orders"].values():
                if "best" in rec:
                    rec["best_fraction_of_fma_ceiling"] = round(2 * m * kn * kn / rec["best"]["ms"] / 1e9 / ceiling, 3)
            if "ieee_best" in row:
                row["ieee_best_fraction_of_fma_ceiling"] = round(
                    2 * m * kn * kn / row["ieee_best"]["ms"] / 1e9 / ceiling, 3)
        rows_out.append(row)
        print({k: v for k, v in row.items() if k != "candidates"}, flush=True)
    targets = {"ieee_1.17x_cast": all(r.get("ieee_best_vs_cast_fp32", 0) >= 1.17 for r in rows_out),
               "ieee_80pct_fma": all(r.get("ieee_best_fraction_of_fma_ceiling", 0) >= 0.8 for r in rows_out)}
    return {"fp32_fma_ceiling_tflops": ceiling, "rows": rows_out, "targets": targets}


# -- 4. bits: compiled ieee kernel == CPU emulator ----------------------------------------------
@section("bits")
def bits():
    """The compiled ``ieee`` kernels against the CPU emulator, in the order each case asks
    for (None: the table's order for the case's shape, :func:`tiles.ieee_lanes`): the
    sequential paths (register-tiled, tile8, dot, explicit) at K < 1024 or pinned to
    SEQUENTIAL, and the K-lanes order (the K-lanes kernel: the decode table's rows and
    candidates; the lane-after-lane dot path: the prefill rows and candidates; the
    explicit loop; other orders; fp32 weights), K tails, signed zeros, an empty lane."""
    from kernelaudit.repro import tiles as tiles_mod

    cases = []
    g = torch.Generator().manual_seed(5)
    cols = 128
    seq = SEQUENTIAL
    specs = [  # (M, K, N, activation dtype, weight dtype, bias, tiles, lanes: None = the table's)
        (3, 4096, 4096, torch.bfloat16, torch.bfloat16, True, None, None),
        (5, 8192, 1024, torch.bfloat16, torch.bfloat16, False, best_tiles("ieee_decode"), None),
        (4, 1000, 300, torch.float32, torch.bfloat16, True, None, None),
        (2, 4099, 700, torch.float16, torch.float16, True, Tiles(16, 32, 8, 2, 2, tile8=True), None),
        (2, 4099, 700, torch.float16, torch.float16, True, Tiles(16, 32, 8, 2, 2, tile8=True), seq),
        (7, 2048, 2048, torch.float32, torch.float16, False, best_tiles("ieee_prefill"), None),
        (64, 512, 256, torch.bfloat16, torch.bfloat16, True, Tiles(64, 64, 8, 4, 2, tile8=True), None),
        (300, 4099, 256, torch.bfloat16, torch.bfloat16, True, None, None),          # prefill table, K tail
        (300, 4099, 256, torch.bfloat16, torch.bfloat16, True, None, seq),
        (33, 1000, 200, torch.float32, torch.bfloat16, False, Tiles(128, 128, 32, 8, 2, dot=True), None),
        (9, 2048, 512, torch.float16, torch.float16, True, Tiles(16, 16, 128, 2, 3, dot=True), None),
        (9, 2048, 512, torch.float16, torch.float16, True, Tiles(16, 16, 128, 2, 3, dot=True), seq),
        (5, 1100, 64, torch.bfloat16, torch.bfloat16, False, Tiles(16, 16, 1, 4, 1), None),    # explicit loop
        (4, 3000, 256, torch.float32, torch.float32, True, None, None),                         # fp32 weights
        (4, 3000, 256, torch.float32, torch.float32, True, Tiles(4, 16, 128, 4, 1, tiled=True, prefetch=True),
         None),
    ]
    # the table for each decode bucket (as the decode section left it), in both orders:
    # the K-lanes rows at K >= 1024, the sequential rows pinned to SEQUENTIAL; every
    # decode and prefill candidate of both orders, K tails, fp32 and fp16 activations
    for i, m in enumerate((1, 2, 3, 8, 16)):
        k = (4096, 4099, 8192, 1500, 2048)[i]
        adt = (torch.bfloat16, torch.float32)[i % 2]
        for lanes in (None, seq):   # the table's order (K lanes: k >= 1024), then pinned sequential
            t = tiles_mod.pick("ieee", 8192, 8192, torch.bfloat16, m=m, lanes=lanes)
            specs.append((m, k, 512, adt, torch.bfloat16, i % 2 == 0, t, lanes))
    for t in decode_candidates(4) + decode_candidates(16):
        specs.append((t.bm - 1, 777, 256, torch.float16, torch.float16, True, t, None))
    for rows in (4, 16):   # M one short of the bucket: a tail row block (several when bm < rows)
        for t in lanes_decode_candidates(rows):
            specs.append((rows - 1, 1777, 256, torch.float16, torch.float16, True, t, None))
    for lanes, t in other_orders(4) + other_orders(16):
        specs.append((t.bm - 2, 2053, 256, torch.bfloat16, torch.bfloat16, True, t, lanes))
    for t in PREFILL_CANDIDATES:
        specs.append((300, 4099, 256, torch.bfloat16, torch.bfloat16, True, t, seq))
    for t in LANES_PREFILL_CANDIDATES:
        specs.append((300, 4099, 256, torch.bfloat16, torch.bfloat16, True, t, None))
    for m, k, n, adt, wdt, has_bias, t, lanes in specs:
        k, n = max(1, k // S["bits_scale"]) + 3 * (S["bits_scale"] > 1), max(1, n // S["bits_scale"])
        order = lanes if lanes is not None else tiles_mod.ieee_lanes(n, k, wdt)   # the shape's, not the slice's
        scale = 2.0 ** torch.randint(-20, 20, (m, 1), generator=g)   # wide exponents per row
        x = (torch.randn(m, k, generator=g) * scale).to(adt)
        w = torch.randn(n, k, generator=g).to(wdt)
        b = torch.randn(n, generator=g).to(wdt) if has_bias else None
        got = gemm.linear(x.to(DEV), w.to(DEV), None if b is None else b.to(DEV), tiles=t, lanes=lanes).cpu()
        ref = emulate.linear_ieee(x, w[:cols], None if b is None else b[:cols], lanes=order)
        diff = emulate.bit_mismatches(got[:, :cols], ref)   # a NaN matches any NaN (payloads are free)
        same = diff == 0
        nan_rows = int(torch.isnan(ref).any(1).sum())
        cases.append({"m": m, "k": k, "n": n, "activations": str(adt), "weights": str(wdt), "bias": has_bias,
                      "tiles": t.__dict__ if t else "table", "order": order.__dict__,
                      "order_from": "table" if lanes is None else "argument", "columns_checked": cols,
                      "bit_equal": same, "mismatched": diff, "nan_rows": nan_rows})
        print(cases[-1], flush=True)
    # signed zeros: the accumulator underflows to -0.0 and stays there; K tail padding
    # (every ieee path) must keep it (fma(+0, -1, acc) == acc; fma(+0, +0, -0) is +0).
    # Sequential (K = 19) and K lanes (K = 1500: every lane starts with an underflow to
    # -0.0, so every lane sum and the tree's are -0.0), and an empty lane (K = 20 < L * B
    # = 64: lane sums -0.0 and +0.0 add to +0.0, by the order's definition)
    k_l = max(1, 1500 // S["bits_scale"]) + 3 * (S["bits_scale"] > 1)
    lanes_z = tiles_mod.ieee_lanes(40, 1500, torch.float32) if S["bits_scale"] == 1 else Lanes(2, 4)
    xl, wl = torch.zeros(1, k_l), -torch.ones(40, k_l)
    for ks in emulate.lane_ks(k_l, lanes_z):
        if ks:
            xl[0, ks[0]], wl[:, ks[0]] = -1e-30, 1e-30
    zero_cases = [
        ("sequential", torch.tensor([[-1e-30] + [0.0] * 18]), torch.tensor([[1e-30] + [-1.0] * 18] * 40), seq,
         (None, Tiles(16, 16, 16, 2, 2, dot=True), Tiles(1, 16, 16, 1, 1, tiled=True, prefetch=True),
          Tiles(64, 64, 4, 2, 2, tiled=True, group_m=8), Tiles(16, 32, 8, 2, 2, tile8=True)), True),
        ("lanes", xl, wl, lanes_z,
         (None, Tiles(1, 16, 64, 4, 1, tiled=True, prefetch=True), Tiles(4, 16, 128, 4, 3, tiled=True),
          Tiles(64, 64, 16, 8, 2, dot=True), Tiles(16, 16, 1, 4, 1), Tiles(16, 32, 8, 2, 2, tile8=True)), True),
        ("empty lane", torch.tensor([[-1e-30] + [0.0] * 19]), torch.tensor([[1e-30] + [-1.0] * 19] * 40),
         Lanes(8, 8), (None, Tiles(1, 16, 64, 4, 1, tiled=True, prefetch=True), Tiles(64, 64, 16, 8, 2, dot=True)),
         False),
    ]
    for label, xz, wz, lanes, tiles_list, negative in zero_cases:
        want = emulate.linear_ieee(xz, wz, lanes=lanes)
        for t in tiles_list:
            got = gemm.linear(xz.to(DEV), wz.to(DEV), tiles=t, lanes=lanes).cpu()
            cases.append({"op": f"signed zero ({label})", "m": 1, "k": xz.shape[1], "n": 40,
                          "tiles": t.__dict__ if t else "table", "order": lanes.__dict__,
                          "bit_equal": emulate.same_bits(got, want),
                          "want_negative_zero": bool((want.view(torch.int32) == -2**31).all()),
                          "expected_negative_zero": negative})
            cases[-1]["bit_equal"] &= cases[-1]["want_negative_zero"] == negative
    # bmm, sequential (K = 640) and K lanes (K = 1280)
    for kb in (640, 1280):
        kb_ = max(1, kb // S["bits_scale"]) + 3 * (S["bits_scale"] > 1)
        a, bb = torch.randn(3, 9, kb_, generator=g).half(), torch.randn(3, kb_, 40, generator=g).half()
        same = emulate.same_bits(gemm.bmm(a.to(DEV), bb.to(DEV)).cpu(), emulate.bmm_ieee(a, bb))
        cases.append({"op": "bmm", "shape": [3, 9, kb_, 40], "dtype": "float16",
                      "order": tiles_mod.ieee_lanes(40, kb_, torch.float16).__dict__, "bit_equal": same})
    by_order = {}
    for c in cases:
        key = "sequential" if c.get("order", {}).get("count", 1) == 1 else "lanes"
        by_order.setdefault(key, []).append(c["bit_equal"])
    return {"cases": cases, "all_equal": all(c["bit_equal"] for c in cases),
            "equal_by_order": {k: f"{sum(v)}/{len(v)}" for k, v in by_order.items()}}


# -- 5. invariance ------------------------------------------------------------------------------
@section("invariance")
def invariance(outdir: Path, quick: bool):
    kn = S["inv_k"]
    w = weights(kn, kn, 1)[0]
    x = torch.randn(S["inv_m"], kn, device=DEV).bfloat16()
    sizes = [s for s in (1, 2, 4, 8, 16, 32, 48, 64, 65, 128, 256, 512, 1024, 2048, 4096, 8192) if s <= S["inv_m"]]
    reports = []
    # ieee through the table: decode tiles up to M = 16, prefill tiles above
    for name, fn in (("cuBLAS bf16", lambda t: F.linear(t, w)),
                     ("ieee", lambda t: gemm.linear(t, w, order="ieee")),
                     ("mma", lambda t: gemm.linear(t, w, order="mma"))):
        r = check(fn, x, subject=f"linear bf16 K=N={kn} [{name}]", batch_sizes=sizes, runs=3)
        reports.append(r)
        print(summary(r), flush=True)
    figure(reports, outdir / "repro_invariance.png", f"row 0 of x[:M] @ W vs x[:1] @ W, {RES['env']['device']}")
    comp = []
    nn_ = S["norm"]
    xs = torch.randn(S["norm_rows"], nn_, device=DEV).bfloat16()
    wv = torch.randn(nn_, device=DEV).bfloat16()
    for name, fn in (("rms_norm", lambda t: companions.rms_norm(t, wv, 1e-6)),
                     ("layer_norm", lambda t: companions.layer_norm(t, wv, wv)),
                     ("softmax", lambda t: companions.softmax(t, -1)),
                     ("log_softmax", lambda t: companions.log_softmax(t.float(), -1)),
                     ("torch rms_norm", lambda t: F.rms_norm(t, (nn_,), wv, 1e-6)),
                     ("torch softmax", lambda t: torch.softmax(t, -1))):
        r = check(fn, xs, subject=name, batch_sizes=[1, 2, 7, 64, S["norm_rows"]], runs=2)
        comp.append(r)
        print(summary(r), flush=True)
    # decode: each sample is [heads, 1 query + 512 keys, 128] (its kv cache moves with it)
    h = S["heads"]
    qkv = torch.randn(64, h, 1 + S["kv"], 128, device=DEV).bfloat16()
    qp = torch.randn(64, h, S["kv"] // 2, 128, device=DEV).bfloat16()  # prefill: causal
    for name, fn, xin in (
            ("attention decode", lambda t: companions.attention(t[:, :, :1], t[:, :, 1:], t[:, :, 1:]), qkv),
            ("attention prefill", lambda t: companions.attention(t, t, t, is_causal=True), qp),
            ("torch sdpa decode",
             lambda t: F.scaled_dot_product_attention(t[:, :, :1], t[:, :, 1:], t[:, :, 1:]), qkv)):
        r = check(fn, xin, subject=name, batch_sizes=[1, 2, 8, 64], runs=2, positions=[1, 63])
        comp.append(r)
        print(summary(r), flush=True)
    return {"linear": [r.to_json() for r in reports], "companions": [r.to_json() for r in comp]}


@section("model")
def model(quick: bool):
    cfg = tinylm.LMConfig(**S["lm"])
    m = tinylm.build(cfg, dtype=torch.bfloat16, device=DEV)
    g = torch.Generator().manual_seed(3)
    batch, plen = S["lm_batch"]
    ids = torch.randint(0, cfg.vocab, (batch, plen), generator=g).to(DEV)
    out = {"config": cfg.__dict__, "batch": batch, "prompt": plen}
    with torch.inference_mode():
        out["default_ms"] = round(bench(lambda: m(ids), 300), 3)
        for order in ("mma", "ieee"):
            with deterministic(order):
                alone = m(ids[5:6])[0]
                full = m(ids)
                out[f"{order}_ms"] = round(bench(lambda: m(ids), 300 if order == "mma" else 600), 3)
                moved = m(ids.roll(17, 0))[22]
                eq = [torch.equal(full[5], alone), torch.equal(moved, alone), torch.equal(m(ids)[5], full[5])]
                out[f"{order}_logits_batch1_eq_batch64_pos5"] = eq[0]
                out[f"{order}_logits_moved_to_pos22_eq"] = eq[1]
                out[f"{order}_logits_run_to_run_eq"] = eq[2]
                out[f"{order}_over_default"] = round(out[f"{order}_ms"] / out["default_ms"], 3)
        d_alone, d_full = m(ids[5:6])[0], m(ids)[5]
        diff = (d_alone.float() - d_full.float()).abs()
        out["default_logits_batch1_eq_batch64"] = bool(torch.equal(d_alone, d_full))
        out["default_logits_max_abs_diff"] = float(diff.max())
        new = 8 if quick else 16
        prompts = ids[:, : plen // 4]
        for order in ("mma", "ieee", None):
            ctx = deterministic(order) if order else torch.inference_mode()
            with ctx:
                one = tinylm.generate(m, prompts[9:10], new)
                many = tinylm.generate(m, prompts, new)
            out[f"greedy_{order or 'default'}_batch1_eq_batch64"] = bool(torch.equal(one[0], many[9]))
    print(out, flush=True)
    return out


#: mma tiles tried on the model's linear shapes (``model_tiles``); the first is the table's.
MODEL_MMA_CANDIDATES = [Tiles(128, 128, 64, 8, 3), Tiles(128, 128, 64, 8, 3, group_m=8),
                        Tiles(128, 256, 64, 8, 3, group_m=8), Tiles(256, 128, 64, 8, 3, group_m=8),
                        Tiles(128, 128, 64, 4, 4, group_m=8), Tiles(128, 256, 32, 8, 4, group_m=8),
                        Tiles(128, 128, 128, 8, 2, group_m=8), Tiles(64, 256, 64, 4, 4, group_m=8),
                        # the persistent TMA-fed kernel (mma_tma.py): same bits, other data movement
                        Tiles(128, 256, 64, 8, 3, group_m=8, tma=True), Tiles(128, 128, 64, 8, 4, group_m=8, tma=True),
                        Tiles(128, 256, 32, 8, 4, group_m=8, tma=True), Tiles(128, 128, 64, 4, 4, group_m=8, tma=True)]


@section("model_tiles")
def model_tiles(quick: bool):
    """The ``mma`` tiles on the model's own linear shapes (M = batch x prompt rows, every
    (N, K) of a block and the head) beside cuBLAS: which tile the table should hold."""
    c = S["lm"]
    batch, plen = S["lm_batch"]
    m = batch * plen
    shapes = [(3 * c["dim"], c["dim"]), (c["dim"], c["dim"]), (c["hidden"], c["dim"]), (c["dim"], c["hidden"]),
              (c["vocab"], c["dim"])]
    rows = []
    for n, k in shapes:
        x = torch.randn(m, k, device=DEV).bfloat16()
        w = torch.randn(n, k, device=DEV).bfloat16() * 0.02
        bias = torch.randn(n, device=DEV).bfloat16()
        row = {"m": m, "n": n, "k": k, "cublas_ms": bench(lambda: F.linear(x, w, bias))}
        ref = None
        for i, t in enumerate(MODEL_MMA_CANDIDATES):
            try:
                ms = bench(lambda: gemm.linear(x, w, bias, order="mma", tiles=t))
                got = gemm.linear(x, w, bias, order="mma", tiles=t).view(torch.int16)
                ref = got if ref is None else ref
                row[f"cand{i}_same_bits_as_cand0"] = bool(torch.equal(got, ref))
            except Exception as e:  # noqa: BLE001 - a tile that does not compile is a result
                ms = None
                print(f"   {t}: {type(e).__name__}: {str(e)[:120]}", flush=True)
            row[f"cand{i}"] = ms
        rows.append(row)
        print({k_: (round(v, 4) if isinstance(v, float) else v) for k_, v in row.items()}, flush=True)
    layers = c["layers"]
    weight = [layers if (n, k) != (c["vocab"], c["dim"]) else 1 for n, k in shapes]
    total = {"cublas": sum(w_ * r["cublas_ms"] for w_, r in zip(weight, rows))}
    for i in range(len(MODEL_MMA_CANDIDATES)):
        if all(r[f"cand{i}"] is not None for r in rows):  # (the bits: cand<i>_same_bits_as_cand0)
            total[f"cand{i}"] = sum(w_ * r[f"cand{i}"] for w_, r in zip(weight, rows))
    best = min((k_ for k_ in total if k_ != "cublas"), key=total.get)
    out = {"rows": rows, "model_gemm_ms": {k_: round(v, 4) for k_, v in total.items()}, "best": best,
           "best_tiles": dataclasses.asdict(MODEL_MMA_CANDIDATES[int(best[4:])]),
           "candidates": [dataclasses.asdict(t) for t in MODEL_MMA_CANDIDATES],
           "best_vs_cublas": round(total["cublas"] / total[best], 3)}
    print(out["model_gemm_ms"], "best", best, out["best_tiles"], "vs cuBLAS", out["best_vs_cublas"], flush=True)
    return out


#: (N, K) shapes of each ``mma`` table row but large/large (its own section, model_tiles):
#: two of the row's size classes ("small" under 1024), each at M = 1024 and 8192
MMA_ROW_SHAPES = {("small", "small"): ((256, 512), (768, 768)),
                  ("small", "large"): ((512, 4096), (768, 8192)),
                  ("large", "small"): ((4096, 512), (8192, 768))}
MMA_ROW_MS = (1024, 8192)
MMA_ROW_CANDIDATES = [Tiles(64, 64, 32, 4, 3), Tiles(64, 64, 64, 4, 4), Tiles(128, 128, 32, 8, 3),
                      Tiles(64, 128, 64, 4, 3, group_m=8), Tiles(128, 64, 64, 4, 3, group_m=8),
                      Tiles(128, 128, 64, 8, 3, group_m=8), Tiles(64, 64, 128, 4, 3),
                      Tiles(128, 256, 64, 8, 3, group_m=8, tma=True)]


def _short(t: Tiles) -> str:
    return f"{t.bm}x{t.bn}x{t.bk} w{t.num_warps} s{t.num_stages}" + (" tma" if t.tma else "")


@section("mma_rows")
def mma_rows():
    """The ``mma`` table's rows other than large/large: at shapes of each row's size
    classes (:data:`MMA_ROW_SHAPES`), the table's tile and :data:`MMA_ROW_CANDIDATES`
    beside cuBLAS bf16 (CUDA graphs over rotated weight copies). Per row, the tile with
    the least time summed over its shapes, and the table tile's time against it. A
    tile's bits may differ from another's (``mma`` is fixed per tile, not across tiles):
    each candidate's equality with the table tile is recorded, not required."""
    from kernelaudit.repro import tiles as tiles_mod

    torch.backends.cuda.matmul.allow_tf32 = False
    shapes = {key: S.get("mma_shapes", {}).get(key, val) for key, val in MMA_ROW_SHAPES.items()}
    out = {}
    for (n_class, k_class), row_shapes in shapes.items():
        table_tiles = tiles_mod.TABLE[("mma", n_class, k_class)]
        tiles = [table_tiles] + [t for t in MMA_ROW_CANDIDATES if t != table_tiles]
        rows = []
        for n, k in row_shapes:
            for m in S.get("mma_ms", MMA_ROW_MS):
                ws = weights(n, k, 4)
                x = torch.randn(m, k, device=DEV).bfloat16()
                row = {"m": m, "n": n, "k": k, "cublas_bf16_ms": round(timed(lambda w, x=x: F.linear(x, w), ws)[0], 5),
                       "tiles": []}
                ref = None   # the table tile's output (tiles[0])
                for t in tiles:
                    try:
                        y = gemm.linear(x, ws[0], order="mma", tiles=t)
                        ref = y if ref is None and t is table_tiles else ref
                        ms = timed(lambda w, t=t, x=x: gemm.linear(x, w, order="mma", tiles=t), ws)[0]
                        row["tiles"].append({"tiles": dataclasses.asdict(t), "ms": round(ms, 5),
                                             "same_bits_as_table": ref is not None and bool(torch.equal(y, ref))})
                    except Exception as e:  # noqa: BLE001 - a tile that does not compile is a result
                        row["tiles"].append({"tiles": dataclasses.asdict(t),
                                             "error": f"{type(e).__name__}: {str(e)[:200]}"})
                print(f"mma {n_class}/{k_class} m={m} n={n} k={k} cuBLAS {row['cublas_bf16_ms']} ms;",
                      ", ".join(f"{r.get('ms', 'error')}" for r in row["tiles"]), flush=True)
                rows.append(row)
                del ws, x
        totals = {}
        for i, t in enumerate(tiles):
            times = [r["tiles"][i].get("ms") for r in rows]
            if all(v is not None for v in times):
                totals[i] = sum(times)
        cublas = sum(r["cublas_bf16_ms"] for r in rows)
        best = min(totals, key=totals.get) if totals else None
        out[f"{n_class}/{k_class}"] = {
            "rows": rows, "table_tiles": dataclasses.asdict(table_tiles),
            "best_tiles": dataclasses.asdict(tiles[best]) if best is not None else None,
            "table_ms_total": round(totals[0], 5) if 0 in totals else None,
            "best_ms_total": round(totals[best], 5) if best is not None else None,
            "best_vs_table": round(totals[0] / totals[best], 3) if best is not None and 0 in totals else None,
            "table_vs_cublas_bf16": round(cublas / totals[0], 3) if 0 in totals else None}
        r = out[f"{n_class}/{k_class}"]
        print(f"mma {n_class}/{k_class}: table {_short(table_tiles)} {r['table_ms_total']} ms, best "
              f"{_short(tiles[best]) if best is not None else None} {r['best_ms_total']} ms "
              f"({r['best_vs_table']}x the table); the table {r['table_vs_cublas_bf16']}x cuBLAS bf16", flush=True)
        write_partial()
    return out


@contextlib.contextmanager
def _with_mma_tiles(t: Tiles, inner):
    """``inner`` with ``t`` as the mma table's large/large row (restored after)."""
    from kernelaudit.repro import tiles as tiles_mod

    key = ("mma", "large", "large")
    before = tiles_mod.TABLE[key]
    tiles_mod.TABLE[key] = t
    try:
        with inner:
            yield
    finally:
        tiles_mod.TABLE[key] = before


def _device_us(e, self_only: bool) -> float:
    """A profiler event's device time in us (``device_*`` on newer torch, ``cuda_*`` before)."""
    for name in (("self_device_time_total", "self_cuda_time_total") if self_only
                 else ("device_time_total", "cuda_time_total")):
        if hasattr(e, name):
            return float(getattr(e, name))
    return 0.0


@section("profile")
def profile(quick: bool):
    """Where the model's time goes under each order: wall per forward, device time per
    forward (kernels summed), and the kernels and ops that take it (torch.profiler)."""

    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    cfg = tinylm.LMConfig(**S["lm"])
    m = tinylm.build(cfg, dtype=torch.bfloat16, device=DEV)
    batch, plen = S["lm_batch"]
    ids = torch.randint(0, cfg.vocab, (batch, plen), generator=torch.Generator().manual_seed(3)).to(DEV)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if DEV == "cuda" else [])
    reps = 2 if quick else 5
    out = {"config": cfg.__dict__, "batch": batch, "prompt": plen, "forwards": reps}
    runs = [(None, "default"), ("mma", "mma"), ("ieee", "ieee")]
    best = (RES.get("model_tiles") or {}).get("best_tiles")
    if best:  # model_tiles ran first in this call: the model with its winner as the mma table row too
        runs.insert(2, ("mma", "mma_best"))
    for order, name in runs:
        ctx = deterministic(order) if order else contextlib.nullcontext()
        if name == "mma_best":
            ctx = _with_mma_tiles(Tiles(**best), ctx)
        with torch.inference_mode(), ctx:
            out[f"{name}_ms"] = round(bench(lambda: m(ids), 200), 3)
            with torch_profile(activities=acts) as prof:
                for _ in range(reps):
                    m(ids)
                if DEV == "cuda":
                    torch.cuda.synchronize()
        events = prof.key_averages()
        kernels = sorted(events, key=lambda e: -_device_us(e, True))
        out[f"{name}_device_ms_per_forward"] = round(sum(_device_us(e, True) for e in events) / reps / 1e3, 3)
        out[f"{name}_top"] = [{"name": e.key[:160], "calls_per_forward": e.count / reps,
                               "device_ms_per_forward": round(_device_us(e, True) / reps / 1e3, 4),
                               "cpu_ms_per_forward": round(e.self_cpu_time_total / reps / 1e3, 4)}
                              for e in kernels[:25]]
        out[f"{name}_cpu_top"] = [{"name": e.key[:160], "calls_per_forward": e.count / reps,
                                   "cpu_self_ms_per_forward": round(e.self_cpu_time_total / reps / 1e3, 4)}
                                  for e in sorted(events, key=lambda e: -e.self_cpu_time_total)[:15]]
        print(f"-- {name}: {out[f'{name}_ms']} ms a forward, device {out[f'{name}_device_ms_per_forward']} ms",
              flush=True)
        for r in out[f"{name}_top"][:15]:
            print(f"   {r['device_ms_per_forward']:9.4f} ms  x{r['calls_per_forward']:<5g} {r['name'][:100]}", flush=True)
    print({k: v for k, v in out.items() if not k.endswith("top")}, flush=True)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--sections", default="ceilings,decode,prefill,bits,invariance,model")
    p.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU (Triton interpreter): a dry run")
    p.add_argument("--decode-ms", default="", help="the decode section's M values, e.g. 2,4 (default 1,2,4,8,16)")
    p.add_argument("--prefill-k", type=int, default=0,
                   help="K (and N, unless --n) of the prefill section (default 8192); under 1024 the "
                        "sequential order's prefill rows")
    p.add_argument("--weight-dtype", default="bfloat16", choices=("bfloat16", "float32"),
                   help="the decode and prefill sections' weights (default bfloat16; float32: the "
                        "tables' fp32-weight order, against cuBLAS's fp32 GEMM)")
    p.add_argument("--decode-kn", default="",
                   help="its K (and N, unless --n) values, e.g. 8192 (default 4096,8192)")
    p.add_argument("--prefill-ms", default="", help="the prefill section's M values, e.g. 4096 (default 1024,4096,8192)")
    p.add_argument("--n", type=int, default=0,
                   help="N of the decode and prefill sections' GEMMs (default: N = K); under 1024 they time "
                        "the tables' small-N rows")
    a = p.parse_args(argv)
    global DEV, OUT_JSON
    chosen = {}
    if a.n and (a.n < 16 or a.n % 16):
        p.error(f"--n={a.n}: allowed values are multiples of 16 from 16 (or 0: N = K)")
    if a.n:
        chosen["n"] = a.n
    if a.prefill_k:
        if a.prefill_k not in (512, 768, 1024, 2048, 4096, 8192):
            p.error(f"--prefill-k={a.prefill_k}: allowed values are 512, 768, 1024, 2048, 4096, 8192")
        chosen["pk"] = a.prefill_k
    chosen["wdtype"] = getattr(torch, a.weight_dtype)
    for flag, key, allowed in (("--decode-ms", "ms", (1, 2, 4, 8, 16)),
                                ("--decode-kn", "decode", (512, 768, 1024, 2048, 4096, 8192)),
                                ("--prefill-ms", "prefill_ms", (1024, 4096, 8192))):
        given = getattr(a, flag[2:].replace("-", "_"))
        if given:
            try:
                vals = tuple(int(v) for v in given.split(","))
            except ValueError:
                vals = ()
            if not vals or not set(vals) <= set(allowed):
                p.error(f"{flag}={given!r}: allowed values are comma-separated {', '.join(map(str, allowed))}")
            chosen[key] = vals
    if a.smoke:
        DEV = "cpu"
        S.update(SMOKE)
        triton.testing.do_bench = lambda fn, **k: (lambda t0: (fn(), (time.perf_counter() - t0) * 1e3)[1])(
            time.perf_counter())
    S.update(chosen)
    a.out.mkdir(parents=True, exist_ok=True)
    OUT_JSON = a.out / "repro_gemm.json"
    RES["env"] = {"device": torch.cuda.get_device_name() if DEV == "cuda" else "cpu (smoke)",
                  "torch": torch.__version__, "triton": triton.__version__,
                  "cuda": torch.version.cuda, "python": platform.python_version(),
                  "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "argv": sys.argv,
                  "weight_dtype": str(S["wdtype"]).removeprefix("torch.")}
    steps = [s for s in a.sections.split(",") if s]

    def perf_from_sweep():
        RES["ieee_table_used"] = table_from_sweep()
        perf(a.quick)

    run = {"ceilings": ceilings, "clocks": clocks, "sweep": lambda: sweep(a.quick), "perf": perf_from_sweep,
           "decode": decode, "prefill": prefill, "bits": bits, "invariance": lambda: invariance(a.out, a.quick),
           "model": lambda: model(a.quick), "profile": lambda: profile(a.quick),
           "model_tiles": lambda: model_tiles(a.quick), "mma_rows": mma_rows}
    if not steps or set(steps) - set(run):
        p.error(f"--sections={a.sections!r}: allowed values are comma-separated {', '.join(run)}")
    for s in steps:
        run[s]()
        (a.out / "repro_gemm.json").write_text(json.dumps(RES, indent=1, default=str) + "\n")
    print(json.dumps({k: RES[k] for k in ("ceilings", "seconds") if k in RES}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
