"""Running an unmodified script with the fallback: ``opaudit run --simulate ascend script.py ARGS...``.

The script runs as ``__main__`` with its own argv, under a simulation of the target (simulator.Simulator)
or with fallback kernels installed on the live device (live.install). With ``record``, the ops the
script issues are traced as well, so that the run yields an Audit with its fallback statistics attached
(the HTML report's fallback section).

Whatever happens, the statistics gathered so far come back: a script that raises, an op the target
lacks under ``strict``, a fallback that itself fails. The error names the op, the target and the user's
source line.
"""

from __future__ import annotations

import faulthandler
import importlib
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

from opaudit.errors import InputError, OpauditError, UserCodeError, describe_exception, user_frames
from opaudit.fallback.stats import Stats


class RunFailed(UserCodeError):
    """The script did not complete; ``stats`` holds what the fallback counted until then, ``trace`` (a recorded
    run) the ops recorded until then."""

    def __init__(self, message: str, *, stats: Stats, details: str | None = None, hint: str | None = None,
                 trace: Any = None):
        super().__init__(message, details=details, hint=hint)
        self.stats = stats
        self.trace = trace


def check_reached(result: RunResult, *, allow_empty: bool = False) -> str | None:
    """A rehearsal in which no op reached the simulated device (the program never moved its model or data
    there) rehearsed nothing: NothingRehearsed, or with ``allow_empty`` the warning to show."""
    from opaudit.errors import NothingRehearsed

    st = result.stats
    if st.kind != "simulated" or sum(st.calls.values()) > 0:
        return None
    msg = (f"no op reached the simulated {st.device} device: the program ran on the CPU only, so nothing of "
           f"{st.target} was rehearsed")
    if allow_empty:
        return msg
    hint = (f"move the model and its inputs to the device ('{st.device}', or 'cuda', which the rehearsal maps "
            "unless --no-map-cuda); --allow-empty accepts a run that uses no device")
    raise NothingRehearsed(msg, hint=hint)


@dataclass
class RunResult:
    stats: Stats
    trace: Any = None  # a Trace when recorded


def run_script(path: str, argv: list[str] | None = None, *, simulate: str | None = None, fallback: str | None = None,
               strict: bool = False, strict_unknown: bool = False, check_numerics: bool = False,
               map_cuda: bool = True,
               force_cpu: tuple[str, ...] = (), forbid: tuple[str, ...] = (), record: bool = False,
               module: bool = False, imports: tuple[str, ...] = ()) -> RunResult:
    """Run ``path`` (or a module with ``module``) under ``simulate=TARGET`` or ``fallback=TARGET``;
    ``imports`` are imported first (the plugin that registers the device, where it is not the target's
    own package)."""
    from opaudit.fallback.live import FallbackFailed, install
    from opaudit.fallback.references import RehearsalLimit
    from opaudit.rehearsal.simulator import SimulatedMissing, Simulator
    from opaudit.tracing.script import argv_and_path, locate, run_main

    if (simulate is None) == (fallback is None):
        raise InputError("give one of --simulate TARGET (a CPU rehearsal) or --fallback TARGET (the live device)")
    argv = list(argv or [])
    path0, shown = locate(path, module)
    ctx: Any
    if simulate is not None:
        ctx = Simulator(simulate, strict=strict, strict_unknown=strict_unknown, check_numerics=check_numerics,
                        map_devices=("cuda",) if map_cuda else (), force_cpu=force_cpu, forbid=forbid)
    else:
        assert fallback is not None
        for name in imports:
            try:
                importlib.import_module(name)
            except ImportError as e:
                raise InputError(f"--import {name}: {e}") from None
        ctx = install(fallback, force_cpu=force_cpu, forbid=forbid, check_numerics=check_numerics)
    stats: Stats = ctx.stats
    rec = None
    if record:
        from opaudit.tracing.device import simulated_meta
        from opaudit.tracing.run import Recorder

        sim = ctx if simulate is not None else None  # a rehearsal's trace tells the host's calls apart
        rec = Recorder(source={"kind": "script", "path": shown, "argv": argv, "module": module},
                       device=sim.device_type if sim is not None else None,
                       simulated=simulated_meta(sim))
    failure: BaseException | None = None
    # a crash in native code cannot be caught: at least Python's traceback (with the user's line) is printed
    crash_report = not faulthandler.is_enabled()
    if crash_report:
        faulthandler.enable()
    try:
        with argv_and_path([shown, *argv], path0), ctx, rec or nullcontext():
            run_main(shown, module)
    except SystemExit as e:
        if e.code not in (None, 0):
            failure = e
    except OpauditError:
        raise
    except Exception as e:
        failure = e
    finally:
        if crash_report:
            faulthandler.disable()
    if failure is None:
        return RunResult(stats, rec.trace if rec is not None else None)
    target = stats.target
    if isinstance(failure, SimulatedMissing):
        msg = f"{shown} stopped on {target} (--strict): {str(failure).split(' This could be')[0]}"
        hint = _hint(failure)
    elif isinstance(failure, RehearsalLimit) or isinstance(failure.__cause__, RehearsalLimit):
        cause = failure if isinstance(failure, RehearsalLimit) else failure.__cause__
        msg = f"{shown} stopped on {target}: {cause}"
        if "stand-in cannot take" in msg:
            hint = "coverage_db/curated/device_selected.toml says which path each device kind and PyTorch line takes"
        elif "device data in tensors only" in msg:
            hint = ("tensors, torch.save and torch.load work on the simulated device; storages made for it "
                    "directly do not")
        else:
            hint = "coverage_db/curated/no_cpu_kernel.toml lists the ops the rehearsal cannot run, and why"
    elif isinstance(failure, FallbackFailed) or isinstance(failure.__cause__, FallbackFailed):
        cause = failure if isinstance(failure, FallbackFailed) else failure.__cause__
        msg = str(cause)
        if "(cpu)" in msg and "from the 'CPU' backend" in msg:  # the CPU round trip itself failed: no CPU kernel
            hint = "the CPU has no kernel for this op, so --cpu cannot run it either; forbid its fallback (--forbid OP)"
        else:
            hint = "send the op to the CPU (--cpu OP) or forbid its fallback (--forbid OP)"
    elif isinstance(failure, SystemExit):
        msg, hint = f"{shown} exited with status {failure.code!r} under {target}", None
    else:
        msg, hint = f"{shown} failed under {target}: {describe_exception(failure)}", None
    trace = rec.trace if rec is not None and rec.recording.total else None
    raise RunFailed(msg, stats=stats, details=user_frames(failure), hint=hint, trace=trace) from None


def _hint(e: BaseException) -> str:
    text = str(e)
    if "[simulated" in text:
        text = text[text.index("[simulated") + 1:].rstrip("]")
    return f"{text}; without --strict opaudit's fallback runs it (and counts it)"
