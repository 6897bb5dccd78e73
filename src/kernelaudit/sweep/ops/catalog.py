"""The ops the sweep knows: one small spec each.

Per-batch sizes shrink with the scale so that a scaled run crosses its thresholds
with the same number of batches as a real one: with ``n = 2^(bits//4)`` (256 at the
real scale) a matmul batch is (n x k) @ (k x n), ``k = n/4``, as in the study's
"out-crossing" series (B,256,64)x(B,64,256) and "in-crossing" (B,256,256)x(B,256,64).
Row ops work on rows of ``R = n*n/4`` elements.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ...thresholds import Thresholds
from .spec import BYTE_DTYPES, LAYOUTS, Operand, OpSpec, Series

MATMUL_LAYOUTS = LAYOUTS
INT_DTYPES = ("int32", "int64")


def dims(th: Thresholds) -> tuple[int, int]:
    """(n, k): matrix side and inner size at this scale (the shape scale: see
    :attr:`~kernelaudit.thresholds.Thresholds.shape_scale`)."""
    n = 2 ** (th.shape_scale // 4)
    return n, max(n // 4, 2)


def row_len(th: Thresholds) -> int:
    n, _ = dims(th)
    return max(n * n // 4, 4)


def _mat(shape, **kw):
    return Operand(tuple(shape), transposable=True, **kw)


# -- matmul family -------------------------------------------------------------
def _bmm_shapes(series, B, th):
    n, k = dims(th)
    if series == "out":   # (B,n,k) x (B,k,n): the output crosses
        return [_mat((B, n, k)), _mat((B, k, n))]
    return [_mat((B, n, n)), _mat((B, n, k))]  # (B,n,n) x (B,n,k): an input crosses


def _bmm_series():
    return {"out": Series("out", lambda th: dims(th)[0] ** 2),
            "in": Series("in", lambda th: dims(th)[0] ** 2)}


def _bilinear_plain(a, b):
    return a, b, None, 1.0, 0.0


BADDBMM_ALPHA, BADDBMM_BETA = 2.0, 0.5


def _baddbmm_shapes(series, B, th):
    a, b = _bmm_shapes(series, B, th)
    out = (B, a.shape[1], b.shape[2])
    return [a, b, Operand(out)]


def _mm_shapes(series, B, th):
    n, k = dims(th)
    if series == "out":   # (B*n, k) x (k, n): rows of the output cross
        return [_mat((B * n, k), rows_per_batch=n), _mat((k, n), rows_per_batch=None)]
    return [_mat((B * n, n), rows_per_batch=n), _mat((n, k), rows_per_batch=None)]


def _mm_rows(series, th):
    return (dims(th)[0],)


def _addmm_shapes(series, B, th):
    a, b = _mm_shapes(series, B, th)
    return [a, b, Operand((b.shape[1],), rows_per_batch=None)]


def _matmul4d_shapes(series, B, th):
    n, k = dims(th)
    h, m = 4, n // 2
    if series == "out":
        return [_mat((B, h, m, k)), _mat((B, h, k, m))]
    return [_mat((B, h, m, m)), _mat((B, h, m, k))]


def _linear_shapes(series, B, th):
    n, k = dims(th)
    if series == "out":   # x (B,n,k) @ W(n,k)^T + b(n)
        return [_mat((B, n, k)), Operand((n, k), rows_per_batch=None), Operand((n,), rows_per_batch=None)]
    return [_mat((B, n, n)), Operand((k, n), rows_per_batch=None), Operand((k,), rows_per_batch=None)]


def _attn_shapes(series, B, th):
    n, k = dims(th)
    return [Operand((B, 1, n, k)) for _ in range(3)]


def sdpa_heads_major(q, k, v):
    """SDPA with the sweep's batch on the heads dim: the kernel sees (1, B, L, E) views of
    the (B, 1, L, E) operands (fused attention puts batch and heads on grid dims of their
    own), the output comes back batch-major, so the judge's per-batch reference holds."""
    return F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)).transpose(0, 1)


