"""The ``wrap32`` fault model: flat indexes wrap at 2^32 in the ops it covers.

Any covered call reads an input with more than 2^32 elements as if element i were
element i mod 2^32, and writes an output with more than 2^32 elements at i mod 2^32
(the last writer wins, elements past 2^32 stay zero). This is the generic 32-bit
index bug (pytorch#25241, the Triton int32-offset bmm) for any op that computes a
flat index.
"""

from __future__ import annotations

import torch

from .base import FaultModel, aliases, written_tensors, wrapped_reading, wrapped_writing

aten = torch.ops.aten

#: The aten ops whose flat index wraps (views and metadata ops are never covered).
WRAP32_OPS = frozenset({
    aten.add, aten.sub, aten.mul, aten.div, aten.neg, aten.relu, aten.gelu, aten.exp, aten.tanh,
    aten.sum, aten.mean, aten.amax, aten.max, aten.argmax, aten.cumsum,
    aten._softmax, aten._log_softmax, aten._softmax_backward_data, aten._log_softmax_backward_data,
    aten.sort, aten.topk, aten.gather, aten.index_select, aten.embedding, aten.embedding_dense_backward,
    aten.clone, aten.cat, aten.stack, aten.mm, aten.bmm, aten.addmm, aten.baddbmm,
    aten.arange, aten.ones, aten.full, aten.fill, aten.nonzero, aten.index, aten.scatter_add,
    aten.threshold_backward, aten.gelu_backward, aten.index_add, aten.where, aten.lt, aten.eq,
    # factories and ranges (their out= forms included: the packet covers every overload);
    # not new_zeros: autograd makes its gradient buffers with it, and a wrapped write of
    # zeros into a fresh tensor is still all zeros (nothing to plant)
    aten.linspace, aten.logspace, aten.eye, aten.zeros, aten.new_ones, aten.new_full,
    aten.tril_indices, aten.triu_indices,
    # whole-tensor reductions and scans
    aten.min, aten.amin, aten.argmin, aten.prod, aten.var, aten.std, aten.var_mean, aten.std_mean,
    aten.linalg_vector_norm, aten.norm, aten.logsumexp, aten.cumprod, aten.cummax, aten.cummin,
    # index ops
    aten.take, aten.searchsorted, aten.masked_select, aten.unique_consecutive, aten.argsort, aten.trace, aten.native_dropout_backward,
    # random generators (in place into a buffer, or functional)
    aten.rand, aten.rand_like, aten.randn, aten.randn_like, aten.randint, aten.randint_like, aten.normal,
    aten.normal_, aten.uniform_, aten.bernoulli, aten.bernoulli_, aten.exponential_, aten.cauchy_,
    aten.geometric_, aten.log_normal_, aten.random_, aten.multinomial, aten.rrelu_with_noise,
})


class Wrap32FaultModel(FaultModel):
    """Wraps every covered call's flat indexes modulo 2^32 (scaled by the thresholds)."""

    name = "wrap32"
    covered = WRAP32_OPS

    def handle(self, func, args, kwargs):
        t32 = self.th.t32
        changed = False
        # Buffers the call writes into (out=, in place) are passed as they are; past
        # 2^32 the faulty kernel never writes them, so their tails keep what they held.
        written = written_tensors(func, args, kwargs)
        tails = [(w, w.view(-1)[t32:].clone()) for w in written if w.numel() > t32 and w.is_contiguous()]

        def read(x):
            nonlocal changed
            if isinstance(x, torch.Tensor) and x.numel() > t32 and not any(x is w for w in written):
                changed = True
                return wrapped_reading(x, t32)
            if isinstance(x, (list, tuple)):
                return type(x)(read(v) for v in x)
            return x

        out = func(*[read(a) for a in args], **{k: read(v) for k, v in kwargs.items()})

        def write(y):
            nonlocal changed
            if isinstance(y, torch.Tensor) and y.numel() > t32:
                changed = True
                if tails and aliases(y, [w for w, _ in tails]) and y.is_contiguous():
                    flat = y.view(-1)
                    wrapped = wrapped_writing(y, t32).view(-1)
                    flat[:t32].copy_(wrapped[:t32])
                    for w, tail in tails:
                        if aliases(y, [w]):
                            flat[t32:].copy_(tail)
                    return y
                return wrapped_writing(y, t32)
            return y

        if isinstance(out, (tuple, list)):
            out = type(out)(write(y) for y in out)
        else:
            out = write(out)
        if changed:
            self.stats.hit("wrap32")
        return out

    def extra_contexts(self):
        # Attention through its math path, so the score product is a covered bmm
        # (fused attention kernels are not covered).
        from .mps import _math_attention_only
        return [_math_attention_only()]
