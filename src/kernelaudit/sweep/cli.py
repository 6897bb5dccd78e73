"""The sweep's commands: ``kernelaudit sweep`` and ``kernelaudit report``.

Exit status (:mod:`kernelaudit.errors`): 0 nothing wrong or error, 1 something is, 2 bad
arguments (the message names the argument and the allowed values), 3 a run store that
cannot be read.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ..config import EXECUTOR, RAY_ADDRESS
from ..errors import EXIT_FOUND, EXIT_OK, EXIT_UNJUDGED, EXIT_USAGE, InvalidArgument
from ..thresholds import REAL_SCALE_BITS, Thresholds
from .cases import POSITIONS, GridSpec, parse_list
from .ops.catalog import ALL_OPS, QUICK_OPS
from .ops.spec import DIRECTIONS, DTYPES, FLOAT_DTYPES, LAYOUTS
from .axes import AXIS_NAMES
from .report.run import RunStoreError

#: Presets. ``quick``: the first covered op of every family (with a fault model: the
#: ops fault models corrupt, the matmul family plus one hand-specified op per other
#: family), fp32/fp16, around 2^31 and 2^32, the cases below each limit run only as
#: controls of the cases above it that were not ok (``--bracket``). ``full``: every op (the hand specs and every op derived from
#: the OpInfo database), fp32 and fp16, just below and above 2^31 and 2^32, every
#: layout, both directions and every size axis. ``deep``: the hand specs only, at every
#: dtype, threshold (2*2^32 too) and position (the sweeps of record before ``full``
#: took in the derived ops). ``case_timeout_s``: the preset's seconds per case by device
#: type (else :data:`~kernelaudit.sweep.worker.DEFAULT_CASE_TIMEOUT_S`): on the H200 every
#: quick case but interpolate's ran in under 7 s, and so did every case of the 13,434 of the
#: deep grid of record; a case 3x slower than that is a performance cliff, and costs one
#: timeout per op (:class:`~kernelaudit.sweep.timeouts.TimedOut`). ``slow_timeout_s``: the
#: preset's slow pass by device type (none elsewhere): the full grid's H100 and H200
#: segments of 2026-12-05 left 25 ops (linear algebra, conv1d/3d backward, layer_norm,
#: masked_select, cummax ...) with one case timed out at 20 s and every other case held
#: back; the slow pass judges them last, 6x as long a case.
PRESETS = {
    "quick": dict(ops=("family:each",), fault_model_ops=QUICK_OPS, dtypes=("float32", "float16"),
                  thresholds=("2^31", "2^32"),
                  positions=("below", "above"), axes=("elements",), bracket=True,
                  case_timeout_s={"cuda": 10.0}),
    "full": dict(ops=("all",), dtypes=("float32", "float16"), thresholds=("2^31", "2^32"),
                 positions=("below", "above"), axes=AXIS_NAMES, bracket=False,
                 case_timeout_s={"cuda": 20.0}, slow_timeout_s={"cuda": 120.0}),
    "deep": dict(ops=tuple(ALL_OPS), dtypes=(*FLOAT_DTYPES, "int32", "int64"),
                 thresholds=("2^31", "2^32", "2*2^32"), positions=POSITIONS, axes=AXIS_NAMES, bracket=False),
}

SWEEP_EXAMPLES = """
\b
Examples:
  # the README's demo: the MPS bug, reproduced on a CPU with small tensors
  kernelaudit sweep --device cpu --fault-model mps --scale 16 --quick --out runs/mps16
\b
  # the real thing on a GPU: every op just below and above 2^31 and 2^32, every size axis
  kernelaudit sweep --device cuda --full --out runs/h200
\b
  # every GPU of this host, one pinned worker each; or a Ray cluster's GPUs
  kernelaudit sweep --devices cuda:0,cuda:1,cuda:2,cuda:3 --full --out runs/x4
  kernelaudit sweep --executor ray --ray-address auto --full --out runs/cluster
