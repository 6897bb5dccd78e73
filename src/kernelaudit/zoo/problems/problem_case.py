"""ProblemCase: one concrete run of a problem (shape, inputs, seed, device, dtype).

A case is what every oracle judges: ``judge(case, got)``. It is regenerated from the
problem, the shape overrides and the seed alone, so a reference can be built on any
device. Models are built the way KernelBench builds them (seed 42, then
``get_init_inputs()``, then the seed again before each constructor), so a candidate
that creates its parameters in the same order as ``Model`` gets the same values.
"""

from __future__ import annotations

import contextlib
import copy
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from ...config import FLOAT64_CUDNN
from .loader import Candidate, Problem

#: The seed KernelBench uses to build models and derive the trial seeds.
KERNELBENCH_SEED = 42


class ReferenceFailed(Exception):
    """The problem's own code (``Model``, ``get_inputs``) raised: the case cannot be judged.

    Never the candidate's fault: an oracle that meets it says it could not judge.
    """


class CheckerOutOfMemory(ReferenceFailed):
    """The checker itself ran out of memory (its float64 reference, the derivation of the
    error model, a comparison): the case could not be judged, never the candidate's fault."""


def is_out_of_memory(exc: BaseException) -> bool:
    """A ``MemoryError`` or torch's out-of-memory error (CUDA or CPU allocator)."""
    return isinstance(exc, (MemoryError, torch.OutOfMemoryError))


def memory_held(device: str | torch.device) -> str:
    """What the checking process holds now, in words: allocated and peak device memory on
    CUDA, the peak resident size of the process otherwise."""
    import resource

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB (Linux)
    if str(device).startswith("cuda") and torch.cuda.is_available():
        dev = torch.device(device)
        return (f"{torch.cuda.memory_allocated(dev) / 2**30:.1f} GiB allocated by PyTorch on {dev} "
                f"(peak {torch.cuda.max_memory_allocated(dev) / 2**30:.1f} GiB), process peak resident {rss:.1f} GiB")
    return f"process peak resident {rss:.1f} GiB"


def checker_out_of_memory(case_or_problem: Any, what: str, exc: BaseException) -> CheckerOutOfMemory:
    """A :class:`CheckerOutOfMemory` saying what the checker was computing and how much it held."""
    problem = getattr(case_or_problem, "problem", case_or_problem)
    label = case_or_problem.describe() if isinstance(case_or_problem, ProblemCase) else str(problem.path)
    device = getattr(case_or_problem, "device", "cpu")
    return CheckerOutOfMemory(f"{label}: could not judge: the checker ran out of memory while computing {what} "
                              f"({type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}; "
                              f"the checker held {memory_held(device)}); not the candidate's fault")


def reference_failure(case_or_problem: Any, what: str, exc: BaseException) -> ReferenceFailed:
    """A :class:`ReferenceFailed` naming the problem, what raised and where in the problem file."""
    import traceback

    if is_out_of_memory(exc):
        return checker_out_of_memory(case_or_problem, f"the reference ({what})", exc)
    problem = getattr(case_or_problem, "problem", case_or_problem)
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == str(problem.path)]
    where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    label = case_or_problem.describe() if isinstance(case_or_problem, ProblemCase) else str(problem.path)
    return ReferenceFailed(f"{label}: could not judge: the reference ({what}) raised {type(exc).__name__}"
                           f"{where}: {exc}")


def set_seed(seed: int) -> None:
    """Seed torch (CPU and every CUDA device), numpy and random, as KernelBench does."""
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed % 2**32)
    except ImportError:  # pragma: no cover
        pass


def to_device(values: Sequence[Any], device: str | torch.device) -> list[Any]:
    """Move every tensor of a list to ``device``; other values pass through."""
    return [v.to(device) if isinstance(v, torch.Tensor) else v for v in values]


