"""Every knob kernelaudit reads from the environment, declared once.

Each :class:`Knob` names its variable, its default, the values it allows and one line
of doc; code reads a knob through its object (``FUSED_SUMMARY.flag()``), never through
``os.environ``, and tests set one with ``monkeypatch.setenv(FUSED_SUMMARY.name, ...)``.
``kernelaudit`` documents them all from :data:`KNOBS` (``docs/architecture.md``).

Tuning that is not a user's switch (tile shapes, block sizes) is not a knob: it is
an argument with a default, passed down to the kernel that uses it.

Dependency rule: this module imports nothing from kernelaudit but :mod:`.errors`, and
nothing heavy (no torch), so the guard's child boot can read it for free.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from .errors import check_choice


@dataclass(frozen=True)
class Knob:
    """One environment variable: ``name``, ``default`` (a string, as the environment
    holds it), ``choices`` (allowed values; empty means free text) and ``doc``."""

    name: str
    default: str
    doc: str
    choices: tuple[str, ...] = ()

    def get(self) -> str:
        """The variable's value, else the default; checked against ``choices``."""
        value = os.environ.get(self.name, self.default)
        if self.choices:
            check_choice(self.name, value, self.choices)
        return value

    def raw(self) -> str:
        """The variable's value, else the default, unchecked (for knobs whose reader
        accepts spellings beyond ``choices``)."""
        return os.environ.get(self.name, self.default)

    def flag(self) -> bool:
        """A 0/1 knob as a bool."""
        return self.get() == "1"

    def is_set(self) -> bool:
        return self.name in os.environ


_FLAG = ("0", "1")
KNOBS: dict[str, Knob] = {}


def _knob(name: str, default: str, doc: str, choices: tuple[str, ...] = ()) -> Knob:
    knob = Knob(name, default, doc, choices)
    KNOBS[name] = knob
    return knob


# --- Triton -----------------------------------------------------------------------
TRITON_INTERPRET = _knob(
    "TRITON_INTERPRET", "0",
    "Triton's own switch: run @triton.jit kernels on CPU tensors (use_interpreter_without_cuda sets it "
    "before triton loads).")

# --- sweep: how matmul outputs are judged ------------------------------------------
FUSED_FREIVALDS = _knob(
    "KERNELAUDIT_FUSED_FREIVALDS", "auto",
    "Matmul outputs checked by the fused Triton projection kernel: auto (on CUDA), 1 (also on CPU, "
    "interpreted), 0 (the float64 torch projection).", ("auto", "0", "1"))
FUSED_COMPARE = _knob(
    "KERNELAUDIT_FUSED_COMPARE", "auto",
    "Per-batch comparison of outputs with their reference in one Triton kernel: auto, 1 or 0.",
    ("auto", "0", "1"))
FUSED_SUMMARY = _knob(
    "KERNELAUDIT_FUSED_SUMMARY", "auto",
    "A judgement's per-batch metrics summarised in one Triton launch: auto, 1 or 0.", ("auto", "0", "1"))
PROJECT_AT_GENERATION = _knob(
    "KERNELAUDIT_PROJECT_AT_GENERATION", "1",
    "Bilinear forwards get their projections y A, B x while their inputs are generated (CUDA).", _FLAG)
WARM_COMPILES = _knob(
    "KERNELAUDIT_WARM_COMPILES", "auto",
    "Calibration workers also run each matmul case at a small batch of the same residue mod 16, so "
    "Triton compiles the judge's specialisations side by side before the cases: auto (CUDA), 1, 0.",
    ("auto", "0", "1"))
OVERLAP_CALIBRATION = _knob(
    "KERNELAUDIT_OVERLAP_CALIBRATION", "0",
    "1: on one device, cases start while tolerances are still being calibrated side by side (each case "
    "waits for its own key only); 0: every key is calibrated before the first case.", _FLAG)

# --- executors: more than one device (executors.py) --------------------------------
EXECUTOR = _knob(
    "KERNELAUDIT_EXECUTOR", "local",
    "Default of `--executor`: local (one worker per device of this host) or ray (a Ray cluster).",
    ("local", "ray"))
RAY_ADDRESS = _knob(
    "KERNELAUDIT_RAY_ADDRESS", "",
    "Default of `--ray-address` with `--executor ray`: empty starts a local Ray (or joins RAY_ADDRESS's), "
    "auto joins this node's cluster, ray://host:10001 a remote one.")
WORKER_DEVICE = _knob(
    "KERNELAUDIT_WORKER_DEVICE", "",
    "Set in each executor worker process: the device it is pinned to, as it names it (cuda:0, cpu:N).")

WORKER_START = _knob(
    "KERNELAUDIT_WORKER_START", "auto",
    "How worker processes start: forkserver (forked from a server that imported torch once: "
    "0.03 s a worker after the first instead of 1.5 on a 2-core CPU), spawn (a fresh interpreter each), or auto (forkserver on "
    "Linux, spawn elsewhere). Either way a worker gets this process's environment of the moment.",
    ("auto", "forkserver", "spawn"))

