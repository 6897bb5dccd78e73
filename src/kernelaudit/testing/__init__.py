"""Checks for kernel authors' own test suites.

::

    from kernelaudit.testing import assert_kernel_correct

    def test_my_softmax():
        assert_kernel_correct("problems/softmax.py", "kernels/my_softmax.py", oracle="strongest")

With pytest, the ``kernelaudit_check`` fixture (this package's plugin, registered on
install) is the same function. A wrong or erroring candidate fails with the verdict's
own explanation (op, shapes, dtype, metric, tolerance, first bad index); one that
could not be judged fails too, unless ``allow_unjudged=True``: a check that cannot
judge must not pass silently.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["assert_kernel_correct", "KernelIncorrect", "KernelUnjudged"]


class KernelIncorrect(AssertionError):
    """The candidate was judged wrong (or raised): the message is the verdict's explanation."""


class KernelUnjudged(AssertionError):
    """No oracle could judge the candidate (the message says which and why)."""


def assert_kernel_correct(problem: str | Path, candidate: str | Path, oracle: str = "strongest", *,
                          device: str = "auto", small: bool = True, seed: int = 42, isolate: bool = False,
                          timeout_s: float | None = None, allow_unjudged: bool = False):
    """Judge ``candidate`` (a file defining ``ModelNew``) on ``problem`` (a KernelBench-format
    file) with ``oracle`` (a name or comma list, as ``kernelaudit check --oracle``) and
    return the :class:`~kernelaudit.zoo.check.CheckResult` when it is ok.

    ``small``: the problem's small shapes (fast on a CPU). ``isolate``: run in a child
    process (sandboxed, bounded by ``timeout_s``) instead of this one. Raises
    :class:`KernelIncorrect` or :class:`KernelUnjudged` (both ``AssertionError``), and
    :class:`~kernelaudit.errors.InvalidArgument` for a bad ``oracle`` or ``device``."""
    from ..verdict import Status
    from ..zoo.check import DEFAULT_TIMEOUT_S, run_check, run_check_isolated

    if isolate:
        result = run_check_isolated(problem, candidate, oracle, device=device, small=small, seed=seed,
                                    timeout_s=timeout_s or DEFAULT_TIMEOUT_S)
    else:
        result = run_check(problem, candidate, oracle, device=device, small=small, seed=seed)
    status = result.verdict.status
    if status is Status.OK or (status is Status.SKIPPED and allow_unjudged):
        return result
    what = f"{Path(candidate).name} on {Path(problem).name} ({result.oracle}, {result.device})"
    if status is Status.SKIPPED:
        raise KernelUnjudged(f"{what} could not be judged: {result.verdict.explain()}")
    raise KernelIncorrect(f"{what}: {result.verdict.explain()}")
