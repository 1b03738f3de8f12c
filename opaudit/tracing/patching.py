"""Functions replaced where they are bound, for the time of a recording, and put back exactly.

choices.py (device-selected composites) and apis.py (CompositeImplicitAutograd builtins) wrap Python
entry points of torch. A function is bound in its own module and under other names elsewhere
(``torch.nn.functional.linear`` is ``torch._C._nn.linear``), so after patching its home the loaded
modules are scanned for other references to it: once per module and process, remembering the modules
that hold one.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

# Wrappers installed for a whole simulation rather than one recording (rehearsal/device.py maps the device names
# of other types onto the simulated device in torch's factories): id of the wrapper -> (wrapper, the function it
# wraps). A recording's patches of that function (default_device.py) wrap the wrapper where it is bound instead.
standing: dict[int, tuple[Callable, Any]] = {}


def references(module: Any, originals: dict[int, Any]) -> tuple[str, ...]:
    """The names ``module`` binds to any of ``originals`` (id -> function): what ``patch_aliases`` replaces there."""
    d = getattr(module, "__dict__", None)
    if not isinstance(d, dict):
        return ()
    return tuple(name for name, value in list(d.items()) if id(value) in originals and originals[id(value)] is value)


class Patches:
    """Bindings replaced by ``patch``; ``remove`` restores each as it was (an attribute of the holder's own
    ``__dict__``, or one it inherited)."""

    def __init__(self) -> None:
        self._saved: list[tuple[Any, str, bool, Any]] = []  # (holder, attr, was in __dict__, original)

    def patch(self, holder: Any, attr: str, replacement: Any) -> None:
        d = getattr(holder, "__dict__", {})
        was_own = attr in d
        original = d[attr] if was_own else getattr(holder, attr)
        try:
            setattr(holder, attr, replacement)
        except (AttributeError, TypeError):  # a read-only holder: left alone
            return
        self._saved.append((holder, attr, was_own, original))

    def patch_aliases(self, originals: dict[int, Any], wrappers: dict[int, Callable],
                      scanned: dict[str, tuple[str, ...]], holding: dict[str, tuple[str, ...]],
                      references: Callable[[Any, dict[int, Any]], tuple[str, ...]] = references) -> None:
        """Replace the other names bound to ``originals`` (id -> function) by their ``wrappers`` in every
        loaded module; ``scanned`` and ``holding`` are the caller's caches of what each module holds, and
        ``references`` finds the names a module binds (by default every one bound to an original)."""
        if len(scanned) != len(sys.modules):
            for mod_name, module in list(sys.modules.items()):
                if mod_name not in scanned:
                    names = references(module, originals)
                    scanned[mod_name] = names
                    if names:
                        holding[mod_name] = names
        for mod_name, names in list(holding.items()):
            holder = sys.modules.get(mod_name)
            if holder is None:
                continue
            for name in names:
                value = getattr(holder, name, None)
                w = wrappers.get(id(value))
                if w is not None and originals[id(value)] is value:
                    self.patch(holder, name, w)

    def remove(self) -> None:
        for holder, attr, was_own, original in reversed(self._saved):
            try:
                if was_own:
                    setattr(holder, attr, original)
                else:
                    delattr(holder, attr)
            except (AttributeError, TypeError):  # pragma: no cover
                pass
        self._saved = []
