"""Run the checks over files: pre-filter, one parse, one traversal, ``# noqa``, fixes, atomic writes.

>>> result = lint_source(b"import torch\\ntorch.cuda.synchronize()\\n", Settings(target="ascend"))   # doctest: +SKIP
>>> [f.code for f in result.findings]                                                             # doctest: +SKIP
['OA401']
>>> fix_source(b"import torch\\ntorch.cuda.synchronize()\\n", Settings(target="ascend")).new    # doctest: +SKIP
b'import torch\\nimport torch_npu\\ntorch.npu.synchronize()\\n'

Files are processed in parallel (a process pool) and each result comes back whole; the parent
writes. A fix is written only when its output parses again, through a temporary file and a rename,
so an interrupted run leaves every file either old or new. LibCST's own runner
(``parallel_exec_transform_with_prettyprint``) is not used because it writes files in place with a
plain ``open(..., "wb")`` (a crash mid-write truncates the file) and returns counts, not findings;
LibCST's parser, codemod context and import visitors are used as they are.
"""

from __future__ import annotations

import io
import os
import re
import tokenize
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from fnmatch import fnmatch
from functools import cache
from pathlib import Path
from typing import Any

import libcst as cst
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import AddImportsVisitor, RemoveImportsVisitor
from libcst.metadata import CodeRange, MetadataWrapper, PositionProvider

import opaudit.lint.rules  # noqa: F401 (the rule families register their handlers with the walk)
from opaudit.errors import InputError
from opaudit.files import write_atomic
from opaudit.lint import installed
from opaudit.lint.catalogue import Catalogue, Target, lint_target_name, load_catalogue, load_target
from opaudit.lint.findings import FileResult, Finding
from opaudit.lint.walk import FileCheck, Plan, Report, node_code
from opaudit.lint.walk import dotted as _dotted

BASE_TRIGGERS = ("cuda", "CUDA", "cudnn", "nccl", "NCCL")
DEFAULT_EXCLUDE = (".bzr", ".direnv", ".eggs", ".git", ".hg", ".mypy_cache", ".nox", ".pytype", ".ruff_cache", ".svn",
                   ".tox", ".venv", "__pypackages__", "_build", "buck-out", "dist", "node_modules", "venv",
                   "__pycache__")
MAX_PASSES = 4  # a fix that replaces a node drops edits inside it; the next pass finds them again
NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Za-z]+\d+(?:[\s,]+[A-Za-z]+\d+)*))?", re.IGNORECASE)
DEFAULT_MIN_TORCH = "2.6"


@dataclass(frozen=True)
class Settings:
    """How to lint: the target, the rule selection, and what fix may do."""

    target: str = "ascend"
    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    extend_select: tuple[str, ...] = ()
    min_torch: str = DEFAULT_MIN_TORCH
    unsafe_fixes: bool = False
    exclude: tuple[str, ...] = ()  # patterns skipped besides the defaults (extend-exclude, --exclude)
    exclude_defaults: tuple[str, ...] | None = None  # [tool.opaudit] exclude: replaces DEFAULT_EXCLUDE
    respect_gitignore: bool = True
    force_exclude: bool = False  # the exclusions apply to files named on the command line too
    guarded_import: bool = False  # fix adds the target's package as try: import ... except ImportError: pass
    info: tuple[str, ...] | None = None  # codes or prefixes whose findings are info (None: the catalogue's severity)

    def __post_init__(self) -> None:
        # the names users type (npu, mlu, supa) name the table they stand for, in every view of the settings
        object.__setattr__(self, "target", lint_target_name(self.target))

    def resolved(self) -> tuple[Target, Catalogue, frozenset[str]]:
        return _resolve(self)


@cache
def _resolve(settings: Settings) -> tuple[Target, Catalogue, frozenset[str]]:
    """The target, the catalogue and the selected codes of ``settings`` (once per process, not per file)."""
    cat = load_catalogue()
    selected = cat.select(list(settings.select), list(settings.ignore), list(settings.extend_select))
    return load_target(settings.target), cat, selected


@cache
def _triggers(settings: Settings) -> re.Pattern[bytes]:
    target, cat, selected = _resolve(settings)
    return triggers(cat, selected, target)


def triggers(cat: Catalogue, selected: frozenset[str], target: Target) -> re.Pattern[bytes]:
    """The words a file must contain for any selected rule to find something in it."""
    words = set(BASE_TRIGGERS)
    for code in selected:
        rule = cat.rules[code]
        words.update(rule.triggers)
        words.update(rule.env)
        words.update(rule.env_prefix)
    if "OA001" in selected and target.device:
        words.add(target.device)  # a file already using the device may lack its import
    return re.compile("|".join(re.escape(w) for w in sorted(words)).encode())


