"""What a compiled kernel runs: registers, spills and the SASS instruction mix of a cubin.

Read with the ``cuobjdump`` that Triton's NVIDIA backend ships, so a CPU-only machine
can check the code a kernel compiles to for a GPU it does not have (``triton.compile``
with a ``GPUTarget``). Used by the repro tests (no spills, the FFMA share of the K loop)
and by ``benchmarks/repro_ieee_compile.py``.
"""
from __future__ import annotations

import re
import subprocess
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

#: One SASS instruction: ``/*0a40*/  @!P0 FFMA R1, R2, R3, R1 ;`` gives (0x0a40, "FFMA", line).
_INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)")
#: An FFMA's destination and three sources, each with its reuse flag: ``FFMA R1, R2.reuse, -R3, R1``.
_FFMA = re.compile(r"FFMA\S*\s+R\w+,\s*-?\|?(R\w+)\|?(\.reuse)?,\s*-?\|?(R\w+)\|?(\.reuse)?,\s*-?\|?(R\w+)\|?(\.reuse)?")
#: A branch to an absolute address: ``BRA 0x1a30``.
_BRANCH = re.compile(r"BRA\s+0x([0-9a-f]+)")


@dataclass(frozen=True)
class Sass:
    """A cubin as cuobjdump reads it: its resource usage and its instructions in address order."""

    registers: int | None
    stack_bytes: int | None
    instructions: tuple[tuple[int, str, str], ...]   # (address, opcode with modifiers, source line)

    def opcodes(self) -> list[str]:
        """Every instruction's opcode with its modifiers (``LDS.128``), in address order."""
        return [op for _, op, _ in self.instructions]

    def counts(self) -> Counter:
        """Instructions per base opcode (``LDS.128`` counts as ``LDS``)."""
        return Counter(op.split(".")[0] for op in self.opcodes())

    def ffma_share(self) -> float:
        c = self.counts()
        return round(c["FFMA"] / max(1, sum(c.values())), 3)

    def loop_opcodes(self) -> list[str]:
        """The opcodes with modifiers of the longest innermost backward-branch loop (a
        GEMM's K loop), in address order; [] where nothing branches back.

        Innermost: no other back branch lies inside it. An mbarrier wait compiles to a
        try-wait in the loop whose retry is an out-of-line stub after the kernel's end,
        branching back into the loop: its span (loop head to stub) would hold the K loop,
        the epilogue and the tail, and is no loop of its own."""
        return [op for _, op, _ in self._loop()]

    def _loop(self) -> list[tuple[int, str, str]]:
        """The instructions of :meth:`loop_opcodes`' loop."""
        back = [(int(m.group(1), 16), a) for a, _, line in self.instructions
                if (m := _BRANCH.search(line)) and int(m.group(1), 16) < a]
        inner = [(t, a) for t, a in back if not any(t <= a2 < a for _, a2 in back)]
        if not inner:
            return []
        lo, hi = max(inner, key=lambda ta: ta[1] - ta[0])
        return [i for i in self.instructions if lo <= i[0] <= hi]

    def ffma_bank_reads(self, banks: int = 2) -> dict:
        """A static model of register-bank read conflicts in the K loop's FFMA: the source
        registers each FFMA reads from the register file (a source the instruction before
        marked ``.reuse`` in the same operand slot, with the same register, comes from the
        reuse cache instead), and how many FFMA read two, or three, of them from one bank
        (register number modulo ``banks``). A model of ptxas's allocation, not a
        measurement: NVIDIA documents neither the banks nor their conflicts."""
        ffma = two = three = 0
        cached: dict[int, str | None] = {}
        for _, op, line in self._loop():
            m = _FFMA.search(line) if op.startswith("FFMA") else None
            if not m:
                cached = {}
                continue
            ffma += 1
            read = []
            for slot in range(3):
                reg, reuse = m.group(2 * slot + 1), m.group(2 * slot + 2)
                if cached.get(slot) != reg and reg != "RZ":
                    read.append(int(reg[1:]) % banks)
                cached[slot] = reg if reuse else None
            most = max((read.count(b) for b in range(banks)), default=0)
            two += most >= 2
            three += most >= 3
        return {"ffma": ffma, "two_in_one_bank": two, "three_in_one_bank": three, "banks": banks}

    def main_loop(self) -> dict:
        """The longest backward-branch loop (a GEMM's K loop): its instruction count, its
        FFMA share and its 8 commonest base opcodes; {} where nothing branches back."""
        ops = Counter(op.split(".")[0] for op in self.loop_opcodes())
        if not ops:
            return {}
        n = sum(ops.values())
        return {"instructions": n, "ffma_share": round(ops["FFMA"] / max(1, n), 3), "top": ops.most_common(8)}


def cuobjdump() -> Path:
    """The cuobjdump of Triton's NVIDIA backend (FileNotFoundError naming the path if absent)."""
    import triton

    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    if not tool.exists():
        raise FileNotFoundError(f"no cuobjdump at {tool}: this Triton has no NVIDIA backend binaries")
    return tool


def read_cubin(cubin: bytes) -> Sass:
    """Registers, stack bytes (spills) and instructions of one cubin."""
    tool = cuobjdump()
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "k.cubin"
        path.write_bytes(cubin)
        usage = subprocess.run([tool, "--dump-resource-usage", path], capture_output=True, text=True, check=True).stdout
        text = subprocess.run([tool, "-sass", path], capture_output=True, text=True, check=True).stdout
    return parse(usage, text)


def parse(usage: str, text: str) -> Sass:
    """A :class:`Sass` from cuobjdump's ``--dump-resource-usage`` and ``-sass`` outputs."""
    regs, stack = re.search(r"REG:(\d+)", usage), re.search(r"STACK:(\d+)", usage)
    ins = tuple((int(a, 16), op, line) for line in text.splitlines() for a, op in _INSTRUCTION.findall(line))
    return Sass(int(regs.group(1)) if regs else None, int(stack.group(1)) if stack else None, ins)
