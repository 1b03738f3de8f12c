"""A CPU rehearsal of a target: ``with opaudit.rehearsal.simulate("ascend@2.6.0.post5"):``.

The simulated device is the target's (``npu:0``; PrivateUse1 renamed, as the vendor's plugin does), on one
of two engines (native.py): a C++ device whose tensors are real device tensors over host memory, where an
op's first call asks ``native_plan`` how the target runs it and an op it runs natively then runs (and is
counted) in C++, every other call coming to ``handle``; or, where that cannot be built, ``SimTensor``s
(tensor.py), wrapper tensors whose data is a CPU tensor and whose every op below autograd reaches
``SimTensor.__torch_dispatch__``, which hands it to the running Simulator. Either way, every op the device
receives is held to the target's matrix (opaudit.matrix):

- ``native``, ``composite`` (and ``unknown``, where the data says nothing) run on the CPU data;
- ``cpu_fallback`` runs and is counted as the vendor's fallback counts it (the bytes it would copy to the
  host and back; the vendor's warning, once per op);
- ``missing`` raises the error a plugin raises (``strict``), or goes through opaudit's fallback
  (choose.Chooser: a decomposition, whose ops are held to the matrix in turn, else the CPU) and is counted.

The device module (``torch.npu``) answers the common runtime calls (device.SimDevice), the target's
collective backend name is accepted for one process, and device types the script names that are not
the target's (``cuda``, or a built-in type such as ``xpu`` that cannot be renamed) are mapped onto the
simulated device (device._map_devices). A process simulates one device type: the rename cannot be undone.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from opaudit import torchcompat
from opaudit.errors import InputError
from opaudit.fallback.choose import Chooser, cpu_impl, decomposing, decomposition, op_name, run_decomposition
from opaudit.fallback.live import run_fallback
from opaudit.fallback.references import AS_GENERIC_PATH, RehearsalLimit
from opaudit.fallback.roundtrip import argument, signature
from opaudit.fallback.stats import OpStat, Stats, user_line, warn_at_user
from opaudit.matrix.registrations import read as read_registration
from opaudit.rehearsal import memory, native, skew
from opaudit.rehearsal.device import SimDevice
from opaudit.rehearsal.device import enter as enter_device
from opaudit.rehearsal.paths import Detour, detours, limit, own_kernel_detours
from opaudit.rehearsal.tensor import (
    Call,
    SimTensor,
    backend_kernel,
    call_of,
    device_index,
    devices,
    host_data,
    host_tensor,
    run_native,
    run_plain,
    state,
)
from opaudit.tracing.branches import installed as installed_branches
from opaudit.tracing.branches import kernel_instead
from opaudit.tracing.compiled import EagerCompile
from opaudit.tracing.device import use_wrapper

BUILTIN_TYPES = frozenset({"cpu", "cuda", "xpu", "mps", "xla", "hpu", "mtia", "maia", "meta", "ipu", "ve", "lazy",
                           "vulkan", "metal", "fpga", "mkldnn", "opengl", "opencl", "ideep", "hip"})

class SimulatedMissing(NotImplementedError):
    """What a plugin raises for an op it has no kernel for (``strict`` simulation)."""


def sim_device_name(device_type: str) -> str:
    """The name of the simulated device: the target's own, or ``<type>sim`` for a built-in device type."""
    return f"{device_type}sim" if device_type in BUILTIN_TYPES else device_type


# -- the policy -----------------------------------------------------------------------------------------

_NATIVE, _VENDOR_CPU, _MISSING, _DETOUR = 0, 1, 2, 3
_AS_PLANNED = object()  # Simulator._by_dtype: the call's dtypes change nothing
_lock = threading.Lock()  # one simulation at a time in a process


