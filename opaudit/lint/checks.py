"""The mechanisms that find CUDA assumptions in one parsed file and build their replacements.

One traversal runs every selected rule (the visitor dispatches on node type and keeps its own parent
stack, so no metadata pass is needed to find constructs). Module-level APIs are matched by qualified
name: the file's imports (including ``import torch as t``, ``from torch import cuda`` and
``from torch.cuda import amp as A``) resolve the root of each dotted chain. Methods such as
``.cuda()`` are matched by syntax and marked heuristic. What a construct becomes on a target comes
from the target tables (rules/targets/) and the catalogue (rules/catalogue.toml).

A check reports ``(node, code, message, replacement node or None)``; the engine turns nodes into
positions, honours ``# noqa``, and applies replacements by node identity.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache, lru_cache
from typing import Any

import libcst as cst

from opaudit.lint.catalogue import Catalogue, Rule, Target, version_at_least
from opaudit.lint.receivers import Receivers

DEVICE = re.compile(r"cuda(?::(\d+))?")
DEVICE_KWARGS = {"device", "device_type", "pin_memory_device", "output_device", "map_location", "device_id"}
# callee -> (index of its positional device argument, the rule that owns a "cuda" there)
DEVICE_ARGS = {
    "torch.device": (0, "OA102"),
    "torch.set_default_device": (0, "OA103"),
    "torch.Generator": (0, "OA103"),
    "torch.get_device_module": (0, "OA103"),
    "torch.load": (1, "OA103"),
    "torch.autocast": (0, "OA203"),
    "torch.amp.autocast": (0, "OA203"),
    "torch.amp.GradScaler": (0, "OA203"),
    "torch.get_autocast_dtype": (0, "OA203"),
    "torch.set_autocast_dtype": (0, "OA203"),
    "torch.is_autocast_enabled": (0, "OA203"),
    "torch.set_autocast_enabled": (0, "OA203"),
    "torch.distributed.device_mesh.init_device_mesh": (0, "OA305"),
    "torch.distributed.init_device_mesh": (0, "OA305"),
    "torch.distributed.device_mesh.DeviceMesh": (0, "OA305"),
    "torch.distributed.DeviceMesh": (0, "OA305"),
}
TYPE_POSITIONS = {"OA203"}  # positions that take a device *type* (no index)
DIST_INIT = {"torch.distributed.init_process_group", "torch.distributed.new_group",
             "torch.distributed.distributed_c10d.init_process_group", "torch.distributed.distributed_c10d.new_group"}
ENVIRON_CALLS = {"os.environ.get", "os.environ.setdefault", "os.environ.pop", "os.getenv", "os.putenv",
                 "os.unsetenv", "os.environ.__getitem__"}
AMP_DEPRECATED = {"torch.cuda.amp.autocast": "torch.amp.autocast", "torch.cuda.amp.GradScaler": "torch.amp.GradScaler",
                  "torch.cuda.amp.autocast_mode.autocast": "torch.amp.autocast",
                  "torch.cuda.amp.grad_scaler.GradScaler": "torch.amp.GradScaler"}
AMP_DECORATORS = {"torch.cuda.amp.custom_fwd": "torch.amp.custom_fwd",
                  "torch.cuda.amp.custom_bwd": "torch.amp.custom_bwd"}
GPU_AUTOCAST = {"torch.get_autocast_gpu_dtype": "torch.get_autocast_dtype",
                "torch.set_autocast_gpu_dtype": "torch.set_autocast_dtype",
                "torch.is_autocast_enabled": "torch.is_autocast_enabled"}
SDP_FLAGS = {"enable_flash": "FLASH_ATTENTION", "enable_math": "MATH", "enable_mem_efficient": "EFFICIENT_ATTENTION",
             "enable_cudnn": "CUDNN_ATTENTION"}
# replacements whose module must be imported explicitly (others live on an already imported root)
EXPLICIT_IMPORTS = ("torch.nn.attention", "torch.profiler", "torch.utils.cpp_extension", "torch.autograd.profiler")


@dataclass
class Report:
    node: cst.CSTNode
    code: str
    message: str
    replacement: cst.CSTNode | None = None  # applied by `fix` (safe, or unsafe with --unsafe-fixes)
    suggestion: str | None = None  # shown, never applied
    heuristic: bool = False
    fix: str | None = None  # overrides the rule's fix class for this finding (a literal outside a device position)
    statement: cst.CSTNode | None = None  # the innermost statement holding the node (for its position)
    ancestors: frozenset[int] = frozenset()  # ids of the nodes above it (a fix rebuilds only those)
    conjunction: int | None = None  # id of the outermost `and` / `or` holding it


@dataclass
class Imported:
    qualname: str  # what the name is bound to: torch, torch.cuda, torch.cuda.amp.autocast
    module: str  # the import that bound it, for removing it once unused
    obj: str | None
    asname: str | None


@dataclass
class Plan:
    """What a traversal found and what a fix needs besides the replacements."""

    reports: list[Report] = field(default_factory=list)
    add_imports: set[str] = field(default_factory=set)  # modules to `import`
    remove_imports: set[tuple[str, str | None, str | None]] = field(default_factory=set)


def dotted(node: cst.CSTNode) -> str | None:
    """``a.b.c`` for a chain of Names and Attributes, else None. ``getattr(a, "b")`` (with or without a
    default) is the attribute ``a.b`` written dynamically."""
    parts = []
    while True:
        if isinstance(node, cst.Attribute):
            parts.append(node.attr.value)
            node = node.value
            continue
        name = _getattr_name(node)
        if name is None:
            break
        parts.append(name)
        node = node.args[0].value  # type: ignore[attr-defined]
    if not isinstance(node, cst.Name):
        return None
    parts.append(node.value)
    return ".".join(reversed(parts))


def _getattr_name(node: cst.CSTNode) -> str | None:
    """The attribute name of ``getattr(x, "name")`` / ``getattr(x, "name", default)``, else None."""
    if not isinstance(node, cst.Call) or not isinstance(node.func, cst.Name) or node.func.value != "getattr":
        return None
    if not 2 <= len(node.args) <= 3 or any(a.keyword is not None or a.star for a in node.args):
        return None
    name = string_value(node.args[1].value)
    return name if name is not None and name.isidentifier() else None


def expr(code: str) -> cst.BaseExpression:
    """The expression ``code`` as a new node (parsed once per process; each use gets its own copy)."""
    return _parsed(code).deep_clone()


@lru_cache(maxsize=4096)
def _parsed(code: str) -> cst.BaseExpression:
    return cst.parse_expression(code)


def string_value(node: cst.CSTNode) -> str | None:
    """The text of a plain string literal (no f-string, no concatenation), else None."""
    if isinstance(node, cst.SimpleString):
        v = node.evaluated_value
        return v if isinstance(v, str) else None
    return None


def with_value(node: cst.SimpleString, text: str) -> cst.SimpleString:
    """The same literal (prefix and quotes kept) with another text."""
    prefix_len = len(node.prefix)
    quote = node.quote
    return node.with_changes(value=node.value[:prefix_len] + quote + text + quote)


class FileCheck:
    """One traversal of one module, every selected rule."""

    def __init__(self, module: cst.Module, target: Target, catalogue: Catalogue, selected: frozenset[str],
                 min_torch: str, source: bytes):
        self.target = target
        self.rules = catalogue.rules
        self.selected = selected
        self.min_torch = min_torch
        self.stack: list[cst.CSTNode] = []
        self.imports: dict[str, Imported] = {}
        self.handled: set[int] = set()  # nodes a more specific rule already looked at
        # per enclosing scope (function, lambda, comprehension, class body): the names it binds itself
        self.shadows: list[set[str]] = []
        self.scope_imports: list[set[str]] = []  # per entry of shadows: the names its own imports bind
        self.class_scopes: set[int] = set()  # ids of the entries of shadows that are class bodies
        self.current: cst.CSTNode | None = None  # the node whose handler runs
        self.library_names: dict[str, str] = {}  # a name bound by importing a CUDA-only library -> its rule
        self.callable_aliases: dict[str, str] = {}  # precision_scope = torch.autocast -> "torch.autocast"
        # device strings followed through names: `device = "cuda"` ... `"cuda" in device`
        self.device_values: list[tuple[str, Report]] = []  # (name, the report of a CUDA string it is assigned)
        self.device_probes: list[tuple[str, Report, cst.CSTNode | None]] = []  # (name, report, its rewrite)
        self.device_names: set[str] = set()  # names passed where a device goes
        self.backend_values: list[tuple[str, Report]] = []  # backend = "nccl"
        self.backend_names: set[str] = set()  # init_process_group(backend=backend)
        self.plan = Plan()
        self.trace: dict[int, bool] | None = None  # set by a caller: id(root Name) -> resolved to an import
        self.defines_cuda_method = b"def cuda(" in source
        self.own_is_cuda = _own_is_cuda(source)
        self.receivers = Receivers(self, module, source)
        self.api_exact, self.api_prefix, self.modules, self.env_names, self.env_prefixes, self.strings = \
            _indexes(catalogue, selected, target.name)
        self.cuda_sources = b".cu'" in source or b'.cu"' in source  # the file names a CUDA source file
        self.extension_names: set[str] = set()  # names bound to a module built from CUDA sources
        self.acc = target.accelerator_expr(min_torch)
        for stmt in _top_level_statements(module.body):
            if isinstance(stmt, cst.SimpleStatementLine):
                for small in stmt.body:
                    if isinstance(small, (cst.Import, cst.ImportFrom)):
                        self._bind(small)
        self.top_imports = dict(self.imports)  # what module-level imports bind: visible in every function
        # a module-level name an import binds and a loop, with, except, def or class rebinds: not the import
        # module-level names a loop, with, except, def or class binds: not an import's (where an import binds
        # the same name, which one holds depends on the order of execution: neither is assumed)
        self.walrus = b":=" in source  # only then can an expression bind a name
        self.shadows.append(_bindings(module.body, assignments=False, deep=self.walrus)[0])
        self.scope_imports.append(set(self.top_imports))
        # the file's module-level name for torch (import torch as t), if it has one
        self.torch_alias = next((name for name, b in self.top_imports.items() if b.qualname == "torch"), None)

    # -- traversal ---------------------------------------------------------------------------------
    def walk(self, node: cst.CSTNode) -> None:
        """Visit ``node`` and what it contains, in source order, parents first.

        LibCST's own ``visit`` rebuilds every node it passes (about three quarters of a lint's time);
        this walk only reads the fields that can hold code."""
        handler = _HANDLERS.get(type(node))
        if handler is not None:
            self.current = node
            handler(self, node)
        self.stack.append(node)
        if type(node) in _SCOPE_TYPES:
            self._walk_scope(node)
        else:
            for child in _children(node):
                self.walk(child)
        self.stack.pop()

    def _walk_scope(self, node: cst.CSTNode) -> None:
        """A function, lambda, class or comprehension: decorators, bases, annotations and defaults in the
        enclosing scope, the body in its own, where the names it binds hide the imports of the same name."""
        inner = node.body if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)) else None
        for child in _children(node):
            if child is not inner and inner is not None:
                self.walk(child)
        # a class body's names are not seen by the functions in it: only while it is the innermost scope
        hidden = None
        if len(self.shadows) > 1 and id(self.shadows[-1]) in self.class_scopes:
            hidden = (self.shadows.pop(), self.scope_imports.pop())
        names, imported = _local_names(node, deep=self.walrus)
        self.shadows.append(names)
        self.scope_imports.append(imported)
        if isinstance(node, cst.ClassDef):
            self.class_scopes.add(id(names))
        for child in [inner] if inner is not None else _children(node):
            self.walk(child)
        self.shadows.pop()
        self.scope_imports.pop()
        self.class_scopes.discard(id(names))
        if hidden is not None:
            self.shadows.append(hidden[0])
            self.scope_imports.append(hidden[1])

    @property
    def parent(self) -> cst.CSTNode | None:
        return self.stack[-1] if self.stack else None

    # -- reporting ---------------------------------------------------------------------------------
    def on(self, code: str) -> bool:
        return code in self.selected

    def report(self, node: cst.CSTNode, code: str, message: str, replacement: cst.CSTNode | None = None, *,
               suggestion: str | None = None, heuristic: bool = False, fix: str | None = None) -> None:
        if code not in self.selected:
            return
        note = self.target.note(code)
        if note:
            message = f"{message} ({note})"
        rule = self.rules[code]
        if isinstance(replacement, cst.BaseExpression):
            replacement = self._through_torch_alias(replacement)
        if rule.fix in ("suggestion", "report") and replacement is not None:
            suggestion, replacement = suggestion or _code(replacement), None
        if suggestion is not None and self.torch_alias not in (None, "torch"):
            suggestion = _TORCH_NAME.sub(f"{self.torch_alias}.", suggestion)  # as the file writes it
        statement = next((n for n in reversed(self.stack) if isinstance(n, (cst.SimpleStatementLine,
                                                                            cst.BaseCompoundStatement))), None)
        if node is not None and isinstance(node, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            statement = node
        # the nodes above it: those of the walk, then those between the node being handled and it
        above = [*self.stack, *_path(self.current, node)]
        conjunction = next((id(n) for n in self.stack if isinstance(n, cst.BooleanOperation)), None)
        report = Report(node, code, message, replacement, suggestion, heuristic or rule.heuristic, fix, statement,
                        frozenset(id(n) for n in above), conjunction)
        self.plan.reports.append(report)

    def name_key(self, node: cst.CSTNode) -> str | None:
        """The name a device value is kept in (``device``, ``args.device``), qualified by the function that
        binds it where a parameter or local of that function holds it."""
        d = dotted(node)
        if d is None or isinstance(node, cst.Call):
            return None
        root = d.split(".")[0]
        for i in range(len(self.shadows) - 1, -1, -1):
            if root in self.shadows[i]:
                return f"{i}:{id(self.shadows[i])}:{d}"
        return d

    def assigned_name(self, node: cst.CSTNode) -> str | None:
        """The name an assignment binds to a value holding ``node`` (through conditionals, and/or, and the
        parts of a device string built at run time), else None."""
        child = node
        for parent in reversed(self.stack):
            if isinstance(parent, cst.Assign):
                if len(parent.targets) == 1 and parent.value is child:
                    return self.name_key(parent.targets[0].target)
                return None
            if isinstance(parent, (cst.AnnAssign,)):
                return self.name_key(parent.target) if parent.value is child else None
            if isinstance(parent, cst.IfExp) and parent.test is child:
                return None
            if not isinstance(parent, (cst.IfExp, cst.BooleanOperation, cst.FormattedString, cst.BinaryOperation,
                                       cst.FormattedStringText, cst.Attribute, cst.Call)):
                return None
            if isinstance(parent, cst.Call) and not (isinstance(parent.func, cst.Attribute)
                                                     and parent.func.attr.value == "format"):
                return None
            child = parent
        return None

    def _through_torch_alias(self, new: cst.BaseExpression) -> cst.BaseExpression:
        """A replacement that names ``torch.`` written with the file's own name for torch (``import torch as
        t``), or with ``import torch`` scheduled when the file binds no name to it."""
        code = _code(new)
        if not _TORCH_NAME.search(code):
            return new
        # a module the file already names (import torch.distributed as dist) is reached through that name
        for name, b in sorted(self.top_imports.items(), key=lambda nb: -len(nb[1].qualname)):
            if b.qualname.startswith("torch.") and name != b.qualname:
                code = re.sub(r"(?<![\w.\"'])" + re.escape(b.qualname) + r"\.", name + ".", code)
        alias = self.torch_alias
        if alias is None:
            if _TORCH_NAME.search(code):
                self.plan.add_imports.add("torch")
            return expr(code) if code != _code(new) else new
        return expr(_TORCH_NAME.sub(alias + ".", code)) if alias != "torch" or code != _code(new) else new

    def finish(self) -> None:
        for name, r in self.backend_values:
            if name in self.backend_names and r.replacement is not None:
                r.fix = "safe"  # backend = "nccl" ... init_process_group(backend=backend)
                r.message = r.message.replace(" (a value held for later: check where it goes)", "")
        self._stuck_probes()
        self._device_flow()
        self._conjunctions()

    def _device_flow(self) -> None:
        """Device-type probes go with the device strings they test. ``device = "cuda"``, ``device_type =
        "cuda" if "cuda" in device else "cpu"`` and ``if device_type == "cuda":`` are one group: rewritten
        together (a probe left as it was would now be false: no autocast, no fused optimizer, no pinned
        memory), as a safe fix when one of its names reaches a device position (``.to(device)``,
        ``device_type=device_type``), else with --unsafe-fixes."""
        if not self.device_probes and not self.device_values:
            return
        parent: dict[str, str] = {}

        def find(k: str) -> str:
            while parent.get(k, k) != k:
                k = parent[k]
            return k

        def union(a: str, b: str) -> None:
            parent[find(a)] = find(b)

        by_statement: dict[int, list[str]] = {}
        for name, r in self.device_values:
            find(name)
            by_statement.setdefault(id(r.statement), []).append(name)
        for name, r, _ in self.device_probes:
            find(name)
            for other in by_statement.get(id(r.statement), []):
                union(name, other)  # device_type = "cuda" if "cuda" in device else "cpu"
        groups: dict[str, list[tuple[Report, cst.CSTNode | None, bool]]] = {}
        for name, r in self.device_values:
            groups.setdefault(find(name), []).append((r, r.replacement, False))
        for name, r, new in self.device_probes:
            groups.setdefault(find(name), []).append((r, new, True))
        reached = {find(n) for n in self.device_names if n in parent or find(n) in groups}
        for root, members in groups.items():
            if not any(probe for _, _, probe in members):
                if root in reached:  # a device string kept in a name that is used as a device
                    for r, new, _ in members:
                        if new is not None:
                            r.fix = "safe"
                continue
            if any(new is None for _, new, _ in members):
                for r, _, _ in members:
                    if r.replacement is not None:
                        r.suggestion, r.replacement = _code(r.replacement), None
                    r.message += " (not rewritten: a device string it goes with has no rewrite here)"
                continue
            cls = "safe" if root in reached else "unsafe"
            for r, new, probe in members:
                r.replacement, r.fix, r.suggestion = new, cls, None
                if probe:
                    r.message += " (ported with the device strings it tests)"

    def _conjunctions(self) -> None:
        """``torch.cuda.is_available() and torch.cuda.is_bf16_supported()`` is one question: its probes are
        rewritten together (the strictest fix class of them) or not at all. Half a port would answer it
        for two devices at once (bf16 silently becoming fp16)."""
        groups: dict[int, list[Report]] = {}
        for r in self.plan.reports:
            if r.conjunction is not None and r.code in PROBE_RULES:
                groups.setdefault(r.conjunction, []).append(r)
        for members in groups.values():
            if len(members) < 2:
                continue
            classes = {r.fix or self.rules[r.code].fix for r in members}
            if any(r.replacement is None for r in members):
                for r in members:
                    if r.replacement is not None:
                        r.suggestion, r.replacement = _code(r.replacement), None
                        r.message += " (not rewritten: another probe in the same condition has no rewrite)"
            elif len(classes) > 1:
                strictest = "unsafe" if "unsafe" in classes else "safe"
                for r in members:
                    r.fix = strictest
                    r.message += " (rewritten with the other probes of its condition)"

    def _stuck_probes(self) -> None:
        """While a file still calls a CUDA-only API that nothing replaces, its CUDA probes stay CUDA probes:
        a rewritten ``torch.cuda.is_available()`` would send the target down a path that fails there
        (a guarded call, an early return, a flag stored for later), so those fixes become suggestions."""
        cuda_only = {c for c, r in self.rules.items() if any(a.startswith("torch.cuda.") for a in r.apis)}
        cuda_only |= {"OA003", "OA801", "OA802", "OA803"}
        stuck = next((r for r in self.plan.reports if r.replacement is None and r.code in cuda_only
                      and r.code not in ("OA117", "OA106")), None)
        if stuck is None:
            return
        for report in self.plan.reports:
            if report.code in ("OA117", "OA106") and report.replacement is not None:
                report.suggestion = _code(report.replacement)
                report.replacement = None
                report.message += f" (not rewritten: the file still calls a CUDA-only API ({stuck.code}); port " \
                                  "that first)"

    def need_import(self, name: str) -> None:
        """Schedule the import a replacement's dotted name needs."""
        root = name.split(".")[0]
        for m in EXPLICIT_IMPORTS:
            if name.startswith(m + "."):
                if not any(b.module == m for b in self.top_imports.values()):
                    self.plan.add_imports.add(m)
                return
        bound = self.top_imports.get(root)
        if bound is not None and bound.qualname == root:
            return  # the file imports it already
        # torch's own names live on `torch`; a vendor package imports its submodules itself
        self.plan.add_imports.add(root)

    # -- imports and names -------------------------------------------------------------------------
    def _bind(self, node: cst.Import | cst.ImportFrom) -> None:
        if isinstance(node, cst.Import):
            for alias in node.names:
                full = dotted(alias.name) or ""
                if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                    self.imports[alias.asname.name.value] = Imported(full, full, None, alias.asname.name.value)
                else:
                    root = full.split(".")[0]
                    self.imports.setdefault(root, Imported(root, full, None, None))
            return
        if node.relative or node.module is None or isinstance(node.names, cst.ImportStar):
            return
        module = dotted(node.module) or ""
        for alias in node.names:
            name = dotted(alias.name) or ""
            asname = alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) else None
            self.imports[asname or name] = Imported(f"{module}.{name}", module, name, asname)

    def qualname(self, node: cst.CSTNode) -> str | None:
        d = dotted(node)
        if d is None:
            return None
        root, _, rest = d.partition(".")
        bound = None
        for names, imported in zip(reversed(self.shadows), reversed(self.scope_imports), strict=True):
            if root in names:
                break  # a binding of an enclosing scope hides the import
            if root in imported:
                bound = self.imports.get(root)
                break
        if self.trace is not None:
            first = node
            while isinstance(first, cst.Attribute):
                first = first.value
            if isinstance(first, cst.Name):
                self.trace[id(first)] = bound is not None
        if bound is None:
            return None  # not imported, or a binding of an enclosing scope hides the import
        return bound.qualname + ("." + rest if rest else "")

    def _renamed(self, node: cst.CSTNode, new: str) -> cst.BaseExpression:
        """``new`` (a dotted name) written the way this file can reach it: through the file's own alias of
        torch where it has one (``t.npu.synchronize``), else in full with the import scheduled; the import
        that bound the old name is scheduled for removal once unused."""
        d = dotted(node) or ""
        root = d.split(".")[0]
        bound = self.imports.get(root)
        if bound is not None and new.startswith(bound.qualname + ".") and (bound.qualname != "torch" or not any(
                new.startswith(m + ".") for m in EXPLICIT_IMPORTS)):
            return expr(root + new[len(bound.qualname):])  # through the name the file already has
        if bound is not None and (bound.obj is not None or bound.qualname.split(".")[0] != "torch"):
            self.plan.remove_imports.add((bound.module, bound.obj, bound.asname))  # removed only once unused
        alias = self.torch_alias
        if alias is not None and new.startswith("torch.") and not any(new.startswith(m + ".")
                                                                      for m in EXPLICIT_IMPORTS):
            return expr(alias + new[len("torch"):])  # the file's own `import torch` (as t) reaches it
        self.need_import(new)
        return expr(new)

    def device_text(self, index: str | None, *, type_only: bool = False) -> str | None:
        """The literal text replacing "cuda" / "cuda:N" on a vendor target."""
        dev = self.target.device
        if not dev:
            return None
        if index is None or type_only:
            return dev
        return f"{dev}:{index}"

    def device_expr(self, index: str | None, *, type_only: bool = False) -> str | None:
        """The neutral expression replacing "cuda" / "cuda:N" (None below torch.accelerator's version). A
        device type falls back to "cpu" on a host without accelerator, where code such as
        GradScaler("cuda", enabled=False) ran before."""
        if self.acc is None:
            return None
        if type_only:
            return self.acc_type
        return self.acc if index is None else f"torch.device({self.acc}.type, {index})"

    @property
    def acc_type(self) -> str:
        return self.acc_type_quoted('"')

    def acc_type_quoted(self, quote: str) -> str:
        """The accelerator's device type, "cpu" without one, written with ``quote`` (inside an f-string
        delimited by the other quote)."""
        assert self.acc is not None
        return f'({self.acc.replace("()", "(check_available=True)")} or torch.device({quote}cpu{quote})).type'


