"""The sandbox of `kernelaudit check`: a candidate that writes outside its scratch directory,
reads a secret, opens a socket, calls what seccomp denies or forks without bound is stopped and
reported as such; a well-behaved one is ok. Each isolated check costs a torch import (~4 s
here), so the violations share one candidate."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap
import threading

import pytest
from click.testing import CliRunner

from kernelaudit.verdict import Status
from kernelaudit.zoo import sandbox
from kernelaudit.zoo.check import check_command, run_check_isolated
from kernelaudit.zoo.sandbox import seccomp

ABI = sandbox.landlock_abi()
pytestmark = pytest.mark.skipif(ABI < 1, reason=f"the kernel has no Landlock (ABI {ABI}): the sandbox refuses to run")
HAS_SECCOMP = not seccomp.available()

PROBLEM = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)

def get_inputs():
    return [torch.randn(4, 8)]

def get_init_inputs():
    return []
'''

#: (kind recorded, what the candidate tries, words its violation's message must hold)
VIOLATIONS = [
    ("write", "open(OUTSIDE, 'w').write('escaped')", ["tried to write", "outside its scratch directory"]),
    ("read", "open(SECRET).read()", ["tried to read", "secret.txt"]),
    ("read", "os.listdir(os.path.dirname(SECRET))", ["tried to list", "outside the problem"]),
    ("socket", "socket.create_connection(('127.0.0.1', 9))", ["opened a socket", "AF_INET"]),
    ("fork", "[os.fork() or os._exit(0) for _ in iter(int, 1)]", ["forked the checking process"]),
    ("processes", "[subprocess.run(['true']) for _ in iter(int, 1)]", ["started more than 16 processes"]),
    ("syscall", "ctypes.CDLL(None).ptrace", ["looked up ptrace() through ctypes", "seccomp filter denies"]),
]


def _files(tmp_path, body: str):
    problem = tmp_path / "tiny.py"
    problem.write_text(PROBLEM)
    (tmp_path / "secret.txt").write_text("the secret")
    cand = tmp_path / "cand.py"
    cand.write_text(textwrap.dedent(f"""
        import ctypes, os, socket, subprocess
        import torch
        import torch.nn as nn

        OUTSIDE = {str(tmp_path / 'escaped.txt')!r}
        SECRET = {str(tmp_path / 'secret.txt')!r}

        class ModelNew(nn.Module):
            def forward(self, x):
    """) + textwrap.indent(body, " " * 8) + "\n        return torch.relu(x)\n")
    return problem, cand


def test_violating_candidates_are_stopped_and_each_is_reported(tmp_path):
    tries = "".join(f"try:\n    {code}\nexcept OSError:\n    pass  # the candidate hides the denial\n"
                    for _kind, code, _words in VIOLATIONS)
    problem, cand = _files(tmp_path, tries)
    v = run_check_isolated(problem, cand, "kernelbench", device="cpu", timeout_s=60).verdict
    assert v.status is Status.ERROR, v.message
    assert v.message.startswith("the candidate tried to write") and "denied by the sandbox" in v.message, v.message
    found = v.details["sandbox"]["violations"]
    assert [f["kind"] for f in found] == [k for k, _c, _w in VIOLATIONS], found
    for f, (_kind, _code, words) in zip(found, VIOLATIONS):
        assert all(w in f["message"] for w in words) and "denied by the sandbox" in f["message"], f
    assert not (tmp_path / "escaped.txt").exists()
    assert any(line.startswith("seccomp: ") and ("not applied" in line) != HAS_SECCOMP
               for line in v.details["sandbox"]["enforced"])


def test_the_kernel_denies_what_bypasses_python(tmp_path):
    """Landlock, not the audit hook, stops a write made through libc directly."""
    body = ("fd = ctypes.CDLL(None, use_errno=True).open(OUTSIDE.encode(), os.O_WRONLY | os.O_CREAT, 0o644)\n"
            "if fd < 0: raise OSError(ctypes.get_errno(), 'libc open refused')")
    problem, cand = _files(tmp_path, body)
    v = run_check_isolated(problem, cand, "kernelbench", device="cpu", timeout_s=60).verdict
    assert v.status is Status.ERROR and "[Errno 13] libc open refused" in v.message, v.message
    assert "probably denied by the sandbox" in v.message and v.details["sandbox"]["enforced"]
    assert not (tmp_path / "escaped.txt").exists()


def test_a_fork_bomb_is_stopped_and_reported_and_the_checker_survives(tmp_path):
    """A spawned shell's fork bomb: no Python hook sees its forks; the pids bound (cgroup or watchdog) does."""
    name = f"kabomb{os.getpid()}"  # this run's own, so pgrep below sees no other run's processes
    problem, cand = _files(tmp_path, f"subprocess.run(['sh', '-c', '{name}() {{ {name} | {name} & }}; {name}'])")
    result = run_check_isolated(problem, cand, "kernelbench", device="cpu", timeout_s=60)
    v = result.verdict
    assert v.status is Status.ERROR and v.message.startswith("the candidate forked without bound"), v.message
    assert "bound by the " in v.message and ("pids cgroup" in v.message or "watchdog" in v.message), v.message
    assert result.seconds < 30, result.seconds  # stopped at the bound, long before the 60 s deadline
    left = subprocess.run(["pgrep", "-f", name], capture_output=True, text=True)
    assert left.returncode == 1 and not left.stdout, f"fork bomb processes left alive: {left}"  # 1: none found


