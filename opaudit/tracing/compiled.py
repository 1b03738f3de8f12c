"""``torch.compile`` while opaudit records or rehearses: the code runs eagerly, and the trace says so.

A compiled function or module runs as a graph that Dynamo captured and a backend (Inductor by default)
turned into kernels of its own: the ops a trace records and a rehearsal runs are the eager ones, which is
what a vendor's device runs without a compiler backend, and the device's own compiler (torch_npu's
torchair, Intel's Inductor for XPU) is outside what opaudit can check. Left alone, Dynamo would trace
into the recorder's dispatch mode and Inductor would compile for a device it does not know. So for the
time of a recording or a rehearsal, ``torch.compile`` gives what it always gives (an ``OptimizedModule``
with ``_orig_mod``, a wrapped function, a decorator) with Dynamo turned off (``torch._dynamo.config.disable``,
and the ``force_eager`` stance of ``torch.compiler.set_stance``, so every call runs eagerly, compiled before or
not; ``fullgraph=True`` is dropped, since it insists that a graph was captured), and
each call site is noted: a warning where it is called, and ``meta.warnings`` in the trace. A module compiled
before (a model given to ``opaudit.trace``) runs its original module directly (``_orig_mod``, with its
``fullgraph=True`` too, which would stop on a graph that Dynamo, off, never captured), and where it is first
called is noted the same way.
"""

from __future__ import annotations

import sys
import warnings
import weakref
from typing import Any

import torch

from opaudit.tracing.attribution import user_line

_active: list[EagerCompile] = []  # the entered contexts, outermost first
_saved: dict[str, Any] = {}  # what the outermost context replaced
_made_here: weakref.WeakSet = weakref.WeakSet()  # OptimizedModules torch.compile made while a context was active
_noted: weakref.WeakSet = weakref.WeakSet()  # OptimizedModules compiled before, whose first call was noted


class EagerCompile:
    """Context manager; ``sites`` lists where ``torch.compile`` was called inside it (``file:line``)."""

    def __init__(self) -> None:
        self.sites: list[str] = []

    def __enter__(self) -> EagerCompile:
        if not _active:
            _saved["compile"] = torch.compile
            torch.compile = _compile  # type: ignore[assignment]
            if "torch._dynamo" in sys.modules:  # a function or model compiled before (a model given to trace())
                _disable()
                from torch._dynamo.eval_frame import OptimizedModule

                _saved["module_call"] = OptimizedModule.__call__
                OptimizedModule.__call__ = _call_eagerly  # type: ignore[method-assign]
        _active.append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self in _active:
            _active.remove(self)
        if not _active and "compile" in _saved:
            torch.compile = _saved.pop("compile")
            if "disable" in _saved:
                from torch import _dynamo

                _dynamo.config.disable = _saved.pop("disable")
                stance = _saved.pop("stance")
                if stance is not None:
                    stance.__exit__(None, None, None)
            if "module_call" in _saved:
                from torch._dynamo.eval_frame import OptimizedModule

                OptimizedModule.__call__ = _saved.pop("module_call")  # type: ignore[method-assign]

    def warning(self) -> str | None:
        if not self.sites:
            return None
        return (f"torch.compile ran eagerly ({', '.join(dict.fromkeys(self.sites))}): the ops checked are "
                "the eager ones, what the device runs without a compiler backend; a vendor's own compiler "
                "(torch_npu's torchair, Inductor for XPU) is not checked")


def _disable() -> None:
    from torch import _dynamo

    if "disable" not in _saved:
        _saved["disable"] = _dynamo.config.disable
        # compiled code runs eagerly, its fullgraph=True no error (torch.compiler.set_stance: applied at once,
        # the stance before it back on __exit__)
        # (torch < 2.6 has no stances: Dynamo's disable flag alone makes compiled code run eagerly there)
        set_stance = getattr(torch.compiler, "set_stance", None)
        _saved["stance"] = set_stance("force_eager") if set_stance is not None else None
    _dynamo.config.disable = True


def _compile(model: Any = None, **kwargs: Any) -> Any:
    site = user_line() or "?"
    for ctx in _active:
        ctx.sites.append(site)
    _disable()
    kwargs["fullgraph"] = False
    warnings.warn(f"opaudit: torch.compile at {site} runs eagerly (Dynamo off while opaudit records or rehearses: "
                  "the eager ops are what it checks)", RuntimeWarning, stacklevel=2)
    compiled = _saved.get("compile", torch.compile)(model, **kwargs)
    if isinstance(compiled, torch.nn.Module):
        _made_here.add(compiled)
    return compiled


def _call_eagerly(self: Any, *args: Any, **kwargs: Any) -> Any:
    """OptimizedModule.__call__ while a context is active: the original module, called as it is."""
    if self not in _made_here and self not in _noted:
        _noted.add(self)
        site = user_line() or "?"
        what = f"{site}, a {type(self._orig_mod).__name__} compiled before opaudit started"
        for ctx in _active:
            ctx.sites.append(what)
        warnings.warn(f"opaudit: the compiled {type(self._orig_mod).__name__} called at {site} runs eagerly (Dynamo "
                      "off while opaudit records or rehearses: the eager ops are what it checks)", RuntimeWarning,
                      stacklevel=2)
    return self._orig_mod(*args, **kwargs)
