"""Commands of product 4: ``kernelaudit conform int8`` and ``kernelaudit ulp A B``.

Exit codes: 0 ok, 1 something found wrong, 2 bad arguments, 3 could not judge.
The lead registers :data:`COMMANDS` in the top-level ``kernelaudit`` group.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from kernelaudit.errors import EXIT_FOUND, EXIT_OK, EXIT_UNJUDGED, EXIT_USAGE, InvalidArgument, KernelAuditError


def _fail(err: Exception) -> None:
    click.echo(f"error: {err}", err=True)
    sys.exit(EXIT_USAGE if isinstance(err, InvalidArgument) else EXIT_UNJUDGED)


@click.group("conform")
def conform() -> None:
    """Conformance of quantized GEMMs, below one bf16 spacing."""


@conform.command("int8")
@click.option("--device", default=None, help="cpu (Triton interpreter) or cuda; default: cuda when present.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default="conform-int8",
              show_default=True, help="Folder for the JSON, text, HTML and figure.")
@click.option("--shapes", default=None,
              help="Comma list of MxNxK GEMM shapes for the suite (default: 32x48x64 on cpu; "
                   "100x200x320,256x384x1024 on cuda). Compile count does not grow with shapes.")
@click.option("--impl", "impls", default="torch,triton", show_default=True,
              help="Comma list of implementations under test: torch, triton, torchao (its own recipe only).")
def int8(device, out_dir, shapes, impls) -> None:
    """Run the W8A8 conformance campaign: false rejections, the blindness table of
    planted faults, power-of-two bit-identity and its accuracy cost."""
    import torch

    from kernelaudit.errors import check_choices

    from .campaign import run_int8, verdict
    from .conformance import IMPLEMENTATIONS, THIRD_PARTY
    from .report import text_report, write_report

    try:
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        if device.split(":")[0] not in ("cpu", "cuda"):
            raise InvalidArgument(f"Cannot have device={device!r}: allowed values are cpu, cuda")
        chosen = check_choices("impl", impls.split(","), IMPLEMENTATIONS + THIRD_PARTY)
        result = run_int8(device, shapes=parse_shapes(shapes), impls=tuple(chosen),
                          progress=lambda m: click.echo(m, err=True))
        paths = write_report(result, out_dir)
    except KernelAuditError as e:
        _fail(e)
    click.echo(text_report(result))
    click.echo("written: " + ", ".join(map(str, paths)))
    sys.exit(verdict(result))


def parse_shapes(text: str | None):
    """``"32x48x64,100x200x320"`` -> ``((32, 48, 64), (100, 200, 320))``; None stays None."""
    if text is None:
        return None
    try:
        shapes = tuple(tuple(int(v) for v in part.lower().split("x")) for part in text.split(","))
    except ValueError:
        shapes = ()
    if not shapes or any(len(s) != 3 or min(s) < 1 for s in shapes):
        raise InvalidArgument(f"Cannot have shapes={text!r}: allowed values are comma lists of MxNxK, "
                              "positive integers (e.g. 32x48x64,100x200x320)")
    return shapes


def load_tensor(path: str):
    """A tensor from a ``.pt`` (``torch.save``) or ``.npy`` file."""
    import numpy as np
    import torch

    p = Path(path)
    if p.suffix == ".npy":
        return torch.from_numpy(np.load(p))
    if p.suffix in (".pt", ".pth"):
        t = torch.load(p, map_location="cpu", weights_only=True)
        if not isinstance(t, torch.Tensor):
            raise InvalidArgument(f"Cannot read {path}: it holds a {type(t).__name__}, allowed is one tensor")
        return t
    raise InvalidArgument(f"Cannot read {path!r}: allowed file types are .pt, .pth, .npy")


@click.command("ulp")
@click.argument("got", type=click.Path(exists=True, dir_okay=False))
@click.argument("ref", type=click.Path(exists=True, dir_okay=False))
@click.option("--worst", default=5, show_default=True, help="How many worst elements to list.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None, help="Write a histogram PNG.")
@click.option("--max-ulp", default=0.0, show_default=True,
              help="Tolerance in ulps: exit 1 when any |error| exceeds it or the error is biased.")
def ulp(got, ref, worst, plot_path, max_ulp) -> None:
    """Signed ULP errors of tensor GOT against REF (.pt or .npy): histogram, sign test
    for bias, worst elements. Same dtype: exact ULP distances; a more precise REF:
    errors in ulps of GOT's format at REF."""
    from .ulp import compare_ulp, plot_ulp

    try:
        cmp = compare_ulp(load_tensor(got), load_tensor(ref), worst=worst)
        if plot_path:
            plot_ulp(cmp, plot_path)
    except KernelAuditError as e:
        _fail(e)
    click.echo(cmp.summary())
    bad = cmp.max_abs > max_ulp or cmp.nan_mismatch or not cmp.sign.centred
    sys.exit(EXIT_FOUND if bad else EXIT_OK)


COMMANDS = {"conform": conform, "ulp": ulp}
