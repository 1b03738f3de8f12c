"""trace/: what the model runs -> a Trace (see DESIGN.md and docs/trace-format.md)."""

from opaudit.tracing.recorder import TraceStopped
from opaudit.tracing.run import Recorder, default_loss, default_optimizer, record, trace
from opaudit.tracing.schema import SCHEMA_VERSION, OpRecord, Trace, TraceMeta, load_trace

__all__ = [
    "SCHEMA_VERSION",
    "OpRecord",
    "Recorder",
    "Trace",
    "TraceMeta",
    "TraceStopped",
    "default_loss",
    "default_optimizer",
    "load_trace",
    "record",
    "trace",
]