_TORCH_NAME = re.compile(r"(?<![\w.\"'])torch\.")
# CUDA capability probes that are rewritten together when one condition holds several
PROBE_RULES = {"OA117", "OA120", "OA116", "OA118", "OA119", "OA003", "OA303", "OA612"}
_SKIPPED_FIELDS = ("whitespace", "lpar", "rpar", "comma", "semicolon", "equal", "colon", "dot", "leading_lines",
                   "lines_after_decorators", "header", "footer", "operator", "star", "asynchronous", "arrow",
                   "lbracket", "rbracket", "lbrace", "rbrace", "newline", "indent")


@cache
def _code_fields(node_type: type) -> tuple[str, ...]:
    """The fields of a node type that can hold code (not whitespace, comments or punctuation)."""
    import dataclasses

    return tuple(f.name for f in dataclasses.fields(node_type)
                 if not any(f.name == s or f.name.startswith(s) or f.name.endswith("whitespace")
                            for s in _SKIPPED_FIELDS))


def _children(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """The nodes directly under ``node`` that can hold code, in source order."""
    for name in _code_fields(type(node)):
        value = getattr(node, name)
        if isinstance(value, cst.CSTNode):
            yield value
        elif isinstance(value, (list, tuple)):
            yield from (item for item in value if isinstance(item, cst.CSTNode))


def _subtree(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    yield node
    for child in _children(node):
        yield from _subtree(child)


def _path(top: cst.CSTNode | None, node: cst.CSTNode) -> list[cst.CSTNode]:
    """The nodes from ``top`` down to ``node``'s parent (empty when ``node`` is ``top`` or not under it)."""
    if top is None or top is node:
        return []
    for child in _children(top):
        if child is node:
            return [top]
        below = _path(child, node)
        if below:
            return [top, *below]
    return []


_COMPREHENSIONS = (cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)
_SCOPES = (cst.FunctionDef, cst.Lambda, cst.ClassDef, *_COMPREHENSIONS)
_SCOPE_TYPES = frozenset(_SCOPES)  # type(node) in a set: isinstance on LibCST's ABCs is slow
_EXPRESSION_TYPES = frozenset(v for v in vars(cst).values()
                              if isinstance(v, type) and issubclass(v, cst.BaseExpression))
_SCOPE_OR_SKIPPED = frozenset((cst.Lambda, *_COMPREHENSIONS, cst.Import, cst.ImportFrom))


def _local_names(node: cst.CSTNode, *, deep: bool = True) -> tuple[set[str], set[str]]:
    """The names a scope binds itself, which hide a module-level import of the same name inside it: a
    function's or lambda's parameters and whatever its body binds (assignments, loop, with and except
    targets, nested defs and classes, :=; not imports, and not names declared global or nonlocal); a
    comprehension's loop targets; a class body's own bindings."""
    names: set[str] = set()
    imported: set[str] = set()
    if isinstance(node, (cst.FunctionDef, cst.Lambda)):
        params = node.params
        names = {p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)}
        for star in (params.star_arg, params.star_kwarg):
            if isinstance(star, cst.Param):
                names.add(star.name.value)
    if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
        bound, imported = _bindings([node.body], assignments=True, deep=deep)
        names |= bound
    elif isinstance(node, _COMPREHENSIONS):
        comp: cst.CompFor | None = node.for_in
        while comp is not None:
            names.update(_target_names(comp.target))
            comp = comp.inner_for_in
    return names, imported - names


def _target_names(target: cst.CSTNode) -> Iterator[str]:
    if isinstance(target, cst.Name):
        yield target.value
    elif isinstance(target, (cst.Tuple, cst.List)):
        for e in target.elements:
            yield from _target_names(e.value)
    elif isinstance(target, cst.StarredElement):
        yield from _target_names(target.value)


def _bindings(body: Any, *, assignments: bool, deep: bool = True) -> tuple[set[str], set[str]]:
    """The names the statements ``body`` bind in their own scope, nested scopes excluded: loop, with and
    except targets, defs, classes and := always; assignments when ``assignments``. Apart: the names its
    imports bind. Without ``deep`` (no := in the file), expressions are not searched."""
    out: set[str] = set()
    imported: set[str] = set()
    declared: set[str] = set()
    todo: list[cst.CSTNode] = list(body)
    while todo:
        node = todo.pop()
        kind = type(node)
        if kind in _EXPRESSION_TYPES and (not deep or kind in _SCOPE_OR_SKIPPED):
            continue
        if kind is cst.FunctionDef or kind is cst.ClassDef:
            out.add(node.name.value)  # type: ignore[attr-defined]
            continue  # decorators and defaults aside, what is inside is another scope
        if kind in _BINDING_TYPES:
            _bind_names(node, out, declared, imported, assignments)
            if kind is cst.Import or kind is cst.ImportFrom:
                continue
        todo.extend(_children(node))
    return out - declared, imported - declared


_BINDING_TYPES = frozenset((cst.For, cst.CompFor, cst.WithItem, cst.ExceptHandler, cst.NamedExpr, cst.Global,
                            cst.Nonlocal, cst.Assign, cst.AnnAssign, cst.AugAssign, cst.Import, cst.ImportFrom))


def _bind_names(node: Any, out: set[str], declared: set[str], imported: set[str], assignments: bool) -> None:
    """The names one binding node binds (see _bindings)."""
    if isinstance(node, (cst.For, cst.CompFor)):
        out.update(_target_names(node.target))
    elif isinstance(node, cst.WithItem) and node.asname is not None:
        out.update(_target_names(node.asname.name))
    elif isinstance(node, cst.ExceptHandler) and node.name is not None:
        out.update(_target_names(node.name.name))
    elif isinstance(node, cst.NamedExpr):
        out.update(_target_names(node.target))
    elif isinstance(node, (cst.Global, cst.Nonlocal)):
        declared.update(n.name.value for n in node.names)
    elif assignments and isinstance(node, cst.Assign):
        for t in node.targets:
            out.update(_target_names(t.target))
    elif assignments and isinstance(node, (cst.AnnAssign, cst.AugAssign)):
        out.update(_target_names(node.target))
    elif isinstance(node, (cst.Import, cst.ImportFrom)):
        if not isinstance(node.names, cst.ImportStar):
            for alias in node.names:
                bound_name = alias.asname.name if alias.asname is not None else alias.name
                imported.add((dotted(bound_name) or "").split(".")[0])


def _code(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)


def _top_level_statements(body: Any) -> Any:
    """Module-level statements, looking into if/try/with blocks (guarded imports), not into defs."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, (cst.If, cst.Try, cst.With)):
            yield from _top_level_statements(stmt.body.body)
            for extra in (getattr(stmt, "orelse", None), getattr(stmt, "finalbody", None)):
                if extra is not None and hasattr(extra, "body"):
                    inner = extra.body
                    yield from _top_level_statements(inner.body if hasattr(inner, "body") else [inner])
            for handler in getattr(stmt, "handlers", ()):
                yield from _top_level_statements(handler.body.body)


# -- indexes of the catalogue, per selection ---------------------------------------------------------
_INDEX_CACHE: dict[tuple, Any] = {}


def _indexes(catalogue: Catalogue, selected: frozenset[str], target: str) -> tuple:
    """The selected rules of a target, indexed by what they match: exact APIs, API prefixes (``x.*``),
    imported modules, environment variable names and prefixes. Built once per selection and target."""
    key = (id(catalogue), selected, target)
    if key not in _INDEX_CACHE:
        rules = [r for c, r in catalogue.rules.items() if c in selected and (not r.targets or target in r.targets)]
        exact = {a: r.code for r in rules for a in r.apis if not a.endswith(".*")}
        prefix = {a[:-2]: r.code for r in rules for a in r.apis if a.endswith(".*")}
        modules = {m: r.code for r in rules for m in r.modules}
        env_names = {n: r.code for r in rules for n in r.env}
        env_prefixes = {p: r.code for r in rules for p in r.env_prefix}
        strings = [(re.compile("|".join(f"(?:{x})" for x in r.strings)), r.code) for r in rules if r.strings]
        _INDEX_CACHE[key] = (exact, prefix, modules, env_names, env_prefixes, strings)
    return _INDEX_CACHE[key]


def lookup(exact: dict[str, str], prefix: dict[str, str], qualname: str) -> str | None:
    """The rule of the longest API that is ``qualname`` or contains it (``torch.cuda.Stream`` owns
    ``torch.cuda.Stream.priority_range``); ``x.*`` entries own what is under x but not x."""
    if qualname in exact:
        return exact[qualname]
    parts = qualname.split(".")
    for n in range(len(parts) - 1, 0, -1):
        head = ".".join(parts[:n])
        code = exact.get(head) or prefix.get(head)
        if code:
            return code
    return None


# -- handlers ----------------------------------------------------------------------------------------
def _visit_import(c: FileCheck, node: cst.Import | cst.ImportFrom) -> None:
    c._bind(node)
    names: list[str] = []
    if isinstance(node, cst.Import):
        names = [dotted(a.name) or "" for a in node.names]
    elif not node.relative and node.module is not None:
        module = dotted(node.module) or ""
        if isinstance(node.names, cst.ImportStar):
            if module.startswith("torch.cuda") and c.on("OA418"):
                c.report(node, "OA418", f"`from {module} import *` hides which CUDA APIs the file uses")
            names = [module]
        else:
            names = [f"{module}.{dotted(a.name)}" for a in node.names] + [module]
    _remember_library_names(c, node)
    for name in names:
        code = _library_rule(c, name)
        if code is not None:
            rule = c.rules[code]
            heuristic = code == "OA714" and _compiled_extension(name)
            c.report(node, code, f"{rule.summary}: `{name}`", heuristic=heuristic)
            return
    cuda_module = next((n for n in names if _cuda_module(n)), None)
    if cuda_module is not None:
        code = lookup(c.api_exact, c.api_prefix, cuda_module)
        if code in ("OA306", "OA416") and c.on(code):
            c.report(node, code, f"{c.rules[code].summary}: `{cuda_module}`")
            return
        if c.on("OA419"):
            shown = cuda_module
            c.report(node, "OA419", f"{c.rules['OA419'].summary}: `{shown}`")
    if isinstance(node, cst.ImportFrom) and not node.relative and node.module is not None and \
            not isinstance(node.names, cst.ImportStar):
        # `from torch.utils.cpp_extension import CUDA_HOME` and friends: the imported object is an API
        module = dotted(node.module) or ""
        for a in node.names:
            q = f"{module}.{dotted(a.name)}"
            code = lookup(c.api_exact, c.api_prefix, q)
            if code in ("OA507", "OA801", "OA306", "OA410", "OA416") and c.on(code):
                c.report(a, code, f"{c.rules[code].summary}: `{q}`")


CUDA_MODULES = ("torch.cuda", "torch.backends.cudnn", "torch.backends.cuda")
COMPILED_EXTENSION = re.compile(r"[A-Za-z]\w*_cuda(?:_\w+)?")


def _cuda_module(name: str) -> bool:
    """Whether an imported name is (or is under) a CUDA-only torch module: torch.cuda, torch.cuda.amp,
    torch.backends.cudnn, torch.backends.cuda."""
    return any(name == m or name.startswith(m + ".") for m in CUDA_MODULES)


def _compiled_extension(name: str) -> bool:
    """A compiled CUDA extension module by its name: selective_scan_cuda, causal_conv1d_cuda."""
    return not name.startswith("torch") and COMPILED_EXTENSION.fullmatch(name.split(".")[0]) is not None


def _library_rule(c: FileCheck, name: str) -> str | None:
    """The rule of the CUDA-only library that ``name`` (a module or a name in it) comes from."""
    parts = name.split(".")
    code = next((c.modules[".".join(parts[:n])] for n in range(len(parts), 0, -1)
                 if ".".join(parts[:n]) in c.modules), None)
    if code is None and _compiled_extension(name) and "OA714" in c.selected:
        code = "OA714"
    return code


def _remember_library_names(c: FileCheck, node: cst.Import | cst.ImportFrom) -> None:
    """The names an import of a CUDA-only library binds, so that their uses are found too."""
    if isinstance(node, cst.ImportFrom) and (node.relative or node.module is None or
                                             isinstance(node.names, cst.ImportStar)):
        return
    for alias in node.names:  # type: ignore[union-attr]
        full = dotted(alias.name) or ""
        if isinstance(node, cst.ImportFrom):
            full = f"{dotted(node.module) or ''}.{full}"  # type: ignore[arg-type]
        code = _library_rule(c, full)
        if code is None:
            continue
        asname = alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) else None
        bound = asname or (full.rsplit(".", 1)[-1] if isinstance(node, cst.ImportFrom) else full.split(".")[0])
        c.library_names[bound] = code


def _is_maximal_chain(c: FileCheck, node: cst.CSTNode) -> bool:
    parent = c.parent
    if isinstance(node, cst.Name) and isinstance(parent, (cst.AssignTarget, cst.For, cst.AsName, cst.CompFor)):
        return False  # a name being bound, not used
    if isinstance(parent, cst.Attribute):
        return False  # the enclosing chain (or, for `.attr`, the chain this name ends) is the one to check
    if isinstance(parent, (cst.ImportAlias, cst.AsName, cst.Param, cst.FunctionDef, cst.ClassDef, cst.ImportFrom)):
        return False
    if isinstance(parent, cst.Arg) and parent.keyword is node:
        return False
    return True


def _visit_chain(c: FileCheck, node: cst.Attribute | cst.Name) -> None:
    if isinstance(c.parent, cst.Decorator) and id(node) not in c.handled:
        q = c.qualname(node)
        if q in AMP_DECORATORS:
            c.handled.add(id(node))
            _custom_fwd(c, node, q, [])
            return
    if id(node) in c.handled or not _is_maximal_chain(c, node):
        if isinstance(node, cst.Attribute) and id(node) not in c.handled:
            _visit_attribute_syntax(c, node)
        return
    if c.extension_names and isinstance(node, cst.Attribute) and _extension_call(c, node):
        return
    if isinstance(node, cst.Attribute):
        _visit_attribute_syntax(c, node)
    q = c.qualname(node)
    if q is None:
        return
    if c.library_names and _library_use(c, node, q):
        return
    if q == "torch.cuda" and c.on("OA418") and isinstance(c.parent, (cst.Assign, cst.AnnAssign)):
        c.report(node, "OA418", "an alias of torch.cuda hides which CUDA APIs the file uses")
        return
    code = lookup(c.api_exact, c.api_prefix, q)
    if code is None:
        return
    if code == "OA302" and isinstance(c.parent, (cst.Comparison, cst.ComparisonTarget)):
        c.report(node, "OA304", f"{c.rules['OA304'].summary}: `{q}`")  # what the comparison guards is a judgement
        return
    rule = c.rules[code]
    if code == "OA109":
        _typed_tensor(c, node, q)
        return
    if code == "OA118" and len(c.stack) >= 2 and isinstance(c.stack[-2], cst.Attribute) and \
            c.stack[-2].attr.value in ("major", "minor", "multi_processor_count", "gcnArchName"):
        c.report(node, code, f"{rule.summary}: `{q}(...).{c.stack[-2].attr.value}` is a CUDA property "
                 "(no such field on other devices)")
        return
    canonical = rule.renames.get(q, q)
    # a rename out of CUDA's namespace is the replacement on every target; one within it is then mapped
    new = canonical if canonical != q and not canonical.startswith("torch.cuda.") else _api_target(c, rule, canonical)
    message = f"{rule.summary}: `{q}`"
    if new:
        message += f" -> `{new}`"
        call = c.parent
        if new.endswith(")") and isinstance(call, cst.Call) and call.func is node and not call.args:
            c.need_import("torch")  # the replacement is a whole call (is_backend_available(...))
            c.report(call, code, message, expr(new))
        elif new.endswith(")"):
            c.report(node, code, message, suggestion=new)
        elif rule.fix in ("safe", "unsafe"):
            c.report(node, code, message, c._renamed(node, new))
        else:
            c.report(node, code, message, suggestion=new)
        return
    suggestion = _suggestion(c, rule) or c.target.device_module_form(canonical, c.min_torch)
    if rule.fix in ("safe", "unsafe") and c.target.keeps_cuda:
        return  # ROCm: torch.cuda is HIP; nothing to change
    if rule.fix in ("safe", "unsafe"):
        message += f" (no equivalent on {c.target.name})" if not c.target.neutral else \
            f" (no neutral equivalent for torch >= {c.min_torch})"
    c.report(node, code, message, suggestion=suggestion)


_TYPED_DTYPES = {"Float": "float32", "Half": "float16", "BFloat16": "bfloat16", "Long": "int64", "Int": "int32",
                 "Short": "int16", "Char": "int8", "Byte": "uint8", "Bool": "bool"}


def _typed_tensor(c: FileCheck, node: cst.CSTNode, q: str) -> None:
    """OA109: a legacy typed CUDA tensor. Called with sizes that are int literals it is ``torch.empty`` of them,
    with one list or tuple literal the tensor of that data: both are safe fixes (dtype and device written
    out). Anything else stays a suggestion: a variable argument may be a size or data, and ``isinstance`` or
    ``.type(...)`` against the class has no one-expression equivalent."""
    if c.target.keeps_cuda:
        return  # ROCm: torch.cuda's typed tensors are HIP's
    rule = c.rules["OA109"]
    dtype = _TYPED_DTYPES.get(q.rsplit(".", 1)[-1].removesuffix("Tensor"))
    text = c.device_text(None)
    device = c.device_expr(None) if c.target.neutral else f'"{text}"' if text else None
    call = c.parent
    if isinstance(call, cst.Call) and call.func is node and call.args and dtype and device:
        args = call.args
        plain = all(a.keyword is None and not a.star for a in args)
        sizes = plain and all(isinstance(a.value, cst.Integer) for a in args)
        if sizes or plain and len(args) == 1 and isinstance(args[0].value, (cst.List, cst.Tuple)):
            values = ", ".join(_code(a.value) for a in args)
            new = f"torch.{'empty' if sizes else 'tensor'}({values}, dtype=torch.{dtype}, device={device})"
            c.need_import("torch")
            c.report(call, "OA109", f"{rule.summary}: `{q}` -> `{new}`", expr(new))
            return
    suggestion, why = _suggestion(c, rule), ""
    outer = c.stack[-2] if len(c.stack) >= 2 and isinstance(c.parent, cst.Arg) else None
    if isinstance(outer, cst.Call) and dtype and device:
        if isinstance(outer.func, cst.Name) and outer.func.value == "isinstance" and len(outer.args) == 2:
            # isinstance(x, torch.cuda.FloatTensor): a class test, no constructor
            kind = c.acc_type if c.target.neutral else device
            suggestion = f"{_code(outer.args[0].value)}.dtype == torch.{dtype} and " \
                         f"{_code(outer.args[0].value)}.device.type == {kind}"
            why = " (a class test: compare the tensor's dtype and device)"
        elif isinstance(outer.func, cst.Attribute) and outer.func.attr.value == "type" and len(outer.args) == 1:
            suggestion = f"{_code(outer.func.value)}.to({device}, torch.{dtype})"
            why = " (a conversion: .to(device, dtype))"
    c.report(node, "OA109", f"{rule.summary}: `{q}`{why}", suggestion=suggestion)


def _library_use(c: FileCheck, node: cst.CSTNode, q: str) -> bool:
    """A use of a name from a CUDA-only library (flash_attn_func(...), @triton.jit, tl.load, bnb.optim...):
    reported where it is used, since that is the code to port, unless a more specific rule owns it."""
    root = (dotted(node) or "").split(".")[0]
    code = c.library_names.get(root)
    if code is None or lookup(c.api_exact, c.api_prefix, q) is not None:
        return False
    if not _runs_library_code(c, node, q):
        return True  # the name is there, but nothing of the library runs
    c.report(node, code, f"{c.rules[code].summary}: `{q}` used here",
             heuristic=code == "OA714" and _compiled_extension(q))
    return True


# a library's pure-PyTorch reference of its kernel (attention_ref, apply_rotary_emb_torch,
# multi_scale_deformable_attn_pytorch, a _ref module): it runs on any device
REFERENCE_IMPLEMENTATION = re.compile(r"(?:^|_)ref(?:erence)?$|(?<!_in)_(?:py)?torch$")


def _library_decorated(c: FileCheck, above: list[cst.CSTNode]) -> bool:
    """Whether the innermost function in ``above`` has a decorator from a CUDA-only library (its
    annotations are then read by that library's compiler)."""
    func = next((n for n in reversed(above) if isinstance(n, cst.FunctionDef)), None)
    if func is None:
        return False
    for d in func.decorators:
        target = d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator
        if (dotted(target) or "").split(".")[0] in c.library_names:
            return True
    return False


def _runs_library_code(c: FileCheck, node: cst.CSTNode, q: str) -> bool:
    """Whether a use of a CUDA-only library's name runs its code. Not: a type annotation, an
    availability test of the name the import bound (``if flash_attn_func is None``, ``if not xops:``),
    ``del name``, or the library's pure-PyTorch reference of a kernel."""
    if any(REFERENCE_IMPLEMENTATION.search(part) for part in q.split(".")[1:]):
        return False
    for i in range(len(c.stack) - 1, -1, -1):
        if isinstance(c.stack[i], cst.Annotation):
            return _library_decorated(c, c.stack[:i])  # @triton.jit compiles `BLOCK: tl.constexpr`
        if isinstance(c.stack[i], cst.Del):
            return False
        if isinstance(c.stack[i], cst.BaseStatement):
            break
    child = node
    for parent in reversed(c.stack):
        if isinstance(parent, cst.Comparison):
            return not (isinstance(node, cst.Name) and len(parent.comparisons) == 1 and parent.left is child and
                        isinstance(parent.comparisons[0].operator, (cst.Is, cst.IsNot)) and
                        isinstance(parent.comparisons[0].comparator, cst.Name) and
                        parent.comparisons[0].comparator.value == "None")
        if isinstance(parent, (cst.If, cst.While, cst.Assert, cst.IfExp)):
            # (reading an attribute of the library runs its code: `if multi_tensor_applier.available:`)
            return getattr(parent, "test", None) is not child or not isinstance(node, cst.Name)
        if not (isinstance(parent, cst.BooleanOperation) or
                isinstance(parent, cst.UnaryOperation) and isinstance(parent.operator, cst.Not)):
            return True
        child = parent
    return True


def _api_target(c: FileCheck, rule: Rule, qualname: str) -> str | None:
    t = c.target
    if t.neutral and rule.replace_neutral:
        if not version_at_least(c.min_torch, rule.neutral_min_torch or t.accelerator_min_torch) or c.acc is None:
            return None
        return rule.replace_neutral.format(acc=c.acc)
    if not t.neutral and rule.replace:
        fields = {"module": t.module, "device": t.device, "dist_const": t.dist_const,
                  "dist_available": t.dist_available, "package": t.package, "dist_backend": t.dist_backend}
        used = re.findall(r"{(\w+)}", rule.replace)
        if t.keeps_cuda or any(not fields.get(u) for u in used):
            return None
        return rule.replace.format(**fields)
    if rule.fix not in ("safe", "unsafe") and qualname not in t.api:
        return None
    return t.api_replacement(qualname, c.min_torch)


def written_names(target: Target, catalogue: Catalogue, min_torch: str) -> set[str]:
    """The dotted names ``fix`` can write for ``target`` in place of an API a rule matches by name (the
    target table's [api] values, the rules' templates, torch.cuda.X mapped onto the target's module): each
    must exist in the target's runtime, which the rehearsal's stand-ins answer (rules/targets/ [surface])."""
    import types

    c: Any = types.SimpleNamespace(target=target, min_torch=min_torch, acc=target.accelerator_expr(min_torch))
    out = {new for new, _ in target.api.values() if new and "(" not in new}
    handled = {*AMP_DEPRECATED, *AMP_DECORATORS, *GPU_AUTOCAST}
    for rule in catalogue.rules.values():
        if rule.targets and target.name not in rule.targets or rule.fix not in ("safe", "unsafe"):
            continue
        if rule.code == "OA109":
            continue  # writes torch.empty / torch.tensor calls (_typed_tensor), never a name of the target's module
        for api in rule.apis:
            if api.endswith(".*") or api in handled:
                continue
            canonical = rule.renames.get(api, api)
            new = canonical if canonical != api and not canonical.startswith("torch.cuda.") else \
                _api_target(c, rule, canonical)
            if new and "(" not in new:
                out.add(new)
    return out


def _suggestion(c: FileCheck, rule: Rule) -> str | None:
    t = c.target
    if t.neutral:
        return rule.suggest_neutral.format(acc=c.acc or "torch.accelerator.current_accelerator()") \
            if rule.suggest_neutral else None
    if rule.suggest and t.module:
        return rule.suggest.format(module=t.module, device=t.device, package=t.package)
    return None


def _visit_attribute_syntax(c: FileCheck, node: cst.Attribute) -> None:
    """Attributes matched by name whatever the receiver: `.is_cuda`, `.cuda_stream`."""
    attr = node.attr.value
    if attr == "is_cuda" and c.on("OA108") and not c.target.keeps_cuda:
        if c.qualname(node.value) is not None:
            return  # a module attribute, not a tensor's
        if c.own_is_cuda and dotted(node.value) in c.own_is_cuda or _self_of_own_class(c, node.value):
            return  # the program's own flag (self.is_cuda = ...), not a tensor's
        if isinstance(c.parent, (cst.AssignTarget,)):
            return
        new: cst.BaseExpression | None = None
        if c.target.is_attr:
            new = node.with_changes(attr=cst.Name(c.target.is_attr))
        elif c.acc is not None:  # False on a host without accelerator, as is_cuda was there
            new = cst.parse_expression(f'(x.device.type == getattr({c.acc}, "type", None))')
            new = new.with_changes(left=new.left.with_changes(value=new.left.value.with_changes(value=node.value)))  # type: ignore[attr-defined]
        kind = c.receivers.kind(node.value, c.stack)
        if kind and "nn.Module subclass" not in kind:  # (a class of the file may set an is_cuda of its own)
            c.report(node, "OA108", f"`.is_cuda` asks whether a tensor is on a CUDA device (the receiver is {kind})",
                     new, fix="safe")
        else:
            c.report(node, "OA108", "`.is_cuda` asks whether a tensor is on a CUDA device (the receiver is not "
                     "known to be a tensor or module: check it)", new, heuristic=True)
    elif attr == "cuda_stream" and c.on("OA410"):
        c.report(node, "OA410", "`.cuda_stream` is a raw CUDA stream handle", heuristic=True)


def _self_of_own_class(c: FileCheck, node: cst.CSTNode) -> bool:
    """Whether ``node`` is the ``self`` of a method of a class that is not a tensor (no base names a
    Tensor): its attributes are the program's own."""
    if not isinstance(node, cst.Name) or node.value != "self":
        return False
    func = next((i for i in range(len(c.stack) - 1, -1, -1) if isinstance(c.stack[i], (cst.FunctionDef, cst.Lambda))),
                None)
    if func is None or not isinstance(c.stack[func], cst.FunctionDef) or func < 2 or \
            not isinstance(c.stack[func - 2], cst.ClassDef):
        return False
    method, cls = c.stack[func], c.stack[func - 2]
    params = method.params.posonly_params or method.params.params  # type: ignore[attr-defined]
    if not params or params[0].name.value != "self":
        return False
    return not any("Tensor" in (dotted(b.value) or "Tensor") for b in cls.bases)  # type: ignore[attr-defined]


_IS_CUDA_SET = re.compile(rb"([A-Za-z_][\w.]*)\.is_cuda[ \t]*(?::[^=\n]+)?=(?!=)")


def _own_is_cuda(source: bytes) -> frozenset[str]:
    """The receivers whose ``.is_cuda`` the file sets itself (``self.is_cuda = use_gpu``, an ``is_cuda``
    property of its own class: ``self``): a flag of the program, not a tensor's device."""
    if b"is_cuda" not in source:
        return frozenset()
    own = {m.group(1).decode() for m in _IS_CUDA_SET.finditer(source)}
    if b"def is_cuda(" in source:
        own.add("self")
    return frozenset(own)


def _visit_call(c: FileCheck, node: cst.Call) -> None:
    func = node.func
    if _getattr_name(node) is not None and _is_maximal_chain(c, node):
        _visit_chain(c, node)  # type: ignore[arg-type]
    q = c.qualname(func)
    if q is None and isinstance(func, cst.Name) and func.value in c.callable_aliases and \
            not any(func.value in names for names in c.shadows):
        q = c.callable_aliases[func.value]  # precision_scope = autocast; precision_scope("cuda")
    if q is not None:
        _call_by_name(c, node, q)
    elif isinstance(func, cst.Name) and func.value == "dict" and c.on("OA207"):
        _fused_flags(c, [(a.keyword.value, a.value) for a in node.args if a.keyword is not None])
    if isinstance(func, cst.Attribute):
        _call_by_method(c, node, func)
    _device_kwargs(c, node, q)


def _fused_flags(c: FileCheck, items: list[tuple[str | None, cst.BaseExpression]]) -> None:
    """``dict(fused=True)`` / ``{"fused": True}``: optimizer flags passed on through ``**kwargs``."""
    for key, value in items:
        if key in ("fused", "capturable") and isinstance(value, cst.Name) and value.value == "True":
            c.report(value, "OA207", f"{c.rules['OA207'].summary} (`{key}=True` passed on to an optimizer)",
                     heuristic=True)


def _visit_assign(c: FileCheck, node: cst.Assign) -> None:
    """``name = torch.autocast`` (or ``autocast if cond else nullcontext``): calls of ``name`` take a device
    type as the original does."""
    if c.cuda_sources and isinstance(node.value, cst.Call) and len(node.targets) == 1 and (
            ".cu'" in _code(node.value) or '.cu"' in _code(node.value)):
        _extension_name(c, node.value, node)  # _plugin = get_plugin(sources=["bias_act.cpp", "bias_act.cu"])
    if len(node.targets) != 1 or not isinstance(node.targets[0].target, cst.Name):
        return
    values = [node.value.body, node.value.orelse] if isinstance(node.value, cst.IfExp) else [node.value]
    for v in values:
        q = c.qualname(v) if isinstance(v, (cst.Name, cst.Attribute)) else None
        if q in DEVICE_ARGS:
            c.callable_aliases[node.targets[0].target.value] = q
            return


def _extension_name(c: FileCheck, call: cst.Call, assign: cst.Assign | None = None) -> None:
    """The name a module built from CUDA sources is kept in (``_plugin = load(..., sources=[...".cu"])``,
    ``ext = importlib.import_module("fused_adam_cuda")``): calls into it are reported where they are made."""
    if assign is None:
        assign = c.parent if isinstance(c.parent, cst.Assign) else None
    if assign is None or assign.value is not call or len(assign.targets) != 1:
        return
    name = dotted(assign.targets[0].target)
    if name is not None:
        c.extension_names.add(name)


def _extension_call(c: FileCheck, node: cst.CSTNode) -> bool:
    """``_plugin.bias_act(...)`` where ``_plugin`` holds a module built from CUDA sources."""
    d = dotted(node)
    if d is None or not isinstance(c.parent, cst.Call) or c.parent.func is not node:
        return False
    head = d.rsplit(".", 1)[0]
    if head == d or head not in c.extension_names:
        return False
    c.report(node, "OA805", f"{c.rules['OA805'].summary}: `{d}`", heuristic=True)
    return True


def _arg(node: cst.Call, index: int, keyword: str | None = None) -> cst.Arg | None:
    positional = [a for a in node.args if a.keyword is None and not a.star]
    if keyword is not None:
        for a in node.args:
            if a.keyword is not None and a.keyword.value == keyword:
                return a
    return positional[index] if index < len(positional) else None


def _call_by_name(c: FileCheck, node: cst.Call, q: str) -> None:
    t = c.target
    if q == "torch.device" and node.args and isinstance(node.args[0].value, cst.Integer) and \
            node.args[0].keyword is None:
        c.report(node, "OA107", c.rules["OA107"].summary)
    if q == "torch.load" and c.on("OA112") and _arg(node, 1, "map_location") is None:
        c.report(node, "OA112", c.rules["OA112"].summary, suggestion=_code(node.with_changes(
            args=[*node.args[:-1], node.args[-1].with_changes(comma=_comma()),
                  cst.Arg(cst.SimpleString('"cpu"'), keyword=cst.Name("map_location"),
                          equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                                whitespace_after=cst.SimpleWhitespace("")))])) if node.args else None)
    if q in ("torch.cuda.set_device", "torch.cuda.device") and node.args:
        key = c.name_key(node.args[0].value)
        if key is not None:
            c.device_names.add(key)
    if q in DEVICE_ARGS:
        index, code = DEVICE_ARGS[q]
        keyword = {"torch.device": "type", "torch.load": "map_location", "torch.Generator": "device"}.get(q)
        if q in ("torch.autocast", "torch.amp.autocast", "torch.amp.GradScaler"):
            keyword = "device_type" if q != "torch.amp.GradScaler" else "device"
        a = _arg(node, index, keyword)
        if a is not None:
            type_only = code in TYPE_POSITIONS or code == "OA305"
            if q == "torch.device":
                positional = [x for x in node.args if x.keyword is None]
                type_only = len(positional) > 1 or any(x.keyword is not None and x.keyword.value in ("index", "type")
                                                       for x in node.args)
                if c.target.neutral and not type_only:
                    m = DEVICE.fullmatch(string_value(a.value) or "")
                    if m is not None and m.group(1) is not None and c.acc is not None:
                        # torch.device("cuda:1") -> torch.device(ACC.type, 1), not a device inside a device
                        c.handled.add(id(a.value))
                        c.report(node, code, f"{c.rules[code].summary}: '{m.group(0)}'",
                                 expr(f"{_code(node.func)}({c.acc}.type, {m.group(1)})"))
                        return
                    type_only = True
            _device_string(c, a.value, code, type_only=type_only, call=node, plain=q == "torch.device")
    if q in AMP_DEPRECATED and c.on({"torch.amp.autocast": "OA201"}.get(AMP_DEPRECATED[q], "OA202")):
        code = "OA201" if AMP_DEPRECATED[q] == "torch.amp.autocast" else "OA202"
        c.handled.add(id(node.func))
        dev = _device_arg_text(c, type_only=True)
        new = None
        if dev is not None:
            func = c._renamed(node.func, AMP_DEPRECATED[q])
            args = list(node.args)
            if code == "OA201":  # torch.cuda.amp.autocast(enabled, dtype, cache_enabled): its own positional order
                names = iter(("enabled", "dtype", "cache_enabled"))
                args = [a.with_changes(keyword=cst.Name(next(names)), equal=_equal()) if a.keyword is None
                        and not a.star else a for a in args]
            new = node.with_changes(func=func, args=[cst.Arg(expr(dev), comma=_comma()), *args])
            if not node.args:
                new = node.with_changes(func=func, args=[cst.Arg(expr(dev))])
        c.report(node, code, f"{c.rules[code].summary}: `{q}`", new)
        return
    if q in AMP_DECORATORS:
        c.handled.add(id(node.func))
        _custom_fwd(c, node, q, node.args)
        return
    if q in GPU_AUTOCAST and c.on("OA205"):
        positional = [a for a in node.args if a.keyword is None]
        if q == "torch.is_autocast_enabled" and positional:
            return  # already names its device type
        c.handled.add(id(node.func))
        dev = _device_arg_text(c, type_only=True)
        new = None
        if dev is not None:
            alt = t.api.get(q, ("", ""))[0] if not t.neutral else ""
            if alt:
                new = node.with_changes(func=c._renamed(node.func, alt))
            else:
                args = [cst.Arg(expr(dev), comma=_comma() if node.args else cst.MaybeSentinel.DEFAULT), *node.args]
                new = node.with_changes(func=c._renamed(node.func, GPU_AUTOCAST[q]), args=args)
        c.report(node, "OA205", f"{c.rules['OA205'].summary}: `{q}`", new)
        return
    if q == "torch.backends.cuda.sdp_kernel" and c.on("OA607"):
        c.handled.add(id(node.func))
        c.report(node, "OA607", f"{c.rules['OA607'].summary}: `{q}`", _sdpa_kernel(c, node))
        return
    if q in DIST_INIT:
        a = _arg(node, 0, "backend")
        if a is not None:
            _backend_string(c, node, a)
        return
    if q == "torch.distributed.barrier" and c.on("OA307") and _arg(node, 99, "device_ids") is not None:
        c.report(node, "OA307", c.rules["OA307"].summary)
    if q in ("torch.compile",) and (c.on("OA609") or c.on("OA610")):
        mode = _arg(node, 99, "mode")
        backend = _arg(node, 99, "backend")
        options = _arg(node, 99, "options")
        graphs = (mode is not None and string_value(mode.value) in ("reduce-overhead", "max-autotune")) or \
            (backend is not None and string_value(backend.value) == "cudagraphs") or \
            (options is not None and isinstance(options.value, cst.Dict) and any(
                isinstance(e, cst.DictElement) and string_value(e.key) == "triton.cudagraphs" and
                isinstance(e.value, cst.Name) and e.value.value == "True" for e in options.value.elements))
        if graphs:
            c.report(node, "OA609", c.rules["OA609"].summary)
        if backend is None or string_value(backend.value) == "inductor":
            c.report(node, "OA610", c.rules["OA610"].summary)
    if q in ("torch.utils.cpp_extension.load", "torch.utils.cpp_extension.load_inline") and c.on("OA802"):
        cuda = any(a.keyword is not None and (a.keyword.value in ("extra_cuda_cflags", "cuda_sources") or (
            a.keyword.value == "with_cuda" and isinstance(a.value, cst.Name) and a.value.value == "True"))
            for a in node.args) or ".cu'" in _code(node) or '.cu"' in _code(node)
        if cuda or c.cuda_sources:  # (sources held in a name: the file names .cu files)
            c.report(node, "OA802", c.rules["OA802"].summary, heuristic=not cuda)
            _extension_name(c, node)
    if q == "importlib.import_module" and c.on("OA714"):
        a = _arg(node, 0, "name")
        name = string_value(a.value) if a is not None else None
        if name is not None and _compiled_extension(name):
            c.report(node, "OA714", f"{c.rules['OA714'].summary}: `{name}`", heuristic=True)
            _extension_name(c, node)
    if q in ("torch.library.impl", "torch.library.register_kernel", "torch.library.Library.impl"):
        _dispatch_key(c, node, heuristic=False)
    if q in ENVIRON_CALLS:
        a = _arg(node, 0)
        if a is not None:
            _env_string(c, a.value)
    if q == "os.environ.update":
        for a in node.args:
            if a.keyword is not None:
                _env_name(c, a.keyword, a.keyword.value, keyword=True)
            elif isinstance(a.value, cst.Dict):
                _env_dict(c, a.value)
    if c.on("OA207") and q.startswith("torch.optim.") and any(
            a.keyword is not None and a.keyword.value in ("fused", "capturable") and
            isinstance(a.value, cst.Name) and a.value.value == "True" for a in node.args):
        c.report(node, "OA207", c.rules["OA207"].summary)
    if c.on("OA417") and q == "torch.utils.data.DataLoader":
        pass  # pin_memory_device="cuda" is a device keyword, handled with the others


def _custom_fwd(c: FileCheck, node: cst.CSTNode, q: str, args: Any) -> None:
    """@torch.cuda.amp.custom_fwd(...) -> @torch.amp.custom_fwd(device_type=..., ...); bare decorators too."""
    dev = _device_arg_text(c, type_only=True)
    new: cst.CSTNode | None = None
    if dev is not None:
        func = node.func if isinstance(node, cst.Call) else node
        kw = cst.Arg(expr(dev), keyword=cst.Name("device_type"), equal=cst.AssignEqual(
            whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")))
        args = list(args)
        new_args = [kw.with_changes(comma=_comma()), *args] if args else [kw]
        new = cst.Call(func=c._renamed(func, AMP_DECORATORS[q]), args=new_args)
    c.report(node, "OA204", f"{c.rules['OA204'].summary}: `{q}`", new)


def _equal() -> cst.AssignEqual:
    return cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))


def _comma() -> cst.Comma:
    return cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))


