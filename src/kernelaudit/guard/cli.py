"""``kernelaudit run``: run a whole program with the guard on; ``kernelaudit rules``: the
rules it would load, and which apply on this machine (or another).

::

    kernelaudit run -- python train.py --epochs 3
    kernelaudit run --guard raise -- python train.py
    # what-if: what would MPS's bug do to this program, and does the guard stop it?
    kernelaudit run --fault-model mps --scale 16 -- python examples/guard_demo.py
    kernelaudit run --guard off --fault-model mps --scale 16 -- python examples/guard_demo.py
    kernelaudit rules --active                       # what the guard screens in this process
    kernelaudit rules --device cuda --torch 2.11.0+cu130 --cuda 13.0 --driver 580.159.04 --op layer_norm

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


#: How a ``numel`` rule's ``tensor`` kind reads.
_TENSOR_WORDS = {"any": "a tensor of the call", "output": "an output", "operand": "an operand",
                 "view-operand": "a view operand", "contig-operand": "a contiguous operand"}


def predicate_text(when: dict) -> str:
    """A rule's size predicate in words: ``dim 0 >= 65521``, ``rows >= 2147483648``."""
    kind, n = when.get("kind"), when.get("at_least")
    rank = f" of a {when['ndim']}-d tensor" if "ndim" in when else ""
    text = {"numel": f"{_TENSOR_WORDS.get(when.get('tensor', 'any'), 'a tensor')} >= {n} elements",
            "attention-scores": f"attention scores >= {n}",
            "dim": f"dim {when.get('dim')}{rank} >= {n}",
            "bytes": f"storage >= {n} bytes",
            "norm-rows": f"rows >= {n} over 2+ normalized dims of < {when.get('below_normalized')} elements",
            "rows": f"rows >= {n}",
            "leading": f"dims before its {when.get('of')} >= {n} elements"}.get(kind, f"{kind}{' rule ' + when['rule'] if 'rule' in when else ''}")
    return text + (f" (its {when['inner_of']} not the last dim)" if "inner_of" in when else "")


@click.command("rules")
@click.option("--rules", "rules", multiple=True, type=click.Path(path_type=Path),
              help="A rule file to list with the shipped database (as `kernelaudit run --rules`). Repeatable.")
@click.option("--op", "op", default=None, help="Only rules whose op or aten entry point contains this text.")
@click.option("--active", "active_only", is_flag=True,
              help="Only the rules that apply: their device present and every version gate matched.")
@click.option("--device", "devices", multiple=True, type=click.Choice(["cpu", "cuda", "mps"]),
              help="Judge the gates for these devices instead of this process's (repeatable).")
@click.option("--torch", "torch_version", default=None, help="... and this torch version (e.g. 2.11.0+cu130).")
@click.option("--cuda", "cuda_version", default=None, help="... and this CUDA version (e.g. 13.0).")
@click.option("--driver", "driver_version", default=None,
              help="... and this NVIDIA driver (e.g. 580.159.04; else nvidia-smi's, where there is one).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object a rule, with `active`, instead of a table.")
def rules_command(rules, op, active_only, devices, torch_version, cuda_version, driver_version, as_json):
    """List the known-fault rules the guard loads and whether each applies here (or on
    the machine --device/--torch/--cuda/--driver describe): op, the aten entry points it
    screens, its size predicate, dtypes, action and version gates. Exit status 0, 2 for
    an unreadable rule file."""
    import json
    from dataclasses import replace

    from .rules import RuntimeEnv, active, gather

    try:
        found = gather(list(rules)) if rules else gather()
    except InvalidArgument as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(EXIT_USAGE)
    env = RuntimeEnv.current()
    env = replace(env, torch=torch_version or env.torch, cuda=cuda_version or env.cuda,
                  devices=tuple(devices) or env.devices, driver=driver_version)
    on = {id(r) for r in active(found, env)}
    shown = [r for r in found if (not op or op in r.op or any(op in a for a in r.aten))
             and (not active_only or id(r) in on)]
    if as_json:
        for r in shown:
            click.echo(json.dumps({**r.to_json(), "active": id(r) in on}))
        return
    from rich.console import Console
    from rich.table import Table

    where = f"torch {env.torch}, CUDA {env.cuda or '-'}, driver {env.version('driver') or '-'}, " \
            f"devices {', '.join(env.devices)}"
    if not shown:
        click.echo(f"no rule of {len(found)} {'applies' if active_only else 'matches'}"
                   f"{f' with {op!r} in its op or entry' if op else ''} ({where})")
        return
    table = Table(title=f"{len(shown)} of {len(found)} rules; {len(on)} apply ({where})", title_justify="left")
    for col in ("applies", "rule", "op", "screens", "when", "dtypes", "action", "gates"):
        table.add_column(col, overflow="fold")
    for r in shown:
        table.add_row("yes" if id(r) in on else "-", r.name, r.op, ", ".join(r.aten) or "(the engine)",
                      predicate_text(r.when), ", ".join(r.dtypes) or "all", r.action,
                      ", ".join(f"{k} {v}" for k, v in r.versions.items()) or "none")
    Console(width=200).print(table)


COMMANDS = {"run": run_command, "rules": rules_command}
