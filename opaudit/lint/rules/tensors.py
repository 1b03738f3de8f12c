"""OA101, OA108, OA109: tensors and modules moved to or tested for CUDA by their own methods and classes.

- ``x.cuda()``, ``x.cuda(i)`` (OA101) and ``x.is_cuda`` (OA108): matched by name, so the fix is safe only
  where the receiver is known to be a tensor or module (``opaudit/lint/receivers.py``), unsafe elsewhere,
  and the message says which.
- The legacy typed tensors ``torch.cuda.FloatTensor`` and friends (OA109): a call with literal sizes or
  data becomes ``torch.empty`` / ``torch.tensor`` with dtype and device; a class test or a ``.type(...)``
  conversion gets a suggestion.

Examples: rules/catalogue.toml [OA101], [OA108], [OA109]; tests/lint/test_typed_tensors.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

import libcst as cst

from opaudit.lint.receivers import Receivers
from opaudit.lint.rules.apis import rule_suggestion
from opaudit.lint.walk import FileCheck, comma, dotted, expr, file_state, node_code, on_api, on_attribute, on_method


@file_state
@dataclass
class Tensors:
    """What the file says of the receivers of `.cuda()` and `.is_cuda`."""

    defines_cuda_method: bool  # a class of the file defines cuda()
    own_is_cuda: frozenset[str]  # receivers whose .is_cuda the file sets itself
    receivers: Receivers  # what receivers are known to be

    @classmethod
    def start(cls, c: FileCheck, module: cst.Module, source: bytes) -> Tensors:
        return cls(b"def cuda(" in source, _own_is_cuda(source), Receivers(c, module, source))


@on_method("cuda")
def _cuda(c: FileCheck, node: cst.Call, func: cst.Attribute) -> None:
    t = c.target
    if not c.on("OA101") or t.keeps_cuda:
        return
    if c.qualname(func.value) is not None and (c.qualname(func.value) or "").startswith("torch"):
        return  # torch.cuda() is no tensor method
    c.handled.add(id(func))
    new: cst.CSTNode | None = None
    if c.state(Tensors).defines_cuda_method:
        c.report(node, "OA101", "`.cuda()` moves a tensor or module to a CUDA device (a class in this file "
                 "defines its own cuda(): check which one this is)", heuristic=True)
        return
    if t.method:
        new = node.with_changes(func=func.with_changes(attr=cst.Name(t.method)))
    else:
        positional = [a for a in node.args if a.keyword is None]
        keywords = [a for a in node.args if a.keyword is not None and a.keyword.value != "device"]
        dev_kw = next((a for a in node.args if a.keyword is not None and a.keyword.value == "device"), None)
        index = positional[0].value if positional else (dev_kw.value if dev_kw else None)
        if t.neutral:
            if c.acc is not None:
                target = c.acc if index is None else f"torch.device({c.acc}.type, {node_code(index)})"
                new = node.with_changes(func=func.with_changes(attr=cst.Name("to")),
                                        args=_with_first(expr(target), keywords))
        elif t.device:
            new = node.with_changes(func=func.with_changes(attr=cst.Name("to")),
                                    args=_with_first(cst.SimpleString(f'"{t.device}"'), keywords))
    kind = c.state(Tensors).receivers.kind(func.value, c.stack)
    if kind:
        c.report(node, "OA101", f"`.cuda()` moves a tensor or module to a CUDA device (the receiver is {kind})",
                 new, fix="safe")
    else:
        c.report(node, "OA101", "`.cuda()` moves a tensor or module to a CUDA device (the receiver is not known "
                 "to be a tensor or module: check it)", new, heuristic=True)


def _with_first(first: cst.BaseExpression, rest: list[cst.Arg]) -> list[cst.Arg]:
    if not rest:
        return [cst.Arg(first)]
    rest = [*rest]
    rest[-1] = rest[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return [cst.Arg(first, comma=comma()), *rest]


@on_attribute("is_cuda")
def _is_cuda(c: FileCheck, node: cst.Attribute) -> None:
    """`.is_cuda`, whatever the receiver."""
    if not c.on("OA108") or c.target.keeps_cuda:
        return
    if c.qualname(node.value) is not None:
        return  # a module attribute, not a tensor's
    own = c.state(Tensors).own_is_cuda
    if own and dotted(node.value) in own or _self_of_own_class(c, node.value):
        return  # the program's own flag (self.is_cuda = ...), not a tensor's
    if isinstance(c.parent, (cst.AssignTarget,)):
        return
    new: cst.BaseExpression | None = None
    if c.target.is_attr:
        new = node.with_changes(attr=cst.Name(c.target.is_attr))
    elif c.acc is not None:  # False on a host without accelerator, as is_cuda was there
        new = cst.parse_expression(f'(x.device.type == getattr({c.acc}, "type", None))')
        new = new.with_changes(left=new.left.with_changes(value=new.left.value.with_changes(value=node.value)))  # type: ignore[attr-defined]
    kind = c.state(Tensors).receivers.kind(node.value, c.stack)
    if kind and "nn.Module subclass" not in kind:  # (a class of the file may set an is_cuda of its own)
        c.report(node, "OA108", f"`.is_cuda` asks whether a tensor is on a CUDA device (the receiver is {kind})",
                 new, fix="safe")
    else:
        c.report(node, "OA108", "`.is_cuda` asks whether a tensor is on a CUDA device (the receiver is not "
                 "known to be a tensor or module: check it)", new, heuristic=True)


def _self_of_own_class(c: FileCheck, node: cst.CSTNode) -> bool:
    """Whether ``node`` is the ``self`` of a method of a class that is not a tensor (no base names a
    Tensor): its attributes are the program's own."""
    if not isinstance(node, cst.Name) or node.value != "self":
        return False
    func = next((i for i in range(len(c.stack) - 1, -1, -1) if isinstance(c.stack[i], (cst.FunctionDef, cst.Lambda))),
                None)
    if func is None or not isinstance(c.stack[func], cst.FunctionDef) or func < 2 or \
            not isinstance(c.stack[func - 2], cst.ClassDef):
        return False
    method, cls = c.stack[func], c.stack[func - 2]
    params = method.params.posonly_params or method.params.params  # type: ignore[attr-defined]
    if not params or params[0].name.value != "self":
        return False
    return not any("Tensor" in (dotted(b.value) or "Tensor") for b in cls.bases)  # type: ignore[attr-defined]


