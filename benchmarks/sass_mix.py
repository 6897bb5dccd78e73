"""Static instruction mix of the ``flat`` projection kernel for sm_90, without a GPU.

Compiles ``kernels.freivalds._flat_kernel`` for an H100/H200 target (Triton's own
ptxas, disassembled by its nvdisasm) as the 2^32-element bf16 bmm check launches it
(C contiguous: its column stride specialised to 1, strides divisible by 16) and prints,
per basic block of 30 or more instructions, the count and the instructions that issue
to the integer (ALU) and the fused-multiply-add (FMA) pipes. The loops over A and B are
the blocks with the avalanche's SHF / LOP3 / IMAD; the hashing is ALU-bound on the H200
(ncu, ``benchmarks/results/2026-12-03-h200-flat-check-int64-fix/flat_ncu.txt``).

Counts are of the compiler on this machine (Triton 3.9's), not necessarily the one on
the device. Usage: python benchmarks/sass_mix.py [--interleave 0|1] [--rows 2]
[--sass OUT.sass]
"""

from __future__ import annotations

import argparse
import collections
import os
import re

os.environ["TRITON_INTERPRET"] = "0"  # compile, do not interpret

ALU = {"LOP3", "SHF", "ISETP", "SEL", "IADD3", "PRMT", "FSEL", "LEA", "FSETP", "IABS", "IMNMX", "VIADD", "FMNMX",
       "PLOP3", "MOV", "F2FP", "SGXT", "POPC", "FLO", "BREV"}
FMA = {"IMAD", "FFMA", "FADD", "FMUL", "IMUL", "HFMA2", "HADD2", "HMUL2"}


def blocks(sass: str) -> dict[str, collections.Counter]:
    """Opcode counts per basic block (label) of nvdisasm output."""
    out = {"entry": collections.Counter()}
    cur = "entry"
    for line in sass.splitlines():
        if re.match(r"^\.?L?\w+:$", line.strip()):
            cur = line.strip()[:-1]
            out[cur] = collections.Counter()
            continue
        parts = line.split("\t")
        if len(parts) < 2:
            continue
        ins = re.sub(r"^@!?U?P\w+\s+", "", parts[1].strip())
        out[cur][ins.split(" ")[0].rstrip(";").split(".")[0]] += 1
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--interleave", type=int, default=0, choices=(0, 1), help="C in step with the hashing")
    ap.add_argument("--rows", type=int, default=2, help="rows of C a step (CR)")
    ap.add_argument("--sass", default=None, help="also write the disassembly here")
    args = ap.parse_args()
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from kernelaudit.sweep.kernels import freivalds as fr

    i64 = "i64"
    sig = {"c_ptr": "*bf16", "sc0": i64, "sc1": i64, "sc2": i64, "sc3": "constexpr", "x_ptr": "*fp32",
           "y_ptr": "*fp32", "v_ptr": "*fp32", "out_ptr": "*fp64", "a_key": i64, "a_off": i64, "sa0": i64, "sa1": i64,
           "b_key": i64, "b_off": i64, "sb0": i64, "sb1": i64, "H": i64, "Mdim": "i32", "alpha": "fp32",
           **{k: "constexpr" for k in ("DT", "ACC", "BK", "BN", "BRA", "BRB", "CR", "MASKC", "INTERLEAVE", "STAGES")}}
    const = {"sc3": 1, "DT": 2, "ACC": tl.float32, "BK": 64, "BN": 256, "BRA": 16, "BRB": 4, "CR": args.rows,
             "MASKC": False, "INTERLEAVE": bool(args.interleave), "STAGES": 1}
    # pointers and the strides Triton sees divisible by 16 at the real launch
    attrs = {(i,): [["tt.divisibility", 16]] for i in (0, 1, 2, 3, 5, 6, 7, 8)}
    src = ASTSource(fn=fr._flat_kernel, signature=sig, constexprs=const, attrs=attrs)
    sass = triton.compile(src, target=GPUTarget("cuda", 90, 32)).asm["sass"]
    if args.sass:
        with open(args.sass, "w") as f:
            f.write(sass)
    for name, c in blocks(sass).items():
        n = sum(c.values())
        if n >= 30:
            alu = sum(v for k, v in c.items() if k in ALU)
            fma = sum(v for k, v in c.items() if k in FMA)
            print(f"{name}: {n} instructions, ALU {alu}, FMA {fma}; {dict(c.most_common(10))}")


if __name__ == "__main__":
    main()
