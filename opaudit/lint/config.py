"""``[tool.opaudit]`` in pyproject.toml: the settings a project keeps for ``opaudit lint`` and ``fix``.

    [tool.opaudit]
    target = "ascend"          # the default of --target
    select = ["OA1", "OA4"]    # codes or prefixes; default: every rule that is on by default
    extend-select = ["OA610"]
    ignore = ["OA105"]
    exclude = ["third_party/*"]    # replaces the default exclusions (.venv, build, dist, node_modules, ...)
    extend-exclude = ["gen/*"]     # adds to them
    respect-gitignore = true       # skip what .gitignore, .ignore and .git/info/exclude ignore
    force-exclude = false          # apply the exclusions to files named on the command line too
    min-torch = "2.6"          # gates the neutral target's torch.accelerator rewrites
    unsafe-fixes = false
    info = ["OA601", "OA602"]  # findings shown but never a reason to exit 1 (default: the catalogue's info rules)

The nearest pyproject.toml with a ``[tool.opaudit]`` table, from the first path given (or the working
directory) upwards, is used; options on the command line win over it.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from opaudit.errors import InputError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

KEYS = {"target": str, "select": list, "extend-select": list, "ignore": list, "exclude": list, "extend-exclude": list,
        "min-torch": str, "unsafe-fixes": bool, "guarded-import": bool, "respect-gitignore": bool,
        "force-exclude": bool, "info": list}


@dataclass
class Config:
    path: Path | None = None
    values: dict = field(default_factory=dict)

    def get(self, key: str, default=None):  # type: ignore[no-untyped-def]
        return self.values.get(key, default)


def find_config(start: str | Path | None = None) -> Config:
    """The nearest ``[tool.opaudit]`` table above ``start``, checked; an empty Config when there is none."""
    here = Path(start or ".").resolve()
    if here.is_file() or not here.exists():
        here = here.parent
    for folder in (here, *here.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            try:
                with open(candidate, "rb") as f:
                    data = tomllib.load(f)
            except (OSError, tomllib.TOMLDecodeError) as e:
                raise InputError(f"{candidate}: not valid TOML: {e}") from None
            table = data.get("tool", {}).get("opaudit")
            if table is not None:
                return Config(candidate, _checked(candidate, table))
    return Config()


def _checked(path: Path, table: dict) -> dict:
    for key, value in table.items():
        if key not in KEYS:
            raise InputError(f"{path}: [tool.opaudit] has no setting {key!r}", hint="settings: " + ", ".join(KEYS))
        expected = KEYS[key]
        if not isinstance(value, expected) or (isinstance(value, list) and not all(isinstance(v, str) for v in value)):
            what = "a list of strings" if expected is list else expected.__name__
            raise InputError(f"{path}: [tool.opaudit] {key} must be {what}, not {value!r}")
    return dict(table)
