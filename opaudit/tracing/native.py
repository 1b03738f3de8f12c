"""The tracer's recorder in C++ (``recorder.cpp``): where it can be built, a recording counts the ops a backend
receives on the dispatcher's ``Fake`` key, below autograd, with no Python call per op.

The Python recorder (recorder._OpRecorder, a TorchDispatchMode) costs a Python round trip per op, about 13 µs,
which is most of the tracer's overhead on a model's forward pass (bench/tracer_overhead.py). Both engines build
the same records (tests/tracing/test_recorder_engines.py). The Python one records where the C++ one cannot or
must not:

- ``$OPAUDIT_TRACER=python`` asks for it, or the library cannot be built (no C++ compiler, not Linux);
- a TorchDispatchMode is active when the recording starts (FakeTensorMode: ``fake`` mode), or the rehearsal's
  wrapper device is in use: a Python-key tensor's op never reaches the key below it, and the ops its Python
  kernel runs would be counted instead;
- another recording is running in C++ (one per process).

A tensor subclass with ``__torch_dispatch__`` met during a C++ recording (a float8 or sharded tensor) is recorded
by the ops its kernel runs on plain tensors, which are the ops the device receives; the Python engine records
the subclass's op instead.

The library is compiled on first use (about 30 s) into ``$OPAUDIT_TRACER_BUILD``, else
``<cache>/tracer/<torch version>-<key>`` in opaudit's cache, one build per torch installation (opaudit.native.cbuild).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from opaudit.native import cbuild
from opaudit.tracing.device import wrapper as wrapper_device

PART = cbuild.TRACER
SOURCE, NAME = PART.source, PART.name
ENV_ENGINE = "OPAUDIT_TRACER"
ENV_BUILD = PART.env


_ext: Any = None
_reason: str | None = None
running = False  # a recording runs in C++ now


def build_dir() -> Path:
    return PART.build_dir()


def wanted() -> bool:
    return os.environ.get(ENV_ENGINE, "").strip().lower() not in ("python", "0", "off", "no", "false")


def load(note: Callable[[str], None] | None = None) -> Any:
    """Build (once) and load the library; None where it cannot be (``reason()`` says why)."""
    global _ext, _reason
    if _ext is None and _reason is None:
        _ext, _reason = cbuild.load(PART, note)
    return _ext


def reason() -> str | None:
    return _reason


def usable(note: Callable[[str], None] | None = None) -> tuple[Any, str | None]:
    """(the library, None) when a recording starting now may run in C++, else (None, why not)."""
    if not wanted():
        return None, f"${ENV_ENGINE} asks for the Python recorder"
    if running:
        return None, "another recording runs in C++"
    if torch._C._len_torch_dispatch_stack() > 0:
        return None, "a TorchDispatchMode is active (fake tensors record with the Python recorder)"
    if wrapper_device() is not None:
        return None, "the rehearsal's wrapper device is in use"
    ext = load(note)
    return (ext, None) if ext is not None else (None, _reason)


@contextmanager
def paused() -> Iterator[None]:
    """Ops run inside are not recorded by a recording running in C++ on this thread (the Python recorder's
    counterpart: torch.utils._python_dispatch._disable_current_modes)."""
    if not running:
        yield
        return
    before = _ext.pause(True)
    try:
        yield
    finally:
        _ext.pause(before)
