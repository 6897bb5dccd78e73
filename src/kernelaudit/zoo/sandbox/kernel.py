"""The kernel's confinement of a sandboxed check: Landlock (files, TCP), a network
namespace, and rlimits (memory, CPU seconds, file size, processes of a non-root user)."""

from __future__ import annotations

import ctypes
import os
import resource
from pathlib import Path
from typing import Any

from .policy import Sandbox, own_task_dir


class SandboxUnavailable(RuntimeError):
    """The kernel lacks a feature the sandbox needs (the message names it and ``--no-sandbox``)."""


# Landlock ABI (linux/landlock.h).
_SYS_CREATE, _SYS_ADD_RULE, _SYS_RESTRICT = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_FS_EXECUTE, _FS_WRITE_FILE, _FS_READ_FILE, _FS_READ_DIR = 1, 2, 4, 8
_FS_TRUNCATE, _FS_IOCTL_DEV = 1 << 14, 1 << 15
_NET_BIND_TCP, _NET_CONNECT_TCP = 1, 2
_SCOPE_ABSTRACT_UNIX, _SCOPE_SIGNAL = 1, 2
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_CHILD_SUBREAPER = 36
_CLONE_NEWNET = 0x40000000
_CLONE_NEWUSER = 0x10000000


#: O_PATH descriptors of the /proc paths Landlock rules were added for (see :func:`_add_rule`).
_PINNED: list[int] = []


def libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _syscall(*args: Any) -> int:
    c = libc()
    c.syscall.restype = ctypes.c_long
    return c.syscall(*args)


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 when Landlock is missing or disabled."""
    r = _syscall(_SYS_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return max(int(r), 0)


def no_new_privileges() -> None:
    """``PR_SET_NO_NEW_PRIVS`` (Landlock and an unprivileged seccomp filter need it)."""
    if libc().prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise SandboxUnavailable(f"prctl(NO_NEW_PRIVS) failed: {os.strerror(ctypes.get_errno())}")


def become_subreaper() -> None:
    """Orphaned descendants are re-parented to this process, so the parent's watchdog still sees
    them as the sandbox's (a double fork does not escape the count)."""
    libc().prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def set_limits(policy: Sandbox) -> str:
    """rlimits: data memory, processes, CPU seconds, file size."""
    limits = {resource.RLIMIT_FSIZE: policy.max_file_bytes}
    if policy.memory_bytes:
        limits[resource.RLIMIT_DATA] = policy.memory_bytes
    if policy.cpu_seconds:
        limits[resource.RLIMIT_CPU] = policy.cpu_seconds
    # Room above the parent's task bound: where the kernel enforces RLIMIT_NPROC for root
    # (a container without CAP_SYS_RESOURCE), a lower limit would cap a fork bomb silently
    # below the bound, and the candidate's next fork would fail as its own error instead of
    # the check reporting "forked without bound" (seen on the H200 machine).
    limits[resource.RLIMIT_NPROC] = _threads_of_user() + 256 + max(policy.max_processes, policy.max_tasks)
    for which, value in limits.items():
        _soft, hard = resource.getrlimit(which)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(which, (value, value))
    root = " (not enforced for root)" if os.geteuid() == 0 else ""
    data = f"{policy.memory_bytes >> 20} MiB" if policy.memory_bytes else "unbounded (CUDA)"
    return (f"rlimits: data {data}, cpu {policy.cpu_seconds or 'unbounded'} s, "
            f"file {policy.max_file_bytes >> 20} MiB, processes {limits[resource.RLIMIT_NPROC]}{root}")


def _threads_of_user() -> int:
    try:
        return sum(1 for _ in Path("/proc").glob("[0-9]*/task/[0-9]*"))
    except OSError:
        return 1024


def isolate_network() -> tuple[str | None, str]:
    """A new, empty network namespace (as root, or in a new user namespace): (what, why not)."""
    c = libc()
    why = []
    for flags, how in ((_CLONE_NEWNET, "network namespace"),
                       (_CLONE_NEWUSER | _CLONE_NEWNET, "user + network namespace")):
        if c.unshare(ctypes.c_int(flags)) == 0:
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
    return rights  # IOCTL_DEV (ABI 5) stays unhandled: CUDA drives its device files by ioctl


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
        for p in policy.own_writes():  # with name_threads, this process's /proc/<pid>/task (CUDA's thread names)
            _add_rule(fd, p, read | write)
        _add_rule(fd, policy.scratch, handled)
        no_new_privileges()
        if _syscall(_SYS_RESTRICT, ctypes.c_int(fd), ctypes.c_uint32(0)) != 0:
            raise SandboxUnavailable(f"landlock_restrict_self failed: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(fd)
    extra = f", its own {own_task_dir()} writable (the CUDA driver names its threads there)" \
        if policy.name_threads else ""
    extra += ", TCP bind/connect denied" if abi >= 4 else ""
    extra += ", signals and abstract unix sockets scoped to the sandbox" if abi >= 6 else ""
    return f"files: Landlock ABI {abi}, {len(policy.read_paths)} read-only roots, writes only in {policy.scratch}{extra}"


def _add_rule(ruleset_fd: int, path: str, access: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # a root that does not exist here (/lib64, /dev/nvidia0 ...) grants nothing
    pin = path.startswith("/proc/")
    try:
        if not os.path.isdir(path):
            access &= _FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | _FS_TRUNCATE | _FS_IOCTL_DEV
        rule = _PathBeneath(access, fd)
        if _syscall(_SYS_ADD_RULE, ctypes.c_int(ruleset_fd), ctypes.c_int(_RULE_PATH_BENEATH),
                    ctypes.byref(rule), ctypes.c_uint32(0)) != 0:
            pin = False
            raise SandboxUnavailable(f"landlock_add_rule({path}) failed: {os.strerror(ctypes.get_errno())}")
    finally:
        if pin:
            # A rule holds the inode, and procfs makes a new inode for a /proc/<pid> path whose dentry was
            # evicted: the fd keeps the dentry (and so the rule's inode) for the process's life.
            _PINNED.append(fd)
        else:
            os.close(fd)
