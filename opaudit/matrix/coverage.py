"""Comparisons between releases: the share of PyTorch's CUDA set each reaches, and what changed."""

from __future__ import annotations

from dataclasses import dataclass

from opaudit.matrix.database import Database
from opaudit.matrix.matrix import Matrix
from opaudit.matrix.release import Release


@dataclass(frozen=True)
class Coverage:
    key: str
    torch: str  # the PyTorch op table compared with
    cuda: int  # ops with a CUDA kernel in that PyTorch release
    covered: int  # of those, registered natively by the target (directly or via the structured delegate)
    exact: bool

    @property
    def share(self) -> float:
        return self.covered / self.cuda if self.cuda else 0.0


def coverage(matrix: Matrix) -> Coverage | None:
    """The share of PyTorch's CUDA kernels (same release line) that ``matrix`` registers natively."""
    tops = matrix.torch_ops
    if tops is None:
        return None
    cuda = tops.with_kernel("CUDA")
    native = matrix.release.op_set("native")
    covered = {op for op in cuda if op in native or (tops.ops[op].delegate or "") in native}
    return Coverage(matrix.key, tops.version, len(cuda), len(covered), matrix.release.exact)


@dataclass(frozen=True)
class Diff:
    a: str
    b: str
    category: str
    gained: tuple[str, ...]  # in b, not in a
    lost: tuple[str, ...]  # in a, not in b


def diff(a: Release, b: Release) -> list[Diff]:
    """Op-list differences between two releases (of one vendor, or of two), per category."""
    out = []
    for cat in sorted(set(a.ops) | set(b.ops)):
        sa, sb = a.op_set(cat), b.op_set(cat)
        if sa != sb:
            out.append(Diff(a.key, b.key, cat, tuple(sorted(sb - sa)), tuple(sorted(sa - sb))))
    return out


def compatibility(db: Database) -> dict[str, dict[str, list[str]]]:
    """PyTorch line -> vendor -> releases built for it: the table people copy from vendor READMEs."""
    table: dict[str, dict[str, list[str]]] = {}
    for e in db.entries:
        line = ".".join(e.torch.split(".")[:2])
        table.setdefault(line, {}).setdefault(e.vendor, []).append(e.name)
    return table
