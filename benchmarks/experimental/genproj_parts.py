"""Where generate-and-project's time goes: variants that leave one stage out.

On the H200 the plain generation of a 2^30-element bf16 operand takes about 0.86 ms
(integer-pipe bound, about 20 instructions an element), and generating it with its
projection ``y A`` about 2.4 ms. This script times, side by side on one operand of the
2^32-element bmm (65537 x 256 x 64, bf16): the full kernel, the kernel without the
projection sums, without the store, without the float conversion, the same 2-D walk
with a one-program-per-tile grid, and the 1-D generation kernel.

Usage: python benchmarks/genproj_parts.py --out RESULT.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
import json
import platform
import time

import torch
import triton
import triton.language as tl
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for _common
from _common import cuda_median  # noqa: E402

from kernelaudit.sweep.kernels.gen import fill_range, hash_u32_at, unit_float


@triton.jit
def _variant(st_ptr, w_ptr, proj_ptr, key, s0, R, Cn, s2,
             PROJ: tl.constexpr, STORE: tl.constexpr, FLOAT: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr,
             ONE_TILE: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    base = pid * s0
    cs = tl.arange(0, BC)
    acc = tl.zeros([BR, BC], dtype=tl.float32)
    acca = tl.zeros([BR, BC], dtype=tl.float32)
    hsum = tl.zeros([BR, BC], dtype=tl.uint32)
    if ONE_TILE:  # grid (matrices, R // BR): one tile a program
        lo_r = tl.program_id(1) * BR
        hi_r = lo_r + BR
    else:
        lo_r = 0
        hi_r = R
    for r0 in range(lo_r, hi_r, BR):
        rs = r0 + tl.arange(0, BR)
        off = rs[:, None] * s2 + cs[None, :]
        x = hash_u32_at(base, off, key)
        if FLOAT:
            v = unit_float(x, 2)
            if STORE:
                tl.store(st_ptr + base + off, v.to(tl.bfloat16))
            if PROJ:
                w = tl.load(w_ptr + rs)
                acc += v * w[:, None]
                acca += tl.abs(v) * tl.abs(w)[:, None]
            else:
                acc += v
        else:
            hsum += x
    if FLOAT:
        out = tl.sum(acc, axis=0) + tl.sum(acca, axis=0)
    else:
        out = tl.sum(hsum, axis=0).to(tl.float32)
    if ONE_TILE:
        tl.atomic_add(proj_ptr + pid * Cn + cs, out)
    else:
        tl.store(proj_ptr + pid * Cn + cs, out)


def _time(fn, reps=5):
    return cuda_median(fn, reps)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=7, help="timed runs per variant (1 under a profiler)")
    args = ap.parse_args()
    nb, R, Cn = 65537, 256, 64
    st = torch.empty(nb * R * Cn, dtype=torch.bfloat16, device="cuda")
    w = torch.rand(R, dtype=torch.float32, device="cuda")
    proj = torch.zeros(nb * Cn, dtype=torch.float32, device="cuda")
    key = 12345
    reps = args.reps
    res = {"gen_1d": _time(lambda: fill_range(st, 0, key), reps)}
    for name, proj_on, store, flt, br, warps, one in (
            ("full_T512_W4", 1, 1, 1, 8, 4, 0), ("full_T1024_W4", 1, 1, 1, 16, 4, 0),
            ("full_T1024_W8", 1, 1, 1, 16, 8, 0), ("full_T2048_W8", 1, 1, 1, 32, 8, 0),
            ("no_proj", 0, 1, 1, 16, 4, 0), ("no_store", 1, 0, 1, 16, 4, 0),
            ("hash_only", 0, 0, 0, 16, 4, 0), ("float_only", 0, 0, 1, 16, 4, 0),
            ("full_one_tile_T1024_W4", 1, 1, 1, 16, 4, 1), ("full_one_tile_T2048_W8", 1, 1, 1, 32, 8, 1)):
        grid = (nb, R // br) if one else (nb,)
        res[name] = _time(lambda: _variant[grid](st, w, proj, key, R * Cn, R, Cn, Cn, PROJ=proj_on, STORE=store,
                                                 FLOAT=flt, BR=br, BC=Cn, ONE_TILE=one, num_warps=warps), reps)
    for k, v in res.items():
        print(f"{k:28s} {v * 1e3:7.3f} ms")
    out = {"date": time.strftime("%Y-%m-%d"), "device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "triton": triton.__version__, "python": platform.python_version(), "elements": nb * R * Cn,
           "seconds": res}
    with open(args.out, "w") as f:
        json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
