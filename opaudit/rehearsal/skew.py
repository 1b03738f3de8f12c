"""The APIs of the installed torch that the target's PyTorch lacks, called on a rehearsal (the audit's version_skew).

A rehearsal runs the installed torch, often newer than the one a vendor's plugin pins (2.1 to 2.7): a program that
calls ``torch.nn.functional.rms_norm`` (PyTorch 2.4) runs here, where on the device it stops with an AttributeError,
or takes another path where it checks for the function or for torch's version first (``hasattr(F, "rms_norm")``),
which here sees the installed torch. For the time of a simulation, each binding of such a CompositeImplicitAutograd
API (tracing/apis.py: the functions the trace records as ``api`` records, which the audit judges by the target's
PyTorch) is wrapped: its calls are counted (statistics: status ``version_skew``, with the first program line) and
said after the run, as the audit says ``version_skew`` for them: the program as run needs a newer PyTorch there,
or another path that only a run under the target's PyTorch shows. No call stops the rehearsal, ``--strict`` or not:
the program's own checks would take it elsewhere on that torch. The aten ops the target's PyTorch lacks are counted
by the simulator's plan (their status is ``version_skew``) and said apart (torch's own code calls most of them).

Only the APIs the target lacks are wrapped, so a rehearsal on a release of the installed torch's age wraps none. The
wrappers stand for the builtins while the simulation runs (tracing/patching.py ``standing``): a recording of the
same run (``run --audit-json``) wraps them in turn and records the calls as usual.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from opaudit.tracing import patching
from opaudit.tracing.apis import api_entries

_scanned: dict[str, tuple[str, ...]] = {}  # module name -> its names bound to a wrapped builtin
_holding: dict[str, tuple[str, ...]] = {}


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
    since = f"; PyTorch {support.since} added it" if support.since else ""
    reason = f"{name}, not in {sim.target}'s PyTorch {sim.release.torch}{since}"

    def api(*args: Any, **kwargs: Any) -> Any:
        stat = sim.stats.op(op, "native", reason, "version_skew")
        stat.api = True
        stat.calls += 1
        return original(*args, **kwargs)

    api.__name__ = getattr(original, "__name__", op)
    api.__qualname__ = getattr(original, "__qualname__", api.__name__)
    api.__doc__ = getattr(original, "__doc__", None)
    return api
