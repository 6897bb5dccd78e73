"""Candidates built from a problem's own reference: the reference itself, reordered
variants of it (correct) and precision downgrades (wrong).

An oracle that rejects a correct one wrongly rejects a correct kernel (a false
rejection); one that passes a downgrade misses a wrong one. The reordered variants are
correct implementations that compute in another order, not copies:

``split_reductions``  every matmul, ``linear``, convolution (``groups=1``, transposed
                      too) and sum or mean over one dimension split in two halves along
                      its reduction dimension and the two partial results added:
                      split-K, a summation order no torch backend uses
                      (:class:`SplitReductions`).
``row_chunks``        the reference run on row chunks of its batch (dim 0) and the
                      outputs concatenated, where the model is batch-separable. That
                      is *verified* in float64 on the case first, per mode (eval and
                      training): BatchNorm in training mode, a loss that averages
                      over the batch or a model that mixes rows is not separable and
                      runs whole in that mode.

Two ways to build them:

* files, for the false-rejection benchmark (every oracle, ``static`` included, reads a
  candidate as written): :func:`reference_candidate` (``Model`` renamed ``ModelNew``)
  and :func:`reordered_candidate`, which always splits reductions and runs in row
  chunks where separable (``row_chunks+split_reductions``);
* in-memory candidates that calibrate and test the error models,
  :func:`variant_candidate` ``(problem, kind)`` with a kind of :data:`VARIANT_KINDS`:
  ``reference`` (``Model`` itself), ``split`` (split reductions), ``bf16``/``fp16``
  (parameters and inputs cast to that dtype, the output cast back: an fp32 problem
  computed in half precision, wrong) and ``tf32`` (the operands of every matmul,
  linear, convolution and ``scaled_dot_product_attention`` rounded to 10 mantissa
  bits, as TF32 tensor cores read them: wrong unless the problem allows TF32).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from .loader import Candidate, Problem, load_candidate
from .problem_case import ProblemCase, as_tensors, cast_floating, check_mode

#: Float64 agreement (relative to the output's largest magnitude) that counts as separable.
SEPARABLE_RTOL = 1e-9
#: Row chunks the batch is run in.
CHUNKS = 2
#: Kinds :func:`variant_candidate` builds, and whether a correct checker must accept them.
VARIANT_KINDS = {"reference": True, "split": True, "bf16": False, "fp16": False, "tf32": False}


def renamed_source(problem: Problem, new_name: str) -> str:
    """The problem file's source with the class ``Model`` renamed ``new_name`` everywhere
    (``super(Model, self)`` included); formatting and line numbers kept (libcst)."""
    import libcst as cst

    class Rename(cst.CSTTransformer):
        def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.Name:  # noqa: N802 - the libcst API
            return updated.with_changes(value=new_name) if updated.value == "Model" else updated

    return cst.parse_module(problem.path.read_text()).visit(Rename()).code


def reference_candidate(problem: Problem, directory: str | Path) -> Candidate:
    """The problem's ``Model`` as its own candidate: a file in ``directory`` holding the
    problem's source with ``Model`` renamed ``ModelNew`` (a candidate file like any other,
    so every oracle, ``static`` included, reads it as written)."""
    path = Path(directory) / f"{problem.name}__reference.py"
    path.write_text(renamed_source(problem, "ModelNew") + '\n\nVARIANT = "the reference itself"\n')
    return load_candidate(path)


# ---------------------------------------------------------------------------
# split reductions
# ---------------------------------------------------------------------------


def _floating(*ts: Any) -> bool:
    return all(isinstance(t, torch.Tensor) and t.is_floating_point() for t in ts)


def _split_matmul(func, a, b, *rest, **kw):  # noqa: ANN001, ANN202
    if rest or kw or not _floating(a, b) or a.dim() == 0 or b.dim() == 0 or a.shape[-1] < 2:
        return NotImplemented
    k = a.shape[-1] // 2
    b_lo, b_hi = (b[:k], b[k:]) if b.dim() == 1 else (b[..., :k, :], b[..., k:, :])
    return func(a[..., :k], b_lo) + func(a[..., k:], b_hi)


def _split_linear(func, x, weight, bias=None):  # noqa: ANN001, ANN202
    if not _floating(x, weight) or x.dim() == 0 or x.shape[-1] < 2:
        return NotImplemented
    k = x.shape[-1] // 2
    return func(x[..., :k], weight[:, :k]) + func(x[..., k:], weight[:, k:], bias)


def _channel_dim(x: torch.Tensor, weight: torch.Tensor) -> int:
    return 1 if x.dim() == weight.dim() else 0  # batched or unbatched input


def _split_conv(func, x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):  # noqa: ANN001, ANN202
    if groups != 1 or not _floating(x, weight) or weight.shape[1] < 2:
        return NotImplemented
    c, d = weight.shape[1] // 2, _channel_dim(x, weight)
    return (func(x.narrow(d, 0, c), weight[:, :c], None, stride, padding, dilation, 1)
            + func(x.narrow(d, c, x.shape[d] - c), weight[:, c:], bias, stride, padding, dilation, 1))


def _split_conv_transpose(func, x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,  # noqa: ANN001, ANN202
                          dilation=1):
    if groups != 1 or not _floating(x, weight) or weight.shape[0] < 2:
        return NotImplemented
    c, d = weight.shape[0] // 2, _channel_dim(x, weight)
    return (func(x.narrow(d, 0, c), weight[:c], None, stride, padding, output_padding, 1, dilation)
            + func(x.narrow(d, c, x.shape[d] - c), weight[c:], bias, stride, padding, output_padding, 1, dilation))


def _split_sum(func, x, dim=None, keepdim=False, *, dtype=None):  # noqa: ANN001, ANN202
    if isinstance(dim, (list, tuple)) and len(dim) == 1:
        dim = dim[0]
    if not _floating(x) or not isinstance(dim, int) or x.dim() == 0 or x.shape[dim] < 2:
        return NotImplemented
    h = x.shape[dim] // 2
    lo, hi = x.narrow(dim, 0, h), x.narrow(dim, h, x.shape[dim] - h)
    return func(lo, dim, keepdim, dtype=dtype) + func(hi, dim, keepdim, dtype=dtype)


def _split_mean(func, x, dim=None, keepdim=False, *, dtype=None):  # noqa: ANN001, ANN202
    total = _split_sum(torch.sum, x, dim, keepdim, dtype=dtype)
    if total is NotImplemented:
        return total
    return total / x.shape[dim[0] if isinstance(dim, (list, tuple)) else dim]


_SPLITTERS = {
    torch.matmul: _split_matmul, torch.Tensor.matmul: _split_matmul, torch.Tensor.__matmul__: _split_matmul,
    torch.mm: _split_matmul, torch.Tensor.mm: _split_matmul, torch.bmm: _split_matmul, torch.Tensor.bmm: _split_matmul,
    torch.nn.functional.linear: _split_linear,
    torch.conv1d: _split_conv, torch.conv2d: _split_conv, torch.conv3d: _split_conv,
    torch.conv_transpose1d: _split_conv_transpose, torch.conv_transpose2d: _split_conv_transpose,
    torch.conv_transpose3d: _split_conv_transpose,
    torch.sum: _split_sum, torch.Tensor.sum: _split_sum,
    torch.mean: _split_mean, torch.Tensor.mean: _split_mean,
}


class SplitReductions(TorchFunctionMode):
    """While active, matmuls, linears, convolutions and sums and means over a dim are
    computed as the sum of two halves along their reduction dimension; ``count`` says how
    many were.

    A ``TorchFunctionMode`` (the Python API level), not a dispatch mode: entering a
    dispatch mode imports ``torch._dynamo``, seconds of a test's budget.
    """

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        kwargs = kwargs or {}
        split = _SPLITTERS.get(func)
        if split is not None:
            try:
                out = split(func, *args, **kwargs)
            except TypeError:  # a signature the splitter does not know: compute as asked
                out = NotImplemented
            if out is not NotImplemented:
                self.count += 1
                return out
        return func(*args, **kwargs)


# ---------------------------------------------------------------------------
# row chunks
# ---------------------------------------------------------------------------


def run_in_row_chunks(model: torch.nn.Module, inputs: list[Any], plan: tuple[int, ...], chunks: int = CHUNKS) -> Any:
    """``model`` on row chunks of the inputs named by ``plan`` (the others whole), outputs
    concatenated on dim 0. A batch smaller than ``chunks`` runs whole."""
    batch = inputs[plan[0]].shape[0]
    if batch < chunks or any(inputs[i].shape[0] != batch for i in plan):
        return model(*inputs)
    parts = [torch.tensor_split(inputs[i], chunks, dim=0) for i in plan]
    outs = []
    for c in range(chunks):
        args = list(inputs)
        for i, p in zip(plan, parts):
            args[i] = p[c]
        outs.append(model(*args))
    if isinstance(outs[0], torch.Tensor):
        return torch.cat(outs, dim=0)
    return type(outs[0])(torch.cat(group, dim=0) for group in zip(*outs))


def _row_plans(inputs: list[Any]) -> list[tuple[int, ...]]:
    """Which inputs to split: all whose dim 0 is the first tensor's, else the first alone."""
    idx = [i for i, x in enumerate(inputs) if isinstance(x, torch.Tensor) and x.dim() >= 1]
    if not idx:
        return []
    batch = inputs[idx[0]].shape[0]
    same = tuple(i for i in idx if inputs[i].shape[0] == batch)
    return [same] if same == (idx[0],) else [same, (idx[0],)]


