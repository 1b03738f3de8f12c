"""Writing results: atomically (a file is the old one or the new one, never half of either)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from opaudit.errors import InputError, OutputError


def write_atomic(path: str | os.PathLike[str], text: str | bytes) -> Path:
    """Write ``text`` (or bytes, as they are) to ``path`` through a temporary file in the same folder, flushed
    to disk, and a rename: a reader, or a crash, sees the old file or the new one, never a mix."""
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise OutputError(f"cannot write {path}: it is a directory")
    try:
        parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=parent)
    except OSError as e:
        raise OutputError(f"cannot write {path}: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(text.encode("utf-8") if isinstance(text, str) else text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, path.stat().st_mode & 0o7777 if path.exists() else 0o666 & ~_umask())  # mkstemp's is 0600
        os.replace(tmp, path)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise OutputError(f"cannot write {path}: {e.strerror or e}") from None
    return path


def check_writable(path: str | os.PathLike[str]) -> None:
    """Refuse (InputError, exit 2: before a long trace) an output path that cannot be written: a directory, a
    device file or other non-regular file, or a folder in which no file can be made (tried for real, so a
    read-only mount or a virtual file system such as /proc is refused too, for root as well)."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"cannot write {path}: it is a directory")
    if path.exists() and not path.is_file():
        raise InputError(f"cannot write {path}: it is not a regular file (a device, a pipe or a socket)")
    parent = path.parent if str(path.parent) else Path(".")
    existing = parent
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise InputError(f"cannot write {path}: {existing} is not a writable folder")
    try:
        with tempfile.NamedTemporaryFile(dir=existing, prefix=".opaudit-probe-"):
            pass
    except OSError as e:
        raise InputError(f"cannot write {path}: no file can be made in {existing} ({e.strerror or e})") from None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
