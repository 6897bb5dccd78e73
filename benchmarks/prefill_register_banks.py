"""Register-bank reads of the ``ieee`` prefill first pass's K loop, compiled for sm_90 on
any machine (no GPU; Triton's own ptxas and cuobjdump), per variant of
``benchmarks/prefill_lanes_ab.py``: registers, stack bytes, the loop's FFMA, and how many
read two or three of their sources from one register bank after the reuse cache
(:meth:`kernelaudit.repro.sass.Sass.ffma_bank_reads`; two banks, and four). A static
model of ptxas's allocation beside the A/B's timings, not a measurement of the banks.

    PYTHONPATH=src python benchmarks/prefill_register_banks.py [--variants ws,ws_rul10] [--out banks.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "0"  # compile, never interpret

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from prefill_lanes_ab import VARIANTS  # noqa: E402

from kernelaudit.repro import ieee_gluon  # noqa: E402
from kernelaudit.repro.sass import read_cubin  # noqa: E402
from kernelaudit.repro.tiles import Lanes  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, from {', '.join(VARIANTS)}")
    p.add_argument("--out", type=Path)
    a = p.parse_args(argv)
    names = [v for v in a.variants.split(",") if v]
    bad = [v for v in names if v not in VARIANTS]
    if bad:
        p.error(f"--variants: unknown {bad}; allowed values are {', '.join(VARIANTS)}")
    import triton

    rows = {}
    for v in names:
        sass = read_cubin(ieee_gluon.compile_for(VARIANTS[v], Lanes(8, 8), 90).asm["cubin"])
        two, four = sass.ffma_bank_reads(2), sass.ffma_bank_reads(4)
        rows[v] = {"tiles": str(VARIANTS[v]), "registers": sass.registers, "stack_bytes": sass.stack_bytes,
                   "loop_instructions": len(sass.loop_opcodes()), "two_banks": two, "four_banks": four}
        print(f"{v:10s} regs {sass.registers} stack {sass.stack_bytes} loop {len(sass.loop_opcodes())} "
              f"FFMA {two['ffma']}: 2 banks {two['two_in_one_bank']} two / {two['three_in_one_bank']} three, "
              f"4 banks {four['two_in_one_bank']} / {four['three_in_one_bank']}", flush=True)
    if a.out:
        a.out.write_text(json.dumps({"triton": triton.__version__, "target": "sm_90", "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
