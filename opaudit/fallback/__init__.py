"""fallback/: kernels for the ops a target lacks -> a decomposition first, a CPU round trip second, with statistics.

>>> with opaudit.fallback.install("ascend") as fb:          # on a machine with torch_npu   # doctest: +SKIP
...     train_step()
>>> print("\\n".join(fb.stats.lines()))                                                    # doctest: +SKIP

The same kernels fill a rehearsal's gaps (opaudit.rehearsal, the layer above this one).
"""

from __future__ import annotations

import importlib
from typing import Any

from opaudit.fallback.stats import PATH_TEXT, PATHS, OpStat, Stats

# the rest imports torch: loaded on first use, so that reports read statistics without it
# (no submodule shares a name with a function here: importing a submodule binds its name in the package)
_LAZY = {"Chooser": "choose", "decomposition": "choose", "FallbackFailed": "live", "Installation": "live",
         "current": "live", "install": "live", "uninstall": "live"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(f"opaudit.fallback.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'opaudit.fallback' has no attribute {name!r}")


__all__ = ["PATHS", "PATH_TEXT", "Chooser", "FallbackFailed", "Installation", "OpStat", "Stats", "current",
           "decomposition", "install", "uninstall"]
