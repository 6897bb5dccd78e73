"""Provenance: the commit a result names, and a digest of the code that actually ran."""

import pytest

from kernelaudit.provenance import git_sha, source_digest


def test_the_run_records_its_commit_and_marks_a_tree_that_differs_from_it(tmp_path):
    """A run store names the code that ran: the checkout's HEAD, with ``+dirty`` when a
    tracked file differs from it (a copied or edited tree), and nothing outside git."""
    import shutil
    import subprocess

    if shutil.which("git") is None:
        pytest.skip("needs git")
    repo = tmp_path / "repo"
    repo.mkdir()
    run = lambda *a: subprocess.run(["git", *a], cwd=repo, check=True, capture_output=True)  # noqa: E731
    run("init", "-q")
    (repo / "code.py").write_text("x = 1\n")
    run("add", "code.py")
    run("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    assert git_sha(repo) == sha
    (repo / "notes.txt").write_text("untracked files do not count\n")
    assert git_sha(repo) == sha
    (repo / "code.py").write_text("x = 2\n")
    assert git_sha(repo) == sha + "+dirty"
    outside = tmp_path / "outside"
    outside.mkdir()
    assert git_sha(outside) is None


def test_source_digest_names_files_by_content_not_by_where_or_when(tmp_path):
    """The same files give the same digest in another place; any byte changed, a file
    renamed or added changes it; caches are not code."""
    a, b = tmp_path / "a", tmp_path / "b"
    for root in (a, b):
        (root / "sub").mkdir(parents=True)
        (root / "m.py").write_text("x = 1\n")
        (root / "sub" / "rules.json").write_text("{}\n")
    assert source_digest(a) == source_digest(b)
    (b / "__pycache__").mkdir()
    (b / "__pycache__" / "m.cpython-311.py").write_text("cache")
    assert source_digest(a) == source_digest(b)
    (b / "m.py").write_text("x = 2\n")
    assert source_digest(a) != source_digest(b)
    (b / "m.py").write_text("x = 1\n")
    (b / "m.py").rename(b / "n.py")
    assert source_digest(a) != source_digest(b)
    (b / "n.py").rename(b / "m.py")
    (b / "extra.py").write_text("")
    assert source_digest(a) != source_digest(b)


def test_a_sweep_manifest_records_the_source_digest_of_the_package():
    from kernelaudit.sweep.store import environment

    env = environment()
    assert env["source"] == source_digest() and len(env["source"]) == 16
