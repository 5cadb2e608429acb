"""``traceconv``: a thin Typer app.  It parses arguments, calls the library, prints.

Exit codes (traceconv.errors): 0 done; 1 ``validate`` found problems; 2 a user error (one line
on stderr: bad arguments, an unreadable or malformed input, a bad output name); 3 the system
refused a file operation (one line: disk full, permission denied, read-only file system); 70 an
internal error (a bug: traceback); 128 + N stopped by signal N (130 Ctrl-C, 143 SIGTERM, 129
SIGHUP; 141 when the reader of standard output went away), temporary files removed.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import gc
import importlib.util
import os
import signal
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

import typer

import traceconv                                    # light: its API is imported when first used
from traceconv import formats as registry
from traceconv import progress, serve, viewers
from traceconv.errors import EXIT_BUG, EXIT_PROBLEMS, Stopped, clip, count, hold_signal, spell
from traceconv.io import output_label, refuse_binary_terminal, stream_fd
from traceconv_cli import lighthelp, one_blas_thread

if TYPE_CHECKING:
    from rich.console import Console, Group


def lazy_module(name: str):  # noqa: ANN201
    """``name``, imported when first used (``traceconv --help`` waits for no numpy or pydantic)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    spec.loader = importlib.util.LazyLoader(spec.loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


summ = lazy_module("traceconv.hotspots")
check = lazy_module("traceconv.validate")
# As traceconv.hotspots.GROUPINGS and SORTS (tests/test_cli.py checks they agree), here so that
# the help is written without importing the summary's numpy.
GROUPINGS = ("name", "category", "thread", "process", "rank")
SORTS = ("self", "total", "count", "avg")


@functools.cache
def console(stderr: bool = False) -> "Console":
    """The rich console of standard output (or error), made when a table or a progress bar is first
    drawn: a command that prints lines only (convert's "wrote ...") imports no rich (a first
    conversion of the example 0.57 -> 0.53 s, medians of 21 runs in a fresh venv)."""
    from rich.console import Console
    return Console(stderr=stderr, highlight=False)


def say(line: str, stderr: bool = False) -> None:
    """One line of text on standard output (or error), written as it is (rich's print would turn
    ``:warning:`` in a file's name into an emoji and tabs into spaces), flushed so that lines on the
    two streams keep their order."""
    stream = sys.stderr if stderr else sys.stdout
    stream.write(line + "\n")
    stream.flush()


def on_terminal() -> bool:
    """Whether standard error is a terminal, as rich judges it (which a progress bar needs): rich is
    asked only when an environment variable it reads could make a pipe one, or stderr is a tty."""
    if not any(k in os.environ for k in ("TTY_COMPATIBLE", "FORCE_COLOR")):
        with contextlib.suppress(ValueError, AttributeError):   # (a closed or replaced stream)
            if not sys.stderr.isatty():
                return False
    return console(stderr=True).is_terminal

EXAMPLES = """
[bold]Examples[/bold]

  traceconv convert results/ppo/run_logs/timers.json -o timers.pftrace
  traceconv convert timers.json -o timers.trace.json.gz
  traceconv merge traces/rank*.pt.trace.json.gz -o run.pftrace
  traceconv summary timers.json --by name --top 10
  traceconv validate rank0.pt.trace.json.gz  # what would hurt in a viewer
  traceconv open timers.json                # convert, serve once, open ui.perfetto.dev
  traceconv formats
"""

app = typer.Typer(
    name="traceconv",
    help="Convert ML profiler outputs into timelines for ui.perfetto.dev and chrome://tracing.\n\n"
         "(Not Perfetto's own traceconv binary, which converts out of Perfetto's format.)",
    epilog=EXAMPLES,
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="rich",
    context_settings={"help_option_names": ["-h", "--help"]},
    pretty_exceptions_show_locals=False,
)


def _help(doc: str) -> str:
    """A command's docstring as its ``--help`` shows it.  In rich markup mode (which the examples
    need) a help text keeps its line breaks, so the docstring's wrapped lines broke its sentences
    short on a terminal narrower than them: each paragraph becomes one line, which rich wraps to the
    terminal, and a paragraph of commands keeps a line per command."""
    paragraphs = [p.strip() for p in doc.split("\n\n") if p.strip()]
    return "\n\n".join("\n".join(line.strip() for line in p.splitlines()) if p.startswith("traceconv ")
                       else " ".join(p.split()) for p in paragraphs)


def command(name: Optional[str] = None, **kw: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``app.command``, its help the function's docstring as :func:`_help` lays it out."""
    def register(f: Callable[..., Any]) -> Callable[..., Any]:
        return app.command(name, help=_help(f.__doc__ or ""), **kw)(f)
    return register


TABLE_KEY_CHARS = 500    # of a name in summary's table (--format csv or json gives it whole)
# A table written to a file or a pipe (COLUMNS unset) is drawn this wide at most: at its natural
# width, one line a row that grep finds whole, where rich would fold it to 80 columns.  A table
# of sentences (validate's, merge's, formats') folds them at PROSE_WIDTH.
UNFOLDED = 4000
PROSE_WIDTH = 160
NAME_MIN = 20            # characters of summary's name column on a terminal, before it drops a column:
NARROW_DROPS = ("avg", "self %", "total")   # these, in turn (avg is total / count)


def unfolded(con: "Console") -> bool:
    """Whether ``con`` writes to a file or a pipe with no width asked for (COLUMNS unset)."""
    return not con.is_terminal and not os.environ.get("COLUMNS")


def name_room(columns: list[str], rows: list[dict], width: int) -> int:
    """The characters a table's first column has left at ``width`` once ``columns`` (headers and
    cells at their natural widths, each with rich's box line and padding) have theirs."""
    used = 1 + 3 + sum(3 + max([len(c)] + [len(str(r[c])) for r in rows]) for c in columns)
    return width - used


def show(table: Any, stderr: bool = False, width: int = UNFOLDED) -> None:
    """Print a table on standard output (or error): on a terminal (or at COLUMNS) folded to its
    width, else at its natural width up to ``width``."""
    from rich.console import Console
    con = console(stderr)
    if not unfolded(con):
        con.print(table)
        return
    wide = Console(width=width, highlight=False, color_system=None)
    title = caption = None
    if hasattr(table, "title"):
        # the title and the caption on lines of their own, where the lines start: drawn as the
        # table's, they were centred over its width (after ~230 spaces over a CUDA kernel's name)
        # and folded where the table was narrower than they are (the table's own put back after)
        title, caption = table.title, table.caption
        table.title = table.caption = None
    try:
        with wide.capture() as drawn:
            for p in (title, table, caption):
                if p is not None:
                    wide.print(p)
    finally:
        if hasattr(table, "title"):
            table.title, table.caption = title, caption
    # (rich pads a title to the width: no trailing spaces in a file)
    con.file.write("".join(line.rstrip() + "\n" for line in drawn.get().splitlines()))

ENGINE_HELP = ("Where the per-file work runs: local (this machine's process pool, the default) or dask "
               "(a Dask LocalCluster here, or the cluster of --scheduler; pip install 'traceconv\\[dask]').")
SCHEDULER_HELP = "A Dask scheduler's address (tcp://host:8786): run on that cluster (implies --engine dask)."


def engine_of(engine: Optional[str], scheduler: Optional[str]) -> str:
    return engine or ("dask" if scheduler else "local")

# The library's parameters as this command line spells them (messages name them as {opt:name}).
FLAGS = {"from_format": "--from", "to_format": "--to", "strict": "--strict", "ranks": "--ranks",
         "rank_map": "--rank", "window": "--window", "align_method": "--align", "port": "--port",
         "origin": "--origin", "engine": "--engine", "scheduler": "--scheduler", "drop_cat": "--drop-cat",
         "min_dur": "--min-dur", "include_profiler_spans": "--include-profiler-spans"}


def say_error(e: traceconv.TraceconvError) -> None:
    say(f"traceconv: error: {e.one_line(FLAGS)}", stderr=True)


def fail(e: traceconv.TraceconvError) -> "typer.Exit":
    say_error(e)
    return typer.Exit(code=e.exit_code)


def to_stream(output: Path | str) -> bool:
    """The output is standard output (or another open descriptor): messages go to stderr."""
    return stream_fd(output) is not None


def print_warnings(warnings: list) -> None:
    for w in warnings:
        say(f"warning: {w.one_line(FLAGS)}", stderr=True)


MERGE_FIRST, MERGE_WORST = 8, 8


def merge_rows(alignments: list) -> list:
    """The rows of merge's table, in rank order: every rank of a small run; of a larger run (a
    fleet's thousand ranks), the first ``MERGE_FIRST`` and the ``MERGE_WORST`` others least
    certain (no bound first, then the widest), where a misaligned rank would be, with None where
    ranks are left out."""
    ranked = sorted(alignments, key=lambda a: a.rank)
    if len(ranked) <= MERGE_FIRST + MERGE_WORST:
        return ranked
    worst = sorted(range(MERGE_FIRST, len(ranked)),
                   key=lambda i: (ranked[i].uncertainty_ns is not None, -(ranked[i].uncertainty_ns or 0)))
    keep = sorted([*range(MERGE_FIRST), *worst[:MERGE_WORST]])
    rows: list = []
    for before, i in zip([-1, *keep], keep):
        if i != before + 1:
            rows.append(None)
        rows.append(ranked[i])
    return rows + ([None] if keep[-1] != len(ranked) - 1 else [])


def common_folder(paths: list[str]) -> tuple[str, list[str]]:
    """The folder every one of ``paths`` (local or URLs) is in, ending in ``/``, and each path
    below it; ``""`` and the paths as they are when they share none."""
    parts = [p.split("/") for p in paths]
    common: list[str] = []
    if parts:
        for segs in zip(*(p[:-1] for p in parts)):
            if any(x != segs[0] for x in segs):
                break
            common.append(segs[0])
    if not common or not common[-1]:          # none, or only "/" or "s3://"
        return "", list(paths)
    cut = len(common)
    return "/".join(common) + "/", ["/".join(p[cut:]) for p in parts]


def print_tab_note(path: Any, output_format: str) -> None:
    """A note when a Perfetto trace just written or about to be served is too big for a browser tab."""
    if output_format == "perfetto":
        note = viewers.too_big_for_a_tab(path)
        if note:
            say(f"note: {note}", stderr=True)


@contextlib.contextmanager
def progress_bar(quiet: bool, what: str):
    """A callback(done, total, path) drawing a progress bar on a terminal; nothing otherwise."""
    if quiet or not on_terminal():
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    with Progress(TextColumn(what, style="bold", markup=False), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.description}", markup=False), TimeElapsedColumn(), console=console(stderr=True),
                  transient=True) as p:
        task = p.add_task("", total=None)

        def update(done: int, total: int, path) -> None:
            p.update(task, completed=done, total=total, description=str(path))
        yield update


@contextlib.contextmanager
def stage_progress(quiet: bool):
    """Show the library's progress reports (stage, events done) on a terminal; nothing otherwise."""
    if quiet or not on_terminal():
        yield
        return
    # (rich.progress on a terminal only: ~20 ms of every other command's start)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    with Progress(TextColumn("{task.description}", style="bold", markup=False), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console(stderr=True), transient=True) as p:
        task = p.add_task("starting", total=None)

        def update(stage: str, done: int, total) -> None:
            p.update(task, description=stage, completed=done, total=total)
        with progress.reporting(update):
            yield


def version_callback(value: bool) -> None:
    if value:
        say(f"traceconv {traceconv.__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: bool = typer.Option(False, "--version", callback=version_callback, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    pass


@command(epilog="Input format (from the content): " + ", ".join(registry.reader_names())
             + ".  Output format (from the name): " + ", ".join(registry.writer_names()) + ".")
def convert(
    input: str = typer.Argument(..., metavar="INPUT", help="The profile to convert (.gz is detected by content); "
                                                           "a path or a URL (s3://, gs://, az://, https://)."),
    output: str = typer.Option(..., "-o", "--output",
                               help="Where to write: .json / .json.gz (Chrome JSON), "
                                    ".pftrace / .perfetto-trace / .pb (Perfetto protobuf), or - for "
                                    "standard output (Perfetto unless --to says; not to a terminal); "
                                    "a URL is uploaded once complete."),
    from_: Optional[str] = typer.Option(None, "--from", "-f", metavar="FORMAT",
                                        help="Input format, if detection guesses wrong: "
                                             + ", ".join(registry.reader_names()) + "."),
    to: Optional[str] = typer.Option(None, "--to", "-t", metavar="FORMAT",
                                     help="Output format, instead of the one the name implies: "
                                          + ", ".join(registry.writer_names()) + "."),
    strict: bool = typer.Option(False, "--strict", help="Fail, writing nothing, if any event "
                                                        "would be dropped or changed."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print nothing but errors."),
    engine: Optional[str] = typer.Option(None, "--engine", help=ENGINE_HELP),
    scheduler: Optional[str] = typer.Option(None, "--scheduler", metavar="ADDRESS", help=SCHEDULER_HELP),
) -> None:
    """Convert a profile to a Perfetto or Chrome JSON timeline.

    traceconv convert timers.json -o run.pftrace
    """
    try:
        with stage_progress(quiet):
            result = traceconv.convert(input, output, from_format=from_, to_format=to, strict=strict,
                                       engine=engine_of(engine, scheduler), scheduler=scheduler)
    except traceconv.TraceconvError as e:
        raise fail(e) from None
    if not quiet:
        say(f"wrote {output_label(output)} ({result.output_format}) from {input} ({result.input_format}): "
            f"{result.counts()}", stderr=to_stream(output))
        print_warnings(result.warnings)
        print_tab_note(output, result.output_format)


@command()
def merge(
    inputs: list[str] = typer.Argument(..., metavar="INPUTS...",
                                       help="Trace files, folders or globs: one (or more) per rank."),
    output: str = typer.Option(..., "-o", "--output", help="Where to write: .pftrace, .json, .json.gz, "
                                                           ".tar (a Perfetto merge archive), or - for "
                                                           "standard output (Perfetto unless --to says); "
                                                           "a URL is uploaded once complete."),
    to: Optional[str] = typer.Option(None, "--to", "-t", metavar="FORMAT",
                                     help=", ".join(registry.writer_names(merge=True))
                                     + " (default: from the name)."),
    from_: Optional[str] = typer.Option(None, "--from", "-f", metavar="FORMAT", help="Input format."),
    ranks: Optional[str] = typer.Option(None, "--ranks", help="Keep only these ranks, e.g. 0-3,7."),
    rank: list[str] = typer.Option([], "--rank", metavar="FILE=N", help="The rank of a file (repeatable)."),
    window: Optional[str] = typer.Option(None, "--window", help="Keep a time range (1.5s:2s from the start) "
                                                                "or the span of a named slice (ProfilerStep#4)."),
    min_dur: Optional[str] = typer.Option(None, "--min-dur", help="Leave out slices shorter than this (5us)."),
    drop_cat: list[str] = typer.Option([], "--drop-cat", help="Leave out a category (python_function)."),
    align: str = typer.Option("auto", "--align", help="auto, wallclock, barrier, collectives or none."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print nothing but errors."),
    engine: Optional[str] = typer.Option(None, "--engine", help=ENGINE_HELP),
    scheduler: Optional[str] = typer.Option(None, "--scheduler", metavar="ADDRESS", help=SCHEDULER_HELP),
    workers: Optional[int] = typer.Option(None, "--workers", help="Processes (local) or LocalCluster workers "
                                                                  "(dask); default: one per core."),
) -> None:
    """Merge the traces of many ranks into one aligned timeline.

    traceconv merge traces/rank*.pt.trace.json.gz -o run.pftrace
    """
    from rich.table import Table
    from rich.text import Text
    if to_stream(output) and not to:
        from traceconv.api import DEFAULT_STREAM_FORMAT
        to = DEFAULT_STREAM_FORMAT
    try:
        binary = (to or "").lower() not in ("chrome-json", "json", "chrome") \
            and not str(output).endswith((".json", ".json.gz"))
        refuse_binary_terminal(output, binary)
    except traceconv.TraceconvError as e:
        raise fail(e) from None
    with progress_bar(quiet, "parsing") as bar:
        try:
            result = traceconv.merge(inputs, output, to_format=to, from_format=from_, ranks=ranks, rank_map=rank,
                                     window=window, min_dur=min_dur, drop_cat=drop_cat, align_method=align,
                                     progress=bar, engine=engine_of(engine, scheduler), scheduler=scheduler,
                                     workers=workers)
        except traceconv.TraceconvError as e:
            raise fail(e) from None
    if quiet:
        return
    folder, names = common_folder([str(path) for path, _, _ in result.files])
    files = {r: [] for r in sorted({r for _, r, _ in result.files})}
    for name, (_, r, how) in zip(names, result.files):
        files[r].append(f"{name} ({spell(how, FLAGS)})")
    t = Table(title=Text(f"wrote {output_label(result.output)} ({result.output_format}): "
                         f"{count(result.slices, 'slice')}"
                         + (f" from {count(len(names), 'file')} in {folder}" if folder else "")),
              title_justify="left")
    for col in ("rank", "file (rank from)", "alignment", "matched", "offset", "±"):
        # (a file's name in full: its tail is what tells two ranks apart)
        t.add_column(col, justify="right" if col in ("rank", "matched", "offset", "±") else "left",
                     overflow="fold")
    rows = merge_rows(result.alignments)
    shown = sum(a is not None for a in rows)
    if shown < len(result.alignments):
        methods = collections.Counter(a.method for a in result.alignments)
        t.caption = Text(f"{len(result.alignments):,} ranks, {shown} shown: the first {MERGE_FIRST} and the "
                         f"least certain; aligned by " + ", ".join(f"{m} {n:,}" for m, n in methods.most_common()))
    for a in rows:
        if a is None:                                   # ranks left out here
            t.add_row("…", "", "", "", "", "")
            continue
        t.add_row(str(a.rank), Text("\n".join(files[a.rank])), Text(f"{a.method}: {a.detail}"),
                  "-" if a.matched is None else str(a.matched), f"{a.offset_ns / 1e6:+.3f} ms",
                  "?" if a.uncertainty_ns is None else f"{a.uncertainty_ns / 1e6:.3f} ms")
    show(t, to_stream(output), PROSE_WIDTH)
    print_warnings(result.warnings)
    print_tab_note(result.output, result.output_format)


@command()
def summary(
    inputs: list[str] = typer.Argument(..., metavar="INPUTS...",
                                       help="One profile, or one per rank of a run (paths, folders, globs, "
                                            "URLs: 's3://b/run/rank*.json.gz')."),
    by: str = typer.Option("name", "--by", help="Group by: " + ", ".join(GROUPINGS) + "."),
    sort: str = typer.Option("self", "--sort", help="Sort by: " + ", ".join(SORTS) + "."),
    top: Optional[int] = typer.Option(20, "--top", help="Show the first N rows (0: all)."),
    fmt: str = typer.Option("table", "--format", help="table, csv or json."),
    from_: Optional[str] = typer.Option(None, "--from", "-f", metavar="FORMAT", help="Input format."),
    include_profiler_spans: bool = typer.Option(
        False, "--include-profiler-spans",
        help="Count the profiler's own window spans (PyTorch Profiler (0)), left out by default."),
    ranks: Optional[str] = typer.Option(None, "--ranks", help="Keep only these ranks, e.g. 0-3,7."),
    window: Optional[str] = typer.Option(None, "--window", help="Keep the slices that overlap a time range "
                                                                "(1.5s:2s from each input's start) or the "
                                                                "span of a named slice (ProfilerStep#4)."),
    min_dur: Optional[str] = typer.Option(None, "--min-dur", help="Leave out slices shorter than this (5us)."),
    drop_cat: list[str] = typer.Option([], "--drop-cat", help="Leave out a category (python_function)."),
    engine: Optional[str] = typer.Option(None, "--engine", help=ENGINE_HELP),
    scheduler: Optional[str] = typer.Option(None, "--scheduler", metavar="ADDRESS", help=SCHEDULER_HELP),
    workers: Optional[int] = typer.Option(None, "--workers", help="Processes (local) or LocalCluster workers "
                                                                  "(dask); default: one per core."),
) -> None:
    """Where did the time go: hotspots by name, category, thread, process or rank.

    By name, total sums the calls' durations; by category, thread, process or rank it is the
    time the group's slices cover, counted once.  Each call is counted once (a call a producer
    writes twice, e.g. MXNet's operator track or MegEngine's host times, is left out), and so is
    the profiler's own window unless --include-profiler-spans.

    traceconv summary rank0.pt.trace.json.gz rank1.pt.trace.json.gz --by name --top 10
    """
    try:
        if fmt not in ("table", "csv", "json"):
            raise traceconv.TraceconvError(f"unknown --format '{fmt}'; choose table, csv or json")
        if top is not None and top < 0:
            raise traceconv.TraceconvError(f"--top {top}: give a number of rows, or 0 for all")
        with stage_progress(False):
            result = summ.summarize_files(inputs, by=by, sort=sort, top=top or None, from_format=from_,
                                          include_profiler_spans=include_profiler_spans, ranks=ranks,
                                          window=window, drop_cat=drop_cat, min_dur=min_dur,
                                          engine=engine_of(engine, scheduler), scheduler=scheduler,
                                          workers=workers)
    except traceconv.TraceconvError as e:
        raise fail(e) from None
    note = result.left_out_text(FLAGS)
    if fmt == "json":
        sys.stdout.write(result.to_json(FLAGS).decode() + "\n")
        return
    if fmt == "csv":
        sys.stdout.write(result.to_csv())
        if note:
            say(f"not counted: {note}", stderr=True)
        return
    from rich.table import Table
    from rich.text import Text
    multi = len(result.ranks) > 1
    footprint = result.footprint
    stragglers = multi and by != "rank"          # (a row of one rank has no slowest rank)
    rows = []
    for r in result.rows:
        cells = {by: Text(clip(r.key, TABLE_KEY_CHARS)), "count": f"{r.count:,}", "total": summ.fmt_ns(r.total_ns),
                 "self": summ.fmt_ns(r.self_ns), "avg": summ.fmt_ns(r.avg_ns), "self %": f"{100 * r.share:.1f}"}
        if footprint:
            cells["FLOPS"] = summ.fmt_rate(r.flops, "FLOPS", 1000)
            cells["bandwidth"] = summ.fmt_rate(r.bandwidth, "iB/s", 1024)
        if stragglers:
            st = r.straggler()
            cells["slowest rank"] = f"{st[0]} (x{st[1]:.2f})" if st else ""
        rows.append(cells)
    columns = [by, "count", "total", "self", "avg", "self %"] + (["FLOPS", "bandwidth"] if footprint else []) \
        + (["slowest rank"] if stragglers else [])
    wide = unfolded(console())
    caption = "total: the time the group's slices cover, counted once" if result.total_is_union else None
    dropped = []
    for col in NARROW_DROPS:                     # (on an 80-column terminal names were 11 wide)
        if wide or name_room(columns[1:], rows, console().width) >= NAME_MIN:
            break
        columns.remove(col)
        dropped.append(col)
    if dropped:
        caption = "; ".join(filter(None, [caption, f"{', '.join(dropped)}: left out at this width "
                                                   f"(--format csv has {'them' if len(dropped) > 1 else 'it'})"]))
    t = Table(title=Text(f"{', '.join(str(p) for p in inputs)} — by {by}")
                    + (" (synthesized timeline: file totals)" if result.synthesized else ""),
              caption=caption)
    # (to a file or a pipe, a name is one line: grep finds its row whole)
    t.add_column(by, overflow="fold", max_width=None if wide else 60)
    for col in columns[1:]:
        t.add_column(col, justify="right")
    for cells in rows:
        t.add_row(*(cells[c] for c in columns))
    show(t)
    if multi:
        show(skew_table(result))
    if note:
        say(f"not counted: {note}")


SKEW_ROWS = 8


def skew_table(result: "summ.Summary") -> "Group":
    """The straggler view: each rank's busy time (its self time over all rows) against the median
    rank's, the slowest first (the first few, and the fastest)."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text
    skew = result.skew()
    shown = skew if len(skew) <= SKEW_ROWS + 1 else skew[:SKEW_ROWS] + skew[-1:]
    t = Table()
    for col in ("rank", "busy", "vs median"):
        t.add_column(col, justify="right")
    for i, (r, ns, ratio) in enumerate(shown):
        if len(shown) < len(skew) and i == len(shown) - 1:
            t.add_row("...", "", "")
        t.add_row(str(r), summ.fmt_ns(ns), f"{100 * (ratio - 1):+.1f}%")
    # (a line above the table, not its title, which would wrap to the table's 31 columns)
    return Group(Text(f"ranks, slowest first ({len(skew):,} ranks; busy: self time over all rows)",
                      style="table.title"), t)


@command("validate")
def validate_(
    input: str = typer.Argument(..., metavar="INPUT", help="The profile to check (a path or a URL)."),
    fmt: str = typer.Option("table", "--format", help="table or json."),
    from_: Optional[str] = typer.Option(None, "--from", "-f", metavar="FORMAT", help="Input format."),
) -> None:
    """Report what in a profile would hurt in a viewer; exit 0 if clean, 1 if not, 2 if unreadable.

    A problem would hurt in a viewer (exit 1); a note is a known quirk of the producer (exit 0).
    Each finding names a few of the events behind it (name, time from the first event, thread).

    traceconv validate rank0.pt.trace.json.gz
    """
    try:
        with stage_progress(False):
            report = check.validate(input, from_)
    except traceconv.TraceconvError as e:
        raise fail(e) from None
    if fmt == "json":
        sys.stdout.write(report.to_json().decode() + "\n")
    else:
        from rich.table import Table
        from rich.text import Text
        verdict = "clean" if not report.problems else count(len(report.problems), "problem")
        if report.notes:
            verdict += f", {count(len(report.notes), 'note')} on known quirks of the producer"
        events = count(report.events, "event", grouped=True)
        t = Table(title=Text(f"{input} ({report.format}, {events}): {verdict}"), title_justify="left")
        for col in ("check", "verdict", "count", "detail"):
            t.add_column(col, justify="right" if col == "count" else "left", overflow="fold")
        rank = {check.PROBLEM: 0, check.NOTE: 1}
        for f in sorted(report.findings, key=lambda f: (rank.get(f.severity, 2), f.check)):
            label = {check.PROBLEM: "[red]problem[/red]", check.NOTE: "[yellow]note[/yellow]"}.get(f.severity, "info")
            detail = Text(f.message + "".join(f"\n  e.g. {x}" for x in f.examples))
            t.add_row(f.check, label, f"{f.count:,}", detail)
        show(t, width=PROSE_WIDTH)
    raise typer.Exit(code=EXIT_PROBLEMS if report.problems else 0)


@command("open")
def open_(
    input: str = typer.Argument(..., metavar="INPUT", help="A profile of any supported format, or a Perfetto "
                                                           "trace (a path or a URL)."),
    no_browser: bool = typer.Option(False, "--no-browser", "-n", help="Print the link, open no browser."),
    origin: str = typer.Option(serve.DEFAULT_ORIGIN, "--origin", help="The Perfetto UI to open it in."),
    port: int = typer.Option(serve.DEFAULT_PORT, "--port", help="Port on 127.0.0.1 (the UI only allows 9001)."),
    from_: Optional[str] = typer.Option(None, "--from", "-f", metavar="FORMAT", help="Input format."),
) -> None:
    """Open a profile in ui.perfetto.dev: convert it if needed, serve it once on 127.0.0.1:9001.

    traceconv open timers.json
    """
    try:
        serve.check_port(port)
        with traceconv.open_in_ui(input, from_format=from_) as ready:
            print_tab_note(ready, "perfetto")

            def announce(url: str) -> None:
                say(f"serving {ready.name} once on http://{serve.HOST}:{port}/ (Ctrl-C to stop)")
                say(url)
                if not no_browser:
                    import webbrowser                # (~10 ms, which every other command would pay)
                    webbrowser.open_new_tab(url)
            serve.serve_once(ready, port=port, origin=origin, on_ready=announce)
    except traceconv.TraceconvError as e:
        raise fail(e) from None


@command("formats")
def list_formats() -> None:
    """List the formats traceconv reads and writes."""
    from rich.table import Table
    from rich.text import Text
    t = Table(title="traceconv formats", show_lines=False)
    t.add_column("name", style="bold", no_wrap=True)
    t.add_column("reads")
    t.add_column("writes")
    t.add_column("file names", overflow="fold")
    t.add_column("what it is", overflow="fold")
    for f in registry.FORMATS:
        t.add_row(f.name, "yes" if f.reader else "", ("merge" if f.archive else "yes") if f.writer else "",
                  " ".join(f.extensions), Text(f.title + (" [synthesized timeline]" if f.aggregate else "")))
    show(t, width=PROSE_WIDTH)


def _install_signal_handlers() -> None:
    """SIGTERM, SIGHUP and SIGINT raise :class:`Stopped` in the main thread, so every ``finally``
    runs (temporary outputs and folders removed) before the exit code 128 + signum.  A second
    signal of the same kind kills at once.  Worker processes forked later die by the signal."""
    main_pid = os.getpid()

    def handler(signum: int, frame: object) -> None:
        signal.signal(signum, signal.SIG_DFL)
        if os.getpid() != main_pid:
            os.kill(os.getpid(), signum)
            return
        if not hold_signal(signum):          # a step that must not be cut raises it when done
            raise Stopped(signum)

    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        with contextlib.suppress(ValueError, OSError):   # not the main thread, or not on this OS
            signal.signal(sig, handler)


def _quiet_stdout() -> None:
    """The reader of stdout went away: point fd 1 at /dev/null so the exit flush cannot fail."""
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)


class _PipeGuard:
    """sys.stdout, but a reader that went away is :class:`Stopped` (SIGPIPE: exit 141), which Typer
    does not turn into exit 1 the way it does an EPIPE OSError."""

    def __init__(self, stream):  # noqa: ANN001
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            raise Stopped(signal.SIGPIPE, "the reader of standard output went away") from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            raise Stopped(signal.SIGPIPE, "the reader of standard output went away") from None

    def __getattr__(self, name: str):  # noqa: ANN204
        return getattr(self._stream, name)


def main() -> None:
    """The ``traceconv`` command: every outcome is one of the documented exit codes."""
    one_blas_thread()
    lighthelp.install()                     # help without a Markdown parser (~80 ms; see the module)
    _install_signal_handlers()
    if sys.stdout is not None and not isinstance(sys.stdout, _PipeGuard):
        sys.stdout = _PipeGuard(sys.stdout)  # type: ignore[assignment]
    # What is imported by now lives as long as the process: frozen, no collection scans it again (a
    # merge's main process spent 0.08 s in one full collection while its workers ran; forked workers
    # inherit the frozen set)
    gc.freeze()
    try:
        app()
    except SystemExit:
        # The objects alive now (modules, the command's imports) live until the process ends: frozen,
        # the collection at interpreter exit skips them (a merge's exit 0.049 -> 0.014 s).
        gc.freeze()
        raise
    except Stopped as e:
        if e.signum == signal.SIGPIPE:
            _quiet_stdout()
            with contextlib.suppress(Exception):
                sys.stdout = sys.__stdout__
        else:
            name = signal.Signals(e.signum).name
            say(f"traceconv: {'interrupted' if e.signum == signal.SIGINT else 'stopped by ' + name}"
                " (nothing half-written left behind)", stderr=True)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        say("traceconv: interrupted", stderr=True)
        sys.exit(130)
    except BrokenPipeError:
        _quiet_stdout()
        sys.exit(128 + signal.SIGPIPE)
    except traceconv.TraceconvError as e:      # a command that let one through
        say_error(e)
        sys.exit(e.exit_code)
    except Exception:
        traceback.print_exc()
        say("traceconv: internal error (a bug): please report it with the traceback above", stderr=True)
        sys.exit(EXIT_BUG)


if __name__ == "__main__":
    main()
