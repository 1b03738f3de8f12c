"""Where the data folders are: beside the package in a source checkout, inside it in a wheel."""

from __future__ import annotations

import sys
from functools import cache
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

_PACKAGE = Path(__file__).resolve().parent
FOLDERS = ("coverage_db", "rules", "reports")


def data_dir(name: str) -> Path:
    """The folder ``name`` (one of ``coverage_db``, ``rules``, ``reports``).

    An installed wheel carries the folders as ``opaudit/_data/<name>``; a source checkout (or an
    editable install) has them at the top of the repository.
    """
    if name not in FOLDERS:
        raise ValueError(f"unknown data folder {name!r}; expected one of {', '.join(FOLDERS)}")
    for candidate in (_PACKAGE / "_data" / name, _PACKAGE.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(
        f"opaudit's data folder {name!r} is missing (looked in {_PACKAGE / '_data'} and {_PACKAGE.parent}); "
        "the installation is incomplete: reinstall opaudit"
    )


@cache
def load_toml(folder: str, relpath: str) -> dict:
    """A TOML file of a data folder, parsed once per process."""
    with open(data_dir(folder) / relpath, "rb") as f:
        return tomllib.load(f)
