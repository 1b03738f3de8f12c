"""CUDA for the CPU-only PyTorch build, in C++: the device ``opaudit trace`` and ``opaudit scan`` run CUDA code
on where they can.

``cuda.cpp`` registers what a CUDA build's libtorch_cuda registers and the CPU build lacks: an allocator, a
device guard and the CUDA hooks for ``DeviceType::CUDA``, DDP's timer, and kernels on the CUDA dispatch key
(factories, views, copies, and one boxed kernel for every other op that runs the op's CPU kernel over the
device's memory). Tensors on it are real CUDA tensors (``is_cuda``, the AutocastCUDA and AutogradCUDA keys),
so PyTorch takes its CUDA paths itself: CUDA's autocast policy, the fused and foreach optimizers, GradScaler,
``model.to("cuda")`` keeping each Parameter. Against the rehearsal's simulated device (Python wrapper tensors,
opaudit.rehearsal.simulator, still the device of a trace wherever this one is not in place) an op costs no
Python on its way, and the records are those of a GPU, save where it cannot be one (no cuDNN: batch norm
takes ``native_batch_norm``; no pinned memory; a one-rank process group in place of NCCL).

torch asks for its CUDA hooks once, while ``import torch`` runs, so the library is loaded before that::

    from opaudit import standin
    standin.prepare()          # compiles once per torch version (about 20 s), then loads it
    import torch
    torch.ones(2, device="cuda").is_cuda   # True (opaudit's trace installs torch.cuda's answers)

``prepare`` says why not, and changes nothing, where it cannot: torch is already imported, no C++ compiler or
ninja, ``OPAUDIT_CUDA_STAND_IN=0``, or a torch with CUDA of its own. The command line calls it before it
imports torch; the library API uses it when the caller did. The build folder is
``$OPAUDIT_CUDA_STAND_IN_BUILD``, else ``<cache>/cuda-stand-in/<torch version>-<key>``, one build per torch
installation, Python and compiler, in opaudit's cache (opaudit.native.cbuild; opaudit.tomlcache.cache_root:
``$OPAUDIT_CACHE_DIR``, ``$XDG_CACHE_HOME/opaudit`` or ``~/.cache/opaudit``; the temporary folder where the
cache is off), shared by processes under a lock.

Nothing here imports torch at module level: importing it must leave torch unimported.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.metadata
import importlib.util
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opaudit.native import cbuild

PART = cbuild.STAND_IN
SOURCE, NAME = PART.source, PART.name
ENV_OFF = "OPAUDIT_CUDA_STAND_IN"  # "0": never use it (the simulated device of opaudit.fallback)
ENV_BUILD = PART.env


@dataclass
class _State:
    loaded: Path | None = None  # the library, once loaded into this process (before torch)
    reason: str | None = None  # why not, once prepare() has declined
    installed: Any = None  # the StandIn, once install() has run


_state = _State()




def _torch_version() -> str | None:
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


def build_dir() -> Path:
    """Where the library is built (module doc)."""
    return PART.build_dir()


def library() -> Path:
    return PART.library()


def _compile(directory: str) -> None:
    """In a child process (build): torch's extension builder, which imports torch."""
    from torch.utils.cpp_extension import load

    load(name=NAME, sources=[str(SOURCE)], build_directory=directory, extra_cflags=["-O1"],
         extra_include_paths=[str(cbuild.INCLUDE)], is_python_module=False, verbose=False)


def _compile_in_child(directory: Path) -> None:
    code = f"import sys; from opaudit.standin import _compile; _compile({str(directory)!r})"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SOURCE.parents[2]), os.environ.get("PYTHONPATH", "")])}
    with tempfile.TemporaryFile("w+") as log:
        done = subprocess.run([sys.executable, "-c", code], stdout=log, stderr=subprocess.STDOUT, env=env)
        if done.returncode != 0:
            log.seek(0)
            tail = "\n".join(log.read().strip().splitlines()[-8:])
            raise RuntimeError(f"building the CUDA stand-in failed:\n{tail}")


def build(note: Any = None) -> Path:
    """Compile the library in a child process (this one must not import torch), or find it built; returns its
    path. Raises RuntimeError with the compiler's last lines when it cannot be built (opaudit.native.cbuild: once per
    torch installation, atomic, under a lock)."""
    return cbuild.build(PART, _compile_in_child, note)[0]


def _preload(lib: Path) -> None:
    """Load the library before ``import torch``: torch's own libraries first, by path, then this one."""
    spec = importlib.util.find_spec("torch")
    assert spec is not None and spec.submodule_search_locations
    torch_lib = Path(list(spec.submodule_search_locations)[0]) / "lib"
    for name in ("libc10.so", "libtorch_cpu.so", "libtorch.so", "libtorch_python.so"):
        if (torch_lib / name).exists():
            ctypes.CDLL(str(torch_lib / name), mode=ctypes.RTLD_GLOBAL)
    ctypes.CDLL(str(lib), mode=ctypes.RTLD_GLOBAL)


