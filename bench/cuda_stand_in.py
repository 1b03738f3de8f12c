"""A stand-in CUDA device for the CPU-only PyTorch build, in C++ (cuda_stand_in.cpp): the study behind
cuda_stand_in_trace.py, whether ``opaudit trace`` could run a CUDA script on real CUDA tensors instead of
the rehearsal's Python wrapper tensors.

Order matters: torch asks for its CUDA hooks once, while ``import torch`` runs, so the compiled library is
loaded before torch is (``preload``), and ``install`` then answers ``torch.cuda``'s Python calls (the CPU
build's torch.cuda would call into C++ functions it lacks). Compiling needs torch imported, so ``build``
compiles in a child process::

    import cuda_stand_in
    cuda_stand_in.build()      # once; compiles or reuses the ninja build (no torch import here)
    cuda_stand_in.preload()    # before `import torch`
    import torch
    ext = cuda_stand_in.install()
    torch.ones(2, device="cuda").is_cuda   # True

The build folder is ``$OPAUDIT_CUDA_STAND_IN_BUILD`` or ``<tmp>/opaudit-cuda-stand-in-<torch version>``.
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import importlib.util
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "cuda_stand_in.cpp"
NAME = "opaudit_cuda_stand_in"


def build_dir() -> Path:
    env = os.environ.get("OPAUDIT_CUDA_STAND_IN_BUILD")
    if env:
        return Path(env)
    version = importlib.metadata.version("torch").replace("+", "_")
    return Path(tempfile.gettempdir()) / f"opaudit-cuda-stand-in-{version}"


def library() -> Path:
    return build_dir() / f"{NAME}.so"


def _compile() -> None:
    from torch.utils.cpp_extension import load

    directory = build_dir()
    directory.mkdir(parents=True, exist_ok=True)
    load(name=NAME, sources=[str(SOURCE)], build_directory=str(directory), extra_cflags=["-O1"],
         is_python_module=False)


def build() -> Path:
    """Compile the library (or reuse its ninja build) in a child process, which torch's extension loader also
    loads it into (registering a device without its hooks there); returns its path."""
    subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {str(HERE)!r}); "
                    "import cuda_stand_in; cuda_stand_in._compile()"], check=True)
    return library()


def preload() -> None:
    """Load the library before ``import torch`` (module doc): torch's own libraries first, by path."""
    if "torch" in sys.modules:
        raise RuntimeError("cuda_stand_in.preload() must run before `import torch`: torch takes its CUDA hooks "
                           "while it is imported")
    spec = importlib.util.find_spec("torch")
    assert spec is not None and spec.submodule_search_locations
    lib = Path(list(spec.submodule_search_locations)[0]) / "lib"
    for name in ("libc10.so", "libtorch_cpu.so", "libtorch.so", "libtorch_python.so"):
        if (lib / name).exists():
            ctypes.CDLL(str(lib / name), mode=ctypes.RTLD_GLOBAL)
    ctypes.CDLL(str(library()), mode=ctypes.RTLD_GLOBAL)


def _module() -> Any:
    spec = importlib.util.spec_from_file_location(NAME, library())
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def install() -> Any:
    """After ``preload`` and ``import torch``: torch.cuda's Python calls answered for the stand-in (the
    runtime calls of opaudit's simulated device module, with this device's memory counters), pinning as the
    identity, backward on the calling thread (as the rehearsal runs it), and ``nccl`` as a one-rank process
    group. Returns the compiled module."""
    import torch

    from opaudit.fallback.device import SimDevice

    ext = _module()
    if not ext.hooks_installed():
        raise RuntimeError("torch did not take the stand-in's CUDA hooks: preload() must run before `import torch`")
    cuda = torch.cuda
    answers = SimDevice("cuda")
    for name in dir(SimDevice):
        if not name.startswith("__") and name != "amp":
            setattr(cuda, name, getattr(answers, name))

    def index(device: Any = None) -> int:
        if device is None:
            return ext.current_device()
        return device if isinstance(device, int) else (torch.device(device).index or 0)

    ns = {
        "_lazy_init": lambda: None, "is_available": lambda: True, "is_initialized": lambda: True,
        "device_count": ext.device_count, "current_device": ext.current_device,
        "set_device": lambda device: ext.set_device(index(device)),
        "synchronize": lambda device=None: None, "manual_seed": lambda seed: None,
        "manual_seed_all": lambda seed: None,
        "memory_allocated": lambda device=None: ext.memory_allocated(),
        "max_memory_allocated": lambda device=None: ext.max_memory_allocated(),
        "reset_peak_memory_stats": lambda device=None: ext.reset_peak(),
    }
    for name, value in ns.items():
        setattr(cuda, name, value)
    torch.Tensor.pin_memory = lambda self, device=None: self  # type: ignore[method-assign]
    torch._C._set_multithreading_enabled(False)
    _one_rank_nccl()
    return ext


def _one_rank_nccl() -> None:
    """``init_process_group("nccl")`` as the rehearsal answers it: a process group of one rank."""
    import types

    import torch

    if not torch.distributed.is_available():
        return
    from opaudit.fallback import device

    # a vendor without a collective backend of its own in rules/targets/: opaudit's one-rank group, nccl mapped on it
    stand_in = types.SimpleNamespace(target="cuda", name="cuda", aliases=frozenset({"cuda"}),
                                     release=types.SimpleNamespace(vendor="cuda-stand-in"))
    device._collectives(stand_in)  # type: ignore[arg-type]
