"""Source adapters: one module per vendor, each turning its folder of coverage_db/upstream/ into Releases.

An adapter is a module with ``releases(ctx: Context) -> list[Release]`` whose docstring states the
rules it applies (taken from that folder's SOURCES.md). A note that rests on a fact beyond the files read
cites it with ``provenance.cite(id)``, an entry of coverage_db/curated/facts.toml that the build renders,
with its public origin, into coverage_db/SOURCES.md. Adding a vendor means adding data and one
adapter here; the builder, the matrix and the tracer do not change.
"""

from __future__ import annotations

import hashlib
import importlib
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from opaudit.data import data_dir
from opaudit.errors import InputError
from opaudit.matrix.release import Release, Source
from opaudit.matrix.torchops import TorchOps, minor, parse_native_functions

CURATED = data_dir("coverage_db") / "curated"
# vendor -> adapter module, in the order the builder runs them
ADAPTERS = {
    "pytorch": "opaudit.matrix.sources.pytorch",
    "ascend": "opaudit.matrix.sources.ascend",
    "cambricon": "opaudit.matrix.sources.cambricon",
    "biren": "opaudit.matrix.sources.biren",
    "musa": "opaudit.matrix.sources.musa",
    "xpu": "opaudit.matrix.sources.xpu",
    "xla": "opaudit.matrix.sources.xla",
    "dipu": "opaudit.matrix.sources.dipu",
    "enflame": "opaudit.matrix.sources.enflame",
    "sophgo": "opaudit.matrix.sources.sophgo",
}


@dataclass
class Context:
    """What an adapter may use: the sources folder and PyTorch's op tables per release."""

    upstream: Path
    torch: dict[str, TorchOps] = field(default_factory=dict)  # "2.6.0" -> ops

    @classmethod
    def load(cls, upstream: Path) -> Context:
        pt = upstream / "pytorch"
        if not pt.is_dir():
            raise InputError(f"{upstream} has no pytorch/ folder",
                             hint="the sources folder holds one folder per vendor, with pytorch/v<X.Y.Z>/"
                                  "native_functions.yaml for each PyTorch release (see its SOURCES.md)")
        torch = {}
        for d in sorted(pt.iterdir()):
            f = d / "native_functions.yaml"
            if d.is_dir() and f.is_file():
                torch[d.name.lstrip("v")] = parse_native_functions(f, d.name.lstrip("v"))
        if not torch:
            raise InputError(f"{pt} holds no v<X.Y.Z>/native_functions.yaml")
        return cls(upstream, torch)

    def folder(self, vendor: str) -> Path:
        d = self.upstream / vendor
        if not d.is_dir():
            raise InputError(f"the sources folder has no {vendor}/ folder: {d}",
                             hint=f"{vendor}/ should hold the vendor's staged files and a SOURCES.md")
        return d

    def torch_for(self, version: str) -> TorchOps | None:
        """The op table of ``version``, or of the nearest release of the same X.Y line."""
        if version in self.torch:
            return self.torch[version]
        line = [v for v in self.torch if minor(v) == minor(version)]
        return self.torch[sorted(line)[-1]] if line else None

    def source(self, repo: str, path: str, commit: str | None, staged: Path, note: str = "") -> Source:
        """Provenance of a staged file: where it came from, and the sha256 of the copy read. A curated file
        the repository carries (curated()) is named by its path from the repository's top,
        ``coverage_db/curated/...``."""
        if staged.is_relative_to(CURATED):
            where = f"coverage_db/curated/{staged.relative_to(CURATED).as_posix()}"
        else:
            where = str(staged.relative_to(self.upstream))
        return Source(repo, path, commit, sha256(staged), where, note)

    @staticmethod
    def curated(name: str) -> Path:
        """A file of coverage_db/curated/: facts derived by hand from public repositories, kept with the code
        (the staged sources hold upstream files only)."""
        return CURATED / name


@cache
def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def adapter(vendor: str):
    return importlib.import_module(ADAPTERS[vendor])


def vendor_releases(vendor: str, ctx: Context) -> list[Release]:
    return adapter(vendor).releases(ctx)
