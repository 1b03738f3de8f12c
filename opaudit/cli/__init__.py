"""The ``opaudit`` command: parse arguments, call the library, render. No logic of its own.

One module per family of commands, each function a command; this module makes the typer app of them
(the whole command tree is the list below) and holds the executable's entry point:

- ``scan``: ``scan``, ``trace`` and ``report`` (trace a model or a script, or load a trace; audit; reports)
- ``run``: ``run`` (the fallback, live or rehearsed on the CPU)
- ``zoo``: ``zoo`` (many models at once)
- ``lint``: ``lint``, ``fix``, ``rules``, ``explain``
- ``matrix``: ``matrix ...``, ``db ...`` and ``doctor``
- ``options``: the options several commands share, each declared once as a typed alias
- ``console``: the consoles, and the one place errors a user can cause become a message and an exit code

Commands import the library inside their bodies: ``opaudit --help`` and ``opaudit lint`` never import torch.
"""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

import opaudit
from opaudit.cli import lint, matrix, run, scan, zoo
from opaudit.cli.console import err, out
from opaudit.cli.options import EXIT_FAIL_ON, EXIT_FINDINGS, EXIT_USAGE, USAGE_ERROR, FailOn, usage_message

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    help="Will this PyTorch model run on another accelerator? Trace what it runs, then check it.",
)
# a script's own arguments follow `--` and pass through untouched
PASS_THROUGH = {"allow_extra_args": True, "ignore_unknown_options": True}


def _version(value: bool) -> None:
    if value:
        out.print(f"opaudit {opaudit.__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version.")] = False,
) -> None:
    pass


app.command()(scan.scan)
app.command()(zoo.zoo)
app.command(context_settings=PASS_THROUGH)(scan.trace)
app.command(context_settings=PASS_THROUGH)(run.run)
app.command()(scan.report)
app.command()(matrix.doctor)
app.command()(lint.lint)
app.command(cls=lint.FixCommand)(lint.fix)  # what follows -- is --verify's program
app.command()(lint.rules)
app.command()(lint.explain)
app.add_typer(matrix.db_app, name="db")
app.add_typer(matrix.matrix_app, name="matrix")


def entry() -> None:
    """The ``opaudit`` executable: :func:`main`, then a quick exit.

    Once the command is done and its output flushed, tearing down the interpreter (freeing torch,
    the user's model and its imports one object at a time) takes about a second and changes
    nothing, so the process exits without it: atexit handlers still run, and a live non-daemon
    thread (a traced script's) gets the normal exit that waits for it.
    """
    import atexit
    import threading

    try:
        main()
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if e.code is not None and not isinstance(e.code, int):
            err.print(str(e.code), markup=False, highlight=False)
    others = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]
    if others:
        sys.exit(code)
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main(argv: list[str] | None = None) -> None:
    """Console entry point. Unexpected failures (opaudit's own bugs) print one line, not a traceback,
    unless OPAUDIT_DEBUG=1."""
    try:
        # not standalone: a usage error (a bad option value, an unknown option) ends here, as one line
        code = app(args=argv, prog_name="opaudit", standalone_mode=False)
    except SystemExit:
        raise
    except USAGE_ERROR as e:
        if type(e).__name__ == "NoArgsIsHelpError":  # `opaudit` or `opaudit db` alone: the help
            e.show()  # type: ignore[attr-defined]
        else:
            err.print(f"error: {usage_message(e)}", style="bold red", markup=False, highlight=False, soft_wrap=True)
        sys.exit(EXIT_USAGE)
    except typer.Abort:
        err.print("aborted", style="yellow")
        sys.exit(1)
    except Exception as e:  # pragma: no cover - only opaudit's own bugs get here
        if os.environ.get("OPAUDIT_DEBUG"):
            raise
        err.print(f"opaudit internal error: {type(e).__name__}: {e} (set OPAUDIT_DEBUG=1 for the traceback)",
                  style="bold red", markup=False, highlight=False)
        sys.exit(70)
    if isinstance(code, int) and code:  # typer.Exit(code) from a command
        sys.exit(code)


__all__ = ["EXIT_FAIL_ON", "EXIT_FINDINGS", "FailOn", "app", "entry", "main"]
