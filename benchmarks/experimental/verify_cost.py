"""Cost of verifying a bmm that produces >= 2^32 elements, beside the bmm itself.

Side by side in one run, on one device, for the out-crossing series
(B,256,64) x (B,64,256), B = 65537 (2^32 + 65536 output elements):

* ``bmm``: the op under test (median of timed runs, CUDA events);
* ``verify``: kernelaudit's matmul oracle as the sweep runs it on CUDA: the projections
  ``y A`` and ``B x`` made while the inputs are generated (what that adds to plain
  generation is counted: ``generation_with_projections_s - generation_s``), then one
  pass over C and the spot checks (``check_with_projections_s``);
* ``verify_regenerating``: the same check regenerating A and B itself (no projections
  at generation), never reading the op's inputs back either;
* ``full_ref``: a full float64 reference of the same output, chunked below 2^31.

Usage: python benchmarks/verify_cost.py --out RESULT.json [--dtypes bfloat16,float16,float32]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
import json
import platform
import time

import torch
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for _common
from _common import crossing_bmm, cuda_median, whole_check  # noqa: E402

from kernelaudit.sweep.judge.reference import RefContext, default_ref_chunk
from kernelaudit.sweep.judge.matmul import _fused_freivalds_enabled
from kernelaudit.thresholds import REAL


def _time(fn, reps=5):
    return cuda_median(fn, reps)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--dtypes", default="bfloat16,float16,float32")
    ap.add_argument("--explore", action="store_true", help="also time the fused kernel at other tile shapes")
    ap.add_argument("--ncu", action="store_true",
                    help="only launch each kernel of the check once (for a profiler: ncu -k ...), time nothing")
    ap.add_argument("--flat-tiles", action="store_true",
                    help="also time the whole check at other tiles and orders of the flat kernel, side by side")
    args = ap.parse_args()
    dev = torch.device("cuda")
    rows = []
    for dtype in args.dtypes.split(","):
        case, placed, a, b, c = crossing_bmm(dtype, dev)
        B = case.batch
        t_bmm = _time(lambda: torch.bmm(a, b, out=c))
        # The floor of any check: one read of C (a float32-accumulated sum, memory-bound).
        t_read = _time(lambda: c.sum(dtype=torch.float32))
        chunk = default_ref_chunk(dev)
        if args.ncu:
            _ncu_launches(case, placed, c, dev, chunk, B)
            continue

        def verify(projections=None):
            whole_check(case, placed, c, dev, projections)

        # Inputs generated with their projections (what the sweep does on CUDA): the
        # check then reads only C; what that costs on top of plain generation counts.
        from kernelaudit.sweep.judge.operands import device_inputs
        from kernelaudit.sweep.judge.matmul import inputs_with_projections
        t_gen = _time(lambda: device_inputs(placed, dev, grad=False), reps=3)
        proj = {}
        t_gen_proj = _time(lambda: proj.update(inputs_with_projections(case, placed, dev)[2]), reps=3)
        t_check_pre = _time(lambda: verify(proj), reps=3)
        t_ver_pre = t_check_pre + max(0.0, t_gen_proj - t_gen)

        def full_ref():
            ctx = RefContext(case, placed, dev, chunk)
            step = max(1, chunk // (256 * 256))
            worst = torch.zeros((), dtype=torch.float64, device=dev)
            for b0 in range(0, B, step):
                b1 = min(B, b0 + step)
                ra, _ = ctx.operand(0, b0, b1)
                rb, _ = ctx.operand(1, b0, b1)
                worst = torch.maximum(worst, (torch.bmm(ra, rb) - c[b0:b1].double()).abs().max())

        def kernel_only(blocks=None, num_warps=4, kernel=None):  # the fused projection alone, no spot checks
            from freivalds_variants import freivalds_variant

            from kernelaudit.sweep.kernels.freivalds import freivalds
            from kernelaudit.sweep.judge.matmul import _desc, _matmul_operands
            import kernelaudit.sweep.gen as gen
            ctx = RefContext(case, placed, dev, chunk)
            Am, Bmm, _, alpha, beta = _matmul_operands(case, ctx, 0, B, B, meta=True)
            x = gen.values_at(torch.arange(256, device=dev), 1, torch.float64)
            args = (c.view(B, 1, 256, 256), x, x, _desc(ctx, Am), _desc(ctx, Bmm), None, 64, alpha, beta, c.dtype)
            if kernel is None:  # the product's choice
                freivalds(*args, blocks=blocks, num_warps=num_warps)
            else:
                freivalds_variant(kernel, *args, blocks=blocks, num_warps=num_warps)

        t_kernel = _time(kernel_only, reps=3) if _fused_freivalds_enabled(dev) else None

        def spots_only():  # the spot-check kernel alone, at the sweep's spot indexes
            from kernelaudit.sweep.kernels.freivalds import spots
            from kernelaudit.sweep.judge.matmul import _desc, _matmul_operands, _spot_indices
            ctx = RefContext(case, placed, dev, chunk)
            Am, Bmm, _, alpha, beta = _matmul_operands(case, ctx, 0, B, B, meta=True)
            flat = _spot_indices(0, B, 65536, REAL.t31, dev)
            bb, rem = flat // 65536, flat % 65536
            spots(c.view(B, 1, 256, 256), _desc(ctx, Am), _desc(ctx, Bmm), None, 64, alpha, beta, c.dtype,
                  bb, torch.zeros_like(bb), rem // 256, rem % 256)

        t_spots = _time(spots_only, reps=3) if _fused_freivalds_enabled(dev) else None
        configs = {}
        # fp16 behaves as bf16 (same sizes, same sums): explored once, for bf16
        if args.explore and _fused_freivalds_enabled(dev) and dtype != "float16":
            configs = _explore(case, placed, c, dev, chunk, B, kernel_only)
            print(dtype, configs, flush=True)
            tuned = _tuned_verify(configs, case, placed, dev, verify, t_gen)
            configs.update(tuned)
            print(dtype, tuned, flush=True)
        t_ver = _time(verify, reps=3)
        by_kernel = {}
        if args.flat_tiles:  # the flat kernel's tile (C rows, stages, warps, elements of an A/B tile),
            # C streamed in step with the hashing or before it
            for inter in (True, False):
                for t in ((8, 1, 4, 1024), (8, 2, 4, 1024), (8, 3, 4, 1024), (16, 1, 4, 1024),
                          (4, 1, 4, 1024), (8, 1, 8, 1024), (8, 1, 4, 2048), (8, 1, 4, 512),
                          (16, 1, 8, 2048), (8, 3, 8, 2048)):
                    def tuned(t=t, inter=inter):
                        whole_check(case, placed, c, dev, flat_tile=t, flat_interleave=inter)
                    tuned()
                    by_kernel["flat-" + ("" if inter else "seq-") + "-".join(map(str, t))] = _time(tuned, reps=5)
        if by_kernel:
            by_kernel["default"] = _time(verify, reps=5)
            print(dtype, "whole regenerating check by kernel", by_kernel, flush=True)
        t_full = _time(full_ref, reps=3)
        rows.append({"dtype": dtype, "batch": B, "out_elements": B * 65536, "bmm_s": t_bmm, "read_c_s": t_read,
                     "verify_s": t_ver_pre, "verify_over_bmm": t_ver_pre / t_bmm,
                     "check_with_projections_s": t_check_pre, "generation_s": t_gen,
                     "generation_with_projections_s": t_gen_proj,
                     "verify_regenerating_s": t_ver, "verify_regenerating_over_bmm": t_ver / t_bmm,
                     "fused_kernel_s": t_kernel, "spot_kernel_s": t_spots, "kernel_configs_s": configs,
                     "verify_regenerating_by_kernel_s": by_kernel,
                     "full_ref_s": t_full, "full_ref_over_bmm": t_full / t_bmm})
        print(rows[-1], flush=True)
        torch.cuda.empty_cache()
    res = {"date": time.strftime("%Y-%m-%d"), "device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "triton": _triton(), "python": platform.python_version(), "rows": rows}
    with open(args.out, "w") as f:
        json.dump(res, f, indent=2)


def _explore(case, placed, c, dev, chunk, B, kernel_only) -> dict:
    """Times of the pieces at other tile shapes: the regenerating kernel (rowsum against
    the product's row-sum kernel, C's strides specialised), generation with projections (A and B, elements per tile and warps),
    and the stream over C that uses them (rows per program and warps)."""
    from kernelaudit.sweep.kernels.freivalds import freivalds_projected, generate_and_project
    from kernelaudit.sweep.judge.reference import RefContext
    from kernelaudit.sweep.judge.matmul import _desc, _matmul_operands, _projection_vector

    configs = {}
    for kern, bm, bn, w in (("rowsum", 32, 32, 4), ("product", 32, 32, 4)):
        configs[f"{kern}-BM{bm}-BN{bn}-W{w}"] = _time(lambda: kernel_only((bm, bn), w, kern), reps=3)
    ctx = RefContext(case, placed, dev, chunk)
    Am, Bmm, _, alpha, beta = _matmul_operands(case, ctx, 0, B, B, meta=True)
    x = _projection_vector(case.seed, "x", 256, dev)
    y = _projection_vector(case.seed, "y", 256, dev)
    sa = torch.empty(placed[0].storage_numel, dtype=c.dtype, device=dev)
    sb = torch.empty(placed[1].storage_numel, dtype=c.dtype, device=dev)
    pre = {}

    def gen_proj(tile, w):
        pre["A"] = generate_and_project(sa, _desc(ctx, Am), tuple(Am.shape), y, False, tile=tile, num_warps=w)
        pre["B"] = generate_and_project(sb, _desc(ctx, Bmm), tuple(Bmm.shape), x, True, tile=tile, num_warps=w)

    for tile, w in ((256, 2), (512, 4), (1024, 4)):
        configs[f"genproj-T{tile}-W{w}"] = _time(lambda: gen_proj(tile, w), reps=3)
    # each operand alone, B walked both ways (column strips, or whole rows)
    dA, dB = _desc(ctx, Am), _desc(ctx, Bmm)
    for tile, w in ((512, 4), (1024, 4), (2048, 8)):
        configs[f"genproj-A-T{tile}-W{w}"] = _time(
            lambda: generate_and_project(sa, dA, tuple(Am.shape), y, False, tile=tile, num_warps=w), reps=3)
        for rowwise in (False, True):
            configs[f"genproj-B-rowwise{int(rowwise)}-T{tile}-W{w}"] = _time(
                lambda: generate_and_project(sb, dB, tuple(Bmm.shape), x, True, tile=tile, num_warps=w,
                                             rowwise=rowwise), reps=3)
    configs["gen-A"] = _time(lambda: _gen_plain(sa, placed[0]), reps=3)
    configs["gen-B"] = _time(lambda: _gen_plain(sb, placed[1]), reps=3)
    C = c.view(B, 1, 256, 256)
    # (rows, warps, iterations, pipeline stages) of the C stream
    for t in ((2, 1), (4, 2), (8, 2), (8, 4), (16, 4), (32, 8), (4, 2, 8, 1), (4, 2, 8, 3), (8, 4, 4, 2),
              (8, 4, 8, 3), (8, 4, 32, 3), (16, 4, 4, 2), (16, 8, 16, 3), (32, 8, 8, 2), (64, 8, 4, 2)):
        configs["lhs-" + "-".join(map(str, t))] = _time(
            lambda: freivalds_projected(C, x, y, pre["A"], pre["B"], None, alpha, beta, c.dtype, tile=t), reps=3)
    from freivalds_variants import freivalds_split
    for rows, w in ((4, 1), (4, 2), (8, 2), (8, 4), (16, 2), (16, 4), (32, 4)):
        configs[f"split-R{rows}-W{w}"] = _time(
            lambda: freivalds_split(C, x, y, dA, dB, None, 64, alpha, beta, c.dtype, tile=(rows, w)), reps=3)
    return configs


def _ncu_launches(case, placed, c, dev, chunk, B) -> None:
    """One launch of each kernel of the check, in a fixed order, for ``ncu``: plain
    generation of A and B, generation with projections (B both ways), the C stream
    (default tile, then a looped pipelined one), the split and the product's row-sum kernels."""
    from freivalds_variants import freivalds_split

    from kernelaudit.sweep.kernels.freivalds import freivalds_projected, freivalds_rowsum, generate_and_project
    from kernelaudit.sweep.judge.reference import RefContext
    from kernelaudit.sweep.judge.matmul import _desc, _matmul_operands, _projection_vector

    ctx = RefContext(case, placed, dev, chunk)
    Am, Bmm, _, alpha, beta = _matmul_operands(case, ctx, 0, B, B, meta=True)
    dA, dB = _desc(ctx, Am), _desc(ctx, Bmm)
    x = _projection_vector(case.seed, "x", 256, dev)
    y = _projection_vector(case.seed, "y", 256, dev)
    sa = torch.empty(placed[0].storage_numel, dtype=c.dtype, device=dev)
    sb = torch.empty(placed[1].storage_numel, dtype=c.dtype, device=dev)
    _gen_plain(sa, placed[0])
    _gen_plain(sb, placed[1])
    pa = generate_and_project(sa, dA, tuple(Am.shape), y, False)
    pb = generate_and_project(sb, dB, tuple(Bmm.shape), x, True, rowwise=False)
    generate_and_project(sb, dB, tuple(Bmm.shape), x, True, rowwise=True)
    C = c.view(B, 1, 256, 256)
    freivalds_projected(C, x, y, pa, pb, None, alpha, beta, c.dtype, tile=(4, 2, 1, 1))
    freivalds_projected(C, x, y, pa, pb, None, alpha, beta, c.dtype, tile=(8, 4, 8, 3))
    freivalds_split(C, x, y, dA, dB, None, 64, alpha, beta, c.dtype)
    freivalds_rowsum(C, x, y, dA, dB, None, 64, alpha, beta, c.dtype)
    torch.cuda.synchronize()


