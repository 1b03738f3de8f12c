"""The walk every rule shares: one traversal of one parsed file, scopes and imports, and ``report``.

The rules themselves live in ``opaudit/lint/rules/``, one module per family of the catalogue
(rules/catalogue.toml). A family registers handlers here for what it looks at, and the walk calls
them (parents before children, in source order):

- ``on(NodeType)``: a handler ``(c, node)`` for every node of that type; one that returns True claims
  the node, and the handlers registered after it do not see it;
- ``on_call("torch.load")``: ``(c, call, qualname)`` for calls whose callee resolves to that name
  (``on_call_prefix("torch.optim.")`` for a namespace), ``on_builtin("dict")`` ``(c, call)`` for calls of
  a name no import binds, ``on_method("cuda")`` ``(c, call, func)`` for ``x.cuda(...)`` whatever ``x``,
  ``on_keyword("device")`` ``(c, call, qualname, arg)`` for ``f(device=...)``;
- ``on_string``: ``(c, node, text) -> bool`` for a plain string literal no parent claimed (the first
  that returns True claims it); ``on_attribute("is_cuda")`` ``(c, node)`` for ``x.is_cuda``; ``on_api(code)``
  ``(c, node, qualname)`` for a rule whose qualified-name match needs code of its own;
- ``file_state`` registers a family's per-file state, a class of its own made once per file
  (``State.start(c, module, source)`` where it has one, else ``State()``) and read with ``c.state(State)``;
  ``on_finish`` ``(c)`` runs after the walk (the passes that follow values across the file).

Handlers run in the order the families are imported (``opaudit/lint/rules/__init__.py``), then in the
order each registers. Module-level APIs are matched by qualified name: the file's imports (including
``import torch as t``, ``from torch import cuda`` and ``from torch.cuda import amp as A``) resolve the
root of each dotted chain, and a binding of an enclosing scope hides them; a star import of one of the
project's own modules binds what that module's imports bind (``stars.py``). What a construct becomes on a
target comes from the target tables (rules/targets/) and the catalogue.

A handler reports ``(node, code, message, replacement node or None)`` through ``FileCheck.report``; the
engine turns nodes into positions, honours ``# noqa``, and applies replacements by node identity.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cache, lru_cache
from typing import Any, TypeVar

import libcst as cst

from opaudit.lint.catalogue import Catalogue, Target
from opaudit.lint.stars import star_names

S = TypeVar("S")

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
    severity: str | None = None  # "info" for this finding alone (else the rule's, and the target's, say)
    # an import's (OA419): per use of what it imports, the ids of the use's nodes and those above it; the engine
    # makes the finding info where every finding on them is info (the import itself loads on every torch build)
    uses: list[frozenset[int]] | None = None


@dataclass
class Imported:
    qualname: str  # what the name is bound to: torch, torch.cuda, torch.cuda.amp.autocast
    module: str  # the import that bound it, for removing it once unused
    obj: str | None
    asname: str | None
    star: bool = False  # bound through a star import of one of the project's modules: no import of this file


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
        kind = type(node)
        if kind is cst.Attribute:
            parts.append(node.attr.value)  # type: ignore[attr-defined]
            node = node.value  # type: ignore[attr-defined]
            continue
        if kind is not cst.Call:
            break
        name = getattr_name(node)
        if name is None:
            break
        parts.append(name)
        node = node.args[0].value  # type: ignore[attr-defined]
    if type(node) is not cst.Name:
        return None
    parts.append(node.value)
    return ".".join(reversed(parts))


def getattr_name(node: cst.CSTNode) -> str | None:
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


# -- the registry the rule families fill (see the module's docstring) ---------------------------------
Handler = Callable[..., Any]
NODES: dict[type, list[Handler]] = {}
CALLS: dict[str, list[Handler]] = {}
CALL_PREFIXES: list[tuple[str, Handler]] = []
BUILTINS: dict[str, list[Handler]] = {}
METHODS: dict[str, list[Handler]] = {}
KEYWORDS: dict[str, list[Handler]] = {}
STRINGS: list[Handler] = []
ATTRIBUTES: dict[str, list[Handler]] = {}
APIS: dict[str, Handler] = {}
STATES: list[type] = []
FINISHES: list[Handler] = []


def _adding(table: dict[Any, list[Handler]], keys: tuple[Any, ...]) -> Callable[[Handler], Handler]:
    def register(handler: Handler) -> Handler:
        for key in keys:
            table.setdefault(key, []).append(handler)
        return handler
    return register


def on(*node_types: type) -> Callable[[Handler], Handler]:
    """Register ``handler(c, node)`` for nodes of these types (True from it: the later handlers skip the node)."""
    return _adding(NODES, node_types)


def on_call(*qualnames: str) -> Callable[[Handler], Handler]:
    """Register ``handler(c, call, qualname)`` for calls of these qualified names."""
    return _adding(CALLS, qualnames)


def on_call_prefix(prefix: str) -> Callable[[Handler], Handler]:
    """Register ``handler(c, call, qualname)`` for calls of any qualified name that starts with ``prefix``."""
    def register(handler: Handler) -> Handler:
        CALL_PREFIXES.append((prefix, handler))
        return handler
    return register


def on_builtin(*names: str) -> Callable[[Handler], Handler]:
    """Register ``handler(c, call)`` for calls of these names where no import binds them (``dict(...)``)."""
    return _adding(BUILTINS, names)


def on_method(*names: str) -> Callable[[Handler], Handler]:
    """Register ``handler(c, call, func)`` for calls ``x.name(...)`` of these method names."""
    return _adding(METHODS, names)


def on_keyword(*names: str) -> Callable[[Handler], Handler]:
    """Register ``handler(c, call, qualname or None, arg)`` for keyword arguments of these names."""
    return _adding(KEYWORDS, names)


def on_string(handler: Handler) -> Handler:
    """Register ``handler(c, node, text) -> bool`` for plain string literals that no parent claimed."""
    STRINGS.append(handler)
    return handler


def on_attribute(*names: str) -> Callable[[Handler], Handler]:
    """Register ``handler(c, node)`` for attributes of these names, whatever their receiver."""
    return _adding(ATTRIBUTES, names)


def on_api(code: str) -> Callable[[Handler], Handler]:
    """Register ``handler(c, node, qualname)`` for the names rule ``code`` matches (instead of the generic
    rename or suggestion of apis.py)."""
    def register(handler: Handler) -> Handler:
        APIS[code] = handler
        return handler
    return register


def file_state(cls: type) -> type:
    """Register a family's per-file state (module doc): one instance per file, made before the walk."""
    STATES.append(cls)
    return cls


