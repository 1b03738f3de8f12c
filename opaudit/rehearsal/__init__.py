"""rehearsal/: run a program on the CPU as if on a target -> its device, runtime API and dtype rules.

>>> with opaudit.rehearsal.simulate("ascend@2.6.0.post5", strict=True) as sim:   # on a CPU  # doctest: +SKIP
...     train_step()
>>> print("\\n".join(sim.stats.lines()))                                         # doctest: +SKIP

The simulated device (simulator.py; its tensors in C++, native.py and opaudit/native/device.cpp, or as
wrappers, tensor.py), the device module a script sees (device.py: ``torch.npu``, collectives, autocast,
checkpoints, legacy typed tensors, the target's runtime names), a script run under it (script.py), the
agreement of a trace and a rehearsal (agreement.py), and a port's verification (verify.py, verify_run.py:
``opaudit fix --verify``). An op the target lacks runs by opaudit.fallback's kernels, the layer below.
"""

from __future__ import annotations

import importlib
from typing import Any

from opaudit.rehearsal.agreement import DeviceOpsAgreement, compare_device_ops

# the rest imports torch: loaded on first use
_LAZY = {"SimTensor": "tensor", "SimulatedMissing": "simulator", "Simulator": "simulator", "simulate": "simulator",
         "run_script": "script", "RunFailed": "script"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(f"opaudit.rehearsal.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'opaudit.rehearsal' has no attribute {name!r}")


__all__ = ["DeviceOpsAgreement", "RunFailed", "SimTensor", "SimulatedMissing", "Simulator", "compare_device_ops",
           "run_script", "simulate"]
