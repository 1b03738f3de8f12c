"""OA2xx, mixed precision and optimizers: the deprecated ``torch.cuda.amp`` names, autocast's GPU-only
functions, and fused or capturable optimizer flags.

- ``torch.cuda.amp.autocast(...)`` / ``GradScaler(...)`` -> ``torch.amp.*`` with the device type as first
  argument (OA201, OA202); ``@torch.cuda.amp.custom_fwd`` / ``custom_bwd`` (OA204);
  ``torch.get_autocast_gpu_dtype()`` and friends (OA205).
- ``fused=True`` / ``capturable=True`` for an optimizer, also passed through a ``dict(...)`` or ``{...}``
  of keyword arguments (OA207).

Device types in autocast's own positions (OA203) are device positions: devices.py.
Examples: rules/catalogue.toml [OA201] ... [OA207].
"""

from __future__ import annotations

from typing import Any

import libcst as cst

from opaudit.lint.catalogue import version_at_least
from opaudit.lint.rules.devices import device_arg_text
from opaudit.lint.walk import FileCheck, comma, equal, expr, on, on_builtin, on_call, on_call_prefix, string_value

AMP_DEPRECATED = {"torch.cuda.amp.autocast": "torch.amp.autocast", "torch.cuda.amp.GradScaler": "torch.amp.GradScaler",
                  "torch.cuda.amp.autocast_mode.autocast": "torch.amp.autocast",
                  "torch.cuda.amp.grad_scaler.GradScaler": "torch.amp.GradScaler"}
GRAD_SCALER_SINCE = "2.3"  # torch.amp.GradScaler(device): PyTorch 2.3's release notes
AMP_DECORATORS = {"torch.cuda.amp.custom_fwd": "torch.amp.custom_fwd",
                  "torch.cuda.amp.custom_bwd": "torch.amp.custom_bwd"}
GPU_AUTOCAST = {"torch.get_autocast_gpu_dtype": "torch.get_autocast_dtype",
                "torch.set_autocast_gpu_dtype": "torch.set_autocast_dtype",
                "torch.is_autocast_enabled": "torch.is_autocast_enabled"}


@on_call(*AMP_DEPRECATED)
def _deprecated(c: FileCheck, node: cst.Call, q: str) -> None:
    if not c.on({"torch.amp.autocast": "OA201"}.get(AMP_DEPRECATED[q], "OA202")):
        return
    code = "OA201" if AMP_DEPRECATED[q] == "torch.amp.autocast" else "OA202"
    c.handled.add(id(node.func))
    if code == "OA202" and not version_at_least(c.min_torch, GRAD_SCALER_SINCE):
        # torch.amp.GradScaler(device) came with PyTorch 2.3: older ones keep the device module's own
        module = c.target.module
        if c.target.keeps_cuda:
            return  # ROCm: torch.cuda.amp.GradScaler is its scaler until then
        c.report(node, code, f"{c.rules[code].summary}: `{q}` (torch.amp.GradScaler needs torch >= "
                 f"{GRAD_SCALER_SINCE}; --min-torch is {c.min_torch})",
                 suggestion=f"{module}.amp.GradScaler(...)" if module and module != "torch.cuda" else None)
        return
    dev = device_arg_text(c, type_only=True)
    new = None
    if dev is not None:
        func = c.renamed(node.func, AMP_DEPRECATED[q])
        args = list(node.args)
        if code == "OA201":  # torch.cuda.amp.autocast(enabled, dtype, cache_enabled): its own positional order
            names = iter(("enabled", "dtype", "cache_enabled"))
            args = [a.with_changes(keyword=cst.Name(next(names)), equal=equal()) if a.keyword is None
                    and not a.star else a for a in args]
        new = node.with_changes(func=func, args=[cst.Arg(expr(dev), comma=comma()), *args])
        if not node.args:
            new = node.with_changes(func=func, args=[cst.Arg(expr(dev))])
    c.report(node, code, f"{c.rules[code].summary}: `{q}`", new)


@on_call(*AMP_DECORATORS)
def _decorator_call(c: FileCheck, node: cst.Call, q: str) -> None:
    c.handled.add(id(node.func))
    custom_fwd(c, node, q, node.args)


@on_call(*GPU_AUTOCAST)
def _gpu_autocast(c: FileCheck, node: cst.Call, q: str) -> None:
    if not c.on("OA205"):
        return
    t = c.target
    positional = [a for a in node.args if a.keyword is None]
    if q == "torch.is_autocast_enabled" and positional:
        return  # already names its device type
    c.handled.add(id(node.func))
    dev = device_arg_text(c, type_only=True)
    new = None
    if dev is not None:
        alt = t.api.get(q, ("", ""))[0] if not t.neutral else ""
        if alt:
            new = node.with_changes(func=c.renamed(node.func, alt))
        else:
            args = [cst.Arg(expr(dev), comma=comma() if node.args else cst.MaybeSentinel.DEFAULT), *node.args]
            new = node.with_changes(func=c.renamed(node.func, GPU_AUTOCAST[q]), args=args)
    c.report(node, "OA205", f"{c.rules['OA205'].summary}: `{q}`", new)


def custom_fwd(c: FileCheck, node: cst.CSTNode, q: str, args: Any) -> None:
    """@torch.cuda.amp.custom_fwd(...) -> @torch.amp.custom_fwd(device_type=..., ...); bare decorators too."""
    dev = device_arg_text(c, type_only=True)
    new: cst.CSTNode | None = None
    if dev is not None:
        func = node.func if isinstance(node, cst.Call) else node
        kw = cst.Arg(expr(dev), keyword=cst.Name("device_type"), equal=cst.AssignEqual(
            whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")))
        args = list(args)
        new_args = [kw.with_changes(comma=comma()), *args] if args else [kw]
        new = cst.Call(func=c.renamed(func, AMP_DECORATORS[q]), args=new_args)
    c.report(node, "OA204", f"{c.rules['OA204'].summary}: `{q}`", new)


@on_call_prefix("torch.optim.")
def _optimizer(c: FileCheck, node: cst.Call, q: str) -> None:
    if c.on("OA207") and any(
            a.keyword is not None and a.keyword.value in ("fused", "capturable") and
            isinstance(a.value, cst.Name) and a.value.value == "True" for a in node.args):
        c.report(node, "OA207", c.rules["OA207"].summary)


@on_builtin("dict")
def _kwargs_dict(c: FileCheck, node: cst.Call) -> None:
    if c.on("OA207"):
        _fused_flags(c, [(a.keyword.value, a.value) for a in node.args if a.keyword is not None])


@on(cst.Dict)
def _visit_dict(c: FileCheck, node: cst.Dict) -> None:
    """Optimizer flags passed on through **kwargs."""
    if c.on("OA207"):
        _fused_flags(c, [(string_value(e.key), e.value) for e in node.elements if isinstance(e, cst.DictElement)])


def _fused_flags(c: FileCheck, items: list[tuple[str | None, cst.BaseExpression]]) -> None:
    """``dict(fused=True)`` / ``{"fused": True}``: optimizer flags passed on through ``**kwargs``."""
    for key, value in items:
        if key in ("fused", "capturable") and isinstance(value, cst.Name) and value.value == "True":
            c.report(value, "OA207", f"{c.rules['OA207'].summary} (`{key}=True` passed on to an optimizer)",
                     heuristic=True)

