"""Answers for ``.item()`` on tensors that hold no data (meta and fake modes).

A model that reads a value (``if mask.all():``, ``step.item()``, a grad scaler's inf check) cannot
run on meta tensors. Rather than fail, the tracer answers with the value a healthy run would most
likely see, and records where it guessed (``Trace.meta.scalar_guesses``), so the user knows which
branches rest on a guess. The guesses:

========================================  =====================================================
where the value is read                   answer
========================================  =====================================================
inside torch's grad scalers               ``0`` (no inf or NaN found, so the optimizer step runs)
a bool tensor                             ``True`` (checks such as "is the mask all ones")
an integer tensor                         ``1``
a floating or complex tensor              ``1.0``
========================================  =====================================================

A user who knows better passes ``scalar_oracle=callable(tensor, location) -> value | None`` to
:func:`opaudit.trace` (``None`` falls back to the table). Real mode never guesses.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch

from opaudit.tracing.attribution import SourceLocator

UserOracle = Callable[[torch.Tensor, str | None], Any]


def _is_fake(t: torch.Tensor) -> bool:
    try:
        from torch._subclasses.fake_tensor import FakeTensor
    except ImportError:  # pragma: no cover
        return False
    return isinstance(t, FakeTensor)


class ScalarOracle:
    def __init__(self, locator: SourceLocator, user: UserOracle | None = None):
        self.locator = locator
        self.user = user
        self.guesses: Counter[str] = Counter()
        self._scaler_files = tuple(
            os.path.join(os.path.dirname(torch.__file__), *p)
            for p in (("amp", "grad_scaler.py"), ("cuda", "amp", "grad_scaler.py"))
        )

    def item(self, func, args, kwargs, frame):
        t = args[0] if args else None
        if not isinstance(t, torch.Tensor):
            return func(*args, **kwargs)
        if t.device.type != "meta":
            if not _is_fake(t):
                return func(*args, **kwargs)
            from torch._subclasses.fake_tensor import DataDependentOutputException

            try:
                return func(*args, **kwargs)  # a fake tensor made from a constant knows its value
            except DataDependentOutputException:
                pass
        return self.guess(t, frame)

    def guess(self, t: torch.Tensor, frame) -> Any:
        loc, _, _ = self.locator.locate(frame)
        if loc is not None:
            filename, line = self.locator.resolve(loc)
            where = f"{os.path.basename(filename)}:{line}"
        else:
            where = "torch"
        self.guesses[where] += 1
        if self.user is not None:
            value = self.user(t, where)
            if value is not None:
                return value
        in_scaler = False
        f = frame
        while f is not None:
            if f.f_code.co_filename.startswith(self._scaler_files):
                in_scaler = True
                break
            f = f.f_back
        if t.dtype == torch.bool:
            return not in_scaler
        if in_scaler:
            return 0 if not t.is_floating_point() else 0.0
        if t.is_complex():
            return complex(1.0)
        if t.is_floating_point():
            return 1.0
        return 1
