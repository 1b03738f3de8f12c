"""What a star import of one of the project's own modules binds (``from utils import *``).

A program that imports torch in a helper module and takes it, with the rest, through ``from utils import *``
uses ``torch`` as any other file does; the walk (walk.py) asks here what such an import binds. The module is
looked for as Python would: a relative import from the linted file's package, an absolute one in the linted
file's folder and the folders above it up to its project's root (the first holding .git, pyproject.toml,
setup.py or setup.cfg). What the module's own imports bind is taken, its own star imports of the project's
modules followed in turn (to a depth of ``MAX_DEPTH``, each module once, ``MAX_MODULES`` at most), ``__all__``
honoured where the module writes it as literals, names starting with ``_`` left out where it does not, and
what runs only under ``if TYPE_CHECKING:`` left out. A name the module binds otherwise (a def, a class, an
assignment) is no import's: it stays unknown, as a module that cannot be found leaves every name.

Each module is read with ``ast`` once per process (per path and modification time).
"""

from __future__ import annotations

import ast
import os
import warnings
from dataclasses import dataclass
from functools import lru_cache

MAX_DEPTH = 4  # star imports followed through at most this many modules
MAX_UP = 6  # folders above the linted file's looked in for an absolute import's module
MAX_MODULES = 32  # modules read for one star import, at most (a package's __init__ that star-imports hundreds)
ROOT_MARKERS = (".git", "pyproject.toml", "setup.py", "setup.cfg")


@dataclass(frozen=True)
class StarBinding:
    """A name a star import binds to an import of another module: ``torch`` -> ("torch", "torch", None, None)."""

    qualname: str
    module: str
    obj: str | None
    asname: str | None


def star_names(path: str | None, module: str | None, level: int) -> dict[str, StarBinding]:
    """What ``from <level dots><module> import *`` in the file ``path`` binds to imports (empty where the module is
    not one of the project's files)."""
    if path is None or not os.path.isfile(path):
        return {}
    folder = os.path.dirname(os.path.abspath(path))
    roots = _roots(folder)
    found = _find(roots, folder, module, level)
    if found is None:
        return {}
    return _exports(found, roots, MAX_DEPTH, set())


@lru_cache(maxsize=256)
def _roots(folder: str) -> tuple[str, ...]:
    """The folders an absolute import is looked for in: ``folder`` and those above it, up to the project's root."""
    out = [folder]
    for _ in range(MAX_UP):
        try:
            if any(os.path.exists(os.path.join(folder, m)) for m in ROOT_MARKERS):
                break
        except OSError:
            break
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
        out.append(folder)
    return tuple(out)


@lru_cache(maxsize=1024)
def _find(roots: tuple[str, ...], here: str, module: str | None, level: int) -> str | None:
    """The file of ``module`` (relative to the package in ``here`` when ``level``), else None."""
    if level:
        base = here
        for _ in range(level - 1):
            base = os.path.dirname(base)
        bases: tuple[str, ...] = (base,)
    else:
        if not module:
            return None
        bases = roots
    parts = module.split(".") if module else []
    for base in bases:
        stem = os.path.join(base, *parts)
        # (a package comes before a module of the same name, as Python finds them)
        for candidate in (os.path.join(stem, "__init__.py"), *((stem + ".py",) if parts else ())):
            if os.path.isfile(candidate):
                return os.path.realpath(candidate)
    return None


def _exports(file: str, roots: tuple[str, ...], depth: int, seen: set[str]) -> dict[str, StarBinding]:
    """What ``from <file's module> import *`` binds to imports (see the module doc); ``seen``: the modules read for
    this star import so far (each once; no more than ``MAX_MODULES``)."""
    seen.add(file)
    try:
        stat = os.stat(file)
    except OSError:
        return {}
    steps, listed = _steps(file, stat.st_mtime_ns, stat.st_size)
    here = os.path.dirname(file)
    bound: dict[str, StarBinding | None] = {}
    for name, what in steps:
        if isinstance(what, tuple):  # a star import of its own
            inner = _find(roots, here, what[0], what[1]) if depth > 1 and len(seen) < MAX_MODULES else None
            if inner is not None and inner not in seen:
                bound.update(_exports(inner, roots, depth - 1, seen))
        else:
            bound[name] = what
    if listed is not None:
        return {n: b for n in listed if (b := bound.get(n)) is not None}
    return {n: b for n, b in bound.items() if b is not None and not n.startswith("_")}


Step = tuple[str, "StarBinding | None | tuple[str | None, int]"]


