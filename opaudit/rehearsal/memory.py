"""The simulated device's memory, counted as its storages are created and freed.

A simulated tensor's data is a CPU tensor (tensor.SimTensor); what the device holds is the storages under
its live tensors, each storage once however many tensors view it. ``track`` is called for every new
simulated tensor: the first one on a storage counts the storage's bytes on that tensor's device index and
holds a weak reference to the storage, whose callback takes the bytes off when the storage is freed (torch
keeps a storage's Python object for as long as the storage lives, so the callback comes exactly then, and
the storage's ``id`` stays its key until it does). An op that resizes a storage in place (``resize_``,
``out=`` arguments) reports it through ``resized``.

So the current and peak bytes are exact at any moment, and a query is a lookup, where walking the live
objects took 45 ms a query (device.SimDevice answers ``torch.npu.memory_allocated`` and friends from here).

Reserved memory follows a caching allocator, as a device's is: freed blocks stay reserved for reuse, so
``reserved`` is the most that was allocated since the last ``empty_cache`` (which gives back what is not
in use). Block rounding and fragmentation are not modelled: reserved is the least a caching allocator would
hold, and always at least what is allocated.

On the rehearsal's C++ device (native.py) the device's own allocator keeps the same counters, and the
queries below read them there (``native``, set while that engine runs).

Weak reference callbacks run wherever a storage happens to be freed (inside an op, in the garbage
collector): they only move the freed storage from ``_held`` to ``_freed``, and the counters take it off
under the lock, before any allocation or query (``_settle``), so no update is lost and the peak never counts
a storage that was already gone.
"""

from __future__ import annotations

import threading
import weakref
from collections import deque
from dataclasses import dataclass
from typing import Any


@dataclass
class Counts:
    """The memory counters of one device index, in bytes (the names of CUDA's memory_stats in comments)."""

    allocated: int = 0  # live storages (allocated_bytes.all.current)
    peak: int = 0  # the most allocated since the last reset_peak (allocated_bytes.all.peak)
    reserved: int = 0  # held by the caching allocator (reserved_bytes.all.current)
    peak_reserved: int = 0  # (reserved_bytes.all.peak)
    allocations: int = 0  # live storages, counted (allocation.all.current)
    allocated_total: int = 0  # all bytes ever allocated (allocated_bytes.all.allocated)
    freed_total: int = 0  # all bytes ever freed (allocated_bytes.all.freed)

    def add(self, n: int) -> None:
        self.allocated += n
        self.allocated_total += n
        if self.allocated > self.peak:
            self.peak = self.allocated
        if self.allocated > self.reserved:
            self.reserved = self.allocated
            if self.reserved > self.peak_reserved:
                self.peak_reserved = self.reserved

    def take(self, n: int) -> None:
        self.allocated -= n
        self.freed_total += n


class _Held(weakref.ref):
    """The weak reference to a counted storage, with what it counts."""

    __slots__ = ("key", "nbytes", "index")
    key: int
    nbytes: int
    index: int


_held: dict[int, _Held] = {}  # id(storage) -> its reference, for every counted storage alive
_freed: deque[_Held] = deque()  # storages freed, not yet taken off the counters
_counts: dict[int, Counts] = {}  # device index -> its counters
_lock = threading.Lock()
native: Any = None  # the C++ device's library, while the rehearsal runs on it (its allocator counts)


def _gone(ref: Any) -> None:
    # the weak reference callback: no lock here (it may run inside _settle's own critical section)
    _held.pop(ref.key, None)
    _freed.append(ref)


def _counter(index: int) -> Counts:
    c = _counts.get(index)
    if c is None:
        c = _counts[index] = Counts()
    return c


def _settle() -> None:
    """Take the storages freed since the last call off the counters (with the lock held)."""
    while _freed:
        ref = _freed.popleft()
        c = _counter(ref.index)
        c.take(ref.nbytes)
        c.allocations -= 1


def track(storage: Any, index: int) -> None:
    """Count ``storage`` (an UntypedStorage, the data of a new simulated tensor on device ``index``), unless
    it is counted already (a view, or another tensor on the same storage)."""
    key = id(storage)
    if key in _held:
        return
    ref = _Held(storage, _gone)
    ref.key, ref.nbytes, ref.index = key, storage.nbytes(), index
    with _lock:
        if _freed:
            _settle()
        if key in _held:  # another thread counted it meanwhile
            return
        _held[key] = ref
        c = _counter(index)
        c.allocations += 1
        c.add(ref.nbytes)


def resized(storage: Any) -> None:
    """``storage`` may have changed size in place (resize_): the counters follow."""
    ref = _held.get(id(storage))
    if ref is None:
        return
    n = storage.nbytes()
    if n == ref.nbytes:
        return
    with _lock:
        _settle()
        c = _counter(ref.index)
        if n > ref.nbytes:
            c.add(n - ref.nbytes)
        else:
            c.take(ref.nbytes - n)
        ref.nbytes = n


def counts(index: int) -> Counts:
    """The counters of device ``index``, up to date (a copy)."""
    if native is not None:
        fields = ("allocated", "peak", "reserved", "peak_reserved", "allocations", "allocated_total", "freed_total")
        return Counts(**dict(zip(fields, native.memory(index), strict=True)))
    with _lock:
        _settle()
        c = _counter(index)
        return Counts(**vars(c))


def reset_peak(index: int) -> None:
    """The peaks start again from now (reset_peak_memory_stats, reset_max_memory_allocated)."""
    if native is not None:
        native.reset_peak(index)
        return
    with _lock:
        _settle()
        c = _counter(index)
        c.peak = c.allocated
        c.peak_reserved = c.reserved


def empty_cache() -> None:
    """The caching allocator gives back every block not in use, on every device index."""
    if native is not None:
        native.empty_cache()
        return
    with _lock:
        _settle()
        for c in _counts.values():
            c.reserved = c.allocated