def _calls_a_library(source: bytes, path: str, target: Target, selected: frozenset[str]) -> bool:
    """OA715: a file with no trigger word may still call an installed package's function that picks CUDA (what it
    imports from outside its project is looked up, the packages read once per process)."""
    if "OA715" not in selected or target.keeps_cuda or b"import" not in source:
        return False
    from opaudit.lint.rules.libraries import project_modules

    return installed.may_call(source.decode("utf-8", "replace"), project_modules(path))


# -- one file ------------------------------------------------------------------------------------------
def _check(module: cst.Module, source: bytes, target: Target, cat: Catalogue, selected: frozenset[str],
           min_torch: str, path: str | None = None) -> Plan:
    visitor = FileCheck(module, target, cat, selected, min_torch, source, path)
    visitor.walk(module)
    visitor.finish()
    return visitor.plan


def _noqa(code: str) -> dict[int, frozenset[str] | None]:
    """Line -> the codes its ``# noqa: ...`` comment suppresses (None: a bare ``# noqa`` suppresses all)."""
    out: dict[int, frozenset[str] | None] = {}
    try:
        for tok in tokenize.generate_tokens(io.StringIO(code).readline):
            if tok.type == tokenize.COMMENT:
                m = NOQA.search(tok.string)
                if m:
                    codes = m.group("codes")
                    out[tok.start[0]] = frozenset(re.split(r"[\s,]+", codes.upper())) if codes else None
    except (tokenize.TokenError, SyntaxError, IndentationError):
        pass
    return out


def _library_reports(module: cst.Module, source: bytes, file: str, codes: frozenset[str]) -> list[tuple[Report, int]]:
    """The catalogue's rules of ``codes`` over an installed library's module, with each report's line
    (installed.py: where a library picks CUDA for its caller)."""
    cat = load_catalogue()
    selected = frozenset(c for c in cat.select() if c in codes)
    plan = _check(module, source, load_target("neutral"), cat, selected, DEFAULT_MIN_TORCH, file)
    reports = [r for r in plan.reports if r.code in codes]
    text = source.decode(module.encoding, errors="replace").removeprefix("\ufeff")
    pos = _positions(module, reports, text)
    return [(r, pos.get(id(r.node), (0,))[0]) for r in reports]


installed.use_rules(_library_reports)


def _positions(module: cst.Module, reports: list[Report], text: str) -> dict[int, tuple[int, int, int, int]]:
    """Line and column of each reported node.

    LibCST's PositionProvider regenerates the whole module's code to count lines, which costs more than
    parsing it; so only the innermost statement holding each finding is regenerated (a compound
    statement without its body), starting from the line and indentation the stdlib's parser gives it."""
    if not reports:
        return {}
    starts = _statement_starts(module, text)
    by_statement: dict[int, list[Report]] = {}
    for r in reports:
        if r.statement is None or starts is None or id(r.statement) not in starts:
            return _all_positions(module, reports)
        by_statement.setdefault(id(r.statement), []).append(r)
    assert starts is not None
    lines = text.splitlines()
    out: dict[int, tuple[int, int, int, int]] = {}
    for group in by_statement.values():
        stmt = group[0].statement
        assert stmt is not None
        line, col, elif_ = starts[id(stmt)]
        indent = lines[line - 1][:col] if line - 1 < len(lines) else ""
        first = line - len(stmt.leading_lines)  # type: ignore[attr-defined]  # where the statement's own comment lines begin
        wanted = {id(r.node) for r in group}
        found = _regenerate(module, _header_only(stmt), first, indent, wanted, elif_) \
            if isinstance(stmt, cst.BaseCompoundStatement) else {}
        if len(found) < len(wanted):
            found = _regenerate(module, stmt, first, indent, wanted, elif_)
        out.update(found)
    return out


def _regenerate(module: cst.Module, stmt: cst.CSTNode, line: int, indent: str, wanted: set[int],
                elif_: bool = False) -> dict[int, tuple[int, int, int, int]]:
    """Positions of the wanted nodes of ``stmt``, whose text (its comment lines first) begins at ``line``
    inside a block indented by ``indent``. The statement is regenerated alone, in a module of its own that
    reproduces that indentation (under ``if True:``) and, for an elif branch, the ``if`` it continues."""
    body: Any = stmt
    above = 0  # lines of the wrapping before the statement's text
    if isinstance(stmt, cst.If) and elif_:  # an elif branch regenerates as "elif", not "if"
        body = cst.If(test=cst.Name("True"), body=cst.IndentedBlock([cst.SimpleStatementLine([cst.Pass()])]),
                      orelse=stmt)
        above += 2
    if indent:
        body = cst.If(test=cst.Name("True"), body=cst.IndentedBlock([body], indent=indent))
        above += 1
    alone = cst.Module(body=[body], default_indent=module.default_indent, default_newline=module.default_newline)
    ranges = MetadataWrapper(alone, unsafe_skip_copy=True).resolve(PositionProvider)
    shift = line - 1 - above
    return {id(n): (r.start.line + shift, r.start.column + 1, r.end.line + shift, r.end.column + 1)
            for n, r in ranges.items() if id(n) in wanted and isinstance(r, CodeRange)}