@dataclass
class Plan:
    """How the simulation runs one op, worked out on its first call (Simulator.plans; SimTensor's dispatch
    runs ``call`` itself, the common case)."""

    kind: int
    op: str  # the matrix's name of the op
    status: str
    note: str
    stat: OpStat | None  # native and vendor_cpu ops: their one statistic (opaudit's fallback: one per path)
    check_devices: bool = True  # a CPU tensor beside device tensors is an error, as on a device
    call: Call | None = None  # a native op that writes none of its arguments: run_plain's
    host_results: frozenset[int] = frozenset()  # HOST_RESULTS
    dtype_checked: bool = False  # the target's data limits some dtypes of this op: each call is judged by its dtypes


# ops a device takes CPU tensors in (besides 0-dim ones, which every op takes): copies between the two,
# advanced indexing with CPU indices, and packing a padded batch, whose lengths must be a CPU tensor
# (aten/src/ATen/native/PackedSequence.cpp; pack_padded_sequence moves them there)
CROSS_DEVICE = frozenset({
    "copy_", "_to_copy", "_copy_from", "_copy_from_and_resize", "to", "index.Tensor", "index_put_", "index_put",
    "_index_put_impl_", "set_.source_Tensor", "lift_fresh", "lift_fresh_copy", "_has_compatible_shallow_copy_type",
    "equal", "_pack_padded_sequence", "copy_sparse_to_sparse_",
})
# results a device's kernel makes on the host (index in the op's results): a packed sequence's batch sizes
HOST_RESULTS = {"_pack_padded_sequence": frozenset({1})}


def qualified(op: str) -> str:
    """An op's name with its namespace: ``aten::mm``, ``torchvision::nms`` (the plans name an aten op without it)."""
    return op if "::" in op else f"aten::{op}"


