"""Building opaudit's C++ parts for the installed torch: the CUDA stand-in (native/cuda.cpp), the rehearsal's device
(native/device.cpp) and the tracer's recorder (native/recorder.cpp).

Each part is compiled on first use with torch's extension builder into ``<cache>/<kind>/<torch version>-<key>`` in
opaudit's cache (opaudit.tomlcache.cache_root; the temporary folder where the cache is off), or into the folder an
environment variable names. The key covers what the library is bound to: its source, the torch installation (the
folder it is installed in and its build, ``torch/version.py``), the Python (version and ABI) and the C++ compiler
(the one torch's builder runs, by path and file). Two virtual environments with the same torch version so get
two builds, and neither rebuilds the other's (torch's builder writes a venv's include paths into its build
file, so a shared folder was rebuilt by each in turn).

A build is atomic: processes build one part one at a time under a file lock, and a build counts only once its
``built.json`` is written, after the library was made; a folder without it (a build killed half-way) is cleared
and built again. A built part is loaded straight from its library, with no build step. The first build of a
part always says so in one line: what, why, about how long, and where.

Nothing here imports torch at module level: the CUDA stand-in is built before torch is imported.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

MARKER = "built.json"
FAILED = "failed.json"  # a build that failed: not tried again for the same key (the same source, torch, compiler)
_KEEP = {".lock", MARKER}


@dataclass(frozen=True)
class Part:
    """One C++ library of opaudit's."""

    name: str  # the library's (and its Python module's) name
    source: Path
    kind: str  # its folder in the cache
    env: str  # the environment variable that names a build folder of the user's
    what: str  # in messages: "the tracer's C++ recorder"
    seconds: int  # about how long a first build takes on 2 cores
    headers: tuple[Path, ...] = ()  # the shared headers it includes (opaudit/native/)

    def build_dir(self) -> Path:
        given = os.environ.get(self.env)
        if given:
            return Path(given)
        from opaudit.tomlcache import cache_root

        base = cache_root() or Path(tempfile.gettempdir()) / f"opaudit-{os.getuid()}"
        version = (install().get("torch_version") or "none").replace("+", "_")
        return base / self.kind / f"{version}-{self.key()}"

    def key(self) -> str:
        files = (self.source, *self.headers)
        return _digest(tuple((p, p.stat().st_mtime_ns, p.stat().st_size) for p in files))

    def library(self) -> Path:
        return self.build_dir() / f"{self.name}.so"

    def built(self) -> dict[str, Any] | None:
        """What the finished build recorded (its key, the install it is for, how long it took), or None."""
        marker = self.build_dir() / MARKER
        if not marker.is_file() or not self.library().is_file():
            return None
        try:
            return json.loads(marker.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None


INCLUDE = Path(__file__).resolve().parent  # the parts' sources and the headers they share
# what the two devices over host memory share
_DEVICES = (INCLUDE / "host_device.h", INCLUDE / "host_sparse.h", INCLUDE / "dtype_bridge.h", INCLUDE / "host_alias.h",
            INCLUDE / "torch_compat.h")
STAND_IN = Part("opaudit_cuda_stand_in", INCLUDE / "cuda.cpp", "cuda-stand-in", "OPAUDIT_CUDA_STAND_IN_BUILD",
                "opaudit's CUDA stand-in", 20, _DEVICES)
TRACER = Part("opaudit_tracer", INCLUDE / "recorder.cpp", "tracer", "OPAUDIT_TRACER_BUILD",
              "the tracer's C++ recorder", 20, (INCLUDE / "torch_compat.h",))
REHEARSAL_DEVICE = Part("opaudit_rehearsal_device", INCLUDE / "device.cpp", "rehearsal-device",
                        "OPAUDIT_REHEARSAL_DEVICE_BUILD", "the rehearsal's C++ device", 25,
                        _DEVICES)
PARTS = (STAND_IN, TRACER, REHEARSAL_DEVICE)


@cache
def _digest(files: tuple[tuple[Path, int, int], ...]) -> str:
    """The key of sources as they are now (by path, mtime and size: read and hashed once per process, not on each
    of the several look-ups a load makes) and of the install they build for."""
    text = b"".join(path.read_bytes() for path, _, _ in files)
    return hashlib.sha256(text + json.dumps(install(), sort_keys=True).encode()).hexdigest()[:12]


@cache
def install() -> dict[str, str]:
    """What a build is bound to, read without importing torch (module doc)."""
    spec = importlib.util.find_spec("torch")
    root = Path(list(spec.submodule_search_locations)[0]) if spec and spec.submodule_search_locations else None
    version_file = root / "version.py" if root else None
    torch_build = ""
    torch_version = ""
    if version_file is not None and version_file.is_file():
        text = version_file.read_text(encoding="utf-8", errors="replace")
        torch_build = hashlib.sha256(text.encode()).hexdigest()[:16]
        for line in text.splitlines():
            if line.startswith("__version__"):
                torch_version = line.split("=", 1)[1].strip().strip("'\"")
    compiler = os.environ.get("CXX", "c++")  # what torch.utils.cpp_extension runs
    found = shutil.which(compiler)
    compiler_id = compiler
    if found:
        real = Path(found).resolve()
        stat = real.stat()
        compiler_id = f"{real} {stat.st_size} {int(stat.st_mtime)}"
    return {
        "torch": str(root) if root else "",
        "torch_version": torch_version,
        "torch_build": torch_build,
        "python": f"{sys.implementation.name} {sys.version_info[0]}.{sys.version_info[1]}{sys.abiflags}",
        "platform": sys.platform,
        "compiler": compiler_id,
    }


@contextmanager
def _locked(directory: Path) -> Iterator[None]:
    import fcntl

    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _first_build_line(part: Part, directory: Path) -> str:
    return (f"compiling {part.what} for this torch installation (first use here; about {part.seconds} s, once) "
            f"into {directory}")


def _say(note: Callable[[str], None] | None, text: str) -> None:
    if note is not None:
        note(text)
    else:
        print(text, file=sys.stderr, flush=True)


def build(part: Part, compile_into: Callable[[Path], Any],
          note: Callable[[str], None] | None = None) -> tuple[Path, Any]:
    """The part's library, built once (module doc) by ``compile_into(folder)``, and what that returned (None where it
    was built before); raises RuntimeError (the compiler's last lines) when it cannot be built. ``note(text)``
    hears the first-build line (default: stderr)."""
    directory = part.build_dir()
    lib = part.library()
    if part.built() is not None:
        return lib, None
    failed = directory / FAILED
    if failed.is_file():  # this torch installation cannot build it: said once, then not tried on every command
        raise RuntimeError(f"{_failure(failed)} (an earlier build failed; remove {directory} to try again)")
    with _locked(directory):
        if part.built() is not None:  # another process built it while this one waited
            return lib, None
        for stale in directory.iterdir():  # a build that never finished: start again
            if stale.name not in _KEEP:
                shutil.rmtree(stale) if stale.is_dir() else stale.unlink()
        _say(note, _first_build_line(part, directory))
        start = time.monotonic()
        try:
            made = compile_into(directory)
        except RuntimeError as e:
            failed.write_text(json.dumps({"error": str(e), "install": install()}, indent=1), encoding="utf-8")
            raise
        if not lib.is_file():
            raise RuntimeError(f"building {part.what} made no {lib.name}")
        record = {"key": part.key(), "install": install(), "seconds": round(time.monotonic() - start, 1),
                  "source": part.source.name}
        tmp = directory / f".{MARKER}.{os.getpid()}"
        tmp.write_text(json.dumps(record, indent=1, sort_keys=True), encoding="utf-8")
        os.replace(tmp, directory / MARKER)
    return lib, made


def _failure(path: Path) -> str:
    try:
        return str(json.loads(path.read_text(encoding="utf-8"))["error"])
    except (OSError, ValueError, KeyError):
        return "the build failed"


def compile_extension(part: Part, directory: Path, python_module: bool = True) -> Any:
    """torch's extension builder, its output captured (imports torch); returns the module it loaded."""
    import io
    from contextlib import redirect_stderr, redirect_stdout

    from torch.utils.cpp_extension import load as load_extension

    log = io.StringIO()
    try:
        with redirect_stdout(log), redirect_stderr(log):
            return load_extension(name=part.name, sources=[str(part.source)], build_directory=str(directory),
                                  extra_cflags=["-O2"], extra_include_paths=[str(INCLUDE)],
                                  is_python_module=python_module, verbose=False)
    except Exception as e:  # noqa: BLE001 - the compiler's failures come as several types (CalledProcessError, ...)
        tail = "\n".join((str(e).strip() or type(e).__name__).splitlines()[-6:])
        raise RuntimeError(tail) from None


def import_library(part: Part, lib: Path) -> Any:
    """The built library as a Python module, loaded from its file (torch must be imported first)."""
    spec = importlib.util.spec_from_file_location(part.name, lib)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load(part: Part, note: Callable[[str], None] | None = None) -> tuple[Any, str | None]:
    """(the loaded module, None), or (None, why not). ``note(text)`` hears of a first build, which takes a while."""
    if sys.platform != "linux":
        return None, f"{part.what} is built for Linux only"
    import torch  # noqa: F401 - the library links against the loaded torch

    try:
        lib, made = build(part, lambda d: compile_extension(part, d), note)
        return (made if made is not None else import_library(part, lib)), None
    except (RuntimeError, OSError, ImportError) as e:
        return None, f"building {part.what} failed: {e}"

