"""The device a trace runs on: the CPU as it is, or a device tracing receives from the layer that owns it.

On a machine without a GPU, code written for CUDA takes its CPU branch (``torch.cuda.is_available()`` is
False, ``device='cuda'`` fails), and so does what PyTorch picks per device (autocast, fused and foreach
optimizers, GradScaler). To trace the path a CUDA user's run takes, the code runs on a device that answers
as CUDA and runs CPU kernels: opaudit.standin.cuda() gives it (the C++ stand-in, else the rehearsal's
simulated device with ``cuda`` as its target), and ``opaudit.trace`` and the command line resolve the name
``cuda`` to it. tracing itself imports neither: its functions take ``device="cpu"`` or such a device, an
object with

- ``name``: the device type the code names (``cuda``), and
- ``open()``: a context manager that puts the device in place for the body and yields what the trace
  records of it (``target``: the coverage_db release whose kernels it stands for, ``name``, ``engine``).

Ops on tensors that stay on the CPU are recorded too, as ``host`` records.

The devices over host memory tell tracing what it needs of them here (they import tracing, never the other
way): ``count_wide`` registers a function that lists the calls a device ran wide (CUDA's dtypes that the CPU
kernels refuse: opaudit/native/dtype_bridge.h), and ``use_wrapper`` names the rehearsal's wrapper tensor
class while that engine is in use (the Python recorder hands its ops straight to it; the C++ recorder stands
aside).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import Any, Protocol, runtime_checkable

from opaudit.errors import InputError

NAMES = ("cuda", "cpu")  # what users name: "cuda" is given by opaudit.standin.cuda()


@runtime_checkable
class TraceDevice(Protocol):
    """A device a trace runs on (module doc)."""

    name: str

    def open(self) -> AbstractContextManager[Any]: ...


def check_device(device: str | TraceDevice) -> None:
    if isinstance(device, TraceDevice) or device == "cpu":
        return
    if device == "cuda":
        raise InputError("opaudit.tracing runs on the device it is given: pass opaudit.standin.cuda() for CUDA",
                         hint="opaudit.trace(..., device='cuda') resolves the name itself")
    raise InputError(f"device must be one of {', '.join(NAMES)}, not {device!r}",
                     hint="cuda (the default) runs the code on a simulated CUDA device; cpu on the CPU")


def device_name(device: str | TraceDevice) -> str:
    return device if isinstance(device, str) else device.name


def simulated_meta(handle: Any) -> dict[str, Any] | None:
    """What TraceMeta.simulated records of the device a trace ran on (what its ``open()`` yielded): the CUDA
    release, the device's name, and the engine (``stand-in``: the C++ device of opaudit.standin; ``simulator``:
    the rehearsal's simulated device)."""
    if handle is None:
        return None
    return {"target": handle.target, "name": handle.name, "engine": getattr(handle, "engine", "simulator")}


_wide_counters: list[Callable[[], Iterable[tuple[str, str, int]]]] = []
_wrapper: list[type] = []


def count_wide(counter: Callable[[], Iterable[tuple[str, str, int]]]) -> None:
    """Register a device's count of the calls it ran wide: ``counter()`` lists (op, c10 dtype name, calls)."""
    if counter not in _wide_counters:
        _wide_counters.append(counter)


def use_wrapper(cls: type | None) -> None:
    """The rehearsal's wrapper tensor class while its wrapper engine is in use in this process (None: not)."""
    _wrapper[:] = [cls] if cls is not None else []


def wrapper() -> type | None:
    return _wrapper[0] if _wrapper else None


def bridged_calls() -> dict[tuple[str, str], int]:
    """{(op, dtype): calls} that this process's devices over host memory (the CUDA stand-in, the rehearsal's C++
    device) ran wide because the CPU kernel refuses the dtype CUDA runs (opaudit/native/dtype_bridge.h)."""
    out: dict[tuple[str, str], int] = {}
    for counter in _wide_counters:
        for op, dtype, n in counter():
            key = (op, _C10_DTYPES.get(dtype, dtype))
            out[key] = out.get(key, 0) + n
    return out


# c10's names of the dtypes (ScalarType) as torch names them
_C10_DTYPES = {"Half": "float16", "BFloat16": "bfloat16", "Float": "float32", "Double": "float64",
               "ComplexHalf": "complex32", "ComplexFloat": "complex64", "ComplexDouble": "complex128",
               "Byte": "uint8", "Char": "int8", "Short": "int16", "Int": "int32", "Long": "int64", "Bool": "bool"}


def bridged_since(before: dict[tuple[str, str], int]) -> dict[str, dict[str, int]]:
    """What TraceMeta.simulated["bridged"] records: {op: {dtype: calls}} run wide since ``before``."""
    out: dict[str, dict[str, int]] = {}
    for (op, dtype), n in sorted(bridged_calls().items()):
        if n > before.get((op, dtype), 0):
            out.setdefault(op, {})[dtype] = n - before.get((op, dtype), 0)
    return out
