"""Which code produced a result: the checkout's commit and a digest of the sources that ran.

A result folder names a commit, but the tree that ran can differ from it: a device
machine may keep a stale ``.git`` beside a fresh copy of the files (the 2026-12-05 H200
sweep store named a commit from an hour before the code it ran), or the tree may be
edited. :func:`git_sha` marks a tree that differs from its commit (``+dirty``);
:func:`source_digest` names the package's own files by content, whatever git says, so
two results with the same digest ran the same kernelaudit code.
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

#: The package directory: what :func:`source_digest` reads by default.
PACKAGE_DIR = Path(__file__).parent


def git_sha(cwd: Path | None = None) -> str | None:
    """The checkout's HEAD commit, with ``+dirty`` when tracked files differ from it (a
    copied or edited tree: the commit alone would name code that did not run). None
    outside a git checkout or without git."""
    cwd = cwd or PACKAGE_DIR
    try:
        out = subprocess.run(["git", "rev-parse", "--verify", "-q", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=cwd)
        sha = out.stdout.strip()
        if not sha:
            return None
        st = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True,
                            timeout=10, cwd=cwd)
        return sha + ("+dirty" if st.returncode == 0 and st.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def source_digest(root: Path | None = None) -> str:
    """The first 16 hex digits of a SHA-256 over every ``.py`` and ``.json`` file under
    ``root`` (default: the package), each as its relative path and its bytes, in path
    order: the same files give the same digest on any machine."""
    root = Path(root or PACKAGE_DIR)
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.suffix in (".py", ".json") and p.is_file()
                       and "__pycache__" not in p.parts):
        rel = path.relative_to(root).as_posix().encode()
        h.update(len(rel).to_bytes(4, "little") + rel)
        data = path.read_bytes()
        h.update(len(data).to_bytes(8, "little") + data)
    return h.hexdigest()[:16]
