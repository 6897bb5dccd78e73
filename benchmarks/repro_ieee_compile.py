"""Compile the register-tiled ``ieee`` kernel for sm_90 on any machine (no GPU needed) and
report, per configuration, what decides its speed before a GPU is at hand: registers,
spill bytes, shared memory, and the instruction mix (FFMA share of the SASS).

Every configuration the H200 benchmark (``repro_gemm.py``, sections decode and prefill)
will time, and every table row, is listed; a spilling one is a bad candidate.

    PYTHONPATH=src python benchmarks/repro_ieee_compile.py [--out stats.json] [--only decode1,prefill]

Uses Triton's own ptxas and cuobjdump (``triton/backends/nvidia/bin``). Integers are
specialised as the launch would (unit strides, 16-divisible sizes and pointers). The
outer-batch strides (``s_a0`` ..., ``gemm._launch`` passes a 2-d GEMM's as those of a
leading dim of 1, multiples of K or N) and the absent bias' strides are 16-divisible at
a launch too: left unspecialised, the pointers' alignment is unknown and every load
compiles to 16-bit scalar loads (``LDG.E.U16``), which no launch runs. The K-lanes
kernel (:data:`~kernelaudit.repro.tiles.IEEE_LANES_TABLE`, the order of K >= 1024) is
compiled as the table launches it; ``loop`` is the instruction mix of its main K loop.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "0"  # compile, never interpret (explicit value wins in kernelaudit)

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from kernelaudit.repro import tiles as tiles_mod  # noqa: E402
from kernelaudit.repro.ieee_kernels import ieee_lanes_kernel, ieee_tiled_kernel  # noqa: E402
from kernelaudit.repro.sass import read_cubin  # noqa: E402

CONSTEXPR = ("HAS_BIAS", "OUT_BF16", "BM", "BN", "BK", "LANES", "LB", "GROUP_M", "PREFETCH", "WORDS", "TMA", "STAGES")
UNIT = ("s_ak", "s_bk", "s_cn", "s_xn")      # linear: x and the weight K-contiguous
DIV16 = ("a_ptr", "b_ptr", "bias_ptr", "c_ptr", "N", "K", "s_am", "s_bn", "s_cm", "s_ab", "s_bb", "s_cb",
         "s_a0", "s_b0", "s_x0", "s_c0", "s_xb", "s_xm")
#: ``split_lanes``: the fp32 scratch and its strides (a launch allocates it contiguous).
SUMS_DIV16 = ("p_ptr", "s_pl", "s_p0", "s_pb", "s_pm")


def _kernel_for(t: tiles_mod.Tiles, lanes: tiles_mod.Lanes | None):
    """The kernel a launch of ``t`` runs (bf16 operands; ``lanes`` None: sequential)."""
    if t.tiled:
        return ieee_lanes_kernel if lanes is not None else ieee_tiled_kernel
    from kernelaudit.repro import gemm

    return gemm._ieee_lane_sums_kernel if (t.split_lanes and lanes is not None) else gemm._ieee_kernel


def compile_stats(t: tiles_mod.Tiles, capability: int = 90, lanes: tiles_mod.Lanes | None = None,
                  words: bool = True) -> dict:
    """Registers, spills, shared memory and SASS mix of ``t`` (bf16 operands and output);
    with ``lanes``, of the launch in that order: the K-lanes kernel (``tiled``), the first
    pass of ``split_lanes``, or the plain kernel lane after lane (``dot``/explicit loop)."""
    if t.gluon and t.tiled:   # the Gluon decode kernel of the 8 x 8 order
        from kernelaudit.repro import ieee_gluon_decode

        c = ieee_gluon_decode.compile_for(t, capability)
        return _stats(read_cubin(c.asm["cubin"]), c)
    if t.gluon:   # the Gluon first pass of split_lanes (one lane: the sequential order)
        from kernelaudit.repro import ieee_gluon

        c = ieee_gluon.compile_for(t, lanes or tiles_mod.SEQUENTIAL, capability)
        return _stats(read_cubin(c.asm["cubin"]), c)
    kernel = _kernel_for(t, lanes)
    names = kernel.arg_names
    sig, const = {}, {}
    for n in names:
        # the launch upcasts them, unless act16
        tma_a32 = n == "a_ptr" and lanes is not None and t.tiled and t.tma and words and not t.act16
        sig[n] = ("*fp32" if n == "p_ptr" or tma_a32 else "*bf16" if n.endswith("_ptr") else "fp32" if n in ("alpha", "beta")
                  else "constexpr" if n in CONSTEXPR + UNIT + ("TILE8", "DOT") else "i32")
    const.update(HAS_BIAS=False, OUT_BF16=True, BM=t.bm, BN=t.bn, BK=t.bk, GROUP_M=t.group_m,
                 PREFETCH=t.prefetch, TILE8=t.tile8, DOT=t.dot, LANES=1, LB=1, **{n: 1 for n in UNIT})
    if lanes is not None:
        const.update(LANES=lanes.count, LB=lanes.block, WORDS=words and t.prefetch and not t.tma)
        if t.tiled:
            const.update(BK=max(t.bk, lanes.round), TMA=words and t.tma, PREFETCH=t.prefetch and not (words and t.tma),
                         STAGES=t.num_stages if (words and t.tma) else 1)
    const = {n: v for n, v in const.items() if n in names}
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in DIV16 + SUMS_DIV16 if n in names}
    src = triton.compiler.ASTSource(fn=kernel, signature=sig, constexprs=const, attrs=attrs)
    c = triton.compile(src, target=GPUTarget("cuda", capability, 32),
                       options=dict(num_warps=t.num_warps, num_stages=t.num_stages, enable_fp_fusion=True))
    return _stats(read_cubin(c.asm["cubin"]), c)


def _stats(sass, c) -> dict:
    loads = Counter(op for op in sass.opcodes() if op.startswith("LDG"))
    return {"registers": sass.registers, "stack_bytes": sass.stack_bytes, "shared_bytes": c.metadata.shared,
            "ffma_share": sass.ffma_share(), "global_loads": dict(loads), "loop": sass.main_loop(),
            "sass_top": sass.counts().most_common(5)}


def configurations() -> dict[str, tuple[tiles_mod.Tiles, tiles_mod.Lanes | None]]:
    from repro_gemm import PREFILL_CANDIDATES, decode_candidates, lanes_decode_candidates

    out = {f"table {r}/{n}": (t, None) for (r, n), t in tiles_mod.IEEE_TABLE.items() if t.tiled}
    import torch

    lanes = tiles_mod.ieee_lanes(8192, 8192, torch.bfloat16)  # the order of K >= 1024
    out.update({f"lanes {r}/{n}": (t, lanes) for (r, n), t in tiles_mod.IEEE_LANES_TABLE.items() if t.tiled})
    for rows in tiles_mod.DECODE_ROWS:
        out.update({f"decode{rows} cand{i}": (t, None) for i, t in enumerate(decode_candidates(rows))})
        out.update({f"lanes decode{rows} cand{i}": (t, lanes)
                    for i, t in enumerate(lanes_decode_candidates(rows))})
    out.update({f"prefill cand{i}": (t, None) for i, t in enumerate(PREFILL_CANDIDATES)})
    from repro_gemm import IEEE_PREFILL, LANES_PREFILL_CANDIDATES

    out.update({f"prefill sequential dot{i}": (t, None) for i, t in enumerate(IEEE_PREFILL)})
    out.update({f"prefill lanes cand{i}": (t, lanes) for i, t in enumerate(LANES_PREFILL_CANDIDATES)})
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path)
    p.add_argument("--only", default="", help="comma-separated name prefixes (e.g. decode1,prefill)")
    a = p.parse_args(argv)
    rows = {}
    for name, (t, lanes) in configurations().items():
        if a.only and not any(name.startswith(x) for x in a.only.split(",")):
            continue
        try:
            rows[name] = {"tiles": t.__dict__, "lanes": lanes.__dict__ if lanes else None,
                          **compile_stats(t, lanes=lanes)}
        except Exception as e:  # noqa: BLE001 - a configuration that does not compile is a finding
            rows[name] = {"tiles": t.__dict__, "error": f"{type(e).__name__}: {str(e)[:300]}"}
        r = rows[name]
        print(f"{name:22s} regs {r.get('registers')} stack {r.get('stack_bytes')} smem {r.get('shared_bytes')} "
              f"ffma {r.get('ffma_share')} loop ffma {r.get('loop', {}).get('ffma_share')} "
              f"loads {r.get('global_loads')} {r.get('error', '')}", flush=True)
    if a.out:
        a.out.write_text(json.dumps({"triton": triton.__version__, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
