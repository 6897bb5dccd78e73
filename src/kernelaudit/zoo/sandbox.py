"""The sandbox of an isolated check: untrusted candidate code stays in its box.

``kernelaudit check`` runs a candidate in a child process (``check.py``'s worker).
Before the worker imports the problem or the candidate it calls :func:`apply` with a
:class:`Sandbox` policy, built by the parent from the problem and candidate paths:

- **files** (Landlock, kernel): reads only of the problem file, the candidate file,
  the Python installation (``sys.prefix``, the standard library, site-packages), the
  kernelaudit package, system libraries (``/usr``, ``/lib``), ``/sys``, this
  process's ``/proc/self`` (not other processes'), and a few device files; writes
  only under a fresh scratch directory (``TMPDIR``).
- **network** (a new network namespace, kernel; Landlock TCP rules from ABI 4; no
  Landlock scope beyond the process from ABI 6): no interface but a down loopback.
- **memory, processes, time, file size** (rlimits): ``RLIMIT_DATA``, ``RLIMIT_NPROC``
  (not enforced for root), ``RLIMIT_CPU``, ``RLIMIT_FSIZE``.
- **reporting** (a Python audit hook, :func:`sys.addaudithook`): the same file policy,
  plus sockets and process creation, checked before the kernel sees the call, so a
  denial is *recorded* with what was tried. Violations whose stack holds the
  candidate's file are the candidate's (:func:`violations`); the worker turns them into
  an ``error`` verdict whose details name the sandbox. The hook is not a security
  boundary (C code bypasses it); Landlock, the namespace and the rlimits are.

Where the kernel lacks a feature the sandbox is not silently weakened: :func:`apply`
raises :class:`SandboxUnavailable` naming the feature and ``--no-sandbox``.
"""

from __future__ import annotations

import ctypes
import errno
import os
import resource
import socket
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Process creations (subprocess, spawn, exec) a candidate's check may make; os.fork is never allowed.
DEFAULT_MAX_PROCESSES = 16
#: Bytes a check may write into one file.
DEFAULT_MAX_FILE_BYTES = 1 << 30
#: Read-only system roots every Python/torch process needs (shared libraries, CPU topology).
SYSTEM_READ_ROOTS = ("/usr", "/lib", "/lib64", "/proc/self", "/proc/thread-self", "/proc/cpuinfo", "/proc/meminfo",
                     "/proc/stat", "/proc/filesystems", "/proc/driver", "/proc/devices", "/proc/modules",
                     "/proc/sys/vm", "/sys", "/etc/ld.so.cache", "/etc/localtime",
                     "/etc/passwd", "/etc/group", "/etc/nsswitch.conf", "/dev/urandom", "/dev/random")
#: Files written by every process (and by CUDA: the NVIDIA device files when present).
DEVICE_WRITE_FILES = ("/dev/null", "/dev/zero", "/dev/shm")

# Landlock ABI (linux/landlock.h).
_SYS_CREATE, _SYS_ADD_RULE, _SYS_RESTRICT = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_FS_EXECUTE, _FS_WRITE_FILE, _FS_READ_FILE, _FS_READ_DIR = 1, 2, 4, 8
_FS_TRUNCATE, _FS_IOCTL_DEV = 1 << 14, 1 << 15
_NET_BIND_TCP, _NET_CONNECT_TCP = 1, 2
_SCOPE_ABSTRACT_UNIX, _SCOPE_SIGNAL = 1, 2
_PR_SET_NO_NEW_PRIVS = 38
_CLONE_NEWNET = 0x40000000
_CLONE_NEWUSER = 0x10000000


class SandboxUnavailable(RuntimeError):
    """The kernel lacks a feature the sandbox needs (the message names it and ``--no-sandbox``)."""


