"""opaudit: will a PyTorch model run on another accelerator, and what must change to get it there.

The library is the product; the ``opaudit`` command is a thin layer over it::

    import opaudit
    trace = opaudit.trace(model, inputs, train=True)   # every aten op the model hits
    trace.to_pandas()                                  # one row per op x phase x module x line
    trace.save("trace.json")                           # the input of every later stage
    result = opaudit.audit(trace, ["ascend@2.6.0.post5", "cambricon"])
    result.verdict("cambricon").summary                # 'runs natively', 'fails: 2 ops missing ...'
    result.frame                                       # one row per op x phase x target (pandas)
"""

__version__ = "0.1.0"

import sys
import types
from typing import TYPE_CHECKING, Any

from opaudit.errors import OpauditError

if TYPE_CHECKING:
    from opaudit.audit import Audit, Verdict, audit
    from opaudit.trace import Trace, load_trace, record, trace

# imported on first use, so that `opaudit lint` and `opaudit fix` do not pay for importing torch
_LAZY = {"Audit": "opaudit.audit", "Verdict": "opaudit.audit", "audit": "opaudit.audit", "Trace": "opaudit.trace",
         "load_trace": "opaudit.trace", "record": "opaudit.trace", "trace": "opaudit.trace"}


class _Package(types.ModuleType):
    """`opaudit.audit` and `opaudit.trace` are functions that share their name with a submodule: when the
    import system binds a submodule here after loading it, the function keeps the name."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("audit", "trace") and isinstance(value, types.ModuleType):
            if name not in self.__dict__:
                super().__setattr__(name, getattr(value, name))
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value  # the function, not the submodule of the same name that the import bound here
        return value
    raise AttributeError(f"module 'opaudit' has no attribute {name!r}")


__all__ = ["Audit", "OpauditError", "Trace", "Verdict", "__version__", "audit", "load_trace", "record", "trace"]