\b
  # just bmm in fp16, transposed operands, forward only; continue after a crash
  kernelaudit sweep --ops bmm --dtypes float16 --layouts aT,bT --directions fwd --out runs/x --resume
"""


def _fail_usage(e: Exception) -> None:
    click.echo(f"error: {e}", err=True)
    sys.exit(EXIT_USAGE)


@click.command(epilog=SWEEP_EXAMPLES)
@click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda or mps.")
@click.option("--ops", default=None,
              help=f"Comma list of ops, family:NAME (every covered op of a family), family:each (the first "
                   f"covered op of every family) or all (the hand "
                   f"specs and every op derived from PyTorch's OpInfo database; default: the preset's "
                   f"hand specs). Hand specs: {', '.join(ALL_OPS)}; see --list-ops for the rest.")
@click.option("--dtypes", default=None, help=f"Comma list of dtypes. Known: {', '.join(DTYPES)}.")
@click.option("--layouts", default=None, help=f"Comma list of layouts. Known: {', '.join(LAYOUTS)}.")
@click.option("--directions", default=None, help="fwd, bwd or fwd,bwd (default).")
@click.option("--thresholds", default=None, help="Comma list of 2^31, 2^32, 2*2^32.")
@click.option("--positions", default=None, help="Comma list of below, at, above.")
@click.option("--bracket/--no-bracket", default=None,
              help="Run each case below a limit only where the same case above it was not ok, after "
                   "those (default: on with --quick, off with --full and --deep).")
@click.option("--axes", default=None,
              help=f"Comma list of size axes: {', '.join(AXIS_NAMES)} or all (default: elements; "
                   "--preset full: all). dim: one dimension crossing 65535/65536/2^31; bytes: storage "
                   "bytes crossing 2^31/2^32 (1-byte dtypes added); attn_batch: attention batch x heads "
                   "crossing 65535/65536. Each scales with --scale.")
@click.option("--fault-model", default="none", show_default=True,
              help="none, mps, mps-abort, wrap32, unwritten-tail (outputs past 2^32 unwritten), unwritten-head "
                   "(the first n - 2^31 + 4 elements of longer outputs unwritten), grid16 (rows past 65535 along "
                   "dim 0 unwritten), bytes32 (byte offsets wrap at 2^32) or hang (right answers 2.5 s late past "
                   "2^31 elements, to try case timeouts): a deliberately wrong backend wrapping the real kernels.")
@click.option("--scale", type=int, default=REAL_SCALE_BITS, show_default=True,
              help="Move every threshold down: 2^32 becomes 2^SCALE, 2^31 becomes 2^(SCALE-1).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="Run store directory (default: runs/<device>-<fault model>-s<scale>).")
@click.option("--resume", is_flag=True,
              help="Continue the run in --out, skipping recorded cases, but for those skipped for memory that "
                   "this device may hold (more memory, other allocator settings; never an allocation larger "
                   "than the device) and those timed out or held back that a longer --case-timeout outlasts.")
@click.option("--rerun", default=None,
              help="With --resume: judge again the recorded cases of these statuses (comma-separated: wrong, "
                   "error, skipped, ok), e.g. after the judge changed; with --ops, only those ops' cases.")
@click.option("--quick", "preset", flag_value="quick",
              help="Small grid (default): one op per family (with --fault-model: the ops it corrupts), "
                   "fp32/fp16, around 2^31 and 2^32, bracketed (see --bracket).")
@click.option("--full", "preset", flag_value="full",
              help="Every op (hand specs and OpInfo-derived), fp32 and fp16, below and above 2^31 and 2^32, "
                   "every layout, direction and size axis.")
@click.option("--deep", "preset", flag_value="deep",
              help="The hand specs at every dtype, layout, threshold (2*2^32 too), position and size axis.")
@click.option("--mode", default="auto", show_default=True,
              help="auto (Freivalds + spot checks for matmuls; a chunk with the bits of the op called on it "
                   "alone needs no reference), full (the reference everywhere) or sampled (auto on the chunks "
                   "at the limits, the first and last, and 4 at random, where every output is batched: faster, "
                   "blind to a fault confined between the limits).")
@click.option("--reference", "reference", default="device", show_default=True,
              help="Where the float64 reference runs: device (the one under test, in chunks far below "
                   "2^31 elements) or cpu (fully independent of the device's kernels, slower).")
@click.option("--case-timeout", type=float, default=None,
              help="Seconds per case (default: the preset's on CUDA: quick 10, full 20; else 600). A case "
                   "that times out is paid once: its op's cases from half its size up are not run (--resume with a "
                   "longer --case-timeout runs them and the case again); its far smaller ones run.")
@click.option("--slow-timeout", type=float, default=None,
              help="Seconds per case of a slow pass after the others: the cases that timed out and those "
                   "their timeouts held back, each op's from the smallest, the ops in turns (default: the "
                   "preset's on CUDA: full 120; else 0, no slow pass).")
@click.option("--memory-limit-gib", type=float, default=None, help="Cap on device memory a case may plan for.")
@click.option("--memory-plan", default="strict", show_default=True,
              help="strict (skip a case whose pessimistic estimate exceeds the memory available) or try (run it "
                   "where its tensors and their gradients fit; an allocation that fails is a skip for memory). "
                   "With --resume, try also runs the cases the strict plan skipped.")
@click.option("--no-report", is_flag=True, help="Do not write the PNG/HTML reports at the end.")
@click.option("--calibration-workers", type=int, default=None,
              help="Worker processes that calibrate tolerances side by side (default: 4 on CUDA, else 1).")
@click.option("--workers", "case_workers", type=int, default=None,
              help="Worker processes that run cases side by side, each in 1/N of the device's memory "
                   "(default: 1); bigger cases, and any skipped or error side by side, "
                   "then run alone.")
@click.option("--devices", default=None,
              help="Spread the sweep over these devices, one pinned worker each: cuda:0,cuda:1,... (or cpu:0,cpu:1 "
                   "stand-ins); with --executor ray, how many workers of which type (default: every GPU).")
@click.option("--executor", default=None,
              help="local (this host's --devices) or ray (an existing Ray cluster, else a local one); "
                   "default: $KERNELAUDIT_EXECUTOR, else local.")
@click.option("--ray-address", default=None,
              help="With --executor ray: auto (this node's cluster), ray://HOST:10001, or empty for a local Ray "
                   "(default: $KERNELAUDIT_RAY_ADDRESS).")
@click.option("--expect-rules", is_flag=True,
              help="With a fault model: exit 0 only if every case is classified exactly as the model's "
                   "rules predict (wrong where they corrupt, error where they raise, ok elsewhere).")
@click.option("--list-ops", is_flag=True,
              help="Print the ops covered (forward, backward) and those not covered, with why, per family; "
                   "run nothing.")
@click.option("--family", default=None, help="With --list-ops: only this family.")
@click.option("--json", "as_json", is_flag=True, help="With --list-ops: JSON instead of tables.")
def sweep(device, ops, dtypes, layouts, directions, thresholds, positions, bracket, axes, fault_model, scale, seed, out,
          resume, rerun, preset, mode, reference, case_timeout, slow_timeout, memory_limit_gib, memory_plan, no_report,
          calibration_workers, case_workers, devices, executor, ray_address, expect_rules, list_ops, family, as_json):
    """Run ops around 2^31 / 2^32 / 2*2^32 elements and map where they go wrong."""
    from .schedule import RERUN_STATUSES, run_sweep

    if list_ops:
        _list_ops(family, as_json)
        sys.exit(EXIT_OK)
    preset = PRESETS[preset or "quick"]
    try:
        Thresholds(scale)
        from .ops.coverage import select

        dropped: dict[str, str] = {}
        chosen = parse_list(positions, preset["positions"], POSITIONS)
        if bracket is None:  # the preset's, where the positions leave something to bracket
            bracket = preset["bracket"] and "below" in chosen and len(set(chosen)) > 1
        spec = GridSpec(
            ops=select(parse_list(ops, default_ops(preset, fault_model), ("all",)), device=_device_kind(device),
                       dropped=dropped),
            dtypes=parse_list(dtypes, preset["dtypes"], tuple(DTYPES)),
            layouts=parse_list(layouts, LAYOUTS),
            directions=parse_list(directions, DIRECTIONS),
            thresholds=parse_list(thresholds, preset["thresholds"], ("2^31", "2^32", "2*2^32")),
            positions=chosen,
            seed=seed, scale=scale, axes=parse_list(axes, preset["axes"], AXIS_NAMES),
            bracket=bracket,
        ).validate()
        for name, why in dropped.items():
            click.echo(f"not run here: {name} ({why})", err=True)
        out = out or Path("runs") / f"{device}-{fault_model}-s{scale}"
        if case_timeout is None:
            from .worker import DEFAULT_CASE_TIMEOUT_S

            case_timeout = preset.get("case_timeout_s", {}).get(_device_kind(device), DEFAULT_CASE_TIMEOUT_S)
        elif not case_timeout > 0:
            raise InvalidArgument(f"Cannot have --case-timeout={case_timeout}: allowed are seconds > 0")
        if slow_timeout is None:
            slow_timeout = preset.get("slow_timeout_s", {}).get(_device_kind(device), 0.0)
        elif slow_timeout < 0:
            raise InvalidArgument(f"Cannot have --slow-timeout={slow_timeout}: allowed are seconds > 0, or 0 (none)")
        limit = int(memory_limit_gib * 2**30) if memory_limit_gib else None
        rerun = parse_list(rerun, (), RERUN_STATUSES) if rerun else ()
        if rerun and not resume:
            raise InvalidArgument(f"Cannot have --rerun={','.join(rerun)} without --resume: it judges again the "
                                  "cases a run store recorded")
        executor = executor or EXECUTOR.get()
        with _Progress() as prog:
            res = run_sweep(spec, out, device=device, fault_model=fault_model, resume=resume, rerun=rerun,
                            case_timeout_s=case_timeout, slow_timeout_s=slow_timeout, memory_limit=limit,
                            memory_plan=memory_plan, mode=mode, reference=reference,
                            progress=prog.tick, calibration_workers=calibration_workers,
                            case_workers=case_workers, devices=devices, executor=executor,
                            ray_address=ray_address or (RAY_ADDRESS.get() if executor == "ray" else "") or None)
    except InvalidArgument as e:
        _fail_usage(e)
    except KeyboardInterrupt:
        click.echo(f"\ninterrupted: every verdict so far is in {out}; continue with --resume", err=True)
        _write_rules_after_interrupt(out)
        sys.exit(130)
    _summarise(res.store.path, write=not no_report)
    click.echo(f"run store: {res.store.path} ({res.ran} cases run, {res.resumed} resumed)")
    if expect_rules:
        if fault_model == "none":
            _fail_usage(InvalidArgument("Cannot have --expect-rules with fault_model='none': "
                                        "allowed fault models are mps, mps-abort, wrap32"))
        from .schedule import check_against_rules

        checked, bad = check_against_rules(res.store, fault_model)
        for line in bad:
            click.echo(f"MISMATCH {line}")
        click.echo(f"{checked - len(bad)} of {checked} cases classified exactly as the {fault_model} rules predict")
        sys.exit(EXIT_FOUND if bad else EXIT_OK)
    sys.exit(EXIT_FOUND if res.failed else EXIT_OK)


def default_ops(preset: dict, fault_model: str) -> tuple[str, ...]:
    """The ops a preset sweeps when ``--ops`` is not given: under a fault model, the ops
    it is written for where the preset says so (``fault_model_ops``)."""
    return tuple(preset.get("fault_model_ops", preset["ops"]) if fault_model != "none" else preset["ops"])


def _device_kind(device: str) -> str | None:
    """The device type the ops will run on (``auto`` resolved), or None if unknown."""
    try:
        from ..errors import resolve_device

        return resolve_device(device).split(":")[0]
    except Exception:
        return None


def _list_ops(family: str | None, as_json: bool) -> None:
    """``--list-ops``: every op's coverage per family (``--family``), as tables or JSON."""
    import json

    from .ops.coverage import as_json as coverage_json, render, rows
    from .ops.families import FAMILIES

    if family is not None and family not in FAMILIES:
        _fail_usage(InvalidArgument(f"Cannot have --family={family!r}: allowed values are {', '.join(FAMILIES)}"))
    rs, note = rows()
    if family is not None:
        rs = [r for r in rs if r.family == family]
    if as_json:
        click.echo(json.dumps(coverage_json(rs, note), indent=1))
    else:
        render(rs, note)


