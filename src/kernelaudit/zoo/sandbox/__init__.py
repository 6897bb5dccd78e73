"""The sandbox of an isolated check: untrusted candidate code stays in its box.

``kernelaudit check`` (and each ``kernelaudit mutate`` worker) runs candidates in a child
process. Before the child imports the problem or a candidate it calls :func:`apply` with
a :class:`Sandbox` policy (:mod:`.policy`), built by the parent:

- **files** (Landlock, :mod:`.kernel`): reads only of the problem, the candidate, the
  Python installation, the kernelaudit package, system libraries, ``/sys``, this
  process's ``/proc/self`` and, on CUDA, the driver's libraries and device files;
  writes only under a fresh scratch directory, where every cache (``HOME``, ``TMPDIR``,
  Triton's, inductor's, CUDA's) is pointed, and, on CUDA, in this process's own
  ``/proc/<pid>/task`` (the driver names its threads there; denied, ``cuInit`` fails with 304).
- **network** (a new network namespace; Landlock TCP rules from ABI 4).
- **system calls** (seccomp, :mod:`.seccomp`): no sockets but ``AF_UNIX``, no ptrace,
  mount, bpf, keyring, namespaces, io_uring ...
- **memory, CPU time, file size** (rlimits) and **tasks alive at once** (a pids cgroup,
  else a watchdog in the parent, :mod:`.processes`: a fork bomb is killed and reported).
- **reporting** (a Python audit hook, :mod:`.report`): what was tried, in the verdict.

Where the kernel lacks a feature the sandbox is not silently weakened: :func:`apply`
raises :class:`SandboxUnavailable` naming the feature and ``--no-sandbox`` (only the
seccomp layer, an optional dependency, is left out with a line saying so).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from . import seccomp
from .kernel import (SandboxUnavailable, become_subreaper, isolate_network, landlock_abi, restrict_files,
                     set_limits)
from .policy import CACHE_VARIABLES, Sandbox
from .processes import TaskBound, join_cgroup, run_bounded
from .report import enforced, overrule, violations

__all__ = ["Sandbox", "SandboxUnavailable", "TaskBound", "apply", "enforced", "enter", "enter_worker", "landlock_abi",
           "overrule", "run_bounded", "violations"]


def apply(policy: Sandbox) -> list[str]:
    """Enter the sandbox for good (this process and its children). Returns what is enforced, one line each.

    Raises :class:`SandboxUnavailable` where the kernel lacks Landlock or network isolation.
    """
    abi = landlock_abi()
    if abi < 1:
        raise SandboxUnavailable(f"the kernel ({os.uname().release}) has no Landlock (ABI {abi}): file access "
                                 "cannot be confined; run with --no-sandbox to check without the sandbox")
    os.makedirs(policy.scratch, exist_ok=True)
    redirect_caches(policy.scratch)
    # /proc/self and the like mean this process: resolved here, where the rules are made
    policy.read_paths = sorted({os.path.realpath(p) for p in policy.read_paths})
    if policy.cgroup:
        try:
            join_cgroup(policy.cgroup)  # before Landlock closes /sys to writes
        except OSError as exc:
            raise SandboxUnavailable(f"could not join the pids cgroup {policy.cgroup}: {exc}; run with "
                                     "--no-sandbox to check without the sandbox") from exc
    become_subreaper()
    enforced_now = [set_limits(policy)]
    net, why = isolate_network()
    if net is None and abi < 4:
        raise SandboxUnavailable(f"network not isolated: {why}, and Landlock ABI {abi} < 4 has no TCP rules "
                                 f"(kernel {os.uname().release}); run with --no-sandbox to check without it")
    enforced_now.append(restrict_files(policy, abi))
    enforced_now.append(net or f"network: only TCP bind/connect denied (Landlock) and Python sockets refused "
                               f"(audit hook); not isolated for UDP or raw sockets from C: {why}")
    enforced_now.append(seccomp.install())  # last: the namespace above needed unshare
    enforced_now.append(f"tasks: at most {policy.max_tasks} alive at once, the kernel's pids cgroup {policy.cgroup}"
                        if policy.cgroup else "tasks: no pids cgroup here; bounded only where the parent runs a "
                                              "watchdog (kernelaudit check does)")
    from . import report

    report.start(policy, enforced_now)
    if policy.device == "cuda":
        require_cuda()
    return enforced_now


def redirect_caches(scratch: str) -> None:
    """Point every cache and temporary directory a candidate's libraries write at ``scratch``."""
    for var, sub in CACHE_VARIABLES.items():
        os.environ[var] = os.path.join(scratch, sub) if sub else scratch
    os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
    sys.dont_write_bytecode = True
    import tempfile

    tempfile.tempdir = scratch


def require_cuda() -> None:
    """CUDA must still be reachable inside the sandbox; if not, say so instead of "no CUDA device"."""
    import torch

    if not torch.cuda.is_available():
        try:  # the driver's own words, for whoever widens the allow-lists
            torch.cuda.init()
            why = "torch sees no device"
        except Exception as exc:  # noqa: BLE001 - any failure is the reason reported
            why = f"{type(exc).__name__}: {exc}"
        raise SandboxUnavailable(f"CUDA is not reachable inside the sandbox on this machine ({why}; the driver "
                                 "needs something the sandbox denies); run with --no-sandbox to check on CUDA")


def enter(policy_json: dict[str, Any]) -> list[str]:
    """:func:`apply` the policy sent by the parent (raises :class:`SandboxUnavailable`)."""
    return apply(Sandbox.from_json(policy_json))


def enter_worker(job: dict[str, Any]) -> list[str]:
    """:func:`apply` the policy of a ``kernelaudit mutate`` worker's ``job``: it reads its subject's problem
    (and ``suite:FILE`` columns' files), writes its mutants, which are the untrusted code, in its scratch dir."""
    policy = Sandbox.for_worker(job["subject"]["problem_path"], job["scratch"], device=job["device"])
    policy.read_paths += [c.split(":", 1)[1] for c in job.get("columns", []) if c.startswith("suite:")]
    return apply(policy)
