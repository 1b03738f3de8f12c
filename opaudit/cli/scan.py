"""``opaudit scan``, ``trace`` and ``report``: trace a model or a script (or load a saved trace), check it
against targets, write the reports."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

import opaudit
from opaudit.cli.console import err, out, user_errors
from opaudit.cli.options import (
    EXIT_FAIL_ON,
    AlsoLint,
    Amp,
    AuditJsonPath,
    AuditOptions,
    CsvPath,
    Device,
    FailOnLevel,
    HtmlPath,
    MarkdownPath,
    Matrices,
    Mode,
    ModelDevice,
    NoAudit,
    NoRetrace,
    Quiet,
    ScriptDevice,
    ScriptIsModule,
    Shapes,
    Targets,
    Top,
    TraceJsonPath,
    TraceMode,
    Train,
)
from opaudit.cli.progress import LiveLine
from opaudit.errors import OpauditError


def scan(
    model: Annotated[str, typer.Argument(help="model.py (with get_model() and get_inputs()), model.py:factory, or a "
                                        "model by name: hf:<model_type>[:Head][?field=value&...], hf:<path to "
                                        "config.json or folder>, hf:<org>/<name> (local Hugging Face cache), "
                                        "diffusers:<ClassName>")],
    train: Train = False,
    steps: Annotated[int, typer.Option("--steps", min=1, help="Forward/backward passes when training; the optimizer "
                                       "steps at least twice (step 1 initialises its state).")] = 1,
    mode: TraceMode = Mode.auto,
    amp: Annotated[Amp | None, typer.Option("--amp", help="Trace the forward pass under CUDA's autocast "
                                            "policy.")] = None,
    device: ModelDevice = Device.cuda,
    shapes: Shapes = False,
    no_retrace: NoRetrace = False,
    json_path: TraceJsonPath = None,
    top: Top = None,
    quiet: Quiet = False,
    targets: Targets = None,
    matrices: Matrices = None,
    no_audit: NoAudit = False,
    fail_on: FailOnLevel = None,
    html: HtmlPath = None,
    csv: CsvPath = None,
    markdown: MarkdownPath = None,
    audit_json: AuditJsonPath = None,
    lint_paths: AlsoLint = None,
) -> None:
    """Trace every aten op a model hits (forward; with --train also backward and optimizer) and check it
    against each target."""
    from opaudit.zoo.specs import load_spec, precheck

    opts = AuditOptions(targets, matrices, no_audit, fail_on, html, csv, markdown, audit_json, lint_paths)
    with user_errors(json_path):
        opts.check(json_path)
        precheck(model)  # a missing file or library says so now, not after the C++ parts' first build
    if mode != Mode.meta and mode != Mode.fake:
        cuda_stand_in(device.value)
    if mode != Mode.fake:
        cpp_recorder()
    with user_errors(json_path):
        spec = load_spec(model)

        with LiveLine(f"scan {model}", enabled=not quiet) as line:
            def said(chosen: str, reason: str) -> None:
                line.stage(f"{chosen} mode")
                if quiet:  # else the op table's header says it
                    err.print(f"mode: {chosen} ({reason})", style="dim", markup=False, highlight=False)

            from opaudit import api

            trace = api.trace(
                spec.make_model, spec.make_inputs, train=train, mode=mode.value, steps=steps,
                loss_fn=spec.loss_fn, optimizer=spec.optimizer, amp=amp.value if amp else None,
                shapes=shapes, progress=line.ops, on_mode=said, on_stage=line.stage, source=spec.source,
                device=device.value, targets=[] if no_retrace else opts.audit_targets(),
                on_retrace=again(line, quiet),
            )
        finish(trace, json_path, top, quiet, opts)


def trace(
    ctx: typer.Context,
    max_ops: Annotated[int | None, typer.Option("--max-ops", min=1, help="Stop after this many op calls.")] = None,
    timeout: Annotated[float | None, typer.Option("--timeout", min=0.001, help="Stop after this many "
                                                  "seconds.")] = None,
    module: ScriptIsModule = False,
    device: ScriptDevice = Device.cuda,
    shapes: Shapes = False,
    no_retrace: NoRetrace = False,
    json_path: TraceJsonPath = None,
    top: Top = None,
    quiet: Quiet = False,
    targets: Targets = None,
    matrices: Matrices = None,
    no_audit: NoAudit = False,
    fail_on: FailOnLevel = None,
    html: HtmlPath = None,
    csv: CsvPath = None,
    markdown: MarkdownPath = None,
    audit_json: AuditJsonPath = None,
    lint_paths: AlsoLint = None,
) -> None:
    """Run an unmodified script under the recorder: opaudit trace [OPTIONS] -- script.py ARGS..."""
    cuda_stand_in(device.value)
    cpp_recorder()
    from opaudit import api

    args = list(ctx.args)
    opts = AuditOptions(targets, matrices, no_audit, fail_on, html, csv, markdown, audit_json, lint_paths)
    with user_errors(json_path):
        opts.check(json_path)
        if not args:
            raise OpauditError("no script given", hint="opaudit trace -- train.py --its --own --args")
        with LiveLine(f"trace {args[0]}", enabled=not quiet) as line:
            result = api.trace_script(args[0], args[1:], module=module, max_ops=max_ops, timeout=timeout,
                                      shapes=shapes, progress=line.ops, device=device.value,
                                      targets=[] if no_retrace else opts.audit_targets(),
                                      on_retrace=again(line, quiet))
        if result.meta.status == "stopped":
            err.print(f"{result.meta.error}; the trace holds what ran until then", style="yellow")
        finish(result, json_path, top, quiet, opts)


def again(line: LiveLine, quiet: bool) -> Any:
    """What a trace says before it runs the code again as a target runs autocast: a line of its own (the code's own
    output follows it), and the progress line's stage."""
    def note(text: str) -> None:
        line.stage(text)
        if not quiet:
            err.print(text, style="dim", markup=False, highlight=False)
    return note


