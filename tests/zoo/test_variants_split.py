"""SplitReductions (zoo/problems/variants.py): every reduction it knows is computed as
the sum of two halves, bit for bit, counted; what it does not know runs as asked."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kernelaudit.zoo.problems.variants import SplitReductions


def test_each_known_reduction_is_two_halves_added_and_counted():
    g = torch.Generator().manual_seed(0)
    x, w, b = (torch.randn(4, 9, generator=g), torch.randn(5, 9, generator=g), torch.randn(5, generator=g))
    img, k = torch.randn(2, 3, 6, 6, generator=g), torch.randn(4, 3, 3, 3, generator=g)
    mode = SplitReductions()
    with mode:
        got = [x @ w.T, F.linear(x, w, b), F.conv2d(img, k), x.sum(1), torch.mean(x, dim=0, keepdim=True),
               x.sum(), x.amax(1)]
    want = [x[:, :4] @ w.T[:4] + x[:, 4:] @ w.T[4:],
            F.linear(x[:, :4], w[:, :4]) + F.linear(x[:, 4:], w[:, 4:], b),
            F.conv2d(img[:, :1], k[:, :1]) + F.conv2d(img[:, 1:], k[:, 1:]),
            x[:, :4].sum(1) + x[:, 4:].sum(1),
            (x[:2].sum(0, keepdim=True) + x[2:].sum(0, keepdim=True)) / 4,
            x.sum(), x.amax(1)]  # a full sum and a max: not split
    assert mode.count == 5
    for i, (a, e) in enumerate(zip(got, want)):
        assert torch.equal(a, e), f"result {i} is not the split computation"

