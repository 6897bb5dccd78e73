"""The terminal summary of a run, with rich.

In order: what ran (device, versions, fault model, scale, progress), the counts per
status overall and per op, where the time went and the performance cliffs (:mod:`.cliffs`),
the cases waiting on a longer timeout (:mod:`.waiting`), skip reasons and error messages
grouped, then every ``wrong`` and ``error`` case with its evidence, one table per op so a
thousand cases stay readable.
"""

from __future__ import annotations

from rich.console import Console, Group
from rich.padding import Padding
from rich.panel import Panel as RichPanel
from rich.table import Table
from rich.text import Text

from ...verdict import Status
from .cliffs import CAPTION, COLUMNS, Cliff, cliffs
from .counts import (PHASES, STATUS_ORDER, by_op, count, counts_per_op, plain_repro, progress_text, reasons,
                     time_per_op, wall_text)
from .run import CaseRecord, Run
from .waiting import CAPTION as WAITING_CAPTION, COLUMNS as WAITING_COLUMNS, Waiting, total_line, waiting

#: The narrowest terminal the summary prints plain-torch code in: its lines are not
#: wrapped (to be copied whole), and a narrower one gets a pointer to the HTML report.
CODE_MIN_WIDTH = 100

STATUS_STYLES: dict[Status, str] = {
    Status.OK: "green",
    Status.WRONG: "bold red",
    Status.ERROR: "dark_orange",
    Status.SKIPPED: "dim",
}


def print_summary(run: Run, console: Console | None = None) -> None:
    """Print the run's summary to ``console`` (a new stdout console by default)."""
    console = console or Console()
    console.print(_header(run))
    for note in run.notes:
        console.print(f"[yellow]note:[/] {note}")
    console.print(_counts_table(run))
    if any(r.elapsed_s for r in run.records):
        console.print(_time_table(run))
    steep = cliffs(run)
    if steep:
        console.print(_cliffs_table(steep))
    slow = waiting(run)
    if slow:
        console.print(_waiting_table(slow))
    for status in (Status.SKIPPED, Status.ERROR):
        grouped = reasons(run, status)
        if grouped:
            console.print(_reasons_table(status, grouped))
    bad = run.with_status(Status.WRONG, Status.ERROR)
    if not bad:
        console.print("[green]No wrong or error cases.[/]" if run.records else "[dim]Nothing recorded yet.[/]")
        return
    console.print(Text(f"Wrong and error cases ({len(bad)})", style="bold"))
    for op, records in by_op(bad).items():
        c = count(records)
        console.rule(f"{op}: {c[Status.WRONG]} wrong, {c[Status.ERROR]} error", align="left")
        # Wrong (silent) before error (loud): the silent ones are why this tool exists.
        for r in sorted(records, key=lambda r: r.status is not Status.WRONG):
            console.print(_case_lines(r, seed=run.several_seeds))
        code = plain_repro(records, run.manifest.device.type or "cuda")
        if code and console.width >= CODE_MIN_WIDTH:  # whole lines, never wrapped: the code is to be copied
            indented = "".join(f"      {line}\n" for line in ["plain torch, the first case:", *code.splitlines()])
            console.print(Text(indented.rstrip("\n"), style="dim"), soft_wrap=True)
        elif code:
            console.print(Padding(Text(f"plain torch code of the first case: in report.html (or a terminal "
                                       f"{CODE_MIN_WIDTH} columns wide)", style="dim"), (0, 0, 0, 6)))


def _case_lines(r: CaseRecord, *, seed: bool) -> Group:
    """Two lines per case: id, batch and shapes; then, indented, the verdict's explanation."""
    head = Text()
    head.append(f"{r.status.value:>5} ", style=STATUS_STYLES[r.status])
    head.append(r.label(seed=seed), style="bold")
    head.append(f"  B={'-' if r.batch is None else r.batch}", style="cyan")
    if r.shapes:
        head.append(f"  {r.shapes_text}", style="cyan")
    return Group(head, Padding(Text(r.verdict.explain()), (0, 0, 0, 6)))


def _header(run: Run) -> RichPanel:
    m = run.manifest
    scale = f"2^{m.scale_bits}" if m.scale_bits is not None else "?"
    facts = [
        ("device", str(m.device)),
        ("versions", f"torch {m.torch}, triton {m.triton or '-'}, kernelaudit {m.kernelaudit}"),
        ("fault model", f"{m.fault_model}; scale 2^32 -> {scale}"),
        ("started", m.started or "?"),
        *((k, str(m.raw[k])) for k in ("git", "mode") if m.raw.get(k)),
        ("progress", progress_text(run)),
        *((("wall time", w),) if (w := wall_text(run)) else ()),
    ]
    grid = Table.grid(padding=(0, 1))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    for k, v in facts:
        grid.add_row(k, v)
    return RichPanel(grid, title=f"kernelaudit run {run.path}", title_align="left")


