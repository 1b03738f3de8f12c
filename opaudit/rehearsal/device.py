"""The simulated device as a script sees it: ``torch.npu`` and friends, collectives, autocast, and other
device types mapped onto it.

- ``SimDevice``: the device module a plugin registers (``torch.npu``): availability, device count,
  current device, ``set_device``, ``synchronize``, memory queries, RNG seeding, events and streams
  (host-timed), ``amp.autocast`` / ``amp.GradScaler``, ``get_amp_supported_dtype``.
- the target's collective backend name (``hccl``, ``cncl``, ... from rules/targets/) is registered for a
  single process: ``init_process_group("hccl")`` gets a process group of one rank, whose collectives
  are the identity they are for one rank. More ranks are refused.
- autocast on the device follows CUDA's policy, as the plugins copy it (trace.autocast).
- ``torch.Generator(device=...)`` for the device: a host generator, as the device's random ops draw from one.
- device types the script names that are not the simulated one (``cuda`` when an unported script is
  rehearsed; a built-in type such as ``xpu``, which cannot be given to PrivateUse1) are mapped onto it:
  device arguments of every torch entry point that takes one (``_map_arguments``), ``torch.device``
  contexts and ``set_default_device``, ``Tensor.cuda()``, ``torch.cuda.*``,
  ``torch.autocast("cuda")``, ``GradScaler("cuda")`` and ``init_process_group("nccl")``.
"""

from __future__ import annotations

import functools
import importlib.abc
import inspect
import os
import re
import time
import types
import warnings
from collections.abc import Callable
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import torch

from opaudit import torchcompat
from opaudit.fallback.stats import warn_at_user
from opaudit.matrix import amp as autocast_rules
from opaudit.rehearsal import checkpoint, memory
from opaudit.rehearsal.patches import Patches
from opaudit.rehearsal.tensor import SimTensor, state
from opaudit.torchcompat import TensorBase
from opaudit.tracing.autocast import legacy_autocast

if TYPE_CHECKING:
    from opaudit.rehearsal.simulator import Simulator

TOTAL_MEMORY = 64 * 2**30  # what memory queries report as the device's size (no real device to ask)


def _index(device: Any) -> int:
    """The device index a memory query names (an int, ``"npu:1"``, a torch.device; None: the current one)."""
    if device is None:
        return state.current
    if isinstance(device, int):
        return device
    index = torch.device(device).index
    return state.current if index is None else index


def _select(index: int) -> None:
    """Make ``index`` the current device (on the C++ device too: its allocations land there)."""
    state.current = index
    if memory.native is not None:
        memory.native.set_device(index)


def _stream_bases() -> tuple[type, type]:
    """torch < 2.5: Dynamo's device interface wants a device module's Event and Stream to derive from the abstract
    bases of torch._streambase; later releases keep the names as deprecated subclasses of torch.Event and
    torch.Stream, which a host-timed event must not be."""
    try:
        from torch import _streambase
    except ImportError:
        return object, object
    event = getattr(torch, "Event", None)  # (torch >= 2.4; 2.2 and 2.3 have torch._streambase without it)
    if event is not None and issubclass(_streambase._EventBase, event):
        return object, object
    return _streambase._EventBase, _streambase._StreamBase


_EventBase, _StreamBase = _stream_bases()


