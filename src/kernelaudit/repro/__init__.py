"""repro (product 5): the same output bits for the same input, at any batch size, run
after run, and (``ieee``) on any GPU.

The public surface is the mode and the checker; kernels sit behind them::

    import kernelaudit.repro as repro
    with repro.deterministic():            # "ieee" (default) or "mma"
        logits = model(ids)
    report = repro.check(fn, x)            # run / batch-size / position invariance

Modules: ``tiles`` (the (N, K, dtype) -> tiles table), ``gemm`` (Triton kernels),
``emulate`` (the CPU emulator of the ``ieee`` order), ``companions`` (norms, softmax,
attention), ``mode`` (the torch.library overrides), ``invariance`` and ``report`` (the
invariance checker), ``cli`` (``kernelaudit repro``), ``tinylm`` (a small generative
transformer for demos and tests).

Nothing heavy loads on import: each name below imports its module on first use.
"""

from __future__ import annotations

from .._lazy import lazy_exports

from .. import config

# Before anything imports triton (torch's autograd may pull in inductor, which does):
# Triton reads TRITON_INTERPRET when it loads its language, so without a GPU the
# interpreter must be chosen now, not when the first kernel module loads.
config.use_interpreter_without_cuda()

_EXPORTS = {
    "deterministic": "mode", "install": "mode", "uninstall": "mode", "installed": "mode",
    "mm": "gemm", "addmm": "gemm", "linear": "gemm", "bmm": "gemm",
    "check": "invariance", "Report": "invariance",
}
__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
