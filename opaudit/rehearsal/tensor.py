"""The simulated device's tensors, and what a process knows of its simulated device.

``SimTensor`` is a wrapper tensor whose device is the target's (``npu:0``; PrivateUse1 renamed, as the
vendor's plugin does) and whose data is ``elem``, a CPU tensor. Autograd, ``nn.Parameter``, optimizers
and autocast see a device tensor; every op below autograd reaches ``SimTensor.__torch_dispatch__``, which
hands it to the running simulation (``state.sim``, a simulator.Simulator: the target's policy) or, between
simulations, runs it on the CPU data (``run_native``).

``state`` is the simulated device of this process, shared by the modules that answer for it: its name,
current index and device count (device.SimDevice answers torch.npu's calls from it; checkpoint.py checks
indices against it), and the simulation running now. simulator.py sets it. A process simulates one device
type: the rename of PrivateUse1 cannot be undone.

Each new tensor's storage is counted on its device index as it is created and freed (memory.py), which is
what torch.npu's memory queries answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from opaudit.fallback.choose import cpu_impl, op_name
from opaudit.fallback.references import RehearsalLimit, limit_message
from opaudit.fallback.roundtrip import argument, signature
from opaudit.fallback.stats import user_line
from opaudit.rehearsal import memory

if TYPE_CHECKING:
    from opaudit.rehearsal.simulator import Simulator

_CPU = torch.device("cpu")


@dataclass
class DeviceState:
    """The simulated device of this process (module doc)."""

    name: str = ""  # the device type PrivateUse1 was renamed to (simulator.setup_device)
    current: int = 0  # the current device index (torch.npu.set_device)
    count: int = 1  # the device count
    sim: Simulator | None = None  # the simulation running now


state = DeviceState()
devices: dict[int, torch.device] = {}  # index -> the simulated device of that index
saving: list[dict[int, int]] = []  # per torch.save in progress: CPU storage data_ptr -> simulated index
# (checkpoint.py pushes one; a simulated tensor pickled during the save tags its data's storage)


class SimTensor(torch.Tensor):
    """A tensor on the simulated device; its data is ``elem``, a CPU tensor with the same metadata."""

    elem: torch.Tensor
    __torch_function__ = torch._C._disabled_torch_function_impl  # type: ignore[assignment]

    sim_index: int  # the index of its device (``device.index`` makes a new torch.device per call)

    @staticmethod
    def __new__(cls, elem: torch.Tensor, index: int = 0) -> SimTensor:
        device = devices.get(index)
        if device is None:
            device = devices[index] = torch.device(state.name, index)
        r = torch.Tensor._make_wrapper_subclass(
            cls, elem.size(), strides=elem.stride(), storage_offset=elem.storage_offset(), dtype=elem.dtype,
            layout=elem.layout, device=device, requires_grad=elem.requires_grad)
        r.elem = elem
        r.sim_index = index
        try:
            storage = elem.untyped_storage()
        except (RuntimeError, NotImplementedError):  # a layout without a storage (sparse): nothing to count
            return r
        memory.track(storage, index)
        return r

    def __repr__(self, *, tensor_contents: Any = None) -> str:  # type: ignore[override]
        text = repr(self.elem.detach())
        grad = ", requires_grad=True" if self.requires_grad else ""
        return f"{text[:-1]}, device='{self.device}'{grad})"

    def tolist(self) -> Any:  # (torch refuses tolist for tensor subclasses; a device tensor has it)
        return self.elem.tolist()

    def __format__(self, format_spec: str) -> str:
        # torch formats a 0-dim tensor as its number (f"{acc:6.2f}") only when its class is exactly Tensor, as a
        # device tensor's is; a parameter's is not, there or here
        if self.dim() == 0 and not getattr(self, "_is_param", False):
            return self.detach().item().__format__(format_spec)
        return object.__format__(self, format_spec)

    def __reduce_ex__(self, protocol: Any) -> Any:
        # a simulated tensor pickles as its CPU data; during torch.save that data's storage is tagged with the
        # device (checkpoint.py writes the tag), and a parameter stays a parameter
        data = self.elem.detach()
        if saving:
            saving[-1][data.untyped_storage().data_ptr()] = self.sim_index
        if getattr(self, "_is_param", False):
            from collections import OrderedDict

            return torch._utils._rebuild_parameter, (data, self.requires_grad, OrderedDict())
        if self.requires_grad and self.is_leaf:
            data.requires_grad_(True)
        return data.__reduce_ex__(protocol)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        sim = state.sim
        if sim is None:
            return run_native(func, args, kwargs or {})
        plan = sim.plans.get(id(func))
        if plan is not None and plan.call is not None:  # Simulator.handle's common case, a call shorter
            plan.stat.calls += 1  # type: ignore[union-attr]
            return run_plain(func, plan.call, args, kwargs or {}, plan.check_devices)
        return sim.handle(func, args, kwargs or {})


def device_index(args: Any, kwargs: dict[str, Any]) -> int:
    """The device index of an op's results: its first simulated tensor's, else its ``device=``, else the
    current device's."""
    for a in args:
        if isinstance(a, SimTensor):
            return a.device.index or 0
        if isinstance(a, (list, tuple)):
            for t in a:
                if isinstance(t, SimTensor):
                    return t.device.index or 0
    d = kwargs.get("device")
    if d is not None:
        d = torch.device(d)
        if d.type == state.name and d.index is not None:
            return d.index
    return state.current


