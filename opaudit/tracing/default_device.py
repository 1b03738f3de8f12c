"""The default device of a traced forward pass and loss: where the tensors they create without a device land.

``with torch.device(d)`` does it with a TorchFunctionMode, which runs Python for every torch function call, tensor
methods and attribute reads included: 9 % of a ResNet-50 forward pass on the CUDA stand-in (bench/tracer_overhead.py),
more than the recorder's own cost. While tracing, opaudit instead replaces the factories that mode fills in
(torch.utils._device._device_constructors: ``zeros``, ``arange``, ``tensor``, ...) wherever they are bound, and
``torch.get_default_device``, and puts them back afterwards (patching.py). The effect is the mode's: a factory
called without a device (or with ``device=None``) creates on ``d``; an explicit device wins; a ``torch.device``
context the traced code enters itself wins inside it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from opaudit.tracing.patching import Patches, standing

_scanned: dict[str, tuple[str, ...]] = {}  # module name -> its names bound to a factory (patching.Patches)
_holding: dict[str, tuple[str, ...]] = {}


def _inner_context() -> bool:
    """Whether the traced code entered a ``torch.device`` context of its own (a mode on the function mode stack)."""
    n = torch._C._len_torch_function_stack()
    if not n:
        return False
    from torch.utils._device import DeviceContext

    return any(isinstance(torch._C._get_function_stack_at(i), DeviceContext) for i in range(n))


class DefaultDevice(Patches):
    """``with DefaultDevice("cuda"):`` as ``with torch.device("cuda"):`` for the factories (module doc)."""

    def __init__(self, device: str | torch.device):
        super().__init__()
        self.device = torch.device(device)

    def _wrap(self, original: Callable) -> Callable:
        device = self.device

        def factory(*args: Any, **kwargs: Any) -> Any:
            if kwargs.get("device") is None and not _inner_context():
                kwargs["device"] = device
            return original(*args, **kwargs)

        factory.__name__ = getattr(original, "__name__", "factory")
        factory.__qualname__ = getattr(original, "__qualname__", factory.__name__)
        factory.__doc__ = getattr(original, "__doc__", None)
        factory.__opaudit_original__ = original  # type: ignore[attr-defined]
        return factory

    def __enter__(self) -> DefaultDevice:
        from torch.utils._device import _device_constructors

        originals = {id(f): f for f in _device_constructors()}
        for w, f in list(standing.values()):  # a simulation's wrapper of a factory stands for it (patching.py)
            if id(f) in originals:
                originals[id(w)] = w
        wrappers = {key: self._wrap(f) for key, f in originals.items()}
        self.patch_aliases(originals, wrappers, _scanned, _holding)
        default = getattr(torch, "get_default_device", None)  # (torch >= 2.3)
        if default is None:
            return self
        device = self.device

        def get_default_device() -> torch.device:
            if _inner_context():
                return default()
            return device if device.index is not None or device.type in ("cpu", "meta") else \
                torch.tensor([]).device  # (its index, as torch's own answers)

        self.patch(torch, "get_default_device", get_default_device)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.remove()


def default_device(device: str | torch.device | None) -> Any:
    """The context for ``device`` (None: nothing changes)."""
    if device is None:
        from contextlib import nullcontext

        return nullcontext()
    return DefaultDevice(device)
