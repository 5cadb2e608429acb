"""``traceconv``: a thin Typer app.  It parses arguments, calls the library, prints.

User errors (:class:`traceconv.TraceconvError`) become one line on stderr and exit code 2.
"""

from __future__ import annotations

import sys
import webbrowser
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

import traceconv
from traceconv import formats as registry
from traceconv import serve

out = Console(highlight=False)
err = Console(stderr=True, highlight=False)

EXAMPLES = """
[bold]Examples[/bold]

  traceconv convert results/ppo/run_logs/timers.json -o timers.pftrace
  traceconv convert timers.json -o timers.trace.json.gz
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


def fail(e: traceconv.TraceconvError) -> "typer.Exit":
    err.print(f"traceconv: error: {e}", markup=False, soft_wrap=True)
    return typer.Exit(code=2)


def print_warnings(warnings: list) -> None:
    for w in warnings:
        err.print(f"warning: {w}", markup=False, soft_wrap=True)


def version_callback(value: bool) -> None:
    if value:
        out.print(f"traceconv {traceconv.__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: bool = typer.Option(False, "--version", callback=version_callback, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    pass


@app.command(epilog="Input format (from the content): " + ", ".join(registry.reader_names())
             + ".  Output format (from the name): " + ", ".join(registry.writer_names()) + ".")
def convert(
    input: Path = typer.Argument(..., help="The profile to convert (.gz is detected by content)."),
    output: Path = typer.Option(..., "-o", "--output",
                                help="Where to write: .json / .json.gz (Chrome JSON), "
                                     ".pftrace / .perfetto-trace / .pb (Perfetto protobuf)."),
    from_: Optional[str] = typer.Option(None, "--from", "-f", metavar="FORMAT",
                                        help="Input format, if detection guesses wrong: "
                                             + ", ".join(registry.reader_names()) + "."),
    to: Optional[str] = typer.Option(None, "--to", "-t", metavar="FORMAT",
                                     help="Output format, instead of the one the name implies: "
                                          + ", ".join(registry.writer_names()) + "."),
    strict: bool = typer.Option(False, "--strict", help="Fail, writing nothing, if any event "
                                                        "would be dropped or changed."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print nothing but errors."),
) -> None:
    """Convert a profile to a Perfetto or Chrome JSON timeline.

    traceconv convert timers.json -o run.pftrace
    """
    try:
        result = traceconv.convert(input, output, from_format=from_, to_format=to, strict=strict)
    except traceconv.TraceconvError as e:
        raise fail(e) from None
    if not quiet:
        out.print(f"wrote {output} ({result.output_format}) from {input} ({result.input_format}): "
                  f"{result.counts()}", markup=False, soft_wrap=True)
        print_warnings(result.warnings)


@app.command("open")
def open_(
    input: Path = typer.Argument(..., help="A profile of any supported format, or a Perfetto trace."),
    no_browser: bool = typer.Option(False, "--no-browser", "-n", help="Print the link, open no browser."),
    origin: str = typer.Option(serve.DEFAULT_ORIGIN, "--origin", help="The Perfetto UI to open it in."),
    port: int = typer.Option(serve.DEFAULT_PORT, "--port", help="Port on 127.0.0.1 (the UI only allows 9001)."),
    from_: Optional[str] = typer.Option(None, "--from", "-f", metavar="FORMAT", help="Input format."),
) -> None:
    """Open a profile in ui.perfetto.dev: convert it if needed, serve it once on 127.0.0.1:9001.

    traceconv open timers.json
    """
    try:
        with traceconv.open_in_ui(input, from_format=from_) as ready:
            def announce(url: str) -> None:
                out.print(f"serving {ready.name} once on http://{serve.HOST}:{port}/ (Ctrl-C to stop)",
                          markup=False, soft_wrap=True)
                out.print(url, markup=False, soft_wrap=True)
                if not no_browser:
                    webbrowser.open_new_tab(url)
            serve.serve_once(ready, port=port, origin=origin, on_ready=announce)
    except traceconv.TraceconvError as e:
        raise fail(e) from None


@app.command("formats")
def list_formats() -> None:
    """List the formats traceconv reads and writes."""
    t = Table(title="traceconv formats", show_lines=False)
    t.add_column("name", style="bold")
    t.add_column("reads")
    t.add_column("writes")
    t.add_column("file names")
    t.add_column("what it is")
    for f in registry.FORMATS:
        t.add_row(f.name, "yes" if f.reader else "", "yes" if f.writer else "",
                  " ".join(f.extensions), f.title + (" [synthesized timeline]" if f.aggregate else ""))
    out.print(t)


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        err.print("traceconv: interrupted")
        sys.exit(130)


if __name__ == "__main__":
    main()