def unwrap(x: Any) -> Any:
    """``x`` with simulated tensors replaced by their CPU data (in lists and tuples too) and the simulated
    device by the CPU."""
    if isinstance(x, SimTensor):
        return x.elem
    t = type(x)
    if t is list or t is tuple:
        return t(unwrap(i) for i in x)
    if t is torch.device and x.type == state.name:
        return _CPU
    return x


def wrap(x: Any, index: int) -> Any:
    """``x`` with CPU tensors made simulated tensors of device ``index`` (in lists and tuples too)."""
    if isinstance(x, torch.Tensor) and not isinstance(x, SimTensor):
        return SimTensor(x, index)
    t = type(x)
    if t is list or t is tuple:
        return t(wrap(i, index) for i in x)
    return x


def refresh(t: Any) -> None:
    """After an op that wrote ``t`` (resize_, out=): the wrapper takes its data's new metadata."""
    for w in (t if isinstance(t, (list, tuple)) else (t,)):
        if isinstance(w, SimTensor):
            e = w.elem
            if w.shape != e.shape or w.stride() != e.stride() or w.storage_offset() != e.storage_offset():
                w.data = SimTensor(e, w.device.index or 0)  # (counts the storage, if set_ gave it a new one)
                memory.resized(e.untyped_storage())  # a larger shape may have grown it


class Call:
    """What running one op natively needs to know of its schema, worked out once per op."""

    __slots__ = ("writes", "returns", "plain")

    def __init__(self, func: Any):
        sig = signature(func)
        self.writes = sig.writes
        self.returns = sig.returns
        # nothing written, every result new, and a CPU kernel to run: the common case, run by run_plain
        self.plain = (not sig.writes and all(r is None or r[0] != "write" for r in sig.returns)
                      and cpu_impl(func) is func)


_calls: dict[int, Call] = {}  # id(OpOverload) -> Call (OpOverloads live as long as the process; their
# __hash__ is Python code, an id is not)


def call_of(func: Any) -> Call:
    """``func``'s Call, worked out on its first use."""
    c = _calls.get(id(func))
    if c is None:
        c = _calls[id(func)] = Call(func)
    return c


def run_plain(func: Any, call: Call, args: tuple, kwargs: dict[str, Any], check: bool) -> Any:
    """run_native for an op that writes none of its arguments, in one pass over them: their CPU data, the
    device index of the results, and (``check``) a CPU tensor beside device tensors, which fails as on a
    device (_host_error)."""
    index = -1
    host = None
    unwrapped = []
    for a in args:
        t = type(a)
        if t is SimTensor:
            if index < 0:
                index = a.sim_index
            unwrapped.append(a.elem)
        elif t is list or t is tuple:
            for x in a:
                if type(x) is SimTensor:
                    if index < 0:
                        index = x.sim_index
                elif check and isinstance(x, torch.Tensor) and x.device.type == "cpu" and x.dim() > 0:
                    host = x
            unwrapped.append(unwrap(a))
        elif isinstance(a, torch.Tensor):
            if isinstance(a, SimTensor):
                if index < 0:
                    index = a.device.index or 0
                unwrapped.append(a.elem)
            else:
                if check and a.device.type == "cpu" and a.dim() > 0:
                    host = a
                unwrapped.append(a)
        elif t is torch.device:
            unwrapped.append(unwrap(a))
        else:
            unwrapped.append(a)
    seen = index >= 0  # a device tensor among the arguments
    if kwargs:
        values = tuple(kwargs.values())
        if check:
            in_kwargs = host_tensor(values, device=True)
            if in_kwargs is not None:
                host = in_kwargs
            seen = seen or any(isinstance(v, SimTensor) for v in values)
        if index < 0:
            index = device_index(values, kwargs)
        kw = {k: unwrap(v) for k, v in kwargs.items()}
        to = kwargs.get("device")
        if to is not None and torch.device(to).type != state.name:  # a copy to the host (.cpu())
            return func(*unwrapped, **kw)
    else:
        kw = kwargs
    if host is not None and seen:
        _host_error(func, host, args, kwargs)
    out = func(*unwrapped, **kw)
    if index < 0:
        index = state.current
    n = len(call.returns)
    if n == 1:
        return SimTensor(out, index) if type(out) is torch.Tensor else wrap(out, index)
    if n == 0:
        return out
    return tuple(SimTensor(r, index) if type(r) is torch.Tensor else wrap(r, index) for r in out)