def _device_arg_text(c: FileCheck, *, type_only: bool) -> str | None:
    """The expression (as code) a device-type argument takes on the target: '"npu"' or the neutral form."""
    if c.target.neutral:
        return c.device_expr(None, type_only=type_only)
    text = c.device_text(None, type_only=type_only)
    return None if text is None else repr(text).replace("'", '"')


def _sdpa_kernel(c: FileCheck, node: cst.Call) -> cst.BaseExpression | None:
    if not version_at_least(c.min_torch, "2.3"):
        return None
    flags = {k: True for k in SDP_FLAGS}
    for a in node.args:
        if a.keyword is None or a.keyword.value not in SDP_FLAGS or not isinstance(a.value, cst.Name) \
                or a.value.value not in ("True", "False"):
            return None  # only literal flags can be translated
        flags[a.keyword.value] = a.value.value == "True"
    # every flag defaults to True, enable_cudnn included: a backend is allowed unless turned off
    backends = [f"torch.nn.attention.SDPBackend.{SDP_FLAGS[k]}" for k, on in flags.items() if on]
    func = c._renamed(node.func, "torch.nn.attention.sdpa_kernel")
    return expr(f"{_code(func)}([{', '.join(backends)}])")


def _backend_string(c: FileCheck, call: cst.Call, arg: cst.Arg) -> None:
    """The backend argument of init_process_group / new_group: a string, or strings inside a conditional
    (``"nccl" if cuda else "gloo"``) or a default (``args.backend or "nccl"``)."""
    value = arg.value
    t = c.target
    key = c.name_key(value) if isinstance(value, (cst.Name, cst.Attribute)) else None
    if key is not None:
        c.backend_names.add(key)
    leaves = [v for v in _string_leaves(value) if _names_nccl(string_value(v) or "")]
    if not leaves:
        return
    for v in leaves:
        c.handled.add(id(v))
    if t.keeps_cuda:
        return
    summary = c.rules["OA301"].summary
    if t.neutral and leaves == [value]:
        positional = [a for a in call.args if a.keyword is None]
        if arg.keyword is not None or positional == [arg]:
            c.report(call, "OA301", f"{summary}: '{string_value(value)}'", _without_arg(call, arg))
            return
    for v in leaves:
        text = string_value(v) or ""
        new: cst.CSTNode | None = None
        if t.neutral:
            if c.acc is not None and version_at_least(c.min_torch, "2.6"):
                new = expr(f"torch.distributed.get_default_backend_for_device({c.acc})")
                c.need_import("torch.distributed")
        elif t.dist_backend and t.device and isinstance(v, cst.SimpleString):
            out = []
            for p in (x.strip() for x in text.split(",")):
                if ":" in p:
                    dev, _, be = p.partition(":")
                    out.append(f"{t.device if dev == 'cuda' else dev}:{t.dist_backend if be == 'nccl' else be}")
                else:
                    out.append(t.dist_backend if p == "nccl" else p)
            new = with_value(v, ",".join(out))
        c.report(v, "OA301", f"{summary}: '{text}'", new)


