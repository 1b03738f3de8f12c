"""The ``opaudit`` command: parse arguments, call the library, render. No logic of its own."""

from __future__ import annotations

import os
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

import opaudit
from opaudit.errors import InputError, OpauditError

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


class Device(str, Enum):
    cuda = "cuda"
    cpu = "cpu"


_DEVICE_HELP = ("The device the code runs on: cuda, simulated on the CPU (no GPU needed), so the code takes its "
                "CUDA branches (autocast, fused optimizers); cpu traces the CPU path.")


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


class FailOn(str, Enum):  # audit.FAIL_ON, worst first
    missing = "missing"
    version_skew = "version_skew"
    unknown = "unknown"
    cpu_fallback = "cpu_fallback"
    composite = "composite"


EXIT_FAIL_ON = 1  # --fail-on: a selected target has an op at that level or worse

_FAIL_ON_HELP = ("Exit with 1 when a selected target has an op at this level or a worse one. Levels, worst first: "
                 "missing, version_skew, unknown, cpu_fallback, composite (so 'unknown' also trips on missing and "
                 "version_skew: a gate that never passes on ops the data knows nothing about).")
_TARGET_HELP = ("Target to check (repeatable): vendor, vendor@release, a matrix file, or 'all' (every release). "
                "Default: the newest published release of every vendor.")


@dataclass
class AuditOptions:
    targets: list[str] | None = None
    matrices: list[Path] | None = None
    no_audit: bool = False
    fail_on: FailOn | None = None
    html: Path | None = None
    csv: Path | None = None
    markdown: Path | None = None
    audit_json: Path | None = None
    lint: list[Path] | None = None

    def outputs(self) -> dict[str, Path]:
        pairs = (("html", self.html), ("csv", self.csv), ("markdown", self.markdown), ("json", self.audit_json))
        return {fmt: p for fmt, p in pairs if p is not None}

    def check(self) -> None:
        """Before a long trace: the targets exist and every output can be written."""
        from opaudit.matrix import load_matrix
        from opaudit.report import check_writable

        if self.no_audit and (self.targets or self.matrices or self.fail_on or self.outputs()):
            raise OpauditError("--no-audit cannot be combined with targets, --fail-on or report outputs")
        for t in self.targets or []:
            if t.strip().lower() != "all":
                load_matrix(t)
        for m in self.matrices or []:
            load_matrix(str(m))
        for path in self.outputs().values():
            check_writable(path)
        for path in self.lint or []:
            if not path.exists():
                raise InputError(f"--lint {path}: no such file or directory")


def _lint_for_report(result: Any, paths: list[Path]) -> list[dict[str, str]]:
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


def _finish(trace: opaudit.Trace, json_path: Path | None, top: int | None, quiet: bool,
            opts: AuditOptions | None = None, *, show_trace: bool = True) -> None:
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
    findings = _lint_for_report(result, opts.lint) if opts.lint else None
    for path in write_reports(result, {k: str(v) for k, v in opts.outputs().items()}, lint=findings):
        err.print(f"report written to {path}", style="green")
    if opts.fail_on is not None:
        failing = result.fails_on(opts.fail_on.value)
        if failing:
            err.print(f"--fail-on {opts.fail_on.value}: {', '.join(failing)}", style="bold red")
            raise typer.Exit(EXIT_FAIL_ON)


