"""Small shapes for a problem that declares none: found by running the reference.

``--small`` (``ProblemCase.make(small=True)``) needs shapes at which the problem's own
``Model`` runs and that are actually small on a CPU. A KernelBench file declares no
``SMALL_SHAPES``; its sizes are module constants that ``get_inputs`` and/or
``get_init_inputs`` read, tuple elements (``input_shape = (32768,)``) and literals in
``get_inputs`` (``torch.rand(batch_size, 3, 224, 224)``): the size slots of
:mod:`.size_slots`.

The search shrinks every slot of at least :data:`SHRINK_MIN` *jointly*, dividing them
all by one power of two ``f`` (rounded up, at least :data:`FLOOR`): ratios stay
(``heads | embed_dim`` when both are powers of two, ``kernel <= input``, the tall or
skinny character of a matmul), and small structural ints (kernel sizes, strides,
a channel count of 3) are left as they are. When no common factor works (a ``Linear``
sized for 224x224 images), one group of equal sizes is kept and the rest shrunk.

Every candidate shape is first run on the meta device (nothing computed: the reference
either accepts the shapes or raises, and :class:`FlopCount` counts its
FLOPs), so the search is fast and its choice does not depend on the machine's load:
the least shrinking shape within :data:`SMALL_MAX_FLOPS` and :data:`SMALL_MAX_BYTES`.
That shape is then *verified*: ``Model`` is built and run for real (float32, CPU); a
shape that fails there is backed off from. A reference meta tensors cannot run is
searched with real runs, most shrunk shape first. The result is cached per file
content (and search settings) in memory and on disk (``KERNELAUDIT_SMALL_SHAPES_CACHE``),
so a second run is instant.

A problem's declared ``SMALL_SHAPES`` always wins (:meth:`Problem.small`).

The oracles that try many inputs (``shapes``, ``values``) and the derived error model's
tests of the function's structure run at the small shape when a case is larger
(:func:`shrinking_shapes`): a case at the problem's own shape pays for its own shape
once, not once per value kind or boundary shape.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import asdict, dataclass, field, replace
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from ...jsonstore import write_json_atomic
from .loader import Problem

#: Slots below this are structural (kernel sizes, strides, a channel count of 3): never shrunk.
SHRINK_MIN = 8
#: No slot is shrunk below this (a batch of 2 still splits in row chunks).
FLOOR = 2
#: A small shape's forward should do at most this many FLOPs (:class:`FlopCount`; about
#: 10 ms on one CPU core; counted on the meta device, so the choice does not depend on load).
SMALL_MAX_FLOPS = 1 << 25
#: ... and its inputs plus outputs should take at most this many bytes.
SMALL_MAX_BYTES = 1 << 21
#: Real runs of the reference the search makes at most (meta runs are free).
MAX_TRIES = 6
#: Bump when the search changes, so cached results of an older search are not reused (6: the
#: verifying run builds the model in the checks' mode, training, where 5 ran it in eval mode).
SEARCH_VERSION = 6

_memory_cache: dict[str, "SmallShapes"] = {}


@dataclass
class SmallShapes:
    """The search's answer: the overrides and the evidence that the reference runs there.

    ``source``: ``searched``, ``cache`` (an earlier search of the same file content),
    ``unchanged`` (nothing to shrink, or the file's shape already fits) or ``none``
    (the reference ran at no shape tried: ``note`` says why).
    """

    shapes: dict[str, int]
    source: str
    forward_s: float | None = None
    input_bytes: int | None = None
    note: str = ""
    tried: list[dict[str, Any]] = field(default_factory=list)
    flops: int | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def shrinkable(problem: Problem) -> dict[str, int]:
    """The slots the search shrinks (read by ``get_inputs``/``get_init_inputs``, at least
    :data:`SHRINK_MIN`), with their values in the file."""
    out: dict[str, int] = {}
    if problem.sizes is not None:
        for name in problem.sizes.names():
            slot = problem.sizes.slots[name]
            if name in problem.sizes.used and slot.value >= SHRINK_MIN:
                out[name] = slot.value
    for name in problem.shape_params:  # declared SHAPE_PARAMS the source analysis did not see
        v = getattr(problem.module, name)
        if name not in out and v >= SHRINK_MIN:
            out[name] = v
    return out


def shrink(values: dict[str, int], f: int) -> dict[str, int]:
    """Every value divided by ``f``, rounded up, at least :data:`FLOOR` (only those that change)."""
    out = {n: max(FLOOR, -(-v // f)) for n, v in values.items()}
    return {n: v for n, v in out.items() if v != values[n]}


def _tensor_bytes(values: Any) -> int:
    if isinstance(values, torch.Tensor):
        return values.numel() * values.element_size()
    if isinstance(values, (list, tuple)):
        return sum(_tensor_bytes(v) for v in values)
    return 0


def _numel(t: Any) -> int:
    return t.numel() if isinstance(t, torch.Tensor) else 0


class FlopCount(TorchFunctionMode):
    """Approximate FLOPs of what runs while active: ``2 * outputs * reduction length`` for
    matmuls, linears and convolutions, ``4 * L * S * E`` per head for attention, one per
    output element for everything else. Works on meta tensors. (A function-level mode:
    ``torch.utils.flop_counter`` is a dispatch mode, whose first use imports torch._dynamo,
    seconds that every ``--small`` check would pay.)"""

    def __init__(self) -> None:
        super().__init__()
        self.flops = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        out = func(*args, **(kwargs or {}))
        try:
            self.flops += self._cost(func, args, out)
        except Exception:  # noqa: BLE001 - an odd signature: count the output only
            self.flops += _numel(out)
        return out

    @staticmethod
    def _cost(func: Any, args: tuple, out: Any) -> int:
        name = getattr(func, "__name__", "")
        if name in ("matmul", "__matmul__", "mm", "bmm", "linear"):
            return 2 * _numel(out) * args[0].shape[-1]
        if name in ("addmm", "baddbmm"):
            return 2 * _numel(out) * args[1].shape[-1]
        if name in ("conv1d", "conv2d", "conv3d"):
            return 2 * _numel(out) * args[1][0].numel()
        if name.startswith("conv_transpose"):
            return 2 * _numel(args[0]) * args[1][0].numel()
        if name == "scaled_dot_product_attention":
            q, k = args[0], args[1]
            return 4 * q.numel() * k.shape[-2]
        if isinstance(out, (tuple, list)):
            return sum(_numel(t) for t in out)
        return _numel(out)


def meta_cost(problem: Problem, overrides: dict[str, int]) -> dict[str, Any]:
    """Run the problem at ``overrides`` on the meta device: nothing is computed, shapes are.

    Returns ``{"ok", "flops", "bytes", "error"}``: the forward's approximate FLOPs
    (:class:`FlopCount`) and the bytes of its inputs and outputs. A shape the reference
    rejects raises here as it would for real (``ok: False``).
    """
    from .problem_case import KERNELBENCH_SEED, as_tensors, set_seed

    rec: dict[str, Any] = {"ok": False, "flops": None, "bytes": None, "error": None}
    try:
        with problem.at_shapes(overrides), torch.device("meta"):
            set_seed(KERNELBENCH_SEED)
            init = list(problem.module.get_init_inputs())
            inputs = list(problem.module.get_inputs())
            model = problem.Model(*init)
            with FlopCount() as counter, torch.no_grad():
                out = as_tensors(model(*inputs))
        rec["flops"] = counter.flops
        rec["bytes"] = _tensor_bytes(inputs) + _tensor_bytes(out)
        empty = [tuple(t.shape) for t in out if t.numel() == 0]
        rec["ok"] = not empty
        rec["error"] = f"empty output {empty[0]}" if empty else None
    except Exception as exc:  # noqa: BLE001 - the reference rejects this shape (or meta tensors)
        rec["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    return rec


def try_shape(problem: Problem, overrides: dict[str, int]) -> dict[str, Any]:
    """Build ``Model`` and run one float32 forward at ``overrides`` on the CPU.

    Returns ``{"shapes", "ok", "seconds", "input_bytes", "error"}``; an exception of the
    reference (or an empty output) is ``ok: False`` with the error in words.
    """
    from .problem_case import KERNELBENCH_SEED, as_tensors, new_model, set_seed

    rec: dict[str, Any] = {"shapes": dict(overrides), "ok": False, "seconds": None, "input_bytes": None,
                           "error": None}
    try:
        with problem.at_shapes(overrides):
            set_seed(KERNELBENCH_SEED)
            init = list(problem.module.get_init_inputs())
            inputs = list(problem.module.get_inputs())
        rec["input_bytes"] = _tensor_bytes(inputs)
        model = new_model(problem.Model, init, "cpu")
        with torch.no_grad():
            start = time.perf_counter()
            out = as_tensors(model(*inputs))
            rec["seconds"] = time.perf_counter() - start
        empty = [tuple(t.shape) for t in out if t.numel() == 0]
        if empty:
            rec["error"] = f"empty output {empty[0]}"
        else:
            rec["ok"] = True
    except Exception as exc:  # noqa: BLE001 - the reference rejects this shape: back off
        rec["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    return rec


def _cache_key(problem: Problem, max_flops: int, max_bytes: int) -> str:
    h = hashlib.sha256(problem.path.read_bytes())
    h.update(f"|v{SEARCH_VERSION}|{max_flops}|{max_bytes}|{SHRINK_MIN}|{FLOOR}|{torch.__version__}".encode())
    return h.hexdigest()


def cache_dir() -> Path | None:
    """Where searched shapes are kept (``KERNELAUDIT_SMALL_SHAPES_CACHE``; ``off``: nowhere)."""
    from ...config import SMALL_SHAPES_CACHE

    value = SMALL_SHAPES_CACHE.raw().strip()
    if value.lower() == "off":
        return None
    return Path(value).expanduser() if value else Path.home() / ".cache" / "kernelaudit" / "small-shapes"


def _read_cache(key: str) -> SmallShapes | None:
    if key in _memory_cache:
        return replace(_memory_cache[key], source="cache")
    d = cache_dir()
    if d is None:
        return None
    try:
        data = json.loads((d / f"{key}.json").read_text())
        found = SmallShapes(**data)
    except (OSError, ValueError, TypeError):  # absent, unreadable (the sandbox) or stale: search again
        return None
    found.source = "cache"
    _memory_cache[key] = found
    return found


def _write_cache(key: str, found: SmallShapes) -> None:
    _memory_cache[key] = found
    d = cache_dir()
    if d is None:
        return
    try:
        d.mkdir(parents=True, exist_ok=True)
        write_json_atomic(d / f"{key}.json", found.to_json(), indent=None, sort_keys=False)
    except OSError:  # a read-only home or the sandbox: the search just runs again next time
        pass


def find_small_shapes(problem: Problem, *, max_flops: int = SMALL_MAX_FLOPS, max_bytes: int = SMALL_MAX_BYTES,
                      use_cache: bool = True) -> SmallShapes:
    """Small shapes at which ``problem``'s reference runs (see the module doc).

    ``problem.small()`` calls this when the file declares no ``SMALL_SHAPES``. The cache
    is keyed by the file's content, so it is neither read nor written while the module's
    size constants hold values other than the file's (a caller set them): the search
    starts from the sizes in effect, and its answer holds for those only.
    """
    key = _cache_key(problem, max_flops, max_bytes)
    use_cache = use_cache and _sizes_as_in_file(problem)
    if use_cache:
        hit = _read_cache(key)
        if hit is not None:
            return hit
    found = _search(problem, max_flops, max_bytes)
    if use_cache:
        _write_cache(key, found)
    return found


def _sizes_as_in_file(problem: Problem) -> bool:
    """Do the module's size constants hold the values its file sets?"""
    if problem.sizes is None:
        return True
    missing = object()
    return all(getattr(problem.module, name, missing) in (missing, slot.value)
               for name, slot in problem.sizes.slots.items() if slot.kind == "constant")


def _search(problem: Problem, max_flops: int, max_bytes: int) -> SmallShapes:
    values = shrinkable(problem)
    if not values:
        return SmallShapes({}, "unchanged", note=f"no size of at least {SHRINK_MIN} to shrink")
    f_max = 1 << max(0, math.ceil(math.log2(max(values.values()) / FLOOR)))
    factors = [1 << k for k in range(f_max.bit_length())]  # 1, 2, 4, ..., f_max
    # Candidate shapes, most preferred first: all sizes shrunk by one factor, least
    # shrinking first; then, for problems where some sizes must stay (a Linear sized for
    # 224x224 images), one group of equal sizes kept and the rest shrunk.
    families = [[shrink(values, f) for f in factors]]
    if len(set(values.values())) > 1:
        for keep in sorted(set(values.values()), reverse=True):
            rest = {n: v for n, v in values.items() if v != keep}
            families.append([shrink(rest, f) for f in factors[1:]])
    tried: list[dict[str, Any]] = []
    real_runs = 0
    own = meta_cost(problem, {})
    if own["ok"]:
        # Meta tensors run this reference: cost plans for free, least shrinking first,
        # and verify for real the first that fits (a meta run can pass where a real one
        # fails); a family none of whose plans fits offers its cheapest plan that runs.
        cheapest: list[dict[str, Any]] = []
        for family in families:
            runs = []
            for plan in family:
                rec = {"shapes": plan, **meta_cost(problem, plan)}
                tried.append(rec)
                if not rec["ok"]:
                    continue
                runs.append(rec)
                if rec["flops"] <= max_flops and rec["bytes"] <= max_bytes:
                    real = try_shape(problem, plan)
                    real_runs += 1
                    tried.append(real)
                    if real["ok"]:
                        return SmallShapes(plan, "searched" if plan else "unchanged", real["seconds"],
                                           real["input_bytes"], "", _brief(tried), rec["flops"])
                    if real_runs >= MAX_TRIES:
                        break
            cheapest += sorted(runs, key=lambda r: (r["flops"], r["bytes"]))[:1]
        for rec in sorted(cheapest, key=lambda r: (r["flops"], r["bytes"]))[:MAX_TRIES]:
            real = try_shape(problem, rec["shapes"])
            tried.append(real)
            if real["ok"]:
                note = (f"no shape tried fits {max_flops:.3g} FLOPs and {max_bytes} bytes; this is the cheapest "
                        f"that runs ({rec['flops']:.3g} FLOPs, {rec['bytes']} bytes)")
                return SmallShapes(rec["shapes"], "searched" if rec["shapes"] else "unchanged", real["seconds"],
                                   real["input_bytes"], note, _brief(tried), rec["flops"])
    else:
        # No meta run: verify plans for real, most shrunk first, until one runs.
        plans = [plan for family in families for plan in family]
        for plan in sorted(plans, key=lambda p: sum(p.values()) if p else math.inf)[:MAX_TRIES]:
            real = try_shape(problem, plan)
            tried.append(real)
            if real["ok"]:
                return SmallShapes(plan, "searched" if plan else "unchanged", real["seconds"], real["input_bytes"],
                                   f"costed by real runs (meta tensors: {own['error']})", _brief(tried))
    first = next((t["error"] for t in tried if t.get("error")), "no shape tried")
    return SmallShapes({}, "none", note=f"the reference ran at none of {len(tried)} shapes tried; first error: "
                                        f"{first}", tried=_brief(tried))


def _brief(tried: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The search's attempts, errors shortened, for the cache and the benchmark's table."""
    return [{**t, "error": (t.get("error") or None) and t["error"][:120]} for t in tried]


def shrinking_shapes(problem: Problem, shapes: Mapping[str, int]) -> dict[str, int] | None:
    """The problem's small shape (:meth:`Problem.small`) where it shrinks a case whose sizes in
    effect are ``shapes``: no size grows and at least one shrinks. ``None`` where the case is
    at or below its small shape, where a size cannot be compared, or where no small shape
    can be had (the search found none, or raised)."""
    try:
        small = problem.small()
    except Exception:  # noqa: BLE001 - no small shape: the case's own shape it is
        return None
    slots = problem.sizes.slots if problem.sizes is not None else {}

    def current(name: str) -> int | None:
        if name in shapes:
            return int(shapes[name])
        if name in slots:
            return slots[name].value
        value = getattr(problem.module, name, None)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    shrunk = False
    for name, value in small.items():
        now = current(name)
        if now is None or value > now:
            return None
        shrunk = shrunk or value < now
    return dict(small) if shrunk else None
