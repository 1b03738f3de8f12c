"""What a function or class of an installed third-party package picks for its caller (OA715), read from its
source on disk, never imported.

``callee("timm.utils.NativeScaler")`` finds the package with ``importlib.util.find_spec`` of its top-level name
only (which imports nothing), walks its folders to the module that defines the name (following re-exports such
as ``from .cuda import NativeScaler`` in a package ``__init__``, a few levels at most), and reads that module
once: the rules of the catalogue run over it in a walk of their own (the neutral target, every default rule but
OA715), and the findings that choose CUDA (a device string or ``torch.device("cuda")``, autocast's or a grad
scaler's device type, ``.cuda()``, ``pin_memory_device``, the NCCL backend, ``torch.cuda.set_device`` and the
device queries: ``CHOICES``) inside the function, or inside the class, are its choices. A choice is the
caller's to change where it is the default of a parameter (``device="cuda"``), where the statement holding a
device string names a parameter whose name says device or backend (``device = device or "cuda"``), or where an
``if`` around it tests one; calls into the package's own functions are followed two levels deep, a parameter
passed on by name or through ``**kwargs`` keeping its control. Of a class, only what its objects run without being
asked by name counts: ``__init__`` and the other special methods, ``forward`` (an ``nn.Module`` called runs it), and
the methods these call on ``self``; a method the caller calls by name (``model.parallelize()``) is that call's.
Each module is read once per process and file modification time."""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache

import libcst as cst

from opaudit.lint.walk import Report, _top_level_statements, node_code, subtree

# the rules whose findings, inside a library's function, are a CUDA device chosen for its caller
CHOICES = frozenset({"OA101", "OA102", "OA103", "OA104", "OA106", "OA113", "OA114", "OA115", "OA116", "OA201",
                     "OA202", "OA203", "OA205", "OA301", "OA305", "OA417"})
# the findings whose node is the device or backend string itself (a parameter in the statement can replace it)
STRING_CHOICES = frozenset({"OA102", "OA103", "OA104", "OA106", "OA203", "OA301", "OA305", "OA417"})
RE_EXPORT_DEPTH = 3  # `from .x import f` in a package __init__, followed this many times
CALL_DEPTH = 2  # calls into the same package's functions, followed this deep
SKIPPED_ROOTS = frozenset({"torch", "torchgen", "functorch", "opaudit", "__main__"})
CUDA_WORD = re.compile(rb"cuda|CUDA|nccl|NCCL")  # (a module without one picks nothing itself: it is not walked)
DEVICE_PARAMETER = re.compile(r"device|backend|map_location", re.IGNORECASE)

# How the catalogue's rules run over a library module: (module, source, file, codes) -> [(report, line)] of the
# codes given. opaudit.lint.engine registers it (use_rules) when it is imported; this module never imports the
# engine, whose rules call back into it (rules/libraries.py).
RunRules = Callable[[cst.Module, bytes, str, frozenset[str]], list[tuple[Report, int]]]
_run_rules: RunRules | None = None


def use_rules(run: RunRules) -> None:
    global _run_rules
    _run_rules = run


@dataclass(frozen=True)
class Choice:
    """One place where a library function picks CUDA."""

    path: str  # as shown: the package's folder and the file (timm/utils/cuda.py)
    line: int
    what: str  # the code there, shortened
    code: str  # the rule that finds it
    param: str | None  # the parameter of the called function that controls it (None: no argument does)
    default: bool = False  # it is that parameter's default itself (passing the parameter replaces it)
    value: str | None = None  # the default's code, for a default
    conditional: bool = False  # reached only under a condition of the library's own (an `if` no parameter steers)

    def where(self) -> str:
        return f"{self.path}:{self.line} {self.what}"


@dataclass(frozen=True)
class Callee:
    """A function or class of an installed package, with what its caller can pass."""

    qualname: str
    positional: tuple[str, ...]  # the parameters that take positional arguments, in order (self dropped)
    keywords: frozenset[str]  # every parameter that can be passed by name
    star_kwargs: bool
    choices: tuple[Choice, ...]