def on_finish(handler: Handler) -> Handler:
    """Register ``handler(c)``: a pass over the file's reports after the walk."""
    FINISHES.append(handler)
    return handler


class FileCheck:
    """One traversal of one module, every selected rule."""

    def __init__(self, module: cst.Module, target: Target, catalogue: Catalogue, selected: frozenset[str],
                 min_torch: str, source: bytes, path: str | None = None):
        self.target = target
        self.path = path  # the linted file, where it is on disk (a rule may look at its project's files)
        self.rules = catalogue.rules
        self.selected = selected
        self.min_torch = min_torch
        self.stack: list[cst.CSTNode] = []
        self.imports: dict[str, Imported] = {}
        self.handled: set[int] = set()  # nodes a more specific rule already looked at
        # per enclosing scope (function, lambda, comprehension, class body): the names it binds itself
        self.shadows: list[set[str]] = []
        self.scope_imports: list[set[str]] = []  # per entry of shadows: the names its own imports bind
        # per entry of shadows: what its imports bound so far (the module's is `imports`): a function's or class
        # body's import binds in that scope only, not for the rest of the file
        self.scope_tables: list[dict[str, Imported]] = [self.imports]
        self.class_scopes: set[int] = set()  # ids of the entries of shadows that are class bodies
        # every scope's entry of shadows, kept until the file is done: name_key tells scopes apart by id(), which
        # Python reuses once an object is freed (a later function's `device` would be taken for an earlier one's)
        self.scopes_seen: list[set[str]] = []
        self.current: cst.CSTNode | None = None  # the node whose handler runs
        self.callable_aliases: dict[str, str] = {}  # precision_scope = torch.autocast -> "torch.autocast"
        self.plan = Plan()
        self.trace: dict[int, bool] | None = None  # set by a caller: id(root Name) -> resolved to an import
        self.api_exact, self.api_prefix, self.modules, self.env_names, self.env_prefixes, self.strings = \
            _indexes(catalogue, selected, target.name)
        self.acc = target.accelerator_expr(min_torch)
        # star imports only a type checker runs (`if TYPE_CHECKING: from .x import *`): they bind nothing at run time
        self.typing_stars = _typing_stars(module) if path is not None and b"TYPE_CHECKING" in source else set()
        for stmt in _top_level_statements(module.body):
            if isinstance(stmt, cst.SimpleStatementLine):
                for small in stmt.body:
                    if isinstance(small, (cst.Import, cst.ImportFrom)):
                        self._bind(small)
        self.top_imports = dict(self.imports)  # what module-level imports bind: visible in every function
        # module-level names a loop, with, except, def or class binds: not an import's (where an import binds
        # the same name, which one holds depends on the order of execution: neither is assumed)
        self.walrus = b":=" in source  # only then can an expression bind a name
        self.shadows.append(_bindings(module.body, assignments=False, deep=self.walrus)[0])
        self.scope_imports.append(set(self.top_imports))
        # the file's module-level name for torch (import torch as t), if it has one
        self.torch_alias = next((name for name, b in self.top_imports.items() if b.qualname == "torch"), None)
        self._states: dict[type, Any] = {}
        for cls in STATES:  # (in the order the families are imported: a later one may read an earlier one's)
            start = getattr(cls, "start", None)
            self._states[cls] = start(self, module, source) if start is not None else cls()

    def state(self, cls: type[S]) -> S:
        """A rule family's state for this file (``file_state``)."""
        return self._states[cls]

    # -- traversal ---------------------------------------------------------------------------------
    def walk(self, node: cst.CSTNode) -> None:
        """Visit ``node`` and what it contains, in source order, parents first.

        LibCST's own ``visit`` rebuilds every node it passes (about three quarters of a lint's time);
        this walk only reads the fields that can hold code."""
        handlers = NODES.get(type(node))
        if handlers is not None:
            self._handle(node, handlers)
        self.stack.append(node)
        if type(node) in _SCOPE_TYPES:
            self._walk_scope(node)
        else:
            for child in children(node):
                self.walk(child)
        self.stack.pop()

    def _walk_scope(self, node: cst.CSTNode) -> None:
        """A function, lambda, class or comprehension: decorators, bases, annotations and defaults in the
        enclosing scope, the body in its own, where the names it binds hide the imports of the same name."""
        inner = node.body if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)) else None
        for child in children(node):
            if child is not inner and inner is not None:
                self.walk(child)
        # a class body's names are not seen by the functions in it: only while it is the innermost scope
        hidden = None
        if len(self.shadows) > 1 and id(self.shadows[-1]) in self.class_scopes:
            hidden = self._pop_scope()
        import_nodes: list[cst.Import | cst.ImportFrom] = []
        names, imported = _local_names(node, deep=self.walrus, imports=import_nodes)
        self._push_scope((names, imported, {}))
        for statement in import_nodes:  # as at module level: what the scope's imports bind, before the walk
            self._bind(statement)  # reaches them (a nested def called later sees them), each rebinding in turn
        if isinstance(node, cst.ClassDef):
            self.class_scopes.add(id(names))
        first = node.for_in if type(node) in _COMPREHENSION_TYPES else None  # type: ignore[attr-defined]
        for child in [inner] if inner is not None else children(node):
            if child is first:
                self._walk_first_for(child, hidden)
            else:
                self.walk(child)
        self._pop_scope()
        self.class_scopes.discard(id(names))
        self.scopes_seen.append(names)
        if hidden is not None:
            self._push_scope(hidden)

    def _walk_first_for(self, node: cst.CompFor, hidden: tuple | None) -> None:
        """A comprehension's first ``for``, as ``walk`` does it, but for its iterable, which Python evaluates in
        the enclosing scope (``[x for x in t.cuda.streams]`` in a class body sees the class's ``t``)."""
        handlers = NODES.get(cst.CompFor)
        if handlers is not None:
            self._handle(node, handlers)
        self.stack.append(node)
        for child in children(node):
            if child is not node.iter:
                self.walk(child)
                continue
            own = self._pop_scope()
            if hidden is not None:
                self._push_scope(hidden)
            self.walk(child)
            if hidden is not None:
                self._pop_scope()
            self._push_scope(own)
        self.stack.pop()

    def _handle(self, node: cst.CSTNode, handlers: list[Handler]) -> None:
        """Run the handlers registered for ``node``'s type until one claims it."""
        self.current = node
        for handler in handlers:
            if handler(self, node):
                break

    def _pop_scope(self) -> tuple[set[str], set[str], dict[str, Imported]]:
        """The innermost scope's entries (its names, its imports' names, its import table), taken off."""
        return self.shadows.pop(), self.scope_imports.pop(), self.scope_tables.pop()

    def _push_scope(self, scope: tuple[set[str], set[str], dict[str, Imported]]) -> None:
        self.shadows.append(scope[0])
        self.scope_imports.append(scope[1])
        self.scope_tables.append(scope[2])

    @property
    def parent(self) -> cst.CSTNode | None:
        return self.stack[-1] if self.stack else None

    # -- reporting ---------------------------------------------------------------------------------
    def on(self, code: str) -> bool:
        return code in self.selected

    def report(self, node: cst.CSTNode, code: str, message: str, replacement: cst.CSTNode | None = None, *,
               suggestion: str | None = None, heuristic: bool = False, fix: str | None = None,
               severity: str | None = None) -> None:
        if code not in self.selected:
            return
        note = self.target.note(code)
        if note:
            message = f"{message} ({note})"
        rule = self.rules[code]
        if isinstance(replacement, cst.BaseExpression):
            replacement = self._through_torch_alias(replacement)
        if rule.fix in ("suggestion", "report") and replacement is not None:
            suggestion, replacement = suggestion or node_code(replacement), None
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
                        frozenset(id(n) for n in above), conjunction, severity)
        self.plan.reports.append(report)

    def name_key(self, node: cst.CSTNode) -> str | None:
        """The name a device value is kept in (``device``, ``args.device``), qualified by the function that
        binds it where a parameter or local of that function holds it; ``self.device`` by the class whose methods
        read it (one attribute of its objects, whatever method binds or reads it)."""
        d = dotted(node)
        if d is None or isinstance(node, cst.Call):
            return None
        root = d.split(".")[0]
        if root == "self" and "." in d:
            owner = next((n for n in reversed(self.stack) if isinstance(n, cst.ClassDef)), None)
            if owner is not None:
                return f"class:{id(owner)}:{d}"
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
        code = node_code(new)
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
            return expr(code) if code != node_code(new) else new
        return expr(_TORCH_NAME.sub(alias + ".", code)) if alias != "torch" or code != node_code(new) else new

    def finish(self) -> None:
        """The passes that follow values across the file (the families' on_finish handlers)."""
        for finish in FINISHES:
            finish(self)

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
        """Record what an import binds, in the table of the scope it runs in (the module's before the walk)."""
        if isinstance(node, cst.Import):
            for alias in node.names:
                full = dotted(alias.name) or ""
                if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                    self._table(alias.asname.name.value)[alias.asname.name.value] = \
                        Imported(full, full, None, alias.asname.name.value)
                else:
                    root = full.split(".")[0]
                    self._table(root).setdefault(root, Imported(root, full, None, None))
            return
        if isinstance(node.names, cst.ImportStar):  # (at module level only)
            if self.path is not None and id(node) not in self.typing_stars:
                # what the project's module binds by its imports (stars.py), in the order of execution
                for name, b in star_names(self.path, dotted(node.module) if node.module is not None else None,
                                          len(node.relative)).items():
                    self.imports[name] = Imported(b.qualname, b.module, b.obj, b.asname, star=True)
            return
        if node.relative or node.module is None:
            return
        module = dotted(node.module) or ""
        for alias in node.names:
            name = dotted(alias.name) or ""
            asname = alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) else None
            self._table(asname or name)[asname or name] = Imported(f"{module}.{name}", module, name, asname)

    def _table(self, name: str) -> dict[str, Imported]:
        """The import table a binding of ``name`` goes to: the innermost scope's, or the module's where that scope
        declares the name global (``global cuda`` then ``from torch import cuda`` in a function)."""
        if len(self.scope_tables) == 1 or name in self.scope_imports[-1] or name in self.shadows[-1]:
            return self.scope_tables[-1]
        self.scope_imports[0].add(name)  # visible at module level from here on (the walk's order)
        return self.imports

    def _binding(self, root: str) -> Imported | None:
        """The import ``root`` refers to here: that of the innermost scope binding it, None where that binding is
        not an import (or the scope's import has not run yet)."""
        for names, imported, table in zip(reversed(self.shadows), reversed(self.scope_imports),
                                          reversed(self.scope_tables), strict=True):
            if root in names:
                return None  # a binding of an enclosing scope hides the import
            if root in imported:
                return table.get(root)
        return None

    def qualname(self, node: cst.CSTNode) -> str | None:
        d = dotted(node)
        if d is None:
            return None
        root, _, rest = d.partition(".")
        bound = self._binding(root)
        if self.trace is not None:
            first = node
            while type(first) is cst.Attribute:
                first = first.value  # type: ignore[attr-defined]
            if type(first) is cst.Name:
                self.trace[id(first)] = bound is not None
        if bound is None:
            return None  # not imported, or a binding of an enclosing scope hides the import
        return bound.qualname + ("." + rest if rest else "")

    def renamed(self, node: cst.CSTNode, new: str) -> cst.BaseExpression:
        """``new`` (a dotted name) written the way this file can reach it: through the file's own alias of
        torch where it has one (``t.npu.synchronize``), else in full with the import scheduled; the import
        that bound the old name is scheduled for removal once unused."""
        d = dotted(node) or ""
        root = d.split(".")[0]
        bound = self._binding(root)
        if bound is not None and new.startswith(bound.qualname + ".") and (bound.qualname != "torch" or not any(
                new.startswith(m + ".") for m in EXPLICIT_IMPORTS)):
            return expr(root + new[len(bound.qualname):])  # through the name the file already has
        if bound is not None and not bound.star and (bound.obj is not None or bound.qualname.split(".")[0] != "torch"):
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