class Simulator:
    """The policy of one simulated target (module doc); a context manager."""

    def __init__(self, target: str, *, strict: bool = False, strict_unknown: bool = False,
                 check_numerics: bool = False,
                 map_devices: Iterable[str] = ("cuda",), force_cpu: Iterable[str] = (), forbid: Iterable[str] = (),
                 device_count: int = 1, plugin_import: bool = False):
        from opaudit.matrix import load_matrix

        self.matrix = load_matrix(target)
        r = self.matrix.release
        if r.device_type in ("cpu", "meta"):
            raise InputError(f"{r.key} is the CPU itself: there is nothing to simulate",
                             hint="simulate an accelerator target, e.g. --simulate ascend")
        self.target = r.key
        self.release = r
        self.device_type = r.device_type
        self.name = sim_device_name(r.device_type)
        self.strict = strict or strict_unknown
        # the statuses that fail as on the device: an op the target lacks; with strict_unknown also one the
        # data knows nothing about (else it runs as if native, and the summary names it)
        self.stops = frozenset(("missing", "unknown") if strict_unknown else ("missing",) if strict else ())
        self.pending: SimulatedMissing | None = None  # a failure inside backward, raised when it returns
        self.check_numerics = check_numerics
        self.device_count = device_count
        self.plugin_import = plugin_import  # the code imports the plugin (import torch_npu): give it a stand-in
        aliases = {a for a in map_devices if a and a != self.name}
        if self.name != r.device_type:
            aliases.add(r.device_type)
        self.aliases = frozenset(aliases)
        self.stats = Stats(self.target, self.name, "simulated")
        # the audit's dtype truth (Matrix.resolve_call): dtypes the device cannot hold at all (a caveat on every op,
        # MPS's float64), and ops whose data limits some dtypes; calls with them are judged by their dtypes
        self.unheld = frozenset(d for c in r.all_caveats() if c.op == "*" and c.kind == "unsupported" and not c.api
                                for d in c.dtypes)
        self.chooser = Chooser(self._has, force_cpu=force_cpu, forbid=forbid, has_base=self._has_base)
        self.plans: dict[int, Plan] = {}  # id(OpOverload) -> its plan (as _calls)
        self._detours = detours(self.matrix)  # ops of the stand-in's path that the target's path never runs
        # ops of the stand-in's path that the target lacks, inside a composite the target registers itself
        self._own = {op: d for op, d in own_kernel_detours(self.matrix).items() if op not in self._detours}
        self._warned: set[str] = set()
        self._undo: list[Any] = []
        self.runs_on = "wrapper"  # the device engine (native.py: "native", "wrapper"), known once it is set up
        self._run_native = run_native
        self._host_tensor = host_tensor
        self._device_index = device_index
        self._host_data = host_data

    # -- what the target has ---------------------------------------------------------------------------
    def _has(self, name: str) -> bool:
        return self.matrix.resolve(name).status != "missing"

    def _has_base(self, base: str) -> bool:
        return self.matrix.resolve(base).status == "native"

    def _plan(self, func: Any) -> Plan:
        name = op_name(func)
        if func.namespace != "aten":
            name = f"{func.namespace}::{name.split('::')[-1]}"
        instead = kernel_instead(name, self.release.dispatch_key)
        if instead is not None:  # (the C++ device's tensors reach _reshape_alias where the target's take view)
            name = instead.instead.removeprefix("aten::")
        detour = self._detours.get(name)
        if detour is not None:  # the target takes another device-selected path here (paths.py)
            stat = self.stats.op(name, "decomposition", detour.why, "composite") if detour.runs else None
            plan = self.plans[id(func)] = Plan(_DETOUR, name, "composite", detour.why, stat)
            return plan
        if func.namespace in ("prims", "profiler", "_c10d_functional", "c10d"):
            support_status, note = "native", ""
        else:
            # an op of another namespace resolves from where it has kernels in this process
            support = self.matrix.resolve(name, read_registration(name) if func.namespace != "aten" else None)
            support_status, note = support.status, support.note
        if name in self.chooser.force_cpu or name.split(".")[0] in self.chooser.force_cpu:
            kind = _MISSING
        elif support_status == "cpu_fallback":
            kind = _VENDOR_CPU
        elif support_status == "missing" or support_status in self.stops:
            kind = _MISSING
        else:
            kind = _NATIVE
        stat = None if kind == _MISSING else self.stats.op(name, "native" if kind == _NATIVE else "vendor_cpu",
                                                             note, support_status)
        call = call_of(func)
        host = HOST_RESULTS.get(name, frozenset())
        checked = kind != _MISSING and any(c.op != "*" and c.kind in ("unsupported", "cpu")
                                           for c in self.matrix.caveats(name))
        plan = self.plans[id(func)] = Plan(kind, name, support_status, note, stat, name not in CROSS_DEVICE,
                                             call if kind == _NATIVE and call.plain and not host and not checked
                                             and not self.unheld else None, host, checked)
        return plan

    def count_factory(self, func: Any) -> None:
        """An allocation that reaches the device key without a device tensor among its arguments (a factory
        called from C++, such as DistributedDataParallel's gradient buckets, or the empty tensor inside a
        composite factory): the device receives it, so it is counted like any op it runs."""
        plan = self.plans.get(id(func)) or self._plan(func)
        if plan.stat is not None:
            plan.stat.calls += 1

    # -- one op -------------------------------------------------------------------------------------
    def handle(self, func: Any, args: tuple, kwargs: dict[str, Any]) -> Any:
        plan = self.plans.get(id(func))
        if plan is None:
            plan = self._plan(func)
        if (plan.dtype_checked or self.unheld) and plan.kind in (_NATIVE, _VENDOR_CPU):
            judged = self._by_dtype(func, plan, args, kwargs)
            if judged is not _AS_PLANNED:
                return judged
        if plan.call is not None and self.runs_on == "wrapper":  # the common case, in one pass over the arguments
            plan.stat.calls += 1  # type: ignore[union-attr]
            return run_plain(func, plan.call, args, kwargs, plan.check_devices)
        if plan.check_devices:
            cpu = self._host_tensor((*args, *kwargs.values()))
            if cpu is not None:
                line = user_line()
                raise RuntimeError(
                    f"Expected all tensors to be on the same device, but found at least two devices, "
                    f"{state.name}:{self._device_index(args, kwargs)} and cpu! [simulated {self.target}: "
                    f"{qualified(plan.op)} got a CPU tensor of shape {list(cpu.shape)}"
                    + (f", at {line}" if line else "")
                    + "]")
        if plan.kind == _NATIVE:
            plan.stat.calls += 1  # type: ignore[union-attr]
            return self._run_native(func, args, kwargs, plan.host_results)
        if plan.kind == _VENDOR_CPU:
            return self._vendor_cpu(func, plan, args, kwargs)
        if plan.kind == _DETOUR:
            return self._detour(func, plan, args, kwargs)
        own = self._own.get(plan.op)
        if own is not None and _reached_inside(own.inside, args, kwargs):
            return self._own_kernel(func, own, args, kwargs)
        return self._missing(func, plan, args, kwargs)

    def _by_dtype(self, func: Any, plan: Plan, args: tuple, kwargs: dict[str, Any]) -> Any:
        """A call judged by its dtypes as the audit judges it (Matrix.resolve_call): with a dtype the target cannot
        hold or does not run for this op, it fails under --strict (naming the op, the dtype and the line), and
        else runs on opaudit's CPU fallback, counted; with one the plugin sends to the CPU, on the vendor's
        fallback. _AS_PLANNED where the dtypes change nothing."""
        used = call_dtypes(func, args, kwargs)
        if not used or (not plan.dtype_checked and self.unheld.isdisjoint(used)):
            return _AS_PLANNED
        support = self.matrix.resolve_call(plan.op, ("|".join(sorted(used)),))
        if support.status == "cpu_fallback" and plan.kind == _NATIVE:
            stat = self.stats.op(plan.op, "vendor_cpu", support.note, "cpu_fallback")
            return self._vendor_cpu(func, Plan(_VENDOR_CPU, plan.op, "cpu_fallback", support.note, stat), args,
                                    kwargs)
        if support.status != "missing":
            return _AS_PLANNED
        if self._arm_taken_elsewhere() is not None:
            return _AS_PLANNED  # torch's own CUDA arm, which this device type never takes: its own arm runs there
        line = user_line()
        dtypes = ", ".join(sorted((used & self.unheld) or used))
        if self.strict:
            self.stats.errors.append(f"{qualified(plan.op)} with {dtypes} is missing on {self.target}"
                                     + (f" (at {line})" if line else ""))
            return self._fail(func, args, kwargs, SimulatedMissing(
                f"{qualified(plan.op)} with {dtypes} does not run on {self.device_type} [simulated {self.target}: "
                f"{support.note}" + (f"; called at {line}" if line else "") + "]"))
        s = self.stats.op(plan.op, "cpu", support.note, "missing")
        s.calls += 1
        return self._fallback(func, "cpu", s, self.stats, args, kwargs)

    def _own_kernel(self, func: Any, detour: Detour, args: tuple, kwargs: dict[str, Any]) -> Any:
        """An op the target lacks, reached inside a composite the target registers itself (paths.py): the
        real device runs the composite in its own kernel, of which this op is a part; the rehearsal runs it on
        its CPU data (the CPU kernel, or opaudit's reference), as one step of that kernel: none of its parts is
        a device op, and it is counted as running on the device, with the reason."""
        s = self.stats.op(detour.op, "native", detour.why, "native")
        s.calls += 1
        return self._run_native(func, args, kwargs)

    def _watch_own_kernels(self) -> Any:
        """Wrappers around the Python entry points of the composites the target registers itself: a call of
        the registered overload marks its ops, and the tensors saved for its backward (``_reached_inside``)."""
        from opaudit.tracing.choices import ChoiceWatch

        overloads = frozenset(d.inside for d in self._own.values())
        engine = self.runs_on

        def on_call(overload: str, args: tuple, kwargs: dict[str, Any], frame: Any, run: Any) -> Any:
            if overload not in overloads:
                return run(*args, **kwargs)

            def pack(t: torch.Tensor) -> torch.Tensor:
                if engine == "native":
                    if t.device.type != state.name:
                        return t
                    saved = t.detach()  # (a new tensor object on the same memory, to carry the mark)
                elif type(t) is not SimTensor:
                    return t
                else:
                    # a new wrapper of the same data: the node holding it must not hold its own output (a cycle)
                    saved = SimTensor(t.elem, t.sim_index)
                saved.sim_inside = overload  # type: ignore[attr-defined]
                return saved

            hooks: Any = torch.autograd.graph.saved_tensors_hooks(pack, _unpack)
            try:
                hooks.__enter__()
            except RuntimeError:  # the program disabled saved-tensor hooks here: its forward is still marked
                hooks = None
            outer = getattr(_inside, "op", None)
            _inside.op = overload
            try:
                return run(*args, **kwargs)
            finally:
                _inside.op = outer
                if hooks is not None:
                    hooks.__exit__(None, None, None)

        watch = ChoiceWatch(on_call)
        watch.install()
        return watch

    def _detour(self, func: Any, plan: Plan, args: tuple, kwargs: dict[str, Any]) -> Any:
        """An op of the stand-in's path that the target's path never runs: run as its decomposition into the
        target's (generic) path, or stop where the stand-in cannot take the real device's path."""
        detour = self._detours[plan.op]
        fn = (AS_GENERIC_PATH.get(plan.op) or decomposition(func)) if detour.runs else None
        if fn is None:
            self.stats.errors.append(f"{qualified(plan.op)}: the stand-in cannot take {self.target}'s path "
                                     f"'{detour.target.name}' (a limit of the rehearsal)")
            raise RehearsalLimit(limit(detour, self.target))
        s = plan.stat
        assert s is not None
        s.calls += 1
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs) if plan.op in AS_GENERIC_PATH else run_decomposition(func, args, kwargs)
        finally:
            s.seconds += time.perf_counter() - t0

    def _vendor_cpu(self, func: Any, plan: Plan, args: tuple, kwargs: dict[str, Any]) -> Any:
        s = plan.stat
        assert s is not None
        if s.op not in self._warned:
            self._warned.add(s.op)
            who = self.release.package or self.release.vendor
            warn_at_user(f"[simulated {who}] the operator '{qualified(s.op)}' is not supported on {self.device_type} "
                         "and falls back to run on the CPU; this may have performance implications")
        s.calls += 1
        t0 = time.perf_counter()
        out = _round_trip(func, s, args, kwargs, self._run_native)
        s.seconds += time.perf_counter() - t0
        return out

    def _arm_taken_elsewhere(self) -> Any:
        """The device branch of torch's Python whose CUDA arm is running (on the caller's stack), where this device
        type takes the other arm: its ops are the audit's to judge by that arm, never a failure here."""
        branch = installed_branches().around()
        return branch if branch is not None and branch.taken_elsewhere(self.device_type, self.release.torch) else None

    def _missing(self, func: Any, plan: Plan, args: tuple, kwargs: dict[str, Any]) -> Any:
        name = plan.op
        branch = self._arm_taken_elsewhere()
        if branch is not None:
            # torch's own CUDA arm (an attention module's fused inference op): this device type takes the other
            # arm, whose ops the audit judges; the rehearsal runs the arm as that arm's stand-in, on the device
            s = self.stats.op(name, "native", branch.describe(self.device_type), "native")
            s.calls += 1
            return self._run_native(func, args, kwargs)
        if plan.status in self.stops:
            line = user_line()
            what = "is missing on" if plan.status == "missing" else "is unknown (the data says nothing) on"
            self.stats.errors.append(f"{qualified(name)} {what} {self.target}" + (f" (at {line})" if line else ""))
            return self._fail(func, args, kwargs, SimulatedMissing(
                f"Could not run '{qualified(name)}' with arguments from the '{self.name}' backend. This could be "
                f"because the operator doesn't exist for this backend, or was omitted during the selective/custom "
                f"build process (if using custom build). [simulated {self.target}: "
                + (plan.note or "missing" if plan.status == "missing" else
                   f"unknown, the data says nothing about it{': ' + plan.note if plan.note else ''} "
                   "(--strict-unknown stops here)")
                + (f"; called at {line}" if line else "") + "]"))
        choice = self.chooser.confirm(func, args, kwargs)
        path = "cpu" if choice.path == "decomposition" and decomposing(func) else choice.path
        s = self.stats.op(name, path, choice.reason, plan.status)
        s.calls += 1
        if path == "forbidden":
            line = s.source or user_line()
            self.stats.errors.append(f"{qualified(name)}: fallback forbidden on {self.target}")
            return self._fail(func, args, kwargs, SimulatedMissing(
                f"Could not run '{qualified(name)}' with arguments from the '{self.name}' backend [simulated "
                f"{self.target}: missing, and opaudit's fallback is forbidden for it"
                + (f"; called at {line}" if line else "") + "]"))
        return self._fallback(func, path, s, self.stats, args, kwargs)

    def _fallback(self, func: Any, path: str, s: OpStat, stats: Stats, args: tuple, kwargs: dict[str, Any]) -> Any:
        return run_fallback(func, path, s, stats, self.target, args, kwargs,
                            lambda: _round_trip(func, s, args, kwargs, self._run_native), check=self.check_numerics,
                            host=self._host_data,
                            passthrough=(SimulatedMissing, RehearsalLimit))

    def _fail(self, func: Any, args: tuple, kwargs: dict[str, Any], error: SimulatedMissing) -> Any:
        """Raise ``error``, or, inside the autograd engine, raise it when the engine returns. An exception
        that leaves a backward op unwinds through the engine's stream guard, which calls the simulated
        device's guard in Python with the error pending and aborts the process (std::terminate: no message,
        no statistics). There the op runs on opaudit's fallback, counted nowhere, and the backward call
        raises ``error`` once the engine is done (device.py: _raise_after_backward)."""
        if torch._C._current_autograd_node() is None:
            raise error
        if self.pending is None:
            self.pending = error
        scratch = Stats(self.target, self.device_type, "simulated")
        return self._fallback(func, "cpu", scratch.op(op_name(func), "cpu"), scratch, args, kwargs)

    # -- lifetime -------------------------------------------------------------------------------------
    def __enter__(self) -> Simulator:
        with _lock:
            if state.sim is not None:
                raise InputError(f"a simulation of {state.sim.target} is already running in this process")
            self.runs_on = self.stats.engine = setup_device(self.name)
            state.count = self.device_count
            state.current = 0
            if self.runs_on == "native":
                self._run_native, self._host_tensor = native.run_native, native.host_tensor
                self._device_index, self._host_data = native.device_index, native.host_data
                native.ext.set_device_count(self.device_count)
                native.ext.set_device(0)
                native.ext.set_policy(self.native_plan, self.handle)
                native.ext.set_held_dtypes([getattr(torch, d) for d in sorted(self.unheld) if hasattr(torch, d)])
                self.stats.refresh = self.sync_counts
            self._undo = enter_device(self)
            if self.runs_on == "native":
                self._undo.insert(0, self._native_done)
            if self._own:
                self._undo.append(self._watch_own_kernels().remove)
            self._undo.append(skew.watch(self))  # the APIs the target's PyTorch lacks (rehearsal/skew.py)
            # torch.compile runs eagerly: the rehearsal checks the device's eager ops (tracing/compiled.py)
            compiled = EagerCompile().__enter__()
            self._undo.append(lambda: self._compiled_done(compiled))
            state.sim = self
        return self

    # -- the C++ device (native.py) ---------------------------------------------------------------------
    def native_plan(self, func: Any) -> tuple[int, bool, int]:
        """How the C++ device runs ``func`` from its first call on: (1: in C++, as the target's native kernel;
        2: through ``handle``), whether a host tensor beside device tensors is an error, and the results its
        kernel makes on the host (a bit per result)."""
        plan = self.plans.get(id(func)) or self._plan(func)
        in_cpp = plan.kind == _NATIVE and cpu_impl(func) is func and not plan.dtype_checked
        return (1 if in_cpp else 2, plan.check_devices, sum(1 << i for i in plan.host_results))

    def sync_counts(self) -> None:
        """Add the calls the C++ device ran and counted since the last sync to the statistics."""
        for op, calls in native.ext.take_counts():
            if isinstance(op, str):
                base, _, overload = op.partition(".")
                op = getattr(getattr(torch.ops.aten, base), overload or "default")
            plan = self.plans.get(id(op))
            if plan is None:
                plan = self._plan(op)
                if plan.stat is not None and not plan.stat.calls:
                    plan.stat.source = None  # counted in C++ (an allocation, a view, set_): no line to name
            if plan.stat is not None:
                plan.stat.calls += calls

    def _native_done(self) -> None:
        native.ext.set_held_dtypes([])
        self.sync_counts()
        self.stats.refresh = None
        native.ext.set_policy(None, None)

    def _compiled_done(self, compiled: EagerCompile) -> None:
        compiled.__exit__(None, None, None)
        warning = compiled.warning()
        if warning:
            self.stats.warnings.append(warning)

    def __exit__(self, *exc: Any) -> None:
        with _lock:
            for undo in reversed(self._undo):
                undo()
            self._undo = []
            state.sim = None
        self.stats.finish()


