"""``kernelaudit repro``: check an op or a model for run-to-run, batch-size and
batch-position invariance, and say where the bits diverge and by how many ULPs.

    kernelaudit repro op --op linear --impl torch,ieee,mma --dtype bfloat16 -k 4096 -n 4096 --device cuda
    kernelaudit repro model kernelaudit.repro.tinylm:subject --impl torch,ieee --device cuda

Exit codes: 0 every subject invariant, 1 bits diverge somewhere, 2 bad arguments,
3 could not judge (the subject raised, or the device is missing).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys
from pathlib import Path

import click

from ..errors import EXIT_FOUND, EXIT_OK, EXIT_UNJUDGED, EXIT_USAGE, InvalidArgument, check_choices
from .subjects import DOTTED_HINT, DTYPES, IMPLS, OPS, check_op, describe, impl_context, op_subject


def _ints(name: str, text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise InvalidArgument(f"Cannot have {name}={text!r}: allowed values are comma-separated integers") from None
    if not values or min(values) < 1:
        raise InvalidArgument(f"Cannot have {name}={text!r}: allowed values are comma-separated integers >= 1")
    return values


def load_entry_point(spec: str):
    """``package.module:function`` or ``path/to/file.py:function``."""
    if ":" not in spec:
        raise InvalidArgument(f"Cannot have entry point {spec!r}: "
                              "allowed values are MODULE:FUNCTION or FILE.py:FUNCTION")
    mod_name, func = spec.rsplit(":", 1)
    if mod_name.endswith(".py"):
        path = Path(mod_name)
        s = importlib.util.spec_from_file_location(path.stem, path)
        if s is None or not path.exists():
            raise InvalidArgument(f"Cannot have entry point {spec!r}: no file {path}")
        module = importlib.util.module_from_spec(s)
        s.loader.exec_module(module)
    else:
        module = importlib.import_module(mod_name)
    if not hasattr(module, func):
        raise InvalidArgument(f"Cannot have entry point {spec!r}: {mod_name} has no {func}")
    return getattr(module, func)


def _device_ok(device: str) -> bool:
    import torch
    return not device.startswith("cuda") or torch.cuda.is_available()


def _finish(reports, json_path, figure_path, title, meta) -> int:
    from . import report as rep

    for r in reports:
        click.echo(rep.summary(r))
    if json_path:
        rep.write_json(reports, Path(json_path), **meta)
    if figure_path:
        rep.figure(reports, Path(figure_path), title)
    if any(r.judged and not r.invariant for r in reports):
        return EXIT_FOUND
    if not all(r.judged for r in reports):
        return EXIT_UNJUDGED
    return EXIT_OK


_common = [
    click.option("--impl", default="torch,ieee", show_default=True, help=f"comma list of {', '.join(IMPLS)}"),
    click.option("--device", default="cpu", show_default=True),
    click.option("--batch-sizes", default="1,2,4,8,16,32,64,128", show_default=True),
    click.option("--runs", default=3, show_default=True, type=int),
    click.option("--json", "json_path", default=None, help="write every probe as JSON here"),
    click.option("--figure", "figure_path", default=None, help="write a PNG: row 0's ULPs against M"),
]


def _with_common(f):
    for opt in reversed(_common):
        f = opt(f)
    return f


@contextlib.contextmanager
def _progress():
    """A transient progress line on stderr (only on a terminal): ``step(what, done, total)``."""
    from rich.console import Console
    from rich.progress import Progress

    console = Console(stderr=True)
    if not console.is_terminal:
        yield lambda *_: None
        return
    with Progress(console=console, transient=True) as bar:
        task = bar.add_task("probing", total=None)

        def step(what: str, done: int, total: int) -> None:
            bar.update(task, description=f"probing {what}", completed=done, total=total)
        yield step


def _run(make, impls, device, batch_sizes, runs, json_path, figure_path, title, meta) -> None:
    from .invariance import Report, check

    try:
        impls_ = check_choices("impl", impls.split(","), IMPLS)
        sizes = _ints("batch-sizes", batch_sizes)
        if runs < 1:
            raise InvalidArgument(f"Cannot have runs={runs}: allowed values are integers >= 1")
        if not _device_ok(device):
            reports = [Report(f"{title} [{i}]", device, "", error=f"no {device} device") for i in impls_]
        else:
            reports = []
            with _progress() as step:
                for impl in impls_:
                    fn, x = make(impl, max(sizes))
                    reports.append(check(fn, x, subject=f"{title} [{impl}]", batch_sizes=sizes, runs=runs,
                                         progress=lambda d, t, what, impl=impl: step(f"[{impl}] {what}", d, t)))
    except InvalidArgument as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(EXIT_USAGE)
    sys.exit(_finish(reports, json_path, figure_path, title, meta | {"device": device}))


@click.group("repro")
def repro() -> None:
    """Check ops and models for run-to-run, batch-size and batch-position invariance."""


@repro.command("op")
@click.option("--op", "op", default="linear", show_default=True,
              help=f"one of {', '.join(OPS)}, or {DOTTED_HINT}")
@click.option("--dtype", default="bfloat16", show_default=True, help=f"one of {', '.join(DTYPES)}")
@click.option("-k", "k", default=256, show_default=True, type=int, help="the size each sample reduces over")
@click.option("-n", "n", default=256, show_default=True, type=int,
              help="output columns (the GEMMs' weights are N x K); attention: tokens")
@click.option("--seed", default=0, show_default=True, type=int)
@_with_common
def op_cmd(op, dtype, k, n, seed, impl, device, batch_sizes, runs, json_path, figure_path) -> None:
    """One op on growing batches of samples: a GEMM with fixed weights (N x K), a softmax,
    norm, attention or row reduction, or any torch function by its dotted name
    (``kernelaudit.repro.subjects`` says what each gets)."""
    try:
        check_op(op)
    except InvalidArgument as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(EXIT_USAGE)

    def make(i, rows):
        return op_subject(op, i, dtype, k, n, rows, device, seed)
    _run(make, impl, device, batch_sizes, runs, json_path, figure_path, describe(op, dtype, k, n),
         {"op": op, "dtype": dtype, "k": k, "n": n})


@repro.command("model")
@click.argument("entry_point")
@_with_common
def model_cmd(entry_point, impl, device, batch_sizes, runs, json_path, figure_path) -> None:
    """A model: ENTRY_POINT (MODULE:FUNCTION or FILE.py:FUNCTION) is called as
    ``FUNCTION(device=..., rows=...)`` and returns ``(fn, x)``: x a batch of at least
    ``rows`` samples, fn(x) outputs with the same leading dim."""
    import torch

    try:
        factory = load_entry_point(entry_point)
    except InvalidArgument as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(EXIT_USAGE)

    def make(i, rows):
        fn, x = factory(device=device, rows=rows)

        def wrapped(t):
            with impl_context(i), torch.inference_mode():
                return fn(t)
        return wrapped, x
    _run(make, impl, device, batch_sizes, runs, json_path, figure_path, entry_point, {"entry_point": entry_point})


COMMANDS = {"repro": repro}
