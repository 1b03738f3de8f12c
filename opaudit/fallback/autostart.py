"""``OPAUDIT_FALLBACK=ascend python train.py``: an unmodified script opts in to opaudit's fallback.

The wheel installs ``opaudit_fallback.pth``, which calls :func:`start` at interpreter start when
``OPAUDIT_FALLBACK`` is set (and does nothing else otherwise). The fallback is installed once the
device exists: at once if it does, else right after the module that registers it is imported (the
target's plugin, ``torch_npu``; ``OPAUDIT_FALLBACK_AFTER`` names another). At exit, the statistics go
to stderr, and to ``OPAUDIT_FALLBACK_STATS`` as JSON when it is set. ``OPAUDIT_FALLBACK_CPU`` and
``OPAUDIT_FALLBACK_FORBID`` are comma-separated op lists (install's ``force_cpu`` and ``forbid``).
"""

from __future__ import annotations

import atexit
import importlib.abc
import importlib.util
import os
import sys
from typing import Any


def _ops(var: str) -> list[str]:
    return [o.strip() for o in os.environ.get(var, "").split(",") if o.strip()]


def _install(target: str) -> None:
    from opaudit.fallback.live import install

    inst = install(target, force_cpu=_ops("OPAUDIT_FALLBACK_CPU"), forbid=_ops("OPAUDIT_FALLBACK_FORBID"))

    def report() -> None:
        inst.stats.finish()
        print("\n".join(inst.stats.lines()), file=sys.stderr)
        out = os.environ.get("OPAUDIT_FALLBACK_STATS")
        if out:
            inst.stats.save(out)

    atexit.register(report)


class _After(importlib.abc.MetaPathFinder):
    """Runs the installation right after ``name`` has been imported."""

    def __init__(self, name: str, target: str):
        self.name, self.target = name, target

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        loader, install_target = spec.loader, self.target
        original = loader.exec_module

        def exec_module(module: Any) -> None:
            original(module)
            _install(install_target)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


_started = False


def start() -> None:
    """Once per process, whichever .pth calls it (an editable install and site-packages may both have it)."""
    global _started
    target = os.environ.get("OPAUDIT_FALLBACK", "").strip()
    if not target or _started:
        return
    _started = True
    from opaudit.fallback.live import live_key, resolve_target

    try:
        _, device_type, module = resolve_target(target)
    except Exception as e:  # a bad target must not stop the interpreter: say it, run without the fallback
        print(f"opaudit: OPAUDIT_FALLBACK={target}: {getattr(e, 'message', e)}", file=sys.stderr)
        return
    after = os.environ.get("OPAUDIT_FALLBACK_AFTER") or module
    if live_key(device_type) is not None or not after or after in sys.modules:
        _install(target)
    else:
        sys.meta_path.insert(0, _After(after, target))