@dataclass
class Sandbox:
    """What a sandboxed check may do: paths it may read, the scratch directory it may write, limits."""

    read_paths: list[str]
    scratch: str
    write_files: list[str] = field(default_factory=list)
    memory_bytes: int | None = None
    cpu_seconds: int | None = None
    max_processes: int = DEFAULT_MAX_PROCESSES
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
    candidate: str = ""
    device: str = "cpu"

    @classmethod
    def for_check(cls, problem: str | Path, candidate: str | Path, scratch: str | Path,
                  *, cpu_seconds: float | None = None, device: str = "cpu") -> "Sandbox":
        """The policy of one check: the problem, the candidate, the installation, a scratch dir.

        On CUDA memory is not bounded by an rlimit: the driver's mappings count against ``RLIMIT_DATA``.
        """
        reads = [str(Path(problem).resolve()), str(Path(candidate).resolve()), *python_roots(), *SYSTEM_READ_ROOTS]
        writes = list(DEVICE_WRITE_FILES) + [str(p) for p in sorted(Path("/dev").glob("nvidia*"))]
        return cls(sorted(set(reads)), str(Path(scratch).resolve()), writes,
                   None if device == "cuda" else default_memory_bytes(),
                   None if cpu_seconds is None else int(cpu_seconds) + 1, candidate=str(Path(candidate).resolve()),
                   device=device)

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Sandbox":
        return cls(**d)

    def may_read(self, path: str) -> bool:
        return _under(path, [*self.read_paths, *self.write_files, self.scratch])

    def may_write(self, path: str) -> bool:
        return _under(path, [*self.write_files, self.scratch])


def python_roots() -> list[str]:
    """The Python and torch installation, and the kernelaudit package (read-only)."""
    import kernelaudit

    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, str(Path(sys.executable).resolve().parent),
             str(Path(kernelaudit.__file__).resolve().parent)}
    paths.update(p for k, p in sysconfig.get_paths().items() if k in ("stdlib", "platstdlib", "purelib", "platlib"))
    for name in ("torch", "triton", "numpy"):
        mod = sys.modules.get(name)
        if mod is not None and getattr(mod, "__file__", None):
            paths.add(str(Path(mod.__file__).resolve().parent.parent))
    return sorted(str(Path(p).resolve()) for p in paths if p)


def default_memory_bytes() -> int:
    """Three quarters of the machine's memory: a runaway candidate fails, the machine lives."""
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * 3 // 4)


def _under(path: str, roots: list[str]) -> bool:
    p = os.path.realpath(path)
    return any(p == r or p.startswith(r.rstrip("/") + "/") for r in roots)


# ---------------------------------------------------------------------------
# applying it
# ---------------------------------------------------------------------------

_state: dict[str, Any] = {"policy": None, "violations": [], "spawned": 0, "enforced": []}


def apply(policy: Sandbox) -> list[str]:
    """Enter the sandbox for good (this process and its children). Returns what is enforced, one line each.

    Raises :class:`SandboxUnavailable` where the kernel lacks Landlock or network isolation.
    """
    abi = landlock_abi()
    if abi < 1:
        raise SandboxUnavailable(f"the kernel ({os.uname().release}) has no Landlock (ABI {abi}): file access "
                                 "cannot be confined; run with --no-sandbox to check without the sandbox")
    os.makedirs(policy.scratch, exist_ok=True)
    os.environ.update(TMPDIR=policy.scratch, TRITON_CACHE_DIR=os.path.join(policy.scratch, "triton"),
                      HOME=policy.scratch, PYTHONDONTWRITEBYTECODE="1")
    sys.dont_write_bytecode = True
    import tempfile

    tempfile.tempdir = policy.scratch
    # /proc/self and the like mean this process: resolved here, where the rules are made
    policy.read_paths = sorted({os.path.realpath(p) for p in policy.read_paths})
    enforced = [set_limits(policy)]
    net, why = isolate_network()
    if net is None and abi < 4:
        raise SandboxUnavailable(f"network not isolated: {why}, and Landlock ABI {abi} < 4 has no TCP rules "
                                 f"(kernel {os.uname().release}); run with --no-sandbox to check without it")
    enforced.append(restrict_files(policy, abi))
    enforced.append(net or f"network: only TCP bind/connect denied (Landlock) and Python sockets refused (audit "
                           f"hook); not isolated for UDP or raw sockets from C: {why}")
    _state.update(policy=policy, enforced=enforced)
    sys.addaudithook(_audit)
    if policy.device == "cuda":
        require_cuda()
    return enforced


def require_cuda() -> None:
    """CUDA must still be reachable inside the sandbox; if not, say so instead of "no CUDA device"."""
    import torch

    if not torch.cuda.is_available():
        raise SandboxUnavailable("CUDA is not reachable inside the sandbox on this machine (the driver needs "
                                 "something the sandbox denies); run with --no-sandbox to check on CUDA")