def eager_attention(q, k, v):
    """softmax(q k^T / sqrt(d)) v, written out as a model would."""
    scores = torch.matmul(q, k.transpose(-2, -1)) * (q.shape[-1] ** -0.5)
    return torch.matmul(torch.softmax(scores, dim=-1), v)


MATMUL = [
    OpSpec("bmm", "matmul", torch.bmm, _bmm_shapes, _bmm_series(), layouts=MATMUL_LAYOUTS,
           bilinear=_bilinear_plain),
    OpSpec("baddbmm", "matmul", lambda a, b, c: torch.baddbmm(c, a, b, beta=BADDBMM_BETA, alpha=BADDBMM_ALPHA),
           _baddbmm_shapes, _bmm_series(), layouts=("contig", "aT", "bT", "slice"),
           bilinear=lambda a, b, c: (a, b, c, BADDBMM_ALPHA, BADDBMM_BETA)),
    OpSpec("mm", "matmul", torch.mm, _mm_shapes, _bmm_series(), layouts=("contig", "aT", "bT", "abT", "slice"),
           bilinear=_bilinear_plain, out_rows=_mm_rows),
    OpSpec("addmm", "matmul", lambda a, b, c: torch.addmm(c, a, b), _addmm_shapes, _bmm_series(),
           layouts=("contig", "aT", "bT", "slice"), bilinear=lambda a, b, c: (a, b, c, 1.0, 1.0), out_rows=_mm_rows),
    OpSpec("matmul3d", "matmul", torch.matmul, _bmm_shapes, _bmm_series(), layouts=MATMUL_LAYOUTS,
           bilinear=_bilinear_plain),
    OpSpec("matmul4d", "matmul", torch.matmul, _matmul4d_shapes, _bmm_series(),
           layouts=("contig", "aT", "bT", "slice"), bilinear=_bilinear_plain),
    OpSpec("einsum", "matmul", lambda a, b: torch.einsum("bij,bjk->bik", a, b), _bmm_shapes, _bmm_series(),
           layouts=("contig", "aT", "bT", "slice"), bilinear=_bilinear_plain),
    OpSpec("linear", "matmul", F.linear, _linear_shapes, _bmm_series(), layouts=("contig", "aT", "slice"),
           bilinear=lambda x, w, b: (x, w.transpose(-2, -1), b, 1.0, 1.0)),
    OpSpec("sdpa", "attention", F.scaled_dot_product_attention, _attn_shapes,
           {"scores": Series("scores", lambda th: dims(th)[0] ** 2)}, layouts=("contig", "slice")),
    OpSpec("sdpa.heads", "attention", sdpa_heads_major, _attn_shapes,
           {"scores": Series("scores", lambda th: dims(th)[0] ** 2)}, layouts=("contig", "slice"),
           extra={"entry_dim": 1}, notes="scaled_dot_product_attention with the batch on the heads dim"),
    OpSpec("attention", "attention", eager_attention, _attn_shapes,
           {"scores": Series("scores", lambda th: dims(th)[0] ** 2)}, layouts=("contig", "slice")),
]


# -- row ops: (B, R) tensors, one row per batch ----------------------------------
def _rows(nin=1, **kw):
    def shapes(series, B, th):
        R = row_len(th)
        return [Operand((B, R), **kw) for _ in range(nin)]
    return shapes


def _row_series(*names):
    return {s: Series(s, row_len) for s in names}


def _sorted_pair(res, x):
    values, idx = res
    return values, x.gather(-1, idx)


TOPK = 8
#: Bytes per element of sort's intermediate indices (int64).
SORT_INDEX_BYTES = 8

