"""The guard is light to import: no sweep, zoo or report code comes with it."""

from __future__ import annotations

import subprocess
import sys


def test_importing_and_installing_the_guard_loads_no_other_product():
    code = ("import sys, kernelaudit.guard as g; g.install('fix'); g.uninstall(); "
            "print(','.join(sorted(m for m in sys.modules if m.startswith('kernelaudit'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = out.stdout.strip().split(",")
    assert "kernelaudit.guard.intercept" in loaded
    assert not [m for m in loaded if m.startswith(("kernelaudit.sweep", "kernelaudit.zoo", "kernelaudit.conform",
                                                    "kernelaudit.repro"))], loaded


def test_a_product_whose_import_fails_is_reported_with_its_traceback(monkeypatch):
    """A broken import must not turn into click's "No such command"."""
    from click.testing import CliRunner

    from kernelaudit import cli

    monkeypatch.setitem(cli.PRODUCT_COMMANDS, "check", "kernelaudit.zoo.no_such_module")
    res = CliRunner().invoke(cli.main, ["check", "a", "b"])
    assert isinstance(res.exception, ModuleNotFoundError) and "no_such_module" in str(res.exception)
    assert "No such command" not in res.output


def test_every_registered_command_loads():
    from kernelaudit import cli

    import click

    for name in cli.PRODUCT_COMMANDS:
        assert isinstance(cli.main.get_command(None, name), click.Command), name