class _Event(_EventBase):  # type: ignore[misc,valid-type,unused-ignore]
    """A device event timed on the host (the simulated device runs synchronously)."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        self.t: float | None = None

    def record(self, stream: Any = None) -> None:
        self.t = time.perf_counter()

    def synchronize(self) -> None:
        pass

    def query(self) -> bool:
        return True

    def wait(self, stream: Any = None) -> None:
        pass

    def elapsed_time(self, end: _Event) -> float:
        if self.t is None or end.t is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return (end.t - self.t) * 1000.0


class _Stream(_StreamBase):  # type: ignore[misc,valid-type,unused-ignore]
    def __init__(self, device: Any = None, priority: int = 0, **kwargs: Any):
        self.device = device

    def __eq__(self, other: object) -> bool:  # one stream per device: the default one
        return isinstance(other, _Stream) and other.device == self.device

    def __hash__(self) -> int:
        return hash(("stream", str(self.device)))

    def synchronize(self) -> None:
        pass

    def query(self) -> bool:
        return True

    def wait_stream(self, other: Any) -> None:
        pass

    def wait_event(self, event: Any) -> None:
        pass

    def record_event(self, event: Any = None) -> _Event:
        e = event or _Event()
        e.record()
        return e

    def __enter__(self) -> _Stream:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass


class SimDevice(types.ModuleType):
    """``torch.<device>`` of the simulated device (module doc)."""

    Event = _Event
    Stream = _Stream

    def __init__(self, name: str):
        super().__init__(f"torch.{name}")
        self.__doc__ = f"the simulated {name} device (opaudit.rehearsal.simulator)"
        self.device_name = name
        self.amp = types.SimpleNamespace(autocast=self._autocast, GradScaler=self._grad_scaler)
        if not torchcompat.GRAD_SCALER_BY_DEVICE:  # (torch < 2.3: the plugin's own class, rehearsal/amp.py)
            from opaudit.rehearsal.amp import GradScaler

            self.amp.GradScaler = GradScaler

    # availability and devices
    def is_available(self) -> bool:
        return True

    def is_initialized(self) -> bool:
        return True

    def init(self) -> None:
        pass

    def _lazy_init(self) -> None:
        pass

    def _is_in_bad_fork(self) -> bool:
        return False

    def device_count(self) -> int:
        return state.count

    def current_device(self) -> int:
        return state.current

    def set_device(self, device: Any) -> None:
        index = device if isinstance(device, int) else torch.device(device).index
        if index is None:
            return
        if not 0 <= index < state.count:
            raise RuntimeError(f"{self.device_name}: invalid device ordinal {index} (device count {state.count})")
        _select(index)

    @contextmanager
    def device(self, device: Any):
        before = state.current
        self.set_device(device)
        try:
            yield
        finally:
            _select(before)

    def is_current_stream_capturing(self) -> bool:
        return False  # no CUDA graphs (torch < 2.5's optimizers ask before every step)

    def synchronize(self, device: Any = None) -> None:
        pass

    def get_device_name(self, device: Any = None) -> str:
        return f"{self.device_name} (simulated by opaudit)"

    def get_device_properties(self, device: Any = None) -> Any:
        return types.SimpleNamespace(name=self.get_device_name(), total_memory=TOTAL_MEMORY,
                                     multi_processor_count=1, type=self.device_name)

    def get_device_capability(self, device: Any = None) -> None:
        return None

    # memory: counted as storages are created and freed (memory.py)
    def memory_allocated(self, device: Any = None) -> int:
        return memory.counts(_index(device)).allocated

    def max_memory_allocated(self, device: Any = None) -> int:
        return memory.counts(_index(device)).peak

    def memory_reserved(self, device: Any = None) -> int:
        return memory.counts(_index(device)).reserved

    def max_memory_reserved(self, device: Any = None) -> int:
        return memory.counts(_index(device)).peak_reserved

    def reset_peak_memory_stats(self, device: Any = None) -> None:
        memory.reset_peak(_index(device))

    reset_max_memory_allocated = reset_peak_memory_stats
    reset_max_memory_cached = reset_peak_memory_stats

    def empty_cache(self) -> None:
        memory.empty_cache()

    def mem_get_info(self, device: Any = None) -> tuple[int, int]:
        return TOTAL_MEMORY - memory.counts(_index(device)).reserved, TOTAL_MEMORY

    def memory_stats(self, device: Any = None) -> dict[str, int]:
        c = memory.counts(_index(device))
        return {"allocated_bytes.all.current": c.allocated, "allocated_bytes.all.peak": c.peak,
                "allocated_bytes.all.allocated": c.allocated_total, "allocated_bytes.all.freed": c.freed_total,
                "active_bytes.all.current": c.allocated, "active_bytes.all.peak": c.peak,
                "reserved_bytes.all.current": c.reserved, "reserved_bytes.all.peak": c.peak_reserved,
                "allocation.all.current": c.allocations}

    # random numbers: the data lives on the CPU, so does its generator
    # (torch.manual_seed calls these too: they seed the CPU generator alone, never torch.manual_seed)
    def manual_seed(self, seed: int) -> None:
        torch.default_generator.manual_seed(int(seed))

    def manual_seed_all(self, seed: int) -> None:
        torch.default_generator.manual_seed(int(seed))

    def seed(self) -> None:
        torch.default_generator.seed()

    seed_all = seed

    def initial_seed(self) -> int:
        return torch.initial_seed()

    def get_rng_state(self, device: Any = None) -> torch.Tensor:
        return torch.get_rng_state()

    def set_rng_state(self, state: torch.Tensor, device: Any = None) -> None:
        torch.set_rng_state(state)

    def get_rng_state_all(self) -> list[torch.Tensor]:
        return [torch.get_rng_state()]

    def set_rng_state_all(self, states: list[torch.Tensor]) -> None:
        torch.set_rng_state(states[0])

    # streams
    def current_stream(self, device: Any = None) -> _Stream:
        return _Stream(device)

    default_stream = current_stream

    def stream(self, stream: Any = None) -> Any:
        return stream if stream is not None else _Stream()

    def set_stream(self, stream: Any) -> None:
        pass

    # mixed precision
    def get_amp_supported_dtype(self) -> list[torch.dtype]:
        return [torch.float16, torch.bfloat16]

    def is_bf16_supported(self, including_emulation: bool = True) -> bool:
        return True

    def _autocast(self, enabled: bool = True, dtype: torch.dtype | None = None, cache_enabled: bool = True):
        # (where the program names no dtype, the device's default: torch.cuda.amp.autocast() ported is
        # torch.amp.autocast(device), CUDA's float16 on CUDA; a recording sees what it named)
        return legacy_autocast(self.device_name, dtype, default=self.get_autocast_dtype(), enabled=enabled,
                               cache_enabled=cache_enabled)

    def _grad_scaler(self, *args: Any, **kwargs: Any) -> Any:
        return torch.amp.GradScaler(self.device_name, *args, **kwargs)

    # the device's autocast state, which torch.autocast of torch < 2.4 asks the device module for (a plugin answers
    # from its C++: native/device.cpp); from 2.4 on, torch's own functions of a device type
    def is_autocast_enabled(self) -> bool:
        if torchcompat.AUTOCAST_BY_DEVICE_TYPE:
            return torch.is_autocast_enabled(self.device_name)
        return _native_autocast().autocast_enabled()

    def set_autocast_enabled(self, enabled: bool) -> None:
        if torchcompat.AUTOCAST_BY_DEVICE_TYPE:
            torch.set_autocast_enabled(self.device_name, enabled)
        else:
            _native_autocast().set_autocast_enabled(bool(enabled))

    def get_autocast_dtype(self) -> torch.dtype:
        if torchcompat.AUTOCAST_BY_DEVICE_TYPE:
            return torch.get_autocast_dtype(self.device_name)
        return _native_autocast().autocast_dtype()

    def set_autocast_dtype(self, dtype: torch.dtype) -> None:
        if torchcompat.AUTOCAST_BY_DEVICE_TYPE:
            torch.set_autocast_dtype(self.device_name, dtype)
        else:
            _native_autocast().set_autocast_dtype(dtype)


def _native_autocast() -> Any:
    """The C++ device, which holds the autocast state of the device on torch < 2.4 (the wrapper engine does not run
    there: simulator.setup_device)."""
    from opaudit.rehearsal import native

    assert native.ext is not None, "the simulated device's autocast state needs its C++ device on torch < 2.4"
    return native.ext


# -- entering a simulation: each step returns how to undo it ---------------------------------------------

def enter(sim: Simulator) -> list[Callable[[], None]]:
    """Set up the device for ``sim`` (module doc); returns the undo of each step."""
    undo: list[Callable[[], None]] = []
    wrapper = sim.runs_on == "wrapper"  # (the C++ device's tensors are device tensors to torch: native.py)
    undo.append(_foreach(sim) if wrapper else _foreach_native(sim))
    undo.append(_autocast(sim))
    undo.append(_newer_amp(sim))
    undo.append(collectives(sim))
    undo.append(_plugin_module(sim))
    undo.append(_surface(sim))
    undo.append(_pinning())
    undo.append(_generators(sim))
    undo.append(_legacy_types(sim))
    if wrapper:  # (the C++ device says its tensors and the CPU's are compatible: native/device.cpp)
        undo.append(_swap_parameters())
    undo.append(_backward_on_the_calling_thread())
    undo.append(_raise_after_backward(sim))
    undo.append(checkpoint.enter(sim) if wrapper else checkpoint.enter_native(sim))
    if sim.release.vendor == "cuda":
        undo.append(_cuda_build(sim))
    if sim.aliases:
        undo.append(_map_devices(sim))
    return undo


def cuda_build(torch_version: str) -> dict[str, Any]:
    """What a CUDA build of ``torch_version`` answers (coverage_db/curated/cuda_build.toml): ``gpu`` and the
    wheel's ``cuda``, ``cudnn``, ``nccl`` versions (the newest entry at or below that torch)."""
    from opaudit.data import load_toml
    from opaudit.matrix.torchops import version_key

    data = load_toml("coverage_db", "curated/cuda_build.toml")
    wanted = version_key(torch_version)
    listed = sorted(data["wheel"], key=version_key)
    fitting = [v for v in listed if version_key(v) <= wanted] or listed[:1]
    return {"gpu": data["gpu"], **data["wheel"][fitting[-1]]}


