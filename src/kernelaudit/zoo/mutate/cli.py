"""``kernelaudit mutate``: list the operators, count mutants, run a campaign, report on it."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from ...errors import EXIT_OK, EXIT_UNJUDGED, InvalidArgument


def _usage(fn):  # noqa: ANN001, ANN202
    def wrapped(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        try:
            return fn(*args, **kwargs)
        except InvalidArgument as exc:
            raise click.UsageError(str(exc)) from exc
    wrapped.__name__ = fn.__name__
    wrapped.__doc__ = fn.__doc__
    return wrapped


@click.group("mutate")
def mutate_group() -> None:
    """Mutation analysis of the oracles: realistic faults planted in correct kernels."""


@mutate_group.command("list-operators")
@click.option("--markdown", is_flag=True, help="Print the table as Markdown (docs/mutate.md).")
def list_operators(markdown: bool) -> None:
    """Every mutation operator: name, family, what it does and an example."""
    from .operators import operator_table

    rows = operator_table()
    if markdown:
        click.echo("| operator | family | what it does | before | after |\n|---|---|---|---|---|")
        for name, fam, desc, before, after in rows:
            click.echo(f"| `{name}` | {fam} | {desc} | `{before}` | `{after}` |")
        return
    from rich.console import Console
    from rich.table import Table

    t = Table("operator", "family", "what it does", "before", "after", title=f"{len(rows)} mutation operators")
    for r in rows:
        t.add_row(*r)
    Console(soft_wrap=False).print(t)


_SUBJECTS_HELP = "corpus, kb1, kb2, kb3, kb (= kb1 kb2), corpus/<problem> or kb/level<L>/<problem>"


@mutate_group.command("count")
@click.argument("subjects", nargs=-1, required=True)
@click.option("--kernelbench", type=click.Path(file_okay=False), default=None,
              help="KernelBench checkout (the directory holding level1, level2, level3).")
@click.option("--operators", default="all", show_default=True, help="Operators or families, comma separated.")
@_usage
def count_command(subjects, kernelbench, operators) -> None:
    """Count the mutants of SUBJECTS (""" + _SUBJECTS_HELP + """) by family."""
    from .generate import count_by, enumerate_mutants
    from .operators import get_operators
    from .subjects import select_subjects

    subs = select_subjects(list(subjects), kernelbench=Path(kernelbench) if kernelbench else None)
    ms = list(enumerate_mutants(subs, get_operators(operators)))
    problems = {s.problem_path.resolve() for s in subs}
    click.echo(f"{len(ms)} mutants of {len(subs)} subjects ({len(problems)} problems)")
    for fam, n in sorted(count_by(ms, "family").items(), key=lambda kv: -kv[1]):
        click.echo(f"  {fam:<12} {n}")


@mutate_group.command("run")
@click.argument("subjects", nargs=-1, required=True)
@click.option("--out", type=click.Path(file_okay=False), required=True, help="Campaign directory (the store).")
@click.option("--oracle", "oracles", default=None,
              help="Oracle columns, comma separated (kernelbench, kernelbench@1e-4, assert-close, ulp, bound, shapes, "
                   "values, tamper, static, strongest, fuzz-baseline, suite:FILE); default: all but suite:FILE.")
@click.option("--operators", default="all", show_default=True, help="Operators or families, comma separated.")
@click.option("--limit", type=int, default=None, help="Judge a seeded sample of this many mutants.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the --limit sample.")
@click.option("--jobs", type=int, default=None,
              help="Worker processes at a time (default: on the CPU one more than its cores, capped at 32; on CUDA 1; "
                   "with --executor ray 0).")
@click.option("--timeout", type=float, default=120.0, show_default=True, help="Seconds per mutant.")
@click.option("--batch", type=int, default=250, show_default=True,
              help="Mutants per worker process (a subject's setup is paid once per batch).")
@click.option("--device", type=click.Choice(("auto", "cpu", "cuda")), default="auto", show_default=True)
@click.option("--small/--full-shapes", default=True, show_default=True,
              help="The problems' small shapes (CPU, Triton interpreter) or their fixed shapes.")
@click.option("--kernelbench", type=click.Path(file_okay=False), default=None,
              help="KernelBench checkout (the directory holding level1, level2, level3).")
@click.option("--resume", is_flag=True, help="Continue the campaign in --out (skips recorded mutants).")
@click.option("--executor", type=click.Choice(("local", "ray")), default="local", show_default=True,
              help="local: --jobs worker processes here; ray: batches on a Ray cluster (--jobs workers, 0: one per "
                   "GPU or CPU of the cluster).")
@click.option("--ray-address", default=None, help="Ray cluster to join (auto, ray://host:10001); default: a local one.")
@click.option("--per-input/--no-per-input", default=True, show_default=True,
              help="Record which suite-candidate input kills each mutant (needed by `kernelaudit suite export`).")
@_usage
def run_command(subjects, out, oracles, operators, limit, seed, jobs, timeout, batch, device, small, kernelbench,
                resume, executor, ray_address, per_input) -> None:
    """Judge the mutants of SUBJECTS with every oracle; records go to --out as they are made.

    Exit 0 when the campaign ran (whatever it found), 2 on bad arguments, 3 when no
    subject could be judged.
    """
    from ...errors import resolve_device
    from .campaign import default_jobs, parse_columns, run_campaign
    from .operators import get_operators
    from .report import load, print_summary
    from .subjects import select_subjects

    columns = parse_columns(oracles)
    ops = get_operators(operators)
    subs = select_subjects(list(subjects), kernelbench=Path(kernelbench) if kernelbench else None)
    dev = resolve_device(device)
    if jobs is None:
        jobs = default_jobs(dev, executor)
    last = [0.0]

    def progress(rec, p) -> None:  # noqa: ANN001
        t = time.perf_counter()
        if rec["type"] == "mutant" and (t - last[0] > 5 or p.done == p.total):
            last[0] = t
            rate = p.done / max(t - p.started, 1e-9)
            click.echo(f"[{p.done}/{p.total}] {rate:.2f} mutants/s " +
                       " ".join(f"{k} {v}" for k, v in sorted(p.outcomes.items())), err=True)
        elif rec["type"] == "subject" and "error" in rec:
            click.echo(f"could not judge {rec['subject']}: {rec['error']}", err=True)

    start = time.perf_counter()
    p = run_campaign(subs, Path(out), columns=columns, operators=ops, device=dev, small=small, limit=limit,
                     seed=seed, jobs=jobs, timeout_s=timeout, batch=batch, resume=resume, executor=executor,
                     ray_address=ray_address, per_input=per_input, on_record=progress)
    click.echo(f"{p.done} mutants judged in {time.perf_counter() - start:.1f} s", err=True)
    manifest, _, s = load(Path(out))
    print_summary(manifest, s)
    sys.exit(EXIT_UNJUDGED if s.subjects and len(s.subject_errors) == s.subjects else EXIT_OK)


@mutate_group.command("report")
@click.argument("directory", type=click.Path(file_okay=False))
@_usage
def report_command(directory) -> None:
    """Summary, scores.json, kill_matrix.csv, heatmap.png and report.html of a campaign."""
    from .report import load, print_summary, write_report

    from .report import print_suites
    from .suites import summary as suite_summary

    manifest, records, s = load(Path(directory))
    print_summary(manifest, s)
    print_suites(suite_summary(records))
    for path in write_report(Path(directory)).values():
        click.echo(f"wrote {path}")
    sys.exit(EXIT_OK)


@click.group("suite")
def suite_group() -> None:
    """Minimal test suites chosen from a mutation campaign's per-input kill matrix."""


