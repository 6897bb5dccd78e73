"""Memory planning: estimate a case's peak bytes before allocating anything.

A case that cannot fit is ``skipped`` with the bytes it needed, never an
out-of-memory crash. The estimate is deliberately pessimistic (inputs, outputs,
gradients, autograd's saved tensors, the attention score matrix, intermediates an op
declares (``extra["scratch_bytes"]``), fault-model copies and the reference's working
set).

The plan ``try`` (:data:`MEMORY_PLANS`) runs a case the estimate refuses as long as the
call's own tensors fit (:func:`floor_bytes`: inputs and outputs, and in backward their
gradients): the estimate's margins held back float32 backward cases at 2^32 elements
that a GPU may hold, and an allocation that fails is recorded as a skip for memory all
the same (``judge.execution``), never a finding.
"""

from __future__ import annotations

import math
import os
import re

import torch

from ..config import CUDA_ALLOC
from .cases import Case
from .ops.spec import DTYPES

#: Use at most this fraction of the memory the device reports free.
MEMORY_HEADROOM = 0.85
#: Backward keeps inputs, outputs, their gradients and saved intermediates alive.
BWD_FACTOR = 2.5
#: Float64 chunk-sized tensors the reference holds at once (inputs, outputs, scratch).
REF_WORKING_COPIES = 12
#: Attention holds scores, their softmax (and in backward their gradients).
ATTENTION_SCORE_COPIES = {"fwd": 3, "bwd": 5}
#: ``strict``: skip a case whose estimate exceeds the memory available; ``try``: skip it
#: only where its floor (:func:`floor_bytes`) does.
MEMORY_PLANS = ("strict", "try")


#: Environment variables through which a user sets torch's allocator themselves.
ALLOC_CONF_VARS = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")


def _users_own() -> str:
    """``VAR=value`` of the first of :data:`ALLOC_CONF_VARS` the environment sets, else ``""``."""
    return next((f"{v}={os.environ[v]}" for v in ALLOC_CONF_VARS if os.environ.get(v)), "")


def allocator_settings() -> str:
    """The CUDA caching allocator's settings a worker sets (:data:`~kernelaudit.config.CUDA_ALLOC`),
    or ``""`` where the environment sets them (:data:`ALLOC_CONF_VARS`) or the knob is empty."""
    return "" if _users_own() else CUDA_ALLOC.raw().strip()


def allocator_in_force() -> str:
    """The allocator settings a worker runs with, as a run records them: the knob's, or
    ``VAR=value`` of the environment's own, or ``""`` (torch's defaults)."""
    return allocator_settings() or _users_own()


def _settings_setter():
    """torch's setter of the allocator's settings: the accelerator-wide one where torch has
    it (``torch.cuda.memory._set_allocator_settings`` warns that it is deprecated there,
    as in 2.13), else torch.cuda's."""
    return getattr(torch._C, "_accelerator_setAllocatorSettings", None) or torch.cuda.memory._set_allocator_settings


def set_allocator(device: torch.device) -> None:
    """Set :func:`allocator_settings` on a CUDA device's caching allocator; called before
    the process's first allocation (the environment's own settings torch reads itself)."""
    if device.type == "cuda" and (settings := allocator_settings()):
        try:
            _settings_setter()(settings)
        except RuntimeError as e:
            raise RuntimeError(f"CUDA allocator settings {settings!r} ({CUDA_ALLOC.name}) refused: {e}; "
                               f"{CUDA_ALLOC.name}= (empty) runs with torch's own") from e


def estimate_bytes(case: Case, fault_model: str = "none", ref_chunk: int = 2**24) -> int:
    """Pessimistic peak device bytes of running and judging ``case``."""
    return _estimate(case, _io(case), fault_model, ref_chunk)