def _header_only(stmt: cst.BaseCompoundStatement) -> cst.CSTNode:
    """A compound statement with a one-line body and no else/except/finally: its header regenerates alone."""
    placeholder = cst.IndentedBlock(body=[cst.SimpleStatementLine([cst.Pass()])])
    changes: dict = {"body": placeholder}
    for name in ("orelse", "handlers", "finalbody"):
        if hasattr(stmt, name):
            changes[name] = () if name == "handlers" else None
    if isinstance(stmt, (cst.Try, cst.TryStar)):
        return stmt  # a try needs a handler or finally to exist: regenerate it whole
    try:
        return stmt.with_changes(**changes)
    except Exception:  # a node that does not take the placeholder: regenerate it whole
        return stmt


def _all_positions(module: cst.Module, reports: list[Report]) -> dict[int, tuple[int, int, int, int]]:
    ranges = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    out = {}
    for r in reports:
        rng = ranges.get(r.node)
        if isinstance(rng, CodeRange):
            out[id(r.node)] = (rng.start.line, rng.start.column + 1, rng.end.line, rng.end.column + 1)
    return out


def _statement_starts(module: cst.Module, text: str) -> dict[int, tuple[int, int, bool]] | None:
    """Every statement of the module (nested ones too) -> the line and column of its first token (its
    first decorator), from the stdlib's parser walked in step with LibCST's tree; None if they disagree."""
    import ast

    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    out: dict[int, tuple[int, int, bool]] = {}
    try:
        _pair(module.body, tree.body, out)
    except (_Mismatch, AttributeError, ValueError):  # ValueError: zip(strict=True) found different lengths
        return None
    return out


class _Mismatch(Exception):
    pass


def _body(block: Any) -> list:
    """The statements of an indented block (a one-line suite holds small statements: not paired)."""
    return [] if isinstance(block, cst.SimpleStatementSuite) else list(block.body)


def _pair(cst_body: Any, ast_body: list, out: dict[int, tuple[int, int, bool]]) -> None:
    import ast

    items = iter(ast_body)
    for stmt in cst_body:
        if isinstance(stmt, cst.SimpleStatementLine):
            nodes = [next(items, None) for _ in stmt.body]
            if nodes[0] is None:
                raise _Mismatch
            out[id(stmt)] = (nodes[0].lineno, nodes[0].col_offset, False)
            continue
        a = next(items, None)
        if a is None:
            raise _Mismatch
        decorators = getattr(a, "decorator_list", None)
        first = decorators[0] if decorators else a
        out[id(stmt)] = (first.lineno, first.col_offset - (1 if decorators else 0), False)
        if isinstance(stmt, cst.Match):
            for case, acase in zip(stmt.cases, a.cases, strict=True):  # type: ignore[attr-defined]
                _pair(_body(case.body), acase.body, out)
            continue
        if isinstance(stmt.body, cst.SimpleStatementSuite):
            continue
        _pair(stmt.body.body, a.body, out)
        if isinstance(stmt, cst.If):
            if isinstance(stmt.orelse, cst.If):
                _pair([stmt.orelse], a.orelse, out)
                line, col, _ = out[id(stmt.orelse)]
                out[id(stmt.orelse)] = (line, col, True)
            elif stmt.orelse is not None:
                _pair(_body(stmt.orelse.body), a.orelse, out)
        elif isinstance(stmt, (cst.For, cst.While)) and stmt.orelse is not None:
            _pair(_body(stmt.orelse.body), a.orelse, out)
        elif isinstance(stmt, (cst.Try, cst.TryStar)):
            for h, ah in zip(stmt.handlers, a.handlers, strict=True):
                _pair(_body(h.body), ah.body, out)  # type: ignore[attr-defined]
            if stmt.orelse is not None:
                _pair(_body(stmt.orelse.body), a.orelse, out)
            if stmt.finalbody is not None:
                _pair(_body(stmt.finalbody.body), a.finalbody, out)
        elif not isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.With, ast.AsyncWith,
                                ast.For, ast.AsyncFor, ast.While, ast.If)):
            raise _Mismatch


