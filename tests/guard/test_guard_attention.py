"""The attention-score rule's actions (MPS's fused attention op), driven on CPU with
PyTorch's math attention as the kernel: the pieces must reproduce the whole call."""

from __future__ import annotations

import pytest
import torch

from kernelaudit import guard
from kernelaudit.errors import UnsafeCallError
from kernelaudit.guard.engine import Engine
from kernelaudit.thresholds import Thresholds

TH = Thresholds(12)  # scores over 4096 elements break the rule


def kernel(q, k, v, mask=None, dropout_p=0.0, is_causal=False, dropout_mask=None, *, scale=None):
    return torch.ops.aten._scaled_dot_product_attention_math(q, k, v, mask, dropout_p, is_causal, dropout_mask,
                                                              scale=scale)


def _qkv(B, H, L, S, E=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(B, H, L, E, generator=g), torch.randn(B, H, S, E, generator=g),
            torch.randn(B, H, S, E, generator=g))


def _engine(action):
    return Engine(guard.mps_policy(TH, device_types=None), action)


@pytest.mark.parametrize("shape,causal,masked", [
    ((4, 2, 32, 40), False, False),     # split over the batch
    ((1, 8, 32, 40), False, True),      # split over heads, with a broadcast mask
    ((1, 1, 128, 128), True, False),    # one head too big: query rows, causal
    ((1, 1, 128, 96), False, True),     # query rows with a mask
])
def test_guard_fixes_attention_whose_scores_cross_the_threshold(shape, causal, masked):
    q, k, v = _qkv(*shape)
    mask = torch.randn(1, 1, shape[2], shape[3]) if masked else None
    ref_out, ref_attn = kernel(q, k, v, mask, 0.0, causal, None)
    e = _engine("fix")
    out, attn = e.attention((q, k, v, mask, 0.0, causal), {}, kernel)
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(attn, ref_attn)
    assert e.stats().fixed == 1


def test_guard_refuses_attention_naming_the_rule_and_chunk():
    q, k, v = _qkv(4, 2, 32, 40)
    with pytest.raises(UnsafeCallError, match="rule attention-scores.*largest safe chunk"):
        _engine("raise").attention((q, k, v), {}, kernel)


def test_guard_verify_catches_a_wrong_attention_and_passes_a_right_one():
    q, k, v = _qkv(4, 2, 32, 40)

    def broken(q, k, v, *a, **kw):
        out, attn = kernel(q, k, v, *a, **kw)
        if q.shape[0] * q.shape[1] * q.shape[2] * k.shape[2] > TH.t32:
            out = out.clone()
            out[-1] = 0  # the last batch comes back wrong
        return out, attn

    e = _engine("verify")
    e.attention((q, k, v), {}, kernel)
    with pytest.raises(UnsafeCallError, match="verification failed"):
        for seed in range(4):  # random rows: a wrong batch is found within a few calls
            e.attention(_qkv(4, 2, 32, 40, seed=seed), {}, broken)
    assert e.stats().mismatches == 1


def test_small_attention_is_not_touched():
    q, k, v = _qkv(1, 2, 8, 8)
    e = _engine("raise")
    out = e.attention((q, k, v), {}, kernel)
    assert torch.equal(out[0], kernel(q, k, v)[0])
    assert e.stats().flagged == 0