def callee(qualname: str) -> Callee | None:
    """The installed function or class ``qualname`` names (``pkg.module.f``), with its choices; None where it is not
    the source of an installed package other than torch (a builtin, a compiled module, a lazy attribute)."""
    return _callee(qualname, 0, tuple(sys.path))


def _callee(qualname: str, depth: int, path: tuple[str, ...]) -> Callee | None:  # (each module caches its own)
    found = _definition(qualname, 0, path)
    if found is None:
        return None
    module, name = found
    return module.callee(name, qualname, depth)


def _definition(qualname: str, hops: int, path: tuple[str, ...]) -> tuple[_Module, str] | None:
    """The module that defines ``qualname``'s last name, and that name; re-exports followed."""
    located = _locate(qualname, path)
    if located is None:
        return None
    module, rest = located
    if len(rest) != 1:
        return None  # a module itself, or an attribute of a name (Class.method): not followed
    if rest[0] in module.defs:
        return module, rest[0]
    target = module.imports.get(rest[0])
    if target is None or hops >= RE_EXPORT_DEPTH or skipped(target.split(".")[0]):
        return None
    return _definition(target, hops + 1, path)


def skipped(root: str) -> bool:
    """A top-level name never read: torch's own, the standard library's, opaudit's, a vendor's torch_* plugin."""
    return root in SKIPPED_ROOTS or root in sys.stdlib_module_names or root.startswith("torch_")


def _locate(qualname: str, path: tuple[str, ...]) -> tuple[_Module, list[str]] | None:
    """The deepest module file of ``qualname`` (``a.b.c.f`` -> a/b/c.py and ["f"])."""
    parts = qualname.split(".")
    top = _top(parts[0], path)
    if top is None:
        return None
    file, folder, root = top
    i = 1
    while folder is not None and i < len(parts):
        sub = os.path.join(folder, parts[i])
        if os.path.isfile(sub + ".py"):
            file, folder = sub + ".py", None
        elif os.path.isfile(os.path.join(sub, "__init__.py")):
            file, folder = os.path.join(sub, "__init__.py"), sub
        else:
            break
        i += 1
    try:
        mtime = os.stat(file).st_mtime_ns
    except OSError:
        return None
    module = _read(file, mtime, ".".join(parts[:i]), root, folder is not None)
    return (module, parts[i:]) if module is not None else None


@lru_cache(maxsize=1024)
def _top(name: str, path: tuple[str, ...]) -> tuple[str, str | None, str] | None:
    """A top-level package or module as source on disk: (its __init__.py or .py file, its folder for a package, the
    folder above it); found with find_spec, which for a top-level name imports nothing."""
    if skipped(name):
        return None
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError, AttributeError):
        return None
    if spec is None:
        return None
    locations = list(spec.submodule_search_locations or [])
    origin = spec.origin
    if locations:
        folder = locations[0]
        init = os.path.join(folder, "__init__.py")
        return init, folder, os.path.dirname(folder)  # (a namespace package: no __init__, nothing defined there)
    if origin is None or not origin.endswith(".py") or not os.path.isfile(origin):
        return None
    return origin, None, os.path.dirname(origin)


@lru_cache(maxsize=512)
def _read(file: str, mtime: int, name: str, root: str, package: bool) -> _Module | None:
    """A library module, read once per file and modification time: its structure with the stdlib's parser, and,
    where its text mentions CUDA or NCCL at all, the rules' findings from a LibCST walk."""
    try:
        with open(file, "rb") as f:
            source = f.read()
        tree = ast.parse(source)
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return None
    return _Module(file, os.path.relpath(file, root).replace(os.sep, "/"), name, package, source, tree)