def _names_nccl(text: str) -> bool:
    return any(p.strip().split(":")[-1] == "nccl" for p in text.split(","))


def _string_leaves(value: cst.CSTNode) -> list[cst.CSTNode]:
    """The plain strings a value can take: itself, the branches of a conditional, the operands of or/and."""
    if isinstance(value, cst.SimpleString):
        return [value]
    if isinstance(value, cst.IfExp):
        return _string_leaves(value.body) + _string_leaves(value.orelse)
    if isinstance(value, cst.BooleanOperation):
        return _string_leaves(value.left) + _string_leaves(value.right)
    return []


def _without_arg(call: cst.Call, arg: cst.Arg) -> cst.Call | None:
    """``call`` without ``arg``, its layout kept: the argument before it takes its comma (so no comma is left
    dangling before the parenthesis). None when a comment sits on the argument (it would be lost)."""
    if "#" in _code(arg):
        return None
    args = list(call.args)
    i = args.index(arg)
    del args[i]
    if not args:
        return call.with_changes(args=[], whitespace_before_args=cst.SimpleWhitespace(""))
    if i == len(args) and "#" not in _code(args[-1]):  # it was the last: the new last one ends as it did
        args[-1] = args[-1].with_changes(comma=arg.comma)
    return call.with_changes(args=args)