def _agree(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x.shape != y.shape or x.dtype != y.dtype:
            return False
        if not x.is_floating_point():
            if not torch.equal(x, y):
                return False
            continue
        if not x.numel():
            continue
        scale = float(x.abs().nan_to_num(posinf=0, neginf=0).max())
        same_nonfinite = torch.equal(torch.isfinite(x), torch.isfinite(y))
        if not same_nonfinite or float((x - y).nan_to_num(0).abs().max()) > SEPARABLE_RTOL * max(scale, 1e-300):
            return False
    return True


def separable_plan(case: ProblemCase, *, training: bool) -> tuple[int, ...] | None:
    """The inputs whose rows can be run in chunks with the same result (float64, on the
    case's inputs, in eval or training mode), or None when the model is not separable."""
    model = copy.deepcopy(case.model()).to(torch.float64).train(training)
    if training:
        check_mode(model)  # training as the checks run it: dropout off
    # On the case's inputs and on signed normal ones: structured inputs (triangular
    # matrices) can hide a dependence between rows that other values show.
    from ..oracles.values import value_inputs

    input_sets = [cast_floating(case.inputs, torch.float64),
                  cast_floating(value_inputs(case, "normal", case.seed + 1), torch.float64)]
    plans = _row_plans(input_sets[0])
    for inputs in input_sets:
        plans = [p for p in plans if _separable_on(model, inputs, p)]
    return plans[0] if plans else None


def _separable_on(model: torch.nn.Module, inputs: list[Any], plan: tuple[int, ...]) -> bool:
    """Do row chunks of ``plan`` give the whole-batch output on these inputs (float64)?"""

    def fresh() -> list[Any]:  # a model that writes into its inputs must not spoil the next run
        return [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]

    batch = inputs[plan[0]].shape[0]
    if batch < CHUNKS:
        return False
    try:
        with torch.no_grad():
            full = as_tensors(model(*fresh()))
            if not full or any(t.dim() == 0 or t.shape[0] != batch for t in full):
                return False
            out = as_tensors(run_in_row_chunks(model, fresh(), plan))
    except Exception:  # noqa: BLE001 - chunks the model cannot take (a fixed batch in a reshape), or no
        return False   # reference at these values: not separable as far as this check knows
    return _agree(full, out)


@dataclass
class Variant:
    """A reordered candidate and how it was reordered."""

    candidate: Candidate
    kind: str
    plans: dict[str, tuple[int, ...] | None]


_VARIANT_TAIL = '''

# --- the reordered variant (written by kernelaudit.zoo.problems.variants) ---
from kernelaudit.zoo.problems.variants import SplitReductions as _SplitReductions
from kernelaudit.zoo.problems.variants import run_in_row_chunks as _run_in_row_chunks

_ROW_PLANS = {plans!r}  # inputs split in row chunks per mode (None: not batch-separable)
VARIANT = {kind!r}


class ModelNew(torch.nn.Module):
    """The reference run in row chunks (where separable) with its reductions split."""

    def __init__(self, *args, **kwargs):
        super().__init__()
        self.inner = ReferenceModel(*args, **kwargs)  # first: the same RNG draws, the same parameters

    def forward(self, *inputs):
        plan = _ROW_PLANS["train" if self.training else "eval"]
        with _SplitReductions():
            if plan is None:
                return self.inner(*inputs)
            return _run_in_row_chunks(self.inner, list(inputs), plan)
'''


def reordered_candidate(case: ProblemCase, directory: str | Path) -> Variant:
    """The reordered variant of ``case.problem``'s reference, written to ``directory``
    (the problem's source with ``Model`` renamed ``ReferenceModel``, and a ``ModelNew``
    that runs it reordered; see the module doc)."""
    problem = case.problem
    plans = {"eval": separable_plan(case, training=False), "train": separable_plan(case, training=True)}
    kind = "row_chunks+split_reductions" if plans["eval"] is not None else "split_reductions"
    path = Path(directory) / f"{problem.name}__reordered.py"
    source = renamed_source(problem, "ReferenceModel")
    if "import torch\n" not in source:
        source = "import torch\n" + source
    path.write_text(source + _VARIANT_TAIL.format(plans=plans, kind=kind))
    return Variant(load_candidate(path), kind, plans)


def split_count(case: ProblemCase) -> int:
    """How many reductions :class:`SplitReductions` splits in one forward of the case."""
    model = case.model()
    mode = SplitReductions()
    with torch.no_grad(), mode:
        model(*[x.clone() if isinstance(x, torch.Tensor) else x for x in case.inputs])
    return mode.count


# ---------------------------------------------------------------------------
# in-memory variants: the reference, split, precision downgrades
# ---------------------------------------------------------------------------

_F = torch.nn.functional
#: Ops whose operands TF32 tensor cores read rounded: matmuls, linear, convolutions, attention.
_TF32_OPS = {f for f, split in _SPLITTERS.items() if split is not _split_sum and split is not _split_mean} | {
    torch.addmm, torch.baddbmm, _F.scaled_dot_product_attention}


def _round_tf32(t: torch.Tensor) -> torch.Tensor:
    """float32 rounded to 10 mantissa bits (nearest), as TF32 tensor cores read operands."""
    if not isinstance(t, torch.Tensor) or t.dtype != torch.float32:
        return t
    bits = t.contiguous().view(torch.int32)
    rounded = ((bits + 0x1000) & ~0x1FFF).view(torch.float32)
    return torch.where(torch.isfinite(t), rounded, t)


class RoundTF32Operands(TorchFunctionMode):
    """Round the operands of matmul, linear, convolution and attention to TF32."""

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        kwargs = kwargs or {}
        if func in _TF32_OPS:
            args = tuple(_round_tf32(a) for a in args)
            kwargs = {k: _round_tf32(v) for k, v in kwargs.items()}
        return func(*args, **kwargs)


def _wrap(problem: Problem, kind: str) -> type:
    model_cls = problem.Model

    class ModelNew(torch.nn.Module):
        def __init__(self, *init):
            super().__init__()
            self.inner = model_cls(*init)  # same seed, same construction order: same parameters
            self._low: torch.nn.Module | None = None

        def forward(self, *inputs):
            if kind in ("bf16", "fp16"):
                low = torch.bfloat16 if kind == "bf16" else torch.float16
                if self._low is None:
                    self._low = copy.deepcopy(self.inner).to(low)
                out = self._low(*[x.to(low) if isinstance(x, torch.Tensor) and x.is_floating_point() else x
                                  for x in inputs])
                want = next((x.dtype for x in inputs if isinstance(x, torch.Tensor) and x.is_floating_point()),
                            torch.float32)
                cast = (lambda t: t.to(want) if t.is_floating_point() else t)  # noqa: E731
                return cast(out) if isinstance(out, torch.Tensor) else type(out)(cast(t) for t in out)
            mode = {"split": SplitReductions, "tf32": RoundTF32Operands}.get(kind)
            if mode is None:
                return self.inner(*inputs)
            with mode():
                return self.inner(*inputs)

    return ModelNew


def variant_candidate(problem: Problem, kind: str) -> Candidate:
    """An in-memory candidate of ``kind`` (one of :data:`VARIANT_KINDS`, see the module
    doc) for ``problem``; its ``EXPECT`` says whether it is correct."""
    if kind not in VARIANT_KINDS:
        from ...errors import InvalidArgument

        raise InvalidArgument(f"Cannot build variant kind={kind!r}: allowed kinds are {', '.join(VARIANT_KINDS)}")
    module = ModuleType(f"_kernelaudit_variant_{problem.name}_{kind}")
    module.ModelNew = _wrap(problem, kind)
    module.PROBLEM = problem.name
    module.EXPECT = "correct" if VARIANT_KINDS[kind] else "wrong"
    module.VARIANT = kind
    return Candidate(name=f"{problem.name}__{kind}", path=problem.path, module=module)