@app.command()
def scan(
    model: str = typer.Argument(..., help="model.py (with get_model() and get_inputs()), model.py:factory, or a "
                                "model by name: hf:<model_type>[:Head][?field=value&...], hf:<path to config.json or "
                                "folder>, hf:<org>/<name> (local Hugging Face cache), diffusers:<ClassName>"),
    train: bool = typer.Option(False, "--train", help="Also run loss, backward and optimizer steps."),
    steps: int = typer.Option(1, "--steps", min=1, help="Forward/backward passes when training; the optimizer "
                              "steps at least twice (step 1 initialises its state)."),
    mode: Mode = typer.Option(Mode.auto, "--mode", help="Where tensors live while tracing: real CPU tensors, "
                              "meta (no memory), fake; auto picks real when the model fits comfortably."),
    amp: Amp | None = typer.Option(None, "--amp", help="Trace the forward pass under CUDA's autocast policy."),
    device: Device = typer.Option(Device.cuda, "--device", help=_DEVICE_HELP + " Meta and fake modes trace on "
                                  "their own tensors."),
    shapes: bool = typer.Option(False, "--shapes", help="Record input shapes too (more, finer records)."),
    json_path: Path | None = typer.Option(None, "--json", help="Write the trace as JSON to this path."),
    top: int | None = typer.Option(None, "--top", min=1, help="Show at most this many ops per phase."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Do not print the op table."),
    targets: list[str] | None = typer.Option(None, "--target", "-t", help=_TARGET_HELP),
    matrices: list[Path] | None = typer.Option(None, "--matrix", help="A user-supplied matrix file to check "
                                               "against too (repeatable); see docs/matrix-format.md."),
    no_audit: bool = typer.Option(False, "--no-audit", help="Only trace; check no target."),
    fail_on: FailOn | None = typer.Option(None, "--fail-on", help=_FAIL_ON_HELP),
    html: Path | None = typer.Option(None, "--html", help="Write the self-contained HTML report here."),
    csv: Path | None = typer.Option(None, "--csv", help="Write one row per op x phase x target as CSV here."),
    markdown: Path | None = typer.Option(None, "--markdown", "--md", help="Write a Markdown summary here."),
    audit_json: Path | None = typer.Option(None, "--audit-json", help="Write the audit as JSON here."),
    lint_paths: list[Path] | None = typer.Option(None, "--lint", help="Also lint these files or folders (repeatable);"
                                                 " their findings join the HTML report."),
) -> None:
    """Trace every aten op a model hits (forward; with --train also backward and optimizer) and check it
    against each target."""
    from opaudit.zoo.specs import load_spec

    opts = AuditOptions(targets, matrices, no_audit, fail_on, html, csv, markdown, audit_json, lint_paths)
    with _errors(json_path):
        opts.check()
        spec = load_spec(model)

        def said(chosen: str, reason: str) -> None:
            err.print(f"mode: {chosen} ({reason})", style="dim", markup=False, highlight=False)

        with _progress() as progress:
            trace = opaudit.trace(
                spec.make_model, spec.make_inputs, train=train, mode=mode.value, steps=steps,
                loss_fn=spec.loss_fn, optimizer=spec.optimizer, amp=amp.value if amp else None,
                shapes=shapes, progress=progress, on_mode=said, source=spec.source, device=device.value,
            )
        _finish(trace, json_path, top, quiet, opts)


class Executor(str, Enum):
    local = "local"
    ray = "ray"


@app.command()
def zoo(
    specs: list[str] | None = typer.Argument(None, help="Models: hf:<model_type>[:Head][?field=value&...], hf:<path>,"
                                             " hf:<org>/<name>, diffusers:<ClassName>, model.py[:factory]."),
    from_file: Path | None = typer.Option(None, "--from", help="Read specs from this file, one a line (# comments)."),
    all_of: str | None = typer.Option(None, "--all", metavar="LIBRARY", help="Every model of a library: hf (every "
                                      "transformers model type with a task head, default configuration)."),
    targets: list[str] | None = typer.Option(None, "--target", "-t", help=_TARGET_HELP),
    train: bool = typer.Option(False, "--train", help="Trace a train step (forward, loss, backward, optimizer)."),
    mode: Mode = typer.Option(Mode.auto, "--mode", help="Where tensors live while tracing (auto: meta for models "
                              "that do not fit comfortably)."),
    device: Device = typer.Option(Device.cuda, "--device", help=_DEVICE_HELP),
    jobs: int | None = typer.Option(None, "--jobs", "-j", min=1, help="Models traced at once (default: the CPUs)."),
    timeout: float = typer.Option(600.0, "--timeout", min=1, help="Seconds a model may take before it is recorded "
                                  "as failed (timeout)."),
    memory: float | None = typer.Option(None, "--memory", min=0, help="GiB of address space per model's process "
                                        "(default: 80% of the memory shared by the jobs, at least 4; 0: no cap)."),
    out_dir: Path = typer.Option(Path("zoo"), "--out", help="Folder for zoo.csv, zoo.json and zoo.html."),
    cache: Path | None = typer.Option(None, "--cache", help="Folder of cached results "
                                      "(default: ~/.cache/opaudit/zoo)."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Trace every model again and cache nothing."),
    executor: Executor = typer.Option(Executor.local, "--executor", help="local: processes on this machine; ray: "
                                      "Ray tasks (pip install 'opaudit[ray]')."),
    address: str | None = typer.Option(None, "--address", help="--executor ray: the cluster to use (ray://HOST:10001"
                                       " or auto); default: a local Ray instance."),
) -> None:
    """Every model of a zoo against every target, each model in a process of its own: zoo.csv, zoo.json,
    zoo.html."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from opaudit.zoo import report
    from opaudit.zoo.run import default_cache, run_zoo
    from opaudit.zoo.specs import all_specs, read_spec_file

    with _errors():
        if address and executor != Executor.ray:
            raise OpauditError("--address needs --executor ray")
        names = [*(specs or []), *(read_spec_file(from_file) if from_file else []), *(all_specs(all_of) if all_of
                                                                                      else [])]
        if not names:
            raise OpauditError("no model given", hint="opaudit zoo hf:llama hf:bert ..., --from FILE or --all hf")
        report.check_outputs(out_dir)
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      TextColumn("{task.fields[last]}"), console=err, transient=True) as bar:
            task = bar.add_task("zoo", total=len(names), last="")

            def started(cached: int, to_run: int) -> None:
                bar.update(task, description=f"zoo ({cached} cached)" if cached else "zoo")

            def ended(record: dict) -> None:
                mark = "ok" if record["status"] == "ok" else f"failed: {record.get('reason')}"
                bar.update(task, advance=1, last=f"{record['spec'][:40]} {mark}")

            result = run_zoo(names, targets=targets, train=train, mode=mode.value, device=device.value, jobs=jobs,
                             timeout=timeout, memory=None if memory is None else int(memory * 2**30),
                             cache=None if no_cache else (cache or default_cache()), executor=executor.value,
                             address=address, on_start=started, on_result=ended)
        written = report.write_outputs(result, out_dir)
        _print_lines(out, report.summary(result))
        err.print(f"written: {', '.join(str(p) for p in written)}", style="green")


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def trace(
    ctx: typer.Context,
    max_ops: int | None = typer.Option(None, "--max-ops", min=1, help="Stop after this many op calls."),
    timeout: float | None = typer.Option(None, "--timeout", min=0.001, help="Stop after this many seconds."),
    module: bool = typer.Option(False, "-m", help="The target is a module name, as with python -m."),
    device: Device = typer.Option(Device.cuda, "--device", help=_DEVICE_HELP),
    shapes: bool = typer.Option(False, "--shapes", help="Record input shapes too."),
    json_path: Path | None = typer.Option(None, "--json", help="Write the trace as JSON to this path."),
    top: int | None = typer.Option(None, "--top", min=1, help="Show at most this many ops per phase."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Do not print the op table."),
    targets: list[str] | None = typer.Option(None, "--target", "-t", help=_TARGET_HELP),
    matrices: list[Path] | None = typer.Option(None, "--matrix", help="A user-supplied matrix file to check "
                                               "against too (repeatable); see docs/matrix-format.md."),
    no_audit: bool = typer.Option(False, "--no-audit", help="Only trace; check no target."),
    fail_on: FailOn | None = typer.Option(None, "--fail-on", help=_FAIL_ON_HELP),
    html: Path | None = typer.Option(None, "--html", help="Write the self-contained HTML report here."),
    csv: Path | None = typer.Option(None, "--csv", help="Write one row per op x phase x target as CSV here."),
    markdown: Path | None = typer.Option(None, "--markdown", "--md", help="Write a Markdown summary here."),
    audit_json: Path | None = typer.Option(None, "--audit-json", help="Write the audit as JSON here."),
    lint_paths: list[Path] | None = typer.Option(None, "--lint", help="Also lint these files or folders (repeatable);"
                                                 " their findings join the HTML report."),
) -> None:
    """Run an unmodified script under the recorder: opaudit trace [OPTIONS] -- script.py ARGS..."""
    from opaudit.tracing.script import trace_script

    args = list(ctx.args)
    opts = AuditOptions(targets, matrices, no_audit, fail_on, html, csv, markdown, audit_json, lint_paths)
    with _errors(json_path):
        opts.check()
        if not args:
            raise OpauditError("no script given", hint="opaudit trace -- train.py --its --own --args")
        with _progress() as progress:
            result = trace_script(args[0], args[1:], module=module, max_ops=max_ops, timeout=timeout,
                                  shapes=shapes, progress=progress, device=device.value)
        if result.meta.status == "stopped":
            err.print(f"{result.meta.error}; the trace holds what ran until then", style="yellow")
        _finish(result, json_path, top, quiet, opts)


def _print_lines(console: Console, lines: list[str]) -> None:
    for line in lines:
        console.print(line, markup=False, highlight=False, soft_wrap=True)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def run(
    ctx: typer.Context,
    simulate: str | None = typer.Option(None, "--simulate", metavar="TARGET", help="Rehearse on the CPU as if on "
                                        "TARGET (vendor or vendor@release): its device, its runtime calls, its op "
                                        "matrix."),
    fallback: str | None = typer.Option(None, "--fallback", metavar="TARGET", help="Run on the live device of "
                                        "TARGET with opaudit's fallback kernels for the ops it lacks."),
    strict: bool = typer.Option(False, "--strict", help="Simulation: an op the target lacks fails as on the device "
                                "(else opaudit's fallback runs it)."),
    strict_unknown: bool = typer.Option(False, "--strict-unknown", help="Simulation: --strict, and an op the "
                                        "data knows nothing about (unknown) fails too (else it runs as if native "
                                        "and the summary names it)."),
    check_numerics: bool = typer.Option(False, "--check-numerics", help="Compare every decomposed or fallen-back "
                                        "op with the CPU reference; report the worst relative error per op."),
    no_map_cuda: bool = typer.Option(False, "--no-map-cuda", help="Simulation: leave 'cuda' alone (by default an "
                                     "unported CUDA script runs on the simulated device)."),
    cpu_ops: list[str] | None = typer.Option(None, "--cpu", metavar="OP", help="Send this op to the CPU (repeatable)."),
    forbid: list[str] | None = typer.Option(None, "--forbid", metavar="OP", help="Never fall back for this op: it "
                                            "fails as on the device (repeatable)."),
    module: bool = typer.Option(False, "-m", help="The target is a module name, as with python -m."),
    imports: list[str] | None = typer.Option(None, "--import", metavar="MODULE", help="--fallback: import this "
                                             "module first, the plugin that registers the device (repeatable; "
                                             "default: the target's own package)."),
    stats_path: Path | None = typer.Option(None, "--stats", help="Write the fallback statistics as JSON here "
                                           "(also written, partial, when the run fails)."),
    html: Path | None = typer.Option(None, "--html", help="Trace the run too and write the HTML report, with "
                                     "the fallback summary, here."),
    audit_json: Path | None = typer.Option(None, "--audit-json", help="Trace the run too and write the audit, "
                                           "with the fallback statistics, as JSON here."),
    allow_empty: bool = typer.Option(False, "--allow-empty", help="Simulation: a run in which no op reached the "
                                     "device is a warning (exit 0), not an error (exit 5)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print only the summary line."),
) -> None:
    """Run a script with the fallback: opaudit run --simulate ascend -- train.py ARGS..."""
    from opaudit.fallback.script import RunFailed, check_reached, run_script, save_partial

    args = list(ctx.args)
    with _errors():
        if not args:
            raise OpauditError("no script given", hint="opaudit run --simulate ascend -- train.py --its --own --args")
        outputs = {k: str(v) for k, v in (("html", html), ("json", audit_json)) if v is not None}
        from opaudit.report import check_writable

        for p in [*outputs.values(), *([str(stats_path)] if stats_path else [])]:
            check_writable(p)
        try:
            result = run_script(args[0], args[1:], simulate=simulate, fallback=fallback, strict=strict,
                                strict_unknown=strict_unknown,
                                check_numerics=check_numerics, map_cuda=not no_map_cuda,
                                force_cpu=tuple(cpu_ops or ()), forbid=tuple(forbid or ()),
                                record=bool(outputs), module=module, imports=tuple(imports or ()))
        except RunFailed as e:
            _print_lines(err, e.stats.lines()[: 1 if quiet else None])
            saved = save_partial(e, stats_path, html=html is not None)
            err.print(f"partial fallback statistics saved to {saved[0]}"
                      + (f"; the audit so far to {', '.join(saved[1:])}" if saved[1:] else ""),
                      style="yellow", markup=False, highlight=False, soft_wrap=True)
            raise
        _print_lines(out, result.stats.lines()[: 1 if quiet else None])
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
                err.print(f"warning: {warning}", style="yellow", markup=False, highlight=False, soft_wrap=True)


@app.command()
def report(
    trace_file: Path = typer.Argument(..., help="A trace written by scan --json or trace --json."),
    top: int | None = typer.Option(None, "--top", min=1, help="Show at most this many ops per phase."),
    show_ops: bool = typer.Option(False, "--ops", help="Print the trace's op table too."),
    targets: list[str] | None = typer.Option(None, "--target", "-t", help=_TARGET_HELP),
    matrices: list[Path] | None = typer.Option(None, "--matrix", help="A user-supplied matrix file to check "
                                               "against too (repeatable); see docs/matrix-format.md."),
    no_audit: bool = typer.Option(False, "--no-audit", help="Only trace; check no target."),
    fail_on: FailOn | None = typer.Option(None, "--fail-on", help=_FAIL_ON_HELP),
    html: Path | None = typer.Option(None, "--html", help="Write the self-contained HTML report here."),
    csv: Path | None = typer.Option(None, "--csv", help="Write one row per op x phase x target as CSV here."),
    markdown: Path | None = typer.Option(None, "--markdown", "--md", help="Write a Markdown summary here."),
    audit_json: Path | None = typer.Option(None, "--audit-json", help="Write the audit as JSON here."),
    lint_paths: list[Path] | None = typer.Option(None, "--lint", help="Also lint these files or folders (repeatable);"
                                                 " their findings join the HTML report."),
) -> None:
    """Check a saved trace against targets and write reports, without re-running the model."""
    opts = AuditOptions(targets, matrices, no_audit, fail_on, html, csv, markdown, audit_json, lint_paths)
    with _errors():
        opts.check()
        t = opaudit.load_trace(trace_file)
        _finish(t, None, top, False, opts, show_trace=show_ops or opts.no_audit)


db_app = typer.Typer(no_args_is_help=True, help="Build and check the coverage database (coverage_db/).")
matrix_app = typer.Typer(no_args_is_help=True, help="What each target release supports.")
app.add_typer(db_app, name="db")
app.add_typer(matrix_app, name="matrix")


@db_app.command("build")
def db_build(
    sources: Path | None = typer.Option(None, "--sources", help="The staged upstream sources "
                                           "(default: ../shared/upstream beside the repository)."),
    out: Path | None = typer.Option(None, "--out", help="Where to write (default: the package's coverage_db/)."),
) -> None:
    """Rebuild coverage_db/ from the vendors' staged files: deterministic, with provenance on every file."""
    from opaudit.data import data_dir
    from opaudit.matrix.build import default_sources, generate, write

    with _errors():
        src = sources or default_sources()
        target = out or data_dir("coverage_db")
        report = generate(src)
        write(report, target)
        for w in report.warnings:
            err.print(f"warning: {w}", style="yellow", markup=False, highlight=False)
        err.print(f"{len(report.releases)} releases, {len(report.files)} files written to {target}", style="green")


@db_app.command("check")
def db_check(
    sources: Path | None = typer.Option(None, "--sources", help="The staged upstream sources."),
) -> None:
    """Exit 1 when coverage_db/ differs from a rebuild of its sources."""
    from opaudit.data import data_dir
    from opaudit.matrix.build import default_sources, differences, generate

    with _errors():
        diffs = differences(generate(sources or default_sources()), data_dir("coverage_db"))
        for d in diffs:
            out.print(d, markup=False, highlight=False)
        if diffs:
            err.print(f"{len(diffs)} files differ: run opaudit db build", style="red")
            raise typer.Exit(1)
        err.print("coverage_db is in sync with its sources", style="green")


@matrix_app.command("list")
def matrix_list(
    vendors: list[str] | None = typer.Argument(None, help="Vendors to list (default: all)."),
    compat: bool = typer.Option(False, "--compat", help="The PyTorch x vendor compatibility table instead."),
) -> None:
    """Vendors and releases, with the PyTorch version and op counts of each."""
    from opaudit.matrix import load_database
    from opaudit.report.matrix import render_compatibility, render_list

    with _errors():
        db = load_database()
        for v in vendors or []:
            db.find(v)  # an unknown vendor: one clear message
        if compat:
            render_compatibility(db, out)
        else:
            render_list(db, out, [v.lower() for v in vendors] if vendors else None)


@matrix_app.command("show")
def matrix_show(
    target: str | None = typer.Argument(None, help="vendor, vendor@release (package version, tag or vendor "
                                        "release), or a matrix file (.toml)."),
    matrix: Path | None = typer.Option(None, "--matrix", help="A user-supplied matrix file instead of a target."),
    ops: list[str] | None = typer.Option(None, "--op", help="Ops to resolve (repeatable), e.g. aten::add.Tensor."),
) -> None:
    """One release: its facts, provenance, and how given ops run on it."""
    from opaudit.matrix import load_matrix
    from opaudit.report.matrix import render_release

    with _errors():
        if (target is None) == (matrix is None):
            raise InputError("name one target, or one --matrix FILE", hint="e.g. opaudit matrix show ascend")
        render_release(load_matrix(str(matrix) if matrix is not None else str(target)), out, ops)


@matrix_app.command("diff")
def matrix_diff(a: str = typer.Argument(..., help="A target."), b: str = typer.Argument(..., help="Another.")) -> None:
    """Ops gained and lost between two releases (or two vendors)."""
    from opaudit.matrix import load_matrix
    from opaudit.matrix.coverage import diff
    from opaudit.report.matrix import render_diff

    with _errors():
        ma, mb = load_matrix(a), load_matrix(b)
        render_diff(diff(ma.release, mb.release), out, ma.key, mb.key)


@matrix_app.command("coverage")
def matrix_coverage(vendors: list[str] | None = typer.Argument(None, help="Vendors (default: all).")) -> None:
    """Each release as a share of the CUDA kernels of its PyTorch version."""
    from opaudit.matrix import load_database, load_matrix
    from opaudit.matrix.coverage import coverage
    from opaudit.report.matrix import render_coverage

    with _errors():
        db = load_database()
        rows = []
        for v in vendors or [v for v in db.vendors if v != "cuda"]:
            db.find(v)
            for e in db.by_vendor[v.lower()]:
                c = coverage(load_matrix(e.key, db=db))
                if c is not None:
                    rows.append(c)
        render_coverage(rows, out)


@matrix_app.command("probe")
def matrix_probe(
    device: str = typer.Option("cpu", "--device", help="Device type to probe (npu, mlu, xpu, cpu, meta, ...)."),
    imports: list[str] | None = typer.Option(None, "--import", help="Modules to import first (the plugin)."),
    out_file: Path | None = typer.Option(None, "--out", help="Write the probed matrix as a matrix file."),
    ops: list[str] | None = typer.Option(None, "--op", help="Ops to resolve against the probed matrix."),
) -> None:
    """Build a matrix from the live dispatcher of an installed backend."""
    from opaudit.matrix.matrix import Matrix
    from opaudit.matrix.probe import installed_torch_ops, probe
    from opaudit.report.matrix import render_release
    with _errors():
        release = probe(device, imports=tuple(imports or ()))
        render_release(Matrix(release, installed_torch_ops()), out, ops)
        if out_file is not None:
            text = release.to_toml(f"{release.key}: probed by opaudit matrix probe")
            try:
                out_file.write_text(text, encoding="utf-8")
            except OSError as e:
                raise OpauditError(f"cannot write {out_file}: {e}") from None
            err.print(f"matrix written to {out_file}", style="green")


@app.command()
def doctor() -> None:
    """The installed torch and device plugins, whether they match, and the device variables set."""
    from opaudit.matrix.doctor import examine

    with _errors():
        r = examine()
        out.print(f"torch {r.torch}" + (f" (CUDA {r.torch_cuda})" if r.torch_cuda else " (no CUDA)"))
        if not r.plugins:
            out.print("no vendor device plugin installed")
        for p in r.plugins:
            if p.installed is None:
                out.print(f"{p.module}: not installed, but its variables are set: {p.env}")
                continue
            line = f"{p.module} {p.installed}"
            if p.built_for:
                verdict = "matches" if p.matches else "does NOT match"
                line += f": built for PyTorch {p.built_for} ({p.release}), which {verdict} torch {r.torch}"
            else:
                line += ": not a release in coverage_db (cannot tell the PyTorch it needs)"
            out.print(line, style="" if p.matches in (True, None) else "bold red", markup=False, highlight=False)
        for k, v in sorted(r.env.items()):
            out.print(f"{k}={v}", markup=False, highlight=False)


# -- lint and fix ----------------------------------------------------------------------------------------
class LintFormat(str, Enum):
    text = "text"
    json = "json"
    sarif = "sarif"
    github = "github"


EXIT_FINDINGS = 1  # lint: findings remain; fix --diff: there are changes to make


def _lint_settings(paths: list[str], target: str | None, select: list[str] | None, ignore: list[str] | None,
                   extend_select: list[str] | None, min_torch: str | None, unsafe_fixes: bool | None,
                   exclude: list[str] | None, *, default_target: str | None,
                   respect_gitignore: bool | None = None, force_exclude: bool | None = None,
                   guarded_import: bool | None = None) -> Any:
    from opaudit.lint import Settings, find_config

    config = find_config(next((p for p in paths if p != "-"), None))

    def listed(cli: list[str] | None, key: str) -> tuple[str, ...]:
        values = cli if cli else config.get(key, [])
        return tuple(x for v in values for x in v.split(",") if x.strip())

    chosen = target or config.get("target") or default_target
    if chosen is None:
        raise InputError("name the target to fix for", hint="--target ascend|cambricon|biren|musa|xpu|mps|rocm|neutral,"
                         " or target = \"...\" in [tool.opaudit] of pyproject.toml")
    settings = Settings(target=chosen, select=listed(select, "select"), ignore=listed(ignore, "ignore"),
                        extend_select=listed(extend_select, "extend-select"),
                        min_torch=min_torch or config.get("min-torch") or Settings.min_torch,
                        unsafe_fixes=bool(unsafe_fixes if unsafe_fixes is not None else config.get("unsafe-fixes",
                                                                                                    False)),
                        exclude=(*config.get("extend-exclude", []), *(exclude or [])),
                        exclude_defaults=tuple(config.get("exclude")) if config.get("exclude") is not None else None,
                        respect_gitignore=respect_gitignore if respect_gitignore is not None else
                        bool(config.get("respect-gitignore", True)),
                        force_exclude=force_exclude if force_exclude is not None else
                        bool(config.get("force-exclude", False)),
                        guarded_import=guarded_import if guarded_import is not None else
                        bool(config.get("guarded-import", False)))
    settings.resolved()
    return settings


def _emit(fmt: LintFormat, findings: list, errors: list[str], settings: Any, *, fixed: int, stream: Any,
          dry_run: bool = False) -> None:
    from opaudit.lint import load_catalogue
    from opaudit.report import lint as views

    if fmt is LintFormat.json:
        stream.write(views.json_text(findings, errors, target=settings.target, fixed=fixed))
    elif fmt is LintFormat.sarif:
        stream.write(views.sarif_text(findings, errors, load_catalogue(), target=settings.target))
    elif fmt is LintFormat.github:
        stream.write(views.github(findings, errors))
    else:
        stream.write(views.text(findings, errors, fixed=fixed, unsafe_fixes=settings.unsafe_fixes, dry_run=dry_run))


_PATHS_HELP = "Files or folders to check; - reads standard input."
_SELECT_HELP = "Rule codes or prefixes to check (OA1, OA401; comma-separated or repeated); ALL for every rule."


# file discovery, shared by lint and fix
_EXCLUDE = typer.Option(None, "--exclude", "--extend-exclude",
                        help="File or folder patterns to skip (besides the defaults).")
_RESPECT_GITIGNORE = typer.Option(None, "--respect-gitignore/--no-respect-gitignore",
                                  help="Skip what .gitignore, .ignore and git's exclude file ignore (default: yes).")
_FORCE_EXCLUDE = typer.Option(None, "--force-exclude/--no-force-exclude",
                              help="Apply the exclusions to files named on the command line too.")


@app.command()
def lint(
    paths: list[str] = typer.Argument(None, help=_PATHS_HELP),
    target: str | None = typer.Option(None, "--target", "-t", help="Whose replacements to show: ascend, cambricon, "
                                      "biren, musa, xpu, mps, rocm, neutral (default: neutral)."),
    select: list[str] | None = typer.Option(None, "--select", help=_SELECT_HELP),
    extend_select: list[str] | None = typer.Option(None, "--extend-select", help="Codes to add to the selection."),
    ignore: list[str] | None = typer.Option(None, "--ignore", help="Codes or prefixes to leave out."),
    exclude: list[str] | None = _EXCLUDE,
    respect_gitignore: bool | None = _RESPECT_GITIGNORE,
    force_exclude: bool | None = _FORCE_EXCLUDE,
    output_format: LintFormat = typer.Option(LintFormat.text, "--output-format", help="How to print findings."),
    statistics: bool = typer.Option(False, "--statistics", help="Count findings per rule instead."),
    exit_zero: bool = typer.Option(False, "--exit-zero", help="Exit with 0 even when findings remain."),
    min_torch: str | None = typer.Option(None, "--min-torch", help="The oldest torch the code must run on "
                                         "(gates the neutral rewrites)."),
    stdin_filename: str | None = typer.Option(None, "--stdin-filename", help="The name of the file read from -."),
    jobs: int | None = typer.Option(None, "--jobs", "-j", help="Processes (default: one per CPU)."),
) -> None:
    """Find code that assumes CUDA. Exit 1 when findings remain."""
    from opaudit.lint import lint_source, load_catalogue, run
    from opaudit.report.lint import statistics as stats

    with _errors():
        paths = paths or ["."]
        settings = _lint_settings(paths, target, select, ignore, extend_select, min_torch, None, exclude,
                                  default_target="neutral", respect_gitignore=respect_gitignore,
                                  force_exclude=force_exclude)
        if paths == ["-"]:
            result = lint_source(sys.stdin.buffer.read(), settings, stdin_filename or "-")
            findings, errors = result.findings, [result.error] if result.error else []
        else:
            r = run(paths, settings, jobs=jobs)
            findings, errors = r.findings, r.errors
            for w in r.warnings:
                err.print(f"warning: {w}", style="yellow", markup=False, highlight=False, soft_wrap=True)
        if statistics:
            sys.stdout.write(stats(findings, load_catalogue()))
        else:
            _emit(output_format, findings, errors, settings, fixed=0, stream=sys.stdout)
        if (findings or errors) and not exit_zero:
            raise typer.Exit(EXIT_FINDINGS)


@app.command()
def fix(
    paths: list[str] = typer.Argument(None, help=_PATHS_HELP),
    target: str | None = typer.Option(None, "--target", "-t", help="The device to port to: ascend, cambricon, "
                                      "biren, musa, xpu, mps, rocm or neutral."),
    diff: bool = typer.Option(False, "--diff", help="Print the changes as a unified diff; write nothing."),
    unsafe_fixes: bool | None = typer.Option(None, "--unsafe-fixes/--no-unsafe-fixes",
                                             help="Also apply fixes matched by syntax or with a small change of "
                                             "meaning."),
    guarded_import: bool | None = typer.Option(None, "--guarded-import/--no-guarded-import",
                                               help="Add the target's package (import torch_npu) inside try/except "
                                               "ImportError, so the code still imports without the plugin."),
    select: list[str] | None = typer.Option(None, "--select", help=_SELECT_HELP),
    extend_select: list[str] | None = typer.Option(None, "--extend-select", help="Codes to add to the selection."),
    ignore: list[str] | None = typer.Option(None, "--ignore", help="Codes or prefixes to leave out."),
    exclude: list[str] | None = _EXCLUDE,
    respect_gitignore: bool | None = _RESPECT_GITIGNORE,
    force_exclude: bool | None = _FORCE_EXCLUDE,
    output_format: LintFormat = typer.Option(LintFormat.text, "--output-format",
                                             help="How to print what remains."),
    statistics: bool = typer.Option(False, "--statistics", help="Count remaining findings per rule instead."),
    min_torch: str | None = typer.Option(None, "--min-torch", help="The oldest torch the code must run on "
                                         "(gates the neutral rewrites)."),
    stdin_filename: str | None = typer.Option(None, "--stdin-filename", help="The name of the file read from -."),
    jobs: int | None = typer.Option(None, "--jobs", "-j", help="Processes (default: one per CPU)."),
) -> None:
    """Rewrite code that assumes CUDA for a target. Exit 1 when findings remain (with --diff: when
    there are changes to make)."""
    from libcst.codemod import diff_code

    from opaudit.lint import fix_source, load_catalogue, run
    from opaudit.report.lint import statistics as stats

    with _errors():
        paths = paths or ["."]
        settings = _lint_settings(paths, target, select, ignore, extend_select, min_torch, unsafe_fixes, exclude,
                                  default_target=None, respect_gitignore=respect_gitignore,
                                  force_exclude=force_exclude, guarded_import=guarded_import)
        if paths == ["-"]:
            name = stdin_filename or "-"
            result = fix_source(sys.stdin.buffer.read(), settings, name)
            results, extra, warnings = [result], [], []
            if diff:
                if result.changed:
                    sys.stdout.write(_diff(diff_code, result))
            else:
                sys.stdout.buffer.write(result.new if result.new is not None else result.old or b"")
            report = sys.stderr
        else:
            r = run(paths, settings, fix=True, write=not diff, jobs=jobs)
            results, extra, warnings = r.files, r.extra, r.warnings
            if diff:
                for res in results:
                    if res.changed:
                        sys.stdout.write(_diff(diff_code, res))
            report = sys.stderr if diff else sys.stdout
        for w in warnings:
            err.print(f"warning: {w}", style="yellow", markup=False, highlight=False, soft_wrap=True)
        fixed = sum(len(res.fixed) for res in results if res.changed)
        # with --diff the file on disk is the original: what remains is told at its original place
        remaining = [f for res in results for f in (res.findings if not res.changed else
                                                   _unfixed(res) if diff else _remaining(res, settings))]
        remaining += extra
        errors = [res.error for res in results if res.error]
        if statistics:
            report.write(stats(remaining, load_catalogue()))
        else:
            _emit(output_format, remaining, errors, settings, fixed=fixed, stream=report, dry_run=diff)
        changed = sum(1 for res in results if res.changed)
        if diff:
            err.print(f"{changed} file{'s' if changed != 1 else ''} would be changed", markup=False, highlight=False)
        elif changed and paths != ["-"]:
            err.print(f"{changed} file{'s' if changed != 1 else ''} changed", markup=False, highlight=False)
        if (diff and changed) or ((remaining or errors) and not diff):
            raise typer.Exit(EXIT_FINDINGS)


def _diff(diff_code: Any, res: Any) -> str:
    import libcst as cst

    encoding = cst.parse_module(res.new).encoding
    return str(diff_code(res.old.decode(encoding), res.new.decode(encoding), 3, filename=res.path))


def _unfixed(res: Any) -> list:
    fixed = {(f.line, f.col, f.code) for f in res.fixed}
    return [f for f in res.findings if (f.line, f.col, f.code) not in fixed]


def _remaining(res: Any, settings: Any) -> list:
    """What is left in a fixed file: the findings of the fixed text (none when every finding was fixed)."""
    from opaudit.lint import lint_source

    return lint_source(res.new, settings, res.path).findings if _unfixed(res) else []


@app.command("rules")
def rules_command(
    target: str | None = typer.Option(None, "--target", "-t", help="Only the rules that apply to this target."),
    output_format: LintFormat = typer.Option(LintFormat.text, "--output-format", help="text or json."),
) -> None:
    """List the lint rules: code, name, fix class, summary."""
    import json

    from opaudit.lint import load_catalogue, load_target
    from opaudit.report.lint import rules_table

    with _errors():
        rows = rules_table(load_catalogue(), load_target(target) if target else None)
        if output_format is LintFormat.json:
            sys.stdout.write(json.dumps(rows, indent=1) + "\n")
            return
        for r in rows:
            flag = "" if r["default"] else " (off by default)"
            sys.stdout.write(f"{r['code']}  {r['name']:<32} {r['fix']:<10} {r['summary']}{flag}\n")


@app.command()
def explain(
    code: str = typer.Argument(..., help="A rule code, e.g. OA101."),
    target: str | None = typer.Option(None, "--target", "-t", help="Only this target's notes and examples."),
) -> None:
    """Print a rule's page: what it finds, why, how it is fixed, and its examples."""
    from opaudit.lint import load_catalogue, load_target
    from opaudit.report.lint import explain_text

    with _errors():
        rules = load_catalogue().rules
        key = code.strip().upper()
        if key not in rules:
            import difflib

            close = difflib.get_close_matches(key, list(rules), n=3)
            raise InputError(f"no rule {code!r}", hint=("did you mean " + ", ".join(close) + "? " if close else "")
                             + "`opaudit rules` lists them")
        sys.stdout.write(explain_text(rules[key], load_target(target) if target else None))


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

