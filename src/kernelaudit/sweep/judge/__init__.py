"""Judging one sweep case: run the op, rebuild its reference below the thresholds, and
turn per-batch metrics into a verdict.

* :func:`execute` - run and judge a :class:`~kernelaudit.sweep.cases.Case` (``execution``);
* :func:`check_matmul_output` - the matmul-family check of one output (``matmul``);
* :func:`run_op` - run a case's op alone, without judging it (``execution``).

Modules: ``operands`` (placed inputs, device tensors), ``reference`` (regenerated
operands, chunked float64 references), ``metrics`` (per-batch metrics, ``Judgement``),
``matmul`` (Freivalds projections and spot checks), ``global_refs`` (ops whose output
is not batch-local), ``execution`` (a whole case, out-of-memory retry).
"""

from .execution import Outcome, execute, run_op
from .matmul import check_matmul_output

__all__ = ["Outcome", "check_matmul_output", "execute", "run_op"]