_IS_CUDA_SET = re.compile(rb"([A-Za-z_][\w.]*)\.is_cuda[ \t]*(?::[^=\n]+)?=(?!=)")


def _own_is_cuda(source: bytes) -> frozenset[str]:
    """The receivers whose ``.is_cuda`` the file sets itself (``self.is_cuda = use_gpu``, an ``is_cuda``
    property of its own class: ``self``): a flag of the program, not a tensor's device."""
    if b"is_cuda" not in source:
        return frozenset()
    own = {m.group(1).decode() for m in _IS_CUDA_SET.finditer(source)}
    if b"def is_cuda(" in source:
        own.add("self")
    return frozenset(own)


_TYPED_DTYPES = {"Float": "float32", "Half": "float16", "BFloat16": "bfloat16", "Long": "int64", "Int": "int32",
                 "Short": "int16", "Char": "int8", "Byte": "uint8", "Bool": "bool"}


@cache
def _typed_twin(target: str) -> str | None:
    """The module whose typed tensor classes twin torch.cuda's on ``target`` (``torch.npu``), where the vendor's
    plugin has them (coverage_db/curated/vendors.toml ``legacy_types``; coverage_db/SOURCES.md#legacy-tensor-types)."""
    from opaudit.matrix.vendors import vendors

    return next((v.module for v in vendors().values() if v.lint_target == target and v.legacy_types and v.module
                 and v.module != "torch.cuda"), None)


@on_api("OA109")
def _typed_tensor(c: FileCheck, node: cst.CSTNode, q: str) -> None:
    """OA109: a legacy typed CUDA tensor. Called with sizes that are int literals it is ``torch.empty`` of them,
    with one list or tuple literal the tensor of that data: both are safe fixes (dtype and device written
    out). Anything else stays a suggestion: a variable argument may be a size or data, and ``isinstance`` or
    ``.type(...)`` against the class has no one-expression equivalent."""
    if c.target.keeps_cuda:
        return  # ROCm: torch.cuda's typed tensors are HIP's
    rule = c.rules["OA109"]
    dtype = _TYPED_DTYPES.get(q.rsplit(".", 1)[-1].removesuffix("Tensor"))
    text = c.device_text(None)
    device = c.device_expr(None) if c.target.neutral else f'"{text}"' if text else None
    call = c.parent
    if isinstance(call, cst.Call) and call.func is node and call.args and dtype and device:
        args = call.args
        plain = all(a.keyword is None and not a.star for a in args)
        sizes = plain and all(isinstance(a.value, cst.Integer) for a in args)
        if sizes or plain and len(args) == 1 and isinstance(args[0].value, (cst.List, cst.Tuple)):
            values = ", ".join(node_code(a.value) for a in args)
            new = f"torch.{'empty' if sizes else 'tensor'}({values}, dtype=torch.{dtype}, device={device})"
            c.need_import("torch")
            c.report(call, "OA109", f"{rule.summary}: `{q}` -> `{new}`", expr(new))
            return
    twin = _typed_twin(c.target.name)
    call_above = c.stack[-2] if len(c.stack) >= 2 and isinstance(c.parent, cst.Arg) else None
    if twin and not (isinstance(call_above, cst.Call) and
                     c.qualname(call_above.func) == "torch.set_default_tensor_type"):  # OA110 ports that
        # the plugin has the classes: the same class of its module, wherever it is used (an alias too)
        new = f"{twin}.{q.rsplit('.', 1)[-1]}"
        c.report(node, "OA109", f"{rule.summary}: `{q}` -> `{new}` (the plugin's own typed tensor class)",
                 c.renamed(node, new))
        return
    suggestion, why = rule_suggestion(c, rule), ""
    outer = c.stack[-2] if len(c.stack) >= 2 and isinstance(c.parent, cst.Arg) else None
    if isinstance(outer, cst.Call) and dtype and device:
        if isinstance(outer.func, cst.Name) and outer.func.value == "isinstance" and len(outer.args) == 2:
            # isinstance(x, torch.cuda.FloatTensor): a class test, no constructor
            kind = c.acc_type if c.target.neutral else device
            suggestion = f"{node_code(outer.args[0].value)}.dtype == torch.{dtype} and " \
                         f"{node_code(outer.args[0].value)}.device.type == {kind}"
            why = " (a class test: compare the tensor's dtype and device)"
        elif isinstance(outer.func, cst.Attribute) and outer.func.attr.value == "type" and len(outer.args) == 1:
            suggestion = f"{node_code(outer.func.value)}.to({device}, torch.{dtype})"
            why = " (a conversion: .to(device, dtype))"
    c.report(node, "OA109", f"{rule.summary}: `{q}`{why}", suggestion=suggestion)

