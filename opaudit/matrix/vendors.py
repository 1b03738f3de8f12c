"""Who each vendor is, to PyTorch: device type, dispatch key, package, import, torch.cuda twin.

Read from coverage_db/curated/vendors.toml, the one place this is written: the coverage_db adapters take
each release's identity from it, `opaudit doctor` recognises installed plugins by it, and tests hold
rules/targets/ and the built releases to it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from opaudit.data import data_dir, tomllib

FIELDS = ("title", "distribution", "env", "device_type", "dispatch_key", "package", "import_name", "module",
          "lint_target", "legacy_types", "names")


@dataclass(frozen=True)
class Vendor:
    name: str
    title: str
    distribution: str  # its name on PyPI ("torch": PyTorch itself carries it)
    device_type: str  # torch.device(device_type)
    dispatch_key: str  # the key its kernels register under
    package: str  # the distribution that ships the backend ("torch": PyTorch itself)
    import_name: str | None = None  # the import that registers the device; None: nothing to import
    module: str | None = None  # the torch.cuda twin ("torch.npu")
    lint_target: str | None = None  # the rules/targets/ table that ports code to it
    env: tuple[str, ...] = ()  # the environment variables that steer it (shown by `opaudit doctor`)
    names: tuple[str, ...] = ()  # what users type for it (``npu`` for ascend): canonical() maps them
    legacy_types: bool = False  # it has typed tensor classes (torch.npu.FloatTensor): SOURCES.md#legacy-tensor-types


@cache
def vendors() -> dict[str, Vendor]:
    path = data_dir("coverage_db") / "curated" / "vendors.toml"
    with path.open("rb") as f:
        data = tomllib.load(f)
    out = {}
    for name, table in data.items():
        unknown = set(table) - set(FIELDS)
        if unknown:
            raise ValueError(f"{path}: [{name}] has unknown keys {sorted(unknown)} (keys: {', '.join(FIELDS)})")
        out[name] = Vendor(name=name, **{**table, "env": tuple(table.get("env", ())),
                                         "names": tuple(table.get("names", ()))})
    return out


def vendor(name: str) -> Vendor:
    """The identity of ``name`` (a coverage_db vendor: ``ascend``, ``cuda``, ...)."""
    return vendors()[name]


@cache
def _by_name() -> dict[str, str]:
    table: dict[str, str] = {}
    for v in vendors().values():
        for n in (v.name, *v.names):
            if table.setdefault(n.lower(), v.name) != v.name:
                raise ValueError(f"vendors.toml: the name {n!r} is given to {table[n.lower()]} and {v.name}")
    return table


def canonical(name: str) -> str:
    """The vendor a name users type stands for (``npu`` -> ``ascend``, ``mlu`` -> ``cambricon``; vendors.toml
    ``names``), lowercased; a name no vendor has comes back lowercased, for the caller's own error."""
    key = name.strip().lower()
    return _by_name().get(key, key)


def typed_names() -> dict[str, list[str]]:
    """{vendor: the other names users type for it}, for help texts and errors."""
    return {v.name: list(v.names) for v in vendors().values() if v.names}