def _findings(path: str, module: cst.Module, plan: Plan, text: str | None,
              noqa: dict[int, frozenset[str] | None]) -> list[tuple[Finding, Report]]:
    """Findings with positions (when ``text``, the module's code, is given), less those a ``# noqa`` hides."""
    reports = plan.reports
    if not reports:
        return []
    pos = _positions(module, reports, text) if text is not None else {}
    out = []
    seen: set[tuple[int, int, str]] = set()
    for r in reports:
        line, col, end_line, end_col = pos.get(id(r.node), (1, 1, 1, 1))
        suppressed = False
        for ln in {line, end_line}:
            if ln in noqa and (noqa[ln] is None or r.code in noqa[ln]):  # type: ignore[operator]
                suppressed = True
        # without positions (the later passes of a fix), findings are told apart by their node
        key = (line, col, r.code) if text is not None else (id(r.node), 0, r.code)
        if suppressed or key in seen:
            continue
        seen.add(key)
        fix = r.fix or load_catalogue().rules[r.code].fix
        replacement = node_code(r.replacement) if r.replacement is not None else r.suggestion
        if r.replacement is None and fix in ("safe", "unsafe"):
            fix = "report" if r.suggestion is None else "suggestion"  # nothing to apply on this target
        out.append((Finding(path, line, col, end_line, end_col, r.code, r.message, fix, replacement, r.heuristic,
                            r.severity or "error"), r))
    out.sort(key=lambda fr: (fr[0].line, fr[0].col, fr[0].code))
    return out


def _imports_of_info(pairs: list[tuple[Finding, Report]], reports: list[Report],
                     info: frozenset[str]) -> list[tuple[Finding, Report]]:
    """An import of a CUDA-only torch module (``from torch.backends import cudnn``) loads on every torch build: its
    finding is info where every finding on a use of what it imports is (``cudnn.benchmark = True``), or there is
    none, so that a port left with only such flags is clean; where one use is CUDA use, so is the import."""
    if not any(r.uses is not None for _, r in pairs):
        return pairs
    out = []
    for f, r in pairs:
        if r.uses is not None and f.blocking:
            over = set().union(*r.uses)
            if all(u.severity == "info" or u.code in info for u in reports if u is not r and id(u.node) in over):
                f = replace(f, severity="info", message=f"{f.message} (only info findings use it)" if r.uses else
                            f"{f.message} (nothing uses it)")
        out.append((f, r))
    return out


class _Apply(cst.CSTTransformer):
    """Replace nodes by identity in one pass, descending only along the paths to them (a LibCST transform
    rebuilds every node it enters)."""

    def __init__(self, edits: dict[int, cst.CSTNode], paths: set[int]):
        super().__init__()
        self.edits = edits
        self.paths = paths

    def on_visit(self, node: cst.CSTNode) -> bool:
        return id(node) in self.paths and id(node) not in self.edits

    def on_leave(self, original_node, updated_node):  # type: ignore[no-untyped-def, override]
        return self.edits.get(id(original_node), updated_node)


def _uses_target(code: str, target: Target) -> bool:
    """Whether ``code`` uses the target's device: its module or method, its package, or its device string,
    except a string only compared with (``device_type == "npu"``, ``"npu" in device``: a test of a device
    value needs no device)."""
    dev = target.device
    if not dev:
        return False
    if re.search(rf"\btorch\.{dev}\b|\.{target.method}\(|\b{target.package}\b", code):
        return True
    compared = r"(?:==|!=|\bin|\bis)\s*$"
    for m in re.finditer(rf"(['\"]){dev}(?::\d*)?\1|['\"]{dev}:", code):
        before = code[max(0, m.start() - 12):m.start()]
        after = code[m.end():m.end() + 12]
        if re.search(compared, before) or re.match(r"\s*(?:==|!=|\bin\b|\bnot\s+in\b)", after):
            continue
        return True
    return False


def _names_target(code: str, target: Target) -> bool:
    """Whether code a fix wrote names something only the target's package provides."""
    words = [w for w in (target.device, target.package, target.dist_backend, target.dist_const, target.dist_available,
                         target.is_attr, target.method) if w]
    # names such as ProfilerActivity.MLU or NpuFusedAdamW, reached through an alias the file already has
    words += [new.rsplit(".", 1)[-1] for new, _ in target.api.values()
              if target.device and target.device in new.rsplit(".", 1)[-1].lower()]
    if words and re.search(r"\b(" + "|".join(map(re.escape, words)) + r")\b", code):
        return True
    return any(new and new in code for new, _ in target.api.values())


def _imports_package(code: str, package: str) -> bool:
    return re.search(rf"^[ \t]*(import|from)[ \t]+{package}\b", code, re.M) is not None


