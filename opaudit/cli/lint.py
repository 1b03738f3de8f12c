"""``opaudit lint``, ``fix``, ``rules`` and ``explain``: what the source assumes about CUDA, and its rewrite
for a target."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer
from typer.core import TyperCommand

from opaudit.cli.console import err, out, print_lines, user_errors, warn
from opaudit.cli.options import (
    EXIT_FINDINGS,
    TYPED_NAMES,
    Exclude,
    ExtendSelect,
    ForceExclude,
    Ignore,
    LintFormat,
    LintJobs,
    LintOutputFormat,
    LintStatistics,
    MinTorch,
    RespectGitignore,
    RulesFormat,
    Select,
    SourcePaths,
    StdinFilename,
)
from opaudit.errors import InputError


def lint(
    paths: SourcePaths = None,
    target: Annotated[str | None, typer.Option("--target", "-t", help="Whose replacements to show: ascend, cambricon, "
                                               "biren, musa, xpu, mps, rocm, neutral (default: neutral). "
                                               + TYPED_NAMES)] = None,
    select: Select = None,
    extend_select: ExtendSelect = None,
    ignore: Ignore = None,
    exclude: Exclude = None,
    respect_gitignore: RespectGitignore = None,
    force_exclude: ForceExclude = None,
    output_format: LintOutputFormat = LintFormat.text,
    statistics: LintStatistics = False,
    exit_zero: Annotated[bool, typer.Option("--exit-zero", help="Exit with 0 even when findings remain.")] = False,
    min_torch: MinTorch = None,
    stdin_filename: StdinFilename = None,
    jobs: LintJobs = None,
) -> None:
    """Find code that assumes CUDA. Exit 1 when findings remain."""
    from opaudit.lint import lint_source, load_catalogue, run
    from opaudit.report.lint import statistics as stats

    with user_errors():
        paths = paths or ["."]
        settings = settings_for(paths, target, select, ignore, extend_select, min_torch, None, exclude,
                                default_target="neutral", respect_gitignore=respect_gitignore,
                                force_exclude=force_exclude)
        if paths == ["-"]:
            result = lint_source(sys.stdin.buffer.read(), settings, stdin_filename or "-")
            findings, errors = result.findings, [result.error] if result.error else []
        else:
            r = run(paths, settings, jobs=jobs)
            findings, errors = r.findings, r.errors
            for w in r.warnings:
                warn(w)
        if statistics:
            sys.stdout.write(stats(findings, load_catalogue()))
        else:
            emit(output_format, findings, errors, settings, fixed=0, stream=sys.stdout)
        if (any(f.blocking for f in findings) or errors) and not exit_zero:  # info findings never fail
            raise typer.Exit(EXIT_FINDINGS)


class FixCommand(TyperCommand):
    """``fix``: what follows ``--`` is the program ``--verify`` runs (SCRIPT ARGS), never PATHS."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if "--" in args:
            at = args.index("--")
            ctx.meta["opaudit.program"] = args[at + 1:]
            args = args[:at]
        return super().parse_args(ctx, args)


