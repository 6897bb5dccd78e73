"""The seccomp filter of a sandboxed check: system calls a PyTorch/Triton candidate never needs.

Denied with ``EPERM`` (Python: ``PermissionError``), so a denial is an error the candidate
sees and the verdict can name, not a killed process: sockets other than ``AF_UNIX``,
``ptrace`` and ``process_vm_*`` (other processes' memory), ``mount`` and friends,
``kexec``, ``bpf``, the kernel keyring, ``personality`` (but its query), ``unshare``,
``setns`` and namespace flags of ``clone`` (after the sandbox's own setup), module
loading, ``perf_event_open``, ``userfaultfd``, ``io_uring`` (its operations bypass
seccomp), handle-based opens (``open_by_handle_at`` goes around path rules) and clock
or host settings. ``clone3``, whose flags seccomp cannot read, answers ``ENOSYS`` so the
C library falls back to ``clone``. Other architectures' system calls kill the process.

Built with ``pyseccomp`` (the ``sandbox`` extra) over the system's libseccomp; without
them :func:`install` says so and the rest of the sandbox still holds.
"""

from __future__ import annotations

import errno
import socket

#: System calls denied outright, with what they would have done (for the verdict).
DENIED = {
    "ptrace": "trace another process", "process_vm_readv": "read another process's memory",
    "process_vm_writev": "write another process's memory", "pidfd_getfd": "take another process's file",
    "kcmp": "compare other processes' resources",
    "mount": "mount a filesystem", "umount2": "unmount a filesystem", "pivot_root": "change the root filesystem",
    "chroot": "change the root directory", "fsopen": "mount a filesystem", "fsmount": "mount a filesystem",
    "fsconfig": "mount a filesystem", "fspick": "mount a filesystem", "move_mount": "mount a filesystem",
    "open_tree": "mount a filesystem", "mount_setattr": "mount a filesystem",
    "kexec_load": "load a new kernel", "kexec_file_load": "load a new kernel", "reboot": "reboot the machine",
    "init_module": "load a kernel module", "finit_module": "load a kernel module",
    "delete_module": "unload a kernel module", "bpf": "load a BPF program", "perf_event_open": "open a perf event",
    "keyctl": "use the kernel keyring", "add_key": "use the kernel keyring", "request_key": "use the kernel keyring",
    "unshare": "leave its namespaces", "setns": "enter another namespace", "userfaultfd": "open a userfaultfd",
    "io_uring_setup": "use io_uring", "io_uring_enter": "use io_uring", "io_uring_register": "use io_uring",
    "open_by_handle_at": "open a file by handle", "name_to_handle_at": "open a file by handle",
    "swapon": "change swap", "swapoff": "change swap", "acct": "switch process accounting",
    "settimeofday": "set the clock", "clock_settime": "set the clock", "clock_adjtime": "set the clock",
    "adjtimex": "set the clock", "sethostname": "rename the host", "setdomainname": "rename the host",
    "iopl": "access I/O ports", "ioperm": "access I/O ports", "syslog": "read the kernel log",
    "quotactl": "change disk quotas", "uselib": "load a library the old way",
}
_CLONE_NAMESPACES = {"CLONE_NEWNS": 0x00020000, "CLONE_NEWCGROUP": 0x02000000, "CLONE_NEWUTS": 0x04000000,
                     "CLONE_NEWIPC": 0x08000000, "CLONE_NEWUSER": 0x10000000, "CLONE_NEWPID": 0x20000000,
                     "CLONE_NEWNET": 0x40000000}
_PERSONALITY_QUERY = 0xFFFFFFFF


def available() -> str:
    """"" when a filter can be installed here, else why not (naming the extra to install)."""
    try:
        import pyseccomp  # noqa: F401 - only whether it loads
    except (ImportError, OSError) as exc:  # OSError: the module is there, libseccomp.so.2 is not
        return (f"pyseccomp with libseccomp is not available ({type(exc).__name__}: {exc}); "
                "pip install 'kernelaudit[sandbox]' (and the system's libseccomp2) to add it")
    return ""


def install() -> str:
    """Install the filter on every thread of this process and its future children; one line of what
    it does (or, without pyseccomp, why there is none)."""
    why = available()
    if why:
        return f"seccomp: not applied: {why}"
    import pyseccomp as sc

    deny = sc.ERRNO(errno.EPERM)
    f = sc.SyscallFilter(sc.ALLOW)
    f.set_attr(sc.Attr.CTL_TSYNC, 1)
    names = []
    for name in DENIED:
        try:
            f.add_rule(deny, name)
        except (OSError, ValueError):  # a call this architecture or libseccomp version does not know
            continue
        names.append(name)
    f.add_rule(deny, "personality", sc.Arg(0, sc.NE, _PERSONALITY_QUERY))
    for call in ("socket", "socketpair"):
        f.add_rule(deny, call, sc.Arg(0, sc.NE, socket.AF_UNIX))
    for flag in _CLONE_NAMESPACES.values():
        f.add_rule(deny, "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    try:
        f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    except (OSError, ValueError):
        pass
    f.load()
    return (f"seccomp: {len(names)} system calls denied (ptrace, mount, bpf, unshare, setns, io_uring ...), "
            "sockets other than AF_UNIX, clone into new namespaces")


def denied_function(name: str) -> str | None:
    """What calling the C function ``name`` would try, when the filter denies it; else None."""
    return DENIED.get("umount2" if name == "umount" else name)