def _cuda_build(sim: Simulator) -> Callable[[], None]:
    return answer_as_cuda_build(sim.release.torch, getattr(torch, sim.name))


def answer_as_cuda_build(torch_version: str, module: Any) -> Callable[[], None]:
    """A simulated CUDA device (``module``: its device module) answers as PyPI's CUDA wheel of
    ``torch_version`` on its GPU (cuda_build): the versions of CUDA, cuDNN and NCCL, and the GPU's name,
    capability and size. Returns the undo."""
    import torch.backends.cudnn as cudnn

    build = cuda_build(torch_version)
    gpu = build["gpu"]
    major, minor = gpu["capability"]
    name = f"{gpu['name']} (simulated by opaudit)"
    properties = types.SimpleNamespace(
        name=name, major=major, minor=minor, total_memory=gpu["total_memory"],
        multi_processor_count=gpu["multi_processor_count"], is_integrated=0, is_multi_gpu_board=0, type="cuda")
    cudnn_parts = [int(p) for p in build["cudnn"].split(".")]
    # cuDNN's own encoding: major * 1000 + minor * 100 + patch before 9, major * 10000 + ... from 9
    cudnn_number = cudnn_parts[0] * (10000 if cudnn_parts[0] >= 9 else 1000) + cudnn_parts[1] * 100 + cudnn_parts[2]
    nccl = tuple(int(p) for p in build["nccl"].split("."))
    patch = Patches()
    patch(torch.version, "cuda", build["cuda"])
    patch(cudnn, "is_available", lambda: True)
    patch(cudnn, "version", lambda: cudnn_number)
    # but no tensor is one cuDNN takes: the device runs PyTorch's native kernels (an RNN's flatten_parameters
    # asks before it calls cuDNN; torch's own answer would warn "compiled without cuDNN" on every call)
    patch(cudnn, "is_acceptable", lambda tensor: False)
    import torch.cuda.nccl as nccl_module

    patch(nccl_module, "version", lambda: nccl)
    patch(module, "get_device_name", lambda device=None: name)
    patch(module, "get_device_properties", lambda device=None: properties)
    patch(module, "get_device_capability", lambda device=None: (major, minor))
    # torch's autocast checks no dtype for CUDA (autocast(dtype=torch.float32) runs, with no warning), where
    # it holds another device to its module's list
    patch(module, "get_amp_supported_dtype", lambda: [torch.float16, torch.bfloat16, torch.float32, torch.float64])
    return patch.undo


def _plugin_module(sim: Simulator) -> Callable[[], None]:
    """``import torch_npu`` works in the rehearsal, in any module of the program (a package's modules, a
    module run with ``-m``): a finder on ``sys.meta_path`` answers the import of the target's plugin with a
    stand-in whose device module is the simulated one, where the real plugin is not installed. A library's
    probe for the plugin (``importlib.util.find_spec("torch_npu")``, as transformers makes) finds it only
    once the program has imported it, as on a machine where the program's own import decides: before that,
    a library would take vendor-specific paths the stand-in does not have. ``Simulator.plugin_import``
    imports it at the start."""
    import importlib.util
    import sys

    name = sim.release.import_name
    if not name or name in sys.modules or importlib.util.find_spec(name) is not None:
        return lambda: None
    finder = _StandIn(name, sim)
    sys.meta_path.insert(0, finder)
    if sim.plugin_import:
        sys.modules[name] = finder.module

    def undo() -> None:
        if finder in sys.meta_path:
            sys.meta_path.remove(finder)
        if sys.modules.get(name) is finder.module:
            del sys.modules[name]
    return undo


