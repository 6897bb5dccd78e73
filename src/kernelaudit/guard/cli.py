"""``kernelaudit run``: run a whole program with the guard on.

::

    kernelaudit run -- python train.py --epochs 3
    kernelaudit run --guard raise -- python train.py
    # what-if: what would MPS's bug do to this program, and does the guard stop it?
    kernelaudit run --fault-model mps --scale 16 -- python examples/guard_demo.py
    kernelaudit run --guard off --fault-model mps --scale 16 -- python examples/guard_demo.py

The child gets ``KERNELAUDIT_GUARD`` (and ``KERNELAUDIT_FAULT_MODEL``/``KERNELAUDIT_SCALE``)
and a ``sitecustomize`` that installs the guard when it imports torch; at exit it
prints the guard's counters to stderr. The exit status is the program's.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import click

from ..errors import EXIT_USAGE, InvalidArgument, check_choice
from ..thresholds import REAL_SCALE_BITS, Thresholds
from ._boot import ENV_STATS, SITECUSTOMIZE
from .intercept import ENV_ACTION, ENV_FAULT_MODEL, ENV_SCALE
from .policy import ACTIONS



def write_bootstrap(folder: Path) -> Path:
    """Write the child's ``sitecustomize.py`` into ``folder``; returns the folder."""
    (folder / "sitecustomize.py").write_text(SITECUSTOMIZE)
    return folder


def child_env(action: str, fault_model: str, scale: int, bootstrap: Path, stats_json: Path | None = None,
              base: dict | None = None, rules: tuple = ()) -> dict:
    """The environment of a guarded child (``bootstrap``: the folder holding its
    sitecustomize; ``rules``: rule files, each checked here, loaded by the child)."""
    from ..config import GUARD_RULES
    from .rules import load_rules

    check_choice("guard", action, ACTIONS)
    Thresholds(scale)
    env = dict(os.environ if base is None else base)
    for r in rules:
        load_rules(r)  # a bad file is a usage error here, not a warning in the child
    if rules:
        env[GUARD_RULES.name] = os.pathsep.join(str(Path(r).resolve()) for r in rules)
    env[ENV_ACTION] = action
    env[ENV_FAULT_MODEL] = fault_model
    env[ENV_SCALE] = str(scale)
    if stats_json is not None:
        env[ENV_STATS] = str(stats_json)
    pp = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(bootstrap) + (os.pathsep + pp if pp else "")
    return env


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--guard", "action", default="fix", show_default=True,
              help="fix, raise, verify, warn or off (off with a fault model: count only).")
@click.option("--fault-model", default="none", show_default=True,
              help="none, mps, mps-abort or wrap32: run the program on a deliberately wrong backend (what-if).")
@click.option("--scale", type=int, default=REAL_SCALE_BITS, show_default=True,
              help="The fault model's 2^32 threshold becomes 2^SCALE.")
@click.option("--stats-json", type=click.Path(path_type=Path), default=None,
              help="Write the guard's counters to this JSON file at exit.")
@click.option("--rules", "rules", multiple=True, type=click.Path(path_type=Path),
              help="A rule file (JSON, e.g. a sweep's rules.json) to load on top of the known-fault database; "
                   "with --fault-model, the rules to enforce instead of the fault model's own. Repeatable.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED, required=True)
def run_command(action, fault_model, scale, stats_json, rules, command):
    """Run COMMAND (after --) with the guard installed in every Python process it starts."""
    with tempfile.TemporaryDirectory(prefix="kernelaudit-run-") as tmp:
        try:
            from ..faults import FAULT_MODELS

            check_choice("fault_model", fault_model, FAULT_MODELS)
            env = child_env(action, fault_model, scale, write_bootstrap(Path(tmp)), stats_json, rules=tuple(rules))
        except InvalidArgument as e:
            click.echo(f"error: {e}", err=True)
            sys.exit(EXIT_USAGE)
        try:
            rc = subprocess.call(list(command), env=env)
        except FileNotFoundError as e:
            click.echo(f"error: cannot run {command[0]!r}: {e}", err=True)
            rc = 127
    sys.exit(rc)


COMMANDS = {"run": run_command}
