"""Size axes: which size crosses a limit, as data.

The sweep's first axis counts **elements** of the crossing tensor (2^31, 2^32,
2*2^32: 32-bit flat indexes). Kernels break at other limits too, and each is an axis
here, with the limits it crosses, the unit it counts, and the batch count that puts a
case just below, at or just above a limit:

* ``elements``: elements of the crossing tensor (the batch count times the series'
  elements per batch) crossing 2^31, 2^32 and 2*2^32;
* ``dim``: the size of one dimension (dim 0 of the crossing operand) crossing 65535
  and 65536 (a CUDA grid's y/z limit: a kernel launching one block per row along
  that dim) and 2^31 (a 32-bit size or stride of one dimension). Per-batch shapes are
  cut small (:data:`TINY_SHAPE_BITS`) so only the dimension is large. A case is made
  only while its crossing tensor stays within 2*2^32 elements (the elements axis'
  largest): 2^31 rows are swept for 1-D tensors (``sum_all``, ``argmax_all``,
  ``nonzero``, ``arange``, ``full``), not for rows of 16 elements (2^35 elements);
* ``bytes``: storage bytes of the crossing operand crossing 2^31 and 2^32 (byte
  offsets in 32 bits): 1-byte dtypes (int8, uint8, bool) are added for the ops that
  take them, and with the ``slice`` layout the bytes are counted to the end of the
  storage, so a view below the limit whose storage offset carries it past crosses;
* ``attn_batch``: batch x heads of attention crossing 65535 and 65536 (fused
  attention kernels put batch*heads on a grid dimension); attention ops only.

Every limit scales with ``--scale`` (:class:`~kernelaudit.thresholds.Thresholds`):
2^31/2^32 become 2^(bits-1)/2^bits, 65536 becomes 2^(bits//2), so a CPU crosses each
with tiny tensors, and the ``grid16`` / ``bytes32`` fault models
(:mod:`kernelaudit.faults.limits`) are wrong exactly past them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..errors import check_choices
from ..thresholds import Thresholds
from .ops.spec import BYTE_DTYPES, DTYPES, OpSpec

#: Scale of the per-batch shapes of the axes that cross with the batch count alone:
#: matrices of 8x2, rows of 16 elements (rows of 4 gave softmax gradients whose
#: per-batch relative error varied 15x between 64 and 2048 batches on a correct CPU).
TINY_SHAPE_BITS = 12


@dataclass(frozen=True)
class SizeAxis:
    """One size axis: ``limits(th)`` maps its threshold labels to limits in ``unit``;
    ``tiny_shapes`` cuts per-batch shapes at :data:`TINY_SHAPE_BITS`."""

    name: str
    unit: str
    limits: Callable[[Thresholds], dict[str, int]]
    tiny_shapes: bool = False
    families: tuple[str, ...] | None = None   # None: every family ...
    skip_families: tuple[str, ...] = ()       # ... but these
    description: str = ""

    def shape_bits(self, scale: int) -> int | None:
        """The ``shape_bits`` of this axis' cases at ``scale`` (None: the scale itself)."""
        return min(TINY_SHAPE_BITS, scale) if self.tiny_shapes else None

    def thresholds(self, scale: int) -> Thresholds:
        return Thresholds(scale, shape_bits=self.shape_bits(scale))

    def applies(self, spec: OpSpec) -> bool:
        return (self.families is None or spec.family in self.families) and spec.family not in self.skip_families


def _dim_limits(th: Thresholds) -> dict[str, int]:
    L = th.dim_limit
    return {"dim 2^16-1": L - 1, "dim 2^16": L, "dim 2^31": th.t31}


def _attn_limits(th: Thresholds) -> dict[str, int]:
    L = th.dim_limit
    return {"BH 2^16-1": L - 1, "BH 2^16": L}


AXES: dict[str, SizeAxis] = {
    "elements": SizeAxis("elements", "elements", lambda th: th.named(),
                         description="elements of the crossing tensor"),
    # Attention's dim 0 is its batch x heads: the attn_batch axis sweeps it.
    "dim": SizeAxis("dim", "size of dim 0", _dim_limits, tiny_shapes=True, skip_families=("attention",),
                    description="one dimension (dim 0 of the crossing operand)"),
    "bytes": SizeAxis("bytes", "bytes", lambda th: {"2^31 B": th.t31, "2^32 B": th.t32},
                      description="storage bytes of the crossing operand (to the end of its storage)"),
    "attn_batch": SizeAxis("attn_batch", "batch x heads", _attn_limits, tiny_shapes=True,
                           families=("attention",), description="attention batch x heads"),
}
AXIS_NAMES = tuple(AXES)


def axis_of(name: str) -> SizeAxis:
    check_choices("axes", (name,), AXES)
    return AXES[name]


def axis_for_threshold(label: str) -> str:
    """The axis a threshold label belongs to (labels are unique across axes)."""
    th = Thresholds()
    for a in AXES.values():
        if label in a.limits(th):
            return a.name
    return "elements"


def batch_for(threshold: int, per_batch: int, position: str) -> int:
    """The batch count placing ``B * per_batch`` just below, at, or just above ``threshold``."""
    if position == "below":
        return (threshold - 1) // per_batch
    if position == "at":
        return -(-threshold // per_batch)
    return threshold // per_batch + 1


def unit_per_batch(axis: SizeAxis, spec: OpSpec, series: str, th: Thresholds, dtype: str,
                   layout: str) -> tuple[int, int]:
    """(units per batch, fixed units) of ``axis`` for one op: the axis' measure of B
    batches is ``B * per + fixed``."""
    per_elems = spec.series[series].per_batch(th)
    if axis.name == "elements":
        return per_elems, 0
    if axis.name == "bytes":
        item = DTYPES[dtype].itemsize
        # slice: one batch of storage sits before the view (its storage offset).
        return per_elems * item, (per_elems * item if layout == "slice" else 0)
    ops = spec.operands(series, 1, th)
    if axis.name == "attn_batch":
        # q is (B, H, L, E): batch x heads is B * H.
        return (ops[0].shape[1] if ops and len(ops[0].shape) == 4 else 1), 0
    rows = [o.rows_per_batch for o in ops if o.rows_per_batch is not None]
    if not rows:  # a factory: its 1-D output has out_rows elements per batch
        rows = [spec.out_rows(series, th)[0] or 1]
    return max(rows), 0


def axis_batch(axis: SizeAxis, spec: OpSpec, series: str, th: Thresholds, dtype: str, layout: str,
               limit: int, position: str) -> int:
    """The batch count putting the op's ``axis`` measure below / at / above ``limit``."""
    per, fixed = unit_per_batch(axis, spec, series, th, dtype, layout)
    return batch_for(limit - fixed, per, position) if limit > fixed else 0


def axis_dtypes(axis: SizeAxis, dtypes: tuple[str, ...], spec: OpSpec) -> tuple[str, ...]:
    """The dtypes an axis sweeps for an op: the grid's, plus (``bytes``) the 1-byte
    dtypes the op takes."""
    out = [d for d in dtypes if d in spec.dtypes]
    if axis.name == "bytes":
        out += [d for d in BYTE_DTYPES if d in spec.dtypes and d not in out]
    return tuple(out)


def crossing_measure(axis: SizeAxis, spec: OpSpec, series: str, th: Thresholds, dtype: str, layout: str,
                     batch: int) -> int:
    """The axis measure of a case (elements, dim size, bytes, batch x heads)."""
    per, fixed = unit_per_batch(axis, spec, series, th, dtype, layout)
    return batch * per + fixed
