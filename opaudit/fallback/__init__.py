"""fallback/: run what a target lacks -> kernels, a CPU simulator, statistics.

>>> with opaudit.fallback.install("ascend") as fb:          # on a machine with torch_npu   # doctest: +SKIP
...     train_step()
>>> with opaudit.fallback.simulate("ascend@2.6.0.post5", strict=True) as sim:   # on a CPU  # doctest: +SKIP
...     train_step()
>>> print("\\n".join(sim.stats.lines()))                                                   # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from typing import Any

from opaudit.fallback.agreement import DeviceOpsAgreement, compare_device_ops
from opaudit.fallback.stats import PATH_TEXT, PATHS, OpStat, Stats

# the rest imports torch: loaded on first use, so that reports read statistics without it
# (no submodule shares a name with a function here: importing a submodule binds its name in the package)
_LAZY = {"Chooser": "choose", "decomposition": "choose", "FallbackFailed": "live", "Installation": "live",
         "current": "live", "install": "live", "uninstall": "live", "SimTensor": "tensor",
         "SimulatedMissing": "simulator", "Simulator": "simulator", "simulate": "simulator", "run_script": "script",
         "RunFailed": "script"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(f"opaudit.fallback.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'opaudit.fallback' has no attribute {name!r}")

__all__ = ["PATHS", "PATH_TEXT", "Chooser", "DeviceOpsAgreement", "compare_device_ops",
           "FallbackFailed", "Installation", "OpStat", "SimTensor",
           "SimulatedMissing", "Simulator", "Stats", "current", "decomposition", "install", "simulate", "uninstall",
           "run_script", "RunFailed"]
