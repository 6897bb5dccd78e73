"""Op specs: an op under test is data.

An :class:`OpSpec` says which dtypes, layouts and size series the op takes, how to
shape its operands for a batch count, how to call it, and (only where the generic
batch-local reference does not apply) how to compute its reference. Adding an op is
one small spec in :mod:`kernelaudit.sweep.ops.catalog`.

Vocabulary:

* an **operand** is one tensor input, described by its logical shape and a layout
  (how it sits in its storage: packed, transposed view, storage offset, stride-0
  batch); its values are generated from its storage index, so any slice of it can
  be regenerated anywhere;
* a **batch** is the unit the oracle localises errors to: rows ``[b*R, (b+1)*R)`` of
  dim 0 of a tensor with ``rows_per_batch = R`` (R = 1 for a leading batch dim).
  Operands with ``rows_per_batch=None`` are shared by every batch (a weight, a bias).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from ...errors import InvalidArgument
from ...thresholds import Thresholds

#: Layout names. ``aT``/``bT``/``abT`` transpose the last two dims of the first /
#: second / both matrix operands; ``slice`` gives the first operand a storage offset of
#: one batch; ``expand`` gives the second operand a stride-0 batch dimension.
LAYOUTS = ("contig", "aT", "bT", "abT", "slice", "expand")
DTYPES = {
    "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
    "int32": torch.int32, "int64": torch.int64,
    # 1-byte dtypes: storage bytes equal elements (the ``bytes`` size axis).
    "int8": torch.int8, "uint8": torch.uint8, "bool": torch.bool,
}
FLOAT_DTYPES = ("float32", "float16", "bfloat16")
#: Dtypes of one byte per element, which the ``bytes`` size axis adds for ops taking them.
BYTE_DTYPES = ("int8", "uint8", "bool")
DIRECTIONS = ("fwd", "bwd")


@dataclass(frozen=True)
class Operand:
    """One input: logical shape, value kind, batching, and whether it takes a gradient."""

    shape: tuple[int, ...]
    rows_per_batch: int | None = 1
    kind: str = "value"          # "value" (case dtype), "index" (int64 in [0, high)), "float64"
    high: int | None = None
    grad: bool = True
    transposable: bool = False   # may take the aT/bT layouts (a matrix operand)


@dataclass(frozen=True)
class Placed:
    """An operand placed in storage: the strided view the op receives."""

    operand: Operand
    dtype: torch.dtype
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int
    storage_numel: int
    key: int

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def injective(self) -> bool:
        """Every logical element has its own storage element (no stride-0 dims)."""
        return all(st != 0 or n == 1 for n, st in zip(self.shape, self.strides))

    @property
    def batched(self) -> bool:
        return self.operand.rows_per_batch is not None and self.injective


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(out))


def place(operand: Operand, layout_role: str, dtype: torch.dtype, key: int) -> Placed:
    """Strides, offset and storage size of ``operand`` under a per-operand layout role.

    Roles: ``contig``, ``T`` (a transposed view of a packed tensor), ``slice`` (packed,
    one leading row past the storage start), ``expand`` (stride 0 on dim 0).
    """
    shape = operand.shape
    n = math.prod(shape)
    if layout_role == "contig":
        return Placed(operand, dtype, shape, contiguous_strides(shape), 0, n, key)
    if layout_role == "T":
        base = (*shape[:-2], shape[-1], shape[-2])
        st = list(contiguous_strides(base))
        st[-1], st[-2] = st[-2], st[-1]
        return Placed(operand, dtype, shape, tuple(st), 0, n, key)
    if layout_role == "slice":
        row = math.prod(shape[1:])
        return Placed(operand, dtype, shape, contiguous_strides(shape), row, n + row, key)
    if layout_role == "expand":
        st = (0, *contiguous_strides(shape[1:]))
        return Placed(operand, dtype, shape, st, 0, math.prod(shape[1:]), key)
    raise InvalidArgument(f"Cannot have layout role {layout_role!r}: allowed contig, T, slice, expand")


def layout_roles(layout: str, n_operands: int, transposable: Sequence[bool]) -> list[str]:
    """Per-operand roles for a case layout (see :data:`LAYOUTS`)."""
    roles = ["contig"] * n_operands
    if layout in ("aT", "abT"):
        roles[0] = "T"
    if layout in ("bT", "abT"):
        roles[1] = "T"
    if layout == "slice":
        roles[0] = "slice"
    if layout == "expand":
        roles[1] = "expand"
    for r, t in zip(roles, transposable):
        if r == "T" and not t:
            raise InvalidArgument(f"Cannot have layout={layout!r} for an operand that is not a matrix")
    return roles


@dataclass(frozen=True)
class Series:
    """A size series: which tensor crosses the thresholds, and its elements per batch."""

    name: str
    per_batch: Callable[[Thresholds], int]


@dataclass(frozen=True)
class OpSpec:
    """One op under test. ``operands(series, B, th)`` shapes the inputs for B batches;
    ``call(*tensors)`` runs it (the same function, on float64 chunks, is the generic
    reference); ``out_rows(series, th)`` gives rows per batch of each output."""

    name: str
    family: str
    call: Callable[..., object]
    operands: Callable[[str, int, Thresholds], list[Operand]]
    series: dict[str, Series]
    dtypes: tuple[str, ...] = FLOAT_DTYPES
    layouts: tuple[str, ...] = ("contig",)
    directions: tuple[str, ...] = DIRECTIONS
    out_rows: Callable[[str, Thresholds], tuple[int | None, ...]] = lambda s, th: (1,)
    exact: bool = False                      # results must match bit for bit
    exact_bwd: bool | None = None            # gradients exact? (None: same as ``exact``)
    ref_scale: Callable | None = None        # (*ref inputs) -> per-output-element error scale
    bwd_outputs: int = 1                     # how many leading outputs the backward uses
    bilinear: Callable | None = None         # matmul family: (tensors) -> (A, B, M, alpha, beta)
    reference: Callable | None = None        # custom reference (see judge/reference.py); None = generic
    #: The generic reference's route to ``call``'s values (same arguments), where the op's own
    #: kernel is slow on a chunk's many small problems; it serves the float64 reference and
    #: the bit-equality pre-check alike. None = ``call``.
    ref_call: Callable | None = None
    #: A label of the per-batch shapes at given thresholds where they differ from the
    #: sample's (``"2045x2045"``: :func:`.recipe.grow_factor`), else ``""``: cases of
    #: differently shaped batches calibrate their tolerances apart. None = never.
    shape_tag: Callable[[Thresholds], str] | None = None
    notes: str = ""
    # ``extra``: "factory" (a length -> tensor function), "global" (a custom reference
    # in global_refs.py), "dilutes" (reduces the whole crossing tensor to a scalar),
    # "scratch_bytes" (bytes per input element the op holds beyond its inputs and
    # outputs, for the memory plan), "entry_dim" (the dim the sweep's batch occupies
    # where the op's kernel sees it, when not 0: ``sdpa.heads`` puts it on the heads).
    extra: dict = field(default_factory=dict)

    def check(self, *, dtype: str | None = None, layout: str | None = None,
              series: str | None = None, direction: str | None = None) -> None:
        for arg, val, allowed in (("dtype", dtype, self.dtypes), ("layout", layout, self.layouts),
                                  ("series", series, tuple(self.series)),
                                  ("direction", direction, self.directions)):
            if val is not None and val not in allowed:
                raise InvalidArgument(
                    f"Cannot have {arg}={val!r} for op {self.name!r}: allowed values are {', '.join(allowed)}")
