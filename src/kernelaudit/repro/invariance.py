"""The invariance checker: does a function give the same bits for the same sample,
run after run, at every batch size and at every position in the batch?

A *subject* is ``fn(x) -> y`` where ``x`` and ``y`` share a leading batch dimension and
row ``i`` of ``y`` should depend on row ``i`` of ``x`` alone (a matmul ``x @ W``, a
model's logits for a batch of sequences). The reference is ``fn(x[:1])[0]``: sample 0
alone. Three probes, each compared with the reference bit for bit:

* ``run``: ``fn(x[:B])`` again and again at the largest batch size B, against its first
  output (every row);
* ``batch``: row 0 of ``fn(x[:M])`` for each batch size M;
* ``position``: sample 0 placed at row p of an otherwise unchanged batch of B rows.

A mismatch is measured in ULPs of the output dtype (the distance between the two values'
positions in the ordered list of that dtype's floats). NaN equals NaN of the same bits.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

import torch

from ..errors import InvalidArgument, KernelAuditError

PROBES = ("run", "batch", "position")
_INT_OF = {2: torch.int16, 4: torch.int32, 8: torch.int64}


def ordered(x: torch.Tensor) -> torch.Tensor:
    """Floats as int64 keys whose differences count ULPs (sign-magnitude -> two's complement;
    +0 and -0 both map to 0)."""
    bits = x.contiguous().view(_INT_OF[x.element_size()]).long()
    sign_bit = 1 << (8 * x.element_size() - 1)
    return torch.where(bits < 0, -(bits & (sign_bit - 1)), bits)


@dataclass(frozen=True)
class Probe:
    """One comparison: ``probe`` kind at ``setting`` (run index, batch size or position),
    ``mismatched`` of ``total`` elements differ, at most ``max_ulps`` apart, the first at
    ``first_index`` (within the compared row(s))."""

    probe: str
    setting: int
    mismatched: int
    total: int
    max_ulps: int
    first_index: tuple[int, ...] | None = None

    @property
    def equal(self) -> bool:
        return self.mismatched == 0


def compare(probe: str, setting: int, got: torch.Tensor, ref: torch.Tensor) -> Probe:
    """Bitwise comparison of two tensors of one shape and dtype."""
    if got.shape != ref.shape or got.dtype != ref.dtype:
        raise InvalidArgument(f"Cannot compare {probe}={setting}: got {tuple(got.shape)} {got.dtype}, "
                              f"reference {tuple(ref.shape)} {ref.dtype}")
    if not got.is_floating_point():
        diff = (got != ref)
        ulps = diff.long()
    else:
        kg, kr = ordered(got), ordered(ref)
        diff = kg != kr
        ulps = (kg - kr).abs()
    n = int(diff.sum())
    first = tuple(int(i) for i in diff.nonzero()[0]) if n else None
    return Probe(probe, setting, n, got.numel(), int(ulps.max()) if n else 0, first)


@dataclass
class Report:
    """Every probe of one subject, and what they add up to."""

    subject: str
    device: str
    dtype: str
    probes: list[Probe] = field(default_factory=list)
    error: str | None = None

    @property
    def judged(self) -> bool:
        return self.error is None and bool(self.probes)

    @property
    def invariant(self) -> bool:
        return self.judged and all(p.equal for p in self.probes)

    def of(self, probe: str) -> list[Probe]:
        return [p for p in self.probes if p.probe == probe]

    def diverges_from(self, probe: str = "batch") -> int | None:
        """The smallest setting from which every probe of that kind diverges (None if
        the last one is equal)."""
        first = None
        for p in sorted(self.of(probe), key=lambda p: p.setting):
            if p.equal:
                first = None
            elif first is None:
                first = p.setting
        return first

    def to_json(self) -> dict:
        return {"subject": self.subject, "device": self.device, "dtype": self.dtype,
                "judged": self.judged, "invariant": self.invariant, "error": self.error,
                "diverges_from": {k: self.diverges_from(k) for k in PROBES},
                "probes": [asdict(p) | {"equal": p.equal} for p in self.probes]}


def check(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, *, subject: str = "fn",
          batch_sizes: Sequence[int] = (1, 2, 4, 8, 16, 32, 64, 128), positions: Sequence[int] | None = None,
          runs: int = 3, progress: Callable[[int, int, str], None] | None = None) -> Report:
    """Probe ``fn`` on the samples ``x`` (leading dim: at least ``max(batch_sizes)``).
    ``positions`` default: 1, the middle and the last row of the largest batch. An
    exception from ``fn`` is recorded (``error``): the subject could not be judged.
    ``progress(done, total, what)`` is called before each call of ``fn``."""
    sizes = sorted(set(batch_sizes))
    if not sizes or sizes[0] < 1:
        raise InvalidArgument(f"Cannot have batch_sizes={list(batch_sizes)}: allowed values are integers >= 1")
    big = sizes[-1]
    if x.shape[0] < big:
        raise InvalidArgument(f"Cannot have max(batch_sizes)={big} > {x.shape[0]} samples in x")
    if runs < 1:
        raise InvalidArgument(f"Cannot have runs={runs}: allowed values are integers >= 1")
    positions = sorted(set(positions if positions is not None else (1, big // 2, big - 1)) - {0})
    if any(p >= big or p < 0 for p in positions):
        raise InvalidArgument(f"Cannot have positions={positions}: allowed values are 1..{big - 1}")
    report = Report(subject, str(x.device), "")
    total = 2 + (runs - 1) + sum(m != big for m in sizes) + len(positions)
    done = 0

    def call(t: torch.Tensor, what: str) -> torch.Tensor:
        nonlocal done
        if progress is not None:
            progress(done, total, what)
        done += 1
        return fn(t)

    try:
        ref = call(x[:1], "batch 1")[0]
        report.dtype = str(ref.dtype).replace("torch.", "")
        first = call(x[:big], f"batch {big}")
        for r in range(1, runs):
            report.probes.append(compare("run", r, call(x[:big], f"run {r + 1}"), first))
        for m in sizes:
            y = first if m == big else call(x[:m], f"batch {m}")
            report.probes.append(compare("batch", m, y[0], ref))
        for p in positions:
            xp = x[:big].clone()
            xp[p] = x[0]
            xp[0] = x[p]
            report.probes.append(compare("position", p, call(xp, f"position {p}")[p], ref))
    except (RuntimeError, ValueError, TypeError, AssertionError, KernelAuditError) as e:
        report.error = f"{type(e).__name__}: {e}"
    return report
