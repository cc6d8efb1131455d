"""The `cw` command: thin typer commands over the library, and the one error boundary.

Known errors (`CwError`) print one red line and exit with their code; anything else prints one
line too, with the traceback only when CW_DEBUG=1.
"""

from __future__ import annotations

import os
import sys

import typer
from rich.console import Console
from rich.markup import escape

app = typer.Typer(
    name="cw",
    help="Compile, profile and serve DNN models with predictable latency (Clockwork, rebuilt).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode="rich",
)


def _print_version(wanted: bool) -> None:
    if not wanted:
        return
    from importlib import metadata

    import cw

    try:  # read from the installed package's metadata: importing TVM takes seconds
        tvm = f"apache-tvm {metadata.version('apache-tvm')}"
    except metadata.PackageNotFoundError:
        tvm = "apache-tvm not installed"
    Consoles.out.print(f"cw {cw.__version__} ({tvm}, Python {sys.version.split()[0]})")
    raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_print_version,
                                       is_eager=True, help="Print cw's version and exit.")):
    pass


class Consoles:
    """Where commands write; tests swap in recording consoles."""
    out = Console(highlight=False)
    err = Console(stderr=True, highlight=False)


def console() -> Console:
    return Consoles.out


def progress_bar(*columns, hidden: bool = False):
    """A transient bar on a terminal. Nowhere else: off a terminal rich cannot redraw it, and
    stopping it (as an error does) left a stray empty line on stdout."""
    from rich.progress import Progress

    return Progress(*columns, console=Consoles.out, transient=True,
                    disable=hidden or not Consoles.out.is_terminal)


def print_json(data) -> None:
    import msgspec

    def numpy_scalars(obj):
        if hasattr(obj, "item"):
            return obj.item()
        raise NotImplementedError(type(obj))

    raw = msgspec.json.encode(data, enc_hook=numpy_scalars)
    Consoles.out.file.write(msgspec.json.format(raw, indent=2).decode())
    Consoles.out.file.write("\n")


EXIT_INTERNAL = 70
EXIT_INTERRUPTED = 130


def run_cli(args: list[str] | None = None) -> int:
    """Run `cw` with `args`; returns the exit code instead of exiting."""
    from cw.errors import CwError, HostError

    _register_commands()
    debug = os.environ.get("CW_DEBUG") == "1"
    try:
        code = app(args=args, prog_name="cw", standalone_mode=False)
        # Commands return None. An exit code comes back instead of an exception from typer
        # itself: recent versions turn Ctrl-C into Exit(130) and return its code (older ones
        # raise Abort, below); ignoring it made an interrupted run exit 0.
        if code == EXIT_INTERRUPTED:
            Consoles.err.print("[red]interrupted[/]")
        return code if isinstance(code, int) and not isinstance(code, bool) else 0
    except CwError as e:
        if debug:
            Consoles.err.print_exception()
        # escaped: messages name files and extras like cw[gpu], which markup would swallow
        Consoles.err.print(f"[bold red]error:[/] {escape(e.one_line())}", soft_wrap=True,
                           markup=True, highlight=False)
        return e.exit_code
    except typer.Exit as e:
        return e.exit_code
    except typer.Abort:
        Consoles.err.print("[red]aborted[/]")
        return EXIT_INTERRUPTED
    except KeyboardInterrupt:
        Consoles.err.print("[red]interrupted[/]")
        return EXIT_INTERRUPTED
    except Exception as e:  # click usage errors and the unexpected
        from typer.exceptions import TyperException

        if isinstance(e, TyperException):  # usage errors: unknown flag, missing argument
            if hasattr(e, "show"):
                e.show(file=Consoles.err.file)
            else:
                Consoles.err.print(f"[bold red]error:[/] {escape(e.format_message())}")
            return e.exit_code
        # a full disk or a path not writable: the machine's doing, with a fix, not a bug
        host = HostError.of(e) if isinstance(e, OSError) else None
        if debug:
            Consoles.err.print_exception()
        elif host is not None:
            Consoles.err.print(f"[bold red]error:[/] {escape(host.one_line())}", soft_wrap=True,
                               highlight=False)
        else:
            msg = str(e).strip().splitlines()[-1] if str(e).strip() else ""
            msg = msg if len(msg) <= 300 else msg[:300] + "…"  # TVM prints whole IR types
            Consoles.err.print(f"[bold red]internal error:[/] {type(e).__name__}: {escape(msg)} "
                               "(set CW_DEBUG=1 for the traceback and report it)",
                               soft_wrap=True, highlight=False)
        return EXIT_INTERNAL if host is None else host.exit_code


_registered = False


def _register_commands() -> None:
    global _registered
    if _registered:
        return
    from cw.cli import (bundle_cmds, compile_cmd, demo, profile_cmd, replay_cmds,  # noqa: F401
                        serve_cmds, tune_cmd, zoo)

    _one_line_summaries(app)
    _registered = True


def _one_line_summaries(typer_app: typer.Typer) -> None:
    """Command lists show a docstring's first paragraph; rich markup keeps its line breaks,
    which cut the list's entries mid-sentence. Joined into one line, they wrap where the
    terminal does."""
    for info in typer_app.registered_commands:
        if info.short_help is None and info.callback is not None and info.callback.__doc__:
            first = info.callback.__doc__.strip().split("\n\n")[0]
            info.short_help = " ".join(first.split())
    for group in typer_app.registered_groups:
        _one_line_summaries(group.typer_instance)


def main() -> None:
    sys.exit(run_cli(sys.argv[1:]))
