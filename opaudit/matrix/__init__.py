"""matrix/: what a target supports -> a Matrix per target release (reads coverage_db/).

>>> m = opaudit.matrix.load_matrix("ascend@2.6.0.post5")          # doctest: +SKIP
>>> m.resolve("aten::isin.Tensor_Tensor_out")                      # doctest: +SKIP
Support(status='native', ...)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from opaudit.errors import InputError
from opaudit.matrix.database import Database, Entry, load_database
from opaudit.matrix.matrix import STATUSES, Matrix, Support, normalize
from opaudit.matrix.release import CATEGORIES, Caveat, CpuFallback, Release
from opaudit.matrix.torchops import op_history


def load_matrix(target: str, *, db: Database | None = None) -> Matrix:
    """The Matrix of ``target``: ``vendor``, ``vendor@release`` (package version, tag, vendor release)
    or the path of a user-supplied matrix file (docs/matrix-format.md)."""
    db = db or load_database()
    path = Path(target)
    if target.endswith(".toml") or (path.suffix and path.exists()):
        release = Release.load(path)
    else:
        release = db.release(db.find(target))
    return Matrix(release, db.torch_ops(release.torch), op_history(db.root))


def load_targets(targets: Any, *, db: Database | None = None) -> list[Matrix]:
    """The Matrix of each of ``targets``: names (:func:`load_matrix`; ``"all"``: every release of every vendor),
    matrix files or Matrix objects, in order."""
    targets = list(targets)
    if not targets:
        return []
    db = db or load_database()
    out: list[Matrix] = []
    for t in targets:
        if isinstance(t, str) and t.strip().lower() == "all":
            out += [load_matrix(e.key, db=db) for e in db.entries]
        else:
            out.append(t if isinstance(t, Matrix) else load_matrix(str(t), db=db))
    return out


def list_targets(db: Database | None = None) -> list[Entry]:
    db = db or load_database()
    return list(db.entries)


__all__ = ["CATEGORIES", "STATUSES", "Caveat", "CpuFallback", "Database", "Entry", "InputError", "Matrix",
           "Release", "Support", "load_database", "list_targets", "load_matrix", "load_targets", "normalize"]
