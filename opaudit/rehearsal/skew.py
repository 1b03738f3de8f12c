"""The APIs of the installed torch that the target's PyTorch lacks, called on a rehearsal (the audit's version_skew).

A rehearsal runs the installed torch, often newer than the one a vendor's plugin pins (2.1 to 2.7): a program that
calls ``torch.nn.functional.rms_norm`` (PyTorch 2.4) runs here and stops on the device with an AttributeError
there. For the time of a simulation, each binding of such a CompositeImplicitAutograd API (tracing/apis.py: the
functions the trace records as ``api`` records, which the audit judges by the target's PyTorch) is wrapped: a call
from the program's own code is counted (statistics: status ``version_skew``) and, under ``--strict``, fails naming
the API, the target's PyTorch and the line; a call from torch's own Python (a newer torch's module calling a newer
function, where the target's torch does otherwise) is counted only. The aten ops the target's PyTorch lacks are
counted by the simulator's plan (their status is ``version_skew``), and said with these.

Only the APIs the target lacks are wrapped, so a rehearsal on a release of the installed torch's age wraps none. The
wrappers stand for the builtins while the simulation runs (tracing/patching.py ``standing``): a recording of the
same run (``run --audit-json``) wraps them in turn and records the calls as usual.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import torch

from opaudit.tracing import patching
from opaudit.tracing.apis import api_entries
from opaudit.tracing.attribution import display_path, source_locator

_scanned: dict[str, tuple[str, ...]] = {}  # module name -> its names bound to a wrapped builtin
_holding: dict[str, tuple[str, ...]] = {}


class VersionSkew(NotImplementedError):
    """An API the target's PyTorch does not have, called by the program under ``--strict``."""


def watch(sim: Any) -> Callable[[], None]:
    """Wrap, for the simulation ``sim`` (a rehearsal Simulator), the APIs its target's PyTorch lacks; returns the
    undo."""
    m = sim.matrix
    entries = api_entries()  # (before any binding is replaced: the builtins themselves)
    patch = patching.Patches()
    originals: dict[int, Any] = {}
    wrappers: dict[int, Callable[..., Any]] = {}
    for holder, attr, key in entries:
        support = m.resolve_api(key)
        if support.status != "version_skew":
            continue
        original = getattr(holder, attr)
        w = wrappers.get(id(original))
        if w is None:
            name = f"{'torch.Tensor' if holder is torch.Tensor else holder.__name__}.{attr}"
            w = wrappers[id(original)] = _wrapper(sim, original, key, name, support)
            originals[id(original)] = original
            patching.standing[id(w)] = (w, original)
        patch.patch(holder, attr, w)
    if not wrappers:
        return lambda: None
    patch.patch_aliases(originals, wrappers, _scanned, _holding)

    def undo() -> None:
        patch.remove()
        for w in wrappers.values():
            patching.standing.pop(id(w), None)
    return undo


def _wrapper(sim: Any, original: Callable[..., Any], key: str, name: str, support: Any) -> Callable[..., Any]:
    op = key.removeprefix("aten::").removesuffix(".default")
    since = f" (PyTorch {support.since} added it)" if support.since else ""
    locator = source_locator()
    own = (os.path.dirname(torch.__file__) + os.sep, os.path.dirname(os.path.dirname(__file__)) + os.sep)

    def api(*args: Any, **kwargs: Any) -> Any:
        stat = sim.stats.op(op, "native", f"not in {sim.target}'s PyTorch {sim.release.torch}{since}",
                            "version_skew")
        stat.calls += 1
        caller = _program_caller(sys._getframe(1), op, own) if sim.strict else None
        if caller is not None:
            found, _, _ = locator.locate(caller)
            line = "{}:{}".format(*_shown(locator.resolve(found))) if found is not None else None
            sim.stats.errors.append(f"{name} is not in {sim.target}'s PyTorch {sim.release.torch}"
                                    + (f" (at {line})" if line else ""))
            raise VersionSkew(f"{name} is not in PyTorch {sim.release.torch}{since} [simulated {sim.target}, which "
                              f"runs on PyTorch {sim.release.torch}: on the device this call raises AttributeError"
                              + (f"; called at {line}" if line else "") + "]")
        return original(*args, **kwargs)

    api.__name__ = getattr(original, "__name__", op)
    api.__qualname__ = getattr(original, "__qualname__", api.__name__)
    api.__doc__ = getattr(original, "__doc__", None)
    return api


def _program_caller(frame: Any, op: str, own: tuple[str, ...]) -> Any:
    """The program's frame that called the API, directly or through torch's thin Python wrappers of the same name
    (``torch.nn.functional.rms_norm`` calling ``torch.rms_norm``); None where torch's own code called it on its own
    account (a newer torch's module, whose older release does otherwise), or opaudit's."""
    while frame is not None and frame.f_code.co_filename.startswith(own):
        if frame.f_code.co_name != op:
            return None
        frame = frame.f_back
    return frame


def _shown(where: tuple[str, int]) -> tuple[str, int]:
    return display_path(where[0]), where[1]
