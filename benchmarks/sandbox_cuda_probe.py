"""Which protection of the ``check`` sandbox breaks CUDA? Each one alone, then all together.

Every configuration is a fresh child process (started like ``kernelaudit check``'s worker,
by ``run_bounded``, all at once) that enters the named protections of
:mod:`kernelaudit.zoo.sandbox` and then tries CUDA: the driver's own ``cuInit`` and
device count through ``libcuda.so.1`` (the raw error code: 304 is
``cudaErrorOperatingSystem``), ``torch.cuda.is_available()``, a small computation checked
against its exact value, and (for ``all + triton``) a compiled Triton kernel. Each child also
names one of its own threads the way the driver does (``open`` of
``/proc/<pid>/task/<tid>/comm`` from C) and lists its threads' names.

Configurations: ``none`` (the baseline), ``env`` (caches and TMPDIR pointed at the scratch
dir), ``rlimits``, ``cgroup`` (the pids cgroup, where the kernel has one), ``watchdog``
(the parent's task watchdog), ``netns`` (a new network namespace), ``landlock`` (the file
rules), ``seccomp``, ``audit hook``, ``all`` (the real :func:`kernelaudit.zoo.sandbox.apply`),
``all + triton``; and, to name the cause, ``landlock``/``all`` *before the fix* (the process
may not write its own ``/proc/<pid>/task``), ``landlock`` with every read allowed and with
``/proc`` and ``/dev`` writable (if the plain one fails and these pass, a path is missing).

Usage (the H200, about 30 s; prints JSON and writes ``$OUT/sandbox_cuda_probe.json`` when
``OUT`` is set, or ``--out``)::

    python benchmarks/sandbox_cuda_probe.py

``--device cpu`` runs the same children without CUDA (the layers and the thread naming
only): how it was tried on a machine without a GPU. Exit code 0 when CUDA (or, on CPU, the
thread naming) works under the whole sandbox, 1 when a protection breaks it, 3 when there is
no CUDA to try.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import copy
import ctypes
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import emit  # noqa: E402

from kernelaudit.errors import EXIT_FOUND, EXIT_OK, EXIT_UNJUDGED  # noqa: E402

#: (name, layers the child enters in this order, changes to the policy, the parent's task bound)
CONFIGS = [
    ("none", [], {}, None),
    ("env", ["env"], {}, None),
    ("rlimits", ["rlimits"], {}, None),
    ("cgroup", ["cgroup"], {}, "cgroup"),
    ("watchdog", ["subreaper"], {}, "watchdog"),
    ("netns", ["netns"], {}, None),
    ("landlock", ["landlock"], {}, None),
    ("landlock, before the fix", ["landlock"], {"name_threads": False}, None),
    ("landlock, every read allowed", ["landlock"], {"read_paths": ["/"]}, None),
    ("landlock, /proc and /dev writable", ["landlock"], {"write_files+": ["/proc", "/dev"]}, None),
    ("seccomp", ["seccomp"], {}, None),
    ("audit hook", ["audit"], {}, None),
    ("all", ["sandbox"], {}, "cgroup"),
    ("all, before the fix", ["sandbox"], {"name_threads": False}, "cgroup"),
    ("all + triton", ["sandbox", "triton"], {}, "cgroup"),
]
#: Configurations that are not the sandbox as shipped: they name the cause (the first two are expected to fail).
DIAGNOSTIC = ("landlock, before the fix", "all, before the fix", "landlock, every read allowed",
              "landlock, /proc and /dev writable")
#: Seconds a child may take (torch import, CUDA init, one Triton compile).
CHILD_TIMEOUT_S = 50


# ---------------------------------------------------------------------------
# the child: enter the layers, then try CUDA
# ---------------------------------------------------------------------------

def enter_layers(layers: list[str], policy_json: dict) -> list[str]:
    """Enter each named protection of the sandbox, in :func:`~kernelaudit.zoo.sandbox.apply`'s order."""
    from kernelaudit.zoo import sandbox
    from kernelaudit.zoo.sandbox import kernel, report, seccomp
    from kernelaudit.zoo.sandbox.processes import join_cgroup

    policy = sandbox.Sandbox.from_json(policy_json)
    os.makedirs(policy.scratch, exist_ok=True)
    policy.read_paths = sorted({os.path.realpath(p) for p in policy.read_paths})
    done: list[str] = []
    for layer in layers:
        if layer == "sandbox":
            done += sandbox.apply(policy)
        elif layer == "env":
            sandbox.redirect_caches(policy.scratch)
            done.append(f"env: caches and TMPDIR in {policy.scratch}")
        elif layer == "rlimits":
            done.append(kernel.set_limits(policy))
        elif layer == "cgroup":
            join_cgroup(policy.cgroup)
            done.append(f"cgroup: joined {policy.cgroup}")
        elif layer == "subreaper":
            kernel.become_subreaper()
            done.append("subreaper (the parent's watchdog counts the tree)")
        elif layer == "netns":
            net, why = kernel.isolate_network()
            done.append(net or f"network: not isolated: {why}")
        elif layer == "landlock":
            done.append(kernel.restrict_files(policy, kernel.landlock_abi()))
        elif layer == "seccomp":
            done.append(seccomp.install())
        elif layer == "audit":
            report.start(policy, [])
            done.append("audit hook")
    return done


