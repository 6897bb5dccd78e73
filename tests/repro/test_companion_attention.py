"""Attention on [B, H, L, E] operands reads them in place and folds the scale and the
causal mask into its kernels, with the same bits as the plain composition (the 3-d
path: copies, ``scores * scale``, ``masked_fill``, softmax, a cast), and stays
batch-invariant."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from kernelaudit.repro import companions

B, H, L, E = 2, 3, 5, 8


def _qkv(dtype, seed=0):
    """q, k, v as a model makes them: permuted views of one [B, L, 3, H, E] projection."""
    g = torch.Generator().manual_seed(seed)
    qkv = torch.randn(B, L, 3 * H * E, generator=g).to(dtype)
    return qkv.view(B, L, 3, H, E).permute(2, 0, 3, 1, 4)


MASKS = {"none": None, "bool": torch.rand(L, L, generator=torch.Generator().manual_seed(1)) > 0.3,
         "float": torch.randn(L, L, generator=torch.Generator().manual_seed(2))}


def _cases():
    """Every mask kind in one (order, dtype) each; the rest of the matrix is ``slow``."""
    for order, dtype in (("ieee", torch.float32), ("mma", torch.bfloat16), ("ieee", torch.bfloat16),
                         ("mma", torch.float32)):
        for causal, mask in ((True, "none"), (False, "none"), (False, "bool"), (False, "float")):
            core = (order, dtype) in (("ieee", torch.float32), ("mma", torch.bfloat16)) or mask == "none"
            yield pytest.param(order, dtype, causal, mask, marks=() if core else pytest.mark.slow)


@pytest.mark.parametrize("order, dtype, causal, mask", list(_cases()))
def test_strided_4d_attention_has_the_bits_of_the_plain_composition(order, dtype, causal, mask, bits_equal):
    q, k, v = _qkv(dtype)
    assert not q.is_contiguous()
    m = MASKS[mask]
    m = m.to(dtype) if m is not None and m.is_floating_point() else m
    got = companions.attention(q, k, v, m, is_causal=causal, order=order)
    flat = [t.reshape(B * H, L, E).contiguous() for t in (q, k, v)]  # the 3-d path
    want = companions.attention(*flat, m, is_causal=causal, order=order).reshape(B, H, L, E)
    assert bits_equal(got, want)
    ref = F.scaled_dot_product_attention(*(t.double() for t in (q, k, v)), attn_mask=None if m is None else (
        m if m.dtype == torch.bool else m.double()), is_causal=causal)
    tol = 1e-5 if dtype == torch.float32 else 3e-2
    torch.testing.assert_close(got.double(), ref, rtol=tol, atol=tol)


def test_the_output_is_laid_out_so_merging_the_heads_is_a_view():
    q, k, v = _qkv(torch.bfloat16)
    out = companions.attention(q, k, v, is_causal=True, order="mma")
    merged = out.transpose(1, 2).reshape(B, L, H * E)
    assert out.shape == (B, H, L, E) and merged.data_ptr() == out.data_ptr() and merged._base is not None


def test_a_sequence_gets_the_same_bits_alone_and_in_a_batch(bits_equal):
    q, k, v = _qkv(torch.bfloat16, seed=3)
    full = companions.attention(q, k, v, is_causal=True, order="ieee")
    for b in range(B):
        alone = companions.attention(q[b:b + 1], k[b:b + 1], v[b:b + 1], is_causal=True, order="ieee")
        assert bits_equal(alone[0], full[b])
