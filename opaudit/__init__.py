"""opaudit: will a PyTorch model run on another accelerator, and what must change to get it there.

The library is the product; the ``opaudit`` command is a thin layer over it::

    import opaudit
    trace = opaudit.trace(model, inputs, train=True)   # every aten op the model hits
    trace.to_pandas()                                  # one row per op x phase x module x line
    trace.save("trace.json")                           # the input of every later stage
"""

__version__ = "0.1.0"

from opaudit.errors import OpauditError
from opaudit.trace import Trace, load_trace, record, trace

__all__ = ["OpauditError", "Trace", "__version__", "load_trace", "record", "trace"]