class _Module:
    """One library module: its top-level definitions and imports, and the rules' findings that choose CUDA."""

    def __init__(self, file: str, shown: str, name: str, package: bool, source: bytes, tree: ast.Module):
        self.file, self.shown, self.name = file, shown, name
        self.package = name if package else name.rpartition(".")[0]
        self.defs: dict[str, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef] = {}
        self.imports: dict[str, str] = {}  # name -> the qualified name it is bound to
        for stmt in _ast_top_level(tree.body):
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.defs[stmt.name] = stmt
            elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
                self._bind(stmt)
        self._source = source
        self._mentions_cuda = CUDA_WORD.search(source) is not None
        self._cst_defs: dict[str, cst.FunctionDef | cst.ClassDef] = {}
        self._found_choices: list[tuple[cst.CSTNode, str, frozenset[int], cst.CSTNode | None, int]] | None = None
        self._callees: dict[tuple[str, str, int], Callee] = {}

    def _bind(self, node: ast.Import | ast.ImportFrom) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    self.imports[alias.asname] = alias.name
                else:
                    root = alias.name.split(".")[0]
                    self.imports.setdefault(root, root)
            return
        base = node.module or ""
        if node.level:
            package = self.package.split(".")
            up = node.level - 1
            if up >= len(package):
                return
            base = ".".join([*package[:len(package) - up], *([base] if base else [])])
        for alias in node.names:
            if alias.name != "*":
                self.imports[alias.asname or alias.name] = f"{base}.{alias.name}"

    def _found(self) -> list[tuple[cst.CSTNode, str, frozenset[int], cst.CSTNode | None, int]]:
        """The rules' findings that choose CUDA, anywhere in the module: (node, code, ids above it, statement,
        line). None without a word of CUDA or NCCL in the module."""
        if self._found_choices is None:
            self._found_choices = []
            if not self._mentions_cuda:
                return self._found_choices
            try:
                tree = cst.parse_module(self._source)
            except (cst.ParserSyntaxError, UnicodeDecodeError, LookupError, SyntaxError, ValueError):
                return self._found_choices
            for stmt in _top_level_statements(tree.body):
                if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
                    self._cst_defs[stmt.name.value] = stmt
            if _run_rules is None:
                raise RuntimeError("opaudit.lint.installed reads libraries with the rules opaudit.lint.engine "
                                   "registers (use_rules): import opaudit.lint")
            # a name in an annotation (`scaler: GradScaler | None`) is a type, not a choice
            annotations = {id(n) for n in subtree(tree) if isinstance(n, cst.Annotation)}
            self._found_choices = [(r.node, r.code, r.ancestors, r.statement, line)
                                   for r, line in _run_rules(tree, self._source, self.file, CHOICES)
                                   if not r.ancestors & annotations]
        return self._found_choices

    def callee(self, name: str, qualname: str, depth: int) -> Callee:
        key = (name, qualname, depth)
        if key not in self._callees:
            self._callees[key] = self._callee(name, qualname, depth)
        return self._callees[key]

    def _callee(self, name: str, qualname: str, depth: int) -> Callee:
        node = self.defs[name]
        func = node if not isinstance(node, ast.ClassDef) else next(
            (s for s in node.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"), None)
        positional: tuple[str, ...] = ()
        keywords: frozenset[str] = frozenset()
        star_kwargs = False
        if func is not None:
            a = func.args
            positional = tuple(x.arg for x in (*a.posonlyargs, *a.args))
            keywords = frozenset(x.arg for x in (*a.args, *a.kwonlyargs))
            star_kwargs = a.kwarg is not None
            if isinstance(node, ast.ClassDef) and positional:
                positional = positional[1:]  # self
        params = set(positional) | keywords
        choices = self._choices(name, params) if self._found() else []
        if depth < CALL_DEPTH:
            kwargs_name = func.args.kwarg.arg if func is not None and func.args.kwarg is not None else None
            choices += self._through_calls(node, params, kwargs_name, depth)
        return Callee(qualname, positional, keywords, star_kwargs, tuple(choices))

    def _choices(self, name: str, params: set[str]) -> list[Choice]:
        """The rules' findings inside the definition ``name``, and the parameter that controls each."""
        node = self._cst_defs.get(name)
        if node is None:
            return []
        func = node if isinstance(node, cst.FunctionDef) else _init(node)
        asked: set[int] = set()  # a class's methods its caller would call by name (module doc)
        ast_node = self.defs.get(name)
        if isinstance(node, cst.ClassDef) and isinstance(node.body, cst.IndentedBlock) and \
                isinstance(ast_node, ast.ClassDef):
            unasked = _methods_run_unasked(ast_node)
            asked = {id(m) for m in node.body.body if isinstance(m, cst.FunctionDef) and m.name.value not in unasked}
        defaults = {id(x.default): x.name.value for x in _params(func) if x.default is not None}
        steering = {q for q in params if DEVICE_PARAMETER.search(q)}
        tests = _tests(node)
        choices: list[Choice] = []
        for found, code, above, statement, line in self._found():
            if id(node) not in above and found is not node or asked & above:
                continue  # (outside the definition, or in a method its caller would call by name)
            default_of = next((defaults[i] for i in above | {id(found)} if i in defaults), None)
            if default_of is None and _another_methods_default(node, above, func):
                continue  # the default of another method's parameter: that call's caller chooses it
            param: str | None = default_of
            if param is None:
                names = {q for q in steering if any(_mentions(t, q) for t in tests if id(t[0]) in above)}
                if not names and code in STRING_CHOICES and statement is not None:
                    names = {q for q in steering if _mentions((_header(statement), None), q)}
                param = min(names) if names else None
            value = None
            if default_of is not None:
                value = next(node_code(x.default) for x in _params(func) if x.name.value == default_of
                             and x.default is not None)
            conditional = param is None and any(id(t[0]) in above and id(t[1]) not in above and t[1] is not found
                                                for t in tests)
            choices.append(Choice(self.shown, line, _shown(default_of, value) if default_of else _what(found, node),
                                  code, param, default_of is not None, value, conditional))
        return choices

    def _through_calls(self, node: ast.AST, params: set[str], kwargs_name: str | None, depth: int) -> list[Choice]:
        """The choices of the package's own functions that ``node`` calls: a parameter of the inner function that
        it passes on (by name, or through its own **kwargs) stays the caller's to set."""
        out: list[Choice] = []
        top = self.name.split(".")[0]
        own = f"{self.name}.{getattr(node, 'name', '')}"
        guarded = _guarded_calls(node)
        for call in _calls_run(node):
            d = _ast_dotted(call.func)
            if d is None:
                continue
            root, _, rest = d.partition(".")
            if root in self.defs and not rest:
                q = f"{self.name}.{root}"
            elif root in self.imports:
                q = self.imports[root] + ("." + rest if rest else "")
            else:
                continue
            if q.split(".")[0] != top or q == own:
                continue
            inner = _callee(q, depth + 1, tuple(sys.path))
            if inner is None:
                continue
            passed: dict[str, ast.expr] = dict(zip(inner.positional, [a for a in call.args
                                                                     if not isinstance(a, ast.Starred)],
                                                   strict=False))
            passed.update({k.arg: k.value for k in call.keywords if k.arg is not None})
            forwards = kwargs_name is not None and any(k.arg is None and isinstance(k.value, ast.Name) and
                                                       k.value.id == kwargs_name for k in call.keywords)
            called = inner.qualname.rsplit(".", 1)[-1]
            for ch in inner.choices:
                cond = ch.conditional or id(call) in guarded  # (the call itself under a condition of this function)
                if ch.default:  # (shown as the inner function's, not the called one's)
                    ch = Choice(ch.path, ch.line, ch.what.replace("(its default)", f"(a default of `{called}`)"),
                                ch.code, ch.param, False, ch.value)
                if ch.param is not None and ch.param in passed:
                    value = passed[ch.param]
                    if isinstance(value, ast.Name) and value.id in params:
                        out.append(Choice(ch.path, ch.line, ch.what, ch.code, value.id, conditional=cond))
                    continue  # passed something else: the inner default is not used
                if ch.param is not None and forwards:
                    out.append(Choice(ch.path, ch.line, ch.what, ch.code, ch.param, conditional=cond))
                    continue
                out.append(Choice(ch.path, ch.line, ch.what, ch.code, None, conditional=cond))
        return out


# the methods an object runs without its caller naming them, besides the special ones (`__x__`)
RUN_UNASKED = frozenset({"forward"})  # (torch.nn.Module.__call__ runs forward)


@lru_cache(maxsize=512)  # (as many as _read keeps modules)
def _methods_run_unasked(cls: ast.ClassDef) -> frozenset[str]:
    """The names of the methods of ``cls`` that its objects run by themselves (module doc): the special methods,
    RUN_UNASKED, and what these call on ``self``, followed through the class. (Once per class: a callee's choices
    and the calls it makes both ask.)"""
    methods = {m.name: m for m in cls.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))}
    todo = [n for n in methods if n.startswith("__") and n.endswith("__") or n in RUN_UNASKED]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for n in ast.walk(methods[name]):
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self" and \
                    n.attr in methods:
                todo.append(n.attr)
    return frozenset(seen)


