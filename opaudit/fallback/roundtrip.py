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
from dataclasses import dataclass
from functools import cache
from typing import Any

import torch
from torch.utils import _pytree as pytree

from opaudit.fallback.choose import OVERRIDEABLE
from opaudit.torchcompat import tree_leaves


def _device_of(args: Any, kwargs: dict[str, Any]) -> torch.device | None:
    for x in tree_leaves((args, kwargs)):
        if isinstance(x, torch.Tensor) and x.device.type not in ("cpu", "meta"):
            return x.device
    d = kwargs.get("device")
    return torch.device(d) if d is not None else None


# arguments ops write although their schema does not say so (kept for backward compatibility upstream)
UNANNOTATED_WRITES = {
    "aten::native_batch_norm": ("running_mean", "running_var"),
    "aten::native_batch_norm.out": ("running_mean", "running_var"),
}


@dataclass(frozen=True)
class Signature:
    """What an op's schema says about aliasing, once per op."""

    writes: tuple[tuple[int, str], ...]  # the arguments it writes: (position, name), UNANNOTATED_WRITES included
    # per result: ("write", position, name) of the written argument it is, ("view", ...) of the argument it is
    # a view of, or None for a fresh tensor (or a scalar)
    returns: tuple[tuple[str, int, str] | None, ...]
    out_names: frozenset[str]  # keyword-only written arguments (out=): only written, never read


def _alias_set(info: Any) -> str | None:
    if info is None:
        return None
    sets = sorted(info.before_set)
    return sets[0] if sets else None


@cache
def signature(op: torch._ops.OpOverload) -> Signature:
    args = op._schema.arguments
    quiet = UNANNOTATED_WRITES.get(op._schema.name + (f".{op._overloadname}" if op._overloadname != "default"
                                                      else ""), ())
    writes = [(i, a) for i, a in enumerate(args) if (a.alias_info is not None and a.alias_info.is_write)
              or a.name in quiet]
    by_set: dict[str, tuple[str, int, str]] = {}
    for i, a in enumerate(args):
        info = a.alias_info
        alias = _alias_set(info)
        if info is not None and alias is not None:
            by_set.setdefault(alias, ("write" if info.is_write else "view", i, a.name))
    returns: list[tuple[str, int, str] | None] = []
    for r in op._schema.returns:
        hit = by_set.get(_alias_set(r.alias_info) or "")
        # a written result is the written argument; a view result of a written argument is a view too
        if hit is not None and hit[0] == "write" and not (r.alias_info is not None and r.alias_info.is_write):
            hit = ("view", hit[1], hit[2])
        returns.append(hit)
    return Signature(tuple((i, a.name) for i, a in writes), tuple(returns),
                     frozenset(a.name for _, a in writes if a.kwarg_only and a.alias_info is not None))


def argument(args: tuple, kwargs: dict[str, Any], pos: int, name: str) -> Any:
    """The argument a schema names at ``pos`` / ``name``, passed by position or by keyword (None if neither)."""
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
    if any(isinstance(x, torch.Generator) and x.device.type != "cpu" for x in tree_leaves((args, kwargs))):
        args, kwargs = pytree.tree_map_only(torch.Generator, lambda g: None if g.device.type != "cpu" else g,
                                            (args, kwargs))
    return op(*args, **kwargs)


class RoundTrip:
    """The CPU round trip of one op; each call adds the bytes it moves to ``moved`` (to host, to device)."""

    def __init__(self, op: torch._ops.OpOverload):
        self.op = op
        self.sig = signature(op)

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

        sig = self.sig
        hargs = pytree.tree_map(host, args)
        hkwargs = {k: pytree.tree_map(fresh if k in sig.out_names else host, v) for k, v in kwargs.items()}
        if "device" in hkwargs and hkwargs["device"] is not None:
            hkwargs["device"] = torch.device("cpu")
        out = cpu_call(self.op, hargs, hkwargs)
        for pos, name in sig.writes:  # copy what the op wrote back to the caller's tensors
            dst, src = argument(args, kwargs, pos, name), argument(hargs, hkwargs, pos, name)
            for d, s in zip(_tensors(dst), _tensors(src), strict=True):
                if d is s:
                    continue
                if d.shape != s.shape:
                    d.resize_(s.shape)
                d.copy_(s)
                moved[1] += s.numel() * s.element_size()
        if not sig.returns:
            return out
        results = list(out) if len(sig.returns) > 1 else [out]
        final = []
        for ret, r in zip(sig.returns, results, strict=True):
            if ret is None:
                final.append(_to_device(r, device, moved))
            elif ret[0] == "write":
                final.append(argument(args, kwargs, ret[1], ret[2]))
            else:
                final.append(_view_on_device(self.op, args, kwargs, ret[1], ret[2]))
        return tuple(final) if len(sig.returns) > 1 else final[0]


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
    source = argument(args, kwargs, pos, name)
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
    found = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
    for pos, name in signature(op).writes:
        found += _tensors(argument(args, kwargs, pos, name))
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