def set_limits(policy: Sandbox) -> str:
    """rlimits: data memory, processes, CPU seconds, file size."""
    limits = {resource.RLIMIT_FSIZE: policy.max_file_bytes}
    if policy.memory_bytes:
        limits[resource.RLIMIT_DATA] = policy.memory_bytes
    if policy.cpu_seconds:
        limits[resource.RLIMIT_CPU] = policy.cpu_seconds
    limits[resource.RLIMIT_NPROC] = _threads_of_user() + 256 + policy.max_processes
    for which, value in limits.items():
        _soft, hard = resource.getrlimit(which)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(which, (value, value))
    root = " (not enforced for root: the audit hook bounds process creation)" if os.geteuid() == 0 else ""
    data = f"{policy.memory_bytes >> 20} MiB" if policy.memory_bytes else "unbounded (CUDA)"
    return (f"rlimits: data {data}, cpu {policy.cpu_seconds or 'unbounded'} s, "
            f"file {policy.max_file_bytes >> 20} MiB, processes {limits[resource.RLIMIT_NPROC]}{root}")


def _threads_of_user() -> int:
    try:
        return sum(1 for _ in Path("/proc").glob("[0-9]*/task/[0-9]*"))
    except OSError:
        return 1024


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _syscall(*args: Any) -> int:
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    return libc.syscall(*args)


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 when Landlock is missing or disabled."""
    r = _syscall(_SYS_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return max(int(r), 0)


def isolate_network() -> tuple[str | None, str]:
    """A new, empty network namespace (as root, or in a new user namespace): (what, why not)."""
    libc = _libc()
    why = []
    for flags, how in ((_CLONE_NEWNET, "network namespace"),
                       (_CLONE_NEWUSER | _CLONE_NEWNET, "user + network namespace")):
        if libc.unshare(ctypes.c_int(flags)) == 0:
            return f"network: new empty {how} (loopback down)", ""
        why.append(f"unshare({how}): {os.strerror(ctypes.get_errno())}")
    return None, "; ".join(why)


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _fs_rights(abi: int) -> int:
    """Every filesystem right this ABI knows (all of them handled = denied unless a rule allows)."""
    rights = (1 << 13) - 1  # EXECUTE .. MAKE_SYM (ABI 1)
    if abi >= 2:
        rights |= 1 << 13  # REFER
    if abi >= 3:
        rights |= _FS_TRUNCATE
    return rights  # IOCTL_DEV (ABI 5) stays unhandled: device files opened are already restricted


def restrict_files(policy: Sandbox, abi: int) -> str:
    """Landlock: read-only beneath the read paths, everything beneath the scratch dir."""
    handled = _fs_rights(abi)
    attr = _RulesetAttr(handled, (_NET_BIND_TCP | _NET_CONNECT_TCP) if abi >= 4 else 0,
                        (_SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL) if abi >= 6 else 0)
    size = 8 if abi < 4 else (16 if abi < 6 else 24)
    fd = _syscall(_SYS_CREATE, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if fd < 0:
        raise SandboxUnavailable(f"landlock_create_ruleset failed: {os.strerror(ctypes.get_errno())}")
    try:
        read = _FS_EXECUTE | _FS_READ_FILE | _FS_READ_DIR
        write = _FS_WRITE_FILE | (_FS_TRUNCATE if abi >= 3 else 0)
        for p in policy.read_paths:
            _add_rule(fd, p, read)
        for p in policy.write_files:
            _add_rule(fd, p, read | write)
        _add_rule(fd, policy.scratch, handled)
        if _libc().prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise SandboxUnavailable(f"prctl(NO_NEW_PRIVS) failed: {os.strerror(ctypes.get_errno())}")
        if _syscall(_SYS_RESTRICT, ctypes.c_int(fd), ctypes.c_uint32(0)) != 0:
            raise SandboxUnavailable(f"landlock_restrict_self failed: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(fd)
    extra = ", TCP bind/connect denied" if abi >= 4 else ""
    extra += ", signals and abstract unix sockets scoped to the sandbox" if abi >= 6 else ""
    return f"files: Landlock ABI {abi}, {len(policy.read_paths)} read-only roots, writes only in {policy.scratch}{extra}"


def _add_rule(ruleset_fd: int, path: str, access: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # a root that does not exist here (/lib64, /dev/nvidia0 ...) grants nothing
    try:
        if not os.path.isdir(path):
            access &= _FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | _FS_TRUNCATE | _FS_IOCTL_DEV
        rule = _PathBeneath(access, fd)
        if _syscall(_SYS_ADD_RULE, ctypes.c_int(ruleset_fd), ctypes.c_int(_RULE_PATH_BENEATH),
                    ctypes.byref(rule), ctypes.c_uint32(0)) != 0:
            raise SandboxUnavailable(f"landlock_add_rule({path}) failed: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------
# reporting: the audit hook
# ---------------------------------------------------------------------------

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
_SPAWN_EVENTS = ("subprocess.Popen", "os.posix_spawn", "os.spawn", "os.system", "os.exec", "pty.spawn")


def _audit(event: str, args: tuple) -> None:
    policy: Sandbox | None = _state["policy"]
    if policy is None:
        return
    if event == "open":
        _check_open(policy, *args[:3])
    elif event in ("os.listdir", "os.scandir") and isinstance(args[0], (str, bytes)) and args[0]:
        if not policy.may_read(os.fsdecode(args[0])):
            _deny(policy, "read", f"tried to list {os.fsdecode(args[0])}, outside the problem, the candidate and "
                                  "the installation", os.fsdecode(args[0]))
    elif event == "socket.__new__":
        _deny(policy, "socket", f"opened a socket (family {_family(args)}): the check has no network")
    elif event in ("os.fork", "os.forkpty"):
        _deny(policy, "fork", "forked the checking process (os.fork): process creation is bounded")
    elif event in _SPAWN_EVENTS:
        _state["spawned"] += 1
        if _state["spawned"] > policy.max_processes:
            _deny(policy, "processes", f"started more than {policy.max_processes} processes ({event})")


def _family(args: tuple) -> str:
    try:
        return socket.AddressFamily(args[1]).name
    except (IndexError, ValueError):
        return str(args[1:2])


def _check_open(policy: Sandbox, path: Any, mode: Any, flags: Any) -> None:
    if isinstance(path, int) or path is None:
        return
    path = os.fsdecode(path)
    writes = any(c in mode for c in "wax+") if isinstance(mode, str) else bool((flags or 0) & _WRITE_FLAGS)
    if writes and not policy.may_write(path):
        _deny(policy, "write", f"tried to write {path} outside its scratch directory", path)
    elif not writes and not policy.may_read(path):
        _deny(policy, "read", f"tried to read {path}, outside the problem, the candidate and the installation",
              path)


def _deny(policy: Sandbox, kind: str, what: str, path: str | None = None) -> None:
    if _in_candidate(policy):
        _state["violations"].append({"kind": kind, "message": f"the candidate {what}: denied by the sandbox"})
    raise PermissionError(errno.EACCES, f"kernelaudit sandbox: {what}", *([path] if path else []))


def _in_candidate(policy: Sandbox) -> bool:
    frame = sys._getframe(2)
    while frame is not None:
        if os.path.realpath(frame.f_code.co_filename) == policy.candidate:
            return True
        frame = frame.f_back
    return False


def violations() -> list[dict[str, str]]:
    """The candidate's sandbox violations so far (kind and message), oldest first."""
    return list(_state["violations"])


