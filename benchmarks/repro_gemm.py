"""repro (product 5) on one GPU: tile sweep, performance ratios, bit proofs, invariance.

Everything one lease needs, in one run, each section timed and fenced (a failing section
records its error and the next one runs):

1. ceilings: the fp32 FMA rate a Triton kernel reaches (independent FMA chains);
2. sweep: a few ``ieee`` tile configurations at a decode and a prefill shape (the table
   in ``tiles.py`` is edited from this, never chosen at run time);
3. perf: cuBLAS bf16, CastFloat32 (weights cast to fp32 in memory each call, fp32 matmul
   without TF32), ``ieee`` and ``mma`` side by side, decode M = 1..16 and prefill
   M = 1024..8192, weights rotated so that L2 never holds them;
4. bits: the compiled ``ieee`` kernel against the CPU emulator (columns slices), several
   dtypes, tails, tiles; every config of the sweep against each other;
5. invariance: ``kernelaudit repro``'s checker on cuBLAS bf16, ``ieee`` and ``mma``
   linear (M up to 8192), the companions, and the small transformer (logits, greedy
   tokens at batch 1 and 64) with its end-to-end time under ``deterministic()``.

    PYTHONPATH=src python benchmarks/repro_gemm.py --out $OUT [--quick]
"""

from __future__ import annotations

import argparse
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
from kernelaudit.repro.tiles import Tiles

import triton
import triton.language as tl

RES: dict = {}
DEV = "cuda"
#: shapes; --smoke shrinks them to run the whole script on a CPU (interpreter) first
S = {"decode": (4096, 8192), "ms": (1, 2, 4, 8, 16), "prefill": (1024, 2048, 4096, 8192), "pk": 8192,
     "sweep": (4, 8192, 2048, 4096, 4096, 8192), "inv_k": 4096, "inv_m": 8192, "kv": 512, "norm": 4096,
     "heads": 16, "norm_rows": 1024,
     "lm": dict(vocab=8192, length=256, dim=2048, heads=16, hidden=8192, layers=4), "lm_batch": (64, 128),
     "bits_scale": 1}
SMOKE = {"decode": (64,), "ms": (1, 4), "prefill": (64,), "pk": 64, "sweep": (4, 64, 64, 64, 64, 64),
         "inv_k": 64, "inv_m": 128, "kv": 16, "norm": 64, "heads": 1, "norm_rows": 64,
         "lm": dict(vocab=64, length=32, dim=32, heads=4, hidden=64, layers=1), "lm_batch": (64, 8),
         "bits_scale": 64}


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


@section("ceilings")
def ceilings():
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    block, iters, grid = 1024, 8192, sms * 16
    out = torch.empty(grid * block, device=DEV)
    ms = bench(lambda: _fma_peak[(grid,)](out, ITERS=iters, BLOCK=block, num_warps=8))
    fma_tflops = 2 * 8 * iters * block * grid / ms / 1e9
    a = torch.randn(8192, 8192, device=DEV, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=DEV, dtype=torch.bfloat16)
    bf16 = 2 * 8192**3 / bench(lambda: a @ b) / 1e9
    torch.backends.cuda.matmul.allow_tf32 = False
    a32, b32 = a.float(), b.float()
    fp32 = 2 * 8192**3 / bench(lambda: a32 @ b32, 200) / 1e9
    return {"fp32_fma_tflops": round(fma_tflops, 1), "cublas_bf16_tflops_8192": round(bf16, 1),
            "cublas_fp32_no_tf32_tflops_8192": round(fp32, 1), "sms": sms}


# -- operands ---------------------------------------------------------------------------------
def weights(n, k, copies, dtype=torch.bfloat16):
    """``copies`` weight sets [N, K] (rotated so that L2, ~60 MB, never holds the next one)."""
    g = torch.Generator(device=DEV).manual_seed(n + k)
    return [torch.randn(n, k, device=DEV, generator=g).to(dtype) for _ in range(copies)]


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
                Tiles(128, 128, 16, 8, 2, dot=True)]
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


