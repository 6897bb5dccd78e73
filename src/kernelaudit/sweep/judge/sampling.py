"""Which chunks the ``sampled`` judge looks at: those holding a limit, the ends, a few more.

Under ``--mode sampled`` a case whose outputs are all batched (each batch's output
depends on that batch's inputs alone) is judged on some of its reference chunks instead
of every one: slice consistency, ``op(X)[rows]`` against ``op(X[rows])`` or the float64
reference, on the rows where a size fault shows. A fault of size flips at a limit and
holds past it (a wrapped index, an unwritten tail, a grid limit), so the chunks kept are

* the first and the last (every tail fault reaches the last batch);
* for every batched input and output, the batches just below and just past each of the
  case's limits (2^31, 2^32 and 2*2^32 at the real scale) counted in storage elements
  and in bytes, found from the tensor's strides and offset (int64 maths throughout);
* the batches holding rows ``dim_limit - 1``, ``dim_limit``, ``2^31 - 1`` and ``2^31``
  of dim 0 (the grid-dimension and one-dimension limits);
* :data:`SAMPLED_RANDOM_CHUNKS` more, drawn from the case's seed and id, so a resumed run
  judges the same ones.

What it gives up: a fault that spares every kept chunk (corruption confined to some
batches between the limits, a race) is caught only where a random chunk meets it.
``--mode auto`` judges every chunk.
"""

from __future__ import annotations

import random

from .. import gen
from ..cases import Case

#: Chunks the sampled judge draws at random beside those at the limits and the ends.
SAMPLED_RANDOM_CHUNKS = 4


def _crossings(shape, strides, offset: int, itemsize: int, rows: int, limits, B: int) -> set[int]:
    """Batches (of ``rows`` rows along dim 0) just below and just past each limit, in
    storage elements and in bytes, of a tensor laid out by ``strides`` from ``offset``."""
    if not shape or strides[0] <= 0 or rows <= 0:
        return set()
    per = rows * strides[0]                       # storage elements from one batch to the next
    span = (rows - 1) * strides[0] + sum((n - 1) * s for n, s in zip(shape[1:], strides[1:]) if n > 0)
    out = set()
    for limit in limits:
        for lim in (limit, -(-limit // itemsize)):  # the element index reaching `limit` bytes
            first_past = max(0, -(-(lim - offset - span) // per))  # its last element at lim or past
            last_below = (lim - 1 - offset) // per                 # its first element below lim
            out.update(b for b in (first_past, last_below) if 0 <= b < B)
    return out


def sampled_chunks(case: Case, placed, outs, out_rows, step: int) -> list[int]:
    """The first batch of every chunk (``step`` batches each) the sampled judge looks at,
    in order (module docstring)."""
    B = case.batch
    th = case.thresholds
    limits = (th.t31, th.t32, th.t33)
    batches = {0, B - 1}
    tensors = [(p.shape, p.strides, p.offset, p.dtype.itemsize, p.operand.rows_per_batch)
               for p in placed if p.batched]
    tensors += [(tuple(o.shape), tuple(o.stride()), o.storage_offset(), o.element_size(), R)
                for o, R in zip(outs, out_rows) if R is not None]
    for shape, strides, offset, itemsize, rows in tensors:
        batches |= _crossings(shape, strides, offset, itemsize, rows, limits, B)
        for row in (th.dim_limit - 1, th.dim_limit, th.t31 - 1, th.t31):
            if rows > 0 and row // rows < B:
                batches.add(row // rows)
    chosen = {b // step for b in batches}
    n_chunks = -(-B // step)
    rest = n_chunks - len(chosen)
    if rest > 0:
        rng = random.Random(gen.stream_key(case.seed, f"{case.id}/sampled"))
        others = [c for c in rng.sample(range(n_chunks), min(n_chunks, len(chosen) + SAMPLED_RANDOM_CHUNKS))
                  if c not in chosen]
        chosen.update(others[:SAMPLED_RANDOM_CHUNKS])
    return [c * step for c in sorted(chosen)]
