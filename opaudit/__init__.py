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

from typing import TYPE_CHECKING, Any

from opaudit.errors import OpauditError

if TYPE_CHECKING:
    from opaudit.api import trace, trace_script
    from opaudit.auditing import Audit, Verdict, audit
    from opaudit.tracing import Trace, load_trace, record

# imported on first use, so that `opaudit lint` and `opaudit fix` do not pay for importing torch
# (the modules are opaudit.api, opaudit.auditing and opaudit.tracing: no function here shares its name with a
# submodule)
_LAZY = {"Audit": "opaudit.auditing", "Verdict": "opaudit.auditing", "audit": "opaudit.auditing",
         "Trace": "opaudit.tracing", "load_trace": "opaudit.tracing", "record": "opaudit.tracing",
         "trace": "opaudit.api", "trace_script": "opaudit.api"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'opaudit' has no attribute {name!r}")


__all__ = ["Audit", "OpauditError", "Trace", "Verdict", "__version__", "audit", "load_trace", "record", "trace",
           "trace_script"]