def fix(
    ctx: typer.Context,
    paths: SourcePaths = None,
    target: Annotated[str | None, typer.Option("--target", "-t", help="The device to port to: ascend, cambricon, "
                                               "biren, musa, xpu, mps, rocm or neutral. " + TYPED_NAMES)] = None,
    diff: Annotated[bool, typer.Option("--diff", help="Print the changes as a unified diff; write nothing.")] = False,
    unsafe_fixes: Annotated[bool | None, typer.Option("--unsafe-fixes/--no-unsafe-fixes", help="Also apply fixes "
                                                      "matched by syntax or with a small change of meaning.")] = None,
    guarded_import: Annotated[bool | None, typer.Option("--guarded-import/--no-guarded-import", help="Add the "
                                                        "target's package (import torch_npu) inside try/except "
                                                        "ImportError, so the code still imports without the "
                                                        "plugin.")] = None,
    select: Select = None,
    extend_select: ExtendSelect = None,
    ignore: Ignore = None,
    exclude: Exclude = None,
    respect_gitignore: RespectGitignore = None,
    force_exclude: ForceExclude = None,
    output_format: LintOutputFormat = LintFormat.text,
    statistics: LintStatistics = False,
    min_torch: MinTorch = None,
    stdin_filename: StdinFilename = None,
    jobs: LintJobs = None,
    verify: Annotated[bool, typer.Option("--verify", help="Then rehearse the program after -- (SCRIPT ARGS) as "
                                         "ported, on the target's simulated device with CUDA absent; exit 0 only "
                                         "when it ran to its end there with no CUDA use left on the path that ran. "
                                         "PATHS default to the script's folder; with --diff a copy is verified "
                                         "and nothing is written.")] = False,
    timeout: Annotated[float | None, typer.Option("--timeout", metavar="S", help="--verify: stop each run of the "
                                                  "program after S seconds (a run stopped is a failure).")] = None,
) -> None:
    """Rewrite code that assumes CUDA for a target. Exit 1 when findings remain (with --diff: when
    there are changes to make; with --verify: when the port does not run on the target with no CUDA left).
    opaudit fix -t ascend --verify [PATHS] -- train.py ARGS..."""

    from opaudit.lint import fix_source, load_catalogue, run
    from opaudit.report.lint import statistics as stats

    program: list[str] = ctx.meta.get("opaudit.program") or []
    with user_errors():
        if verify and not program:
            raise InputError("--verify needs the program to run after --",
                             hint="opaudit fix -t ascend --verify [PATHS] -- train.py --its --own --args")
        if program and not verify:
            raise InputError(f"{' '.join(program)}: a program after -- is run by --verify only",
                             hint="opaudit fix -t ascend --verify [PATHS] -- train.py --its --own --args")
        if verify and paths == ["-"]:
            raise InputError("--verify runs a program from files, not from standard input")
        if verify:
            from pathlib import Path

            paths = paths or [str(Path(program[0]).parent)]
        paths = paths or ["."]
        settings = settings_for(paths, target, select, ignore, extend_select, min_torch, unsafe_fixes, exclude,
                                default_target=None, respect_gitignore=respect_gitignore,
                                force_exclude=force_exclude, guarded_import=guarded_import)
        verification = None
        r = None  # the run over files on disk (or their copies), where there is one
        if verify:
            from opaudit.rehearsal.verify import verify as verify_port

            verification = verify_port(program[0], program[1:], settings, paths=paths, in_place=not diff,
                                       timeout=timeout, jobs=jobs)
            r = verification.fixed
        elif paths == ["-"]:
            name = stdin_filename or "-"
            result = fix_source(sys.stdin.buffer.read(), settings, name)
            results, extra, warnings = [result], [], []
            if diff:
                if result.changed:
                    sys.stdout.write(_diff(result))
            else:
                sys.stdout.buffer.write(result.new if result.new is not None else result.old or b"")
            report = sys.stderr
        else:
            r = run(paths, settings, fix=True, write=not diff, jobs=jobs)
        if r is not None:  # files: their diffs, or the files written
            results, extra, warnings = r.files, r.extra, r.warnings
            if diff:
                for res in results:
                    if res.changed:
                        sys.stdout.write(_diff(res))
            report = sys.stderr if diff else sys.stdout
        for w in warnings:
            warn(w)
        fixed = sum(len(res.fixed) for res in results if res.changed)
        # with --diff the file on disk is the original: what remains is told at its original place
        remaining = [f for res in results for f in (res.findings if not res.changed else
                                                   _unfixed(res) if diff else _remaining(res, settings))]
        remaining += extra
        errors = [res.error for res in results if res.error]
        if statistics:
            report.write(stats(remaining, load_catalogue()))
        else:
            emit(output_format, remaining, errors, settings, fixed=fixed, stream=report, dry_run=diff)
        changed = sum(1 for res in results if res.changed)
        if verification is not None:
            print_lines(out if not diff else err, verification.lines())
        if diff:
            err.print(f"{changed} file{'s' if changed != 1 else ''} would be changed", markup=False, highlight=False)
        elif changed and paths != ["-"]:
            err.print(f"{changed} file{'s' if changed != 1 else ''} changed", markup=False, highlight=False)
        if verification is not None:
            if not verification.ok or errors:
                raise typer.Exit(EXIT_FINDINGS)
            return
        blocking = any(f.blocking for f in remaining)  # info findings never fail
        if (diff and changed) or errors or (blocking and not diff):  # a file not checked fails --diff too
            raise typer.Exit(EXIT_FINDINGS)


def rules(
    target: Annotated[str | None, typer.Option("--target", "-t", help="Only the rules that apply to this "
                                               "target.")] = None,
    output_format: Annotated[RulesFormat, typer.Option("--output-format", help="text or json.")] = RulesFormat.text,
) -> None:
    """List the lint rules: code, name, fix class, summary."""
    import json

    from opaudit.lint import load_catalogue, load_target
    from opaudit.report.lint import rules_table

    with user_errors():
        rows = rules_table(load_catalogue(), load_target(target) if target else None)
        if output_format is RulesFormat.json:
            sys.stdout.write(json.dumps(rows, indent=1) + "\n")
            return
        for r in rows:
            flag = "" if r["default"] else " (off by default)"
            sys.stdout.write(f"{r['code']}  {r['name']:<32} {r['fix']:<10} {r['summary']}{flag}\n")


def explain(
    code: Annotated[str, typer.Argument(help="A rule code, e.g. OA101.")],
    target: Annotated[str | None, typer.Option("--target", "-t", help="Only this target's notes and "
                                               "examples.")] = None,
) -> None:
    """Print a rule's page: what it finds, why, how it is fixed, and its examples."""
    from opaudit.lint import load_catalogue, load_target
    from opaudit.report.lint import explain_text

    with user_errors():
        catalogue = load_catalogue().rules
        key = code.strip().upper()
        if key not in catalogue:
            import difflib

            close = difflib.get_close_matches(key, list(catalogue), n=3)
            raise InputError(f"no rule {code!r}", hint=("did you mean " + ", ".join(close) + "? " if close else "")
                             + "`opaudit rules` lists them")
        sys.stdout.write(explain_text(catalogue[key], load_target(target) if target else None))


def settings_for(paths: list[str], target: str | None, select: list[str] | None, ignore: list[str] | None,
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
                        bool(config.get("guarded-import", False)),
                        info=tuple(config.get("info")) if config.get("info") is not None else None)
    settings.resolved()
    return settings


def emit(fmt: LintFormat, findings: list, errors: list[str], settings: Any, *, fixed: int, stream: Any,
         dry_run: bool = False) -> None:
    """Print ``findings`` and the files that could not be read in the chosen format."""
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


def _diff(res: Any) -> str:
    from opaudit.report.lint import unified_diff

    return unified_diff(res.old, res.new, res.path)


def _unfixed(res: Any) -> list:
    fixed = {(f.line, f.col, f.code) for f in res.fixed}
    return [f for f in res.findings if (f.line, f.col, f.code) not in fixed]


def _remaining(res: Any, settings: Any) -> list:
    """What is left in a fixed file: the findings of the fixed text (none when every finding was fixed)."""
    from opaudit.lint import lint_source

    return lint_source(res.new, settings, res.path).findings if _unfixed(res) else []
