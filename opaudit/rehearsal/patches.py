"""Attributes set for the time of a simulation and set back after it (device.py, checkpoint.py)."""

from __future__ import annotations

from typing import Any

_MISSING = object()


class Patches:
    """Attributes set for the simulation; ``undo`` sets them back (or removes those that were not the
    holder's own)."""

    def __init__(self) -> None:
        self._old: list[tuple[Any, str, Any]] = []

    def __call__(self, holder: Any, attr: str, value: Any) -> None:
        # an attribute the holder inherits (Tensor.cuda from TensorBase) is removed again, not copied into it
        own = getattr(holder, "__dict__", None)
        inherited = own is not None and attr not in own
        self._old.append((holder, attr, _MISSING if inherited else getattr(holder, attr, _MISSING)))
        setattr(holder, attr, value)

    def undo(self) -> None:
        for holder, attr, value in reversed(self._old):
            if value is _MISSING:
                delattr(holder, attr)
            else:
                setattr(holder, attr, value)
        self._old.clear()
