"""The ``opaudit`` command: parse arguments, call the library, render. No logic of its own."""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

import opaudit
from opaudit.errors import OpauditError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    help="Will this PyTorch model run on another accelerator? Trace what it runs, then check it.",
)
out = Console()
err = Console(stderr=True)
PARTIAL_DEFAULT = "opaudit-trace.partial.json"


class Mode(str, Enum):
    auto = "auto"
    real = "real"
    meta = "meta"
    fake = "fake"


class Amp(str, Enum):
    fp16 = "fp16"
    bf16 = "bf16"


def _version(value: bool) -> None:
    if value:
        out.print(f"opaudit {opaudit.__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    pass


def _fail(e: OpauditError, json_path: Path | None) -> None:
    err.print(f"error: {e.message}", style="bold red", markup=False, highlight=False)
    if e.details:
        err.print(e.details, markup=False, highlight=False)
    if e.hint:
        err.print(f"hint: {e.hint}", style="yellow", markup=False, highlight=False)
    partial = getattr(e, "partial", None)
    if partial is not None:
        path = json_path or Path(PARTIAL_DEFAULT)
        try:
            partial.save(path)
            err.print(f"partial trace ({partial.meta.total_calls:,} op calls) saved to {path}", style="yellow")
        except OpauditError as save_error:
            err.print(f"the partial trace could not be saved: {save_error.message}", style="red")
    raise typer.Exit(e.exit_code)


@contextmanager
def _errors(json_path: Path | None = None):
    """Every error a user can cause ends here: one message, a documented exit code, no traceback."""
    try:
        yield
    except OpauditError as e:
        _fail(e, json_path)
    except KeyboardInterrupt:
        err.print("interrupted", style="yellow")
        raise typer.Exit(130) from None


@contextmanager
def _progress() -> Any:
    """A live op counter on stderr for long traces."""
    with err.status("tracing…", spinner="dots") as status:
        def update(n: int) -> None:
            status.update(f"tracing… {n:,} ops")
        yield update


def _finish(trace: opaudit.Trace, json_path: Path | None, top: int | None, quiet: bool) -> None:
    from opaudit.report.terminal import render_trace

    if not quiet:
        render_trace(trace, out, top=top)
    if json_path is not None:
        trace.save(json_path)
        err.print(f"trace written to {json_path}", style="green")


@app.command()
def scan(
    model: str = typer.Argument(..., help="model.py (with get_model() and get_inputs()) or model.py:factory"),
    train: bool = typer.Option(False, "--train", help="Also run loss, backward and optimizer steps."),
    steps: int = typer.Option(1, "--steps", min=1, help="Forward/backward passes when training; the optimizer "
                              "steps at least twice (step 1 initialises its state)."),
    mode: Mode = typer.Option(Mode.auto, "--mode", help="Where tensors live while tracing: real CPU tensors, "
                              "meta (no memory), fake; auto picks real when the model fits comfortably."),
    amp: Amp | None = typer.Option(None, "--amp", help="Trace the forward pass under CUDA's autocast policy."),
    shapes: bool = typer.Option(False, "--shapes", help="Record input shapes too (more, finer records)."),
    json_path: Path | None = typer.Option(None, "--json", help="Write the trace as JSON to this path."),
    top: int | None = typer.Option(None, "--top", min=1, help="Show at most this many ops per phase."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Do not print the op table."),
) -> None:
    """Trace every aten op a model hits (forward; with --train also backward and optimizer)."""
    from opaudit.trace.load import load_model_file

    with _errors(json_path):
        spec = load_model_file(model)

        def said(chosen: str, reason: str) -> None:
            err.print(f"mode: {chosen} ({reason})", style="dim", markup=False, highlight=False)

        with _progress() as progress:
            trace = opaudit.trace(
                spec.make_model, spec.make_inputs, train=train, mode=mode.value, steps=steps,
                loss_fn=spec.loss_fn, optimizer=spec.optimizer, amp=amp.value if amp else None,
                shapes=shapes, progress=progress, on_mode=said, source=spec.source,
            )
        _finish(trace, json_path, top, quiet)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def trace(
    ctx: typer.Context,
    max_ops: int | None = typer.Option(None, "--max-ops", min=1, help="Stop after this many op calls."),
    timeout: float | None = typer.Option(None, "--timeout", min=0.001, help="Stop after this many seconds."),
    module: bool = typer.Option(False, "-m", help="The target is a module name, as with python -m."),
    shapes: bool = typer.Option(False, "--shapes", help="Record input shapes too."),
    json_path: Path | None = typer.Option(None, "--json", help="Write the trace as JSON to this path."),
    top: int | None = typer.Option(None, "--top", min=1, help="Show at most this many ops per phase."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Do not print the op table."),
) -> None:
    """Run an unmodified script under the recorder: opaudit trace [OPTIONS] -- script.py ARGS..."""
    from opaudit.trace.script import trace_script

    args = list(ctx.args)
    with _errors(json_path):
        if not args:
            raise OpauditError("no script given", hint="opaudit trace -- train.py --its --own --args")
        with _progress() as progress:
            result = trace_script(args[0], args[1:], module=module, max_ops=max_ops, timeout=timeout,
                                  shapes=shapes, progress=progress)
        if result.meta.status == "stopped":
            err.print(f"{result.meta.error}; the trace holds what ran until then", style="yellow")
        _finish(result, json_path, top, quiet)


@app.command()
def report(
    trace_file: Path = typer.Argument(..., help="A trace written by scan --json or trace --json."),
    top: int | None = typer.Option(None, "--top", min=1, help="Show at most this many ops per phase."),
) -> None:
    """Show a saved trace, without re-running the model."""
    from opaudit.report.terminal import render_trace

    with _errors():
        t = opaudit.load_trace(trace_file)
        render_trace(t, out, top=top)


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
        app(args=argv, prog_name="opaudit")
    except SystemExit:
        raise
    except Exception as e:  # pragma: no cover - only opaudit's own bugs get here
        if os.environ.get("OPAUDIT_DEBUG"):
            raise
        err.print(f"opaudit internal error: {type(e).__name__}: {e} (set OPAUDIT_DEBUG=1 for the traceback)",
                  style="bold red", markup=False, highlight=False)
        sys.exit(70)