def as_tensors(out: Any) -> list[torch.Tensor]:
    """A forward's output as a list of tensors (a tensor, or a tuple/list of them)."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)) and all(isinstance(t, torch.Tensor) for t in out):
        return list(out)
    raise TypeError(f"expected a tensor or a tuple of tensors as output, got {type(out).__name__}")


def floating_dtype(values: Sequence[Any]) -> torch.dtype:
    """The dtype of the first floating-point tensor (float32 when there is none)."""
    for v in values:
        if isinstance(v, torch.Tensor) and v.is_floating_point():
            return v.dtype
    return torch.float32


@dataclass
class ProblemCase:
    """One concrete configuration of a problem.

    ``inputs`` are on ``device``; ``shapes`` are the shape constants in effect;
    ``label`` says where the case comes from (``fixed``, ``shape N=17``,
    ``values large``, ``trial 3``) and appears in verdict messages. ``block_floor``: the
    inputs stack blocks of rows of different magnitudes (a suite's ``strata`` input), so
    an error bound's floor at "the output's typical magnitude" is taken per block of the
    output (:func:`kernelaudit.zoo.oracles.values.block_rms`), as if each kind were judged
    alone.
    """

    problem: Problem
    inputs: list[Any]
    init_inputs: list[Any]
    seed: int
    device: str
    dtype: torch.dtype
    shapes: dict[str, int]
    label: str = "fixed"
    block_floor: bool = False
    _cache: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    # -- construction ---------------------------------------------------------
    @classmethod
    def make(
        cls,
        problem: Problem,
        *,
        seed: int = KERNELBENCH_SEED,
        device: str = "cpu",
        shapes: Mapping[str, int] | None = None,
        small: bool = False,
        label: str = "fixed",
    ) -> "ProblemCase":
        """Build the case at the problem's shape (``small=True``: its small shape).

        ``shapes`` overrides single constants on top of that.
        """
        over = dict(problem.small()) if small else {}
        over.update(shapes or {})
        # On a GPU, get_inputs() runs under the device context so torch.rand & co. create
        # the tensors there: generating large inputs on the CPU would dominate the cost.
        gen_device = torch.device(device) if str(device).startswith("cuda") else contextlib.nullcontext()
        with problem.at_shapes(over) as in_effect:
            set_seed(KERNELBENCH_SEED)
            init = list(problem.module.get_init_inputs())
            set_seed(seed)
            with gen_device:
                inputs = list(problem.module.get_inputs())
        inputs = to_device(inputs, device)
        return cls(problem, inputs, to_device(init, device), seed, str(device), floating_dtype(inputs), in_effect, label)

    def with_inputs(self, inputs: Sequence[Any], label: str, *, block_floor: bool = False) -> "ProblemCase":
        """The same problem, shape and models, with other input values (``block_floor``: see the class)."""
        return replace(self, inputs=list(inputs), label=label, block_floor=block_floor, _cache={})

    # -- description ----------------------------------------------------------
    def describe(self) -> str:
        """``relu [N=16384] float32 on cpu (fixed)``: op, shapes, dtype, device, origin."""
        shapes = ", ".join(f"{k}={v}" for k, v in self.shapes.items())
        return f"{self.problem.name} [{shapes}] {str(self.dtype).replace('torch.', '')} on {self.device} ({self.label})"

    def input_shapes(self) -> list[tuple[int, ...]]:
        return [tuple(v.shape) for v in self.inputs if isinstance(v, torch.Tensor)]

    # -- models and the reference -------------------------------------------
    def model(self, *, deterministic: bool = True) -> torch.nn.Module:
        """The problem's ``Model`` built KernelBench-style, cached per shape and device, in
        the checks' mode (:func:`check_mode`); ``deterministic=False``: a fresh one exactly
        as KernelBench's own checker runs it (training mode, dropout drawing its masks).

        Raises :class:`ReferenceFailed` when the constructor raises.
        """
        try:
            if not deterministic:
                return new_model(self.problem.Model, self.init_inputs, self.device, deterministic=False)
            return build_model(self.problem, self.problem.Model, self.init_inputs, self.device, self.shapes)
        except Exception as exc:  # noqa: BLE001 - the problem's code failed, not the candidate's
            raise reference_failure(self, "Model(*get_init_inputs())", exc) from exc

    def reference(self, dtype: torch.dtype = torch.float64) -> list[torch.Tensor]:
        """``Model``'s output at ``dtype`` (float64: the trusted answer), cached on the case.

        Floating inputs and parameters are converted to ``dtype``; integer inputs
        (class indexes) are kept.
        """
        key = f"ref:{dtype}"
        if key not in self._cache:
            model = self.model()

            def run(factories_at_dtype: bool = False) -> list[torch.Tensor]:
                m = model if dtype == self.dtype else self.model_at(dtype)
                with torch.no_grad(), default_dtype(dtype if factories_at_dtype else None), \
                        float64_backend(self.device, dtype):
                    return [t.detach() for t in as_tensors(m(*cast_floating(self.inputs, dtype)))]

            try:
                self._cache[key] = run()
            except Exception as exc:  # noqa: BLE001 - the problem's code failed, not the candidate's
                flags = self.problem.__dict__
                if dtype == self.dtype:
                    raise reference_failure(self, f"Model.forward at {dtype}", exc) from exc
                # Two ways a correct problem fails at another dtype, each tried once: a forward
                # that makes tensors at the default dtype (KernelBench L3 35: ``torch.randn(...)``
                # as the LSTM's initial state), and a copy that shares modules with the original.

                def with_fresh_models() -> list[torch.Tensor]:
                    flags["_fresh_models"] = True  # kept for this problem's later copies if it works
                    try:
                        return run()
                    except Exception:
                        flags.pop("_fresh_models")
                        raise

                retries = [lambda: run(factories_at_dtype=True)] if dtype in DEFAULT_DTYPES else []
                if not flags.get("_fresh_models"):
                    retries.append(with_fresh_models)
                for retry in retries:
                    try:
                        self._cache[key] = retry()
                        break
                    except Exception:  # noqa: BLE001 - not that: the first failure is the one to report
                        continue
                else:
                    raise reference_failure(self, f"Model.forward at {dtype}", exc) from exc
        return self._cache[key]

    def model_at(self, dtype: torch.dtype) -> torch.nn.Module:
        """The case's ``Model`` with floating parameters and buffers at ``dtype``, never the cached one.

        A deep copy, converted; or, for a problem whose forward reaches submodules through a
        closure (KernelBench L3 44: ``self.mlpf = lambda x: m.c_proj(...)``), which a deep copy
        shares with the original, a fresh instance built like :meth:`model`, converted in place.
        """
        try:
            if self.problem.__dict__.get("_fresh_models"):
                return new_model(self.problem.Model, self.init_inputs, self.device).to(dtype)
            return copy.deepcopy(self.model()).to(dtype)
        except Exception as exc:  # noqa: BLE001 - the problem's code failed, not the candidate's
            raise reference_failure(self, "Model(*get_init_inputs())", exc) from exc


def float64_backend(device: torch.device | str, dtype: torch.dtype = torch.float64):
    """Where an evaluation of the reference at ``dtype`` runs: at float64 on a CUDA device,
    with cuDNN off (the default, ``KERNELAUDIT_FLOAT64_CUDNN=0``: convolutions as im2col and
    cuBLAS float64 GEMMs, which reach the GPU's float64 tensor cores) or with cuDNN as torch
    picks it (``=1``); anything else as it is. Either is a float64 evaluation of the same
    function; cuDNN's float64 convolutions were the slower on 23 of KernelBench level 1's 25
    convolutions measured on the H200 (``benchmarks/float64_conv_paths.py``)."""
    if dtype != torch.float64 or torch.device(device).type != "cuda" or FLOAT64_CUDNN.flag():
        return contextlib.nullcontext()
    return torch.backends.cudnn.flags(enabled=False)


#: The dtypes ``torch.set_default_dtype`` accepts for a reference run.
DEFAULT_DTYPES = (torch.float32, torch.float64)


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype | None) -> Iterator[None]:
    """Factories without a ``dtype=`` make ``dtype`` tensors inside (no change for None)."""
    if dtype is None:
        yield
        return
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


def cast_floating(values: Sequence[Any], dtype: torch.dtype) -> list[Any]:
    """Cast floating-point tensors to ``dtype`` (copies, so inputs are never aliased)."""
    return [v.to(dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() else v for v in values]


def build_model(
    problem: Problem, cls: type, init_inputs: Sequence[Any], device: str, shapes: Mapping[str, int]
) -> torch.nn.Module:
    """``cls(*init_inputs)`` after seeding with 42, on ``device``, in the checks' mode
    (:func:`check_mode`); cached per problem."""
    cache = problem.__dict__.setdefault("_model_cache", {})
    key = (id(cls), str(device), tuple(sorted(shapes.items())))
    hit = cache.get(key)
    if hit is None or hit[0] is not cls:  # the class is kept alive so its id stays unique
        hit = cache[key] = (cls, new_model(cls, init_inputs, device))
    return hit[1]


#: The TF32 switches PyTorch consults in float32 convolutions and matmuls on CUDA (cuDNN's is on by default).
TF32_SWITCHES = ((torch.backends.cudnn, "allow_tf32"), (torch.backends.cuda.matmul, "allow_tf32"))


@contextlib.contextmanager
def problem_precision(case: ProblemCase) -> Iterator[None]:
    """Run the candidate at the problem's precision: TF32 off in cuDNN and CUDA matmuls
    unless the problem declares ``ALLOW_TF32``.

    PyTorch lets cuDNN round float32 convolutions' operands to TF32 by default, so a
    correct float32 candidate that calls ``F.conv2d`` would round like TF32 (2^-11, not
    2^-24) and fail every bound derived for float32. The error model evaluates the
    reference with TF32 off too. On exit a switch is set back only where it still holds
    the value set here: a candidate that turns TF32 on itself leaves that visible to the
    checks of changed switches. The ``kernelbench`` oracle does not use this (the official
    checker runs with PyTorch's defaults)."""
    if case.problem.allow_tf32 or not str(case.device).startswith("cuda"):
        yield
        return
    with tf32_off(keep_changes=True):
        yield


@contextlib.contextmanager
def tf32_off(*, keep_changes: bool = False) -> Iterator[None]:
    """Every switch of :data:`TF32_SWITCHES` off for the block, set back after; with
    ``keep_changes`` only the switches still off (one turned on inside stays on)."""
    before = [(owner, name, getattr(owner, name)) for owner, name in TF32_SWITCHES]
    for owner, name, _ in before:
        setattr(owner, name, False)
    try:
        yield
    finally:
        for owner, name, old in before:
            if not keep_changes or getattr(owner, name) is False:
                setattr(owner, name, old)


def release_models(case: ProblemCase) -> None:
    """Drop the cached ``Model`` instances of ``case``'s shape and device (and the case's
    references), so an oracle that walks many shapes holds one shape's models at a time."""
    cache = case.problem.__dict__.get("_model_cache", {})
    shapes = tuple(sorted(case.shapes.items()))
    for key in [k for k in cache if k[1] == str(case.device) and k[2] == shapes]:
        del cache[key]
    case._cache.clear()


#: Entries of ``ProblemCase._cache`` that hold scalars or strings, kept by :func:`release_case`:
#: the derived model's largest allowed error per output, and why no model could be derived.
SMALL_CACHE_KEYS = ("derived-floor", "derived-failed")


def release_case(case: ProblemCase) -> None:
    """Drop the large tensors a case caches (float64 references, derived error models,
    float64 model copies) and keep the small entries (verdicts, scalar summaries such as
    ``derived-floor``): called between oracles, so a sequence holds one oracle's working
    set at a time, not the sum of all of them."""
    for key in list(case._cache):
        if not ((isinstance(key, tuple) and key and key[0] == "verdict") or key in SMALL_CACHE_KEYS):
            del case._cache[key]


#: Modules whose training mode draws random numbers (dropout masks, between an RNN's
#: layers and inside attention): :func:`check_mode` puts them in eval mode.
RANDOM_IN_TRAINING: tuple[type, ...] = (torch.nn.modules.dropout._DropoutNd, torch.nn.MultiheadAttention,
                                        torch.nn.RNNBase)


def check_mode(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` in the mode every check but ``kernelbench`` runs it: the mode it was built
    in (training, unless its constructor says otherwise), as KernelBench's checker leaves it,
    so a BatchNorm normalises with the batch's statistics and a candidate must too; and
    every module of :data:`RANDOM_IN_TRAINING` in eval mode, so the reference and a
    candidate compute one function rather than two draws of dropout masks (dropout called
    functionally with ``training=True`` stays random: such a problem is random by design)."""
    for m in model.modules():
        if isinstance(m, RANDOM_IN_TRAINING):
            m.eval()
    return model


def new_model(cls: type, init_inputs: Sequence[Any], device: str, *, deterministic: bool = True) -> torch.nn.Module:
    """A fresh ``cls(*init_inputs)`` after seeding with 42, on ``device``, in the checks'
    mode (:func:`check_mode`); ``deterministic=False``: as built (KernelBench's checker).

    Off the CPU the constructor runs under ``device`` as the default device, so parameters
    are created and initialised there: on the H200 host a level-3 CNN's random
    initialisation on one CPU thread cost seconds per instance, and every oracle of every
    mutant builds fresh instances (on 2 CPU cores, 3.1 s of 8.2 s of ``strongest`` on
    AlexNet went to ``uniform_``). ``Model`` and ``ModelNew`` are built the same way from
    the same seed, so their weights still match. A constructor that cannot run there (it
    reads values back, calls ``.numpy()``) is built on the CPU, as before, and moved."""
    m = None
    if torch.device(device).type != "cpu":
        set_seed(KERNELBENCH_SEED)
        try:
            with torch.no_grad(), torch.device(device):
                m = cls(*init_inputs)
        except Exception:  # noqa: BLE001 - a constructor tied to the CPU: built there below
            m = None
    if m is None:
        set_seed(KERNELBENCH_SEED)
        with torch.no_grad():
            m = cls(*init_inputs)
    if isinstance(m, torch.nn.Module):
        m = m.to(device)
        if deterministic:
            m = check_mode(m)
    return m


def build_candidate_model(case: ProblemCase, candidate: Candidate, *, deterministic: bool = True
                          ) -> torch.nn.Module:
    """A fresh ``ModelNew`` for the case's shape, built like ``Model`` (never shared: a
    stateful candidate must not carry state from one oracle into the next)."""
    return new_model(candidate.ModelNew, case.init_inputs, case.device, deterministic=deterministic)