def _call_by_method(c: FileCheck, node: cst.Call, func: cst.Attribute) -> None:
    name = func.attr.value
    t = c.target
    if name == "cuda" and c.on("OA101") and not t.keeps_cuda:
        if c.qualname(func.value) is not None and (c.qualname(func.value) or "").startswith("torch"):
            return  # torch.cuda() is no tensor method
        c.handled.add(id(func))
        new: cst.CSTNode | None = None
        if c.defines_cuda_method:
            c.report(node, "OA101", "`.cuda()` moves a tensor or module to a CUDA device (a class in this file "
                     "defines its own cuda(): check which one this is)", heuristic=True)
            return
        if t.method:
            new = node.with_changes(func=func.with_changes(attr=cst.Name(t.method)))
        else:
            positional = [a for a in node.args if a.keyword is None]
            keywords = [a for a in node.args if a.keyword is not None and a.keyword.value != "device"]
            dev_kw = next((a for a in node.args if a.keyword is not None and a.keyword.value == "device"), None)
            index = positional[0].value if positional else (dev_kw.value if dev_kw else None)
            if t.neutral:
                if c.acc is not None:
                    target = c.acc if index is None else f"torch.device({c.acc}.type, {_code(index)})"
                    new = node.with_changes(func=func.with_changes(attr=cst.Name("to")),
                                            args=_with_first(expr(target), keywords))
            elif t.device:
                new = node.with_changes(func=func.with_changes(attr=cst.Name("to")),
                                        args=_with_first(cst.SimpleString(f'"{t.device}"'), keywords))
        kind = c.receivers.kind(func.value, c.stack)
        if kind:
            c.report(node, "OA101", f"`.cuda()` moves a tensor or module to a CUDA device (the receiver is {kind})",
                     new, fix="safe")
        else:
            c.report(node, "OA101", "`.cuda()` moves a tensor or module to a CUDA device (the receiver is not known "
                     "to be a tensor or module: check it)", new, heuristic=True)
    elif name == "to" and c.qualname(func.value) is None:
        a = _arg(node, 0, "device")
        if a is not None and isinstance(a.value, cst.Call) and c.qualname(a.value.func) == "torch.cuda.current_device":
            c.report(a, "OA107", c.rules["OA107"].summary)
        if a is not None:
            _device_string(c, a.value, "OA103", call=node)
    elif name in ("pin_memory", "is_pinned") and c.on("OA417"):
        a = _arg(node, 0, "device")
        if a is not None and string_value(a.value) is not None and DEVICE.fullmatch(string_value(a.value) or ""):
            c.handled.add(id(a.value))
            args = [x for x in node.args if x is not a]
            c.report(node, "OA417", f"`.{name}(\"cuda\")`: the device argument is deprecated",
                     suggestion=_code(node.with_changes(args=args)))
    elif name == "format" and isinstance(func.value, cst.SimpleString):
        pass  # "cuda:{}".format(r): looked at with the other dynamic device strings
    elif name == "startswith" and c.on("OA105"):
        a = _arg(node, 0)
        if a is not None and string_value(a.value) in ("cuda", "cuda:"):
            c.handled.add(id(a.value))
            _compare_suggestion(c, a.value, func.value)
    elif name == "add_argument" and c.on("OA505"):
        if any(string_value(a.value) in ("--local_rank", "--local-rank") for a in node.args):
            c.report(node, "OA505", c.rules["OA505"].summary, suggestion='int(os.environ["LOCAL_RANK"])')
    elif name in ("impl", "register_kernel"):
        _dispatch_key(c, node, heuristic=True)