CUDA_ALLOC = _knob(
    "KERNELAUDIT_CUDA_ALLOC", "expandable_segments:True",
    "The CUDA caching allocator's settings a sweep worker sets before its first allocation "
    "(PYTORCH_CUDA_ALLOC_CONF's syntax; empty: torch's own). A PYTORCH_CUDA_ALLOC_CONF or "
    "PYTORCH_ALLOC_CONF in the environment wins. Expandable segments let one large tensor take "
    "memory freed in pieces: on an H100 the memory reserved but unallocated at a failed allocation "
    "fell from up to 40.6 GiB to at most 128 MiB, and 26 of the full grid's 252 cases out of "
    "memory despite the plan ran.")

CACHE_DIR = _knob(
    "KERNELAUDIT_CACHE_DIR", "",
    "Directory of the sweep's OpInfo-derived op catalogue, one JSON file per torch version "
    "(empty: $XDG_CACHE_HOME/kernelaudit, else ~/.cache/kernelaudit).")

# --- guard ---------------------------------------------------------------------------
GUARD = _knob(
    "KERNELAUDIT_GUARD", "",
    "Set by `kernelaudit run`: the guard's action in the child (fix, raise, verify, warn).")
GUARD_FAULT_MODEL = _knob(
    "KERNELAUDIT_FAULT_MODEL", "none",
    "Set by `kernelaudit run --fault-model`: the what-if backend the child's guard assumes.")
GUARD_SCALE = _knob(
    "KERNELAUDIT_SCALE", "",
    "Set by `kernelaudit run --scale`: threshold scale bits for the child's guard (empty: real sizes).")
GUARD_NATIVE = _knob(
    "KERNELAUDIT_GUARD_NATIVE", "auto",
    "The guard's C++ size screen: auto (use it when it builds), 0/off (never), 1/on (required).")
GUARD_STATS = _knob(
    "KERNELAUDIT_GUARD_STATS", "",
    "Path where a `kernelaudit run` child writes the guard's counters as JSON at exit.")
GUARD_QUIET = _knob(
    "KERNELAUDIT_GUARD_QUIET", "0", "1: no one-line guard summary on stderr at exit.", _FLAG)
GUARD_RULES = _knob(
    "KERNELAUDIT_GUARD_RULES", "",
    "Rule files (JSON, os.pathsep-separated) the guard loads on top of its known-fault database "
    "(set by `kernelaudit run --rules`).")

# --- zoo: KernelBench problems ---------------------------------------------------
SMALL_SHAPES_CACHE = _knob(
    "KERNELAUDIT_SMALL_SHAPES_CACHE", "",
    "Directory where --small keeps the shapes it found per problem file (empty: "
    "~/.cache/kernelaudit/small-shapes; off: no disk cache).")
KERNELBENCH = _knob(
    "KERNELAUDIT_KERNELBENCH", "/work/shared/kernelbench/KernelBench",
    "KernelBench as published (the directory holding level1, level2, level3): the false-rejection "
    "benchmark and its CI sample read it; tests skip when it is absent.")
FLOAT64_CUDNN = _knob(
    "KERNELAUDIT_FLOAT64_CUDNN", "0",
    "The float64 evaluations of the reference model on a CUDA device (reference, magnitude, derivation): "
    "0 with cuDNN off (convolutions as im2col + cuBLAS float64 GEMMs; on the H200 a median 2.8x faster "
    "over KernelBench level 1's convolutions, 11.6x on L1 68); 1 with cuDNN as torch picks it. "
    "The same values to float64 rounding.", _FLAG)
PEAK_BANDWIDTH = _knob(
    "KERNELAUDIT_PEAK_BANDWIDTH", "",
    "check --time: peak memory bandwidth in bytes/s for the physical floor (empty: per-device table, "
    "else a measured copy with a margin).")
PEAK_FLOPS = _knob(
    "KERNELAUDIT_PEAK_FLOPS", "",
    "check --time: peak arithmetic rate in FLOP/s for the matmul floor (empty: per-device table; none on CPU).")

# --- conform (product 4) ------------------------------------------------------------

# --- repro (product 5) --------------------------------------------------------------

# --- tests ----------------------------------------------------------------------------
GPU_RESULTS = _knob(
    "KERNELAUDIT_GPU_RESULTS", "",
    "tests/gpu: path of a JSON file where the corpus GPU test keeps every verdict.")
GPU_PROBLEMS = _knob(
    "KERNELAUDIT_GPU_PROBLEMS", "",
    "tests/gpu: comma list of corpus problems to run (empty: all).")


def fused_enabled(knob: Knob, device) -> bool:
    """An ``auto``/``0``/``1`` kernel switch resolved for ``device`` (a torch device or
    its type string): ``auto`` means on CUDA only."""
    value = knob.get()
    if value == "auto":
        return str(getattr(device, "type", device)) == "cuda"
    return value == "1"


def interpreter_requested() -> bool:
    """Is ``TRITON_INTERPRET`` on (Triton reads it when a kernel is decorated)?"""
    return TRITON_INTERPRET.raw().strip().lower() in ("1", "true", "on")  # Triton's own spellings


def use_interpreter_without_cuda() -> None:
    """Before triton is first imported: run kernels in the interpreter when torch sees
    no GPU (the one place kernelaudit sets ``TRITON_INTERPRET``; an explicit value wins)."""
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault(TRITON_INTERPRET.name, "1")