# -- 4. bits: compiled ieee kernel == CPU emulator ----------------------------------------------
@section("bits")
def bits():
    cases = []
    g = torch.Generator().manual_seed(5)
    cols = 128
    specs = [  # (M, K, N, activation dtype, weight dtype, bias, tiles)
        (3, 4096, 4096, torch.bfloat16, torch.bfloat16, True, None),
        (5, 8192, 1024, torch.bfloat16, torch.bfloat16, False, best_tiles("ieee_decode")),
        (4, 1000, 300, torch.float32, torch.bfloat16, True, None),
        (2, 4099, 700, torch.float16, torch.float16, True, Tiles(16, 32, 8, 2, 2, tile8=True)),
        (7, 2048, 2048, torch.float32, torch.float16, False, best_tiles("ieee_prefill")),
        (64, 512, 256, torch.bfloat16, torch.bfloat16, True, Tiles(64, 64, 8, 4, 2, tile8=True)),
        (300, 4099, 256, torch.bfloat16, torch.bfloat16, True, None),          # prefill table, K tail
        (33, 1000, 200, torch.float32, torch.bfloat16, False, Tiles(128, 128, 32, 8, 2, dot=True)),
        (9, 2048, 512, torch.float16, torch.float16, True, Tiles(16, 16, 128, 2, 3, dot=True)),
    ]
    for m, k, n, adt, wdt, has_bias, t in specs:
        k, n = max(1, k // S["bits_scale"]) + 3 * (S["bits_scale"] > 1), max(1, n // S["bits_scale"])
        scale = 2.0 ** torch.randint(-20, 20, (m, 1), generator=g)   # wide exponents per row
        x = (torch.randn(m, k, generator=g) * scale).to(adt)
        w = torch.randn(n, k, generator=g).to(wdt)
        b = torch.randn(n, generator=g).to(wdt) if has_bias else None
        got = gemm.linear(x.to(DEV), w.to(DEV), None if b is None else b.to(DEV), tiles=t).cpu()
        ref = emulate.linear_ieee(x, w[:cols], None if b is None else b[:cols])
        same = torch.equal(got[:, :cols].contiguous().view(torch.uint8), ref.contiguous().view(torch.uint8))
        diff = int((got[:, :cols] != ref).sum())
        cases.append({"m": m, "k": k, "n": n, "activations": str(adt), "weights": str(wdt), "bias": has_bias,
                      "tiles": t.__dict__ if t else "table", "columns_checked": cols, "bit_equal": same,
                      "mismatched": diff})
        print(cases[-1], flush=True)
    # bmm and the mma order's run-to-run identity
    a, bb = torch.randn(3, 9, 640, generator=g).half(), torch.randn(3, 640, 40, generator=g).half()
    same = torch.equal(gemm.bmm(a.to(DEV), bb.to(DEV)).cpu(), emulate.bmm_ieee(a, bb))
    cases.append({"op": "bmm", "shape": [3, 9, 640, 40], "dtype": "float16", "bit_equal": same})
    return {"cases": cases, "all_equal": all(c["bit_equal"] for c in cases)}


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


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--sections", default="ceilings,sweep,perf,bits,invariance,model")
    p.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU (Triton interpreter): a dry run")
    a = p.parse_args(argv)
    global DEV
    if a.smoke:
        DEV = "cpu"
        S.update(SMOKE)
        triton.testing.do_bench = lambda fn, **k: (lambda t0: (fn(), (time.perf_counter() - t0) * 1e3)[1])(
            time.perf_counter())
    a.out.mkdir(parents=True, exist_ok=True)
    RES["env"] = {"device": torch.cuda.get_device_name() if DEV == "cuda" else "cpu (smoke)",
                  "torch": torch.__version__, "triton": triton.__version__,
                  "cuda": torch.version.cuda, "python": platform.python_version(),
                  "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "argv": sys.argv}
    steps = a.sections.split(",")
    for s in steps:
        if s == "ceilings":
            ceilings()
        elif s == "sweep":
            sweep(a.quick)
        elif s == "perf":
            RES["ieee_table_used"] = table_from_sweep()
            perf(a.quick)
        elif s == "bits":
            bits()
        elif s == "invariance":
            invariance(a.out, a.quick)
        elif s == "model":
            model(a.quick)
        (a.out / "repro_gemm.json").write_text(json.dumps(RES, indent=1, default=str) + "\n")
    print(json.dumps({k: RES[k] for k in ("ceilings", "seconds") if k in RES}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