def _dispatch_key(c: FileCheck, node: cst.Call, *, heuristic: bool) -> None:
    """A kernel registered for the CUDA dispatch key: which key the target needs is a judgement."""
    keys = [a.value for a in node.args if string_value(a.value) in ("CUDA", "cuda")]
    for k in keys:
        c.handled.add(id(k))
    if keys:
        c.report(node, "OA803", c.rules["OA803"].summary, heuristic=heuristic)


def _with_first(first: cst.BaseExpression, rest: list[cst.Arg]) -> list[cst.Arg]:
    if not rest:
        return [cst.Arg(first)]
    rest = [*rest]
    rest[-1] = rest[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return [cst.Arg(first, comma=_comma()), *rest]


def _device_kwargs(c: FileCheck, node: cst.Call, q: str | None) -> None:
    for a in node.args:
        if a.keyword is None:
            continue
        k = a.keyword.value
        if k in DEVICE_KWARGS:
            if isinstance(a.value, cst.Call) and c.qualname(a.value.func) == "torch.cuda.current_device":
                c.report(a, "OA107", c.rules["OA107"].summary)
            if k == "map_location" and isinstance(a.value, (cst.Dict, cst.Lambda)):
                _map_location(c, a.value)
                continue
            if k == "pin_memory_device" and c.target.neutral and DEVICE.fullmatch(string_value(a.value) or ""):
                # pinning follows the current accelerator; the argument (a string) is deprecated
                c.handled.add(id(a.value))
                c.report(node, "OA417", f"{c.rules['OA417'].summary}: pin_memory_device=", _without_arg(node, a))
                continue
            code = "OA203" if (q or "").startswith(("torch.autocast", "torch.amp.", "torch.random.fork_rng")) else \
                "OA417" if k == "pin_memory_device" else "OA305" if q in DEVICE_ARGS and \
                DEVICE_ARGS[q][1] == "OA305" else "OA103"
            _device_string(c, a.value, code, type_only=k == "device_type" or code == "OA305",
                           string_only=k == "pin_memory_device")
        elif k == "device_types":  # torch.library.custom_op(..., device_types="cuda"): a kernel for CUDA only
            keys = [v for v in _string_leaves(a.value) + [e.value for e in getattr(a.value, "elements", ())]
                    if string_value(v) in ("cuda", "CUDA")]
            for v in keys:
                c.handled.add(id(v))
            if keys:
                c.report(node, "OA803", c.rules["OA803"].summary)
        elif k == "device_ids" and isinstance(a.value, (cst.List, cst.Tuple)):
            for el in a.value.elements:
                _device_string(c, el.value, "OA305")
        elif k == "env" and isinstance(a.value, cst.Dict):
            _env_dict(c, a.value)
        elif k == "use_cuda" and c.on("OA414"):
            c.report(a, "OA414", "`use_cuda=` asks the profiler for CUDA activity",
                     suggestion=f'use_device="{c.target.device}"' if c.target.device else None)
        elif k == "sort_by" and c.on("OA414") and (string_value(a.value) or "").startswith("cuda"):
            c.report(a.value, "OA414", "profiler sort key names CUDA time")


def _map_location(c: FileCheck, value: cst.Dict | cst.Lambda) -> None:
    """map_location dicts: the keys name where a checkpoint was saved; only values are device positions."""
    if isinstance(value, cst.Dict):
        for el in value.elements:
            if isinstance(el, cst.DictElement):
                c.handled.add(id(el.key))
                _device_string(c, el.value, "OA111", string_only=True)  # torch.load wants strings here
    elif c.on("OA111"):
        c.report(value, "OA111", "a map_location function that moves storages to CUDA")


def _device_string(c: FileCheck, value: cst.BaseExpression, code: str, *, type_only: bool = False,
                   string_only: bool = False, call: cst.Call | None = None, plain: bool = False) -> None:
    """A device position holding "cuda", "cuda:N", a device string built at run time, or such strings in
    the branches of a conditional (``"cuda" if use_cuda else "cpu"``) or of ``or``.

    ``type_only``: the position takes a device type (no index); ``string_only``: it takes a string (the
    neutral form is then built from ``ACC.type``, not a torch.device)."""
    if isinstance(value, (cst.Name, cst.Attribute)):
        key = c.name_key(value)
        if key is not None:
            c.device_names.add(key)  # a name used as a device: the strings it holds are device strings
        return
    if id(value) in c.handled:
        return
    t = c.target
    s = string_value(value)
    if s is not None:
        m = DEVICE.fullmatch(s)
        if not m:
            return
        c.handled.add(id(value))
        if t.keeps_cuda:
            return
        new: cst.CSTNode | None = None
        index = m.group(1)
        if t.neutral:
            if c.acc is not None and (string_only or type_only):
                inner = _other_quote(value)
                acc_type = f"{c.acc}.type" if plain else c.acc_type
                new = expr(acc_type) if index is None or type_only else \
                    _fstring(value, [cst.FormattedStringExpression(expr(c.acc_type_quoted(inner))),
                                     cst.FormattedStringText(f":{index}")])
            elif c.acc is not None:
                new = expr(c.device_expr(index) or "")
        else:
            text = c.device_text(index, type_only=type_only)
            new = with_value(value, text) if text and isinstance(value, cst.SimpleString) else None
        c.report(value, code, f"{c.rules[code].summary}: '{s}'", new)
        return
    if isinstance(value, cst.IfExp):
        if _availability_idiom(c, value) is None:
            _device_string(c, value.body, code, type_only=type_only, string_only=string_only)
            _device_string(c, value.orelse, code, type_only=type_only, string_only=string_only)
        return  # else the availability idiom (OA106) is looked at on its own
    if isinstance(value, cst.BooleanOperation):
        _device_string(c, value.left, code, type_only=type_only, string_only=string_only)
        _device_string(c, value.right, code, type_only=type_only, string_only=string_only)
        return
    _dynamic_device(c, value, safe=True, code=code if code == "OA111" else "OA104")


def _other_quote(like: cst.CSTNode) -> str:
    """A quote character that can appear inside the (f-)string ``like`` (before Python 3.12, an f-string's
    expressions cannot use its own quote)."""
    quote = getattr(like, "quote", None) or getattr(like, "start", '"')[-1:]
    return "'" if '"' in quote else '"'


def _fstring(like: cst.CSTNode, parts: list) -> cst.FormattedString:
    """An f-string with the quotes of ``like`` (a string literal)."""
    quote = like.quote if isinstance(like, cst.SimpleString) else '"'
    return cst.FormattedString(parts=parts, start="f" + quote, end=quote)


DYNAMIC_MODULO = re.compile(r"cuda:%[dis]")
DYNAMIC_FORMAT = re.compile(r"cuda:\{\w*\}")


def _dynamic_text(value: cst.CSTNode) -> tuple[cst.CSTNode, str] | None:
    """The literal part of a device string built at run time, and its text. Only the exact forms count:
    f"cuda:{i}", "cuda:" + s, "cuda:%d" % i, "cuda:{}".format(i); f"cuda:{rank} ready" is log text."""
    if isinstance(value, cst.FormattedString) and len(value.parts) == 1 and \
            isinstance(value.parts[0], cst.FormattedStringText) and DEVICE.fullmatch(value.parts[0].value):
        return value.parts[0], value.parts[0].value  # f"cuda": an f-string with nothing to format
    if isinstance(value, cst.FormattedString) and len(value.parts) == 2 and \
            isinstance(value.parts[0], cst.FormattedStringText) and value.parts[0].value == "cuda:" and \
            isinstance(value.parts[1], cst.FormattedStringExpression):
        return value.parts[0], "cuda:"
    if isinstance(value, cst.BinaryOperation) and isinstance(value.left, cst.SimpleString):
        s = string_value(value.left) or ""
        if (isinstance(value.operator, cst.Add) and s == "cuda:") or \
                (isinstance(value.operator, cst.Modulo) and DYNAMIC_MODULO.fullmatch(s)):
            return value.left, s
    if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value == "format" \
            and isinstance(value.func.value, cst.SimpleString):
        s = string_value(value.func.value) or ""
        if DYNAMIC_FORMAT.fullmatch(s):
            return value.func.value, s
    return None


def _dynamic_device(c: FileCheck, value: cst.CSTNode, *, safe: bool, code: str = "OA104") -> None:
    found = _dynamic_text(value)
    if found is None or not c.on(code):
        return
    part, text = found
    c.handled.add(id(value))
    c.handled.add(id(part))
    t = c.target
    if t.keeps_cuda:
        return
    new: cst.CSTNode | None = None
    rest = text[len("cuda"):]
    if t.device:
        if isinstance(part, cst.FormattedStringText):
            new = part.with_changes(value=t.device + rest)
        elif isinstance(part, cst.SimpleString):
            new = with_value(part, t.device + rest)
    elif t.neutral and c.acc is not None:
        # in a device position the string is used at once, as "cuda:N" was; elsewhere it may be kept at import
        acc_type = expr(f"{c.acc}.type" if safe else c.acc_type_quoted(_other_quote(value)))
        if isinstance(part, cst.FormattedStringText) and isinstance(value, cst.FormattedString):
            new = value.with_changes(parts=[cst.FormattedStringExpression(acc_type),
                                            part.with_changes(value=rest), *value.parts[1:]])
            part = value
        elif isinstance(part, cst.SimpleString):  # ACC.type + ":" (parenthesised where % or .format follows)
            joined = cst.BinaryOperation(left=acc_type, operator=cst.Add(), right=with_value(part, rest))
            if not (isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Add)):
                joined = joined.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
            new = joined
    message = f"{c.rules[code].summary}: `{_code(value)}`"
    if safe:
        c.report(part, code, message, new)
    else:
        key = c.assigned_name(value)
        if key is None:
            whole = value.deep_replace(part, new) if new is not None and part is not value else new
            c.report(part, code, message + " (outside a device position: check it)",
                     suggestion=_code(whole) if whole is not None else None)
            return
        # kept in a name (device = f"cuda:{rank}"): rewritten as the name's other device strings are
        c.report(part, code, message + " (outside a device position: check it)", new, heuristic=True, fix="unsafe")
        if c.plan.reports and c.plan.reports[-1].node is part:
            c.device_values.append((key, c.plan.reports[-1]))


