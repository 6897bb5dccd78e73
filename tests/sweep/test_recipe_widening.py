"""Interpolation samples are widened at real scales, so PyTorch's upsample kernels (one
thread per output position, a loop over batch x channels in it) parallelise."""

from __future__ import annotations

import torch


def test_interpolation_samples_are_widened_at_real_scale_and_not_at_small_ones():
    """At 2^31 elements PyTorch's upsample kernels loop over batch x channels per output
    position: the 4-wide samples are widened (with their output size) so few rows remain."""
    from kernelaudit.sweep.ops.catalog import op_spec
    from kernelaudit.thresholds import Thresholds

    spec = op_spec("nn.functional.interpolate.nearest")
    series = next(iter(spec.series))
    small, real = Thresholds(16), Thresholds(32)
    (x_small,) = spec.operands(series, 2, small)
    (x_real,) = spec.operands(series, 2, real)
    assert x_small.shape[-1] == 4 and x_real.shape[-1] == 4 * 1024
    assert spec.series[series].per_batch(real) == 1024 * spec.series[series].per_batch(small)
    (out,) = spec.call(torch.rand(*x_real.shape))
    assert out.shape[-1] == 3 * 1024  # the sample's output size, widened with it
    # grid sampling is not widened (no output size), and its backward is not judged
    assert op_spec("grid_sampler_2d").directions == ("fwd",)


def test_ops_with_0_d_operands_are_not_touched_by_widening():
    # widening reached every recipe's operands: a 0-d operand (no last dim) raised and
    # ended a CPU sweep of every op at scale 20
    from kernelaudit.sweep.ops.opinfo import catalogue
    from kernelaudit.sweep.ops.catalog import op_spec
    from kernelaudit.thresholds import Thresholds

    names = [e["name"] for e in catalogue()["entries"] if e.get("fwd") and e.get("recipe")
             and any(not o["shape"] for o in e["recipe"]["operands"])]
    assert names
    for name in names[:5]:
        spec = op_spec(name)
        for th in (Thresholds(16), Thresholds(32)):
            spec.operands(next(iter(spec.series)), 2, th)