def _backend_import(path: str, code: str, target: Target, selected: frozenset[str]) -> Finding | None:
    """OA001: a file that uses the target's device must import the package that registers it."""
    if "OA001" not in selected or not target.package or not _uses_target(code, target):
        return None
    if _imports_package(code, target.package):
        return None
    return _backend_finding(path, target)


def _backend_finding(path: str, target: Target) -> Finding:
    note = target.note("OA001")
    summary = load_catalogue().rules["OA001"].summary
    return Finding(path, 1, 1, 1, 1, "OA001", f"{summary}: add `import {target.package}`"
                   + (f" ({note})" if note else ""), "safe", f"import {target.package}")


def _syntax_error(source: bytes, path: str, e: cst.ParserSyntaxError) -> str:
    """Python's own account of the error where it has one (its line is the one people look at)."""
    try:
        compile(source, path, "exec", dont_inherit=True)
    except SyntaxError as py:
        return f"{path}:{py.lineno or 1}:{py.offset or 1}: does not parse: {py.msg}"
    except ValueError:
        pass
    return f"{path}:{e.raw_line}:{e.raw_column + 1}: does not parse: {e.message}"


def lint_source(source: bytes, settings: Settings, path: str = "<stdin>") -> FileResult:
    """Findings of one file's bytes (never written)."""
    return _run(source, settings, path, fix=False)


def fix_source(source: bytes, settings: Settings, path: str = "<stdin>") -> FileResult:
    """Findings and, in ``.new``, the fixed bytes (the same bytes when nothing applies)."""
    return _run(source, settings, path, fix=True)


def info_codes(settings: Settings) -> frozenset[str]:
    """The codes whose findings are ``info`` (shown, never a reason to exit 1): the catalogue's ``severity =
    "info"`` rules and those the target's table names (``info``: a CUDA setting that is harmless there and has no
    twin to write), or the codes and prefixes ``[tool.opaudit] info`` names instead."""
    return _info_codes(settings.info, settings.target)


@cache
def _info_codes(chosen: tuple[str, ...] | None, target: str) -> frozenset[str]:  # (once per process, not per file)
    cat = load_catalogue()
    if chosen is None:
        return frozenset(code for code, r in cat.rules.items() if r.severity == "info") | set(load_target(target).info)
    return frozenset(code for code in cat.rules if any(code.startswith(p.strip().upper()) for p in chosen))


def _run(source: bytes, settings: Settings, path: str, *, fix: bool) -> FileResult:
    result = _run_rules(source, settings, path, fix=fix)
    info = info_codes(settings)
    if info:
        result.findings = [replace(f, severity="info") if f.code in info else f for f in result.findings]
    return result


def _run_rules(source: bytes, settings: Settings, path: str, *, fix: bool) -> FileResult:
    target, cat, selected = settings.resolved()
    result = FileResult(path, old=source if fix else None)
    if not _triggers(settings).search(source) and not _calls_a_library(source, path, target, selected):
        result.skipped = True
        if fix:
            result.new = source
        return result
    if b"\0" in source:  # a binary file (or a source with a NUL byte, which Python refuses too)
        result.error = f"{path}: not checked: it holds a NUL byte (a binary file?), which no Python source may"
        return result
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError as e:
        result.error = _syntax_error(source, path, e)
        return result
    except (UnicodeDecodeError, LookupError, SyntaxError) as e:  # (SyntaxError: a bad coding declaration)
        result.error = f"{path}: not checked: it cannot be decoded as Python source ({getattr(e, 'msg', e)})"
        return result
    text = source.decode(module.encoding)
    if text.startswith("\ufeff"):
        text = text[1:]
    noqa = _noqa(text) if "noqa" in text else {}
    plan = _check(module, source, target, cat, selected, settings.min_torch, path)
    pairs = _imports_of_info(_findings(path, module, plan, text, noqa), plan.reports, info_codes(settings))
    result.findings = [f for f, _ in pairs]
    extra = _backend_import(path, text, target, selected)
    if not fix:
        if extra is not None:
            result.findings.insert(0, extra)
        return result
    applicable = ("safe", "unsafe") if settings.unsafe_fixes else ("safe",)
    result.fixed = [f for f in result.findings if f.fixable and f.fix in applicable]
    new_module = module
    add_imports: set[str] = set()
    remove_imports: set[tuple[str, str | None, str | None]] = set()
    applied: set[str] = set()  # the code the applied fixes wrote
    for _ in range(MAX_PASSES):
        chosen = [r for f, r in pairs if f.fixable and f.fix in applicable]
        if not chosen:
            break
        edits = {id(r.node): r.replacement for r in chosen}
        # environment variable names and a compared device type ("npu" == device_type) need no import
        applied |= {f.replacement or "" for f, _ in pairs if f.fixable and f.fix in applicable and
                    not f.code.startswith("OA5") and f.code != "OA105"}
        add_imports |= plan.add_imports
        remove_imports |= plan.remove_imports
        paths = set(edits).union(*(r.ancestors for r in chosen))
        new_module = new_module.visit(_Apply(edits, paths))  # type: ignore[arg-type]
        if not any(r.ancestors & edits.keys() for r in chosen):
            break  # no edit sat inside another: nothing was dropped, nothing is left for another pass
        plan = _check(new_module, source, target, cat, selected, settings.min_torch, path)
        # later passes need positions only to honour # noqa comments
        pairs = _findings(path, new_module, plan, new_module.code if noqa else None, noqa)
    if new_module is not module:
        # the backend package goes where the vendor guides put it (after the torch import), added below
        new_module = _fix_imports(new_module, add_imports - {target.package}, remove_imports)
    # the rewritten code names the target's device or API (environment variable names do not need it)
    uses_device = extra is not None or any(_names_target(code, target) for code in applied)
    uses_device = uses_device or bool(target.package) and target.package in add_imports
    if uses_device and target.package and not _imports_package(text, target.package) and \
            ("OA001" in selected or target.package in add_imports):
        new_module = _add_backend_import(new_module, target.package, guarded=settings.guarded_import)
        if extra is not None:  # a finding of lint's (a file that names the device already): fixed as counted;
            result.fixed.insert(0, extra)  # the import a rewrite needs is part of that rewrite, not a finding
    new = new_module.bytes if new_module is not module else source
    if new != source:
        try:
            compile(new, path, "exec", dont_inherit=True)
        except (SyntaxError, ValueError) as e:  # a fix must never break a file
            result.error = f"{path}: the fix would not parse ({e}); the file is left as it was"
            result.fixed = []
            new = source
    result.new = new
    return result