ROW_OPS = [
    OpSpec("add", "elementwise", torch.add, _rows(2), _row_series("out"),
           dtypes=("float32", "float16", "bfloat16", *INT_DTYPES), layouts=("contig", "slice", "expand")),
    OpSpec("gelu", "elementwise", F.gelu, _rows(1), _row_series("out"), layouts=("contig", "slice")),
    OpSpec("clone", "copy", torch.clone, _rows(1), _row_series("out"),
           dtypes=("float32", "float16", "bfloat16", *INT_DTYPES, *BYTE_DTYPES), exact=True,
           layouts=("contig", "slice")),
    OpSpec("contiguous", "copy", lambda x: x.transpose(-2, -1).contiguous(),
           lambda s, B, th: [Operand((B, dims(th)[0], row_len(th) // dims(th)[0]))],
           _row_series("out"), dtypes=("float32", "float16", "bfloat16", *INT_DTYPES, *BYTE_DTYPES), exact=True),
    OpSpec("cat", "copy", lambda a, b: torch.cat([a, b], dim=-1),
           lambda s, B, th: [Operand((B, row_len(th) // (2 if s == "out" else 1))) for _ in range(2)],
           {"out": Series("out", row_len), "in": Series("in", row_len)}, exact=True,
           dtypes=("float32", "float16", "bfloat16", *INT_DTYPES, *BYTE_DTYPES)),
    OpSpec("stack", "copy", lambda a, b: torch.stack([a, b], dim=1),
           lambda s, B, th: [Operand((B, row_len(th) // 2)) for _ in range(2)],
           {"out": Series("out", row_len)}, exact=True),
    OpSpec("sum", "reduction", lambda x: x.sum(-1), _rows(1), _row_series("in"),
           dtypes=("float32", "float16", "bfloat16", "int64"), ref_scale=lambda x: (x.abs().sum(-1),)),
    OpSpec("mean", "reduction", lambda x: x.mean(-1), _rows(1), _row_series("in"),
           ref_scale=lambda x: (x.abs().mean(-1),)),
    OpSpec("max", "reduction", lambda x: x.amax(-1), _rows(1), _row_series("in"), exact=True, exact_bwd=False),
    OpSpec("argmax", "reduction", lambda x: x.argmax(-1), _rows(1), _row_series("in"), exact=True,
           directions=("fwd",)),
    OpSpec("cumsum", "scan", lambda x: x.cumsum(-1), _rows(1), _row_series("out"),
           dtypes=("float32", "float16", "bfloat16", "int64"), ref_scale=lambda x: (x.abs().cumsum(-1),)),
    OpSpec("softmax", "softmax", lambda x: torch.softmax(x, -1), _rows(1), _row_series("out"),
           layouts=("contig", "slice")),
    OpSpec("log_softmax", "softmax", lambda x: torch.log_softmax(x, -1), _rows(1), _row_series("out")),
    # sort's int64 indices live until the gather: 8 bytes per element the plan must count
    # (on the H200 float32 sort at 2*2^32 ran out of memory with 128 GiB allocated).
    OpSpec("sort", "sort", lambda x: _sorted_pair(torch.sort(x, -1), x), _rows(1), _row_series("out"),
           exact=True, out_rows=lambda s, th: (1, 1), extra={"scratch_bytes": SORT_INDEX_BYTES}),
    # k at most the row: rows are shorter than TOPK only at small --scale (4 at scale 10)
    OpSpec("topk", "sort", lambda x: _sorted_pair(torch.topk(x, min(TOPK, x.shape[-1]), -1), x), _rows(1),
           _row_series("in"),
           exact=True, out_rows=lambda s, th: (1, 1)),
    OpSpec("gather", "indexing", lambda x, i: x.gather(-1, i),
           lambda s, B, th: [Operand((B, row_len(th))),
                             Operand((B, row_len(th)), kind="index", high=row_len(th), grad=False)],
           _row_series("out"), exact=True, exact_bwd=False, dtypes=("float32", "float16", "bfloat16", *INT_DTYPES)),
    OpSpec("embedding", "indexing", lambda i, w: F.embedding(i, w),
           lambda s, B, th: [Operand((B, 4), kind="index", high=dims(th)[0] * 4, grad=False),
                             Operand((dims(th)[0] * 4, row_len(th) // 4), rows_per_batch=None)],
           _row_series("out"), exact=True, exact_bwd=False),
]


def _flat_rows(series, B, th):
    return [Operand((B * row_len(th),), rows_per_batch=row_len(th))]


def _full_ref(ctx, b0, b1):
    return (torch.full(((b1 - b0) * ctx.rows(0),), 3.0, dtype=torch.float64, device=ctx.device),)


def _arange_ref(ctx, b0, b1):
    R = ctx.rows(0)
    return (torch.arange(b0 * R, b1 * R, dtype=torch.float64, device=ctx.device),)


FACTORY = [
    OpSpec("arange", "factory", None, lambda s, B, th: [], {"out": Series("out", row_len)},
           dtypes=("float32", "int64"), directions=("fwd",), out_rows=lambda s, th: (row_len(th),),
           reference=_arange_ref, extra={"factory": lambda n, dtype, device: torch.arange(n, dtype=dtype, device=device)}),
    OpSpec("full", "factory", None, lambda s, B, th: [], {"out": Series("out", row_len)},
           dtypes=("float32", "float16", "bfloat16", *INT_DTYPES), directions=("fwd",), exact=True,
           out_rows=lambda s, th: (row_len(th),), reference=_full_ref,
           extra={"factory": lambda n, dtype, device: torch.full((n,), 3, dtype=dtype, device=device)}),
]

# Flat-index ops whose result is not batch-local: custom references in judge/global_refs.py.
GLOBAL = [
    OpSpec("index_select", "indexing", lambda x, i: x.index_select(0, i),
           lambda s, B, th: [Operand((B, row_len(th)), grad=False),
                             Operand((B,), kind="index", high=B, grad=False)],
           _row_series("out"), exact=True, directions=("fwd",), dtypes=("float32", "float16", "bfloat16", *INT_DTYPES),
           extra={"global": "index_select"}),
    OpSpec("nonzero", "indexing", lambda x: torch.nonzero(x > 0), _flat_rows, _row_series("in"), exact=True,
           directions=("fwd",), extra={"global": "nonzero"}),
    OpSpec("sum_all", "reduction", lambda x: x.sum(), _flat_rows, _row_series("in"),
           dtypes=("float32", "bfloat16"), extra={"global": "sum_all", "dilutes": True}),
    OpSpec("argmax_all", "reduction", lambda x: x.argmax(), _flat_rows, _row_series("in"), exact=True,
           directions=("fwd",), extra={"global": "argmax_all"}),
    # Its output length depends on the values: the OpInfo-derived recipe cannot cut it into batches.
    OpSpec("unique_consecutive", "sort", torch.unique_consecutive, _flat_rows, _row_series("in"), exact=True,
           directions=("fwd",), dtypes=("float32", "float16", "bfloat16", *INT_DTYPES),
           extra={"global": "unique_consecutive"}),
]

ALL_OPS: dict[str, OpSpec] = {s.name: s for s in (*MATMUL, *ROW_OPS, *FACTORY, *GLOBAL)}

#: The quick sweep: the matmul family (where the known faults live) and one op of each
#: other family.
QUICK_OPS = ("bmm", "baddbmm", "mm", "matmul4d", "einsum", "linear", "attention", "sdpa",
             "add", "contiguous", "cat", "sum", "cumsum", "softmax", "sort", "gather", "index_select",
             "arange", "argmax_all")


def op_spec(name: str) -> OpSpec:
    """The op called ``name``: a hand spec above, else an op derived from PyTorch's op
    database or an explicit SDPA backend (:mod:`.opinfo`, loaded on first use)."""
    spec = ALL_OPS.get(name)
    if spec is None:
        from .opinfo import find_spec

        spec = find_spec(name)
    if spec is None:
        from .recipe import DIM_LAST, dim_last_spec

        spec = dim_last_spec(name) if name.endswith(DIM_LAST) else None
    if spec is None:
        from ...errors import InvalidArgument

        raise InvalidArgument(f"Cannot have ops={name!r}: allowed values are {', '.join(ALL_OPS)}, "
                              "the ops derived from PyTorch's OpInfo database (kernelaudit sweep --list-ops), "
                              "family:NAME or all")
    return spec


def per_batch_max(spec: OpSpec, series: str, th: Thresholds) -> int:
    """Elements per batch of the series' crossing tensor."""
    return spec.series[series].per_batch(th)


def numel(shape) -> int:
    return math.prod(shape)