def name_a_thread() -> str:
    """Name a new thread as the CUDA driver does (C ``open`` + ``write`` of its ``comm``): "" or why not."""
    libc = ctypes.CDLL(None, use_errno=True)
    out: list[str] = []

    def run() -> None:
        tid = threading.get_native_id()
        path = f"/proc/{os.getpid()}/task/{tid}/comm".encode()
        fd = libc.open(path, os.O_WRONLY)
        if fd < 0:
            out.append(f"open({path.decode()}): {os.strerror(ctypes.get_errno())}")
            return
        if libc.write(fd, b"probe-named", 11) < 0:
            out.append(f"write({path.decode()}): {os.strerror(ctypes.get_errno())}")
        libc.close(fd)

    t = threading.Thread(target=run)
    t.start()
    t.join()
    return out[0] if out else ""


def thread_names() -> list[str]:
    names = set()
    for comm in Path(f"/proc/{os.getpid()}/task").glob("*/comm"):
        try:
            names.add(comm.read_text().strip())
        except OSError as exc:
            names.add(f"<{exc.strerror}>")
    return sorted(names)


def try_cuda(with_triton: bool, scratch: str) -> dict:
    """The driver's own answer, then torch's, then a computation whose exact value is known."""
    r: dict = {}
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        r["cuInit"] = cuda.cuInit(0)
        n = ctypes.c_int(-1)
        r["cuDeviceGetCount"] = [cuda.cuDeviceGetCount(ctypes.byref(n)), n.value]
    except OSError as exc:
        r["cuInit"] = f"libcuda.so.1 not loadable: {exc}"
    import torch

    r["torch_is_available"] = torch.cuda.is_available()
    try:
        torch.cuda.init()
        x = torch.arange(4096, device="cuda", dtype=torch.float64)
        r["computed"] = float((x * 2).sum()) == 4095 * 4096
        if with_triton:
            r["triton"] = triton_double(x.float(), scratch)
    except Exception as exc:  # noqa: BLE001 - the failure is the finding, reported in words
        r["error"] = f"{type(exc).__name__}: {exc}"[:600]
    r["ok"] = r.get("cuInit") == 0 and r["torch_is_available"] and r.get("computed") is True and \
        r.get("triton", True) is True
    return r


#: A candidate's Triton kernel: written to the scratch dir and imported inside the box, as a candidate is.
TRITON_KERNEL = """
import triton
import triton.language as tl


@triton.jit
def double(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + i, tl.load(x_ptr + i, mask=i < n) * 2, mask=i < n)
"""