def _add_backend_import(module: cst.Module, package: str, *, guarded: bool = False) -> cst.Module:
    """``import <package>`` right after the file's first top-level torch import (where the vendor guides put
    it), else where LibCST's AddImportsVisitor puts new imports. ``guarded``: inside ``try: ... except
    ImportError: pass``, so that the code still imports where the plugin is not installed (CPU-only CI)."""
    if guarded:
        guard = cst.parse_statement(f"try:\n    import {package}  # noqa: F401 (registers the device)\n"
                                    "except ImportError:  # not installed: the code still imports\n    pass\n")
        at = _after_imports(module)
        return module.with_changes(body=[*module.body[:at], guard, *module.body[at:]])
    for i, stmt in enumerate(module.body):
        if isinstance(stmt, cst.SimpleStatementLine) and any(
                (isinstance(s, cst.Import) and any((_dotted(a.name) or "").split(".")[0] == "torch" for a in s.names))
                or (isinstance(s, cst.ImportFrom) and s.module is not None and not s.relative
                    and (_dotted(s.module) or "").split(".")[0] == "torch") for s in stmt.body):
            line = cst.parse_statement(f"import {package}\n")
            return module.with_changes(body=[*module.body[:i + 1], line, *module.body[i + 1:]])
    # no top-level torch import (torch imported inside a function or a guard): after the leading imports with an
    # empty line before the code that follows, as LibCST's AddImportsVisitor puts a new import, without its passes
    # over the whole module (a third of the time of a fix of a large file)
    at = _after_imports(module)
    rest = list(module.body[at:])
    if rest and (not rest[0].leading_lines or rest[0].leading_lines[0].comment is not None):
        rest[0] = rest[0].with_changes(leading_lines=(cst.EmptyLine(), *rest[0].leading_lines))
    line = cst.parse_statement(f"import {package}", config=module.config_for_parsing)
    return module.with_changes(body=[*module.body[:at], line, *rest])


def _after_imports(module: cst.Module) -> int:
    """The position after the leading docstring, ``__future__`` and top-level import statements."""
    at = 0
    for i, stmt in enumerate(module.body):
        if isinstance(stmt, cst.SimpleStatementLine) and all(
                isinstance(s, (cst.Import, cst.ImportFrom)) or (i == 0 and isinstance(s, cst.Expr)
                                                                and isinstance(s.value, cst.SimpleString))
                for s in stmt.body):
            at = i + 1
        else:
            break
    return at


