"""``opaudit run``: run a script with opaudit's fallback, on a live device or rehearsed on the CPU."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from opaudit.cli.console import err, out, print_lines, user_errors, warn
from opaudit.cli.options import ScriptIsModule
from opaudit.cli.progress import LiveLine
from opaudit.errors import OpauditError

if TYPE_CHECKING:
    from opaudit.rehearsal.script import RunFailed


def run(
    ctx: typer.Context,
    simulate: Annotated[str | None, typer.Option("--simulate", metavar="TARGET", help="Rehearse on the CPU as if on "
                                                 "TARGET (vendor or vendor@release): its device, its runtime calls, "
                                                 "its op matrix.")] = None,
    fallback: Annotated[str | None, typer.Option("--fallback", metavar="TARGET", help="Run on the live device of "
                                                 "TARGET with opaudit's fallback kernels for the ops it "
                                                 "lacks.")] = None,
    strict: Annotated[bool, typer.Option("--strict", help="Simulation: an op the target lacks fails as on the device "
                                         "(else opaudit's fallback runs it).")] = False,
    strict_unknown: Annotated[bool, typer.Option("--strict-unknown", help="Simulation: --strict, and an op the data "
                                                 "knows nothing about (unknown) fails too (else it runs as if native "
                                                 "and the summary names it).")] = False,
    check_numerics: Annotated[bool, typer.Option("--check-numerics", help="Compare every decomposed or fallen-back "
                                                 "op with the CPU reference; report the worst relative error per "
                                                 "op.")] = False,
    no_map_cuda: Annotated[bool, typer.Option("--no-map-cuda", help="Simulation: leave 'cuda' alone (by default an "
                                              "unported CUDA script runs on the simulated device).")] = False,
    cpu_ops: Annotated[list[str] | None, typer.Option("--cpu", metavar="OP", help="Send this op to the CPU "
                                                      "(repeatable).")] = None,
    forbid: Annotated[list[str] | None, typer.Option("--forbid", metavar="OP", help="Never fall back for this op: it "
                                                     "fails as on the device (repeatable).")] = None,
    module: ScriptIsModule = False,
    imports: Annotated[list[str] | None, typer.Option("--import", metavar="MODULE", help="--fallback: import this "
                                                      "module first, the plugin that registers the device "
                                                      "(repeatable; default: the target's own package).")] = None,
    stats_path: Annotated[Path | None, typer.Option("--stats", help="Write the fallback statistics as JSON here (also "
                                                    "written, partial, when the run fails).")] = None,
    html: Annotated[Path | None, typer.Option("--html", help="Trace the run too and write the HTML report, with the "
                                              "fallback summary, here.")] = None,
    audit_json: Annotated[Path | None, typer.Option("--audit-json", help="Trace the run too and write the audit, with "
                                                    "the fallback statistics, as JSON here.")] = None,
    allow_empty: Annotated[bool, typer.Option("--allow-empty", help="Simulation: a run in which no op reached the "
                                              "device is a warning (exit 0), not an error (exit 5).")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print only the summary line, and no progress "
                                        "line.")] = False,
) -> None:
    """Run a script with the fallback: opaudit run --simulate ascend -- train.py ARGS..."""
    from opaudit.rehearsal.script import RunFailed, check_reached, run_script

    args = list(ctx.args)
    with user_errors():
        if not args:
            raise OpauditError("no script given", hint="opaudit run --simulate ascend -- train.py --its --own --args")
        outputs = {k: str(v) for k, v in (("html", html), ("json", audit_json)) if v is not None}
        from opaudit.report import check_writable

        for p in [*outputs.values(), *([str(stats_path)] if stats_path else [])]:
            check_writable(p)
        if simulate is not None:
            from opaudit.tracing.script import locate

            locate(args[0], module)  # a script that is not there, said before the first use builds the device
            rehearsal_device()
        try:
            with LiveLine(f"run {args[0]} on {simulate or fallback}" + (" (simulated)" if simulate else ""),
                          enabled=not quiet, unit="calls on the fallback", count=_fallback_calls):
                result = run_script(args[0], args[1:], simulate=simulate, fallback=fallback, strict=strict,
                                    strict_unknown=strict_unknown,
                                    check_numerics=check_numerics, map_cuda=not no_map_cuda,
                                    force_cpu=tuple(cpu_ops or ()), forbid=tuple(forbid or ()),
                                    record=bool(outputs), module=module, imports=tuple(imports or ()))
        except RunFailed as e:
            print_lines(err, e.stats.lines()[: 1 if quiet else None])
            saved = save_partial(e, stats_path, html=html is not None)
            err.print(f"partial fallback statistics saved to {saved[0]}"
                      + (f"; the audit so far to {', '.join(saved[1:])}" if saved[1:] else ""),
                      style="yellow", markup=False, highlight=False, soft_wrap=True)
            raise
        print_lines(out, result.stats.lines()[: 1 if quiet else None])
        if stats_path:
            result.stats.save(stats_path)
            err.print(f"fallback statistics written to {stats_path}", style="green")
        if outputs and result.trace is not None:
            from opaudit.auditing import audit
            from opaudit.report import write_reports

            a = audit(result.trace, [result.stats.target], fallback=[result.stats])
            for p in write_reports(a, outputs):
                err.print(f"report written to {p}", style="green")
        if simulate is not None:
            warning = check_reached(result, allow_empty=allow_empty)
            if warning:
                warn(warning)


PARTIAL_STATS = "opaudit-fallback.partial.json"
PARTIAL_AUDIT = "opaudit-audit.partial"  # .json, .html


def save_partial(e: RunFailed, stats_path: str | Path | None, *, html: bool = False) -> list[str]:
    """Save what a failed run gathered: the statistics to ``stats_path``, else into a new temporary folder
    (never the working folder), and, for a traced run, the audit so far beside them (JSON, and HTML with
    ``html``). The written paths."""
    import tempfile

    from opaudit.report import write_reports

    if stats_path is not None:
        path = Path(stats_path)
        folder = path.parent
    else:
        folder = Path(tempfile.mkdtemp(prefix="opaudit-run-"))
        path = folder / PARTIAL_STATS
    e.stats.save(path)
    written = [str(path)]
    if e.trace is not None:
        from opaudit.auditing import audit

        a = audit(e.trace, [e.stats.target], fallback=[e.stats])
        outputs = {"json": str(folder / f"{PARTIAL_AUDIT}.json")}
        if html:
            outputs["html"] = str(folder / f"{PARTIAL_AUDIT}.html")
        written += write_reports(a, outputs)
    return written


def _fallback_calls() -> int | None:
    """The calls a rehearsal has sent to the fallback so far (the progress line's number; read from its thread)."""
    from opaudit.rehearsal.tensor import state

    sim = state.sim
    return sim.stats.fallback_calls() if sim is not None else None


def rehearsal_device() -> None:
    """Build (on first use: say so) and load the rehearsal's C++ device, unless the wrapper engine was asked for;
    where it cannot be built, say why: the rehearsal runs on the wrapper engine (opaudit.rehearsal.native)."""
    from opaudit.rehearsal import native

    if not native.wanted():
        return

    def note(text: str) -> None:
        err.print(text, style="dim", markup=False, highlight=False)

    if native.load(note=note) is None:
        note(f"{native.reason()}\nthe rehearsal runs on its wrapper engine instead (slower; "
             f"{native.ENV_ENGINE}=wrapper skips the build)")
