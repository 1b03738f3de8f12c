"""A CPU round trip that keeps an op's semantics, for any aten schema.

Inputs on the device are copied to the host (strides kept where they are dense, so non-contiguous
inputs stay what they were), the op's CPU kernel runs, and then, from the schema:

- arguments the op writes (``Tensor(a!)``: in-place and ``out=`` variants, lists of them) get the host
  result copied back, resized first when the op resized them;
- results that alias a written argument are that argument itself (the caller's tensor, not a copy);
- results that are views of an argument (``Tensor(a)``) are made on the device with ``as_strided``
  after the same view is computed on meta tensors (no data moves);
- other tensors are copied to the device of the op's first device input (its index kept), scalars and
  ``None`` pass through; dtypes are the CPU kernel's, which are the op's.

Backend stubs (``convolution_overrideable``) run the op they stand for (choose.OVERRIDEABLE).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils import _pytree as pytree

from opaudit.fallback.choose import OVERRIDEABLE


def _device_of(args: Any, kwargs: dict[str, Any]) -> torch.device | None:
    for x in pytree.tree_leaves((args, kwargs)):
        if isinstance(x, torch.Tensor) and x.device.type not in ("cpu", "meta"):
            return x.device
    d = kwargs.get("device")
    return torch.device(d) if d is not None else None


# arguments ops write although their schema does not say so (kept for backward compatibility upstream)
UNANNOTATED_WRITES = {
    "aten::native_batch_norm": ("running_mean", "running_var"),
    "aten::native_batch_norm.out": ("running_mean", "running_var"),
}


def written(op: torch._ops.OpOverload) -> list[tuple[int, str, str | None]]:
    """(position, name, alias set) of every argument the op writes (UNANNOTATED_WRITES included)."""
    quiet = UNANNOTATED_WRITES.get(op._schema.name + (f".{op._overloadname}" if op._overloadname != "default"
                                                      else ""), ())
    return [(i, a.name, _alias_set(a.alias_info)) for i, a in enumerate(op._schema.arguments)
            if (a.alias_info is not None and a.alias_info.is_write) or a.name in quiet]


def _alias_set(info: Any) -> str | None:
    if info is None:
        return None
    sets = sorted(info.before_set)
    return sets[0] if sets else None


def _arg(args: tuple, kwargs: dict[str, Any], pos: int, name: str) -> Any:
    return args[pos] if pos < len(args) else kwargs.get(name)


def cpu_call(op: torch._ops.OpOverload, args: tuple, kwargs: dict[str, Any]) -> Any:
    """Run ``op`` on host arguments with its CPU kernel (a backend stub runs the op it stands for)."""
    base = op._schema.name.removeprefix("aten::")
    if base == "convolution_overrideable":
        return torch.ops.aten.convolution.default(*args, **kwargs)
    if base == "convolution_backward_overrideable":
        full = list(args) + [kwargs[a.name] for a in op._schema.arguments[len(args):] if a.name in kwargs]
        grad, inp, weight, stride, padding, dilation, transposed, output_padding, groups, mask = full
        bias = [weight.size(1) * groups] if transposed else [weight.size(0)]
        return torch.ops.aten.convolution_backward.default(grad, inp, weight, bias, stride, padding, dilation,
                                                           transposed, output_padding, groups, mask)
    assert base not in OVERRIDEABLE
    if any(isinstance(x, torch.Generator) and x.device.type != "cpu" for x in pytree.tree_leaves((args, kwargs))):
        args, kwargs = pytree.tree_map_only(torch.Generator, lambda g: None if g.device.type != "cpu" else g,
                                            (args, kwargs))
    return op(*args, **kwargs)


class RoundTrip:
    """The CPU round trip of one op; ``moved`` holds the bytes of the last call (to host, to device)."""

    def __init__(self, op: torch._ops.OpOverload):
        self.op = op
        self.writes = written(op)
        self.returns = [(_alias_set(r.alias_info), bool(r.alias_info and r.alias_info.is_write))
                        for r in op._schema.returns]
        sets = {s: (i, n) for i, n, s in self.writes if s is not None}
        self.view_sources = {
            _alias_set(a.alias_info): (i, a.name) for i, a in enumerate(op._schema.arguments)
            if a.alias_info is not None and not a.alias_info.is_write and _alias_set(a.alias_info) is not None
        }
        self.write_sets = sets
        self.out_names = frozenset(a.name for a in op._schema.arguments
                                   if a.kwarg_only and a.alias_info is not None and a.alias_info.is_write)

    def __call__(self, args: tuple, kwargs: dict[str, Any], moved: list[int]) -> Any:
        device = _device_of(args, kwargs)

        def host(x: Any) -> Any:
            if isinstance(x, torch.Tensor) and x.device.type not in ("cpu", "meta"):
                moved[0] += x.numel() * x.element_size()
                return x.to("cpu")
            return x

        def fresh(x: Any) -> Any:  # an out= argument is only written: its old contents need not travel
            if isinstance(x, torch.Tensor) and x.device.type not in ("cpu", "meta"):
                return torch.empty_strided(x.size(), x.stride(), dtype=x.dtype, device="cpu")
            return x

        out_names = self.out_names
        hargs = pytree.tree_map(host, args)
        hkwargs = {k: pytree.tree_map(fresh if k in out_names else host, v) for k, v in kwargs.items()}
        if "device" in hkwargs and hkwargs["device"] is not None:
            hkwargs["device"] = torch.device("cpu")
        out = cpu_call(self.op, hargs, hkwargs)
        for pos, name, _ in self.writes:  # copy what the op wrote back to the caller's tensors
            dst, src = _arg(args, kwargs, pos, name), _arg(hargs, hkwargs, pos, name)
            for d, s in zip(_tensors(dst), _tensors(src), strict=True):
                if d is s:
                    continue
                if d.shape != s.shape:
                    d.resize_(s.shape)
                d.copy_(s)
                moved[1] += s.numel() * s.element_size()
        if not self.returns:
            return out
        results = list(out) if len(self.returns) > 1 else [out]
        final = []
        for (alias, is_write), r in zip(self.returns, results, strict=True):
            if alias is not None and is_write and alias in self.write_sets:
                pos, name = self.write_sets[alias]
                final.append(_arg(args, kwargs, pos, name))
            elif alias is not None and alias in self.view_sources:
                pos, name = self.view_sources[alias]
                final.append(_view_on_device(self.op, args, kwargs, pos, name))
            else:
                final.append(_to_device(r, device, moved))
        return tuple(final) if len(self.returns) > 1 else final[0]


def _tensors(x: Any) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for t in x if isinstance(t, torch.Tensor)]
    return []


def _to_device(x: Any, device: torch.device | None, moved: list[int]) -> Any:
    if device is None:
        return x
    if isinstance(x, torch.Tensor):
        if x.device.type == "cpu":
            moved[1] += x.numel() * x.element_size()
            return x.to(device)
        return x
    if isinstance(x, (list, tuple)):
        return type(x)(_to_device(t, device, moved) for t in x)
    return x


def _meta_like(t: torch.Tensor) -> torch.Tensor:
    """A meta tensor with ``t``'s sizes, strides and storage offset."""
    n = max(t.untyped_storage().nbytes() // max(t.element_size(), 1), t.storage_offset() + 1)
    return torch.empty(n, dtype=t.dtype, device="meta").as_strided(t.size(), t.stride(), t.storage_offset())


def _view_on_device(op: torch._ops.OpOverload, args: tuple, kwargs: dict[str, Any], pos: int, name: str) -> Any:
    """The view ``op`` returns, computed on meta and taken of the device tensor with as_strided."""
    source = _arg(args, kwargs, pos, name)
    margs, mkwargs = pytree.tree_map_only(torch.Tensor, _meta_like, (args, kwargs))
    view = op(*margs, **mkwargs)
    if view.dtype != source.dtype:  # view_as_real, view(dtype): the same bytes read as another dtype
        source = torch.ops.aten.view.dtype(source, view.dtype)
    return torch.as_strided(source, view.size(), view.stride(), view.storage_offset())


def reference(op: torch._ops.OpOverload, args: tuple, kwargs: dict[str, Any],
              to_host: Callable[[torch.Tensor], torch.Tensor]) -> list[torch.Tensor]:
    """What the CPU kernel gives for ``op`` on copies of the arguments: its tensor results, and the new
    values of the arguments it writes (in that order)."""
    hargs, hkwargs = pytree.tree_map_only(torch.Tensor, lambda t: to_host(t).clone(), (args, kwargs))
    if "device" in hkwargs and hkwargs["device"] is not None:
        hkwargs["device"] = torch.device("cpu")
    out = cpu_call(op, hargs, hkwargs)
    return outputs(op, out, hargs, hkwargs)


def outputs(op: torch._ops.OpOverload, out: Any, args: tuple, kwargs: dict[str, Any]) -> list[torch.Tensor]:
    """The tensors of an op's result, then the arguments it writes (reference's order)."""
    found = [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]
    for pos, name, _ in written(op):
        found += _tensors(_arg(args, kwargs, pos, name))
    return found


def rel_error(actual: list[torch.Tensor], expected: list[torch.Tensor],
              to_host: Callable[[torch.Tensor], torch.Tensor]) -> float:
    """The worst relative error over the outputs: max |a - e| / max |e| (NaN where they are not alike)."""
    if len(actual) != len(expected):
        return float("nan")
    worst = 0.0
    for a, e in zip(actual, expected, strict=True):
        a = to_host(a)
        if a.shape != e.shape:
            return float("nan")
        if a.numel() == 0:
            continue
        a64, e64 = a.detach().to(torch.float64), e.detach().to(torch.float64)
        same_nan = torch.isnan(a64) == torch.isnan(e64)
        if not bool(same_nan.all()):
            return float("nan")
        a64, e64 = torch.nan_to_num(a64, nan=0.0), torch.nan_to_num(e64, nan=0.0)
        scale = float(e64.abs().max())
        diff = float((a64 - e64).abs().max())
        worst = max(worst, diff / scale if scale > 0 else diff)
    return worst
