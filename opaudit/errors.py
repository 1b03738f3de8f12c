"""Errors a user can cause, each with the exit code the command line ends with.

Exit codes (also in docs/cli.md, whose table tests/test_docs.py holds to these constants):

====  ==========================================================================================
0     success (also: a script stopped by ``--max-ops`` or ``--timeout``, which is what they ask for)
2     bad input: a path that does not exist, a model file without a factory, a trace file of
      another schema, an unknown option value
3     the user's code failed: the model factory, ``get_inputs``, the forward pass, the loss, the
      optimizer, or a traced script raised or exited with a non-zero status
4     the trace could not be written (output path not writable)
5     ``run --simulate``: the program ran, but no op reached the simulated device (``--allow-empty``:
      a warning and 0)
====  ==========================================================================================
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_USER_CODE = 3
EXIT_OUTPUT = 4
EXIT_EMPTY = 5


class OpauditError(Exception):
    """A failure with one clear message for the user; never shown as a traceback."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, message: str, *, hint: str | None = None, details: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.details = details


class InputError(OpauditError):
    """The user pointed opaudit at something it cannot use."""

    exit_code = EXIT_BAD_INPUT


class UserCodeError(OpauditError):
    """The user's own code raised; ``details`` holds the user's frames of the traceback."""

    exit_code = EXIT_USER_CODE

    def __init__(self, message: str, *, hint: str | None = None, details: str | None = None, partial=None):
        super().__init__(message, hint=hint, details=details)
        self.partial = partial  # the Trace recorded up to the failure, if any op was recorded


class OutputError(OpauditError):
    """A result could not be written."""

    exit_code = EXIT_OUTPUT


def user_frames(exc: BaseException, *, limit: int = 12) -> str:
    """The frames of ``exc``'s traceback that are the user's: torch, opaudit, runpy and the
    standard library are left out. Formatted like Python's own traceback, innermost last."""
    import os
    import sysconfig
    import traceback

    import torch

    hidden = [os.path.dirname(torch.__file__), os.path.dirname(__file__)]
    stdlib = os.path.realpath(sysconfig.get_paths()["stdlib"])
    lines = []
    for fs in traceback.extract_tb(exc.__traceback__):
        fn = os.path.realpath(fs.filename) if os.path.isabs(fs.filename) else fs.filename
        if fn.startswith("<frozen") or any(fn.startswith(h + os.sep) for h in hidden):
            continue
        if fn.startswith(stdlib + os.sep) and "site-packages" not in fn and "dist-packages" not in fn:
            continue
        lines.append(f'  File "{fs.filename}", line {fs.lineno}, in {fs.name}')
        if fs.line:
            lines.append(f"    {fs.line}")
    if len(lines) > 2 * limit:
        lines = ["  ..."] + lines[-2 * limit:]
    return "\n".join(lines)


def describe_exception(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    if len(lines) > 8:
        lines = lines[:8] + ["..."]
    text = "\n".join(lines)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class NothingRehearsed(OpauditError):
    """A rehearsal in which no op reached the simulated device: the program ran on the CPU only."""

    exit_code = EXIT_EMPTY
