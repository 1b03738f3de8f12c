"""Whether a trace and a rehearsal of the same script saw the same device ops.

The trace (``opaudit trace``, on the simulated CUDA device) records the ops the code calls; the rehearsal
(``opaudit run --simulate TARGET --stats FILE``) counts the ops the device receives. They differ only where
the trace stands one level higher: a composite factory (zeros, full, arange) that the trace records whole
and the device receives as its leaves, the kernels a device-selected choice picks (attention's math path,
dropout, batch norm, an RNN's cells: the trace records the choice whole), and the check ``model.to()`` makes
before swapping parameters. One difference is the rehearsal's own limit and is reported apart
(``stand_in_composite``): an op PyTorch implements as CompositeExplicitAutograd that the target registers a
kernel for (torch_npu's ``zeros``, ``full``, ``arange``) reaches a real device whole, but the stand-in device
has no kernel of its own for it and receives its parts. Another is the trace's device standing closer to a
GPU than the rehearsal's (``checkpoint_storage``): on the C++ stand-in for CUDA, torch.save copies each storage
to the host and torch.load rebuilds each tensor over its storage, through ``set_`` with a storage source (and
the empty tensor it sets), as on a GPU and on a vendor's device; the rehearsal's checkpoints (checkpoint.py)
move the data without those ops. And where the trace was recorded by the Python recorder (opaudit/tracing/native.py
says when), its dispatch mode makes PyTorch take a subclass's path
(``mode_path``: at::isTensorSubclassLike holds while a dispatch mode is on): ``reshape`` views where a device
tensor reaches ``_reshape_alias`` (aten/src/ATen/native/TensorShape.cpp), AccumulateGrad adds a gradient out
of place where it adds into the device's in place (``add_``; torch/csrc/autograd/functions/accumulate_grad.h);
the rehearsal's C++ device runs without a mode, as a device does, and receives those; the other way round, a
trace by the C++ recorder has them where a rehearsal on the wrapper engine (whose tensors are a subclass to
PyTorch) does not. Anything else that one side has and the other lacks is a disagreement.

>>> agreement = compare_device_ops(opaudit.load_trace("t.json"), Stats.load("stats.json"))  # doctest: +SKIP
>>> agreement.equal, sorted(agreement.trace_only), sorted(agreement.rehearsal_only)          # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from opaudit.fallback.stats import Stats

if TYPE_CHECKING:
    from opaudit.matrix.matrix import Matrix
    from opaudit.tracing.schema import Trace

# the parts a composite factory's leaves add on the device: its allocation and the kernel that fills it
COMPOSITE_LEAVES = frozenset({"empty.memory_format", "empty_strided", "fill_.Scalar", "zero_", "arange.start_out",
                              "normal_", "uniform_", "random_.from"})
CHOICE_KERNELS = frozenset({"_safe_softmax", "where.self", "tril", "expand", "_unsafe_view", "native_dropout",
                            "native_batch_norm"})
MODULE_TO = frozenset({"_has_compatible_shallow_copy_type"})
# a tensor rebuilt over a storage (a checkpoint's, saved or loaded), and the empty tensor a storage copy sets
STORAGE_OPS = frozenset({"set_.source_Storage", "set_.source_Storage_storage_offset"})
STORAGE_EMPTY = frozenset({"empty.memory_format"})
# what a device tensor reaches where the trace's tensors, under its dispatch mode, take the subclass path (module doc)
MODE_PATH = frozenset({"_reshape_alias", "add_.Tensor"})
EXPLAINED = COMPOSITE_LEAVES | CHOICE_KERNELS | MODULE_TO
# the recurrent choices run a loop of cells over ``input.unbind(0)`` (aten/src/ATen/native/RNN.cpp FullLayer),
# on every path of device_selected.toml, which lists the cells' ops only
CELL_LOOPS = frozenset({"lstm", "gru", "rnn_tanh", "rnn_relu"})
STAND_IN_KEY = "PrivateUse1"  # the rehearsal's device (as opaudit.rehearsal.paths)


@dataclass
class DeviceOpsAgreement:
    """The comparison, op names normalised (``aten::`` and ``.default`` dropped)."""

    target: str
    trace_device: set[str] = field(default_factory=set)
    rehearsed: set[str] = field(default_factory=set)
    trace_only: set[str] = field(default_factory=set)  # device ops the trace records, the rehearsal never ran
    rehearsal_only: set[str] = field(default_factory=set)  # ops the rehearsal ran that the trace does not explain
    host_on_device: set[str] = field(default_factory=set)  # ops the trace runs only on the host, on the device
    composite_skipped: set[str] = field(default_factory=set)  # trace-only ops the target runs as composites
    # trace-only ops the target registers a kernel for, that PyTorch implements as CompositeExplicitAutograd:
    # the stand-in device has no kernel of its own for them and receives their parts (zeros -> zero_)
    stand_in_composite: set[str] = field(default_factory=set)
    # trace-only ops of a checkpoint's storages, which the trace's device runs and the rehearsal's does not
    checkpoint_storage: set[str] = field(default_factory=set)
    # ops a device tensor reaches where the other side's tensors take a tensor subclass's path (the Python
    # recorder's dispatch mode; the rehearsal's wrapper engine): rehearsal-only ones, and, against a wrapper
    # rehearsal, the C++ recorder's trace-only ones
    mode_path: set[str] = field(default_factory=set)

    @property
    def equal(self) -> bool:
        return not (self.trace_only or self.rehearsal_only or self.host_on_device)

    def to_json(self) -> dict[str, Any]:
        return {"target": self.target, "equal": self.equal, "trace_device_ops": len(self.trace_device),
                "rehearsed_ops": len(self.rehearsed), "trace_only": sorted(self.trace_only),
                "rehearsal_only": sorted(self.rehearsal_only), "host_on_device": sorted(self.host_on_device),
                "composite_skipped": sorted(self.composite_skipped),
                "stand_in_composite": sorted(self.stand_in_composite),
                "checkpoint_storage": sorted(self.checkpoint_storage), "mode_path": sorted(self.mode_path)}


def compare_device_ops(trace: Trace, stats: Stats, matrix: Matrix | None = None) -> DeviceOpsAgreement:
    """Compare the device ops of ``trace`` with the ops the rehearsal behind ``stats`` ran. A device op of the
    trace that the rehearsal never ran is excused when ``matrix`` (default: the rehearsal's target) runs it as
    a composite: the device then receives its parts."""
    from opaudit.matrix import load_matrix
    from opaudit.matrix.matrix import normalize

    m = matrix if matrix is not None else load_matrix(stats.target)
    rehearsed = {normalize(o.op) for o in stats.ops.values() if not o.api}
    device = {normalize(o) for o in trace.ops(kinds=("op",))}
    host_only = {normalize(o) for o in trace.host_ops()} - device
    missing = device - rehearsed
    composite = {o for o in missing if m.resolve(o).status == "composite"}
    storage = missing & STORAGE_OPS
    if storage:
        storage |= missing & STORAGE_EMPTY
    stand_in = {o for o in missing - composite - storage if _explicit_composite(o)}
    chosen = choice_ops(trace, m)
    mode = (rehearsed - device) & MODE_PATH
    if stats.engine == "wrapper" and trace.meta.recorder == "native":  # the trace took the device's path
        mode |= (missing - composite - stand_in - storage) & MODE_PATH
    return DeviceOpsAgreement(target=stats.target, trace_device=device, rehearsed=rehearsed,
                              trace_only=missing - composite - stand_in - storage - mode, stand_in_composite=stand_in,
                              checkpoint_storage=storage, mode_path=mode,
                              rehearsal_only=rehearsed - device - EXPLAINED - chosen - mode,
                              host_on_device=(host_only & rehearsed) - COMPOSITE_LEAVES - CHOICE_KERNELS - chosen,
                              composite_skipped=composite)


def _explicit_composite(op: str) -> bool:
    """Whether the installed PyTorch implements ``op`` (normalised name) as CompositeExplicitAutograd."""
    import torch

    name = op if "::" in op else f"aten::{op}"
    try:
        return bool(torch._C._dispatch_has_kernel_for_dispatch_key(name, "CompositeExplicitAutograd"))
    except RuntimeError:
        return False


def choice_ops(trace: Trace, matrix: Matrix) -> set[str]:
    """The ops the device may receive inside the device-selected choices the trace recorded whole (an LSTM's
    fused cells): those of every path of device_selected.toml that applies to the target, or to the
    rehearsal's stand-in device (PrivateUse1 on the installed PyTorch), and the cell loop's unbind."""
    import torch

    from opaudit.matrix.matrix import choice_rules, normalize

    r = matrix.release
    installed = torch.__version__.split("+")[0]
    rules = choice_rules()
    ops: set[str] = set()
    for name in {normalize(rec.op).split(".")[0] for rec in trace.records if rec.kind == "choice"}:
        rule = rules.get(name)
        if rule is None:
            continue
        for p in rule.paths:
            if p.applies(r.dispatch_key, r.torch) or p.applies(STAND_IN_KEY, installed):
                ops |= {normalize(o) for o in p.ops if o != "{op}"}
        if name in CELL_LOOPS:
            ops.add("unbind.int")
    return ops