def triton_double(x, scratch: str) -> bool:
    """A compiled Triton kernel (cc and ptxas run inside the box): 2x, exactly."""
    import importlib.util

    path = Path(scratch, "probe_triton_kernel.py")
    path.write_text(TRITON_KERNEL)
    spec = importlib.util.spec_from_file_location("probe_triton_kernel", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    y = x.new_empty(x.shape)
    mod.double[((x.numel() + 255) // 256,)](x, y, x.numel(), BLOCK=256)
    return bool((y == x * 2).all())


def child(spec: dict) -> None:
    """One configuration: its result is the last line of stdout."""
    t0 = time.perf_counter()
    r: dict = {"layers": spec["layers"]}
    try:
        r["entered"] = enter_layers([la for la in spec["layers"] if la != "triton"], spec["policy"])
    except Exception as exc:  # noqa: BLE001 - SandboxUnavailable names the driver's error: that is the finding
        r["enter_error"] = f"{type(exc).__name__}: {exc}"[:800]
    r["thread_naming"] = name_a_thread() or "ok"
    if spec["device"] == "cuda" and "enter_error" not in r:
        r.update(try_cuda("triton" in spec["layers"], spec["policy"]["scratch"]))
    else:
        r["ok"] = "enter_error" not in r and r["thread_naming"] == "ok"
    r["thread_names"] = thread_names()
    r["seconds"] = round(time.perf_counter() - t0, 2)
    sys.stdout.write("\n" + json.dumps(r) + "\n")
    sys.stdout.flush()
    os._exit(0)


# ---------------------------------------------------------------------------
# the parent
# ---------------------------------------------------------------------------

def policy_for(base, changes: dict, scratch: Path) -> dict:
    p = copy.deepcopy(base)
    p.scratch = str(scratch)
    for key, value in changes.items():
        if key.endswith("+"):
            setattr(p, key[:-1], getattr(p, key[:-1]) + value)
        else:
            setattr(p, key, value)
    return p.to_json()


def run_one(name: str, layers: list[str], changes: dict, bound_kind: str | None, base, device: str,
            tmp: Path) -> dict:
    from kernelaudit.zoo.sandbox import TaskBound, run_bounded

    d = tmp / name.replace(" ", "_").replace(",", "").replace("/", "")
    d.mkdir()
    bound = TaskBound(base.max_tasks, use_cgroup=bound_kind == "cgroup") if bound_kind else None
    policy = policy_for(base, changes, d / "scratch")
    policy["cgroup"] = bound.cgroup if bound is not None and bound.cgroup else ""
    if "cgroup" in layers and not policy["cgroup"]:
        layers = [la for la in layers if la != "cgroup"]  # no pids cgroup here: the watchdog bounds it
    spec = {"layers": layers, "policy": policy, "device": device}
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    if device == "cuda":
        env["TRITON_INTERPRET"] = "0"  # compiled for the GPU, as a candidate's kernel would be
    try:
        done = run_bounded([sys.executable, __file__, "--child", json.dumps(spec)], env=env,
                           timeout_s=CHILD_TIMEOUT_S, out_dir=str(d), bound=bound)
    finally:
        if bound is not None:
            bound.close()
    last = done.stdout.strip().splitlines()[-1:] if done.stdout.strip() else []
    try:
        r = json.loads(last[0]) if last else {}
    except json.JSONDecodeError:
        r = {}
    if not r:
        r = {"ok": False, "error": f"no result: exit {done.returncode}, timed out {done.timed_out}, "
                                   f"unbounded {done.unbounded}; stderr: {done.stderr.strip()[-800:]}"}
    r["task_bound"] = bound.mechanism if bound is not None else "none"
    return r


def machine(device: str) -> dict:
    from kernelaudit.zoo import sandbox
    from kernelaudit.zoo.sandbox import seccomp

    info = {"kernel": os.uname().release, "uid": os.geteuid(), "landlock_abi": sandbox.landlock_abi(),
            "seccomp": seccomp.available() or "available", "python": sys.version.split()[0], "device": device}
    try:
        info["nvidia_driver"] = Path("/proc/driver/nvidia/version").read_text().splitlines()[0]
    except OSError:
        info["nvidia_driver"] = "none"
    import torch

    info["torch"] = torch.__version__
    info["torch_cuda"] = torch.version.cuda
    return info


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                    help="cuda (the H200) or cpu (only the layers and the thread naming)")
    ap.add_argument("--out", help="where to write the JSON (default $OUT/sandbox_cuda_probe.json when OUT is set)")
    ap.add_argument("--only", action="append", help="a configuration's name, e.g. 'all, before the fix' "
                                                    "(repeatable; default: every configuration)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        child(json.loads(a.child))
    out = a.out or (os.path.join(os.environ["OUT"], "sandbox_cuda_probe.json") if os.environ.get("OUT") else None)
    t0 = time.perf_counter()
    import torch

    from kernelaudit.zoo.sandbox import Sandbox

    info = machine(a.device)
    if a.device == "cuda" and not torch.cuda.is_available():  # also loads the driver: its directory is read
        emit({"machine": info, "verdict": "no CUDA device here: nothing to probe"}, out)
        return EXIT_UNJUDGED
    base = Sandbox.for_check(__file__, __file__, "/nonexistent", cpu_seconds=CHILD_TIMEOUT_S * (os.cpu_count() or 1),
                             device="cuda")
    base.device = a.device  # on cpu: the CUDA policy's files and thread naming, without require_cuda
    unknown = sorted(set(a.only or []) - {c[0] for c in CONFIGS})
    if unknown:
        ap.error(f"--only {unknown[0]!r}: not a configuration; one of {', '.join(c[0] for c in CONFIGS)}")
    only = set(a.only) if a.only else None
    configs = [c for c in CONFIGS if only is None or c[0] in only]
    if a.device == "cpu":
        configs = [c for c in configs if "triton" not in c[1]]
    with tempfile.TemporaryDirectory(prefix="sandbox-cuda-probe-") as tmp, \
            concurrent.futures.ThreadPoolExecutor(len(configs)) as pool:
        futures = {name: pool.submit(run_one, name, list(layers), changes, bound, base, a.device, Path(tmp))
                   for name, layers, changes, bound in configs}
        results = {name: f.result() for name, f in futures.items()}
    baseline = results.get("none", {}).get("ok", False)
    breaks = [n for n, r in results.items() if not r.get("ok") and n != "none" and n not in DIAGNOSTIC]
    whole = results.get("all", {}).get("ok")
    before = {n: results[n].get("ok") for n in DIAGNOSTIC[:2] if n in results}
    what = "CUDA" if a.device == "cuda" else "naming a thread as the CUDA driver does"
    if not baseline:
        verdict = f"{what} fails even with no protection: the probe cannot name a cause"
    elif breaks:
        verdict = f"{what} breaks under: " + ", ".join(breaks)
    else:
        verdict = f"{what} works under every protection alone and under the whole sandbox"
    if baseline and before:
        verdict += ("; without the thread-name grant it fails (" + ", ".join(before)
                    + "): Landlock denies the write of /proc/<pid>/task/<tid>/comm"
                    if not any(before.values()) else
                    "; it also works without the thread-name grant: that was not the cause here")
    emit({"machine": info, "verdict": verdict, "breaks_cuda": breaks, "whole_sandbox_ok": whole,
          "before_the_fix_ok": before, "seconds": round(time.perf_counter() - t0, 1), "results": results}, out)
    return EXIT_OK if baseline and whole else (EXIT_UNJUDGED if not baseline else EXIT_FOUND)


if __name__ == "__main__":
    sys.exit(main())