def _visit_string(c: FileCheck, node: cst.SimpleString) -> None:
    """A "cuda" / "cuda:N" literal that no device position claimed: in an assignment, a default, a list."""
    if id(node) in c.handled:
        return
    s = string_value(node)
    if s is None:
        return
    parent = c.parent
    if s.startswith(("nvidia-smi", "nvcc")) and c.on("OA506") and isinstance(parent, (cst.Arg, cst.Element)):
        c.report(node, "OA506", f"{c.rules['OA506'].summary}: '{s.split()[0]}'")
        return
    if ("--nproc_per_node=gpu" in s or "--nproc-per-node=gpu" in s) and c.on("OA509"):
        c.report(node, "OA509", c.rules["OA509"].summary)
        return
    if c.strings and not _docstring(parent):
        for pattern, code in c.strings:
            if pattern.fullmatch(s.strip()):
                c.report(node, code, f"{c.rules[code].summary}: '{s.strip()}'")
                return
        if isinstance(parent, cst.Element) and c.on("OA807") and _nvcc_list(c) and \
                not GENERIC_COMPILER_FLAG.fullmatch(s.strip()):
            c.report(node, "OA807", f"{c.rules['OA807'].summary}: '{s.strip()}' (given to nvcc)")
            return
    if s == "torch.distributed.launch" and c.on("OA505") and isinstance(parent, (cst.Arg, cst.Element)):
        c.report(node, "OA505", c.rules["OA505"].summary, suggestion="torchrun")
        return
    if s in ("nccl", "NCCL") and c.on("OA301"):
        _nccl_value(c, node, s)
        return
    if not DEVICE.fullmatch(s) or not c.on("OA103") or c.target.keeps_cuda:
        return
    if _device_table(c, node, parent):
        return
    if not _holds_a_device(c, node, parent):
        holder, above = _value_holder(c, node)  # device_type = "cuda" if "cuda" in device else "cpu"
        if holder is node or not isinstance(above, (cst.Assign, cst.AnnAssign)):
            return
    new: cst.CSTNode | None = None
    m = DEVICE.fullmatch(s)
    assert m is not None
    if c.target.neutral:  # it stays a string: it may be compared, concatenated or parsed later
        if c.acc is not None:
            new = expr(c.acc_type) if m.group(1) is None else \
                _fstring(node, [cst.FormattedStringExpression(expr(c.acc_type_quoted(_other_quote(node)))),
                                cst.FormattedStringText(f":{m.group(1)}")])
    elif c.target.device:
        new = with_value(node, c.device_text(m.group(1)) or "")
    c.report(node, "OA103", f"{c.rules['OA103'].summary}: '{s}' (outside a device position)", new, heuristic=True,
             fix="unsafe")
    key = c.assigned_name(node)
    if key is not None and c.plan.reports and c.plan.reports[-1].node is node:
        c.device_values.append((key, c.plan.reports[-1]))


# flags every C/C++ compiler takes (optimisation, debug info, language standard, include and library
# paths, macros not of CUDA's): in an nvcc list they port as they are; the list's "nvcc" is the finding
GENERIC_COMPILER_FLAG = re.compile(r"-(?:O[0-3s]?|g\d?|w|std=[\w+]+|[IL]\S*|l\w+|[DU](?!\w*CUDA)\w+(?:=\S*)?|pthread)")


def _nvcc_list(c: FileCheck) -> bool:
    """Whether the string being visited is an item of a list of nvcc's flags: ``{"nvcc": [...]}`` (added to
    or passed through a helper too), ``extra_cuda_cflags=[...]``."""
    i = len(c.stack) - 2  # above the Element: its List
    if i < 0 or not isinstance(c.stack[i], cst.List):
        return False
    i -= 1
    while i >= 0 and isinstance(c.stack[i], (cst.BinaryOperation, cst.Arg, cst.Call)):
        n = c.stack[i]
        if isinstance(n, cst.Arg) and n.keyword is not None:
            return n.keyword.value in ("extra_cuda_cflags", "nvcc")
        i -= 1
    holder = c.stack[i] if i >= 0 else None
    return isinstance(holder, cst.DictElement) and string_value(holder.key) == "nvcc"


