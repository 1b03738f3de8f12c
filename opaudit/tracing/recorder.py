"""The recorder: a TorchDispatchMode that counts every op a backend receives, and where it came from.

It sits below autograd (after CompositeImplicitAutograd decomposition: the level where a vendor
registers kernels) and aggregates calls by (op, kind, phase, dtypes, module, line, choice). Wrappers
around a few Python entry points (choices.py) note the composites whose kernel PyTorch picks per
device.

Phase: ``backward`` while the autograd engine runs a node; ``optimizer`` inside ``Optimizer.step``
(its profiler record) or below torch.optim / the grad scalers / clip_grad; ``forward`` otherwise.
Backward ops are attributed to the module and line of the forward op that created their autograd
node: in forward, ``_get_sequence_nr() - 1`` is the sequence number of the node the current op just
created; in backward, ``_current_autograd_node()._sequence_nr()`` looks it up again.
"""

from __future__ import annotations

import linecache
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _pop_mode_temporarily
from torch.utils._python_dispatch import _get_current_dispatch_mode as _current_dispatch_mode

from opaudit.matrix.amp import OP as AUTOCAST_OP
from opaudit.matrix.registrations import read as read_registration
from opaudit.tracing import typed
from opaudit.tracing.apis import ApiWatch
from opaudit.tracing.attribution import HINT_NONE, HINT_OPTIMIZER, ModuleStack, display_path, source_locator
from opaudit.tracing.autocast import RegionWatch, policy_dtypes
from opaudit.tracing.choices import ChoiceWatch
from opaudit.tracing.compiled import EagerCompile
from opaudit.tracing.device import wrapper as wrapper_device
from opaudit.tracing.scalars import ScalarOracle
from opaudit.tracing.shapes import shapes as shapes_of

Tensor = torch.Tensor
# the caller of the dispatch: _getframe(0).f_back, since _getframe(1) raises on an autograd device thread,
# where __torch_dispatch__ is the first Python frame
_getframe = sys._getframe
_grad_enabled = torch._C.is_grad_enabled
_current_node = torch._C._current_autograd_node
_next_sequence_nr = torch._C._autograd._get_sequence_nr

# what describe() says to do with an OpOverload
_RECORD, _NOISE, _RECORD_FN_ENTER, _RECORD_FN_EXIT, _SCALAR, _META_FAST, _DECOMPOSE = range(7)
_NOISE_NAMESPACES = frozenset({"profiler", "prim", "prims"})
# aten ops that ask the backend a question and run no kernel: a PrivateUse1 backend answers them itself (the
# rehearsal's C++ device does), where CUDA's answer is composite and never reaches a recording
_QUERIES = frozenset({"aten::_has_compatible_shallow_copy_type"})
_DTYPE = {d: str(d).removeprefix("torch.") for d in vars(torch).values() if isinstance(d, torch.dtype)}
_TICK = 4096
_REDISPATCH = object()  # native_handle's answer: run the op below, as recorded
_SEQ_LIMIT = 2_000_000


class TraceStopped(BaseException):
    """Raised inside the traced code when ``max_ops`` or ``timeout`` is reached.

    A BaseException, so that a script's own ``except Exception`` does not swallow it.
    """


