"""``opaudit doctor``: the torch and the device plugins installed here, and whether they belong together.

Plugins are recognised from coverage_db/curated/vendors.toml; a plugin's installed version is looked
up among its releases in coverage_db/ to tell the PyTorch version it was built for.
"""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import os
from dataclasses import dataclass, field

from opaudit.matrix.database import Database, load_database
from opaudit.matrix.torchops import minor
from opaudit.matrix.vendors import vendors


@dataclass
class PluginCheck:
    vendor: str
    distribution: str
    module: str
    installed: str | None  # its version, None when not installed
    release: str | None = None  # the coverage_db release of that version, if known
    built_for: str | None = None  # the PyTorch version that release builds against
    matches: bool | None = None  # built_for's X.Y equals the installed torch's X.Y
    env: dict[str, str] = field(default_factory=dict)  # its environment variables that are set


@dataclass
class DoctorReport:
    torch: str
    torch_cuda: str | None
    plugins: list[PluginCheck]
    env: dict[str, str]  # every known device variable that is set


def _version(distribution: str) -> str | None:
    try:
        return md.version(distribution)
    except md.PackageNotFoundError:
        return None


def examine(db: Database | None = None) -> DoctorReport:
    import torch

    db = db or load_database()
    torch_version = torch.__version__
    plugins = []
    env_all: dict[str, str] = {}
    for v in vendors().values():
        env = {k: os.environ[k] for k in v.env if k in os.environ}
        env_all.update(env)
        if v.distribution == "torch" or v.import_name is None:
            continue  # in-tree backends: their facts are torch's
        version = _version(v.distribution)
        if version is None and importlib.util.find_spec(v.import_name) is None:
            if env:
                plugins.append(PluginCheck(v.name, v.distribution, v.import_name, None, env=env))
            continue
        check = PluginCheck(v.name, v.distribution, v.import_name, version, env=env)
        if version and v.name in db.by_vendor:
            match = [e for e in db.by_vendor[v.name] if e.name == version or version in e.aliases]
            if match:
                check.release, check.built_for = match[-1].key, match[-1].torch
                check.matches = minor(match[-1].torch) == minor(torch_version)
        plugins.append(check)
    return DoctorReport(torch_version, getattr(torch.version, "cuda", None), plugins, env_all)
