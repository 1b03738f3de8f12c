"""The import graph of opaudit/, read from the source with ``ast``: no import cycle anywhere, the packages in
the layers docs/architecture.md draws (each imports only those below it), and no module uses another package's
private names.

Every ``import`` counts, at module level and inside functions (a function-level import that closes a cycle
is still a cycle: it only moves the failure to the first call); imports under ``if TYPE_CHECKING:`` never
run and do not count. A package's ``__init__`` is a module of its own: importing ``opaudit.a.b`` is an edge
to ``opaudit.a.b`` only (Python runs the package first, and that is no cycle unless ``__init__`` imports the
module back, which is then an edge of its own)."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

from helpers import ROOT

PACKAGE = ROOT / "opaudit"


@dataclass
class Module:
    name: str
    path: Path
    is_package: bool
    imports: dict[str, list[int]] = field(default_factory=dict)  # imported module -> lines
    # (line, owner module, private name): `from owner import _name`, or `owner._name` on a name bound to it
    private: list[tuple[int, str, str]] = field(default_factory=list)

    @property
    def package(self) -> str:
        return self.name if self.is_package else self.name.rpartition(".")[0]


def _modules(root: Path = PACKAGE) -> dict[str, Module]:
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if is_package else parts)
        found[name] = Module(name, path, is_package)
    return found


def _type_checking_only(tree: ast.AST) -> set[int]:
    """ids of the nodes under ``if TYPE_CHECKING:`` (their imports never run)."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            for child in node.body:
                skip.update(id(n) for n in ast.walk(child))
    return skip


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _read(modules: dict[str, Module]) -> dict[str, Module]:
    for m in modules.values():
        tree = ast.parse(m.path.read_text(encoding="utf-8"), str(m.path))
        skip = _type_checking_only(tree)
        bound: dict[str, str] = {}  # local name -> the opaudit module it names (for `module._name`)

        def edge(target: str, line: int, m: Module = m) -> None:
            m.imports.setdefault(target, []).append(line)

        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name in modules:
                        edge(a.name, node.lineno)
                        if a.asname:
                            bound[a.asname] = a.name
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = m.package.split(".")
                    base = base[:len(base) - node.level + 1]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                if source not in modules:
                    continue
                for a in node.names:
                    sub = f"{source}.{a.name}"
                    if sub in modules:  # `from opaudit.fallback import simulator`: the submodule
                        edge(sub, node.lineno)
                        bound[a.asname or a.name] = sub
                    else:
                        edge(source, node.lineno)
                        if _is_private(a.name):
                            m.private.append((node.lineno, source, a.name))
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound
                    and _is_private(node.attr) and id(node) not in skip):
                m.private.append((node.lineno, bound[node.value.id], node.attr))
    return modules


def _cycles(modules: dict[str, Module]) -> list[list[str]]:
    """The strongly connected components with more than one module (or a module importing itself)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(v: str) -> None:  # Tarjan's algorithm; the graph is a few hundred modules deep at most
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in modules[v].imports:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in modules[v].imports:
                found.append(sorted(component))

    for v in sorted(modules):
        if v not in index:
            visit(v)
    return found


def _describe(modules: dict[str, Module], component: list[str]) -> str:
    inside = set(component)
    return "; ".join(f"{v} -> {w} (line {modules[v].imports[w][0]})"
                     for v in component for w in sorted(modules[v].imports) if w in inside)


def test_the_reader_finds_cycles_and_private_names(tmp_path):
    """On a package made for the purpose: a cycle closed by a function-level import is found, one closed
    under TYPE_CHECKING is not, and private names are found imported and read off a bound module."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.b import thing\n")
    (pkg / "b.py").write_text("def f():\n    from pkg import a\n    return a._hidden\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.d import D\n")
    (pkg / "d.py").write_text("import pkg.c\n")
    (pkg / "sub" / "e.py").write_text("from pkg.a import _secret\nfrom . import f\n")
    (pkg / "sub" / "f.py").write_text("from ..a import x\n")
    modules = _read(_modules(pkg))
    assert _cycles(modules) == [["pkg.a", "pkg.b"]]
    assert modules["pkg.sub.e"].imports.keys() == {"pkg.a", "pkg.sub.f"}
    assert modules["pkg.sub.f"].imports.keys() == {"pkg.a"}
    assert modules["pkg.sub.e"].private == [(1, "pkg.a", "_secret")]
    assert modules["pkg.b"].private == [(3, "pkg.a", "_hidden")]
    # and on opaudit itself, function-level imports are read
    real = _read(_modules())
    assert len(real) > 60 and "opaudit.rehearsal.simulator" in real["opaudit.standin"].imports


