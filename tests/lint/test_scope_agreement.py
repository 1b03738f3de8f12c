"""The linter's own scope analysis (``FileCheck.qualname``, read through ``walk.resolved_chains``) names what
LibCST's QualifiedNameProvider names, on real installed torch and transformers modules that use torch.cuda.
bench/lint_scope.py measures the same on the whole lint corpus, and what keeping the fast version saves.

Where the two differ by design, the difference is allowed: LibCST gives every import that may bind a name
(a guarded import and its fallback), the linter the one executed last (it is among LibCST's); and where a
scope binds the name by an import and by something else (``x = None`` in the fallback, a def), the linter
resolves neither while LibCST lists both. Relative imports, which the linter never resolves, are left out."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider, QualifiedNameProvider, ScopeProvider
from libcst.metadata.base_provider import LazyValue
from libcst.metadata.name_provider import QualifiedNameSource

from opaudit.lint.walk import resolved_chains

# a few hundred lines each, every one using torch.cuda; found where they are installed
MODULES = ("torch.cuda.graphs", "torch.cuda.random", "torch.cuda.streams", "torch.random", "torch.backends.cuda",
           "torch.amp.grad_scaler", "transformers.trainer_utils")


def _path(module: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        pytest.skip(f"{module} is not installed")
    return Path(spec.origin)


def _disagreements(source: bytes) -> tuple[int, list[str]]:
    """(chains both name, how each other one differs) for the chains whose root is a read."""
    module = cst.parse_module(source)
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    names = wrapper.resolve(QualifiedNameProvider)
    scopes = wrapper.resolve(ScopeProvider)
    lines = wrapper.resolve(PositionProvider)
    reads = {id(a.node) for s in {id(s): s for s in scopes.values() if s is not None}.values() for a in s.accesses}
    both, differ = 0, []
    for node, mine in resolved_chains(module, source):
        root = node
        while isinstance(root, cst.Attribute):
            root = root.value
        if not isinstance(root, cst.Name) or id(root) not in reads:
            continue
        value = names.get(node, ())
        value = value() if isinstance(value, LazyValue) else value
        theirs = {q.name for q in value if q.source is QualifiedNameSource.IMPORT and not q.name.startswith(".")}
        others = {q for q in value if q.source is not QualifiedNameSource.IMPORT}
        if mine is None and not theirs:
            continue
        if mine is not None and mine in theirs:
            both += 1  # alone, or among the several imports that may bind it
        elif mine is None and others:
            continue  # bound by an import and otherwise in one scope: the linter assumes neither
        else:
            differ.append(f"line {lines[node].start.line}: {cst.Module([]).code_for_node(node)} "
                          f"opaudit={mine} libcst={sorted(theirs)}")
    return both, differ


@pytest.mark.parametrize("module", MODULES)
def test_the_walk_names_what_libcst_names(module):
    both, differ = _disagreements(_path(module).read_bytes())
    assert both >= 10
    assert not differ, differ[:10]


def test_the_by_design_differences_are_the_only_ones_allowed():
    src = (b"try:\n    import torch_npu as acc\nexcept ImportError:\n    import torch.cuda as acc\nacc.synchronize()\n"
           b"def f():\n    try:\n        from torch.cuda import graphs\n    except ImportError:\n"
           b"        graphs = None\n    return graphs.CUDAGraph\n")
    assert _disagreements(src) == (1, [])
    leak = b"import numpy as np\ndef f():\n    import torch.cuda as np\ndef g():\n    return np.zeros\n"
    assert _disagreements(leak) == (1, [])  # g's np is numpy: the import in f binds in f only