_inside = threading.local()  # .op: the registered overload whose call runs on this thread (Simulator._own)


def _unpack(t: torch.Tensor) -> torch.Tensor:
    return t


def _reached_inside(overload: str, args: tuple, kwargs: dict[str, Any]) -> bool:
    """Whether an op runs inside a call of ``overload``: in its forward (on this thread), or in its backward
    (a tensor saved for it among the arguments)."""
    if getattr(_inside, "op", None) == overload:
        return True
    for a in (*args, *kwargs.values()):
        if getattr(a, "sim_inside", None) == overload:
            return True
    return False


def _bytes(x: Any) -> int:
    if isinstance(x, torch.Tensor):
        return x.numel() * x.element_size()
    if isinstance(x, (list, tuple)):
        return sum(_bytes(i) for i in x)
    if isinstance(x, dict):
        return sum(_bytes(i) for i in x.values())
    return 0


def _round_trip(func: Any, s: OpStat, args: tuple, kwargs: dict[str, Any], run: Any = run_native) -> Any:
    """Run ``func`` on the CPU data and count what a device's CPU round trip would move: its inputs to the
    host, its results and the arguments it writes back."""
    s.to_host += _bytes((args, kwargs))
    out = run(func, args, kwargs)
    s.to_device += _bytes(out) + sum(_bytes(argument(args, kwargs, p, n)) for p, n in signature(func).writes)
    return out