@suite_group.command("export")
@click.argument("run_dir", type=click.Path(file_okay=False))
@click.option("--out", type=click.Path(dir_okay=False), required=True, help="The suite file to write (JSON).")
@click.option("-k", "k", type=int, default=2, show_default=True, help="Inputs per problem, at most.")
@click.option("--method", type=click.Choice(("exact", "greedy")), default="exact", show_default=True,
              help="exact: the ILP (scipy) or every pair; greedy: set cover one input at a time.")
@_usage
def suite_export_command(run_dir, out, k, method) -> None:
    """Write per problem the at most K inputs of RUN_DIR that kill the most mutants, as a file
    ``kernelaudit check --oracle suite:FILE`` (or any harness) replays.

    Exit 0 when written, 2 on bad arguments, 3 when the campaign holds no per-input data.
    """
    from .store import CampaignStore
    from .suites import export_suites

    if k < 1:
        raise InvalidArgument(f"Cannot have -k {k}: allowed is a number of inputs >= 1")
    records = CampaignStore.open(Path(run_dir)).records()
    path, n = export_suites(records, Path(out), k=k, method=method, source=str(run_dir))
    if not n:
        click.echo(f"{run_dir} holds no per-input kill data (a campaign run before suites were recorded)", err=True)
        sys.exit(EXIT_UNJUDGED)
    click.echo(f"wrote {path}: suites of {n} problems (k={k}, {method})")
    sys.exit(EXIT_OK)


COMMANDS = {"mutate": mutate_group, "suite": suite_group}