def _fix_imports(module: cst.Module, add: set[str], remove: set[tuple[str, str | None, str | None]]) -> cst.Module:
    """The imports the replacements need, and the removal of those they left unused (LibCST's visitors)."""
    ctx = CodemodContext()
    for m in sorted(add):
        AddImportsVisitor.add_needed_import(ctx, m)
    commented = _commented_imports(module)
    for m, obj, asname in sorted(remove, key=str):
        if (m, obj) not in commented:  # removing the statement would lose its comment: leave it
            RemoveImportsVisitor.remove_unused_import(ctx, m, obj, asname)
    if add:
        module = AddImportsVisitor(ctx).transform_module(module)
    if remove:
        module = RemoveImportsVisitor(ctx).transform_module(module)
    return module


def _commented_imports(module: cst.Module) -> set[tuple[str, str | None]]:
    """(module, name) of the top-level import statements that carry a trailing comment."""
    out: set[tuple[str, str | None]] = set()
    for stmt in module.body:
        if not isinstance(stmt, cst.SimpleStatementLine) or stmt.trailing_whitespace.comment is None:
            continue
        for small in stmt.body:
            if isinstance(small, cst.ImportFrom) and small.module is not None and not isinstance(small.names,
                                                                                                 cst.ImportStar):
                out |= {(_dotted(small.module) or "", _dotted(a.name)) for a in small.names}
            elif isinstance(small, cst.Import):
                out |= {(_dotted(a.name) or "", None) for a in small.names}
    return out


# -- many files -----------------------------------------------------------------------------------------
@dataclass
class Run:
    """The result of linting or fixing many files."""

    files: list[FileResult] = field(default_factory=list)
    extra: list[Finding] = field(default_factory=list)  # file-level findings outside Python (OA804)
    warnings: list[str] = field(default_factory=list)

    @property
    def findings(self) -> list[Finding]:
        return [f for r in self.files for f in r.findings] + self.extra

    @property
    def errors(self) -> list[str]:
        return [r.error for r in self.files if r.error]


VCS_DIRS = (".git", ".hg", ".svn", ".bzr")


class _Ignores:
    """What .gitignore (inside a git work tree), .ignore and .git/info/exclude files say about a path, as
    git does: the files of a folder and of the folders above it up to the work tree's root, the deeper
    file's verdict winning, negations (!keep.py) included."""

    def __init__(self) -> None:
        self._specs: dict[str, tuple[bool, list[tuple[str, Any]]]] = {}  # folder -> (in a git work tree, specs)

    def _for(self, folder: str) -> tuple[bool, list[tuple[str, Any]]]:
        if folder in self._specs:
            return self._specs[folder]
        import pathspec

        parent = os.path.dirname(folder)
        git_root = os.path.exists(os.path.join(folder, ".git"))
        in_git, specs = (True, []) if git_root else (False, []) if parent == folder else self._for(parent)
        specs = list(specs)
        names = [".gitignore", ".ignore"] if in_git else [".ignore"]
        for name in ([os.path.join(".git", "info", "exclude")] if git_root else []) + names:
            file = os.path.join(folder, name)
            if os.path.isfile(file):
                try:
                    with open(file, encoding="utf-8", errors="replace") as f:
                        specs.append((folder, pathspec.GitIgnoreSpec.from_lines(f.read().splitlines())))
                except OSError:
                    continue
        self._specs[folder] = (in_git, specs)
        return in_git, specs

    def ignored(self, path: str, is_dir: bool) -> bool:
        path = os.path.abspath(path)
        verdict = False
        for base, spec in self._for(os.path.dirname(path))[1]:
            rel = os.path.relpath(path, base).replace(os.sep, "/") + ("/" if is_dir else "")
            include = spec.check_file(rel).include
            if include is not None:
                verdict = include
        return verdict


def _is_environment(folder: str) -> bool:
    """A virtual environment or an installed-packages folder: never walked."""
    name = os.path.basename(folder)
    return name in ("site-packages", "dist-packages") or os.path.isfile(os.path.join(folder, "pyvenv.cfg")) or \
        os.path.isfile(os.path.join(folder, "conda-meta", "history"))