def _tuned_verify(configs: dict, case, placed, dev, verify, t_gen) -> dict:
    """The whole check with projections made at generation, re-timed with the fastest
    C-stream tile and B walk that ``configs`` measured, its kernels profiled."""
    import kernelaudit.sweep.kernels.freivalds as fr
    from kernelaudit.sweep.judge.matmul import inputs_with_projections

    lhs = min((k for k in configs if k.startswith("lhs-")), key=configs.get)
    rowwise = min((k for k in configs if k.startswith("genproj-B-")), key=configs.get).startswith("genproj-B-rowwise1")
    old = fr.LHS_TILE, fr.GEN_ROWWISE
    tile = tuple(int(v) for v in lhs.split("-")[1:])
    fr.LHS_TILE, fr.GEN_ROWWISE = (tuple(tile) + (1, 1))[:4], rowwise
    try:
        proj = {}
        t_gp = _time(lambda: proj.update(inputs_with_projections(case, placed, dev)[2]), reps=3)
        t_chk = _time(lambda: verify(proj), reps=5)
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            verify(proj)
            torch.cuda.synchronize()
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=14), flush=True)
    finally:
        fr.LHS_TILE, fr.GEN_ROWWISE = old
    return {"tuned_lhs_tile": list(tile), "tuned_rowwise": rowwise,
            "tuned_generation_with_projections_s": t_gp, "tuned_check_with_projections_s": t_chk,
            "tuned_verify_s": t_chk + max(0.0, t_gp - t_gen)}


def _gen_plain(storage, p):
    """Plain generation of one operand's storage (what device_inputs does for it)."""
    from kernelaudit.sweep.kernels import gen as kgen
    kgen.fill_range(storage, 0, p.key)


def _triton():
    try:
        import triton
        return triton.__version__
    except ImportError:
        return None


if __name__ == "__main__":
    main()
