"""The op families the sweep reports coverage by, and how an op is put in one.

A family is what an op does (a reduction, a scan, a convolution), not which module
defines it: ``--list-ops`` groups by it and ``--ops family:NAME`` selects by it.
:func:`classify` sorts a PyTorch OpInfo entry (by name, then by its OpInfo class);
:data:`HAND_FAMILIES` sorts the hand-written specs of :mod:`.catalog` the same way.
"""

from __future__ import annotations

import re

#: Every family, in the order ``--list-ops`` prints them, with one line each.
FAMILIES: dict[str, str] = {
    "factory": "factories and ranges",
    "random": "random generators",
    "unary": "unary elementwise",
    "binary": "binary elementwise",
    "ternary": "ternary elementwise",
    "activation": "activations",
    "normalization": "normalisation",
    "softmax": "softmax family",
    "reduction": "reductions",
    "scan": "scans",
    "sort": "sort and selection",
    "indexing": "indexing",
    "scatter_gather": "gather and scatter",
    "shape": "shape and copy ops",
    "padding": "padding",
    "conv_pool": "convolution and pooling",
    "interpolation": "interpolation",
    "loss": "losses",
    "embedding": "embeddings",
    "attention": "attention",
    "fft": "FFT and signal",
    "distance": "distances",
    "linalg": "batched linear algebra",
    "matmul": "the matmul family",
    "other": "everything else (comparisons, conversions, utilities)",
}

#: The hand specs of :mod:`.catalog` in these families (their ``OpSpec.family`` is the
#: older, coarser label the reports already use, so it is left as it is).
HAND_FAMILIES: dict[str, str] = {
    "bmm": "matmul", "baddbmm": "matmul", "mm": "matmul", "addmm": "matmul", "matmul3d": "matmul",
    "matmul4d": "matmul", "einsum": "matmul", "linear": "matmul", "sdpa": "attention",
    "attention": "attention", "add": "binary", "gelu": "activation", "clone": "shape",
    "contiguous": "shape", "cat": "shape", "stack": "shape", "sum": "reduction", "mean": "reduction",
    "max": "reduction", "argmax": "reduction", "cumsum": "scan", "softmax": "softmax",
    "log_softmax": "softmax", "sort": "sort", "topk": "sort", "gather": "scatter_gather",
    "embedding": "embedding", "arange": "factory", "full": "factory", "index_select": "indexing",
    "nonzero": "indexing", "sum_all": "reduction", "argmax_all": "reduction",
}

