"""Checkpoints in a rehearsal, as on the device: ``torch.save`` / ``torch.load`` of simulated tensors.

On a plugin's device, ``torch.save`` tags each storage with its device (``npu:0``) and ``torch.load``
puts it back there, unless ``map_location`` says otherwise (a string, a ``torch.device``, a dict of
tags, a callable). A simulated device has no storage of its own (its tensors are wrappers around CPU
tensors, tensor.SimTensor), and a storage allocated on it crashes the process. So, during a
simulation:

- ``torch.save`` writes a simulated tensor's CPU data under the tag the device would write: the
  target's device type and the tensor's index (``npu:0``; ``xpu:0`` for the ``xpusim`` stand-in), and
  keeps ``nn.Parameter`` as a parameter. The file is what the device writes: outside a rehearsal, it
  loads with ``map_location="cpu"``, as a real device's checkpoint does on a machine without the device.
- ``torch.load`` resolves each storage's place as torch does (``map_location`` applied to the tag, the
  device's index checked against the device count), mapped device types (``cuda`` when an unported script
  is rehearsed) naming the simulated device; a storage whose place is the simulated device stays a CPU
  storage, marked, and the tensors rebuilt on it become simulated tensors of that index. ``weights_only``
  loads take the same path (only functions torch allows are called).
- allocating a storage on the simulated device in any other way (``torch.UntypedStorage(n, device=...)``,
  ``storage.to(device)`` outside a load) stops with a RehearsalLimit, never a crash.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
import torch._utils
import torch.serialization
import torch.storage

from opaudit.fallback.references import RehearsalLimit
from opaudit.rehearsal.patches import Patches
from opaudit.rehearsal.tensor import SimTensor, saving, state

if TYPE_CHECKING:
    from opaudit.rehearsal.simulator import Simulator

ANY = -1  # a device string without an index: the current device
_loading: list[dict[int, tuple[Any, int]]] = []  # per torch.load in progress: id(CPU storage) -> (it, index)


class _Places:
    """Device strings that name the simulated device: its name, the target's device type, mapped types."""

    def __init__(self, sim: Simulator):
        self.name = sim.name
        self.tag = sim.device_type  # what a checkpoint written on the device says (npu, xpu, ...)
        types = {sim.name, sim.device_type, *sim.aliases}
        self._pattern = re.compile(r"^(?:" + "|".join(map(re.escape, sorted(types))) + r")(?::(\d+))?$")

    def index(self, location: Any) -> int | None:
        """The device index a location names on the simulated device (ANY: none given), or None when it names
        another place."""
        if isinstance(location, torch.device):
            location = str(location)
        if not isinstance(location, str):
            return None
        m = self._pattern.match(location)
        if m is None:
            return None
        return int(m.group(1)) if m.group(1) is not None else ANY


def enter(sim: Simulator) -> Callable[[], None]:
    """Install the checkpoint behaviour for ``sim`` (module doc); returns the undo."""
    places = _Places(sim)
    patch = Patches()

    def check(index: int) -> int:
        return _existing(sim, index)

    original_tag = torch.serialization.location_tag

    def location_tag(storage: Any) -> str:
        if saving and getattr(storage, "device", None) is not None and storage.device.type == "cpu":
            index = saving[-1].get(storage.data_ptr())
            if index is not None:
                return f"{places.tag}:{index}"
        return original_tag(storage)

    original_restore = torch.serialization.default_restore_location

    def default_restore_location(storage: Any, location: str) -> Any:
        index = places.index(location)
        if index is None:
            return original_restore(storage, location)
        return _mark(storage, check(index))

    original_to = torch.storage._to

    def storage_to(self: Any, device: torch.device, non_blocking: bool = False) -> Any:
        index = places.index(device)
        if index is None:
            return original_to(self, device, non_blocking)
        if not _loading:
            raise RehearsalLimit(f"a storage on the simulated {sim.name} device ({device}): the rehearsal keeps "
                                 "device data in tensors only. This is a limit of the CPU rehearsal, not of "
                                 f"{sim.target}")
        cpu = self if self.device.type == "cpu" else original_to(self, torch.device("cpu"), non_blocking)
        return _mark(cpu, check(index))

    untyped = torch.UntypedStorage
    original_new = untyped.__new__

    def new_storage(cls: Any, *args: Any, **kwargs: Any) -> Any:
        device = kwargs.get("device")
        if device is not None and places.index(device) is not None:
            raise RehearsalLimit(f"torch.UntypedStorage on the simulated {sim.name} device: the rehearsal keeps "
                                 "device data in tensors only. This is a limit of the CPU rehearsal, not of "
                                 f"{sim.target}")
        return original_new(cls, *args, **kwargs)

    original_rebuild = torch._utils._rebuild_tensor

    def rebuild_tensor(storage: Any, storage_offset: int, size: Any, stride: Any) -> torch.Tensor:
        t = original_rebuild(storage, storage_offset, size, stride)
        if _loading:
            mark = _loading[-1].get(id(storage._untyped_storage))
            if mark is not None:
                return SimTensor(t, mark[1])
        return t

    def bracketed(fn: Any, stack: list[Any]) -> Any:
        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            stack.append({})
            try:
                return fn(*args, **kwargs)
            finally:
                stack.pop()
        return call

    patch(torch.serialization, "location_tag", location_tag)
    patch(torch.serialization, "default_restore_location", default_restore_location)
    patch(torch.storage, "_to", storage_to)
    patch(untyped, "__new__", new_storage)
    patch(torch._utils, "_rebuild_tensor", rebuild_tensor)
    # each name wraps what it holds now: a wrapper the program (or a library) put on torch.save before the
    # rehearsal began still runs, as it does on the device
    for holder in (torch, torch.serialization):
        patch(holder, "save", bracketed(holder.save, saving))
        patch(holder, "load", bracketed(holder.load, _loading))
    return patch.undo


def enter_native(sim: Simulator) -> Callable[[], None]:
    """The same on the rehearsal's C++ device (native.py), whose storages are device storages: ``torch.save``
    tags them with the target's device type (``xpu:0`` for ``xpusim``), and ``torch.load`` puts a storage whose
    place names the simulated device (a mapped type included) there, its index checked. Returns the undo."""
    places = _Places(sim)
    patch = Patches()
    original_tag = torch.serialization.location_tag

    def location_tag(storage: Any) -> str:
        device = getattr(storage, "device", None)
        if device is not None and device.type == sim.name:
            return f"{places.tag}:{device.index or 0}"
        return original_tag(storage)

    original_restore = torch.serialization.default_restore_location

    def default_restore_location(storage: Any, location: str) -> Any:
        index = places.index(location)
        if index is None:
            return original_restore(storage, location)
        return storage.to(device=torch.device(sim.name, _existing(sim, index)))

    patch(torch.serialization, "location_tag", location_tag)
    patch(torch.serialization, "default_restore_location", default_restore_location)
    return patch.undo


def _existing(sim: Simulator, index: int) -> int:
    """The device index a storage is restored to (ANY: the current one), which the device count must have, as
    torch.load checks on a device."""
    i = state.current if index == ANY else index
    if i >= state.count:
        raise RuntimeError(f"Attempting to deserialize object on {sim.device_type.upper()} device {i} but "
                           f"torch.{sim.name}.device_count() is {state.count}. Please use torch.load with "
                           "map_location to map your storages to an existing device.")
    return i


def _mark(storage: Any, index: int) -> Any:
    """``storage`` (a CPU storage) restored to the simulated device ``index``: the tensors built on it in this
    load become simulated tensors."""
    if _loading:
        _loading[-1][id(storage)] = (storage, index)
    return storage