def prepare(note: Any = None) -> str | None:
    """Build (once) and load the stand-in before torch is imported; None when it is in place, else why not
    (module doc). ``note(text)`` hears of a first build, which takes a while."""
    if _state.loaded is not None:
        return None
    if _state.reason is not None:
        return _state.reason
    reason = _why_not()
    if reason is None:
        try:
            lib = build(note)
            _preload(lib)
            _state.loaded = lib
        except (RuntimeError, OSError) as e:
            reason = str(e)
    _state.reason = reason
    return reason


def _why_not() -> str | None:
    if os.environ.get(ENV_OFF, "").strip().lower() in ("0", "no", "off", "false"):
        return f"{ENV_OFF}={os.environ[ENV_OFF]}"
    if "torch" in sys.modules:
        return "torch was imported before the stand-in could be loaded"
    if sys.platform != "linux":
        return "the stand-in is built for Linux only"
    version = _torch_version()
    if version is None:
        return "torch is not installed"
    if "+cpu" not in version and _has_cuda_libraries():
        return "this torch has CUDA of its own"
    return None


def _has_cuda_libraries() -> bool:
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return False
    return (Path(list(spec.submodule_search_locations)[0]) / "lib" / "libtorch_cuda.so").exists()


def active() -> bool:
    """Whether this process's CUDA is the stand-in (loaded before torch, and torch took its hooks)."""
    return _state.loaded is not None and "torch" in sys.modules and _module().hooks_installed()


def bridged() -> list[tuple[str, str, int]]:
    """(op, dtype, calls) of the calls the stand-in ran wide because the CPU kernel refuses their dtype
    (opaudit/native/dtype_bridge.h), in this process so far."""
    return [tuple(row) for row in _module().bridged()] if active() else []


def reason() -> str | None:
    """Why the stand-in is not in place, where prepare() declined."""
    return _state.reason


_ext: Any = None


def _module() -> Any:
    global _ext
    if _ext is None:
        assert _state.loaded is not None
        spec = importlib.util.spec_from_file_location(NAME, _state.loaded)
        assert spec is not None and spec.loader is not None
        _ext = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(_ext)
    return _ext


@dataclass(frozen=True)
class StandIn:
    """What a trace records of its device (tracing.device.simulated_meta): the CUDA release of coverage_db
    whose kernels a GPU build has, and the device's name."""

    target: str
    name: str = "cuda"
    engine: str = "stand-in"


