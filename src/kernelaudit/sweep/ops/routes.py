"""Other routes to an op's values, for the generic reference where the op's own kernel is
slow on a reference chunk's many small problems (:attr:`.spec.OpSpec.ref_call`).

``torch.cdist`` on a chunk of 2^27 outputs made of thousands of 5 x 6 distance matrices ran
at 3-6 GB/s of output on the H200 (180 ms a chunk in float64, 5.9 s a 2^32 case's judge),
where the same values by broadcasting take 4.7 ms
(``benchmarks/results/2026-12-05-h200-cdist-past-2p32-and-judge-cost/``). A route computes
the op's definition, not its kernel: the float64 reference stays independent of the kernel
under test, and the bit-equality pre-check compares the big call with the definition in
the op's own dtype (equal bits only where the definition is exact there, as a ``p = 0``
count is; elsewhere the pre-check fails on the first chunk and the float64 reference
judges, as for any op whose bits depend on the call).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch


def cdist_by_broadcast(x1: torch.Tensor, x2: torch.Tensor, p: float = 2.0, compute_mode: str | None = None
                       ) -> torch.Tensor:
    """``torch.cdist(x1, x2, p)`` from its definition, one coordinate at a time (no
    ``[..., P, R, M]`` difference tensor): the count of differing coordinates for
    ``p = 0``, the largest ``|x1 - x2|`` for ``p = inf``, else ``(sum |x1 - x2|^p)^(1/p)``.
    ``compute_mode`` is accepted and ignored (it picks cdist's kernel, not its values).

    Gradients follow the definition: 0 for ``p = 0`` (the graph is kept, so a backward
    runs, as cdist's does); for ``p > 1`` at a zero distance the definition's gradient
    is NaN where cdist returns 0, so the route serves samples with distinct points."""
    acc = None
    for k in range(x1.shape[-1]):
        d = x1[..., :, None, k] - x2[..., None, :, k]
        if p == 0:
            term = (d != 0).to(d.dtype) + d * 0  # a count, differentiable with gradient 0
        elif p == 1 or math.isinf(p):
            term = d.abs()
        else:
            term = d.abs() ** p
        if acc is None:
            acc = term
        elif math.isinf(p):
            acc = torch.maximum(acc, term)
        else:
            acc = acc + term
    if acc is None:  # no coordinates: every distance is 0
        return x1.new_zeros((*x1.shape[:-1], x2.shape[-2]))
    return acc if p in (0, 1) or math.isinf(p) else acc ** (1.0 / p)


#: Device types whose references take the routes (on 2 CPU cores torch.cdist is the fast
#: one: a 2^22-output chunk of 5 x 6 matrices, p = 0, float64: 0.04 s against 0.37 s by
#: broadcasting).
ROUTE_DEVICES = {"cuda"}


def cdist_routed(x1: torch.Tensor, x2: torch.Tensor, *args, **kwargs) -> torch.Tensor:  # noqa: ANN002, ANN003
    """:func:`cdist_by_broadcast` on the :data:`ROUTE_DEVICES`, ``torch.cdist`` elsewhere."""
    if x1.device.type in ROUTE_DEVICES:
        return cdist_by_broadcast(x1, x2, *args, **kwargs)
    return torch.cdist(x1, x2, *args, **kwargs)


#: A recipe's function (its dotted name) -> the route its reference takes.
ROUTES: dict[str, Callable] = {"torch.cdist": cdist_routed}
