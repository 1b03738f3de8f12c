"""Uses of CUDA's typed tensor classes heard while recording: ``torch.cuda.FloatTensor(n, 1)``,
``x.type(torch.cuda.HalfTensor)``, ``torch.set_default_tensor_type(torch.cuda.FloatTensor)``.

The CUDA stand-in and the rehearsal's devices make the classes work (rehearsal/legacy.py) and tell
:data:`watchers` of each use; a recording counts it as an ``api`` record of :data:`OP` with the class's dtype, at
the program's line, and the audit judges it by whether the target's plugin has such classes (vendors.toml
``legacy_types``: torch_npu's ``torch.npu.FloatTensor``, torch_mlu's), as a rehearsal of that target does, which
refuses them elsewhere naming the lint finding that ports them (OA109, OA110).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

OP = "torch::legacy_tensor_type.default"

watchers: list[Callable[[Any, Any], None]] = []  # (the class, the caller's frame)


def heard(cls: Any, depth: int = 2) -> None:
    """A use of ``cls`` (a typed class whose ``device_type`` is ``cuda``), from the frame ``depth`` up."""
    if watchers and getattr(cls, "device_type", None) == "cuda":
        frame = sys._getframe(depth)
        for w in list(watchers):
            w(cls, frame)