def install() -> StandIn:
    """After ``prepare`` and ``import torch``: ``torch.cuda`` answers as the simulated device's module does
    (opaudit.rehearsal.device.SimDevice: streams, events, RNG, amp; memory from the stand-in's own counters),
    and as PyPI's CUDA wheel of this torch on its GPU (versions of CUDA, cuDNN and NCCL; the GPU's name and
    capability); pinning is the identity (no pinned allocator); backward runs on the calling thread (where
    a trace's dispatch mode sees it); ``nccl`` is a one-rank process group. Once per process; returns the
    device."""
    if _state.installed is not None:
        return _state.installed
    if not active():
        raise RuntimeError("the CUDA stand-in is not loaded: opaudit.standin.prepare() must run before `import torch`")
    import types

    import torch

    from opaudit.rehearsal import device
    from opaudit.tracing.device import count_wide

    ext = _module()
    from opaudit.matrix.cuda_dtypes import kernel_ops, wide_ops

    ext.set_kernel_ops(kernel_ops())  # CUDA's dtypes that the CPU kernels refuse run wide (native/dtype_bridge.h)
    ext.set_wide_ops(wide_ops())  # and float16 convolutions, whose CPU kernel is a slow reference path
    cuda = torch.cuda
    device_class = cuda.device  # a class torch's own code tests with isinstance (cuda._utils._get_device_index)
    answers = device.SimDevice("cuda")
    for name in dir(device.SimDevice):
        if not name.startswith("__") and name != "amp":
            setattr(cuda, name, getattr(answers, name))

    def index(dev: Any = None) -> int:
        if dev is None:
            return ext.current_device()
        return dev if isinstance(dev, int) else (torch.device(dev).index or 0)

    def memory_stats(dev: Any = None) -> dict[str, int]:
        now, peak = ext.memory_allocated(), ext.max_memory_allocated()
        return {"allocated_bytes.all.current": now, "allocated_bytes.all.peak": peak,
                "active_bytes.all.current": now, "active_bytes.all.peak": peak,
                "reserved_bytes.all.current": now, "reserved_bytes.all.peak": peak}

    total = device.TOTAL_MEMORY
    own = {
        "device_count": ext.device_count, "current_device": ext.current_device,
        "set_device": lambda dev: ext.set_device(index(dev)),
        "memory_allocated": lambda dev=None: ext.memory_allocated(),
        "max_memory_allocated": lambda dev=None: ext.max_memory_allocated(),
        "memory_reserved": lambda dev=None: ext.memory_allocated(),
        "max_memory_reserved": lambda dev=None: ext.max_memory_allocated(),
        "reset_peak_memory_stats": lambda dev=None: ext.reset_peak(),
        "reset_max_memory_allocated": lambda dev=None: ext.reset_peak(),
        "memory_stats": memory_stats,
        "mem_get_info": lambda dev=None: (total - ext.memory_allocated(), total),
        "empty_cache": lambda: None,
    }
    for name, value in own.items():
        setattr(cuda, name, value)
    # torch.cuda.device stays the class: torch.load restores each CUDA storage through _get_device_index, which
    # tests isinstance(x, torch.cuda.device); the device it selects is the stand-in's
    cuda.device = device_class  # type: ignore[misc]
    cuda._exchange_device = cuda._maybe_exchange_device = functools.partial(_exchange, ext)
    torch.storage._to = functools.partial(_storage_to, ext, torch.storage._to)  # type: ignore[attr-defined]
    if not hasattr(torch._C, "_scatter"):  # DataParallel's input split (torch/csrc/cuda/comm.cpp scatter)
        torch._C._scatter = _scatter
    target = cuda_target()
    from opaudit.matrix import load_matrix

    device.answer_as_cuda_build(load_matrix(target).release.torch, cuda)

    def pin_memory(self: torch.Tensor, device: Any = None) -> torch.Tensor:
        return self

    torch.Tensor.pin_memory = pin_memory  # type: ignore[method-assign,assignment]
    from opaudit.rehearsal import legacy  # torch.cuda.FloatTensor(n, 1) and the others, which the CPU build refuses

    legacy.install({"cuda": (cuda, legacy.classes("cuda", "cuda", target, {"cuda"}))})
    torch._C._set_multithreading_enabled(False)
    _kernels_without_cpu()
    if torch.distributed.is_available():
        # opaudit's one-rank group (rehearsal.device), with nccl mapped onto it
        one_rank = types.SimpleNamespace(target=target, name="cuda", aliases=frozenset({"cuda"}),
                                         release=types.SimpleNamespace(vendor="cuda"))
        device.collectives(one_rank)  # type: ignore[arg-type]
    count_wide(bridged)  # what a trace records of the calls it ran wide (TraceMeta.simulated["bridged"])
    _state.installed = StandIn(target=target)
    return _state.installed


def cuda_target() -> str:
    """The CUDA release of the installed torch in coverage_db (its kernels are what a GPU build has), else
    the newest."""
    import torch

    from opaudit.errors import InputError
    from opaudit.matrix import load_matrix

    version = torch.__version__.split("+")[0]
    major_minor = ".".join(version.split(".")[:2])
    for candidate in (f"cuda@{version}", f"cuda@{major_minor}"):
        try:
            return load_matrix(candidate).release.key
        except InputError:
            continue
    return load_matrix("cuda").release.key


class CudaDevice:
    """The CUDA device a trace runs on (opaudit.tracing.device.TraceDevice): the C++ stand-in where this process
    loaded it before torch (``prepare``; the command line does), else the rehearsal's simulated device with CUDA
    as its target (opaudit.rehearsal.simulator: ``cuda`` mapped onto it, ``torch.cuda`` answering as a device
    module). A process simulates one device type: where PrivateUse1 is taken (a vendor plugin is imported),
    ``open`` says so, and ``--device cpu`` traces the CPU path."""

    name = "cuda"

    @contextmanager
    def open(self) -> Iterator[Any]:
        if active():  # loaded before torch (the command line): real CUDA tensors
            yield install()
            return
        import torch

        from opaudit.errors import InputError
        from opaudit.rehearsal.simulator import Simulator

        taken = torch._C._get_privateuse1_backend_name()
        if taken not in ("privateuseone", "cudasim"):
            raise InputError(f"this process already has a {taken!r} device, so CUDA cannot be simulated in it",
                             hint="trace in a process of its own, or trace the CPU path with --device cpu")
        with Simulator(cuda_target(), map_devices=("cuda",)) as sim:
            yield sim

    def __repr__(self) -> str:
        return "opaudit.standin.cuda()"