# -- the device, once per process ---------------------------------------------------------------------

_setup: dict[str, Any] = {}


def setup_device(name: str) -> str:
    """Rename PrivateUse1 to ``name`` and register what a plugin registers (once per process); returns the
    engine the device runs on: ``native`` (native.py: the C++ device, unless ``$OPAUDIT_REHEARSAL_DEVICE=wrapper``
    or it cannot be built) or ``wrapper`` (tensor.SimTensor)."""
    if _setup.get("name") == name:
        return _setup["engine"]
    torchcompat.require("a simulated device (the CUDA path of scan and trace, run --simulate, fix --verify)",
                        torchcompat.SIMULATED_DEVICE,
                        "on this torch: opaudit scan/trace --device cpu (the CPU path), lint, fix, matrix, report; "
                        "or a venv with a newer torch for the rehearsal")
    current = torch._C._get_privateuse1_backend_name()
    if _setup or current != "privateuseone":
        raise InputError(f"this process already has a {current!r} device: a process simulates one device type",
                         hint="run each simulation in its own process (opaudit run --simulate does)")
    module = SimDevice(name)
    lib = torch.library.Library("_", "IMPL")
    if native.wanted() and native.load() is not None:
        engine = "native"
        torch.utils.rename_privateuse1_backend(name)
        torch.utils.generate_methods_for_privateuse1_backend()
        torch._register_device_module(name, module)
        memory.native = native.ext  # (the device's allocator counts its memory, in and between rehearsals)
    else:
        from torch.utils import backend_registration

        if not hasattr(backend_registration, "_setup_privateuseone_for_python_backend"):  # (torch 2.7 lacks it)
            raise InputError(f"the rehearsal's wrapper engine needs a newer torch than {torch.__version__} (a Python "
                             "backend on PrivateUse1: torch.utils.backend_registration), and its C++ device is not "
                             f"in place: {native.reason() or 'OPAUDIT_REHEARSAL_DEVICE=wrapper'}",
                             hint="install a C++ compiler (g++) and ninja, so the C++ device builds "
                                  "(opaudit doctor --build)")
        _setup_privateuseone_for_python_backend = backend_registration._setup_privateuseone_for_python_backend
        engine = "wrapper"
        _setup_privateuseone_for_python_backend(name, backend_module=module)
        lib.fallback(backend_kernel, "PrivateUse1")
        # what reaches the key with the Python key excluded (torch.tensor(data, device=...)) needs kernels of its
        # own: the boxed fallback cannot be called from there
        kernels = torch.library.Library("aten", "IMPL")
        for op in _BACKEND_OPS:
            packet, _, overload = op.partition(".")
            overload_ = getattr(getattr(torch.ops.aten, packet), overload or "default")
            kernels.impl(op, functools.partial(backend_kernel, overload_), "PrivateUse1")
        _setup["kernels"] = kernels
        lib.fallback(torch.library.fallthrough_kernel, "AutocastPrivateUse1")  # (the C++ device registers its own)
        use_wrapper(SimTensor)  # a recording hands the device's ops straight to it (tracing.device)
    state.name = name
    devices.clear()
    _setup.update(name=name, lib=lib, module=module, engine=engine)
    return engine