_IS_NODE: dict[type, bool] = {}  # type -> whether it is a CSTNode (isinstance on LibCST's ABCs is slow)


def _is_node_type(t: type) -> bool:
    known = _IS_NODE.get(t)
    if known is None:
        known = _IS_NODE[t] = issubclass(t, cst.CSTNode)
    return known


def children(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """The nodes directly under ``node`` that can hold code, in source order."""
    is_node = _IS_NODE
    for name in _code_fields(type(node)):
        value = getattr(node, name)
        t = type(value)
        if t is list or t is tuple:
            for item in value:
                known = is_node.get(type(item))
                if known is None:
                    known = _is_node_type(type(item))
                if known:
                    yield item
        else:
            known = is_node.get(t)
            if known is None:
                known = _is_node_type(t)
            if known:
                yield value


def subtree(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    yield node
    for child in children(node):
        yield from subtree(child)


def _path(top: cst.CSTNode | None, node: cst.CSTNode) -> list[cst.CSTNode]:
    """The nodes from ``top`` down to ``node``'s parent (empty when ``node`` is ``top`` or not under it)."""
    if top is None or top is node:
        return []
    for child in children(top):
        if child is node:
            return [top]
        below = _path(child, node)
        if below:
            return [top, *below]
    return []


_COMPREHENSIONS = (cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)
_SCOPES = (cst.FunctionDef, cst.Lambda, cst.ClassDef, *_COMPREHENSIONS)
_SCOPE_TYPES = frozenset(_SCOPES)
_COMPREHENSION_TYPES = frozenset(_COMPREHENSIONS)  # type(node) in a set: isinstance on LibCST's ABCs is slow
_EXPRESSION_TYPES = frozenset(v for v in vars(cst).values()
                              if isinstance(v, type) and issubclass(v, cst.BaseExpression))
_SCOPE_OR_SKIPPED = frozenset((cst.Lambda, *_COMPREHENSIONS, cst.Import, cst.ImportFrom))


def _local_names(node: cst.CSTNode, *, deep: bool = True,
                 imports: list[cst.Import | cst.ImportFrom] | None = None) -> tuple[set[str], set[str]]:
    """The names a scope binds itself, which hide a module-level import of the same name inside it: a
    function's or lambda's parameters and whatever its body binds (assignments, loop, with and except
    targets, nested defs and classes, :=; not imports, and not names declared global or nonlocal); a
    comprehension's loop targets; a class body's own bindings. ``imports`` collects the scope's import
    statements."""
    names: set[str] = set()
    imported: set[str] = set()
    if isinstance(node, (cst.FunctionDef, cst.Lambda)):
        params = node.params
        names = parameter_names(node)
        for star in (params.star_arg, params.star_kwarg):
            if isinstance(star, cst.Param):
                names.add(star.name.value)
    if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
        bound, imported = _bindings([node.body], assignments=True, deep=deep, imports=imports)
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


def comparison_operands(node: cst.Comparison) -> list[cst.BaseExpression]:
    """The operands of a comparison, with the elements of a tuple, list or set among them
    (``x in ("cuda", "cpu")``)."""
    operands: list[cst.BaseExpression] = [node.left] + [t.comparator for t in node.comparisons]
    for op in list(operands):
        if isinstance(op, (cst.Tuple, cst.List, cst.Set)):
            operands += [e.value for e in op.elements]
    return operands


def parameter_names(function: cst.FunctionDef | cst.Lambda) -> set[str]:
    """The names of a function's parameters, ``*args`` and ``**kwargs`` aside."""
    params = function.params
    return {p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)}


def rebinds(function: cst.FunctionDef, name: str) -> bool:
    """Whether the body of ``function`` binds ``name`` itself (an assignment, a loop target, ...)."""
    return name in _bindings([function.body], assignments=True)[0]


def _bindings(body: Any, *, assignments: bool, deep: bool = True,
              imports: list[cst.Import | cst.ImportFrom] | None = None) -> tuple[set[str], set[str]]:
    """The names the statements ``body`` bind in their own scope, nested scopes excluded: loop, with and
    except targets, defs, classes and := always; assignments when ``assignments``. Apart: the names its
    imports bind (and, given ``imports``, the import statements, in source order). Without ``deep`` (no := in the
    file), expressions are not searched."""
    out: set[str] = set()
    imported: set[str] = set()
    declared: set[str] = set()
    found: list[cst.Import | cst.ImportFrom] = []
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
                found.append(node)  # type: ignore[arg-type]
                continue
        todo.extend(children(node))
    if imports is not None:
        imports.extend(reversed(found))  # taken last first (a stack), and no import holds another: source order
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


def node_code(node: cst.CSTNode) -> str:
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


def _typing_stars(module: cst.Module) -> set[int]:
    """The ids of the star imports under a module-level ``if TYPE_CHECKING:`` (or ``typing.TYPE_CHECKING``)."""
    out: set[int] = set()
    for stmt in module.body:
        if isinstance(stmt, cst.If) and (dotted(stmt.test) or "").split(".")[-1] == "TYPE_CHECKING":
            for inner in _top_level_statements(stmt.body.body):
                if isinstance(inner, cst.SimpleStatementLine):
                    out.update(id(s) for s in inner.body if isinstance(s, cst.ImportFrom)
                               and isinstance(s.names, cst.ImportStar))
    return out


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


# -- what the walk itself dispatches --------------------------------------------------------------------
@on(cst.Import, cst.ImportFrom)
def _visit_import(c: FileCheck, node: cst.Import | cst.ImportFrom) -> None:
    c._bind(node)  # a name an import in a function or a block binds, from here on


def imported_names(node: cst.Import | cst.ImportFrom) -> list[str]:
    """What an import statement imports, as dotted names: ``import a.b`` -> a.b; ``from a import b`` ->
    a.b and a; ``from a import *`` -> a; a relative import -> nothing."""
    if isinstance(node, cst.Import):
        return [dotted(a.name) or "" for a in node.names]
    if node.relative or node.module is None:
        return []
    module = dotted(node.module) or ""
    if isinstance(node.names, cst.ImportStar):
        return [module]
    return [f"{module}.{dotted(a.name)}" for a in node.names] + [module]


@on(cst.Call)
def _visit_call(c: FileCheck, node: cst.Call) -> None:
    """A call, by its callee's qualified name, by its method name, and by its keyword arguments."""
    func = node.func
    q = c.qualname(func)
    if q is None and isinstance(func, cst.Name) and func.value in c.callable_aliases and \
            not any(func.value in names for names in c.shadows):
        q = c.callable_aliases[func.value]  # precision_scope = autocast; precision_scope("cuda")
    if q is not None:
        for handler in CALLS.get(q, ()):
            handler(c, node, q)
        for prefix, handler in CALL_PREFIXES:
            if q.startswith(prefix):
                handler(c, node, q)
    elif isinstance(func, cst.Name):
        for handler in BUILTINS.get(func.value, ()):
            handler(c, node)
    if isinstance(func, cst.Attribute):
        for handler in METHODS.get(func.attr.value, ()):
            handler(c, node, func)
    for a in node.args:
        if a.keyword is not None:
            for handler in KEYWORDS.get(a.keyword.value, ()):
                handler(c, node, q, a)


@on(cst.SimpleString)
def _visit_string(c: FileCheck, node: cst.SimpleString) -> None:
    """A string literal that no device position or other parent claimed."""
    if id(node) in c.handled:
        return
    s = string_value(node)
    if s is None:
        return
    for handler in STRINGS:
        if handler(c, node, s):
            return


# -- what the walk resolves, for checking it against another resolver -----------------------------------
def resolved_chains(module: cst.Module, source: bytes = b"") -> list[tuple[cst.CSTNode, str | None]]:
    """Every outermost Name / Attribute chain of ``module`` outside import statements (``torch.cuda.amp`` once,
    not ``torch.cuda`` again), in walk order, with ``FileCheck.qualname`` as the walk computes it there: the same
    traversal and scopes as a lint (no rule selected, so nothing is reported). A bare name in a binding position
    (an assignment target, a parameter) is listed too; the caller tells those apart. bench/lint_scope.py and
    tests/lint/test_scope_agreement.py hold it against LibCST's QualifiedNameProvider."""
    from opaudit.lint.catalogue import load_catalogue, load_target

    check = _ChainCheck(module, load_target("ascend"), load_catalogue(), frozenset(), "2.6", source)
    check.walk(module)
    return check.chains


class _ChainCheck(FileCheck):
    """The walk, noting the qualified name of each chain it enters (resolved_chains)."""

    def __init__(self, *args: Any) -> None:
        self.chains: list[tuple[cst.CSTNode, str | None]] = []
        super().__init__(*args)

    def walk(self, node: cst.CSTNode) -> None:
        kind = type(node)
        if kind is cst.Name or kind is cst.Attribute:
            parent = self.stack[-1] if self.stack else None
            if type(parent) is not cst.Attribute and not any(type(n) in (cst.Import, cst.ImportFrom)
                                                               for n in self.stack):
                self.chains.append((node, self.qualname(node)))
        super().walk(node)


# -- small helpers the families share ---------------------------------------------------------------
def argument(node: cst.Call, index: int, keyword: str | None = None) -> cst.Arg | None:
    positional = [a for a in node.args if a.keyword is None and not a.star]
    if keyword is not None:
        for a in node.args:
            if a.keyword is not None and a.keyword.value == keyword:
                return a
    return positional[index] if index < len(positional) else None


def equal() -> cst.AssignEqual:
    return cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))


