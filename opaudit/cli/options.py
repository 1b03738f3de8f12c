"""The options more than one command takes, each declared once as a typed alias (``Annotated[type,
typer.Option(...)]``) that every command taking it uses, and the choices they offer.

An option whose meaning differs between commands (``run --html`` also traces the run; ``fix --target``
is required) is declared where its command is, under its own help text."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from opaudit.errors import InputError, OpauditError

# -- choices ------------------------------------------------------------------------------------------------


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


class FailOn(str, Enum):  # auditing.FAIL_ON, worst first
    missing = "missing"
    version_skew = "version_skew"
    unknown = "unknown"
    cpu_fallback = "cpu_fallback"
    composite = "composite"


class LintFormat(str, Enum):
    text = "text"
    json = "json"
    sarif = "sarif"
    github = "github"


class RulesFormat(str, Enum):
    """What `opaudit rules` prints: a rule list has no SARIF or GitHub form."""

    text = "text"
    json = "json"


EXIT_FAIL_ON = 1  # --fail-on: a selected target has an op at that level or worse
EXIT_FINDINGS = 1  # lint: findings remain; fix --diff: there are changes to make
EXIT_USAGE = 2  # a bad command line: an unknown option, a missing argument, a value no option takes

# what typer raises for a bad command line (click's UsageError: typer vendors click, or depends on it)
USAGE_ERROR: type[Exception] = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")
# what validators put before their own words ("Value error, 'x' is not one of ...")
_VALIDATOR_PREFIX = re.compile(r"^(?:Value error|Assertion failed), ")


def usage_message(e: Exception) -> str:
    """A usage error as one line: the option (or argument) and what is wrong with its value, without the
    validator's prefix, then where the command's options are listed."""
    message = str(getattr(e, "message", None) or e).strip().splitlines()[0]
    message = _VALIDATOR_PREFIX.sub("", message).rstrip(".").replace("Input should be", "the value should be")
    if isinstance(e, typer.BadParameter) and type(e).__name__ == "BadParameter":  # not a missing one
        param = getattr(e, "param", None)
        names = getattr(param, "opts", None) or getattr(e, "param_hint", None)
        name = names if isinstance(names, str) else names[0] if names else None  # the long name comes first
        if name:
            message = f"{name}: {message}"
    ctx = getattr(e, "ctx", None)
    path = getattr(ctx, "command_path", None)
    return f"{message} (opaudit {path.split(' ', 1)[1]} --help)" if path and " " in path else f"{message} (--help)"

# -- what to check a trace against, and where the reports go: scan, trace, report ----------------------------

TYPED_NAMES = ("Names users type work in every command: npu = ascend, mlu = cambricon, supa or br = biren, "
               "gcu = enflame, tpu = xla (coverage_db/curated/vendors.toml).")
TARGET_HELP = ("Target to check (repeatable): vendor, vendor@release, a matrix file, or 'all' (every release). "
               "Default: the newest published release of every vendor. " + TYPED_NAMES)
# (zoo's --target takes no matrix file)
FAIL_ON_HELP = ("Exit with 1 (after writing the reports) when a selected target has an op at this level or a worse "
                "one. Levels, worst first: missing, version_skew, unknown, cpu_fallback, composite. --fail-on X "
                "fails on X and on every level before it: --fail-on unknown fails on unknown, version_skew and "
                "missing (a gate that never passes on ops the data knows nothing about); cpu_fallback also counts "
                "ops only opaudit's fallback runs.")

Targets = Annotated[list[str] | None, typer.Option("--target", "-t", metavar="TARGET", help=TARGET_HELP)]
Matrices = Annotated[list[Path] | None, typer.Option(
    "--matrix", metavar="FILE", help="A user-supplied matrix file to check against too (repeatable); see "
    "docs/matrix-format.md.")]
NoAudit = Annotated[bool, typer.Option("--no-audit", help="Check no target: no verdicts, reports or --fail-on; only "
                                       "the trace's ops are shown.")]
FailOnLevel = Annotated[FailOn | None, typer.Option("--fail-on", help=FAIL_ON_HELP)]
HtmlPath = Annotated[Path | None, typer.Option("--html", help="Write the self-contained HTML report here.")]
CsvPath = Annotated[Path | None, typer.Option("--csv", help="Write one row per op x phase x target as CSV here.")]
MarkdownPath = Annotated[Path | None, typer.Option("--markdown", "--md", help="Write a Markdown summary here.")]
AuditJsonPath = Annotated[Path | None, typer.Option("--audit-json", help="Write the audit as JSON here.")]
AlsoLint = Annotated[list[Path] | None, typer.Option(
    "--lint", metavar="PATH", help="Also lint these files or folders (repeatable); their findings join the HTML "
    "report.")]


@dataclass
class AuditOptions:
    """The audit options of one command line, as given."""

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

    def audit_targets(self) -> list[str]:
        """The targets the audit will check (the newest release of every vendor where none is named); none with
        --no-audit."""
        if self.no_audit:
            return []
        from opaudit.auditing import default_targets

        return [*(self.targets or []), *(str(m) for m in self.matrices or [])] or default_targets()

    def check(self, trace_json: Path | None = None) -> None:
        """Before a long trace: the targets exist and every output (``trace_json``, the trace's own, too) can be
        written."""
        from opaudit.matrix import load_matrix
        from opaudit.report import check_writable

        if self.no_audit and (self.targets or self.matrices or self.fail_on or self.outputs() or self.lint):
            raise OpauditError("--no-audit cannot be combined with targets, --fail-on, --lint or report outputs")
        for t in self.targets or []:
            if t.strip().lower() != "all":
                load_matrix(t)
        for m in self.matrices or []:
            load_matrix(str(m))
        for path in [*self.outputs().values(), *([trace_json] if trace_json is not None else [])]:
            check_writable(path)
        for path in self.lint or []:
            if not path.exists():
                raise InputError(f"--lint {path}: no such file or directory")


# -- how a model or a script is traced: scan, zoo, trace, run --------------------------------------------------

DEVICE_HELP = ("The device the code runs on: cuda, simulated on the CPU (no GPU needed), so the code takes its "
               "CUDA branches (autocast, fused optimizers); cpu traces the CPU path.")

Train = Annotated[bool, typer.Option("--train", help="Trace a training step too: loss, backward and optimizer steps "
                                     "after the forward pass.")]
TraceMode = Annotated[Mode, typer.Option("--mode", help="Where tensors live while tracing: real CPU tensors, meta (no "
                                         "memory), fake; auto picks real when the model fits comfortably, else "
                                         "meta.")]
ModelDevice = Annotated[Device, typer.Option("--device", help=DEVICE_HELP + " Meta and fake modes trace on their "
                                             "own tensors.")]
ScriptDevice = Annotated[Device, typer.Option("--device", help=DEVICE_HELP)]
Shapes = Annotated[bool, typer.Option("--shapes", help="Record input shapes too (more, finer records).")]
NoRetrace = Annotated[bool, typer.Option("--no-retrace", help="Run the code once: a target whose PyTorch runs its "
                                         "autocast regions otherwise than CUDA (off for the dtype, or in another one) "
                                         "is judged by the CUDA path's dtypes, with a caveat, instead of by the code "
                                         "traced again as it runs them.")]
TraceJsonPath = Annotated[Path | None, typer.Option("--json", help="Write the trace as JSON to this path.")]
Top = Annotated[int | None, typer.Option("--top", min=1, help="Show at most this many ops per phase.")]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="Do not print the op table, nor the progress line.")]
ScriptIsModule = Annotated[bool, typer.Option("-m", help="The script is a module name, run as python -m runs it.")]

# -- which files and rules: lint, fix ----------------------------------------------------------------------

SourcePaths = Annotated[list[str] | None, typer.Argument(
    metavar="PATH", help="Files or folders to check; - reads standard input.")]
Select = Annotated[list[str] | None, typer.Option(
    "--select", metavar="CODES", help="Rule codes or prefixes to check (OA1, OA401; comma-separated or repeated); "
    "ALL for every rule.")]
ExtendSelect = Annotated[list[str] | None, typer.Option(
    "--extend-select", metavar="CODES", help="Codes to add to the selection.")]
Ignore = Annotated[list[str] | None, typer.Option("--ignore", metavar="CODES", help="Codes or prefixes to leave out.")]
Exclude = Annotated[list[str] | None, typer.Option(
    "--exclude", "--extend-exclude", metavar="PATTERN", help="File or folder patterns to skip (besides the defaults).")]
RespectGitignore = Annotated[bool | None, typer.Option(
    "--respect-gitignore/--no-respect-gitignore", help="Skip what .gitignore, .ignore and git's exclude file ignore "
    "(default: yes).")]
ForceExclude = Annotated[bool | None, typer.Option(
    "--force-exclude/--no-force-exclude", help="Apply the exclusions to files named on the command line too.")]
MinTorch = Annotated[str | None, typer.Option("--min-torch", help="The oldest torch the code must run on (gates the "
                                              "neutral rewrites).")]
StdinFilename = Annotated[str | None, typer.Option("--stdin-filename", help="The name of the file read from -.")]
LintOutputFormat = Annotated[LintFormat, typer.Option("--output-format", help="How to print the findings that "
                                                     "remain.")]
LintStatistics = Annotated[bool, typer.Option("--statistics", help="Count the findings that remain per rule "
                                              "instead.")]
LintJobs = Annotated[int | None, typer.Option("--jobs", "-j", min=1, help="Processes (default: one per CPU).")]
