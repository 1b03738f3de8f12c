"""Composite ops whose kernel PyTorch picks per device (device_selected.toml), watched while tracing.

Each Python entry point of such an op (``F.scaled_dot_product_attention``, ``torch._VF.lstm``,
``F.dropout``, ...) is replaced for the duration of a recording by a thin wrapper that tells the
recorder "the ops that follow run inside this choice". Every other module-level name bound to the
same function (``from torch.nn.functional import dropout`` in some library) is replaced too, and
all of them are put back afterwards.

Why wrappers and not a TorchFunctionMode: a function mode is popped while it handles a call, so it
misses a choice made inside another Python-level torch function (``F.multi_head_attention_forward``
calling ``scaled_dot_product_attention``), and it taxes every tensor method call of the model;
wrappers see nested calls and cost nothing elsewhere.
"""

from __future__ import annotations

import functools
import importlib
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

import torch

from opaudit.data import load_toml
from opaudit.tracing.patching import Patches


@dataclass(frozen=True)
class Choice:
    op: str  # "aten::lstm"
    tensor_at: int | None = None
    if_tensor: str = "default"
    otherwise: str = "default"

    def overload(self, args: tuple[Any, ...]) -> str:
        """The full op key of this call, for example ``aten::lstm.input``."""
        if self.tensor_at is None:
            return f"{self.op}.default"
        is_tensor = len(args) > self.tensor_at and isinstance(args[self.tensor_at], torch.Tensor)
        return f"{self.op}.{self.if_tensor if is_tensor else self.otherwise}"


def _holder(dotted: str) -> tuple[Any, str] | None:
    """The object holding the last name of ``dotted`` (a module, or torch._VF), and that name."""
    module_name, _, attr = dotted.rpartition(".")
    try:
        holder = importlib.import_module(module_name)
    except ImportError:
        return None
    return (holder, attr) if hasattr(holder, attr) else None  # an entry point this torch lacks


@cache
def choice_entries() -> tuple[tuple[Any, str, Choice], ...]:
    """(holder, attribute, choice) for every entry point of the data file that this torch has."""
    out = []
    for entry in load_toml("coverage_db", "curated/device_selected.toml")["choice"]:
        ov = entry.get("overloads", {})
        choice = Choice(entry["op"], ov.get("tensor_at"), ov.get("if_tensor", "default"),
                        ov.get("otherwise", "default"))
        for dotted in entry["python"]:
            found = _holder(dotted)
            if found is not None:
                out.append((*found, choice))
    return tuple(out)


_scanned: dict[str, tuple[str, ...]] = {}  # module name -> its names bound to a watched function
_holding: dict[str, tuple[str, ...]] = {}  # the modules of _scanned that hold any


class ChoiceWatch(Patches):
    """Installs the wrappers; ``on_call(name, args, kwargs, frame, run)`` is the recorder's hook.

    Watches nest: a recording inside a rehearsal (``opaudit run --simulate --audit-json``) has both the
    recorder's hook and the simulator's (which marks the ops of a composite the target registers itself). A
    call runs every hook installed on its thread, the newest outermost, each ``run`` calling the next one
    and the last the function itself; whichever watch's wrapper a name is bound to, the same hooks run.
    """

    def __init__(self, on_call: Callable[..., Any]):
        super().__init__()
        self.on_call = on_call
        self._entry: tuple[int, Callable[..., Any]] | None = None

    @staticmethod
    def _wrap(original: Callable, choice: Choice) -> Callable:
        hit = _wrappers.get(id(original))
        if hit is not None and hit[0] is original and hit[1] == choice:
            return hit[2]

        def watched(*args, **kwargs):
            hooks = _hooks.get(threading.get_ident())
            if not hooks:
                return original(*args, **kwargs)
            if len(hooks) == 1:
                return hooks[0](choice.overload(args), args, kwargs, sys._getframe(1), original)
            return _chain(hooks, len(hooks) - 1, choice.overload(args), sys._getframe(1), original)(*args, **kwargs)

        try:
            functools.update_wrapper(watched, original)
        except (AttributeError, TypeError):  # pragma: no cover - a builtin without some attribute
            pass
        watched.__opaudit_original__ = original  # type: ignore[attr-defined]
        _wrappers[id(original)] = (original, choice, watched)
        return watched

    def install(self) -> None:
        wrappers: dict[int, Callable] = {}
        originals: dict[int, Any] = {}
        for holder, attr, choice in choice_entries():
            original = getattr(holder, attr)
            original = getattr(original, "__opaudit_original__", original)
            w = wrappers.get(id(original))
            if w is None:
                w = wrappers[id(original)] = self._wrap(original, choice)
                originals[id(original)] = original
            self.patch(holder, attr, w)
        # other names bound to the same functions, anywhere in the loaded modules (scanning all of them
        # takes ~50 ms, once per process)
        self.patch_aliases(originals, wrappers, _scanned, _holding)
        thread = threading.get_ident()
        self._entry = (thread, self.on_call)
        _hooks.setdefault(thread, []).append(self.on_call)

    def remove(self) -> None:
        if self._entry is not None:
            thread, hook = self._entry
            hooks = _hooks.get(thread, [])
            for i in range(len(hooks) - 1, -1, -1):  # this watch's own entry, wherever it is on the stack
                if hooks[i] is hook:
                    del hooks[i]
                    break
            if not hooks:
                _hooks.pop(thread, None)
            self._entry = None
        super().remove()


# thread -> the installed watches' hooks, oldest first
_hooks: dict[int, list[Callable[..., Any]]] = {}
_wrappers: dict[int, tuple[Any, Choice, Callable]] = {}  # id(function) -> (function, choice, its wrapper): made once


def _chain(hooks: list[Callable[..., Any]], i: int, overload: str, frame: Any, original: Callable) -> Callable:
    """The call of ``hooks[i]``, whose ``run`` goes on to ``hooks[i - 1]`` and, below the first, to ``original``."""
    if i < 0:
        return original
    hook = hooks[i]
    run = _chain(hooks, i - 1, overload, frame, original)

    def call(*args, **kwargs):
        return hook(overload, args, kwargs, frame, run)

    return call
