"""TOML parsed once per content: the parse of a text is kept on disk, keyed by a digest of the text.

An audit against every release reads coverage_db's ~200 TOML files (7 MB); Python's TOML parser takes about
a second on them, reading back its result takes a twentieth of that. The cache is keyed by the text itself,
so an edited file is parsed again, and needs no invalidation. It lives in ``$OPAUDIT_CACHE_DIR``, else
``$XDG_CACHE_HOME/opaudit``, else ``~/.cache/opaudit``; ``OPAUDIT_CACHE_DIR=`` (empty) turns it off. A
folder that cannot be written, or an entry that cannot be read back, only costs the parse.
"""

from __future__ import annotations

import hashlib
import marshal
import os
import sys
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

from opaudit.data import tomllib

MIN_SIZE = 4096  # smaller texts parse faster than a file can be opened


def cache_root() -> Path | None:
    """opaudit's cache folder (module doc), None when it is off; opaudit.standin builds there too."""
    env = os.environ.get("OPAUDIT_CACHE_DIR")
    if env is not None:
        return Path(env) if env.strip() else None
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg) / "opaudit" if xdg else Path.home() / ".cache" / "opaudit"


@cache
def cache_dir() -> Path | None:
    """Where parses are kept (module doc); None when the cache is off."""
    base = cache_root()
    if base is None:
        return None
    # marshal's format belongs to one Python version
    return base / f"toml-py{sys.version_info[0]}{sys.version_info[1]}-m{marshal.version}"


def loads(text: str) -> dict[str, Any]:
    """``tomllib.loads(text)``, read from the cache where this text was parsed before; raises as tomllib does."""
    folder = cache_dir() if len(text) >= MIN_SIZE else None
    if folder is None:
        return tomllib.loads(text)
    path = folder / (hashlib.blake2b(text.encode("utf-8"), digest_size=20).hexdigest() + ".marshal")
    try:
        data = marshal.loads(path.read_bytes())
        if isinstance(data, dict):
            return data
    except (OSError, ValueError, EOFError, TypeError):
        pass
    data = tomllib.loads(text)
    _store(path, data)
    return data


def _store(path: Path, data: dict[str, Any]) -> None:
    try:
        blob = marshal.dumps(data)  # ValueError for what marshal cannot hold (TOML dates): not kept
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(blob)
            os.replace(tmp, path)  # readers see a whole entry or none
        except BaseException:
            os.unlink(tmp)
            raise
    except (OSError, ValueError):
        pass