def cuda() -> CudaDevice:
    """The device ``opaudit.trace(device="cuda")`` and ``opaudit scan`` trace on (CudaDevice)."""
    return CudaDevice()


def _exchange(ext: Any, index: int) -> int:
    """torch.cuda._exchange_device on the stand-in: select ``index`` (none when negative), return the one before."""
    if index < 0:
        return -1
    before = int(ext.current_device())
    ext.set_device(index)
    return before


def _storage_to(ext: Any, to: Any, self: Any, device: Any, non_blocking: bool = False) -> Any:
    """torch._utils._to (a storage's ``to`` and ``cuda``: torch.load's move of each storage to ``cuda``) with the
    new storage made by the stand-in: the CPU build's torch.UntypedStorage(n, device="cuda") finds no allocator
    for cuda. A GPU's allocation records no op, nor does ``device_bytes``; torch's copy_ then fills it. Other
    moves are torch's own."""
    import torch

    if device.type != "cuda" or self.device == device or self.is_sparse:
        return to(self, device, non_blocking)
    with torch.cuda.device(device):
        storage = ext.device_bytes(self.size()).untyped_storage()
    storage.copy_(self, non_blocking)
    return storage


def _scatter(tensor: Any, devices: list[int], chunk_sizes: list[int] | None, dim: int, streams: Any) -> list[Any]:
    """torch._C._scatter (torch/csrc/cuda/comm.cpp scatter), which the CPU build lacks and nn.DataParallel calls
    even with one device: the tensor split along ``dim`` into one chunk per device (of ``chunk_sizes`` where
    given), each chunk moved to its device where it is not there. With TensorBase's methods, as C++ calls them:
    no ``api`` record (tracing.apis wraps torch.Tensor's)."""
    import torch

    from opaudit.torchcompat import TensorBase

    base = TensorBase
    if not devices:
        raise RuntimeError("Expected at least one device to scatter to")
    if chunk_sizes is not None and len(chunk_sizes) != len(devices):
        raise RuntimeError(f"Expected devices and chunk_sizes to be of same length, but got len(devices) = "
                           f"{len(devices)} and len(chunk_sizes) = {len(chunk_sizes)}")
    chunks = list(base.split_with_sizes(tensor, chunk_sizes, dim) if chunk_sizes is not None
                  else base.chunk(tensor, len(devices), dim))
    for i, index in enumerate(devices[:len(chunks)]):
        if index != tensor.get_device():
            chunks[i] = base.to(chunks[i], torch.device("cuda", index), non_blocking=True)
    return chunks


_libraries: list[Any] = []  # the Python kernels' registrations, kept alive
NO_LIBRARY = ("_use_cudnn_ctc_loss", "_use_cudnn_ctc_loss.Tensor", "_use_miopen_ctc_loss",
              "_use_miopen_ctc_loss.Tensor")


def _no(*args: Any, **kwargs: Any) -> bool:
    return False


def _kernels_without_cpu() -> None:
    """Ops PyTorch sends CUDA tensors to that have no CPU kernel for the boxed kernel to run (the fused RNN
    cells of RNN.cpp, ``_fused_dropout``, ...: coverage_db/curated/no_cpu_kernel.toml) run on the CUDA key as
    the rehearsal runs them (opaudit.fallback.choose.cpu_impl: opaudit's reference, else PyTorch's
    decomposition), in aten ops that run on the stand-in in turn. A trace records the op itself, as the
    simulated device's trace does."""
    import torch

    from opaudit.fallback.choose import cpu_impl
    from opaudit.fallback.references import BEFORE_CPU_KERNEL, has_cpu_kernel, scope

    lib = torch.library.Library("aten", "IMPL")  # noqa: TOR901 - kernels for existing aten ops on the CUDA key
    # a composite's question whether the device has a library for the op (ctc_loss asks for CUDA tensors): no
    # cuDNN or MIOpen here, as cudnn_is_acceptable answers for batch norm and convolution
    for name in NO_LIBRARY:
        lib.impl(name, _no, "CUDA")
    # (and GradScaler's ops on a torch older than their CPU kernels: references.BEFORE_CPU_KERNEL)
    names = [n for n, entry in scope().items() if entry.get("how") in ("reference", "decomposition")]
    for name in [*names, *BEFORE_CPU_KERNEL]:
        base, _, overload = name.partition(".")
        packet = getattr(torch.ops.aten, base, None)
        if packet is None or (overload or "default") not in packet.overloads():
            continue
        op = getattr(packet, overload or "default")
        if has_cpu_kernel(op) or torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CUDA"):
            continue
        impl = cpu_impl(op)
        if impl is not None and impl is not op:
            lib.impl(name, impl, "CUDA")
    _libraries.append(lib)
