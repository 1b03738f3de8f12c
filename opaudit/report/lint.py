"""Views of a lint run: text (as ruff prints), JSON, SARIF 2.1.0, GitHub annotations, statistics, and the
rule pages of ``opaudit rules`` / ``opaudit explain``, all generated from the catalogue."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

from opaudit import __version__
from opaudit.lint.catalogue import FIX_CLASSES, Catalogue, Rule, Target, load_target, target_names
from opaudit.lint.findings import Finding

FORMATS = ("text", "json", "sarif", "github")
LINT_SCHEMA_VERSION = 1
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
_LEVEL = {"safe": "warning", "unsafe": "warning", "suggestion": "warning", "report": "note"}


def relative_path(path: str) -> str:
    """``path`` relative to the working folder when it lies inside it (as findings are shown), else as given."""
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


def text(findings: list[Finding], errors: list[str], *, fixed: int = 0, unsafe_fixes: bool = False,
         dry_run: bool = False) -> str:
    """``path:line:col: CODE [*] message`` per finding (``[*]``: `fix` applies it; ``[?]``: only with
    --unsafe-fixes), then a summary line."""
    lines = []
    for f in findings:
        mark = "[*] " if f.fixable and (f.fix == "safe" or unsafe_fixes) else "[?] " if f.fixable else ""
        mark += "info: " if not f.blocking else ""
        line = f"{relative_path(f.path)}:{f.line}:{f.col}: {f.code} {mark}{f.message}"
        if f.fix == "suggestion" and f.replacement:
            line += f"\n    suggestion: {f.replacement}"
        lines.append(line)
    lines += [f"error: {e}" for e in errors]
    safe = sum(1 for f in findings if f.fixable and f.fix == "safe")
    unsafe = sum(1 for f in findings if f.fixable and f.fix == "unsafe")
    summary = []
    if fixed:
        summary.append(f"{'Would fix' if dry_run else 'Fixed'} {fixed} finding{'s' if fixed != 1 else ''}.")
    info = sum(1 for f in findings if not f.blocking)
    if findings:
        summary.append(f"Found {len(findings)} finding{'s' if len(findings) != 1 else ''}"
                       + (" remaining" if fixed else "") + (f" ({info} info: no exit 1 for them)" if info else "")
                       + ".")
        if safe or (unsafe and unsafe_fixes):
            summary.append(f"[*] {safe + (unsafe if unsafe_fixes else 0)} fixable with `opaudit fix`.")
        if unsafe and not unsafe_fixes:
            summary.append(f"[?] {unsafe} more with `opaudit fix --unsafe-fixes`.")
    elif not fixed and not errors:
        summary.append("All checks passed.")
    if errors:
        summary.append(f"{len(errors)} file{'s' if len(errors) != 1 else ''} could not be checked.")
    return "\n".join(lines + ([""] if lines else []) + [" ".join(summary)]) + "\n"


def to_json(findings: list[Finding], errors: list[str], *, target: str, fixed: int = 0) -> dict[str, Any]:
    return {
        "schema": "opaudit-lint",
        "version": LINT_SCHEMA_VERSION,
        "opaudit": __version__,
        "target": target,
        "fixed": fixed,
        "findings": [{**f.to_json(), "path": relative_path(f.path), "fixable": f.fixable} for f in findings],
        "errors": errors,
    }


def json_text(findings: list[Finding], errors: list[str], *, target: str, fixed: int = 0) -> str:
    return json.dumps(to_json(findings, errors, target=target, fixed=fixed), indent=1) + "\n"


def _region(f: Finding) -> dict[str, int]:
    return {"startLine": f.line, "startColumn": f.col, "endLine": f.end_line, "endColumn": f.end_col}


def sarif(findings: list[Finding], errors: list[str], catalogue: Catalogue, *, target: str) -> dict[str, Any]:
    """A SARIF 2.1.0 log: one run, the catalogue's rules, one result per finding (with its fix where the
    fix is a replacement of the finding's region)."""
    codes = sorted({f.code for f in findings})
    index = {c: i for i, c in enumerate(codes)}
    rules = []
    for c in codes:
        r = catalogue.rules[c]
        rules.append({
            "id": c,
            "name": r.name,
            "shortDescription": {"text": r.summary},
            "fullDescription": {"text": r.why or r.summary},
            "help": {"text": explain_text(r, load_target(target))},
            "defaultConfiguration": {"level": _LEVEL[r.fix]},
            "properties": {"fix": r.fix, "group": r.group, "heuristic": r.heuristic},
        })
    results = []
    for f in findings:
        uri = Path(relative_path(f.path)).as_posix()
        result: dict[str, Any] = {
            "ruleId": f.code,
            "ruleIndex": index[f.code],
            "level": _LEVEL[f.fix] if f.blocking else "note",
            "message": {"text": f.message + (f" (suggestion: {f.replacement})" if f.fix == "suggestion"
                                             and f.replacement else "")},
            "locations": [{"physicalLocation": {"artifactLocation": {"uri": uri, "uriBaseId": "%SRCROOT%"},
                                                "region": _region(f)}}],
            "properties": {"fix": f.fix, "heuristic": f.heuristic},
        }
        if f.fixable and f.code != "OA001":
            result["fixes"] = [{
                "description": {"text": f"replace with {f.replacement}"},
                "artifactChanges": [{"artifactLocation": {"uri": uri, "uriBaseId": "%SRCROOT%"},
                                     "replacements": [{"deletedRegion": _region(f),
                                                       "insertedContent": {"text": f.replacement}}]}],
            }]
        results.append(result)
    notifications = [{"level": "error", "message": {"text": e}} for e in errors]
    run: dict[str, Any] = {
        "tool": {"driver": {"name": "opaudit", "version": __version__, "informationUri":
                            "https://pypi.org/project/opaudit/", "rules": rules}},
        "originalUriBaseIds": {"%SRCROOT%": {"uri": Path.cwd().as_uri() + "/"}},
        "results": results,
        "properties": {"target": target},
    }
    if notifications:
        run["invocations"] = [{"executionSuccessful": True, "toolExecutionNotifications": notifications}]
    return {"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [run]}


def sarif_text(findings: list[Finding], errors: list[str], catalogue: Catalogue, *, target: str) -> str:
    return json.dumps(sarif(findings, errors, catalogue, target=target), indent=1) + "\n"


def _escape(value: str, *, prop: bool = False) -> str:
    value = value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return value.replace(":", "%3A").replace(",", "%2C") if prop else value


def github(findings: list[Finding], errors: list[str]) -> str:
    """GitHub Actions workflow commands: one annotation per finding."""
    out = []
    for f in findings:
        level = "notice" if f.fix == "report" or not f.blocking else "warning"
        where = _escape(relative_path(f.path), prop=True)
        props = (f"title={_escape(f'opaudit ({f.code})', prop=True)},file={where},"
                 f"line={f.line},col={f.col},endLine={f.end_line},endColumn={f.end_col}")
        out.append(f"::{level} {props}::{_escape(f'{f.code} {f.message}')}")
    out += [f"::error title=opaudit::{_escape(e)}" for e in errors]
    return "\n".join(out) + ("\n" if out else "")


def unified_diff(old: bytes, new: bytes, path: str, *, context: int = 3) -> str:
    """The change of one file as a unified diff that ``patch -p0`` and ``git apply -p0`` take: both headers
    name the path, and a last line without a newline is marked so (``\\ No newline at end of file``)."""
    import difflib

    import libcst as cst

    encoding = cst.parse_module(new).encoding
    a = old.decode(encoding).splitlines(keepends=True)
    b = new.decode(encoding).splitlines(keepends=True)
    out = []
    for line in difflib.unified_diff(a, b, fromfile=path, tofile=path, n=context):
        if line.endswith(("\n", "\r")):
            out.append(line)
        else:
            out.append(line + "\n\\ No newline at end of file\n")
    return "".join(out)


def statistics(findings: list[Finding], catalogue: Catalogue) -> str:
    """Findings per rule, most frequent first, as ruff's --statistics prints them."""
    counts = Counter(f.code for f in findings)
    fixable = Counter(f.code for f in findings if f.fixable)
    width = max((len(str(n)) for n in counts.values()), default=1)
    lines = []
    for code, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        mark = "[*]" if fixable[code] == n else "[-]" if fixable[code] else "   "
        lines.append(f"{n:>{width}}\t{code}\t{mark} {catalogue.rules[code].name}")
    return "\n".join(lines) + ("\n" if lines else "")


# -- the rule pages --------------------------------------------------------------------------------------
_FIX_WORDS = {"safe": "safe fix: `opaudit fix` applies it",
              "unsafe": "unsafe fix: applied with `opaudit fix --unsafe-fixes`",
              "suggestion": "suggestion: shown, never applied",
              "report": "report only"}


def rules_table(catalogue: Catalogue, target: Target | None = None) -> list[dict[str, Any]]:
    return [{"code": r.code, "name": r.name, "group": r.group, "fix": r.fix, "default": r.default,
             "summary": r.summary} for r in catalogue.rules.values()
            if target is None or not r.targets or target.name in r.targets]


def explain_text(rule: Rule, target: Target | None = None) -> str:
    """A rule's page: what, why, fix safety, and its examples per target."""
    lines = [f"# {rule.code} ({rule.name})", "", rule.summary[:1].upper() + rule.summary[1:] + ".", "",
             f"Group: {rule.group}.", f"Fix: {_FIX_WORDS[rule.fix]}."]
    if rule.heuristic:
        lines.append("Matched by syntax (a method or attribute name), not by qualified name.")
    if not rule.default:
        lines.append(f"Off by default: select it with --select {rule.code} or --extend-select {rule.code}.")
    if rule.targets:
        lines.append(f"Only for: {', '.join(rule.targets)}.")
    if rule.why:
        lines += ["", " ".join(rule.why.split())]
    notes = [(t, load_target(t).note(rule.code)) for t in target_names()]
    notes = [(t, n) for t, n in notes if n and (target is None or t == target.name)]
    if notes:
        lines += ["", "Per target:"] + [f"- {t}: {n}" for t, n in notes]
    examples = [e for e in rule.examples if target is None or e.target == target.name]
    for e in examples:
        lines += ["", f"Example ({e.target}{', --unsafe-fixes' if e.unsafe else ''}"
                  f"{', no finding' if e.valid else ''}):", "", _indent(e.before)]
        if e.after is not None and not e.valid:
            lines += ["", "becomes", "", _indent(e.after)]
    return "\n".join(lines).rstrip() + "\n"


def _indent(code: str) -> str:
    return "\n".join("    " + ln for ln in code.rstrip("\n").splitlines())


__all__ = ["FIX_CLASSES", "FORMATS", "explain_text", "github", "json_text", "relative_path", "rules_table", "sarif",
           "sarif_text", "statistics", "text", "to_json"]