def _calls_run(node: ast.AST) -> Iterator[ast.Call]:
    """The calls in a function, or in what a class's objects run by themselves (class-level statements included)."""
    if not isinstance(node, ast.ClassDef):
        yield from (n for n in ast.walk(node) if isinstance(n, ast.Call))
        return
    unasked = _methods_run_unasked(node)
    for stmt in node.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name not in unasked:
            continue
        yield from (n for n in ast.walk(stmt) if isinstance(n, ast.Call))


def _guarded_calls(node: ast.AST) -> set[int]:
    """ids of the calls in ``node`` that run only under a condition: in a branch of an ``if``, a conditional
    expression or a ``while``, or after the first operand of ``and`` / ``or`` (not in the tests themselves)."""
    out: set[int] = set()

    def under(children: Sequence[ast.AST]) -> None:
        for child in children:
            out.update(id(n) for n in ast.walk(child) if isinstance(n, ast.Call))

    for n in ast.walk(node):
        if isinstance(n, (ast.If, ast.While)):
            under([*n.body, *n.orelse])
        elif isinstance(n, ast.IfExp):
            under([n.body, n.orelse])
        elif isinstance(n, ast.BoolOp):
            under(n.values[1:])
    return out


def _ast_top_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Module-level statements, looking into if / try blocks (guarded imports, definitions per version)."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, ast.If):
            yield from _ast_top_level(stmt.body)
            yield from _ast_top_level(stmt.orelse)
        elif isinstance(stmt, ast.Try):
            for block in (stmt.body, stmt.orelse, stmt.finalbody, *(h.body for h in stmt.handlers)):
                yield from _ast_top_level(block)


