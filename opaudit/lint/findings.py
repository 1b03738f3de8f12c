"""What the linter reports: one Finding per construct, and the result of one file."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Finding:
    """One construct that assumes CUDA. Lines and columns are 1-based (columns count characters);
    ``replacement`` is the code the fix writes, or suggests for suggestions."""

    path: str
    line: int
    col: int
    end_line: int
    end_col: int
    code: str
    message: str
    fix: str  # safe | unsafe | suggestion | report: what happens to it under `fix`
    replacement: str | None = None
    heuristic: bool = False  # matched by syntax (a method name), not by qualified name
    severity: str = "error"  # "info": shown, never a reason to exit 1 (a flag with no effect off CUDA)

    @property
    def blocking(self) -> bool:
        """Whether it makes lint and fix exit 1 (an ``info`` finding never does)."""
        return self.severity != "info"

    @property
    def fixable(self) -> bool:
        return self.replacement is not None and self.fix in ("safe", "unsafe")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class FileResult:
    """One file: its findings (in the original text), and under `fix` the new text and what was fixed."""

    path: str
    findings: list[Finding] = field(default_factory=list)
    fixed: list[Finding] = field(default_factory=list)  # findings whose fix was applied
    error: str | None = None  # the file could not be read or parsed (reported, skipped)
    skipped: bool = False  # no trigger word: never parsed
    old: bytes | None = None  # under fix: the original bytes, and the new ones when they differ
    new: bytes | None = None

    @property
    def changed(self) -> bool:
        return self.new is not None and self.new != self.old
