"""What opaudit reads from torch under names or places that changed between the releases it supports (2.1 on),
one place for each. Each entry says which releases have what."""

from __future__ import annotations

import torch

# the C base class of torch.Tensor: torch._C.TensorBase from 2.2 on, torch._C._TensorBase before
TensorBase = getattr(torch._C, "TensorBase", None) or torch._C._TensorBase


def version() -> tuple[int, int]:
    """(major, minor) of the installed torch."""
    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    return int(major), int(minor)


# The simulated devices (the rehearsal's, and the CUDA path where the C++ stand-in is not loaded) need, from
# torch 2.4 on: the device-type autocast functions (torch.get_autocast_dtype(device), ...), the GradScaler of any
# device (torch.amp.GradScaler, 2.3) and the PrivateUse1 hooks of a device (count, current device, pinned memory:
# ATen/detail/PrivateUse1HooksInterface.h, 2.3 and 2.4). Before, a plugin brings its own autocast and GradScaler.
SIMULATED_DEVICE = (2, 4)


def require(feature: str, needed: tuple[int, int], hint: str) -> None:
    """Raise InputError (one line, exit 2) where the installed torch is older than ``needed`` for ``feature``."""
    if version() < needed:
        from opaudit.errors import InputError

        raise InputError(f"{feature} needs torch >= {needed[0]}.{needed[1]}; this is torch "
                         f"{torch.__version__.split('+')[0]}", hint=hint)