_BACKEND_OPS = ("empty.memory_format", "empty_strided", "_copy_from", "_copy_from_and_resize", "_to_copy",
                "copy_", "_local_scalar_dense", "resize_", "as_strided", "view", "detach", "alias")


@contextmanager
def simulate(target: str, **options: Any) -> Iterator[Simulator]:
    """Run the body as if on ``target`` (module doc); options as Simulator's."""
    with Simulator(target, **options) as sim:
        yield sim


def active() -> Simulator | None:
    """The simulation running in this process, if any."""
    return state.sim


def call_dtypes(func: Any, args: tuple, kwargs: dict[str, Any]) -> frozenset[str]:
    """The dtypes a call puts on the device, as the trace names them: its device tensors' and its dtype arguments';
    a host tensor's where no dtype argument says what it becomes (a copy of a float64 host tensor to the device)."""
    device: set[str] = set()
    host: set[str] = set()
    named: set[str] = set()

    def visit(x: Any) -> None:
        if isinstance(x, torch.Tensor):
            if x.device.type != "cpu":
                device.add(str(x.dtype).removeprefix("torch."))
            elif x.dim() > 0:  # (a 0-dim host tensor, a Python number, goes into any op on every device)
                host.add(str(x.dtype).removeprefix("torch."))
        elif isinstance(x, torch.dtype):
            named.add(str(x).removeprefix("torch."))
        elif isinstance(x, (list, tuple)):
            for v in x:
                visit(v)

    for v in (*args, *kwargs.values()):
        visit(v)
    return frozenset(device | named | (set() if named else host))
