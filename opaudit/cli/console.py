"""What every command prints through: the two consoles, and the one place errors a user can cause end."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import typer
from rich.console import Console

from opaudit.errors import OpauditError

out = Console(emoji=False)  # hf:llama:CausalLM is a spec, not ":llama:"
err = Console(stderr=True, emoji=False)
PARTIAL_DEFAULT = "opaudit-trace.partial.json"


def fail(e: OpauditError, json_path: Path | None) -> None:
    """Print ``e`` as one message (with its details and hint), save the partial trace it carries, and exit
    with its exit code."""
    # soft_wrap: the terminal wraps, rich does not break lines (paths and commands stay copyable)
    # emoji=False: hf:llama:CausalLM is a spec, not ":llama:"
    err.print(f"error: {e.message}", style="bold red", markup=False, highlight=False, soft_wrap=True, emoji=False)
    if e.details:
        err.print(e.details, markup=False, highlight=False, soft_wrap=True, emoji=False)
    if e.hint:
        err.print(f"hint: {e.hint}", style="yellow", markup=False, highlight=False, soft_wrap=True, emoji=False)
    partial = getattr(e, "partial", None)
    if partial is not None:
        # never into the user's folder unasked: beside --json, else a fresh temporary folder named below
        path = json_path or Path(tempfile.mkdtemp(prefix="opaudit-")) / PARTIAL_DEFAULT
        try:
            partial.save(path)
            err.print(f"partial trace ({partial.meta.total_calls:,} op calls) saved to {path}", style="yellow")
        except OpauditError as save_error:
            err.print(f"the partial trace could not be saved: {save_error.message}", style="red")
    raise typer.Exit(e.exit_code)


@contextmanager
def user_errors(json_path: Path | None = None) -> Iterator[None]:
    """Every error a user can cause ends here: one message, a documented exit code, no traceback."""
    try:
        yield
    except OpauditError as e:
        fail(e, json_path)
    except KeyboardInterrupt:
        err.print("interrupted", style="yellow")
        raise typer.Exit(130) from None


def print_lines(console: Console, lines: list[str]) -> None:
    for line in lines:
        console.print(line, markup=False, highlight=False, soft_wrap=True)


def warn(message: str) -> None:
    err.print(f"warning: {message}", style="yellow", markup=False, highlight=False, soft_wrap=True)
