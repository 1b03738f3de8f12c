"""What a recording with ``shapes=True`` keeps of an op's arguments (OpRecord.shapes)."""

from __future__ import annotations

import torch


def shapes(args, kwargs) -> tuple[str, ...]:
    """The shape of each tensor argument (``2x3``, ``scalar``), and ``[n]`` for a list of n tensors."""
    out = []
    for a in (*args, *(kwargs or {}).values()):
        if isinstance(a, torch.Tensor):
            out.append("x".join(str(s) for s in a.shape) or "scalar")
        elif isinstance(a, (list, tuple)) and a and any(isinstance(t, torch.Tensor) for t in a):
            out.append(f"[{len(a)}]")
    return tuple(out)
