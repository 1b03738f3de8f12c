"""The rehearsal's device in C++ (``device.cpp``): where it can be built, the simulated device's tensors are real
PrivateUse1 tensors over host memory, and an op the target runs natively costs no Python on its way.

The wrapper engine (tensor.SimTensor) hands every op to Python, a fixed cost of tens of microseconds per op
that dominates a model of small ops (bench/rehearsal_small_ops.py). On this engine the policy is the same
(simulator.Simulator): the first call of each op asks ``Simulator.native_plan``; an op the target runs
natively from then on runs in C++ (its CPU kernel over the device memory) and is counted there; every other
op (the target's CPU fallback, opaudit's fallback, a detour, a strict failure, a host tensor beside device
tensors) goes to ``Simulator.handle`` as on the wrapper engine, with these helpers in place of SimTensor's.

The engine of a process is chosen once, when its first simulation sets the device up (simulator.setup_device):
this one, unless ``$OPAUDIT_REHEARSAL_DEVICE=wrapper`` asks for the wrapper engine or the library cannot be built
(no C++ compiler, not Linux: ``reason()`` says why, and the wrapper engine runs). The library is compiled on first
use (about 30 s) into ``$OPAUDIT_REHEARSAL_DEVICE_BUILD``, else ``<cache>/rehearsal-device/<torch version>-<key>``
in opaudit's cache, one build per torch installation, shared by processes under a lock (opaudit.native.cbuild).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from opaudit.native import cbuild
from opaudit.tracing.device import count_wide

PART = cbuild.REHEARSAL_DEVICE
SOURCE, NAME = PART.source, PART.name
ENV_ENGINE = "OPAUDIT_REHEARSAL_DEVICE"
ENV_BUILD = PART.env


ext: Any = None  # the loaded library (its module), once this process runs on it
_reason: str | None = None  # why not, once a load was declined or failed


def wanted() -> bool:
    """Whether this process may run on the C++ engine (module doc)."""
    return os.environ.get(ENV_ENGINE, "").strip().lower() not in ("wrapper", "0", "off", "no", "false")


def build_dir() -> Path:
    return PART.build_dir()


def load(note: Callable[[str], None] | None = None) -> Any:
    """Build (once) and load the library; None where it cannot be (``reason()`` says why). ``note(text)`` hears
    of a first build, which takes a while."""
    global ext, _reason
    if ext is not None or _reason is not None:
        return ext
    ext, _reason = cbuild.load(PART, note)
    if ext is not None:
        from opaudit.matrix.cuda_dtypes import kernel_ops, wide_ops

        ext.intercept_composites()
        ext.set_kernel_ops(kernel_ops())  # CUDA's dtypes that the CPU kernels refuse run wide (native/dtype_bridge.h)
        ext.set_wide_ops(wide_ops())  # and float16 convolutions, whose CPU kernel is a slow reference path
        count_wide(_bridged)  # what a trace on this device records of it (TraceMeta.simulated["bridged"])
    return ext


def _bridged() -> list[tuple[str, str, int]]:
    return [tuple(row) for row in ext.bridged()] if ext is not None else []


def reason() -> str | None:
    return _reason


def is_device(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and t.device.type == _name()


def _name() -> str:
    from opaudit.rehearsal.tensor import state

    return state.name


def host_data(t: torch.Tensor) -> torch.Tensor:
    """A device tensor's data as a CPU tensor over the same memory (other tensors as they are)."""
    return ext.host_alias(t) if is_device(t) else t


def host_tensor(args: tuple, device: bool = False) -> torch.Tensor | None:
    """tensor.host_tensor on this engine: a CPU tensor of at least one dimension beside a device tensor."""
    name = _name()
    found = None
    for a in args:
        items = a if type(a) is list or type(a) is tuple else (a,)
        for t in items:
            if isinstance(t, torch.Tensor):
                if t.device.type == name:
                    device = True
                elif t.device.type == "cpu" and t.dim() > 0:
                    found = t
    return found if device else None


def device_index(args: Any, kwargs: dict[str, Any]) -> int:
    from opaudit.rehearsal.tensor import state

    name = state.name
    for a in (*args, *kwargs.values()):
        items = a if type(a) is list or type(a) is tuple else (a,)
        for t in items:
            if isinstance(t, torch.Tensor) and t.device.type == name:
                return t.device.index or 0
    d = kwargs.get("device")
    if d is not None:
        d = torch.device(d)
        if d.type == name and d.index is not None:
            return d.index
    return state.current


@functools.cache
def _tensor_arguments(func: Any) -> tuple[tuple[int, str], ...]:
    """(position, name) of the arguments ``func``'s schema types as a Tensor."""
    return tuple((i, a.name) for i, a in enumerate(func._schema.arguments) if isinstance(a.type, torch.TensorType))


def _number_for_tensor(func: Any, args: tuple, kwargs: dict[str, Any]) -> bool:
    """Whether a Python number stands where the schema takes a Tensor: torch hands a wrapped number (the 2 of
    ``t * 2``, which aten::mul.Tensor takes as a tensor) to Python dispatch as the number itself, which the C++
    runner cannot take; the op called from Python wraps it again, with a wrapped number's type promotion."""
    for i, name in _tensor_arguments(func):
        v = args[i] if i < len(args) else kwargs.get(name)
        if isinstance(v, (int, float, complex)):
            return True
    return False


def run_native(func: Any, args: tuple, kwargs: dict[str, Any], host: frozenset[int] = frozenset()) -> Any:
    """tensor.run_native on this engine: the op's CPU kernel over the device memory (in C++), or, where the CPU
    has no kernel for it, opaudit's reference on CPU aliases of the device tensors."""
    from opaudit.fallback.choose import cpu_impl
    from opaudit.fallback.references import RehearsalLimit
    from opaudit.rehearsal.tensor import limit_message_of

    fn = cpu_impl(func)
    if fn is None:
        raise RehearsalLimit(limit_message_of(func))
    mask = sum(1 << i for i in host)
    if fn is func and not _number_for_tensor(func, args, kwargs):
        return ext.run(func, mask, tuple(args), dict(kwargs))
    index = device_index(args, kwargs)
    name = _name()
    aliases: dict[int, torch.Tensor] = {}

    def down(x: Any) -> Any:
        if isinstance(x, torch.Tensor) and x.device.type == name:
            a = ext.host_alias(x)
            aliases[id(a)] = x
            return a
        if type(x) is list or type(x) is tuple:
            return type(x)(down(i) for i in x)
        if type(x) is torch.device and x.type == name:
            return torch.device("cpu")
        return x

    out = fn(*down(args), **{k: down(v) for k, v in kwargs.items()})

    def up(x: Any, i: int) -> Any:
        if isinstance(x, torch.Tensor):
            if id(x) in aliases:
                return aliases[id(x)]
            return x if i in host or x.device.type != "cpu" else ext.to_device(x, index)
        if type(x) is list or type(x) is tuple:
            return type(x)(up(t, i) for t in x)
        return x

    if isinstance(out, tuple):
        return tuple(up(r, i) for i, r in enumerate(out))
    return up(out, 0)