def collect(paths: Iterable[str | os.PathLike[str]], exclude: Iterable[str] = (), *,
            defaults: Iterable[str] | None = None, respect_gitignore: bool = True,
            force_exclude: bool = False) -> tuple[list[Path], list[Path], list[str]]:
    """The .py files under ``paths`` (and .cu/.cuh sources, for OA804), with warnings for what was skipped.

    A directory is walked without following symlinks; a file that resolves outside the given paths is
    skipped, so nothing outside them is ever written. As ruff walks: excluded names (fnmatch patterns:
    ``defaults``, else DEFAULT_EXCLUDE, and ``exclude``), what .gitignore, .ignore and git's exclude file
    ignore (unless not ``respect_gitignore``), virtual environments and site-packages are skipped; files
    named explicitly are taken as they are unless ``force_exclude``."""
    patterns = [*VCS_DIRS, *(DEFAULT_EXCLUDE if defaults is None else defaults), *exclude]
    ignores = _Ignores() if respect_gitignore else None

    def skipped(name: str, dirpath: str, is_dir: bool) -> bool:
        full = os.path.join(dirpath, name)
        if _excluded(name, dirpath, patterns) or (is_dir and _is_environment(full)):
            return True
        return ignores is not None and ignores.ignored(full, is_dir)

    roots = []
    py: dict[Path, Path] = {}
    cu: list[Path] = []
    warnings: list[str] = []
    for p in paths:
        path = Path(p)
        if not path.exists():
            raise InputError(f"{path}: no such file or directory")
        roots.append(path.resolve())
    allowed = [r if r.is_dir() else r.parent for r in roots]

    def inside(real: Path) -> bool:
        return any(real == a or a in real.parents for a in allowed)

    def add(file: Path) -> None:
        real = file.resolve()
        if file.is_symlink() and not inside(real):
            warnings.append(f"{file}: a symlink to {real}, outside the given paths: skipped")
            return
        py.setdefault(real, file)

    for p in paths:
        path = Path(p)
        if path.is_file():
            if force_exclude and _forced_out(path, skipped):
                continue
            if path.suffix in (".cu", ".cuh"):
                cu.append(path)
            else:
                add(path)
            continue
        for dirpath, dirnames, filenames in os.walk(path):
            dirnames[:] = sorted(d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))
                                 and not skipped(d, dirpath, True))
            for name in sorted(filenames):
                if not name.endswith((".py", ".pyi", ".cu", ".cuh")) or skipped(name, dirpath, False):
                    continue
                file = Path(dirpath) / name
                if name.endswith((".py", ".pyi")):
                    add(file)
                elif name.endswith((".cu", ".cuh")):
                    cu.append(file)
    return sorted(py.values()), cu, warnings


def _forced_out(path: Path, skipped: Any) -> bool:
    """Whether a file named on the command line is excluded (--force-exclude): the file, or a folder
    between the working directory and it."""
    rel = Path(os.path.relpath(path.absolute(), os.getcwd()))
    if rel.parts and rel.parts[0] == "..":
        return bool(skipped(path.name, str(path.parent), False))
    here = Path(os.getcwd())
    for part in rel.parts[:-1]:
        if skipped(part, str(here), True):
            return True
        here = here / part
    return bool(skipped(path.name, str(path.parent), False))


def _excluded(name: str, dirpath: str, patterns: list[str]) -> bool:
    rel = os.path.join(dirpath, name)
    return any(fnmatch(name, p) or fnmatch(rel, p) or fnmatch(rel, f"*/{p}") for p in patterns)


def _work(args: tuple[str, Settings, bool]) -> FileResult:
    path, settings, fix = args
    try:
        source = Path(path).read_bytes()
    except OSError as e:
        return FileResult(path, error=f"{path}: cannot be read: {e.strerror or e}")
    try:
        return _run(source, settings, path, fix=fix)
    except RecursionError:
        return FileResult(path, error=f"{path}: nested too deeply to analyse")


def _map(items: list[tuple[str, Settings, bool]], jobs: int) -> Iterator[FileResult]:
    if jobs <= 1 or len(items) < 16:
        yield from map(_work, items)
        return
    import multiprocessing

    ctx = multiprocessing.get_context("fork") if hasattr(os, "fork") else None
    with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
        yield from pool.map(_work, items, chunksize=max(1, min(32, len(items) // (jobs * 8))))


def run(paths: Iterable[str | os.PathLike[str]], settings: Settings, *, fix: bool = False, write: bool = True,
        jobs: int | None = None) -> Run:
    """Lint (or, with ``fix``, fix) every Python file under ``paths``. With ``write`` the fixed files are
    written atomically, each only if its output parses; without it (``--diff``) nothing is written."""
    target, cat, selected = settings.resolved()  # unknown target or selector: fail before any work
    files, cu, warnings = collect(paths, settings.exclude, defaults=settings.exclude_defaults,
                                  respect_gitignore=settings.respect_gitignore, force_exclude=settings.force_exclude)
    out = Run(warnings=warnings)
    if "OA804" in selected and not target.keeps_cuda:
        rule = cat.rules["OA804"]
        out.extra = [Finding(str(p), 1, 1, 1, 1, "OA804", f"{rule.summary}: {p.name}", "report") for p in cu]
    jobs = jobs or os.cpu_count() or 1
    for result in _map([(str(p), settings, fix) for p in files], jobs):
        if fix and write and result.changed:
            write_atomic(os.path.realpath(result.path), result.new or b"")
        out.files.append(result)
    return out