@click.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--no-files", is_flag=True, help="Only print the summary; write no PNG, HTML or rules.")
def report(run_dir, no_files):
    """Rebuild the summary, boundary map, HTML report and guard rules from a run store."""
    from .store import RunStore

    try:
        RunStore.open(run_dir)
    except InvalidArgument as e:
        _fail_usage(e)
    try:
        failed = _summarise(run_dir, write=not no_files)
    except RunStoreError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(EXIT_UNJUDGED)
    if not no_files:
        from .rules_out import rules_line, write_rules

        click.echo(f"rules: {rules_line(write_rules(RunStore.open(run_dir)))}")
    sys.exit(EXIT_FOUND if failed else EXIT_OK)


def _write_rules_after_interrupt(out) -> None:
    """The findings so far as guard rules (an interrupted sweep skips the end that writes
    them); a second interrupt, or a failure, leaves them to ``kernelaudit report``."""
    from .rules_out import write_rules
    from .store import RunStore

    try:
        path = write_rules(RunStore.open(out))
    except (KeyboardInterrupt, Exception) as e:  # the verdicts are safe; the rules can wait
        click.echo(f"rules not written ({type(e).__name__}): `kernelaudit report {out}` writes them", err=True)
    else:
        click.echo(f"rules of the findings so far: {path}", err=True)


