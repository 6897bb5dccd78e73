"""Triton kernels used by kernelaudit itself (input generation on GPUs)."""

from ...interpreter import skip_dead_overflow_checks

skip_dead_overflow_checks()  # under TRITON_INTERPRET only (CPU runs)
