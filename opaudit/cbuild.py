"""Building opaudit's small C++ extensions for the installed torch: the rehearsal's device (fallback/device.cpp) and
the tracer's recorder (tracing/recorder.cpp).

Each is compiled on first use with torch's extension builder into ``<cache>/<kind>/<torch version>-<digest>`` in
opaudit's cache (the digest covers the source, torch's and Python's versions and the platform), or into the
directory an environment variable names; processes share a build under a file lock.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch


def build_dir(source: Path, kind: str, env: str) -> Path:
    given = os.environ.get(env)
    if given:
        return Path(given)
    version = torch.__version__.replace("+", "_")
    python = f"py{sys.version_info[0]}{sys.version_info[1]}"
    digest = hashlib.sha256(source.read_bytes() + f"{version} {python} {sys.platform}".encode()).hexdigest()[:10]
    from opaudit.tomlcache import cache_root

    base = cache_root() or Path(tempfile.gettempdir()) / f"opaudit-{os.getuid()}"
    return base / kind / f"{version}-{digest}"


def load(source: Path, name: str, kind: str, env: str, what: str,
         note: Callable[[str], None] | None = None) -> tuple[Any, str | None]:
    """(the loaded module, None), or (None, why not). ``what`` names the library in messages ("the rehearsal's C++
    device"); ``note(text)`` hears of a first build, which takes a while."""
    if sys.platform != "linux":
        return None, f"{what} is built for Linux only"
    import fcntl
    import io
    from contextlib import redirect_stderr, redirect_stdout

    from torch.utils.cpp_extension import load as load_extension

    directory = build_dir(source, kind, env)
    directory.mkdir(parents=True, exist_ok=True)
    if note is not None and not (directory / f"{name}.so").exists():
        note(f"compiling {what} for this torch (once, about 30 s)")
    log = io.StringIO()
    try:
        with open(directory / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            with redirect_stdout(log), redirect_stderr(log):
                ext = load_extension(name=name, sources=[str(source)], build_directory=str(directory),
                                     extra_cflags=["-O2"], verbose=False)
    except Exception as e:  # noqa: BLE001 - the compiler's failures come as several types (CalledProcessError, ...)
        tail = "\n".join((str(e).strip() or type(e).__name__).splitlines()[-6:])
        return None, f"building {what} failed: {tail}"
    return ext, None