def enforced() -> list[str]:
    """What :func:`apply` enforced, one line each."""
    return list(_state["enforced"])


# ---------------------------------------------------------------------------
# the worker's side
# ---------------------------------------------------------------------------


def enter(policy_json: dict[str, Any]) -> list[str]:
    """:func:`apply` the policy sent by the parent (raises :class:`SandboxUnavailable`)."""
    return apply(Sandbox.from_json(policy_json))


def overrule(result: dict[str, Any]) -> dict[str, Any]:
    """A check's result (JSON) with the verdict turned to ``error`` when the candidate violated the sandbox."""
    found = violations()
    if "verdict" not in result:
        return result
    from ..verdict import Verdict

    if not found:  # a denial the hook did not see (C code, ctypes): Landlock's EACCES, named as such
        v = dict(result["verdict"])
        details = dict(v.get("details") or {})
        if v.get("status") != "error" or "PermissionError" not in (v.get("message") or "") + str(details.get("exception")):
            return result
        v["message"] = (v.get("message") or "") + (" (a PermissionError under the sandbox: probably denied by the "
                                                   "sandbox's Landlock rules)")
        v["details"] = {**details, "sandbox": {"violations": [], "enforced": enforced()}}
        return {**result, "verdict": v}

    first = found[0]["message"]
    more = f" (and {len(found) - 1} more violation(s))" if len(found) > 1 else ""
    verdict = Verdict.error(first + more, sandbox={"violations": found[:20], "enforced": enforced()})
    return {**result, "verdict": verdict.to_json()}
