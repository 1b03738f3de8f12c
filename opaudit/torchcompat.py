"""What opaudit reads from torch under names or places that changed between the releases it supports (2.1 on),
one place for each. Each entry says which releases have what."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils import _pytree as pytree

# the C base class of torch.Tensor: torch._C.TensorBase from 2.2 on, torch._C._TensorBase before
TensorBase = getattr(torch._C, "TensorBase", None) or torch._C._TensorBase


def _tree_flatten_leaves(tree: Any) -> list[Any]:
    return pytree.tree_flatten(tree)[0]


# The leaves of a pytree: torch.utils._pytree.tree_leaves from torch 2.2 on, its tree_flatten's first part before (2.1
# has no tree_leaves). Chosen once: the fallback's round trip asks it on every op call.
tree_leaves: Callable[[Any], list[Any]] = getattr(pytree, "tree_leaves", None) or _tree_flatten_leaves


def version() -> tuple[int, int]:
    """(major, minor) of the installed torch."""
    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    return int(major), int(minor)


# The simulated devices (the rehearsal's, and the CUDA path where the C++ stand-in is not loaded) run from torch 2.1,
# as the vendors' plugins of each release did, with what that torch has:
# - the autocast state of a device type: torch.is_autocast_enabled(device_type), get_autocast_dtype, ... from 2.4 on;
#   before, torch.autocast of a PrivateUse1 device asks its device module (is_autocast_enabled(), ..., set in C++ by
#   the plugin: native/torch_compat.h), and the device-less torch.is_autocast_enabled() and *_gpu_dtype are CUDA's
#   (AUTOCAST_BY_DEVICE_TYPE, autocast_enabled and the others below);
# - the GradScaler of any device: torch.amp.GradScaler(device) from 2.3 on; before, a plugin's copy of
#   torch.cuda.amp.GradScaler (torch_npu 2.1's torch.npu.amp.GradScaler; rehearsal/amp.py) (GRAD_SCALER_BY_DEVICE);
# - the PrivateUse1 hooks (count, current device, pinned memory: ATen/detail/PrivateUse1HooksInterface.h, 2.3 and
#   2.4): before, torch asks the device module (count, current device) and pinning is the identity
#   (rehearsal/device.py); native/device.cpp builds against each release's interface;
# - Library._destroy (2.3 has it, 2.1 not: destroy_library), torch.get_default_device (2.3), the CPU kernels of
#   GradScaler's ops (2.3; fallback/references.py BEFORE_CPU_KERNEL), torch.utils._pytree.tree_leaves (2.2:
#   tree_leaves).
# Where a feature cannot run on the installed torch, it says so in one line: require().
SIMULATED_DEVICE = (2, 1)
AUTOCAST_BY_DEVICE_TYPE = version() >= (2, 4)
GRAD_SCALER_BY_DEVICE = version() >= (2, 3)


# Each autocast query or setting, by its names: torch >= 2.4's (the device type its first argument), the CPU's own,
# CUDA's own (torch.*), and a plugin's (torch.<device type>.*, as torch < 2.4's autocast asks the device module)
_AUTOCAST = {
    "enabled": ("is_autocast_enabled", "is_autocast_cpu_enabled", "is_autocast_enabled", "is_autocast_enabled"),
    "set_enabled": ("set_autocast_enabled", "set_autocast_cpu_enabled", "set_autocast_enabled",
                    "set_autocast_enabled"),
    "dtype": ("get_autocast_dtype", "get_autocast_cpu_dtype", "get_autocast_gpu_dtype", "get_autocast_dtype"),
    "set_dtype": ("set_autocast_dtype", "set_autocast_cpu_dtype", "set_autocast_gpu_dtype", "set_autocast_dtype"),
}


def _autocast(what: str, device_type: str, *args: Any) -> Any:
    by_type, cpu, cuda, plugin = _AUTOCAST[what]
    if AUTOCAST_BY_DEVICE_TYPE:
        return getattr(torch, by_type)(device_type, *args)
    if device_type == "cpu":
        return getattr(torch, cpu)(*args)
    if device_type == "cuda":
        return getattr(torch, cuda)(*args)
    return getattr(getattr(torch, device_type), plugin)(*args)


def autocast_enabled(device_type: str) -> bool:
    """Whether autocast is on for ``device_type`` (torch.is_autocast_enabled(device_type) of torch >= 2.4)."""
    return bool(_autocast("enabled", device_type))


def set_autocast_enabled(device_type: str, on: bool) -> None:
    _autocast("set_enabled", device_type, on)


def autocast_dtype(device_type: str) -> torch.dtype:
    """The low precision of ``device_type``'s autocast (torch.get_autocast_dtype(device_type) of torch >= 2.4)."""
    dtype: torch.dtype = _autocast("dtype", device_type)
    return dtype


def set_autocast_dtype(device_type: str, dtype: torch.dtype) -> None:
    _autocast("set_dtype", device_type, dtype)


def require(feature: str, needed: tuple[int, int], hint: str) -> None:
    """Raise InputError (one line, exit 2) where the installed torch is older than ``needed`` for ``feature``."""
    if version() < needed:
        from opaudit.errors import InputError

        raise InputError(f"{feature} needs torch >= {needed[0]}.{needed[1]}; this is torch "
                         f"{torch.__version__.split('+')[0]}", hint=hint)


def destroy_library(lib: torch.library.Library) -> None:
    """Remove what ``lib`` registered, now: Library._destroy where torch has it (2.3 does); else (2.1) dropping its C++
    library, whose destructor removes the registrations, as that torch's finalizer does."""
    destroy = getattr(lib, "_destroy", None)
    if destroy is not None:
        destroy()
        return
    import torch.library as library

    library._impls -= lib._op_impls
    lib._op_impls.clear()
    lib.m = None