def _ast_dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def _passed(call: cst.Call, inner: Callee) -> dict[str, cst.BaseExpression]:
    out: dict[str, cst.BaseExpression] = {}
    positional = [a for a in call.args if a.keyword is None and not a.star]
    for name, a in zip(inner.positional, positional, strict=False):  # (more arguments than parameters: *args)
        out[name] = a.value
    for a in call.args:
        if a.keyword is not None:
            out[a.keyword.value] = a.value
    return out


def passed_names(call: cst.Call, target: Callee) -> dict[str, cst.BaseExpression] | None:
    """The parameters a call passes (name -> value); None when ``*args`` or ``**kwargs`` make it unknown."""
    if any(a.star for a in call.args):
        return None
    return _passed(call, target)


def _init(cls: cst.ClassDef) -> cst.FunctionDef | None:
    body = cls.body.body if isinstance(cls.body, cst.IndentedBlock) else []
    return next((s for s in body if isinstance(s, cst.FunctionDef) and s.name.value == "__init__"), None)


def _params(func: cst.FunctionDef | None) -> list[cst.Param]:
    if func is None:
        return []
    p = func.params
    return [*p.posonly_params, *p.params, *p.kwonly_params]


def _another_methods_default(node: cst.CSTNode, above: frozenset[int], own: cst.FunctionDef | None) -> bool:
    """Whether a finding sits in the default of a parameter of a class's method other than ``__init__`` (the caller
    of that method, not of the class, chooses it)."""
    if not isinstance(node, cst.ClassDef) or not isinstance(node.body, cst.IndentedBlock):
        return False
    return any(isinstance(m, cst.FunctionDef) and m is not own and id(m) in above and
               any(x.default is not None and id(x.default) in above for x in _params(m)) for m in node.body.body)