@lru_cache(maxsize=2048)
def _steps(file: str, mtime: int, size: int) -> tuple[tuple[Step, ...], tuple[str, ...] | None]:
    """The module-level bindings of ``file`` in order: (name, what an import binds it to, or None where something else
    binds it), ("", (module, level)) for a star import; and its ``__all__`` where it writes one as literals."""
    try:
        with open(file, "rb") as f:
            source = f.read()
        with warnings.catch_warnings():  # (an invalid escape in the module is not the linted file's)
            warnings.simplefilter("ignore")
            tree = ast.parse(source, file) if b"import" in source else None
    except (OSError, SyntaxError, ValueError):
        return (), None
    if tree is None:
        return (), None
    steps: list[Step] = []
    listed: list[str] | None = None
    for stmt in _top_level(tree.body):
        if isinstance(stmt, ast.Import):
            for a in stmt.names:
                if a.asname:
                    steps.append((a.asname, StarBinding(a.name, a.name, None, a.asname)))
                else:
                    root = a.name.split(".")[0]
                    steps.append((root, StarBinding(root, a.name, None, None)))
        elif isinstance(stmt, ast.ImportFrom):
            if any(a.name == "*" for a in stmt.names):
                steps.append(("", (stmt.module, stmt.level)))
                continue
            for a in stmt.names:
                # a relative import names one of the project's modules: not what a rule looks for
                steps.append((a.asname or a.name, None if stmt.level or not stmt.module else
                              StarBinding(f"{stmt.module}.{a.name}", stmt.module, a.name, a.asname)))
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            steps.append((stmt.name, None))
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            for t in targets:
                for n in _names(t):
                    if n == "__all__":
                        listed = _all(stmt, listed)
                    else:
                        steps.append((n, None))
        elif isinstance(stmt, (ast.For, ast.AsyncFor, ast.With, ast.AsyncWith)):
            for t in ([stmt.target] if isinstance(stmt, (ast.For, ast.AsyncFor)) else
                      [i.optional_vars for i in stmt.items if i.optional_vars is not None]):
                steps.extend((n, None) for n in _names(t))
        elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and \
                isinstance(stmt.value.func, ast.Attribute) and isinstance(stmt.value.func.value, ast.Name) and \
                stmt.value.func.value.id == "__all__" and listed is not None:
            listed = _all_call(stmt.value, listed)
    return tuple(steps), None if listed is None else tuple(listed)


def _top_level(body: list[ast.stmt]) -> list[ast.stmt]:
    """Module-level statements in order, those of if/try/with blocks included (guarded imports)."""
    out: list[ast.stmt] = []
    for stmt in body:
        out.append(stmt)
        if isinstance(stmt, ast.If):  # (what runs only for a type checker is left out)
            out += _top_level(stmt.orelse) if _type_checking(stmt.test) else \
                _top_level(stmt.body) + _top_level(stmt.orelse)
        elif isinstance(stmt, ast.Try) or type(stmt).__name__ == "TryStar":
            for block in (stmt.body, *(h.body for h in stmt.handlers), stmt.orelse, stmt.finalbody):  # type: ignore[attr-defined]
                out += _top_level(block)
        elif isinstance(stmt, ast.With):
            out += _top_level(stmt.body)
    return out


def _type_checking(test: ast.expr) -> bool:
    """``TYPE_CHECKING`` / ``typing.TYPE_CHECKING``: a block only a type checker runs."""
    return isinstance(test, ast.Name) and test.id == "TYPE_CHECKING" or \
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _names(target: ast.expr) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for e in target.elts for n in _names(e)]
    if isinstance(target, ast.Starred):
        return _names(target.value)
    return []


def _literal_names(node: ast.expr | None) -> list[str] | None:
    if isinstance(node, (ast.List, ast.Tuple)) and all(isinstance(e, ast.Constant) and isinstance(e.value, str)
                                                        for e in node.elts):
        return [e.value for e in node.elts]  # type: ignore[attr-defined]
    return None


def _all(stmt: ast.Assign | ast.AnnAssign | ast.AugAssign, listed: list[str] | None) -> list[str] | None:
    """``__all__`` after an assignment to it (``+=`` adds); where it is not written as literals, what the module
    exports cannot be told: its public names (None)."""
    names = _literal_names(stmt.value)
    if names is None:
        return None
    if isinstance(stmt, ast.AugAssign):
        return None if listed is None else listed + names
    return names


def _all_call(call: ast.Call, listed: list[str]) -> list[str] | None:
    """``__all__.append("x")`` / ``__all__.extend([...])``."""
    assert isinstance(call.func, ast.Attribute)
    if call.func.attr == "append" and len(call.args) == 1 and isinstance(call.args[0], ast.Constant) and \
            isinstance(call.args[0].value, str):
        return listed + [call.args[0].value]
    if call.func.attr == "extend" and len(call.args) == 1 and (names := _literal_names(call.args[0])) is not None:
        return listed + names
    return None