def _estimate(case: Case, io, fault_model: str, ref_chunk: int) -> int:
    spec = case.spec
    placed, itemsize, inputs, outputs = io
    total = inputs + outputs
    if case.direction == "bwd":
        total = int(total * BWD_FACTOR)
    total += spec.extra.get("scratch_bytes", 0) * sum(p.numel for p in placed)
    if spec.family == "attention":
        q = placed[0].shape
        total += ATTENTION_SCORE_COPIES[case.direction] * math.prod(q[:-1]) * q[-2] * itemsize
    if fault_model != "none":
        total += 2 * max([inputs, outputs])
    biggest = max([p.numel for p in placed] + [outputs // itemsize, 1])
    # float64 reference chunks, regenerated inputs, index scratch
    total += REF_WORKING_COPIES * min(ref_chunk, biggest) * 8
    return int(total)


def floor_bytes(case: Case) -> int:
    """The bytes the call itself cannot do without: its inputs and outputs, and in
    backward their gradients too (twice that)."""
    return _floor(case, _io(case))


def _floor(case: Case, io) -> int:
    _, _, inputs, outputs = io
    return (inputs + outputs) * (2 if case.direction == "bwd" else 1)


def _io(case: Case):
    """``(placed operands, output itemsize, input bytes, output bytes)`` of ``case``."""
    from .judge.operands import placed_operands

    placed = placed_operands(case)
    itemsize = torch.empty((), dtype=DTYPES[case.dtype]).element_size()
    inputs = sum(p.storage_numel * p.dtype.itemsize for p in placed)
    return placed, itemsize, inputs, _output_bytes(case, placed, itemsize)


def _output_bytes(case: Case, placed, itemsize: int) -> int:
    from .judge.reference import forward_outputs

    if case.spec.call is None:
        return case.batch * case.spec.out_rows(case.series, case.thresholds)[0] * itemsize
    outs = forward_outputs(case, placed)
    if outs is None:  # data-dependent shapes (nonzero): assume int64 per input element
        return sum(p.numel for p in placed) * 8
    return sum(o.numel() * o.element_size() for o in outs)


#: torch's CUDA out-of-memory message: the allocation that failed, and what the process held.
_OOM_ASKED = re.compile(r"Tried to allocate (\d+(?:\.\d+)?) (B|bytes|KiB|MiB|GiB|TiB)\b")
_OOM_IN_USE = re.compile(r"this process has (\d+(?:\.\d+)?) (B|bytes|KiB|MiB|GiB|TiB) memory in use")
_UNITS = {"B": 1, "bytes": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


def asked_bytes(message: str) -> int | None:
    """What a CUDA allocation that failed shows the case needs at least, from torch's
    message: the bytes it tried to allocate plus the memory the process had in use
    (``None`` where the message does not say both). ``linalg.eigvalsh`` of 21,474,804
    5 x 5 matrices asked for 5,556 GiB with 5.3 GiB in use: no GPU holds that case,
    however much larger than the one that failed."""
    asked, in_use = _OOM_ASKED.search(message or ""), _OOM_IN_USE.search(message or "")
    if asked is None or in_use is None:
        return None
    return sum(int(float(m.group(1)) * _UNITS[m.group(2)]) for m in (asked, in_use))


def available_bytes(device: torch.device) -> int:
    """Bytes this process may still allocate on ``device``."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device))
    if device.type == "mps":
        return int(torch.mps.recommended_max_memory() - torch.mps.driver_allocated_memory())
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def device_memory(device: torch.device) -> dict[str, int]:
    """``available``: :func:`available_bytes` (what this process may still allocate,
    its allocator's cache included); ``total``: the device's total memory (CUDA:
    ``mem_get_info``'s total; CPU: physical memory; MPS: the recommended maximum).
    On CUDA this creates the calling process's context, so the sweep asks a worker."""
    avail = available_bytes(device)
    if device.type == "cuda":
        total = int(torch.cuda.mem_get_info(device)[1])
    elif device.type == "mps":
        total = int(torch.mps.recommended_max_memory())
    else:
        import os
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return {"available": int(avail), "total": int(total)}


def fits(case: Case, device: torch.device, fault_model: str, ref_chunk: int,
         limit: int | None = None, plan: str = "strict") -> tuple[bool, int, int]:
    """(fits, needed, available) for ``case`` on ``device`` (``limit`` caps available):
    ``needed`` the estimate; under ``plan`` ``try`` a case fits where its floor does
    (:func:`floor_bytes`), and ``needed`` is the floor where even that does not."""
    io = _io(case)   # the operands and the output shapes, worked out once
    need = _estimate(case, io, fault_model, ref_chunk)
    avail = int(available_bytes(device) * MEMORY_HEADROOM)
    if limit is not None:
        avail = min(avail, limit)
    if plan == "try" and need > avail:
        floor = _floor(case, io)
        return floor <= avail, (need if floor <= avail else floor), avail
    return need <= avail, need, avail