def _docstring(parent: cst.CSTNode | None) -> bool:
    return isinstance(parent, cst.Expr)  # a string as a statement of its own: a docstring or a comment


def _value_holder(c: FileCheck, node: cst.CSTNode) -> tuple[cst.CSTNode, cst.CSTNode | None]:
    """The outermost conditional or and/or whose value ``node`` can be (not its test), and what holds it."""
    depth = len(c.stack)
    child = node
    while depth > 0 and isinstance(c.stack[depth - 1], (cst.IfExp, cst.BooleanOperation)) and \
            getattr(c.stack[depth - 1], "test", None) is not child:
        child = c.stack[depth - 1]
        depth -= 1
    return child, c.stack[depth - 1] if depth > 0 else None


DEVICE_TYPES = {"cpu", "cuda", "mps", "xpu", "npu", "mlu", "musa", "hpu", "meta", "xla", "supa"}


def _device_table(c: FileCheck, node: cst.SimpleString, parent: cst.CSTNode | None) -> bool:
    """A "cuda" key of a dict keyed by device type ({"cuda": torch.bfloat16, "cpu": torch.float32}): a lookup
    by the target's device type finds no entry. Reported, since what the entry should be is a judgement."""
    if not isinstance(parent, cst.DictElement) or parent.key is not node or len(c.stack) < 2:
        return False
    table = c.stack[-2]
    keys = {string_value(e.key) for e in getattr(table, "elements", ()) if isinstance(e, cst.DictElement)}
    if len(keys & DEVICE_TYPES) < 2:
        return False
    t = c.target
    if not t.keeps_cuda:
        what = f"an entry for '{t.device}'" if t.device else "an entry for the accelerator's device type"
        c.report(node, "OA105", f"a table keyed by device type has 'cuda' but no {what}: a lookup by the "
                 "device's type will miss it", suggestion=None)
    return True


def _nccl_value(c: FileCheck, node: cst.SimpleString, s: str) -> None:
    """"nccl" held for later (``backend = "nccl"``, ``default="nccl"``, a dict value, a branch of
    ``"NCCL" if gpu else "GLOO"``): the value the backend will be. Rewritten with --unsafe-fixes, since
    where the value goes is not seen here."""
    child, parent = _value_holder(c, node)
    depth = len(c.stack)
    while depth > 0 and c.stack[depth - 1] is not parent:
        depth -= 1
    saved = c.stack
    c.stack = c.stack[:depth]
    try:
        holds = _holds_a_device(c, child, parent) or (isinstance(parent, cst.Arg) and parent.keyword is not None
                                                     and parent.keyword.value in ("backend", "dist_backend"))
    finally:
        c.stack = saved
    if not holds:
        return
    t = c.target
    if t.keeps_cuda:
        return
    new: cst.CSTNode | None = None
    if t.dist_backend:
        new = with_value(node, t.dist_backend.upper() if s.isupper() else t.dist_backend)
    elif t.neutral and c.acc is not None and version_at_least(c.min_torch, "2.6"):
        new = expr(f"torch.distributed.get_default_backend_for_device({c.acc})")
    c.report(node, "OA301", f"{c.rules['OA301'].summary}: '{s}' (a value held for later: check where it goes)",
             new, heuristic=True, fix="unsafe")
    key = c.assigned_name(node)
    if key is not None and c.plan.reports and c.plan.reports[-1].node is node:
        c.backend_values.append((key, c.plan.reports[-1]))


def _holds_a_device(c: FileCheck, node: cst.CSTNode, parent: cst.CSTNode | None) -> bool:
    """Whether a "cuda" literal outside a device position still names the device to use: the value of an
    assignment or a return, a parameter's default, `default=` (argparse) or a `choices=` entry, a dict
    value. An argument of any other call (os.path.join(root, "cuda")), a key, an index or a comparison
    does not."""
    if isinstance(parent, (cst.Assign, cst.AnnAssign, cst.Return, cst.Param)):
        return True
    if isinstance(parent, cst.Arg):
        return parent.keyword is not None and parent.keyword.value in ("default", "device", "devices")
    if isinstance(parent, cst.DictElement):
        return parent.value is node
    if isinstance(parent, cst.Element) and len(c.stack) >= 3:
        holder = c.stack[-3]  # Element <- List/Tuple <- Arg
        return isinstance(holder, cst.Arg) and holder.keyword is not None and holder.keyword.value == "choices"
    return False


def _visit_fstring(c: FileCheck, node: cst.CSTNode) -> None:
    if c.strings and isinstance(node, cst.FormattedString) and not _docstring(c.parent):
        # f"-gencode=arch=compute_{cc},code=sm_{cc}": the literal text, each expression standing for a word
        text = "".join(p.value if isinstance(p, cst.FormattedStringText) else "0" for p in node.parts).strip()
        for pattern, code in c.strings:
            if pattern.fullmatch(text):
                c.report(node, code, f"{c.rules[code].summary}: '{_code(node)}'")
                return
    if isinstance(node, cst.FormattedString) and all(isinstance(p, cst.FormattedStringText) for p in node.parts):
        return  # f"cuda" with nothing to format: a device string only where a device goes (print(f"cuda") is text)
    if id(node) not in c.handled:
        _dynamic_device(c, node, safe=False)


def _visit_binop(c: FileCheck, node: cst.BinaryOperation) -> None:
    if id(node) not in c.handled and _dynamic_text(node) is not None:
        _dynamic_device(c, node, safe=False)


def _compare_suggestion(c: FileCheck, string: cst.CSTNode, probed: cst.CSTNode | None = None) -> None:
    s = string_value(string) or ""
    t = c.target
    if t.keeps_cuda:
        return
    new: cst.CSTNode | None = None
    if t.neutral:
        # no rewrite: on a host without accelerator the neutral device type is "cpu", and a probe that was
        # false there ("cuda" in device) would turn true
        suggestion: str | None = c.acc_type if c.acc else "torch.accelerator.current_accelerator().type"
    else:
        suggestion = repr(t.device + s[len("cuda"):]) if t.device else None
        if t.device and isinstance(string, cst.SimpleString):
            new = with_value(string, t.device + s[len("cuda"):])
    c.report(string, "OA105", f"{c.rules['OA105'].summary}: '{s}'", suggestion=suggestion)
    key = c.name_key(probed) if probed is not None else None
    if key is not None and c.plan.reports and c.plan.reports[-1].node is string:
        c.device_probes.append((key, c.plan.reports[-1], new))


def _probed(node: cst.Comparison, string: cst.CSTNode) -> cst.CSTNode | None:
    """The value a one-operator comparison tests against a device string: ``device`` in ``"cuda" in device``
    or ``device_type == "cuda"``."""
    if len(node.comparisons) != 1 or not isinstance(node.comparisons[0].operator, (
            cst.Equal, cst.NotEqual, cst.In, cst.NotIn, cst.Is, cst.IsNot)):
        return None
    left, right = node.left, node.comparisons[0].comparator
    other = right if left is string else left if right is string else None
    if isinstance(other, cst.Attribute) and other.attr.value in ("type", "device"):
        return None  # a tensor's device (x.device.type == "cuda"): whether any accelerator is meant is a judgement
    return other if isinstance(other, (cst.Name, cst.Attribute)) else None


def _visit_comparison(c: FileCheck, node: cst.Comparison) -> None:
    operands: list[cst.BaseExpression] = [node.left] + [t.comparator for t in node.comparisons]
    for op in list(operands):
        if isinstance(op, (cst.Tuple, cst.List, cst.Set)):
            operands += [e.value for e in op.elements]
    for op in operands:
        s = string_value(op)
        if s is None:
            continue
        if DEVICE.fullmatch(s) or s == "cuda:":
            c.handled.add(id(op))
            if c.on("OA105"):
                _compare_suggestion(c, op, _probed(node, op))
        elif s in ("nccl", "NCCL"):
            c.handled.add(id(op))
            c.report(op, "OA304", f"{c.rules['OA304'].summary}: '{s}'")
        elif s in c.env_names or s.startswith(tuple(c.env_prefixes)):
            right = node.comparisons[0].comparator if node.comparisons else None
            if right is not None and c.qualname(right) == "os.environ":
                _env_string(c, op)


def _availability_idiom(c: FileCheck, node: cst.IfExp) -> tuple[cst.SimpleString, cst.SimpleString] | None:
    """("cuda" branch, other branch) of ``"cuda" if torch.cuda.is_available() else "cpu"``, or of
    ``"cpu" if not torch.cuda.is_available() else "cuda"``; None for any other conditional."""
    test, negated = node.test, False
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        test, negated = test.expression, True
    if not isinstance(test, cst.Call) or c.qualname(test.func) != "torch.cuda.is_available":
        return None
    device, other = (node.orelse, node.body) if negated else (node.body, node.orelse)
    if not isinstance(device, cst.SimpleString) or not isinstance(other, cst.SimpleString):
        return None
    if not DEVICE.fullmatch(string_value(device) or "") or string_value(other) is None:
        return None
    return device, other


def _visit_ifexp(c: FileCheck, node: cst.IfExp) -> None:
    """"cuda" if torch.cuda.is_available() else "cpu": the availability idiom."""
    idiom = _availability_idiom(c, node)
    if idiom is None:
        return
    device, other = idiom
    c.handled.add(id(device))
    c.handled.add(id(other))
    t = c.target
    if t.keeps_cuda:
        return
    m = DEVICE.fullmatch(string_value(device) or "")
    assert m is not None
    if t.neutral:
        if c.acc is None or m.group(1) is not None:  # an explicit index has no one-line neutral form
            c.report(node, "OA106", c.rules["OA106"].summary)
            return
        c.handled.update(id(n) for n in _subtree(node.test))
        acc = c.acc.replace("()", "(check_available=True)")
        c.report(node, "OA106", c.rules["OA106"].summary, expr(f'{acc} or torch.device("{string_value(other)}")'))
        return
    c.report(device, "OA106", c.rules["OA106"].summary, with_value(device, c.device_text(m.group(1)) or ""))


def _visit_subscript(c: FileCheck, node: cst.Subscript) -> None:
    if c.qualname(node.value) == "os.environ" and len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index):
        _env_string(c, node.slice[0].slice.value)


def _visit_dict(c: FileCheck, node: cst.Dict) -> None:
    """Environment variable names as keys (an env dict for subprocess or os.environ.update, built anywhere),
    optimizer flags passed on through **kwargs."""
    for e in node.elements:
        if isinstance(e, cst.DictElement):
            s = string_value(e.key)
            if s is not None and (s in c.env_names or s.startswith(tuple(c.env_prefixes))):
                _env_string(c, e.key)
    if c.on("OA207"):
        _fused_flags(c, [(string_value(e.key), e.value) for e in node.elements if isinstance(e, cst.DictElement)])


def _env_dict(c: FileCheck, node: cst.Dict) -> None:
    for e in node.elements:
        if isinstance(e, cst.DictElement):
            _env_string(c, e.key)


def _env_string(c: FileCheck, value: cst.CSTNode) -> None:
    s = string_value(value)
    if s is None or id(value) in c.handled:
        return
    c.handled.add(id(value))
    _env_name(c, value, s)


def _env_name(c: FileCheck, node: cst.CSTNode, name: str, *, keyword: bool = False) -> None:
    code = c.env_names.get(name) or next((code for p, code in c.env_prefixes.items() if name.startswith(p)), None)
    if code is None or c.target.keeps_cuda:
        return
    twin = c.target.env_twin(name, c.min_torch)
    new: cst.CSTNode | None = None
    if twin and not keyword and isinstance(node, cst.SimpleString):
        new = with_value(node, twin)
    elif twin and keyword and isinstance(node, cst.Name):
        new = cst.Name(twin)
    message = f"{c.rules[code].summary}: {name}"
    if twin:
        message += f" -> {twin}"
    elif name in c.target.env:
        message += f" (no equivalent on {c.target.name})"
    c.report(node, code, message, new)


_HANDLERS: dict[type, Any] = {
    cst.Import: _visit_import,
    cst.ImportFrom: _visit_import,
    cst.Attribute: _visit_chain,
    cst.Name: _visit_chain,
    cst.Call: _visit_call,
    cst.SimpleString: _visit_string,
    cst.FormattedString: _visit_fstring,
    cst.BinaryOperation: _visit_binop,
    cst.Comparison: _visit_comparison,
    cst.IfExp: _visit_ifexp,
    cst.Subscript: _visit_subscript,
    cst.Dict: _visit_dict,
    cst.Assign: _visit_assign,
}