# The layers, lowest first (docs/architecture.md draws them): a package or top-level module imports only those of
# lower layers (and, in the first, the others of the first). ``opaudit`` is the package's own __init__: it names
# the public API and imports it on first use.
LAYERS = (
    ("base", ("opaudit", "opaudit.errors", "opaudit.data", "opaudit.files", "opaudit.tomlcache",
              "opaudit.torchcompat")),
    ("C++ parts", ("opaudit.native",)),
    ("support data", ("opaudit.matrix",)),
    ("source analysis", ("opaudit.lint",)),
    ("tracing", ("opaudit.tracing",)),
    ("audit", ("opaudit.auditing",)),
    ("fallback kernels", ("opaudit.fallback",)),
    ("rehearsal", ("opaudit.rehearsal",)),
    ("CUDA device", ("opaudit.standin",)),
    ("Python API", ("opaudit.api",)),
    ("test helpers", ("opaudit.testing",)),
    ("reports", ("opaudit.report",)),
    ("zoo", ("opaudit.zoo",)),
    ("command line", ("opaudit.cli",)),
    ("python -m opaudit", ("opaudit.__main__",)),
)


def _unit(name: str) -> str:
    """The package or top-level module a module belongs to (opaudit.tracing.run -> opaudit.tracing)."""
    return ".".join(name.split(".")[:2])


def test_no_import_cycle():
    """No cycle among the modules of opaudit/, function-level imports included, so none between its packages."""
    modules = _read(_modules())
    bad = _cycles(modules)
    assert not bad, "import cycles:\n" + "\n".join(_describe(modules, c) for c in bad)


def test_the_packages_form_layers():
    """Every package and top-level module is in one layer, and imports only from layers below its own."""
    modules = _read(_modules())
    layer = {unit: i for i, (_, units) in enumerate(LAYERS) for unit in units}
    assert {_unit(m) for m in modules} == set(layer), "a package or module of opaudit/ in no layer, or a layer of none"
    bad = []
    for m in modules.values():
        mine = layer[_unit(m.name)]
        for target, lines in sorted(m.imports.items()):
            theirs = layer[_unit(target)]
            if _unit(target) != _unit(m.name) and (theirs > mine or (theirs == mine and mine != 0)):
                bad.append(f"{m.path.relative_to(ROOT)}:{lines[0]}: {LAYERS[mine][0]} imports {target} "
                           f"({LAYERS[theirs][0]})")
    assert not bad, "imports against the layers:\n" + "\n".join(bad)


def test_no_module_uses_another_packages_private_names():
    """What another package needs is public in the package that owns it; inside fallback/ and rehearsal/, what
    another module of it needs is public too."""
    modules = _read(_modules())
    bad = []
    for m in modules.values():
        for line, source, name in m.private:
            owner = modules[source].package  # (a package's __init__ belongs to itself)
            if owner != m.package or (m.package in ("opaudit.fallback", "opaudit.rehearsal") and source != m.name):
                bad.append(f"{m.path.relative_to(ROOT)}:{line}: {name} of {source}")
    assert not bad, "private names used across boundaries:\n" + "\n".join(bad)


def test_the_repository_stands_alone():
    """No code or test reads a folder beside the clone: the vendors' raw lists are coverage_db/upstream/, the
    fixtures tests/fixtures/. A path out of the repository is a string naming ``shared`` as a folder, or
    ``..`` walked above the repository root."""
    leaving = re.compile(r"""\.\./shared|["']shared["']|["']/work/\w|parents\[[3-9]\]""")
    found = []
    for path in sorted([*PACKAGE.rglob("*.py"), *(ROOT / "tests").rglob("*.py")]):
        if "fixtures" in path.relative_to(ROOT).parts:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if leaving.search(line) and path.name != "test_boundaries.py":
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "\n".join(found)