# Ordered (pattern, family) rules on the OpInfo name; the first match wins.
_RULES: list[tuple[str, str]] = [
    (r"^(fft\.|signal\.|stft$|istft$)", "fft"),
    (r"(^|\.)(bernoulli|normal|uniform|cauchy|exponential|geometric|log_normal|multinomial|randint|"
     r"randint_like|rand_like|randn|randn_like|native_dropout_backward)$|dropout|rrelu|"
     r"fractional_max_pool|(^|\.)(pca_lowrank|svd_lowrank)$", "random"),
    (r"^(arange|linspace|logspace|eye|full|full_like|zeros|zeros_like|ones|ones_like|empty|empty_like|"
     r"empty_permuted|empty_strided|new_\w+|scalar_tensor|tril_indices|triu_indices|zero_|fill|"
     r"linalg\.vander|cartesian_prod|combinations|meshgrid)$", "factory"),
    (r"scaled_dot_product_attention|multi_head_attention|_flash_attention|_efficient_attention", "attention"),
    (r"loss|cross_entropy|nll|kl_div", "loss"),
    (r"^nn\.functional\.(conv|avg_pool|max_pool|adaptive_|max_unpool|unfold)|max_pool2d_with_indices|"
     r"lp_pool", "conv_pool"),
    (r"interpolate|upsample|grid_sample|grid_sampler|affine_grid|pixel_(un)?shuffle|channel_shuffle", "interpolation"),
    (r"^(nn\.functional\.pad|constant_pad_nd)$", "padding"),
    (r"(^|\.)(batch_norm|layer_norm|group_norm|instance_norm|local_response_norm|rms_norm|normalize|"
     r"native_batch_norm|native_layer_norm|native_group_norm|_batch_norm_with_update|"
     r"_native_batch_norm_legit|renorm)$", "normalization"),
    (r"softmax|softmin|_softmax_backward_data", "softmax"),
    (r"(^|\.)(embedding|embedding_bag|one_hot)$", "embedding"),
    (r"(^|\.)(cdist|pdist|dist|pairwise_distance|cosine_similarity)$", "distance"),
    (r"^(mm|bmm|matmul|__rmatmul__|addmm|addbmm|baddbmm|addmv|mv|dot|vdot|inner|outer|addr|einsum|tensordot|"
     r"kron|linalg\.multi_dot|linalg\.vecdot|nn\.functional\.linear|nn\.functional\.bilinear|chain_matmul|"
     r"sparse\.mm|sparse\.sampled_addmm|torch\._scaled_mm.*)$", "matmul"),
    (r"^(linalg\.|cholesky|lu|lu_solve|lu_unpack|qr|svd|pinverse|det|logdet|inverse|triangular_solve|"
     r"ormqr|geqrf|matrix_exp|cholesky_solve|cholesky_inverse|symeig|eig)", "linalg"),
    (r"(^|\.)(cumsum|cumprod|cummax|cummin|logcumsumexp|cumulative_trapezoid)$", "scan"),
    (r"^(sort|argsort|msort|topk|kthvalue|mode|median|nanmedian|unique|unique_consecutive|searchsorted|"
     r"bucketize|quantile|nanquantile|masked\.median)$", "sort"),
    (r"^(gather|scatter|scatter_add|scatter_reduce|index_add|index_copy|index_fill|index_put|index_reduce|"
     r"put|take|take_along_dim|masked_scatter|diagonal_scatter|select_scatter|slice_scatter|"
     r"as_strided_scatter|_unsafe_masked_index_put_accumulate)$", "scatter_gather"),
    (r"^(index_select|__getitem__|masked_select|masked_fill|nonzero|nonzero_static|argwhere|narrow|"
     r"narrow_copy|select|slice|_unsafe_masked_index|unravel_index|isin)$", "indexing"),
    (r"^(sum|mean|amax|amin|aminmax|max|min|argmax|argmin|std|var|var_mean|std_mean|logsumexp|norm|prod|"
     r"all|any|count_nonzero|nansum|nanmean|trace|histc|histogram|histogramdd|bincount|linalg\.vector_norm|"
     r"linalg\.matrix_norm|linalg\.norm|masked\.\w+|_segment_reduce|trapezoid|trapz|cov|corrcoef|"
     r"hash_tensor|equal|allclose|item)$", "reduction"),
    (r"^(addcmul|addcdiv|lerp|where|clamp|polar)$", "ternary"),
    (r"^nn\.functional\.(relu|relu6|elu|selu|celu|gelu|silu|mish|hardswish|hardsigmoid|hardtanh|"
     r"leaky_relu|prelu|softplus|softshrink|hardshrink|tanhshrink|threshold|logsigmoid|glu|softsign)$|"
     r"^(sigmoid|logit|special\.expit)$", "activation"),
    (r"^(H|T|mH|mT|view|view_as|view_copy|reshape|reshape_as|permute|permute_copy|transpose|transpose_copy|t|"
     r"t_copy|flatten|unflatten|ravel|squeeze|squeeze_copy|unsqueeze|unsqueeze_copy|expand|expand_as|"
     r"expand_copy|broadcast_to|broadcast_tensors|repeat|repeat_interleave|tile|roll|flip|fliplr|flipud|"
     r"rot90|cat|_chunk_cat|stack|hstack|vstack|dstack|column_stack|split|split_with_sizes|"
     r"split_with_sizes_copy|unsafe_split|chunk|unsafe_chunk|tensor_split|hsplit|vsplit|dsplit|unbind|"
     r"unbind_copy|movedim|swapaxes|diag|diag_embed|diagflat|diagonal|diagonal_copy|tril|triu|clone|"
     r"contiguous|alias_copy|as_strided|as_strided_copy|atleast_[123]d|block_diag|unfold|unfold_copy|"
     r"resize_|resize_as_|to|sum_to_size|positive|conj|conj_physical|resolve_conj|resolve_neg|"
     r"view_as_real|view_as_complex|real|imag|diff|gradient)$", "shape"),
]
_COMPILED = [(re.compile(p), fam) for p, fam in _RULES]


def classify(name: str, kind: str = "OpInfo") -> str:
    """The family of an OpInfo entry called ``name`` whose class is ``kind``
    (``UnaryUfuncInfo``, ``BinaryUfuncInfo``, ``ReductionOpInfo``, ...)."""
    for pattern, family in _COMPILED:
        if pattern.search(name):
            return family
    if kind == "SpectralFuncInfo":
        return "fft"
    if kind == "ReductionOpInfo":
        return "reduction"
    if kind == "UnaryUfuncInfo" or name.startswith("special.") and kind != "BinaryUfuncInfo":
        return "unary"
    if kind == "BinaryUfuncInfo":
        return "binary"
    return "other"