def cuda_stand_in(device: str) -> None:
    """Before torch is imported: where the code runs on cuda, load opaudit's C++ stand-in for CUDA (built on
    first use; opaudit.standin), else the trace runs on the rehearsal's simulated device, as it does when
    the stand-in cannot be built (said here) or is turned off (OPAUDIT_CUDA_STAND_IN=0)."""
    if device != "cuda":
        return
    from opaudit import standin

    def note(text: str) -> None:
        err.print(text, style="dim", markup=False, highlight=False)

    why = standin.prepare(note=note)
    if why is not None and why.startswith("building"):
        note(f"{why}\nthe code runs on the simulated CUDA device instead (slower; OPAUDIT_CUDA_STAND_IN=0 skips "
             "the build)")


def cpp_recorder() -> None:
    """Build (on first use: say so) and load the tracer's C++ recorder; where it cannot be built, say why: the
    Python recorder records instead (opaudit.tracing.native)."""
    from opaudit.tracing import native

    if not native.wanted():
        return

    def note(text: str) -> None:
        err.print(text, style="dim", markup=False, highlight=False)

    if native.load(note=note) is None:
        note(f"{native.reason()}\nthe Python recorder records instead (slower; {native.ENV_ENGINE}=python skips the "
             "build)")


def report(
    trace_file: Annotated[Path, typer.Argument(help="A trace written by scan --json or trace --json.")],
    top: Top = None,
    show_ops: Annotated[bool, typer.Option("--ops", help="Print the trace's op table too.")] = False,
    targets: Targets = None,
    matrices: Matrices = None,
    no_audit: NoAudit = False,
    fail_on: FailOnLevel = None,
    html: HtmlPath = None,
    csv: CsvPath = None,
    markdown: MarkdownPath = None,
    audit_json: AuditJsonPath = None,
    lint_paths: AlsoLint = None,
) -> None:
    """Check a saved trace against targets and write reports, without re-running the model."""
    opts = AuditOptions(targets, matrices, no_audit, fail_on, html, csv, markdown, audit_json, lint_paths)
    with user_errors():
        opts.check()
        t = opaudit.load_trace(trace_file)
        finish(t, None, top, False, opts, show_trace=show_ops or opts.no_audit)


def finish(trace: opaudit.Trace, json_path: Path | None, top: int | None, quiet: bool,
           opts: AuditOptions | None = None, *, show_trace: bool = True) -> None:
    """Show the trace, save it to ``json_path``, then audit it, write the reports and apply ``--fail-on``."""
    from opaudit.report.terminal import render_trace

    if not quiet and show_trace:
        render_trace(trace, out, top=top)
    if json_path is not None:
        trace.save(json_path)
        err.print(f"trace written to {json_path}", style="green")
    if opts is None or opts.no_audit:
        return
    from opaudit.auditing import audit
    from opaudit.report import write_reports
    from opaudit.report.audit import render_audit

    targets = [*(opts.targets or []), *(str(m) for m in opts.matrices or [])] or None
    result = audit(trace, targets)
    render_audit(result, out)
    findings = lint_for_report(result, opts.lint) if opts.lint else None
    for path in write_reports(result, {k: str(v) for k, v in opts.outputs().items()}, lint=findings):
        err.print(f"report written to {path}", style="green")
    if opts.fail_on is not None:
        failing = result.fails_on(opts.fail_on.value)
        if failing:
            err.print(f"--fail-on {opts.fail_on.value}: {', '.join(failing)}", style="bold red")
            raise typer.Exit(EXIT_FAIL_ON)


def lint_for_report(result: Any, paths: list[Path]) -> list[dict[str, str]]:
    """The lint findings of ``paths`` for the report, with the replacements of the first selected target's
    vendor where the linter knows it (else the device-neutral ones)."""
    from opaudit.lint import Settings, run, target_names
    from opaudit.report.lint import relative_path

    vendor = result.verdicts[result.selected[0]].vendor if result.selected else ""
    settings = Settings(target=vendor if vendor in target_names() else "neutral")
    findings = run([str(p) for p in paths], settings).findings
    out.print(f"lint ({settings.target}): {len(findings)} finding{'s' if len(findings) != 1 else ''} in "
              f"{', '.join(str(p) for p in paths)}", markup=False, highlight=False)
    return [{"code": f.code, "where": f"{relative_path(f.path)}:{f.line}:{f.col}", "message": f.message}
            for f in findings]