class Recording:
    """The state of one recording; ``run.build_trace`` turns it into a Trace."""

    def __init__(
        self,
        *,
        root: torch.nn.Module | None = None,
        shapes: bool = False,
        scalar_oracle: ScalarOracle | None = None,
        max_ops: int | None = None,
        timeout: float | None = None,
        progress: Callable[[int], None] | None = None,
        split_host: bool = False,
        python_only: bool = False,
    ):
        self.counts: dict[tuple, int] = {}
        # tracing on a device other than the CPU (simulated cuda, meta): tell the ops on host tensors apart
        self.split_host = split_host
        self.seq: dict[int, tuple] = {}
        self.modules = ModuleStack(root)
        self.locator = source_locator()
        self.shapes = shapes
        self.oracle = scalar_oracle
        self.within: str | None = None
        self.mode: TorchDispatchMode | None = None  # the Python engine's dispatch mode while it records
        self.native: Any = None  # the C++ engine (native.py) while it records
        self.engine: str | None = None  # "native" or "python", once recording
        self.engine_reason: str | None = None  # why not native, when not
        self.python_only = python_only
        self.amp_low: torch.dtype | None = None  # set while a forward pass runs under autocast
        # the device types whose autocast regions are CUDA's (the simulated device's name too, on the simulator)
        self.cuda_names: set[str] = {"cuda"}
        # a re-trace as another device runs autocast (matrix/amp.py outcome): dtype named ("" none) -> "off" or dtype
        self.autocast_outcome: dict[str, str] = {}
        self.record_fns: list[bool] = []  # one per open profiler record: is it an optimizer's?
        self.optimizer_depth = 0
        self.optimizer_module: str | None = None
        self.optimizer_types: dict[str, str] = {}
        self.total = 0
        self.noise = 0
        self.unattributed = 0
        self.devices: set[str] = set()
        self._info: dict[Any, tuple] = {}
        self.registrations: dict[str, Any] = {}  # custom op -> matrix.registrations.Registration
        self.compiled = EagerCompile()  # torch.compile runs eagerly while recording (compiled.py)
        self.max_ops = max_ops
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.progress = progress
        self.stopped: str | None = None
        self.started = time.perf_counter()
        self.bridged_before: dict[tuple[str, str], int] = {}  # the device's wide calls before (device.bridged_calls)
        self.ended: float | None = None
        self._limit = _TICK if max_ops is None else min(_TICK, max_ops)

    # -- the hot path ---------------------------------------------------------------------------
    def add(self, name: str, kind: str, args, kwargs, frame) -> None:
        if self.total >= self._limit:
            self._tick()  # progress, and the limits: raises TraceStopped before this op runs
        self.total += 1
        node = _current_node()
        if node is not None:
            phase = "backward"
            attr = self.seq.get(node._sequence_nr())
            if attr is None:
                attr = self._unattributed(node)
            module, loc, within = attr
        else:
            phase, module, loc, branch = self._where(frame)
            within = self.within or branch
            if phase == "forward" and _grad_enabled():
                self.seq.setdefault(_next_sequence_nr() - 1, (module, loc, within))
        sig = _signature(args, kwargs)
        if name in _CASTS:
            sig = _cast_signature(name, sig, args, kwargs)
        elif not sig and kwargs and kwargs.get("dtype").__class__ is torch.dtype:
            sig = (kwargs["dtype"],)  # a factory's dtype= (zeros, full, arange; one its default is not): judged so
        key = (name, kind, phase, sig, module, loc, within, shapes_of(args, kwargs) if self.shapes else None,
               _placement(args, kwargs) if self.split_host else DEVICE)
        counts = self.counts
        counts[key] = counts.get(key, 0) + 1

    def _where(self, frame) -> tuple[str, str | None, tuple | None, str | None]:
        """(phase, module, location, device branch) of an op issued outside the autograd engine. On the C++
        engine, from the current frame: the frames between it and ``frame`` are opaudit's own (a wrapper's), which
        the walk to the user's line passes over."""
        if self.native is not None:
            return self.native.where()
        loc, hint, branch = self.locator.locate(frame)
        if hint == HINT_NONE and not self.optimizer_depth:
            stack = self.modules.stack
            return "forward", stack[-1] if stack else None, loc, branch
        if self.optimizer_depth or hint == HINT_OPTIMIZER:
            return "optimizer", self.optimizer_module if self.optimizer_depth else None, loc, branch
        return "backward", None, loc, branch

    def choice(self, name: str, args, kwargs, frame, run):
        """A call of a device-selected composite (see choices.py).

        Recorded once, as a ``choice``; the ops it runs are what this machine picks (the CPU's
        oneDNN RNN, meta's math attention), so the recorder steps aside while they run, which also
        spares the dispatch round trip for each of them. The autograd nodes they create are tied
        to the choice, so their backward ops are recorded with ``within`` set to it.
        """
        native = self.native  # (the checks and the pause inline: this runs for every batch norm, dropout, ...)
        if self.within is not None or not (native.active() if native is not None else
                                           _current_dispatch_mode() is self.mode):
            return run(*args, **kwargs)
        phase, module, loc, _ = self._where(frame)
        first_node = _next_sequence_nr()
        self.within = name
        if native is not None:
            before = native.pause(True)
            try:
                result = run(*args, **kwargs)
            finally:
                native.pause(before)
                self.within = None
        else:
            try:
                with _pop_mode_temporarily():
                    result = run(*args, **kwargs)
            finally:
                self.within = None
        for seq in range(first_node, _next_sequence_nr()):
            self.seq.setdefault(seq, (module, loc, name))
        if not (args and result is args[0]):  # an eval-mode dropout returns its input: nothing ran
            dtypes, where = self.call_signature(args, kwargs)
            if self.amp_low is not None:
                dtypes = policy_dtypes(name, dtypes, self.amp_low)
            key = (name, "choice", phase, dtypes, module, loc, None, shapes_of(args, kwargs) if self.shapes else None,
                   where)
            self.counts[key] = self.counts.get(key, 0) + 1
        return result

    def _unattributed(self, node) -> tuple:
        # AccumulateGrad (one per parameter) has no sequence number of its own: name its parameter's module
        variable = getattr(node, "variable", None)
        if variable is not None:
            return (self.modules.owner_of(variable), None, None)
        self.unattributed += 1
        return (None, None, None)

    def _tick(self) -> None:
        if self.max_ops is not None and self.total >= self.max_ops:
            self.stopped = f"stopped after {self.total:,} ops (--max-ops {self.max_ops:,})"
            raise TraceStopped(self.stopped)
        if self.deadline is not None and time.monotonic() >= self.deadline:
            self.stopped = f"stopped after {time.perf_counter() - self.started:.1f} s (--timeout)"
            raise TraceStopped(self.stopped)
        if self.progress is not None:
            self.progress(self.total)
        if len(self.seq) > _SEQ_LIMIT:  # long scripts: forget the oldest half of the forward nodes
            for k in list(self.seq)[: _SEQ_LIMIT // 2]:
                del self.seq[k]
        nxt = self.total + _TICK
        self._limit = nxt if self.max_ops is None else min(nxt, self.max_ops)

    # -- op classification (once per OpOverload) ---------------------------------------------------
    def describe(self, func, device: str | None) -> tuple:
        """(what to do, op key, kind, callable) for an OpOverload; computed once per overload. ``device``: the type
        of its first tensor argument's device (the devices the traced code used, sampled once per overload)."""
        if device is not None:
            self.devices.add(device)
        ns = func.namespace
        schema_name = func._schema.name
        name = f"{schema_name}.{func._overloadname}"
        if schema_name in ("profiler::_record_function_enter_new", "profiler::_record_function_enter"):
            what = _RECORD_FN_ENTER
        elif schema_name == "profiler::_record_function_exit":
            what = _RECORD_FN_EXIT
        elif ns in _NOISE_NAMESPACES or schema_name in _QUERIES:
            what = _NOISE
        elif schema_name == "aten::_local_scalar_dense":
            what = _SCALAR
        elif _meta_fast_path(func) is not None:
            what = _META_FAST
        else:
            what = _RECORD
        kind = "op" if ns == "aten" else "custom"
        if kind == "custom" and what == _RECORD:  # where it has kernels, read once: the matrix resolves it by them
            reg = read_registration(name)
            if reg is not None and "CompositeImplicitAutograd" in reg.keys:
                what = _DECOMPOSE  # (inference mode) a backend receives its aten ops, not the op itself
            elif reg is not None:
                self.registrations[name] = reg
        # the C++ entry point itself: OpOverload.__call__ would only add a Python frame per op
        info = (what, name, kind, getattr(func, "_op", func))
        self._info[func] = info
        return info

    # -- the C++ engine (native.py, recorder.cpp) ------------------------------------------------------
    def plan(self, func, device: str | None) -> tuple[int, str, str]:
        """recorder.cpp's question on an op's first call: (0 count it, 1 noise, 2 ask ``native_handle``), its key
        and its kind."""
        info = self._info.get(func) or self.describe(func, device)
        what = info[0]
        return (0 if what == _RECORD else 1 if what == _NOISE else 2), info[1], info[2]

    def native_handle(self, func, args, kwargs):
        """What the Python recorder's dispatch does for an op that is not simply counted (recording paused):
        the result, or ``_REDISPATCH`` for recorder.cpp to run the op below."""
        if self._info[func][0] == _DECOMPOSE:
            with self.resumed():
                return func.decompose(*args, **kwargs)
        return self.special(func, args, kwargs, _getframe(0).f_back)

    def special(self, func, args, kwargs, frame):
        """Either engine's handling of an op described as neither counted nor decomposed: meta shortcuts,
        profiler markers and noise, .item(); the result, or ``_REDISPATCH`` to run the op itself."""
        what, name, kind = self._info[func][:3]
        if what == _META_FAST:
            self.add(name, kind, args, kwargs, frame)
            result = _meta_fast_path(func)(args, kwargs)
            return _REDISPATCH if result is _SLOW else result
        self.noise += what != _SCALAR
        if what == _RECORD_FN_ENTER:
            self.enter_record_function(str(args[0]) if args else "")
        elif what == _RECORD_FN_EXIT:
            self.exit_record_function()
        elif what == _SCALAR:
            # .item(): a data-dependent read, which meta and fake tensors cannot answer
            self.add(name, kind, args, kwargs, frame)
            if self.oracle is not None:
                return self.oracle.item(func, args, kwargs, frame)
        return _REDISPATCH

    def call_signature(self, args, kwargs) -> tuple[tuple, str]:
        """(dtypes, placement) of a call made from Python (a choice's, an API's): in C++ on the C++ engine, where
        reading a tensor's attributes does not go through a TorchFunctionMode (the default device's)."""
        if self.native is not None:
            sig, where = self.native.call_signature(args, kwargs)
            return sig, where if self.split_host else DEVICE
        return _signature(args, kwargs), _placement(args, kwargs) if self.split_host else DEVICE

    def note_autocast(self, device_type: str, dtype: str | None, frame) -> None:
        """An autocast region entered (autocast.RegionWatch): for a device type that stands for CUDA here
        (:attr:`cuda_names`), an ``api`` record of ``torch::autocast`` with the dtype the program named (none: the
        device's default), at the program's line."""
        if device_type in self.cuda_names:
            self._note_api(AUTOCAST_OP, (dtype,) if dtype else (), frame)

    def autocast_instead(self, device_type: str, dtype: str | None) -> str | None:
        """How a region the program enters for CUDA runs in this recording, where it follows another device's
        autocast (:attr:`autocast_outcome`): ``"off"``, a dtype name, or None (as the program asks)."""
        return self.autocast_outcome.get(dtype or "") if device_type in self.cuda_names else None

    def note_legacy(self, cls: Any, frame) -> None:
        """A CUDA typed tensor class used (``torch.cuda.FloatTensor(n)``, ``x.type(torch.cuda.HalfTensor)``,
        rehearsal/legacy.py): an ``api`` record of :data:`typed.OP` with the class's dtype, at the program's line,
        which the audit judges by whether the target's plugin has such classes (vendors.toml ``legacy_types``)."""
        self._note_api(typed.OP, (cls.dtype,), frame)

    def _note_api(self, op: str, dtypes: tuple, frame) -> None:
        """One call of an API opaudit watches itself (not an op of the dispatcher), at the program's line of
        ``frame``: counted where an op issued now would be recorded, outside a choice's own ops."""
        if self.within is not None or not self.is_active():
            return
        phase, module, loc, _ = self._where(frame)
        key = (op, "api", phase, dtypes, module, loc, None, shapes_of((), {}) if self.shapes else None, DEVICE)
        self.counts[key] = self.counts.get(key, 0) + 1

    def is_active(self) -> bool:
        """Whether an op issued now on this thread is recorded (not in a choice's own ops, nor in a Python kernel)."""
        if self.native is not None:
            return self.native.active()
        return self.mode is not None and _current_dispatch_mode() is self.mode

    @contextmanager
    def resumed(self) -> Iterator[None]:
        before = self.native.pause(False)
        try:
            yield
        finally:
            self.native.pause(before)

    def enter_record_function(self, name: str) -> None:
        is_optimizer = name.startswith("Optimizer.")
        self.record_fns.append(is_optimizer)
        if is_optimizer:
            self.optimizer_depth += 1
            # "Optimizer.step#AdamW.step" -> the optimizer's class
            cls = name.partition("#")[2].rpartition(".")[0] or name
            self.optimizer_module = f"<{cls}>"
            self.optimizer_types.setdefault(self.optimizer_module, cls)
            if self.native is not None:
                self.native.set_optimizer(self.optimizer_depth, self.optimizer_module)

    def exit_record_function(self) -> None:
        if self.record_fns and self.record_fns.pop():
            self.optimizer_depth -= 1
            if self.native is not None:
                self.native.set_optimizer(self.optimizer_depth, self.optimizer_module)

    # -- result -------------------------------------------------------------------------------------
    def records(self):
        """(records, modules, sources) in plain form; run.py wraps them into a Trace."""
        from opaudit.tracing.schema import OpRecord

        locations: dict[tuple, str] = {}
        sources: dict[str, str] = {}
        used_modules: set[str] = set()
        merged: dict[tuple, int] = {}
        for (name, kind, phase, dtypes, module, loc, within, shapes, where), calls in self.counts.items():
            src = None
            if loc is not None:
                src = locations.get(loc)
                if src is None:
                    filename, line = self.locator.resolve(loc)
                    src = locations[loc] = f"{display_path(filename)}:{line}"
                    code = linecache.getline(filename, line).strip()
                    if code:
                        sources[src] = code
            if module is not None:
                used_modules.add(module)
            names = tuple(d if isinstance(d, str) else _DTYPE[d] for d in dtypes)
            # one record per distinct row: two bytecode offsets of one line, or a dtype object and its name
            # (the choice's autocast policy answers names), are one key here
            key = (name, kind, phase, names, module, src, within, shapes, where)
            merged[key] = merged.get(key, 0) + calls
        out = [OpRecord(name, kind, phase, names, module, src, within, calls, shapes, where)
               for (name, kind, phase, names, module, src, within, shapes, where), calls in merged.items()]
        out.sort(key=lambda r: (_PHASE_ORDER.get(r.phase, 9), r.op, -r.calls, r.module or "", r.source or "", r.where,
                               r.dtypes))
        types = {**self.modules.types, **self.optimizer_types}
        modules: dict[str, str] = {}
        for path in used_modules:  # each used module and its ancestors, for a tree view
            parts = path.split(".")
            for i in range(len(parts), -1, -1):
                p = ".".join(parts[:i])
                if p in types:
                    modules.setdefault(p, types[p])
        return out, modules, sources


_PHASE_ORDER = {"forward": 0, "backward": 1, "optimizer": 2}


def _first_device(args) -> str | None:
    for a in args:
        if isinstance(a, Tensor):
            return a.device.type
    return None


def _signature(args, kwargs) -> tuple:
    """The dtypes of a call's tensor arguments, in order: dtype objects (names only once, in
    ``records()``: this runs for every op), and ``"float32[]"`` for a tensor list."""
    sig: list[Any] = []
    for a in args:
        if isinstance(a, Tensor):
            sig.append(a.dtype)
        elif (a.__class__ is list or a.__class__ is tuple) and a and (isinstance(a[0], Tensor) or a[0] is None):
            names = _list_signature(a)
            if names is not None:
                sig.append(names)
    if kwargs:
        for a in kwargs.values():
            if isinstance(a, Tensor):
                sig.append(a.dtype)
    return tuple(sig)


DEVICE, HOST, MIXED = "device", "host", "mixed"


def _placement(args, kwargs) -> str:
    """Where a call's tensors live, when tracing on a device other than the CPU: ``device``, ``host`` (every
    tensor on the CPU, and no device argument naming another: what runs on the host as it would beside a
    GPU) or ``mixed`` (both: 0-dim host scalars beside device tensors, copies between host and device,
    CPU index tensors). A factory without a device argument creates on the CPU, the default device."""
    device = host = False
    for a in args:
        if isinstance(a, Tensor):
            if a.is_cpu:
                host = True
            else:
                device = True
        elif (a.__class__ is list or a.__class__ is tuple) and a and (isinstance(a[0], Tensor) or a[0] is None):
            for t in a:
                if isinstance(t, Tensor):
                    if t.is_cpu:
                        host = True
                    else:
                        device = True
    if kwargs:
        for k, a in kwargs.items():
            if isinstance(a, Tensor):
                if a.is_cpu:
                    host = True
                else:
                    device = True
            elif k == "device" and a is not None:
                if torch.device(a).type == "cpu":
                    host = True
                else:
                    device = True
    if device:
        return MIXED if host else DEVICE
    return HOST


# casts, as a backend receives them (``to`` and the autocast casts are CompositeImplicitAutograd and come down
# as ``_to_copy``): their output dtype is not among their arguments', so it goes on the cast tensor's entry
# (``float32->bfloat16``)
_CASTS = frozenset({"aten::_to_copy.default", "aten::view.dtype"})


def _cast_signature(name: str, sig: tuple, args, kwargs) -> tuple:
    if not sig or not args or not isinstance(args[0], Tensor):
        return sig
    src = args[0].dtype
    out = (args[1] if len(args) > 1 else kwargs.get("dtype")) if name == "aten::view.dtype" else kwargs.get("dtype")
    if not isinstance(out, torch.dtype) or out == src:
        return sig
    return (f"{_DTYPE[src]}->{_DTYPE[out]}", *sig[1:])


def _list_signature(seq) -> str | None:
    dts = {_DTYPE[t.dtype] for t in seq if isinstance(t, Tensor)}
    if not dts:
        return None
    return "|".join(sorted(dts)) + "[]"


class _OpRecorder(TorchDispatchMode):
    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # torch >= 2.9 otherwise wraps __torch_dispatch__ in torch._dynamo.disable: a 2 s import on
        # first use and a wrapper on every op, for a mode that never runs under torch.compile
        return False

    def __init__(self, rec: Recording):
        super().__init__()
        self.rec = rec
        self._info = rec._info.get  # bound once: the lookups below run for every op
        self._add = rec.add
        # on the rehearsal's wrapper device (tracing.device.use_wrapper), an op of its tensors goes from here
        # straight to the device's dispatch, which is where the dispatcher would send it next: one Python entry per op
        wrapper = wrapper_device()
        self._device = (wrapper,) if wrapper is not None else None
        self._device_dispatch = getattr(wrapper, "__torch_dispatch__", None)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = {}
        info = self._info(func)
        if info is not None and info[0] == _RECORD:
            self._add(info[1], info[2], args, kwargs, _getframe(0).f_back)
            if types == self._device:
                return self._device_dispatch(func, types, args, kwargs)
            return info[3](*args, **kwargs)
        rec = self.rec
        if info is None:
            info = rec.describe(func, _first_device(args))
        what = info[0]
        if what == _RECORD:
            self._add(info[1], info[2], args, kwargs, _getframe(0).f_back)
            return func(*args, **kwargs)
        if what == _DECOMPOSE:
            with self:
                return func.decompose(*args, **kwargs)
        result = rec.special(func, args, kwargs, _getframe(0).f_back)
        if result is not _REDISPATCH:
            return result
        return func(*args, **kwargs)


# Meta tensors hold no data, so some ops need no kernel on them: torch's Python meta kernels for
# an optimizer's foreach updates take ~50 ms per call on a 7B model, and its state init
# (zeros_like per parameter) ~0.1 ms per call. On meta arguments these shortcuts give the same
# result (shapes, dtypes, strides) at once; on anything else they step aside (_SLOW).
_SLOW = object()


def _meta_fast_path(func) -> Callable | None:
    schema = func._schema
    name = schema.name
    if name in ("aten::zeros_like", "aten::ones_like", "aten::empty_like") and func._overloadname == "default":
        def like(args, kwargs):
            device = kwargs.get("device")
            if args[0].device.type != "meta" or (device is not None and torch.device(device).type != "meta"):
                return _SLOW
            return torch.ops.aten.empty_like.default(*args, **kwargs)
        return like
    if name == "aten::_grouped_mm":
        def grouped(args, kwargs):
            # torch's meta kernel accepts bf16 only, the CPU kernel and CUDA's fallback take any float type:
            # the shapes come from the meta kernel on bf16 stand-ins, the dtype from the inputs
            tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, Tensor)]
            a, b = args[0], args[1]
            if (any(t.device.type != "meta" for t in tensors) or a.dtype == torch.bfloat16
                    or not a.is_floating_point() or a.dtype != b.dtype):
                return _SLOW
            bf16 = [x.to(torch.bfloat16) if isinstance(x, Tensor) and x.is_floating_point() else x for x in args]
            kw = {k: v.to(torch.bfloat16) if isinstance(v, Tensor) and v.is_floating_point() else v
                  for k, v in kwargs.items() if k != "out_dtype"}
            out = func(*bf16, **kw)
            return torch.empty_like(out, dtype=kwargs.get("out_dtype") or a.dtype)
        return grouped
    if not name.startswith("aten::_foreach_") or name in _FOREACH_NOT_POINTWISE:
        return None
    if name.endswith("_") and not schema.returns:  # in place: nothing to compute, nothing returned
        def inplace(args, kwargs):
            first = args[0][0] if args and args[0] else None
            return None if isinstance(first, Tensor) and first.device.type == "meta" else _SLOW
        return inplace
    if len(schema.returns) == 1 and str(schema.returns[0].type) == "List[Tensor]":
        def pointwise(args, kwargs):  # out of place and pointwise: outputs like the first list
            tensors = [t for a in args if isinstance(a, (list, tuple)) for t in a if isinstance(t, Tensor)]
            tensors += [a for a in args if isinstance(a, Tensor)]
            first = args[0][0] if args and args[0] else None
            if (not isinstance(first, Tensor) or not first.is_floating_point()
                    or any(t.device.type != "meta" or t.dtype != first.dtype for t in tensors)):
                return _SLOW
            return [torch.empty_like(t) for t in args[0]]
        return pointwise
    return None


