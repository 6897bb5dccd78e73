"""What a sandboxed check may do: the :class:`Sandbox` policy, built in the parent.

Paths it may read (the problem, the candidate, the Python/torch installation, system
libraries and, on CUDA, the driver's files), the scratch directory it may write, and
the limits (memory, CPU seconds, file size, spawned programs, tasks alive at once).
"""

from __future__ import annotations

import os
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Programs a candidate's own code may start (subprocess, spawn, exec); os.fork is never allowed.
#: Programs the installation starts for it (Triton's ptxas and cc, torch's ninja) are not counted.
DEFAULT_MAX_PROCESSES = 16
#: Tasks (processes and threads) the sandboxed tree may hold at once: past it a fork is refused and the
#: check ends as "forked without bound". torch's thread pools and CUDA's threads fit well below it.
DEFAULT_MAX_TASKS = 1024
#: Bytes a check may write into one file.
DEFAULT_MAX_FILE_BYTES = 1 << 30
#: Read-only system roots every Python/torch process needs (shared libraries, CPU topology).
SYSTEM_READ_ROOTS = ("/usr", "/lib", "/lib64", "/bin", "/sbin", "/proc/self", "/proc/thread-self", "/proc/cpuinfo",
                     "/proc/meminfo",
                     "/proc/stat", "/proc/filesystems", "/proc/driver", "/proc/devices", "/proc/modules",
                     "/proc/sys/vm", "/proc/sys/kernel", "/sys", "/etc/ld.so.cache", "/etc/ld.so.conf",
                     "/etc/ld.so.conf.d", "/etc/localtime", "/etc/passwd", "/etc/group", "/etc/nsswitch.conf",
                     "/dev/urandom", "/dev/random")
#: Files written by every process.
DEVICE_WRITE_FILES = ("/dev/null", "/dev/zero", "/dev/shm")
#: Where NVIDIA's driver libraries and tools live when they are not under /usr (containers mount them here).
CUDA_READ_ROOTS = ("/usr/local/nvidia", "/usr/local/cuda", "/usr/lib64", "/opt/nvidia", "/etc/nvidia",
                   "/run/nvidia-persistenced", "/var/run/nvidia-persistenced")
#: Mapped files whose directory is the driver's (found in /proc/self/maps of a process that loaded CUDA).
_CUDA_LIBRARY_WORDS = ("libcuda", "libnvidia", "libnvrtc", "libcudart", "libcublas", "libcudnn", "libnccl")
#: Environment variables pointing every cache a torch/Triton/CUDA candidate writes at the scratch directory.
CACHE_VARIABLES = {"HOME": "", "TMPDIR": "", "XDG_CACHE_HOME": ".cache", "TRITON_HOME": "", "TRITON_CACHE_DIR":
                   "triton", "TORCHINDUCTOR_CACHE_DIR": "inductor", "TORCH_EXTENSIONS_DIR": "torch_extensions",
                   "PYTORCH_KERNEL_CACHE_PATH": "torch_kernels", "CUDA_CACHE_PATH": "nv_compute_cache",
                   "MPLCONFIGDIR": "matplotlib", "NUMBA_CACHE_DIR": "numba"}


@dataclass
class Sandbox:
    """What a sandboxed check may do: paths it may read, the scratch directory it may write, limits.

    ``candidates`` are the files (or directories) whose code is untrusted: a violation with one of
    them on the stack is the candidate's. ``cgroup`` is the pids cgroup the child joins ("" when the
    parent bounds tasks with its watchdog instead). ``name_threads`` lets the sandboxed process write
    its own ``/proc/<pid>/task/<tid>/comm`` (and the rest of its own task directory): the CUDA driver
    (570 and later) names its threads that way in ``cuInit``, which answers 304
    (``cudaErrorOperatingSystem``) when the write is denied; set on CUDA only.
    """

    read_paths: list[str]
    scratch: str
    write_files: list[str] = field(default_factory=list)
    memory_bytes: int | None = None
    cpu_seconds: int | None = None
    max_processes: int = DEFAULT_MAX_PROCESSES
    max_tasks: int = DEFAULT_MAX_TASKS
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
    candidates: list[str] = field(default_factory=list)
    device: str = "cpu"
    cgroup: str = ""
    name_threads: bool = False

    @classmethod
    def for_check(cls, problem: str | Path, candidate: str | Path, scratch: str | Path,
                  *, cpu_seconds: float | None = None, device: str = "cpu") -> "Sandbox":
        """The policy of one check: the problem, the candidate, the installation, a scratch dir.

        On CUDA memory is not bounded by an rlimit (the driver's mappings count against ``RLIMIT_DATA``),
        and the process may name its threads (``name_threads``: the driver's ``cuInit`` does).
        """
        reads = [str(Path(problem).resolve()), str(Path(candidate).resolve()), *python_roots(), *compiler_roots(),
                 *SYSTEM_READ_ROOTS, *_checker_cache_roots()]
        writes = list(DEVICE_WRITE_FILES)
        if device == "cuda":
            reads += cuda_read_roots()
            writes += cuda_device_files()
        return cls(sorted(set(reads)), str(Path(scratch).resolve()), writes,
                   None if device == "cuda" else default_memory_bytes(),
                   None if cpu_seconds is None else int(cpu_seconds) + 1,
                   candidates=[str(Path(candidate).resolve())], device=device, name_threads=device == "cuda")

    @classmethod
    def for_worker(cls, problem: str | Path, scratch: str | Path, *, device: str = "cpu") -> "Sandbox":
        """The policy of a ``mutate`` worker: its mutants are written, and are untrusted, in ``scratch``."""
        policy = cls.for_check(problem, problem, scratch, device=device)
        policy.candidates = [policy.scratch]
        return policy

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Sandbox":
        return cls(**d)

    def may_read(self, path: str) -> bool:
        return under(path, [*self.read_paths, *self.write_files, self.scratch])

    def may_write(self, path: str) -> bool:
        return under(path, [*self.own_writes(), self.scratch])

    def own_writes(self) -> list[str]:
        """The files and directories writable besides the scratch dir, as seen from the calling process:
        ``write_files`` and, with ``name_threads``, this process's own task directory."""
        return [*self.write_files, *([own_task_dir()] if self.name_threads else [])]


