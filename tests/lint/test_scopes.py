"""Names resolve as Python scopes them: a loop, comprehension, with, except, lambda, parameter or nested
def binding hides a module-level import of the same name, and a safe fix never rewrites such a name.
The linter's own walk is held against LibCST's ScopeProvider on real code (installed torch and
transformers files)."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest
import torch
import transformers
from libcst.metadata import GlobalScope, MetadataWrapper, ParentNodeProvider, ScopeProvider

from opaudit.lint import Settings, fix_source, lint_source
from opaudit.lint.engine import _resolve
from opaudit.lint.walk import FileCheck, resolved_chains

SHADOWED = [
    "from torch import cuda\nstreams = []\nfor cuda in streams:\n    cuda.synchronize()\n",
    "from torch import cuda\nstreams = []\nx = [cuda.synchronize() for cuda in streams]\n",
    "from torch import cuda\nwith open('f') as cuda:\n    cuda.synchronize()\n",
    "from torch import cuda\ntry:\n    pass\nexcept Exception as cuda:\n    cuda.synchronize()\n",
    "from torch import cuda\nf = lambda cuda: cuda.synchronize()\n",
    "from torch import cuda\ndef f(cuda):\n    cuda.synchronize()\n",
    "from torch import cuda\ndef f():\n    def cuda():\n        pass\n    cuda.synchronize()\n",
    "from torch import cuda\ndef f(xs):\n    if xs:\n        for cuda in xs:\n            cuda.synchronize()\n",
    "from torch import cuda\ndef f(xs):\n    with xs as (a, cuda):\n        cuda.synchronize()\n",
]


@pytest.mark.parametrize("src", SHADOWED)
def test_a_local_binding_hides_the_import(src):
    settings = Settings(target="ascend", select=("ALL",), unsafe_fixes=True)
    assert "OA401" not in [f.code for f in lint_source(src.encode(), settings).findings]
    assert b"npu.synchronize" not in fix_source(src.encode(), settings).new


def test_the_import_is_still_seen_where_nothing_hides_it():
    src = b"from torch import cuda\ndef f(xs):\n    global cuda\n    cuda.synchronize()\n    return [x for x in xs]\n"
    assert "OA401" in [f.code for f in lint_source(src, Settings(target="ascend")).findings]


def _verdict(scope, name: cst.Name, parents) -> bool | None:
    """What ScopeProvider says a name refers to: True for an import (the only kind of binding the linter
    resolves), False for any other binding; None where the linter's policy differs on purpose (a
    module-level `amp = None` beside `from torch.cuda import amp` keeps the import; a function's relative
    import is not resolved)."""
    try:
        assignments = list(scope[name.value])
    except Exception:
        return None
    if not assignments:
        return False
    is_import = [isinstance(a.node, (cst.Import, cst.ImportFrom)) for a in assignments]
    local = [a for a in assignments if not isinstance(a.scope, GlobalScope)]
    if any(isinstance(a.node, cst.ImportFrom) and a.node.relative for a in local):
        return None  # the linter resolves no relative import (`from .constant import X` in a function)
    if local:
        return all(isinstance(a.node, (cst.Import, cst.ImportFrom)) for a in local)
    if not any(is_import):
        return False
    for a in assignments:
        if isinstance(a.node, cst.Name):
            holder = parents.get(a.node)
            while isinstance(holder, (cst.Tuple, cst.List, cst.Element, cst.StarredElement)):
                holder = parents.get(holder)
            if not isinstance(holder, (cst.AssignTarget, cst.AnnAssign, cst.AugAssign)):
                return False  # a loop, with, except or := target
        elif not isinstance(a.node, (cst.Import, cst.ImportFrom)):
            return False  # a def or a class
    return True


def _files(count: int) -> list[Path]:
    out = []
    for pkg in (torch, transformers):
        root = Path(pkg.__file__).parent
        mentions = [p for p in sorted(root.rglob("*.py")) if b"cuda" in p.read_bytes()]
        out += mentions[:: max(1, len(mentions) // (count // 2))][: count // 2]
    return out


def test_the_walk_scopes_names_as_scope_provider_does_on_real_code():
    target, cat, selected = _resolve(Settings(target="ascend", select=("ALL",)))
    compared = 0
    differ = []
    for path in _files(24):
        source = path.read_bytes()
        module = cst.parse_module(source)
        wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
        scopes = wrapper.resolve(ScopeProvider)
        parents = wrapper.resolve(ParentNodeProvider)
        check = FileCheck(module, target, cat, selected, "2.6", source)
        check.trace = {}
        check.walk(module)
        by_id = {id(n): n for n in scopes if isinstance(n, cst.Name)}
        for node_id, resolved in check.trace.items():
            node = by_id.get(node_id)
            scope = scopes.get(node) if node is not None else None
            if node is None or scope is None or node.value not in check.imports:
                continue
            verdict = _verdict(scope, node, parents)
            if verdict is None:
                continue
            compared += 1
            if verdict != resolved:
                differ.append(f"{path.name}: {node.value} linter={resolved} scope={verdict}")
    assert compared > 500
    assert not differ, differ[:10]


def _names(src: str) -> dict[str, str | None]:
    """Each chain of ``src`` (its code, the last occurrence) -> the qualified name the walk gives it."""
    return {cst.Module([]).code_for_node(n): q for n, q in resolved_chains(cst.parse_module(src), src.encode())}


def test_an_import_in_a_function_binds_in_that_function_only():
    src = ("from torch import cuda\n"
           "def npu_path():\n"
           "    from torch_npu import npu as cuda\n"
           "    cuda.current_stream()\n"
           "def sync():\n"
           "    cuda.synchronize()\n")
    names = _names(src)
    assert names["cuda.current_stream"] == "torch_npu.npu.current_stream"
    assert names["cuda.synchronize"] == "torch.cuda.synchronize"  # not the other function's import
    assert "OA401" in [f.code for f in lint_source(src.encode(), Settings(target="ascend")).findings]


def test_an_import_in_a_class_body_binds_in_that_body_only():
    src = "import torch as t\nclass A:\n    import torch_npu as t\n    npu = t.npu\ny = t.cuda\n"
    names = _names(src)
    assert names["t.npu"] == "torch_npu.npu" and names["t.cuda"] == "torch.cuda"


def test_a_function_import_declared_global_binds_at_module_level():
    src = "def setup():\n    global tc\n    import torch.cuda as tc\ndef sync():\n    tc.synchronize()\n"
    assert _names(src)["tc.synchronize"] == "torch.cuda.synchronize"


def test_a_nested_function_sees_its_enclosing_functions_later_import():
    src = "def f():\n    def g():\n        return t.cuda\n    import torch as t\n    return g\n"
    assert _names(src)["t.cuda"] == "torch.cuda"


def test_a_comprehensions_first_iterable_is_in_the_enclosing_scope():
    src = ("class A:\n    import torch as t\n    streams = [s for s in t.cuda.streams]\n"
           "    hidden = [t.cuda.x for s in streams]\n"
           "import torch\nshadowed = [torch for torch in torch.cuda.devices]\n")
    names = _names(src)
    assert names["t.cuda.streams"] == "torch.cuda.streams"  # the class body's t
    assert names["t.cuda.x"] is None  # the element: the comprehension's own scope, which no class name reaches
    assert names["torch.cuda.devices"] == "torch.cuda.devices"  # the loop's torch is not bound yet there