class _StandIn(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """The meta-path finder and loader of a plugin's stand-in (_plugin_module)."""

    def __init__(self, name: str, sim: Simulator):
        import importlib.machinery

        self.name = name
        self.module = types.ModuleType(name, f"a stand-in for {name} in a simulation of {sim.target} (opaudit)")
        self.module.__spec__ = importlib.machinery.ModuleSpec(name, self)
        setattr(self.module, sim.device_type, getattr(torch, sim.name))
        self.module.__version__ = sim.release.name  # type: ignore[attr-defined]

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != self.name or not _importing():
            return None
        return self.module.__spec__

    def create_module(self, spec: Any) -> types.ModuleType:
        return self.module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


def _importing() -> bool:
    """Whether the finder is asked by an import statement (or importlib.import_module), not by a probe
    (importlib.util.find_spec): the import machinery's frame is the finder's caller's caller."""
    import sys

    frame = sys._getframe(3)  # _importing <- find_spec <- importlib._bootstrap._find_spec <- its caller
    return frame.f_code.co_name == "_find_and_load_unlocked"


def _surface(sim: Simulator) -> Callable[[], None]:
    """Stand-ins for the target's runtime names that ``fix`` writes and the device module does not answer
    (torch.npu.matmul.allow_hf32, torch_npu.npu.mstx.range_push: rehearsal/surface.py, from rules/)."""
    from opaudit.lint.catalogue import load_target, target_names
    from opaudit.rehearsal.surface import install

    if sim.release.vendor not in target_names():
        return lambda: None
    patch = Patches()
    import sys

    stand_ins = {f.name: f.module for f in sys.meta_path if isinstance(f, _StandIn)}
    target = load_target(sim.release.vendor)
    install(target, sim.name, patch, stand_ins)
    module = getattr(torch, sim.name, None)
    if target.device_properties and isinstance(module, SimDevice):  # the fields the plugin's properties answer
        fields = target.device_properties
        patch(module, "get_device_properties", lambda device=None: _properties(module, fields))
    return patch.undo


def _properties(module: SimDevice, fields: tuple[str, ...]) -> Any:
    """Device properties with the fields the target's plugin answers (rules/targets/ device_properties), as
    ``fix`` ports a probe only where they hold every field it reads; numbers no rehearsal can know are 0."""
    known = {"name": module.get_device_name(), "total_memory": TOTAL_MEMORY, "multi_processor_count": 1}
    return types.SimpleNamespace(**{f: known.get(f, 0) for f in fields}, type=module.device_name)


def _legacy_types(sim: Simulator) -> Callable[[], None]:
    """Typed tensor classes (rehearsal/legacy.py): the device's own (``torch.npu.FloatTensor``) where its plugin
    has them, and ``torch.cuda.FloatTensor`` and the others: on the device where ``cuda`` is mapped onto it and
    the plugin has typed classes; else refused in one line naming the target and the lint finding."""
    from opaudit.matrix.vendors import vendors
    from opaudit.rehearsal import legacy

    known = vendors().get(sim.release.vendor)
    has = bool(known and known.legacy_types)
    matches = {sim.name, *sim.aliases}
    modules: dict[str, tuple[Any, dict[str, legacy.LegacyType]]] = {}
    if has and sim.device_type != "cuda":
        modules[sim.device_type] = (getattr(torch, sim.name), legacy.classes(sim.device_type, sim.name, sim.target,
                                                                             matches))
    if "cuda" in sim.aliases:
        runs_on = sim.name if has else None
        why = f"{sim.device_type} has no typed tensor classes"
    else:
        runs_on, why = None, "there is no CUDA (the port runs with CUDA absent)"
    modules["cuda"] = (torch.cuda, legacy.classes("cuda", runs_on, sim.target, matches, why))
    return legacy.install(modules, {sim.name: sim.device_type} if sim.name != sim.device_type else None)


def _swap_parameters() -> Callable[[], None]:
    """On the wrapper engine, ``model.to("npu")`` keeps each Parameter object and shared weights shared (GPT-2's
    lm_head is its wte), as on a plugin's device: a CPU tensor and a wrapper tensor are no compatible shallow-copy
    types, so Module._apply would make a new Parameter per module; swapping the tensors in place keeps them. (The
    C++ device says its tensors and the CPU's are compatible, as a plugin does, and Module._apply sets each
    Parameter's data as on a GPU: native/device.cpp, compatible_shallow_copy.) Only
    in ``_apply``: the same switch makes ``load_state_dict`` swap too, which fails on modules that keep
    weak references to their parameters (an LSTM's flat weights), where the device copies in place.

    The swap makes each new Parameter with ``detach().requires_grad_()``, which a device whose tensors are
    compatible types (a GPU, a plugin's device) never runs: those ops run with the dispatch and function
    modes set aside and the C++ recorder paused, so a trace records what ``model.to()`` does on a device (the
    copies), not the swap."""
    from torch.utils._python_dispatch import _disable_current_modes

    from opaudit.tracing.native import paused

    future = torch.__future__
    original = torch.nn.Module._apply
    parameter = torch.nn.Parameter
    make = parameter.__new__

    def quiet_new(cls: type, data: Any = None, requires_grad: bool = True) -> Any:
        with _disable_current_modes(), paused(), torch._C.DisableTorchFunction():
            return make(cls, data, requires_grad)

    def _apply(self: torch.nn.Module, fn: Any, recurse: bool = True) -> Any:
        before = future.get_swap_module_params_on_conversion()
        outermost = parameter.__new__ is make
        future.set_swap_module_params_on_conversion(True)
        if outermost:
            parameter.__new__ = staticmethod(quiet_new)  # type: ignore[assignment]
        try:
            return original(self, fn, recurse)
        finally:
            future.set_swap_module_params_on_conversion(before)
            if outermost:
                parameter.__new__ = make  # type: ignore[method-assign]

    patch = Patches()
    patch(torch.nn.Module, "_apply", _apply)
    return patch.undo


def _backward_on_the_calling_thread() -> Callable[[], None]:
    """Backward runs on the thread that calls it, as on the CPU. The autograd engine sizes its per-device
    worker queues once per process, at its first backward, from the device types registered then: after a
    CPU backward earlier in the process, a simulated device has no queue, and the engine's own assert
    fails ("device.index() < device_ready_queues_.size()"). Its threads would also only hand each op back
    to Python, which holds one lock."""
    before = torch._C._is_multithreading_enabled()
    torch._C._set_multithreading_enabled(False)
    return lambda: torch._C._set_multithreading_enabled(before)


def _raise_after_backward(sim: Simulator) -> Callable[[], None]:
    """A strict failure met inside the autograd engine (Simulator._fail) is raised by the backward call
    that ran the engine, once it returns: ``loss.backward()`` (which calls torch.autograd.backward) and
    torch.autograd.grad fail on the user's line with the target's error, as on the device."""
    def raising(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            finally:
                error, sim.pending = sim.pending, None
                if error is not None:
                    raise error
        return call

    patch = Patches()
    patch(torch.autograd, "backward", raising(torch.autograd.backward))
    patch(torch.autograd, "grad", raising(torch.autograd.grad))
    return patch.undo


def _pin_memory(self: torch.Tensor, device: Any = None) -> torch.Tensor:
    return self


def _pinning() -> Callable[[], None]:
    """Pinned host memory (``pin_memory=True`` in a DataLoader) needs the device's pinned allocator, which
    a Python-registered device cannot provide; the host is the device here, so pinning is the identity.
    (One function for every simulation: a recording's set-up reuses its last plan while the bindings it
    found are the same objects, tracing/apis.py.)"""
    patch = Patches()
    patch(torch.Tensor, "pin_memory", _pin_memory)
    return patch.undo


class _GeneratorType(type(torch._C.Generator)):  # type: ignore[misc]  # (torch's OpaqueBaseMeta)
    """torch.Generator's stand-in answers isinstance and issubclass as torch's own class does."""

    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, torch._C.Generator)

    def __subclasscheck__(cls, sub: type) -> bool:
        return issubclass(sub, torch._C.Generator)


def _generators(sim: Simulator) -> Callable[[], None]:
    """``torch.Generator(device=...)`` naming the simulated device (or a type mapped onto it, ``"cuda"``) makes a
    generator, as a plugin's device does (``torch.Generator(device="npu")``; diffusers' pipelines and samplers
    seed with one): a host generator, since the device's random ops run their CPU kernels, which draw from one
    (its ``.device`` says ``cpu``). Other devices are torch's own."""
    base = torch._C.Generator
    names = {sim.name, *sim.aliases}

    class Generator(base, metaclass=_GeneratorType):  # type: ignore[misc,valid-type]
        def __new__(cls, device: Any = None) -> Any:
            if device is None:
                return base()
            d = torch.device(device) if not isinstance(device, torch.device) else device
            return base("cpu") if d.type in names else base(device)

    Generator.__module__, Generator.__qualname__, Generator.__doc__ = "torch", "Generator", base.__doc__
    patch = Patches()
    patch(torch, "Generator", Generator)
    return patch.undo


def _foreach(sim: Simulator) -> Callable[[], None]:
    """torch.optim and torch.nn.utils (clip_grad_norm_, clip_grad_value_) take their foreach path only for
    plain tensors (each keeps its own list of types): let them take it on the device when the target's
    device type is one they take it on (audit.FOREACH_DEVICES, and every PrivateUse1 device)."""
    from torch.optim import optimizer
    from torch.utils import _foreach_utils

    from opaudit.auditing import FOREACH_DEVICES

    if sim.release.device_type not in FOREACH_DEVICES and sim.release.dispatch_key != "PrivateUse1":
        return lambda: None
    lists: list[list[Any]] = [optimizer._foreach_supported_types, _foreach_utils._foreach_supported_types]
    for types_ in lists:
        types_.append(SimTensor)

    def undo() -> None:
        for types_ in lists:
            if SimTensor in types_:
                types_.remove(SimTensor)
    return undo


def _foreach_native(sim: Simulator) -> Callable[[], None]:
    """On the C++ device, torch.optim and torch.nn.utils take their foreach path for any PrivateUse1 device (its name
    is in _get_foreach_kernels_supported_devices); a target whose device type torch does not take it on (mps) keeps
    the single-tensor path, as on that device."""
    from torch.optim import optimizer, swa_utils
    from torch.utils import _foreach_utils

    from opaudit.auditing import FOREACH_DEVICES

    if sim.release.device_type in FOREACH_DEVICES or sim.release.dispatch_key == "PrivateUse1":
        return lambda: None
    original = _foreach_utils._get_foreach_kernels_supported_devices
    name = sim.name

    def supported() -> list[str]:
        return [d for d in original() if d != name]

    patch = Patches()
    for holder in (_foreach_utils, optimizer, swa_utils):
        if getattr(holder, "_get_foreach_kernels_supported_devices", None) is original:
            patch(holder, "_get_foreach_kernels_supported_devices", supported)
    return patch.undo


def _autocast(sim: Simulator) -> Callable[[], None]:
    """CUDA's autocast policy on the device, in the device type's default dtype where the program names none (the
    target's, where the data knows it: xla's bfloat16; matrix/amp.py), as the audit judges a region naming none."""
    from opaudit.tracing.autocast import CudaAutocast

    name = sim.name
    policy = CudaAutocast(torch.float16, key="AutocastPrivateUse1", low=lambda: torchcompat.autocast_dtype(name))
    policy.install()  # (its cast cache is cleared with torch's: trace.autocast)
    before = torchcompat.autocast_dtype(name)
    default = autocast_rules.default(sim.device_type, sim.release.dispatch_key, sim.release.torch)
    if default is not None:
        torchcompat.set_autocast_dtype(name, getattr(torch, default))

    def undo() -> None:
        policy.uninstall()
        torchcompat.set_autocast_dtype(name, before)
    return undo


def _newer_amp(sim: Simulator) -> Callable[[], None]:
    """On torch < 2.4, the autocast functions of a device type, and on torch < 2.3 ``torch.amp.GradScaler(device)``,
    for the simulated device (and the device types mapped onto it): what a port for a newer torch calls
    (rehearsal/amp.py)."""
    if torchcompat.AUTOCAST_BY_DEVICE_TYPE:
        return lambda: None
    from opaudit.rehearsal import amp

    patch = Patches()
    aliases = frozenset(sim.aliases)
    for attr, fn in amp.device_type_autocast(sim.name, aliases).items():
        patch(torch, attr, fn)
    if not torchcompat.GRAD_SCALER_BY_DEVICE:
        scaler = type("GradScaler", (amp.DeviceTypeGradScaler,), {"names": aliases, "__module__": "torch.amp"})
        patch(torch.amp, "GradScaler", scaler)
    return patch.undo


def _backend_names(sim: Simulator) -> list[str]:
    from opaudit.lint.catalogue import load_target, target_names

    names = []
    vendor = sim.release.vendor
    if vendor in target_names() and load_target(vendor).dist_backend:
        names.append(load_target(vendor).dist_backend)
    if not names:  # no collective backend name known for the target (rules/targets/): one of opaudit's own
        names.append("opaudit")
    if "cuda" in sim.aliases:
        names.append("nccl")
    return names


def _Done(result: Any) -> Any:  # noqa: N802 (it stands where a Work class is returned)
    """A collective of one rank: a Work already complete, its result the tensors it was given. Made in C++ from a
    completed future (``_create_work_from_future``): C++ callers (DDP's parameter check and its broadcasts) wait
    on it there, and before torch 2.6 a Work subclassed in Python lost its Python half once returned to C++, so
    that their wait never ended."""
    future: torch.futures.Future[Any] = torch.futures.Future()
    future.set_result(result)
    return torch._C._distributed_c10d._create_work_from_future(future)  # type: ignore[attr-defined]


_ONE_RANK_BACKEND = types.SimpleNamespace(supports_splitting=False, supports_coalescing=False,
                                          supports_time_estimate=False)


def _one_rank_group(name: str) -> Any:
    """A process group of one rank for the target's backend name: every collective is what it is for one
    rank (all_reduce, broadcast, barrier: nothing to do; gathers and scatters: a copy)."""
    import torch.distributed as dist

    base: Any = dist.ProcessGroup  # (its stubs know only C++'s overloads)

    class OneRank(base):
        def __init__(self, rank: int, size: int):
            super().__init__(rank, size)

        def getBackendName(self) -> str:  # noqa: N802 (the name c10d calls)
            return name

        def _get_backend(self, device: Any) -> Any:
            # c10d asks a group for its backend of a device (``init_process_group(device_id=...)`` to connect
            # eagerly, coalescing, splitting): this group is its own backend on every device, with none of
            # those extras
            return _ONE_RANK_BACKEND

        def allreduce(self, tensors: Any, opts: Any = None) -> Any:
            return _Done(tensors)

        allreduce_coalesced = allreduce
        broadcast = allreduce
        reduce = allreduce

        def barrier(self, opts: Any = None) -> Any:
            return _Done(None)

        monitored_barrier = barrier

        def allgather(self, outputs: Any, inputs: Any, opts: Any = None) -> Any:
            for out, inp in zip(outputs, inputs, strict=True):
                out[0].copy_(inp)
            return _Done(outputs)

        def _allgather_base(self, output: Any, inp: Any, opts: Any = None) -> Any:
            output.copy_(inp.reshape(output.shape))
            return _Done(output)

        def reduce_scatter(self, outputs: Any, inputs: Any, opts: Any = None) -> Any:
            for out, inp in zip(outputs, inputs, strict=True):
                out.copy_(inp[0])
            return _Done(outputs)

        def _reduce_scatter_base(self, output: Any, inp: Any, opts: Any = None) -> Any:
            output.copy_(inp.reshape(output.shape))
            return _Done(output)

        def alltoall_base(self, output: Any, inp: Any, *args: Any) -> Any:
            output.copy_(inp)
            return _Done(output)

    return OneRank


def collectives(sim: Simulator) -> Callable[[], None]:
    """The target's collective backend as a process group of one rank (module doc; opaudit.standin uses it
    for ``nccl``); returns the undo."""
    if not torch.distributed.is_available():
        return lambda: None
    import torch.distributed as dist

    def create(store: Any, rank: int, size: int, timeout: Any) -> Any:
        if size != 1:
            raise RuntimeError(f"a simulated {sim.target} runs one process: world size {size} cannot be "
                               "rehearsed (run the script with one process)")
        return _one_rank_group(names[0])(rank, size)

    names = _backend_names(sim)
    rename = _renamer(sim)
    renamed: dict[str, str] = {}
    first = names[0]
    if first != "nccl" and hasattr(dist.Backend, first.upper()) and not getattr(
            dist, f"is_{first}_available", lambda: True)():
        # a backend torch knows by name that this build lacks (xccl without XPU): the one-rank group takes
        # opaudit's own name, and the target's name is mapped onto it
        renamed[first] = "opaudit"
        names = ["opaudit", *names]
    for name in names:
        if name == "nccl" or hasattr(dist.Backend, name.upper()):
            continue
        dist.Backend.register_backend(name, create, devices=[sim.name, "cpu"])
    original = dist.init_process_group
    # (no timeout given: the installed torch's default: a timedelta on torch 2.1, which refuses None; None on 2.3)
    default_timeout = inspect.signature(original).parameters["timeout"].default

    def init_process_group(backend: Any = None, init_method: Any = None, timeout: Any = None, world_size: int = -1,
                           rank: int = -1, store: Any = None, *args: Any, **kwargs: Any) -> Any:
        if isinstance(backend, str):
            backend = _backend_string(backend)
        if "device_id" in kwargs:  # (a group bound to its device: torch.device("cuda", rank))
            kwargs["device_id"] = rename(kwargs["device_id"])
        if store is None and init_method is None and "MASTER_ADDR" not in os.environ:
            store = dist.HashStore()
            world_size = 1 if world_size == -1 else world_size
            rank = 0 if rank == -1 else rank
        return original(backend, init_method, default_timeout if timeout is None else timeout, world_size, rank,
                        store, *args, **kwargs)

    def _backend_name(backend: str) -> str:
        if backend.lower() == "nccl" and "cuda" in sim.aliases:
            backend = names[0]
        return renamed.get(backend.lower(), backend)

    def _backend_string(backend: str) -> str:
        """``nccl``, or c10d's per-device form (``cuda:nccl,cpu:gloo``): a mapped device type names the
        simulated device and nccl the target's backend, as in a plain name."""
        if ":" not in backend:
            return _backend_name(backend)
        pairs = []
        for pair in backend.split(","):
            device, _, backend_name = pair.partition(":")
            device = sim.name if device.strip().lower() in sim.aliases else device.strip()
            pairs.append(f"{device}:{_backend_name(backend_name.strip())}")
        return ",".join(pairs)

    patch = Patches()
    patch(dist, "init_process_group", init_process_group)
    if sim.release.vendor == "cuda":
        # simulated CUDA itself (a trace's device): the one-rank group stands in for NCCL and answers to its name,
        # as a GPU's group does (``if dist.get_backend() == "nccl"`` takes the GPU's branch)
        get_backend = dist.get_backend

        def as_nccl(group: Any = None) -> str:
            backend = get_backend(group)
            return re.sub(rf"(?<![\w-]){re.escape(names[0])}(?![\w-])", "nccl", backend)

        patch(dist, "get_backend", as_nccl)
    return patch.undo


# -- other device types onto the simulated one ---------------------------------------------------------


def _renamer(sim: Simulator) -> Callable[[Any], Any]:
    """A device argument naming a mapped type (``"cuda:1"``, ``torch.device("cuda")``) -> the simulated device's
    name for it; anything else as it is."""
    aliases, name = sim.aliases, sim.name
    if not aliases:
        return lambda x: x
    pattern = re.compile(r"^(?:" + "|".join(map(re.escape, sorted(aliases))) + r")(:\d+)?$")

    def rename(x: Any) -> Any:
        t = type(x)
        if t is str:
            found = pattern.match(x)
            return name + (found.group(1) or "") if found else x
        if t is torch.device and x.type in aliases:
            return torch.device(name, x.index)
        return x
    return rename


# aten schemas with a Device argument whose Python bindings do not place tensors: TorchScript's device comparisons
# (eq.device, ne.device), the Generator class, and pin_memory (_pinning's own wrapper)
_NOT_PLACING = frozenset({"eq", "ne", "Generator", "pin_memory", "_pin_memory"})


@functools.cache
def _placing_entries() -> tuple[tuple[Any, str], ...]:
    """(holder, attribute) of every Python entry point of torch that takes a device: the bindings of aten ops
    with a ``Device`` argument (factories, ``*_like``, ``Tensor.new_*``, ``Tensor.to``, ...), the factories a
    ``torch.device`` context fills in (torch.utils._device), the legacy ``Tensor.new`` and
    ``torch._C._nn._parse_to`` (``nn.Module.to``)."""
    c = torch._C
    holders: list[tuple[Any, Any]] = [(torch, vars(torch)), (torch.Tensor, vars(TensorBase))]
    holders += [(getattr(c, n), vars(getattr(c, n))) for n in ("_nn", "_linalg", "_fft", "_special", "_sparse",
                                                                 "_nested") if hasattr(c, n)]
    names = {s.name.removeprefix("aten::") for s in torch._C._jit_get_all_schemas()
             if s.name.startswith("aten::") and any("Device" in str(a.type) for a in s.arguments)}
    from torch.utils._device import _device_constructors

    names |= {getattr(f, "__name__", "") for f in _device_constructors()}
    out = [(holder, n) for n in sorted(names - _NOT_PLACING) for holder, own in holders if n in own]
    return (*out, (torch.Tensor, "new"), (c._nn, "_parse_to"))


# The renamer of the simulation running now (None between simulations): the wrappers of _map_arguments are made
# once per process and read it, so every simulation binds the same objects (a recording's set-up reuses its last
# plan while the bindings it found are unchanged, tracing/apis.py) and finds the other names they are bound to from
# one scan of the loaded modules (patching.Patches.patch_aliases) instead of one per simulation.
_renaming: list[Callable[[Any], Any] | None] = [None]
_mapped: dict[int, tuple[Any, Callable[..., Any]]] = {}  # id(entry point) -> (entry point, its wrapper)
_mapped_scanned: dict[str, tuple[str, ...]] = {}
_mapped_holding: dict[str, tuple[str, ...]] = {}


def _mapping_wrapper(original: Callable[..., Any]) -> Callable[..., Any]:
    hit = _mapped.get(id(original))
    if hit is not None and hit[0] is original:
        return hit[1]
    renaming = _renaming

    def mapped(*args: Any, **kwargs: Any) -> Any:
        m = renaming[0]
        if m is None:  # no simulation (a module that bound the wrapper while one ran)
            return original(*args, **kwargs)
        for a in args:
            t = type(a)
            if t is str or t is torch.device:
                args = tuple([m(a) for a in args])
                break
        if kwargs:
            for v in kwargs.values():
                t = type(v)
                if t is str or t is torch.device:
                    kwargs = {k: m(v) for k, v in kwargs.items()}
                    break
        return original(*args, **kwargs)

    for attr in ("__module__", "__name__", "__qualname__", "__doc__"):  # (not __wrapped__: inspect would
        try:                                                           # report the builtin's missing signature)
            setattr(mapped, attr, getattr(original, attr))
        except (AttributeError, TypeError):  # pragma: no cover
            pass
    _mapped[id(original)] = (original, mapped)
    return mapped


def _map_arguments(sim: Simulator) -> Callable[[], None]:
    """Device arguments naming a mapped type (``"cuda:1"``, ``torch.device("cuda")``) name the simulated device
    instead, in every entry point of torch that takes a device (_placing_entries) wherever it is bound, and in
    ``torch.device`` contexts and ``torch.set_default_device`` (their DeviceContext).

    Wrapping those entry points costs a Python call on the calls that may name a device, where a
    TorchFunctionMode would cost one on every torch call and Tensor method (a fifth of a ResNet-50 forward
    pass on the simulated device, bench/tracer_overhead.py)."""
    from torch.utils._device import DeviceContext, _device_constructors

    from opaudit.tracing import patching

    outer = _renaming[0]
    m = _renaming[0] = _renamer(sim)
    _device_constructors()  # (cached on first use: torch's set of the originals, before any is replaced)
    patch = patching.Patches()
    originals: dict[int, Any] = {}
    wrappers: dict[int, Callable[..., Any]] = {}
    for holder, attr in _placing_entries():
        original = getattr(holder, attr)
        w = wrappers.get(id(original))
        if w is None:
            w = wrappers[id(original)] = _mapping_wrapper(original)
            originals[id(original)] = original
            patching.standing[id(w)] = (w, original)
        patch.patch(holder, attr, w)
    # (from torch import zeros; torch.fft.fftfreq)
    patch.patch_aliases(originals, wrappers, _mapped_scanned, _mapped_holding)
    context_init = DeviceContext.__init__

    def device_context_init(self: Any, device: Any) -> None:
        context_init(self, m(device))

    patch.patch(DeviceContext, "__init__", device_context_init)
    storage_new = torch.UntypedStorage.__new__  # (torch._C.StorageBase's: storage.to(device=...) makes one)

    def untyped_storage_new(cls: type, *args: Any, **kwargs: Any) -> Any:
        if "device" in kwargs:
            kwargs["device"] = m(kwargs["device"])
        return storage_new(cls, *args, **kwargs)

    patch.patch(torch.UntypedStorage, "__new__", untyped_storage_new)

    def undo() -> None:
        patch.remove()
        _renaming[0] = outer
        for w in wrappers.values():
            patching.standing.pop(id(w), None)
    return undo


def _map_devices(sim: Simulator) -> Callable[[], None]:
    module = getattr(torch, sim.name)  # the simulated device's module (simulator.setup_device)
    patch = Patches()
    name = sim.name

    def to_device(self: torch.Tensor, device: Any = None, non_blocking: bool = False, **kwargs: Any) -> torch.Tensor:
        index = device if isinstance(device, int) else (torch.device(device).index if device is not None else None)
        return self.to(torch.device(name, index if index is not None else module.current_device()),
                       non_blocking=non_blocking)

    for alias in sorted(sim.aliases):
        if hasattr(torch.Tensor, alias):
            patch(torch.Tensor, alias, to_device)
        if hasattr(torch.nn.Module, alias):
            patch(torch.nn.Module, alias, lambda self, device=None: self._apply(lambda t: to_device(t, device)))
        holder = getattr(torch, alias, None)
        if isinstance(holder, types.ModuleType):
            for attr in dir(SimDevice):
                if attr.startswith("__") or attr in ("Event", "Stream"):
                    continue
                if hasattr(holder, attr):  # a function of its own per place (torch._dynamo keys its rules by object)
                    patch(holder, attr, _forward(getattr(module, attr)))
            for attr in ("Event", "Stream"):
                if hasattr(holder, attr):
                    patch(holder, attr, getattr(SimDevice, attr))
            amp = getattr(holder, "amp", None)
            if isinstance(amp, types.ModuleType):
                patch(amp, "autocast", module.amp.autocast)
                patch(amp, "GradScaler", module.amp.GradScaler)
    # autocast's state is read and set by device type with builtins no function mode sees
    # (torch.is_autocast_enabled("cuda"), as torch.utils.checkpoint and model code ask it)
    if torchcompat.AUTOCAST_BY_DEVICE_TYPE:
        for fn_name in ("is_autocast_enabled", "get_autocast_dtype", "set_autocast_enabled", "set_autocast_dtype"):
            patch(torch, fn_name, _by_device(getattr(torch, fn_name), sim.aliases, name))
        for holder in (torch.amp, torch.amp.autocast_mode):
            patch(holder, "is_autocast_available", _by_device(torch.amp.autocast_mode.is_autocast_available,
                                                              sim.aliases, name))
    autocast_cls = torch.amp.autocast_mode.autocast
    original_init = autocast_cls.__init__

    def autocast_init(self: Any, device_type: str, *args: Any, **kwargs: Any) -> None:
        if device_type not in sim.aliases:
            original_init(self, device_type, *args, **kwargs)
            return
        # the target's release answers the call as the audit judges it (matrix/amp.py): no autocast for its device
        # type raises, a dtype it does not list turns autocast off
        release = (sim.device_type, sim.release.dispatch_key, sim.release.torch)
        gone = autocast_rules.missing(*release)
        if gone:
            raise RuntimeError(f"User specified an unsupported autocast device_type '{sim.device_type}' "
                               f"[simulated {sim.target}: {gone}]")
        off = autocast_rules.disabled(*release, kwargs.get("dtype", args[0] if args else None))
        # torch warns at its caller's line (this wrapper): the warning goes to the user's line instead
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            original_init(self, name, *args, **kwargs)
        for w in caught:
            warn_at_user(str(w.message), w.category)
        if off and getattr(self, "_enabled", False):
            self._enabled = False
            warn_at_user(f"In {sim.device_type} autocast, but the target dtype is not supported. Disabling autocast "
                         f"[simulated {sim.target}: {off}]", UserWarning)

    patch(autocast_cls, "__init__", autocast_init)
    if torchcompat.GRAD_SCALER_BY_DEVICE:  # (before torch 2.3, torch.cuda.amp.GradScaler is the device's above)
        scaler_cls = torch.amp.GradScaler
        scaler_init = scaler_cls.__init__

        def grad_scaler_init(self: Any, device: str = "cuda", *args: Any, **kwargs: Any) -> None:
            scaler_init(self, name if device in sim.aliases else device, *args, **kwargs)

        patch(scaler_cls, "__init__", grad_scaler_init)
    arguments = _map_arguments(sim)

    def undo() -> None:
        arguments()
        patch.undo()
    return undo


def _by_device(fn: Callable[..., Any], aliases: frozenset[str], name: str) -> Callable[..., Any]:
    """``fn`` with a first argument naming a mapped device type naming the simulated one; with no argument,
    ``torch.is_autocast_enabled()`` asks about CUDA's autocast (its legacy form)."""
    def call(*args: Any, **kwargs: Any) -> Any:
        if args:
            first = args[0]
            if isinstance(first, torch.device):
                first = first.type
            if isinstance(first, str) and first in aliases:
                args = (name, *args[1:])
        elif not kwargs and "cuda" in aliases and fn is torch.is_autocast_enabled:
            args = (name,)
        return fn(*args, **kwargs)
    call.__name__ = call.__qualname__ = getattr(fn, "__name__", "call")
    call.__doc__ = fn.__doc__
    return call


def _forward(fn: Callable[..., Any]) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)
    return call
