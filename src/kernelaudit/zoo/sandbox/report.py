"""Reporting a sandbox violation: a Python audit hook holding the same policy.

It refuses a call before the kernel would (files, sockets, process creation, C functions
the seccomp filter denies, looked up through ``ctypes``) and records it when the
candidate's code is on the stack; :func:`overrule` turns the records into an ``error``
verdict. The hook is no security boundary (C code goes around it); the kernel's
Landlock, namespace, seccomp filter, rlimits and pids bound are.
"""

from __future__ import annotations

import errno
import os
import socket
import sys
from typing import Any

from . import seccomp
from .policy import Sandbox, under

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
_SPAWN_EVENTS = ("subprocess.Popen", "os.posix_spawn", "os.spawn", "os.system", "os.exec", "pty.spawn")

_state: dict[str, Any] = {"policy": None, "violations": [], "spawned": 0, "enforced": [], "toolchain": []}


def start(policy: Sandbox, enforced: list[str]) -> None:
    """Hold ``policy`` and report against it from now on."""
    import sysconfig

    # the installation's own packages, whose spawns (Triton's ptxas and cc, torch's ninja) are not the candidate's
    _state["toolchain"] = [p for p in policy.read_paths if p.endswith(("site-packages", "dist-packages"))] + \
        [sysconfig.get_paths()["purelib"]]
    _state.update(policy=policy, enforced=enforced)
    sys.addaudithook(_audit)


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
    elif event == "socket.__new__" and _family_number(args) != socket.AF_UNIX:
        _deny(policy, "socket", f"opened a socket (family {_family(args)}): the check has no network")
    elif event in ("os.fork", "os.forkpty") and _in_candidate(policy):
        # the checker's own forks (a mutate worker's next child, after its setup) have no
        # candidate frame anywhere on the stack; a fork the candidate reaches, even through a
        # library (multiprocessing), does
        _deny(policy, "fork", "forked the checking process (os.fork): process creation is bounded")
    elif event == "ctypes.dlsym" and isinstance(args[1], str):
        what = seccomp.denied_function(args[1])
        if what and _in_candidate(policy):
            _deny(policy, "syscall",
                  f"looked up {args[1]}() through ctypes (to {what}), which the seccomp filter denies")
    elif event in _SPAWN_EVENTS and not _by_toolchain(policy):
        _state["spawned"] += 1
        if _state["spawned"] > policy.max_processes:
            _deny(policy, "processes", f"started more than {policy.max_processes} processes ({event})")


def _family_number(args: tuple) -> int:
    try:
        return int(args[1])
    except (IndexError, TypeError, ValueError):
        return -1


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
    found = {"kind": kind, "message": f"the candidate {what}: denied by the sandbox"}
    if _in_candidate(policy) and found not in _state["violations"]:  # a forward run again tries it again
        _state["violations"].append(found)
    raise PermissionError(errno.EACCES, f"kernelaudit sandbox: {what}", *([path] if path else []))


def _in_candidate(policy: Sandbox) -> bool:
    frame = sys._getframe(2)
    while frame is not None:
        if under(frame.f_code.co_filename, policy.candidates):
            return True
        frame = frame.f_back
    return False


def _by_toolchain(policy: Sandbox) -> bool:
    """Is the innermost caller outside the standard library the installation (not the candidate)?"""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if under(name, policy.candidates):
            return False
        if under(name, _state["toolchain"]):
            return True
        frame = frame.f_back
    return False


def violations() -> list[dict[str, str]]:
    """The candidate's sandbox violations so far (kind and message), oldest first."""
    return list(_state["violations"])


def enforced() -> list[str]:
    """What the sandbox enforced, one line each."""
    return list(_state["enforced"])


def overrule(result: dict[str, Any]) -> dict[str, Any]:
    """A check's result (JSON) with the verdict turned to ``error`` when the candidate violated the sandbox."""
    found = violations()
    if "verdict" not in result:
        return result
    from ...verdict import Verdict

    if not found:  # a denial the hook did not see (C code, ctypes): the kernel's EACCES/EPERM, named as such
        v = dict(result["verdict"])
        details = dict(v.get("details") or {})
        if v.get("status") != "error" or "PermissionError" not in (v.get("message") or "") + str(details.get("exception")):
            return result
        v["message"] = (v.get("message") or "") + (" (a PermissionError under the sandbox: probably denied by the "
                                                   "sandbox's Landlock rules or seccomp filter)")
        v["details"] = {**details, "sandbox": {"violations": [], "enforced": enforced()}}
        return {**result, "verdict": v}

    first = found[0]["message"]
    more = f" (and {len(found) - 1} more violation(s))" if len(found) > 1 else ""
    verdict = Verdict.error(first + more, sandbox={"violations": found[:20], "enforced": enforced()})
    return {**result, "verdict": verdict.to_json()}
