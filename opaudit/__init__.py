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

from opaudit.audit import Audit, Verdict, audit
from opaudit.errors import OpauditError
from opaudit.trace import Trace, load_trace, record, trace

__all__ = ["Audit", "OpauditError", "Trace", "Verdict", "__version__", "audit", "load_trace", "record", "trace"]