def _host_error(func: Any, host: torch.Tensor, args: tuple, kwargs: dict[str, Any]) -> None:
    sim = state.sim
    target = sim.target if sim is not None else state.name
    name = sim.plans[id(func)].op if sim is not None and id(func) in sim.plans else op_name(func)
    line = user_line()
    raise RuntimeError(
        f"Expected all tensors to be on the same device, but found at least two devices, "
        f"{state.name}:{device_index(args, kwargs)} and cpu! [simulated {target}: aten::{name} "
        f"got a CPU tensor of shape {list(host.shape)}" + (f", at {line}" if line else "") + "]")


def run_native(func: Any, args: tuple, kwargs: dict[str, Any], host: frozenset[int] = frozenset()) -> Any:
    """Run ``func`` on the CPU data of its arguments; results are tensors of the simulated device (those whose
    index is in ``host`` stay CPU tensors, as the device's kernel makes them), and written arguments are the
    caller's own."""
    call = call_of(func)
    if call.plain and not host:
        return run_plain(func, call, args, kwargs, False)
    index = device_index(args, kwargs)
    fn = cpu_impl(func)  # the op itself, or a reference where the CPU has no kernel for it (references.py)
    if fn is None:
        raise RehearsalLimit(limit_message_of(func))
    out = fn(*unwrap(args), **{k: unwrap(v) for k, v in kwargs.items()})
    sig = signature(func)
    for pos, name in sig.writes:
        refresh(argument(args, kwargs, pos, name))
    if not sig.returns:
        return out
    to = kwargs.get("device")
    if to is not None and torch.device(to).type != state.name:  # a copy to the host (.cpu()): a CPU tensor
        return out
    results = [
        argument(args, kwargs, ret[1], ret[2]) if ret is not None and ret[0] == "write" else
        r if i in host else wrap(r, index)
        for i, (ret, r) in enumerate(zip(sig.returns, out if len(sig.returns) > 1 else (out,), strict=True))
    ]
    return tuple(results) if len(sig.returns) > 1 else results[0]


def limit_message_of(func: Any) -> str:
    """The error of an op that nothing in the rehearsal can run (references.limit_message)."""
    name = op_name(func)
    sim = state.sim
    if sim is None:
        return limit_message(name, "the target", "the simulated device runs it")
    support = sim.matrix.resolve(name)
    where = {"native": f"{sim.target} registers it natively", "cpu_fallback": f"{sim.target} runs it on the CPU",
             "missing": f"{sim.target} lacks it and its fallback runs it on the CPU"}.get(
        support.status, f"{sim.target} runs it ({support.status})")
    sim.stats.errors.append(f"aten::{name}: no CPU kernel and no reference (a limit of the rehearsal)")
    return limit_message(name, sim.target, where)


def backend_kernel(op: Any, *args: Any, **kwargs: Any) -> Any:
    """The PrivateUse1 fallback: what reaches the device key itself (factories, copies made with the
    Python key excluded, such as ``torch.tensor(data, device=...)``). Infrastructure: runs natively."""
    name = op._schema.name
    if name == "aten::_copy_from":
        src, dst = args[0], args[1]
        dst.elem.copy_(unwrap(src))
        return dst
    if name == "aten::_copy_from_and_resize":
        src, dst = args[0], args[1]
        dst.elem.resize_(src.shape).copy_(unwrap(src))
        refresh(dst)
        return dst
    sim = state.sim
    if sim is not None and name in FACTORIES:
        sim.count_factory(op)
    return run_native(op, args, kwargs)


FACTORIES = frozenset({"aten::empty", "aten::empty_strided"})  # schema names of the allocations counted


def host_data(t: torch.Tensor) -> torch.Tensor:
    """A simulated tensor's CPU data (other tensors as they are)."""
    return t.elem if isinstance(t, SimTensor) else t


def host_tensor(args: tuple, device: bool = False) -> torch.Tensor | None:
    """A CPU tensor of at least one dimension among ``args`` (lists included), when a device tensor is there
    too (or ``device``: the caller saw one)."""
    found = None
    for a in args:
        if isinstance(a, SimTensor):
            device = True
        elif isinstance(a, torch.Tensor):
            if a.device.type == "cpu" and a.dim() > 0:
                found = a
        elif type(a) is list or type(a) is tuple:
            for t in a:
                if isinstance(t, SimTensor):
                    device = True
                elif isinstance(t, torch.Tensor) and t.device.type == "cpu" and t.dim() > 0:
                    found = t
    return found if device else None