def comma() -> cst.Comma:
    return cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))


def without_arg(call: cst.Call, arg: cst.Arg) -> cst.Call | None:
    """``call`` without ``arg``, its layout kept: the argument before it takes its comma (so no comma is left
    dangling before the parenthesis). None when a comment sits on the argument (it would be lost)."""
    if "#" in node_code(arg):
        return None
    args = list(call.args)
    i = args.index(arg)
    del args[i]
    if not args:
        return call.with_changes(args=[], whitespace_before_args=cst.SimpleWhitespace(""))
    if i == len(args) and "#" not in node_code(args[-1]):  # it was the last: the new last one ends as it did
        args[-1] = args[-1].with_changes(comma=arg.comma)
    return call.with_changes(args=args)


def string_leaves(value: cst.CSTNode) -> list[cst.CSTNode]:
    """The plain strings a value can take: itself, the branches of a conditional, the operands of or/and."""
    if isinstance(value, cst.SimpleString):
        return [value]
    if isinstance(value, cst.IfExp):
        return string_leaves(value.body) + string_leaves(value.orelse)
    if isinstance(value, cst.BooleanOperation):
        return string_leaves(value.left) + string_leaves(value.right)
    return []


def is_docstring(parent: cst.CSTNode | None) -> bool:
    return isinstance(parent, cst.Expr)  # a string as a statement of its own: a docstring or a comment