def _summarise(run_dir: Path, write: bool) -> bool:
    """Print the summary (and write the reports); True when something is wrong or error."""
    from .report import load_run, print_summary, write_reports

    run = load_run(run_dir)
    print_summary(run)
    if write:
        paths = write_reports(run_dir)
        for name, p in paths.items():
            click.echo(f"{name}: {p}")
    return any(r.verdict.status.value in ("wrong", "error") for r in run.records)


class _Progress:
    """A rich progress bar with ETA, fed by the sweep's ``tick`` callback."""

    def __enter__(self):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, \
            TimeRemainingColumn

        self.p = Progress(TextColumn("{task.description:<48.48}"), BarColumn(), MofNCompleteColumn(),
                          TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
                          TextColumn("{task.fields[found]}"), transient=False)
        self.p.__enter__()
        self.task = None
        self.found = {"wrong": 0, "error": 0, "skipped": 0}
        return self

    def tick(self, total=None, advance=0, description="", status=None):
        if self.task is None:
            self.task = self.p.add_task(description, total=total, found="")
        if status in self.found:
            self.found[status] += 1
        found = " ".join(f"{k}={v}" for k, v in self.found.items() if v)
        self.p.update(self.task, advance=advance, description=description, found=found)

    def __exit__(self, *exc):
        self.p.__exit__(*exc)


COMMANDS = {"sweep": sweep, "report": report}