def python_roots() -> list[str]:
    """The Python and torch installation, its C headers, the kernelaudit package and the
    absolute directories of ``PYTHONPATH`` (read-only)."""
    import kernelaudit

    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, str(Path(sys.executable).resolve().parent),
             str(Path(kernelaudit.__file__).resolve().parent)}
    # include dirs: Triton compiles its C launcher against Python.h
    paths.update(p for k, p in sysconfig.get_paths().items()
                 if k in ("stdlib", "platstdlib", "purelib", "platlib", "include", "platinclude"))
    # the import path the user declared (PYTHONPATH): packages installed there are part of
    # the installation the candidate runs on; "/" would open everything, so it is never added
    paths.update(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                 if p and Path(p).is_absolute() and Path(p).resolve() != Path("/"))
    for name in ("torch", "triton", "numpy"):
        mod = sys.modules.get(name)
        if mod is not None and getattr(mod, "__file__", None):
            paths.add(str(Path(mod.__file__).resolve().parent.parent))
    return sorted(str(Path(p).resolve()) for p in paths if p)


#: The compilers a candidate's build may start: Triton's launcher (``CC``, else cc/gcc/clang)
#: and torch's ``load_inline`` (``CXX``, else c++/g++) with ninja.
COMPILERS = ("cc", "gcc", "clang", "c++", "g++", "clang++", "ninja")


def compiler_roots() -> list[str]:
    """The installation prefix of each compiler on ``PATH`` (``/opt/gcc`` for ``/opt/gcc/bin/gcc``: its
    ``libexec`` and ``lib`` come with it), read-only; a prefix of ``/`` is never added."""
    import shutil

    names = [os.environ.get(v, "").split(" ")[0] for v in ("CC", "CXX")] + list(COMPILERS)
    roots = set()
    for name in filter(None, names):
        found = shutil.which(name)
        if not found:
            continue
        for path in {Path(found).absolute(), Path(found).resolve()}:
            prefix = path.parent.parent if path.parent.name == "bin" else path.parent
            if prefix != Path("/"):
                roots.add(str(prefix))
    return sorted(roots)


def cuda_device_files() -> list[str]:
    """The NVIDIA device files (``/dev/nvidia0``, ``nvidiactl``, ``nvidia-uvm``, ``nvidia-caps/``...)."""
    return [str(p) for p in sorted(Path("/dev").glob("nvidia*"))]


def _checker_cache_roots() -> list[str]:
    """The checker's own small-shape cache, read-only, where it exists: problems' small shapes
    (derivable from the problem file anyway), so a check in the box need not search them again."""
    from ..problems.small_shapes import cache_dir

    d = cache_dir()
    return [str(d.resolve())] if d is not None and d.is_dir() else []


def cuda_read_roots(maps: str = "/proc/self/maps") -> list[str]:
    """The driver's library directories: those of CUDA libraries this process has mapped (torch
    loads the driver when it looks for a device), and the standard locations."""
    dirs = set(CUDA_READ_ROOTS)
    try:
        with open(maps) as f:
            for line in f:
                path = line.split(maxsplit=5)[-1].strip() if line.count(" ") >= 5 else ""
                if path.startswith("/") and any(w in os.path.basename(path) for w in _CUDA_LIBRARY_WORDS):
                    dirs.add(os.path.dirname(os.path.realpath(path)))
    except OSError:
        pass
    return sorted(dirs)


def own_task_dir() -> str:
    """``/proc/<pid>/task`` of the calling process (``/proc/self`` resolved: a Landlock rule holds an inode)."""
    return f"/proc/{os.getpid()}/task"


def default_memory_bytes() -> int:
    """Three quarters of the machine's memory: a runaway candidate fails, the machine lives."""
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * 3 // 4)


def under(path: str, roots: list[str]) -> bool:
    """Is ``path`` (symlinks resolved) one of ``roots`` or beneath one?"""
    p = os.path.realpath(path)
    return any(p == r or p.startswith(r.rstrip("/") + "/") for r in roots)