def test_a_well_behaved_candidate_is_ok_under_the_sandbox(tmp_path):
    """Scratch files, threads, an AF_UNIX socket pair and a spawned program are all allowed."""
    body = ("import tempfile, threading; tempfile.TemporaryFile().write(b'scratch is fine')\n"
            "t = threading.Thread(target=torch.randn, args=(3,)); t.start(); t.join()\n"
            "a, b = socket.socketpair(); a.close(); b.close()\n"
            "subprocess.run(['true'], check=True)")
    problem, cand = _files(tmp_path, body)
    result = run_check_isolated(problem, cand, "kernelbench", device="cpu", timeout_s=60)
    assert result.verdict.ok, result.verdict.message


@pytest.mark.skipif(not HAS_SECCOMP, reason=seccomp.available() or "seccomp available")
def test_the_seccomp_filter_denies_each_call_and_allows_what_python_needs():
    """In a bare interpreter (no torch: fast): each denied call answers EPERM, the rest works."""
    code = textwrap.dedent("""
        import ctypes, errno, json, os, socket, subprocess, threading
        from kernelaudit.zoo.sandbox import seccomp
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        line = seccomp.install()
        def err(r):
            return ctypes.get_errno() if r == -1 else 0
        got = {
            "socket AF_INET": err(libc.socket(socket.AF_INET, socket.SOCK_STREAM, 0)),
            "socket AF_INET6": err(libc.socket(socket.AF_INET6, socket.SOCK_DGRAM, 0)),
            "socket AF_NETLINK": err(libc.socket(16, socket.SOCK_RAW, 0)),
            "ptrace": err(libc.syscall(101, 16, os.getppid(), 0, 0)),      # PTRACE_ATTACH
            "process_vm_readv": err(libc.syscall(310, os.getppid(), 0, 0, 0, 0, 0)),
            "unshare": err(libc.unshare(0x40000000)),                      # CLONE_NEWNET
            "setns": err(libc.setns(0, 0)),
            "mount": err(libc.mount(b"none", b"/mnt", b"tmpfs", 0, None)),
            "bpf": err(libc.syscall(321, 0, 0, 0)),
            "keyctl": err(libc.syscall(250, 0, 0, 0, 0, 0)),
            "personality": err(libc.personality(ctypes.c_ulong(0x0040000))),             # ADDR_NO_RANDOMIZE
            "io_uring_setup": err(libc.syscall(425, 1, 0)),
        }
        a, b = socket.socketpair(); a.close(); b.close()
        t = threading.Thread(target=sum, args=([1],)); t.start(); t.join()
        ok = subprocess.run(["true"]).returncode == 0 and libc.personality(ctypes.c_ulong(0xFFFFFFFF)) != -1
        print(json.dumps({"line": line, "errno": got, "ok": ok}))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    assert r["line"].startswith("seccomp: ") and "denied" in r["line"], r["line"]
    assert r["errno"] == {k: 1 for k in r["errno"]}, r["errno"]  # 1 = EPERM, every one
    assert r["ok"]


def test_no_sandbox_opts_out(tmp_path):
    problem, cand = _files(tmp_path, "open(SECRET).read()")
    r = CliRunner().invoke(check_command, [str(problem), str(cand), "--device", "cpu", "--no-sandbox", "--json"])
    assert r.exit_code == 0 and '"status": "ok"' in r.output, r.output


def test_the_policy_allows_the_problem_the_candidate_and_the_scratch_only(tmp_path):
    problem, cand = _files(tmp_path, "pass")
    policy = sandbox.Sandbox.for_check(problem, cand, tmp_path / "scratch")
    assert policy.may_read(str(problem)) and policy.may_read(str(cand)) and policy.may_read(textwrap.__file__)
    assert not policy.may_read(str(tmp_path / "secret.txt")) and not policy.may_read("/etc/shadow")
    assert policy.may_write(str(tmp_path / "scratch" / "x")) and not policy.may_write(str(tmp_path / "x"))
    assert not policy.may_write(str(cand)) and policy.may_write("/dev/null")
    worker = sandbox.Sandbox.for_worker(problem, tmp_path / "scratch")
    assert worker.candidates == [str(tmp_path / "scratch")] and not worker.may_read(str(cand))


def test_the_policy_reads_the_absolute_pythonpath_directories_but_never_the_root(tmp_path, monkeypatch):
    problem, cand = _files(tmp_path, "pass")
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), "/", "relative/dir", ""]))
    policy = sandbox.Sandbox.for_check(problem, cand, tmp_path / "scratch")
    assert policy.may_read(str(site / "pkg-1.0.dist-info" / "entry_points.txt"))
    assert "/" not in policy.read_paths and not policy.may_read("/etc/shadow")
    assert not policy.may_read(str(tmp_path / "secret.txt"))


def test_the_policy_reads_the_small_shape_cache_but_may_not_write_it(tmp_path, monkeypatch):
    """A check in the box reads the checker's own small-shape cache instead of searching again."""
    problem, cand = _files(tmp_path, "pass")
    cache = tmp_path / "shapes"
    monkeypatch.setenv("KERNELAUDIT_SMALL_SHAPES_CACHE", str(cache))
    assert not sandbox.Sandbox.for_check(problem, cand, tmp_path / "scratch").may_read(str(cache / "a.json"))
    cache.mkdir()
    policy = sandbox.Sandbox.for_check(problem, cand, tmp_path / "scratch")
    assert policy.may_read(str(cache / "a.json")) and not policy.may_write(str(cache / "a.json"))
    assert not policy.may_read(str(tmp_path / "secret.txt"))


def test_the_policy_reads_the_prefix_of_the_compiler_on_path(tmp_path, monkeypatch):
    """Triton builds its launcher with the C compiler it finds on PATH (/opt/gcc/bin/gcc on the H200
    machine): its prefix, libexec included, must be readable, and nothing beside it."""
    problem, cand = _files(tmp_path, "pass")
    gcc = tmp_path / "opt" / "gcc" / "bin" / "gcc"
    gcc.parent.mkdir(parents=True)
    gcc.write_text("#!/bin/sh\n")
    gcc.chmod(0o755)
    monkeypatch.setenv("PATH", f"{gcc.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CC", raising=False)
    policy = sandbox.Sandbox.for_check(problem, cand, tmp_path / "scratch")
    assert policy.may_read(str(gcc)) and policy.may_read(str(tmp_path / "opt/gcc/libexec/gcc/cc1"))
    assert not policy.may_read(str(tmp_path / "opt" / "other")) and not policy.may_read(str(tmp_path / "secret.txt"))


def test_the_process_rlimit_leaves_room_above_the_task_bound(tmp_path):
    """Where the kernel enforces RLIMIT_NPROC for root, a limit below the parent's task bound
    would cap a fork bomb silently and blame the candidate's next fork on the candidate."""
    import resource

    problem, cand = _files(tmp_path, "pass")
    policy = sandbox.Sandbox.for_check(problem, cand, tmp_path / "scratch")
    # The user's thread count is read where set_limits reads it: other processes (pytest-xdist
    # workers, their thread pools) start and end threads between any two reads, so a count
    # taken just before the call can exceed the one the limit was set from by hundreds.
    code = ("import json, resource, sys\nfrom kernelaudit.zoo import sandbox\n"
            "from kernelaudit.zoo.sandbox import kernel\n"
            "p = sandbox.Sandbox.from_json(json.loads(sys.argv[1]))\n"
            "seen = []\ncount = kernel._threads_of_user\n"
            "kernel._threads_of_user = lambda: seen.append(count()) or seen[-1]\nkernel.set_limits(p)\n"
            "print(seen[-1], resource.getrlimit(resource.RLIMIT_NPROC)[0])")
    out = subprocess.run([sys.executable, "-c", code, json.dumps(policy.to_json())], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    threads, limit = map(int, out.stdout.split())
    assert threads >= 1, threads   # this process's own thread, at least
    hard = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    want = threads + policy.max_tasks
    assert limit >= min(want, hard) if hard != resource.RLIM_INFINITY else limit >= want, (threads, limit)


def test_the_cuda_policy_reads_the_driver_libraries_it_finds_mapped(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text("7f0-7f1 r-xp 00000000 08:01 12 /opt/drv/lib/libcuda.so.550.1\n"
                    "7f2-7f3 r--p 00000000 08:01 13 /usr/lib/x86_64-linux-gnu/libc.so.6\n7f4-7f5 rw-p 0 0:0 0\n")
    roots = sandbox.policy.cuda_read_roots(str(maps))
    assert "/opt/drv/lib" in roots and "/usr/local/nvidia" in roots
    assert "/usr/lib/x86_64-linux-gnu" not in roots  # not a CUDA library's directory


def test_only_the_cuda_policy_may_name_its_threads(tmp_path):
    """The CUDA driver's cuInit writes /proc/<pid>/task/<tid>/comm (denied: error 304): allowed on CUDA only,
    and only this process's own task directory."""
    problem, cand = _files(tmp_path, "pass")
    cpu, cuda = (sandbox.Sandbox.for_check(problem, cand, tmp_path / "scratch", device=d) for d in ("cpu", "cuda"))
    own = f"/proc/{os.getpid()}/task/{threading.get_native_id()}/comm"
    assert cuda.name_threads and not cpu.name_threads
    assert sandbox.Sandbox.from_json(json.loads(json.dumps(cuda.to_json()))).name_threads  # reaches the child
    assert cuda.may_write(own) and cuda.may_write("/proc/self/task/1/comm") and not cpu.may_write(own)
    assert not cuda.may_write(f"/proc/{os.getpid()}/comm") and not cuda.may_write("/proc/1/task/1/comm")
    assert cpu.memory_bytes and cuda.memory_bytes is None  # the rest of the limits as before


# A bare interpreter (no torch: fast) enters the sandbox, then tries writes through libc (no audit hook).
_PROC_WRITES = textwrap.dedent("""
    import ctypes, json, os, sys, threading
    from kernelaudit.zoo import sandbox
    libc = ctypes.CDLL(None, use_errno=True)
    def attempt(path, flags=os.O_WRONLY):
        fd = libc.open(path.encode(), flags, 0o644)
        if fd < 0:
            return ctypes.get_errno()
        libc.write(fd, b"kernelaudit", 11); libc.close(fd)
        return 0
    policy = sandbox.Sandbox.from_json(json.loads(sys.argv[1]))
    policy.device = "cpu"  # the CUDA policy's rules without require_cuda: no GPU here
    enforced = sandbox.apply(policy)
    pid, got = os.getpid(), {}
    def named_by_a_thread():  # what the driver does in cuInit
        got["own thread's comm"] = attempt(f"/proc/{pid}/task/{threading.get_native_id()}/comm")
    t = threading.Thread(target=named_by_a_thread); t.start(); t.join()
    got["own process's comm (outside task/)"] = attempt(f"/proc/{pid}/comm")
    got["own oom_score_adj"] = attempt(f"/proc/{pid}/oom_score_adj")
    got["parent's thread's comm"] = attempt(f"/proc/{os.getppid()}/task/{os.getppid()}/comm")
    got["a file outside the scratch dir"] = attempt(sys.argv[2], os.O_WRONLY | os.O_CREAT)
    print(json.dumps({"errno": got, "enforced": enforced}))
""")


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_the_kernel_lets_only_the_cuda_policy_name_its_own_threads(tmp_path, device):
    problem, cand = _files(tmp_path, "pass")
    policy = sandbox.Sandbox.for_check(problem, cand, tmp_path / "scratch", device=device)
    out = subprocess.run([sys.executable, "-c", _PROC_WRITES, json.dumps(policy.to_json()),
                          str(tmp_path / "escaped.txt")], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    named = r["errno"].pop("own thread's comm")
    assert named == (0 if device == "cuda" else errno.EACCES), r
    assert r["errno"] == {k: errno.EACCES for k in r["errno"]}, r  # everything else in /proc stays read-only
    assert not (tmp_path / "escaped.txt").exists()
    files = next(line for line in r["enforced"] if line.startswith("files: "))
    assert ("writable (the CUDA driver names its threads there)" in files) == (device == "cuda"), files


def test_a_kernel_without_landlock_is_refused_with_the_reason(tmp_path, monkeypatch):
    monkeypatch.setattr(sandbox, "landlock_abi", lambda: 0)
    with pytest.raises(sandbox.SandboxUnavailable, match="has no Landlock .*--no-sandbox"):
        sandbox.apply(sandbox.Sandbox.for_check(__file__, __file__, tmp_path / "scratch"))


def test_a_mutate_worker_runs_its_mutants_in_the_sandbox(tmp_path):
    """The campaign's worker enters the sandbox before the subject loads: reading a secret fails there."""
    problem, cand = _files(tmp_path, "pass")
    secret = str(tmp_path / "secret.txt")
    source = cand.read_text().replace("import torch\n", f"import torch\nopen({secret!r}).read()\n", 1)
    job = {"subject": {"id": "t/secret", "kind": "torch", "problem_path": str(problem), "source": source,
                       "scope": ["ModelNew"]}, "mutants": [], "columns": ["kernelbench"], "device": "cpu",
           "small": True, "timeout_s": 30.0, "check_clean": True, "scratch": str(tmp_path / "scratch")}
    r, w = os.pipe()
    out = subprocess.run([sys.executable, "-m", "kernelaudit.zoo.mutate.worker", "--events-fd", str(w)],
                         input=json.dumps(job), capture_output=True, text=True, timeout=60, pass_fds=(w,))
    os.close(w)
    with open(r) as events:
        records = [json.loads(line) for line in events]
    assert out.returncode == 0, out.stderr
    assert records and "kernelaudit sandbox: tried to read" in records[0].get("error", ""), records


@pytest.mark.parametrize("use_cgroup", [True, False], ids=["cgroup-if-any", "watchdog"])
def test_the_task_bound_stops_a_wide_tree_and_names_its_mechanism(tmp_path, use_cgroup):
    """200 sleeping children (finite, so a broken bound cannot hurt the machine) against a bound of 64."""
    bound = sandbox.TaskBound(64, use_cgroup=use_cgroup)
    nap = f"37.{os.getpid()}"  # this run's own duration, so pgrep below sees no other run's children
    script = f"{'echo $$ > ' + bound.cgroup + '/cgroup.procs; ' if bound.cgroup else ''}" \
             f"for i in $(seq 200); do sleep {nap} & done; wait"
    with bound:
        done = sandbox.run_bounded(["sh", "-c", script], env=dict(os.environ), timeout_s=15, out_dir=str(tmp_path),
                                   bound=bound)
    assert done.unbounded and not done.timed_out, done
    assert ("pids cgroup" if bound.cgroup else "watchdog") in done.unbounded, done.unbounded
    assert "past the bound of 64" in done.unbounded
    left = subprocess.run(["pgrep", "-f", f"^sleep {nap}$"], capture_output=True, text=True)
    assert left.returncode == 1 and not left.stdout, f"children left alive: {left}"  # 1: none found


@pytest.mark.parametrize("children", [0, 24])
def test_a_fork_refused_while_the_tree_holds_many_processes_is_a_fork_bomb(tmp_path, children):
    """A machine's process limit below the check's own bound (the H200 machine: root without
    CAP_SYS_RESOURCE) fails the candidate's next fork with EAGAIN: with more than max_processes
    processes alive that is the bomb; with none, the candidate's own error."""
    name = f"kasleep{os.getpid()}x{children}"
    script = f'for i in $(seq {children}); do bash -c "exec -a {name} sleep 20" & done; sleep 1'
    spawn = f"subprocess.run(['sh', '-c', {script!r}])\n" if children else ""
    problem, cand = _files(tmp_path, spawn + "raise BlockingIOError(11, 'Resource temporarily unavailable')")
    result = run_check_isolated(problem, cand, "kernelbench", device="cpu", timeout_s=60)
    v = result.verdict
    assert v.status is Status.ERROR, v.message
    if children:
        assert v.message.startswith("the candidate forked without bound: a fork was refused (EAGAIN) with "), v.message
        assert v.details["sandbox"]["violations"][0]["kind"] == "fork bomb"
        left = subprocess.run(["pgrep", "-f", name], capture_output=True, text=True)
        assert left.returncode == 1, f"processes left alive: {left.stdout}"
    else:
        assert "candidate raised BlockingIOError" in v.message, v.message
