"""Tracing an unmodified script: its ``__main__``, its argv, under the recorder.

``opaudit trace -- train.py --epochs 1`` runs ``train.py`` as ``python train.py --epochs 1`` would,
with every op recorded. ``max_ops`` and ``timeout`` end a long training run early; what was
recorded up to then is the trace (status ``stopped``). Ops run in other threads or in DataLoader
worker processes are not seen (a dispatch mode is per thread).
"""

from __future__ import annotations

import os
import runpy
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

from opaudit.errors import InputError, UserCodeError, describe_exception, user_frames
from opaudit.matrix import load_targets
from opaudit.tracing.device import TraceDevice, check_device, device_name, simulated_meta
from opaudit.tracing.recorder import TraceStopped
from opaudit.tracing.run import Recorder
from opaudit.tracing.schema import Trace
from opaudit.tracing.variants import follow_autocast


def locate(target: str, module: bool) -> tuple[str, str]:
    """(the folder put first on sys.path, the name shown and run) of a script path, a folder with
    ``__main__.py``, or (``module``) a module name; InputError when there is none."""
    if module:
        # as python -m: the working folder comes first; only the top package is looked for here, since finding
        # a submodule imports its package, which may need what the run provides (a simulated plugin)
        import importlib.util

        sys.path.insert(0, os.getcwd())
        try:
            found = importlib.util.find_spec(target.split(".")[0])
        except (ImportError, ValueError):
            found = None
        finally:
            sys.path.pop(0)
        if found is None:
            raise InputError(f"no module named {target!r}")
        return os.getcwd(), target
    path = Path(target)
    if not path.exists():
        raise InputError(f"script not found: {target}")
    if path.is_dir() and not (path / "__main__.py").exists():
        raise InputError(f"{target} is a folder without __main__.py")
    return str(path.resolve().parent if path.is_file() else path.resolve()), str(path)


def run_main(target: str, module: bool) -> None:
    """Run ``target`` as ``__main__``, as ``python target`` or ``python -m target`` would."""
    if module:
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
        runpy.run_path(target, run_name="__main__")


@contextmanager
def argv_and_path(argv: list[str], path0: str) -> Iterator[None]:
    """Run the body with ``sys.argv`` set to ``argv`` and ``path0`` first on ``sys.path``, as ``python script``
    sets them (the rehearsal's run_script runs a script the same way); both are restored after."""
    old_argv, old_path = sys.argv[:], sys.path[:]
    sys.argv = argv
    sys.path.insert(0, path0)
    try:
        yield
    finally:
        sys.argv, sys.path[:] = old_argv, old_path


@contextmanager
def _alarm(seconds: float | None, rec: Recorder) -> Iterator[None]:
    """Stop the script after ``seconds`` even while it runs no op (sleeping, loading data)."""
    if seconds is None or threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def on_alarm(signum, frame):
        rec.recording.stopped = f"stopped after {seconds:g} s (--timeout)"
        raise TraceStopped(rec.recording.stopped)

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def trace_script(
    target: str,
    argv: list[str] | None = None,
    *,
    module: bool = False,
    max_ops: int | None = None,
    timeout: float | None = None,
    shapes: bool = False,
    progress: Callable[[int], None] | None = None,
    device: str | TraceDevice = "cpu",
    targets: Sequence[Any] | None = None,
    on_retrace: Callable[[str], None] | None = None,
) -> Trace:
    """Run ``target`` (a script path, or a module name with ``module=True``) as ``__main__``, on ``device``:
    ``cpu`` as it is, or a device tracing is given (tracing.device: ``opaudit.standin.cuda()``, simulated on the
    CPU, so that the script takes its CUDA branches; ``opaudit trace`` does it by default).

    ``targets``: the targets the trace will be audited against. Where one of them runs an autocast region of the
    script otherwise than CUDA (off for the dtype, or in another one), the script runs again that way, once per such
    outcome (``Trace.variants``; ``on_retrace`` hears of each before it runs). The script then runs more than once:
    what it does once only (reading its standard input, making a folder) may stop the later run, which the trace
    says (its targets are then judged by the CUDA path's dtypes)."""
    check_device(device)
    matrices = load_targets(targets or [])  # (a target that does not exist is said before the script runs)
    argv = list(argv or [])
    path0, shown = locate(target, module)
    source = {"kind": "script", "path": shown, "argv": argv, "module": module}

    def once(outcome: dict[str, str] | None = None) -> Trace:
        rec = Recorder(shapes=shapes, max_ops=max_ops, timeout=timeout, progress=progress, source=source,
                       device=device_name(device))
        rec.recording.autocast_outcome = dict(outcome or {})
        failure: BaseException | None = None
        try:
            with argv_and_path([shown, *argv], path0), _alarm(timeout, rec), \
                    (nullcontext() if isinstance(device, str) else device.open()) as sim:
                rec.simulated = simulated_meta(sim)
                with rec:
                    run_main(target, module)
        except SystemExit as e:
            if e.code not in (None, 0):
                failure = e
        except KeyboardInterrupt:
            rec.status, rec.error = "stopped", "interrupted (Ctrl-C)"
        except TraceStopped as e:  # raised by the alarm between ops, outside the recorder's own check
            rec.status, rec.error = "stopped", str(e)
        except Exception as e:
            failure = e
        if failure is None:
            return rec.trace
        if isinstance(failure, SystemExit):
            msg = f"{shown} exited with status {failure.code!r}"
        else:
            msg = f"{shown} failed: {describe_exception(failure)}"
        rec.status, rec.error = "partial", msg
        raise UserCodeError(msg, details=user_frames(failure),
                            partial=rec.trace if rec.recording.total else None) from None

    return follow_autocast(once(), matrices, once, on_retrace)
