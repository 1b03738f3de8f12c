"""The CPU reference of ``fix --verify`` runs the original tree only: started in its own copy, with no folder of the
tree being ported on its sys.path (neither the caller's folder, which ``python -m`` would put first, nor a
PYTHONPATH or ``.pth`` entry), so it never imports a file the port rewrote, however the two runs are timed."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from opaudit.rehearsal import verify_run
from opaudit.rehearsal.verify import _copy_tree, _finish, _start

SCRIPT = """import sys
from pkg import mod
print(mod.WHO)
sys.exit(0 if mod.WHO == "original" else 3)
"""


def test_the_reference_never_imports_the_port(tmp_path, monkeypatch):
    root = tmp_path / "project"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "mod.py").write_text('WHO = "original"\n')
    (root / "pkg" / "train.py").write_text(SCRIPT)
    runs = tmp_path / "runs"
    original = runs / "original" / "project"
    _copy_tree(root, original)
    (root / "pkg" / "mod.py").write_text('WHO = "port"\n')  # the port, rewritten in place before the run starts
    monkeypatch.chdir(root)  # the caller's folder: the tree being ported
    monkeypatch.setenv("PYTHONPATH", ".")
    child = _start(runs, "reference", original / "pkg" / "train.py", [], original, original, None, root)
    result = _finish(child, 120)
    assert result["ok"], (result, child.log.read_text())
    assert all(f.startswith(str(original.resolve())) for f in result["lines"]), result["lines"]


def test_isolate_moves_every_folder_of_the_origin(tmp_path, monkeypatch):
    origin, copy = tmp_path / "tree", tmp_path / "copy" / "tree"
    (origin / "src").mkdir(parents=True)
    (copy / "src").mkdir(parents=True)
    other = str(tmp_path / "elsewhere")
    editable = type(sys)("__editable___demo_finder")
    editable.MAPPING = {"demo": str(origin / "src" / "demo"), "other": other}
    monkeypatch.setattr(sys, "path", [str(tmp_path / "start"), str(origin), str(origin / "src"), other])
    monkeypatch.setitem(sys.modules, editable.__name__, editable)
    verify_run.isolate({"root": str(copy), "origin": str(origin)}, str(tmp_path / "start"))
    assert sys.path == [str(copy), os.path.join(str(copy), "src"), other]
    assert editable.MAPPING == {"demo": os.path.join(str(copy), "src", "demo"), "other": other}


def test_opaudit_itself_stays_importable_from_a_source_checkout(tmp_path, monkeypatch):
    """Started in the copy, the runs find opaudit as the caller did: from its checkout when that is the caller's
    folder (then added to their PYTHONPATH, last), else as installed."""
    import opaudit
    from opaudit.rehearsal.verify import _own_root

    root = Path(opaudit.__file__).resolve().parent.parent
    monkeypatch.chdir(root)
    assert _own_root() == str(root)
    monkeypatch.chdir(tmp_path)
    assert _own_root() is None