def _tests(node: cst.CSTNode) -> list[tuple[cst.CSTNode, cst.CSTNode]]:
    """The ``if`` statements and conditional expressions inside ``node``, with their tests."""
    return [(n, n.test) for n in subtree(node) if isinstance(n, (cst.If, cst.IfExp, cst.While))]


def _header(statement: cst.CSTNode) -> cst.CSTNode:
    """What of a statement holds its own code: a compound statement's header, a simple statement whole."""
    if isinstance(statement, (cst.If, cst.While)):
        return statement.test
    if isinstance(statement, cst.With):
        return cst.Tuple([cst.Element(i.item) for i in statement.items])
    if isinstance(statement, cst.For):
        return statement.iter
    return statement


def _mentions(pair: tuple[cst.CSTNode, cst.CSTNode | None], name: str) -> bool:
    """Whether the code names ``name`` or ``self.name``."""
    code = pair[1] if pair[1] is not None else pair[0]
    for n in subtree(code):
        if isinstance(n, cst.Name) and n.value == name:
            return True
        if isinstance(n, cst.Attribute) and n.attr.value == name and isinstance(n.value, cst.Name) and \
                n.value.value == "self":
            return True
    return False


def _shown(param: str, value: str | None) -> str:
    return f"`{param}={_short(value or '')}` (its default)"


def _what(found: cst.CSTNode, scope: cst.CSTNode) -> str:
    """The code of the innermost call holding a finding (or the finding), shortened: ``torch.autocast("cuda")``."""
    best = found
    for n in subtree(scope):
        if isinstance(n, (cst.Call, cst.Decorator)) and any(x is found for x in subtree(n)):
            best = n  # later ones are deeper (subtree is pre-order)
    return f"`{_short(node_code(best))}`"


def _short(code: str, width: int = 70) -> str:
    code = " ".join(code.split())
    return code if len(code) <= width else code[:width - 3] + "..."


def may_call(text: str, project: frozenset[str] = frozenset()) -> bool:
    """Whether a file (which no trigger word let through) imports a name of an installed package that picks CUDA
    for its caller: the names its imports bind, and the dotted uses of the modules it imports (not those of the
    ``project``'s own top-level modules)."""
    candidates: set[str] = set()
    for m in _FROM.finditer(text):
        module, names = m.group(1), m.group(2) or m.group(3) or ""
        if module.startswith("."):
            continue
        for part in names.split(","):
            name, _, alias = (x.strip() for x in part.split("#")[0].strip().partition(" as "))
            if name.isidentifier():
                candidates.add(f"{module}.{name}")
                bound = alias or name  # a module imported from a package: its functions are used through it
                for use in re.finditer(r"(?<![\w.])" + re.escape(bound) + r"((?:\.\w+)+)", text):
                    candidates.add(f"{module}.{name}{use.group(1)}")
    for m in _IMPORT.finditer(text):
        for part in m.group(1).split(","):
            module, _, alias = (x.strip() for x in part.strip().partition(" as "))
            if not module or skipped(module.split(".")[0]):
                continue
            bound = alias or module.split(".")[0]  # import a.b binds a; import a.b as n binds n (a.b)
            reached = module if alias else bound
            for use in re.finditer(r"(?<![\w.])" + re.escape(bound) + r"((?:\.\w+)+)", text):
                candidates.add(reached + use.group(1))
    return any(not skipped(q.split(".")[0]) and q.split(".")[0] not in project and (found := callee(q)) is not None
               and bool(found.choices) for q in sorted(candidates))


_FROM = re.compile(r"^[ \t]*from[ \t]+([\w.]+)[ \t]+import[ \t]+(?:\(([^)]*)\)|([^\n\\;]+))", re.MULTILINE)
_IMPORT = re.compile(r"^[ \t]*import[ \t]+([\w.]+(?:[ \t]+as[ \t]+\w+)?(?:[ \t]*,[ \t]*[\w.]+(?:[ \t]+as[ \t]+\w+)?)*)",
                     re.MULTILINE)
