"""Finding and loading target releases in coverage_db/ (or in a user's matrix file).

A target is ``vendor@release`` (``ascend@2.6.0.post5``), a vendor's own release number
(``ascend@7.3.0``), any alias of a release (a tag such as ``ascend@v7.3.0-pytorch2.6.0``), or a vendor
alone, which means its newest release (its newest published one: development snapshots and pre-releases are
named explicitly). A path to a ``.toml`` file is a user-supplied matrix.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from opaudit.data import data_dir, tomllib
from opaudit.errors import InputError
from opaudit.matrix.release import Release
from opaudit.matrix.torchops import TorchOps, load_torch_ops, minor
from opaudit.matrix.vendors import canonical, typed_names


@dataclass(frozen=True)
class Entry:
    """One release as the index lists it."""

    key: str
    vendor: str
    name: str
    file: str
    torch: str
    order: int
    exact: bool
    aliases: tuple[str, ...]
    vendor_release: str | None
    device_type: str
    counts: tuple[tuple[str, int], ...]
    prerelease: bool = False


class Database:
    """The releases of coverage_db/, by vendor, oldest first."""

    def __init__(self, root: Path | None = None):
        self.root = Path(root) if root is not None else data_dir("coverage_db")
        index = self.root / "index.toml"
        if not index.is_file():
            raise InputError(f"{self.root} has no index.toml: the coverage database is not built",
                             hint="run: opaudit db build (from an opaudit checkout)")
        with open(index, "rb") as f:
            data = tomllib.load(f)
        self.entries: list[Entry] = [
            Entry(e["key"], e["vendor"], e["name"], e["file"], e["torch"], int(e["order"]), bool(e["exact"]),
                  tuple(e.get("aliases", ())), e.get("vendor_release"), e["device_type"],
                  tuple(sorted(e.get("counts", {}).items())), bool(e.get("prerelease", False)))
            for e in data.get("release", [])
        ]
        self.by_vendor: dict[str, list[Entry]] = {}
        for e in self.entries:
            self.by_vendor.setdefault(e.vendor, []).append(e)
        for rels in self.by_vendor.values():
            rels.sort(key=lambda e: (e.order, e.name))

    @property
    def vendors(self) -> list[str]:
        return sorted(self.by_vendor)

    def newest(self, vendor: str) -> Entry:
        """The newest published release (the newest snapshot where the vendor has nothing else)."""
        rels = self.by_vendor[vendor]
        published = [e for e in rels if not e.prerelease]
        return (published or rels)[-1]

    def installed(self, vendor: str, plugin_version: str | None, torch_version: str) -> Entry:
        """The release of ``vendor`` that a process with its plugin runs: the release the installed plugin's version
        names, else the newest published one built for the running torch's X.Y line, else the newest."""
        rels = self.by_vendor[vendor]
        if plugin_version:
            named = [e for e in rels if e.name == plugin_version or plugin_version in e.aliases]
            if named:
                return named[-1]
        try:
            line = [e for e in rels if minor(e.torch) == minor(torch_version)]
        except ValueError:
            line = []
        published = [e for e in line if not e.prerelease]
        return (published or line or [self.newest(vendor)])[-1]

    def find(self, target: str) -> Entry:
        """The release ``target`` names; a clear error listing close matches when none does."""
        vendor, _, name = target.strip().partition("@")
        vendor = canonical(vendor)  # the names users type: npu, mlu, supa, gcu, tpu (vendors.toml)
        if vendor not in self.by_vendor:
            close = difflib.get_close_matches(vendor, self.vendors, n=3, cutoff=0.5)
            raise InputError(f"unknown target vendor {vendor!r}",
                             hint=(f"did you mean {', '.join(close)}? " if close else "")
                             + f"vendors: {', '.join(self.vendors)}; also typed as: {_typed()}")
        rels = self.by_vendor[vendor]
        if not name:
            return self.newest(vendor)
        exact = [e for e in rels if e.name == name] or [e for e in rels if name in e.aliases]
        if exact:
            return exact[-1]
        by_release = [e for e in rels if e.vendor_release == name]
        if by_release:
            return _prefer_installed_torch(by_release)
        names = [e.name for e in rels] + [a for e in rels for a in e.aliases]
        close = difflib.get_close_matches(name, names, n=5, cutoff=0.4)
        raise InputError(f"{vendor} has no release {name!r}",
                         hint=(f"close matches: {', '.join(close)}; " if close else "")
                         + f"see: opaudit matrix list {vendor}")

    def release(self, entry: Entry) -> Release:
        return _load_release(self.root / entry.file)

    def torch_ops(self, version: str) -> TorchOps | None:
        """PyTorch's op table for ``version``, or for the nearest staged release of its X.Y line."""
        available = self._torch_versions()
        if version in available:
            return load_torch_ops(self.root, version)
        try:
            line = [v for v in available if minor(v) == minor(version)]
        except ValueError:
            return None
        return load_torch_ops(self.root, sorted(line)[-1]) if line else None

    def _torch_versions(self) -> list[str]:
        return sorted(p.name[len("ops-"):-len(".tsv")] for p in (self.root / "pytorch").glob("ops-*.tsv"))


def _typed() -> str:
    return "; ".join(f"{', '.join(names)} = {v}" for v, names in sorted(typed_names().items()))


def _prefer_installed_torch(entries: list[Entry]) -> Entry:
    """Of one vendor release built for several PyTorch lines, the line of the installed torch, else the newest."""
    try:
        import torch

        line = minor(torch.__version__)
        same = [e for e in entries if minor(e.torch) == line]
        if same:
            return same[-1]
    except (ImportError, ValueError):
        pass
    return entries[-1]


@cache
def _load_release(path: Path) -> Release:
    return Release.load(path, validate=False)  # generated files: tests/matrix/test_db.py validates every one


@cache
def load_database(root: str | None = None) -> Database:
    return Database(Path(root) if root else None)
