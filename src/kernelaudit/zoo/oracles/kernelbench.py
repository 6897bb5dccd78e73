"""``kernelbench``: a faithful re-implementation of KernelBench's official correctness check.

What the official ``run_and_check_correctness`` does, step by step, and so what this
oracle does:

1. seed 42, ``get_init_inputs()``; seed 42, ``Model(*init)``; seed 42,
   ``ModelNew(*init)`` (both moved to the device, eval mode);
2. seed 42, draw the trial seeds ``torch.randint(0, 2**32 - 1, (1,))`` five times;
3. per trial: seed, ``get_inputs()`` exactly as written (CPU, at the one fixed shape),
   move to the device; run ``Model`` then ``ModelNew`` under ``no_grad``, synchronising
   after each;
4. fail on a shape mismatch, or unless ``torch.allclose(out, out_new, atol=tol,
   rtol=tol)``; report the max and mean absolute difference.

``tol`` is 1e-2 (KernelBench v0/v0.1 for fp32) or 1e-4 (``--tol 1e-4``, later
versions). The reference is the problem's own ``Model`` at the problem dtype, not
float64. This oracle reproduces the official checker's misses on purpose: it is the
baseline every other oracle is measured against.
"""

from __future__ import annotations

import torch

from ...errors import InvalidArgument
from ..problems.problem_case import (
    KERNELBENCH_SEED, ProblemCase, as_tensors, reference_failure, set_seed, to_device,
)
from ...verdict import Status, Verdict
from .base import Driver, Subject, candidate_error, synchronize
from .compare import chunk_elements, mismatch_verdict

#: KernelBench v0/v0.1 tolerance (atol = rtol) for fp32.
KERNELBENCH_TOL = 1e-2
#: The tighter fp32 tolerance of later KernelBench versions (``--tol 1e-4``).
KERNELBENCH_TOL_STRICT = 1e-4
#: Correctness trials the official scripts run.
KERNELBENCH_TRIALS = 5


def trial_seeds(trials: int, seed: int = KERNELBENCH_SEED) -> list[int]:
    """The per-trial seeds, drawn exactly as KernelBench draws them."""
    torch.manual_seed(seed)
    return [int(torch.randint(0, 2**32 - 1, (1,)).item()) for _ in range(trials)]


def _diff_stats(ref: torch.Tensor, got: torch.Tensor, device: str) -> tuple[float, float]:
    """``max`` and ``mean`` of ``|ref - got|`` in float64, a chunk at a time: the official
    checker holds no more than its two outputs, and neither may this one (whole-size float64
    copies tripled its memory and ran problems with 2^31-element outputs out of memory)."""
    if not ref.numel():
        return 0.0, 0.0
    a, b = ref.reshape(-1), got.reshape(-1)
    step = chunk_elements(device)
    maxima, total = [], 0.0
    for lo in range(0, a.numel(), step):
        d = (a[lo:lo + step].to(torch.float64) - b[lo:lo + step].to(torch.float64)).abs_()
        maxima.append(d.max())
        total += float(d.sum())
    return float(torch.stack(maxima).max()), total / a.numel()  # a NaN anywhere stays NaN


class KernelBenchOracle(Driver):
    """The official check: ``trials`` fresh ``get_inputs()`` at the fixed shape, ``allclose``."""

    name = "kernelbench"

    def __init__(self, *, tol: float = KERNELBENCH_TOL, trials: int = KERNELBENCH_TRIALS) -> None:
        if not (tol > 0):
            raise InvalidArgument(f"Cannot have --tol={tol}: the tolerance must be a positive number (1e-2 or 1e-4)")
        if trials < 1:
            raise InvalidArgument(f"Cannot have trials={trials}: at least 1 trial")
        self.tol = float(tol)
        self.trials = trials
        if tol != KERNELBENCH_TOL:
            self.name = f"kernelbench@{tol:g}"

    def drive(self, case: ProblemCase, subject: Subject) -> Verdict:
        # Both in training mode, as the official checker leaves them: a BatchNorm
        # problem then normalises with batch statistics, and a candidate must too.
        model = case.model(deterministic=False)
        try:
            model_new = subject.model(case, deterministic=False)
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - sys.exit() in a kernel is an error too
            return candidate_error(case, exc)
        diffs = []
        for trial, seed in enumerate(trial_seeds(self.trials)):
            set_seed(seed)
            try:
                inputs = to_device(case.problem.get_inputs(case.shapes), case.device)
            except Exception as exc:  # noqa: BLE001 - the problem's code: raises ReferenceFailed
                raise reference_failure(case, "get_inputs()", exc) from exc
            tcase = case.with_inputs(inputs, f"kernelbench trial {trial}")
            with torch.no_grad():
                try:
                    out = as_tensors(model(*inputs))
                    synchronize(case.device)
                except Exception as exc:  # noqa: BLE001 - the problem's code: raises ReferenceFailed
                    raise reference_failure(tcase, "Model.forward", exc) from exc
                try:
                    out_new = as_tensors(model_new(*inputs))
                    synchronize(case.device)
                except (Exception, SystemExit) as exc:  # noqa: BLE001 - sys.exit() in a kernel is an error too
                    return candidate_error(tcase, exc)
            for i, (ref, got) in enumerate(zip(out, out_new)):
                if got.shape != ref.shape:
                    return Verdict(Status.WRONG, metric="shape",
                                   message=f"{tcase.describe()}: Output shape mismatch: expected "
                                           f"{tuple(ref.shape)}, got {tuple(got.shape)}")
                try:
                    close = torch.allclose(ref, got, atol=self.tol, rtol=self.tol)
                except RuntimeError as exc:  # dtype mismatch: the official script crashes here
                    return candidate_error(tcase, exc)
                max_diff, avg_diff = _diff_stats(ref, got, case.device)
                diffs.append(max_diff)
                if not close:
                    bad = ~torch.isclose(ref, got, atol=self.tol, rtol=self.tol)
                    return mismatch_verdict(
                        tcase, i, got, ref, bad, metric="max_diff", value=max_diff, tolerance=self.tol,
                        extra=f"allclose(atol=rtol={self.tol:g}) failed in trial {trial} (seed {seed}); "
                              f"avg_diff {avg_diff:.3g}",
                    )
        return Verdict.passed("max_diff", max(diffs) if diffs else 0.0, self.tol, trials=self.trials)