#: With more ops than this, the per-op table lists the ops with any verdict but ok and
#: sums the others in one row (a full grid has hundreds of ops, most all ok).
COUNTS_TABLE_OPS = 40


def _counts_table(run: Run) -> Table:
    table = Table(title="Verdicts per op", title_justify="left")
    table.add_column("op")
    for s in STATUS_ORDER:
        table.add_column(s.value, justify="right", style=STATUS_STYLES[s])
    table.add_column("total", justify="right")
    per_op = counts_per_op(run)
    all_ok = {op: c for op, c in per_op.items() if c[Status.OK] == c.total} if len(per_op) > COUNTS_TABLE_OPS else {}
    for op, c in per_op.items():
        if op not in all_ok:
            table.add_row(op, *(_cell(c[s]) for s in STATUS_ORDER), str(c.total))
    if all_ok:
        n = sum(c.total for c in all_ok.values())
        table.add_row(Text(f"{len(all_ok)} more ops, every case ok", style="green"),
                      *(_cell(n if s is Status.OK else 0) for s in STATUS_ORDER), str(n))
    total = count(run.records)
    table.add_section()
    table.add_row(Text("all", style="bold"), *(_cell(total[s]) for s in STATUS_ORDER), str(total.total))
    return table


#: Ops listed in the time table (the rest are summed into one row).
TIME_TABLE_ROWS = 10


def _time_table(run: Run) -> Table:
    """Where the time went: seconds per op, split into the phases ``execute`` records."""
    rows = time_per_op(run)
    table = Table(title="Where the time went (seconds)", title_justify="left")
    for name in ("op", "cases", "total", *(p.removesuffix("_s") for p in PHASES), "slowest case"):
        table.add_column(name, justify="left" if name in ("op", "slowest case") else "right")
    for t in rows[:TIME_TABLE_ROWS]:
        table.add_row(t.op, str(t.cases), f"{t.total_s:.1f}", *(f"{t.phases_s[p]:.1f}" for p in PHASES),
                      f"{t.slowest_id} ({t.slowest_s:.2f})")
    rest = rows[TIME_TABLE_ROWS:]
    if rest:
        table.add_row(f"{len(rest)} more ops", str(sum(t.cases for t in rest)), f"{sum(t.total_s for t in rest):.1f}",
                      *(f"{sum(t.phases_s[p] for t in rest):.1f}" for p in PHASES), "")
    table.add_section()
    table.add_row(Text("all", style="bold"), str(sum(t.cases for t in rows)), f"{sum(t.total_s for t in rows):.1f}",
                  *(f"{sum(t.phases_s[p] for t in rows):.1f}" for p in PHASES), "")
    return table


def _cliffs_table(steep: list[Cliff]) -> Table:
    """The performance cliffs (:mod:`.cliffs`), steepest first."""
    table = Table(title=f"Performance cliffs ({CAPTION})", title_justify="left")
    for name in COLUMNS:
        table.add_column(name, justify="right" if name in ("s", "x per element") else "left")
    for c in steep:
        table.add_row(*c.row())
    return table


def _waiting_table(ops: list[Waiting]) -> Table:
    """The ops whose cases wait on a longer timeout (:mod:`.waiting`), most seconds first."""
    table = Table(title=f"Waiting on a longer timeout ({WAITING_CAPTION})", title_justify="left",
                  caption=total_line(ops), caption_justify="left")
    for name in WAITING_COLUMNS:
        table.add_column(name, justify="left" if name in ("op", "from case") else "right")
    for w in ops:
        table.add_row(*w.row())
    return table


def _reasons_table(status: Status, grouped: list[tuple[str, int]]) -> Table:
    title = {Status.SKIPPED: "Skipped, by reason", Status.ERROR: "Errors, by message"}[status]
    table = Table(title=title, title_justify="left")
    table.add_column("cases", justify="right")
    table.add_column("message (one example)", overflow="fold")
    for msg, n in grouped:
        table.add_row(str(n), msg)
    return table


def _cell(n: int) -> str:
    return str(n) if n else "[dim]0[/]"