# foreach ops whose outputs are not shaped like their inputs
_FOREACH_NOT_POINTWISE = frozenset({"aten::_foreach_norm", "aten::_foreach_max", "aten::_foreach_powsum",
                                    "aten::_foreach_mm", "aten::_foreach_copy"})


@contextmanager
def recording(rec: Recording, note: Callable[[str], None] | None = None) -> Iterator[Recording]:
    """Run the body under the recorder, with modules, device-selected entry points and the
    CompositeImplicitAutograd functions the model calls (apis.py) watched. The recorder is the C++ one where it
    can run (native.py), else the Python dispatch mode; ``note(text)`` hears of its first build."""
    from opaudit.tracing import native
    watch = ChoiceWatch(rec.choice)
    apis = ApiWatch(rec)
    regions = RegionWatch(rec.note_autocast, rec.autocast_instead)
    ext, why = (None, "asked for the Python recorder") if rec.python_only else native.usable(note)
    rec.engine, rec.engine_reason = ("native", None) if ext is not None else ("python", why)
    rec.compiled.__enter__()
    rec.modules.install()
    watch.install()
    apis.install()
    regions.install()
    typed.watchers.append(rec.note_legacy)
    try:
        if ext is not None:
            rec.native = ext
            native.running = True
            ext.start(rec, rec.counts, rec.seq, rec.modules.stack, rec.plan, rec.native_handle,
                      rec.locator.kind_of, rec.locator.branches.at, rec._unattributed, rec._tick, _REDISPATCH, _DTYPE,
                      rec.split_host, rec.shapes, rec._limit)
            try:
                yield rec
            finally:
                total, noise = ext.stop()
                native.running = False
                rec.native = None
                rec.total = max(rec.total, total)  # (a limit hit in Python's part counted there last)
                rec.noise += noise
        else:
            rec.mode = _OpRecorder(rec)
            with rec.mode:
                yield rec
    finally:
        rec.mode = None
        rec.ended = time.perf_counter()
        regions.remove()
        if rec.note_legacy in typed.watchers:
            typed.watchers.remove(rec.note_legacy)
        apis.remove()
        watch.remove()
        rec.modules.remove()
        rec.compiled.__exit__(None, None, None)
