"""What ``import opaudit`` shows of tracing: ``opaudit.trace`` and ``opaudit.trace_script`` with the device named.

opaudit.tracing runs code on the CPU or on a device it is given (opaudit.tracing.device); this layer, above
the devices, resolves the names users pass: ``"cuda"`` is opaudit.standin.cuda() (CUDA on the CPU-only build:
the C++ stand-in, else the rehearsal's simulated device), ``"cpu"`` the CPU as it is.

>>> t = opaudit.trace(model, x, train=True, device="cuda")   # the path a CUDA user's run takes  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

from opaudit import tracing
from opaudit.tracing.device import TraceDevice, check_device
from opaudit.tracing.schema import Trace
from opaudit.tracing.script import trace_script as _trace_script


def device(name: str | TraceDevice) -> str | TraceDevice:
    """The device ``name`` stands for: ``"cuda"`` -> opaudit.standin.cuda(), ``"cpu"`` and a TraceDevice as given."""
    if name == "cuda":
        from opaudit import standin

        return standin.cuda()
    check_device(name)
    return name


def trace(model: Any, inputs: Any = None, *, device: str | TraceDevice = "cpu", **options: Any) -> Trace:
    return tracing.trace(model, inputs, device=_device(device), **options)


def trace_script(target: str, argv: list[str] | None = None, *, device: str | TraceDevice = "cuda",
                 **options: Any) -> Trace:
    return _trace_script(target, argv, device=_device(device), **options)


_device = device
_NAMED = '\n    ``device``: ``"{}"`` (the default), ``"{}"`` or a TraceDevice (resolved by opaudit.api.device).\n'
trace.__doc__ = (tracing.trace.__doc__ or "") + _NAMED.format("cpu", "cuda")
trace_script.__doc__ = (_trace_script.__doc__ or "") + _NAMED.format("cuda", "cpu")
