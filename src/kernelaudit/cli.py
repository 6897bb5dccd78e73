"""The ``kernelaudit`` command: a click group whose subcommands each product registers.

Each product's ``cli`` module holds a ``COMMANDS`` dict (name -> click command); this
group imports a product's module only when one of its commands is asked for (or for
``--help``), so ``kernelaudit run`` never loads the sweep. An import that fails is not
swallowed: it raises with its traceback, never a misleading "No such command".

Exit codes for every command (:mod:`kernelaudit.errors`): 0 ok, 1 found something
wrong, 2 bad arguments, 3 could not judge.
"""

from __future__ import annotations

import importlib

import click

#: Command name -> the module whose ``COMMANDS`` holds it, in the order ``--help`` lists them.
PRODUCT_COMMANDS = {
    "sweep": "kernelaudit.sweep.cli",
    "report": "kernelaudit.sweep.cli",
    "run": "kernelaudit.guard.cli",
    "rules": "kernelaudit.guard.cli",
    "check": "kernelaudit.zoo.cli",
    "oracle-table": "kernelaudit.zoo.cli",
    "mutate": "kernelaudit.zoo.cli",
    "suite": "kernelaudit.zoo.cli",
    "conform": "kernelaudit.conform.cli",
    "ulp": "kernelaudit.conform.cli",
    "repro": "kernelaudit.repro.cli",
}


class ProductGroup(click.Group):
    """A group that loads a product's commands on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(PRODUCT_COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        module = PRODUCT_COMMANDS.get(name)
        if module is None:
            return None
        return importlib.import_module(module).COMMANDS[name]


@click.group(cls=ProductGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="kernelaudit")
def main() -> None:
    """Find and stop silent wrong answers from GPU tensor kernels."""
