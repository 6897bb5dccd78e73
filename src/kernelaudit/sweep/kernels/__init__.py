"""Triton kernels used by kernelaudit itself (input generation on GPUs)."""
