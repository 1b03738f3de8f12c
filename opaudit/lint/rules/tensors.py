"""OA101, OA108, OA109: tensors and modules moved to or tested for CUDA by their own methods and classes.

- ``x.cuda()``, ``x.cuda(i)`` (OA101) and ``x.is_cuda`` (OA108): matched by name, so the fix is safe only
  where the receiver is known to be a tensor or module (``opaudit/lint/receivers.py``), unsafe elsewhere,
  and the message says which. Where a class of the file defines ``cuda`` itself, a receiver that may be an
  instance of it (``self`` in it, one built from it, one not known to be torch's) is left for a person to check.
- The legacy typed tensors ``torch.cuda.FloatTensor`` and friends (OA109): a call with literal sizes or
  data becomes ``torch.empty`` / ``torch.tensor`` with dtype and device; elsewhere the class becomes the
  plugin's own where it has them (``torch.npu.FloatTensor``), else a class test or a ``.type(...)``
  conversion gets a suggestion.
- An alias of one on a target without typed classes (``Tensor = torch.cuda.FloatTensor if cuda else
  torch.FloatTensor``, the GAN style) is one port with its uses (``TypedAliases``, found before the walk):
  the alias becomes ``functools.partial(torch.tensor, dtype=..., device="musa" if cuda else "cpu")``, a call
  with sizes ``torch.empty(..., **Tensor.keywords)``, ``x.type(Tensor)`` ``x.to(**Tensor.keywords)``, and a
  call with data stays as it is. Where one use has no such rewrite (a class test, the class passed on), none is
  made and the alias's finding says why. An attribute alias (``self.Tensor = ...``, called by subclasses in other
  modules) and a name alias given an argument that may be a size or data become a function that builds what the
  class built (``lambda *size_or_data: torch.FloatTensor(*size_or_data).to("musa")``), their calls as they are.

Examples: rules/catalogue.toml [OA101], [OA108], [OA109]; tests/lint/test_typed_tensors.py,
tests/lint/test_typed_aliases.py.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import libcst as cst

from opaudit.lint.receivers import TYPED_CLASSES, Receivers
from opaudit.lint.rules.apis import _stuck_probes as stuck_probes
from opaudit.lint.rules.apis import rule_suggestion
from opaudit.lint.walk import (
    FileCheck,
    children,
    comma,
    dotted,
    expr,
    file_state,
    node_code,
    on,
    on_api,
    on_attribute,
    on_finish,
    on_method,
    on_string,
    with_value,
)


@file_state
@dataclass
class Tensors:
    """What the file says of the receivers of `.cuda()` and `.is_cuda`."""

    cuda_classes: frozenset[str]  # the classes of the file that define a cuda() method of their own
    own_is_cuda: frozenset[str]  # receivers whose .is_cuda the file sets itself
    receivers: Receivers  # what receivers are known to be

    @classmethod
    def start(cls, c: FileCheck, module: cst.Module, source: bytes) -> Tensors:
        return cls(_cuda_classes(module) if b"def cuda(" in source else frozenset(), _own_is_cuda(source),
                   Receivers(c, module, source))


def _cuda_classes(module: cst.Module) -> frozenset[str]:
    """The names of the classes (at any depth) whose body defines ``cuda``: a function of that name outside a class
    body (``def cuda(tensor, flag): return tensor.cuda() if flag else tensor``) is no method of anything."""
    out: set[str] = set()
    todo: list[cst.CSTNode] = [module]
    while todo:
        node = todo.pop()
        if isinstance(node, cst.ClassDef) and any(
                isinstance(s, cst.FunctionDef) and s.name.value == "cuda" for s in _class_statements(node.body.body)):
            out.add(node.name.value)
        if isinstance(node, (cst.Module, cst.ClassDef, cst.FunctionDef, cst.BaseCompoundStatement, cst.BaseSuite)):
            todo.extend(n for n in children(node) if isinstance(n, (cst.BaseCompoundStatement, cst.BaseSuite,
                                                                     cst.ClassDef, cst.FunctionDef)))
    return frozenset(out)


def _class_statements(body: Any) -> Iterator[cst.CSTNode]:
    """The statements of a class body, those of its if/try/with blocks included (a cuda() defined conditionally)."""
    for stmt in body:
        yield stmt
        if not isinstance(stmt, (cst.If, cst.Try, cst.With)):
            continue
        for block in (stmt.body, *getattr(stmt, "handlers", ()), getattr(stmt, "orelse", None),
                      getattr(stmt, "finalbody", None)):
            if isinstance(block, cst.If):  # an elif
                yield from _class_statements([block])
            elif block is not None:
                suite = block if isinstance(block, cst.BaseSuite) else block.body
                if isinstance(suite, cst.IndentedBlock):
                    yield from _class_statements(suite.body)


@on_method("cuda")
def _cuda(c: FileCheck, node: cst.Call, func: cst.Attribute) -> None:
    t = c.target
    if not c.on("OA101") or t.keeps_cuda:
        return
    if c.qualname(func.value) is not None and (c.qualname(func.value) or "").startswith("torch"):
        return  # torch.cuda() is no tensor method
    c.handled.add(id(func))
    new: cst.CSTNode | None = None
    state = c.state(Tensors)
    kind = state.receivers.kind(func.value, c.stack)
    if state.cuda_classes and _may_be_own_cuda(c, func.value, kind, state.cuda_classes):
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
    if kind:
        c.report(node, "OA101", f"`.cuda()` moves a tensor or module to a CUDA device (the receiver is {kind})",
                 new, fix="safe")
    else:
        c.report(node, "OA101", "`.cuda()` moves a tensor or module to a CUDA device (the receiver is not known "
                 "to be a tensor or module: check it)", new, heuristic=True)


_OWN_CLASS_KIND = re.compile(r"(\w+), an nn\.Module subclass")


def _may_be_own_cuda(c: FileCheck, receiver: cst.CSTNode, kind: str | None, classes: frozenset[str]) -> bool:
    """Whether the receiver of ``.cuda()`` may be an instance of one of ``classes`` (those of the file that define
    cuda() themselves): ``self`` in a method of one, an instance built from one, or a receiver not known to be a
    torch tensor or module at all."""
    if isinstance(receiver, cst.Name) and receiver.value == "self":
        cls = next((n for n in reversed(c.stack) if isinstance(n, cst.ClassDef)), None)
        if cls is not None and cls.name.value in classes:
            return True
    if isinstance(receiver, cst.Call) and isinstance(receiver.func, cst.Name) and receiver.func.value in classes:
        return True
    if not kind:
        return True
    named = _OWN_CLASS_KIND.search(kind)
    return named is not None and named.group(1) in classes


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


def _device_argument(c: FileCheck) -> str | None:
    """The target's device as the code of an argument: an expression on the neutral target, else a literal."""
    if c.target.neutral:
        return c.device_expr(None)
    text = c.device_text(None)
    return f'"{text}"' if text else None


@on_api("OA109")
def _typed_tensor(c: FileCheck, node: cst.CSTNode, q: str) -> None:
    """OA109: a legacy typed CUDA tensor. Called with sizes that are int literals it is ``torch.empty`` of them,
    with one list or tuple literal the tensor of that data: both are safe fixes (dtype and device written
    out). Anything else stays a suggestion: a variable argument may be a size or data, and ``isinstance`` or
    ``.type(...)`` against the class has no one-expression equivalent. An alias's class is its group's
    (TypedAliases)."""
    if c.target.keeps_cuda:
        return  # ROCm: torch.cuda's typed tensors are HIP's
    if id(node) in c.state(TypedAliases).classes:
        return  # an alias's class: its group's finding (_typed_alias)
    rule = c.rules["OA109"]
    dtype = _TYPED_DTYPES.get(q.rsplit(".", 1)[-1].removesuffix("Tensor"))
    device = _device_argument(c)
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


_TYPED_NAME = re.compile(r"torch\.cuda\.(\w+)Tensor")


@on_string
def _typed_tensor_name(c: FileCheck, node: cst.SimpleString, s: str) -> bool:
    """OA109: a typed CUDA class named as a string, as ``x.type("torch.cuda.FloatTensor")`` converts and
    ``x.type() == "torch.cuda.HalfTensor"`` tests. Where the plugin has typed classes, its own class's name (its
    ``Tensor.type`` takes the name, as torch_npu's ``_npu_type`` does); elsewhere a conversion is ``.to(device,
    dtype)`` and a test compares the tensor's dtype and device."""
    m = _TYPED_NAME.fullmatch(s)
    dtype = _TYPED_DTYPES.get(m.group(1)) if m else None
    if m is None or dtype is None or c.target.keeps_cuda or not c.on("OA109"):
        return False
    rule = c.rules["OA109"]
    twin = _typed_twin(c.target.name)
    if twin:
        new = f"{twin}.{m.group(1)}Tensor"
        c.report(node, "OA109", f"{rule.summary}: '{s}' -> '{new}' (the plugin's own typed tensor class, by name)",
                 with_value(node, new))
        return True
    device = _device_argument(c)
    call = c.stack[-2] if len(c.stack) >= 2 and isinstance(c.parent, cst.Arg) else None
    suggestion, why = None, " (a class named as a string: compare or convert the tensor's dtype and device)"
    if isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute) and call.func.attr.value == "type" \
            and len(call.args) == 1 and device:
        suggestion = f"{node_code(call.func.value)}.to({device}, torch.{dtype})"
        why = " (a conversion: .to(device, dtype))"
    c.report(node, "OA109", f"{rule.summary}: '{s}'{why}", suggestion=suggestion)
    return True


# -- an alias of a typed class on a target without them, rewritten with its uses ---------------------------------
# numpy's array makers: called with a value, they return an ndarray (data for a typed class, never a size)
_NUMPY_ARRAYS = frozenset({"array", "asarray", "ascontiguousarray", "zeros", "ones", "empty", "full", "zeros_like",
                           "ones_like", "full_like", "arange", "linspace", "stack", "concatenate", "vstack", "hstack",
                           "eye", "identity", "tile", "repeat"})
# numpy.random's samplers and the index of their ``size`` argument: with a size they return an ndarray, without
# one a number (``np.random.randint(0, 10)`` is an int, which a typed class takes as a size); None: always an array
_NUMPY_SAMPLERS = {"rand": 0, "randn": 0, "random": 0, "random_sample": 0, "ranf": 0, "sample": 0,
                   "standard_normal": 0, "randint": 2, "normal": 2, "uniform": 2, "binomial": 2, "beta": 2,
                   "gamma": 2, "poisson": 1, "exponential": 1, "choice": 1, "permutation": None}
_ALIAS_LINE = re.compile(rb"^[ \t]*[\w.]+[ \t]*=[^=\n][^\n]*Tensor\b", re.M)  # (a file without one has no alias)
_SCOPE_NODES = (cst.FunctionDef, cst.Lambda, cst.ClassDef, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)


@dataclass
class AliasGroup:
    """``Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor`` and the uses of ``Tensor``."""

    name: str
    value: cst.BaseExpression  # the alias's value, which the group's finding is on
    cls: str  # the CUDA class it names (torch.cuda.FloatTensor)
    dtype: str = ""  # float32
    device: str = ""  # the new device expression: "musa" if cuda else "cpu"
    why: str | None = None  # why the group stays as it is; None: it is rewritten
    sizes: int = 0  # calls with sizes, rewritten to torch.empty(..., **Tensor.keywords)
    data: int = 0  # calls with data, left as they are (the alias is torch.tensor of its dtype and device)
    conversions: int = 0  # x.type(Tensor), rewritten to x.to(**Tensor.keywords)
    fix: str = "safe"
    uses: dict[int, cst.Call] = field(default_factory=dict)  # id(call) -> its rewrite
    # the alias becomes a function that builds what the class built, the CPU class's tensor moved to the device,
    # and its calls stay as they are: an attribute (``self.Tensor = ...``, whose uses other modules may hold), or
    # a name given an argument that may be a size or data (``unknown``), with no x.type(alias) to rewrite
    factory: bool = False
    cpu_class: str = ""  # torch.FloatTensor
    on_device: str = ""  # the device's expression ("musa"), which the factory moves to
    unknown: list[str] = field(default_factory=list)  # calls that may be given a size or data
    calls: int = 0  # an attribute's calls in this file
    passed: int = 0  # an attribute passed on to a call (GANLoss(tensor=self.Tensor)), which may call it


@file_state
@dataclass
class TypedAliases:
    """The aliases of typed CUDA classes in a file, found before the walk: on a target whose plugin has no typed
    classes (coverage_db/curated/vendors.toml ``legacy_types``), an alias and all its uses are one port."""

    groups: dict[int, AliasGroup]  # id(an alias's value) -> its group
    classes: dict[int, AliasGroup]  # id(a class named in an alias's value) -> its group
    uses: dict[int, AliasGroup]  # id(a call to rewrite) -> its group

    @classmethod
    def start(cls, c: FileCheck, module: cst.Module, source: bytes) -> TypedAliases:
        state = cls({}, {}, {})
        t = c.target
        if t.keeps_cuda or not c.on("OA109") or not _ALIAS_LINE.search(source) or _typed_twin(t.name):
            return state
        device = c.device_expr(None) if t.neutral else f'"{t.device}"' if t.device else None
        if device is None:
            return state
        finder = _AliasFinder(c, module, source, device)
        for group in finder.groups():
            state.groups[id(group.value)] = group
            for n in (group.value.body, group.value.orelse) if isinstance(group.value, cst.IfExp) else (group.value,):
                state.classes[id(n)] = group
            if group.why is None:
                state.uses.update((u, group) for u in group.uses)
        return state


class _AliasFinder:
    """The alias groups of one module (TypedAliases): each alias, its uses, and whether every use has a rewrite."""

    def __init__(self, c: FileCheck, module: cst.Module, source: bytes, device: str):
        self.c = c
        self.module = module
        self.device = device
        self.receivers = c.state(Tensors).receivers
        self.script = b"__main__" in source or b"parse_args(" in source

    def groups(self) -> list[AliasGroup]:
        out: list[AliasGroup] = []
        todo: list[tuple[cst.CSTNode, list[cst.CSTNode], cst.CSTNode]] = [(self.module, [self.module], self.module)]
        while todo:  # the assignments of module and function scopes (a class body's are attributes)
            node, scopes, above = todo.pop()
            if isinstance(node, cst.Assign):
                group = self._alias(node, scopes)
                if group is not None:
                    out.append(group)
                    if group.why is None and "noqa" in node_code(above):
                        group.why = "the alias is marked noqa"
                continue
            if isinstance(node, cst.ClassDef):  # its methods (the class body's assignments are class attributes)
                if isinstance(node.body, cst.IndentedBlock):
                    todo.extend((m, scopes, node) for m in node.body.body if isinstance(m, (cst.FunctionDef,
                                                                                             cst.ClassDef)))
                continue
            if isinstance(node, (cst.Lambda, *_SCOPE_NODES[3:])):
                continue
            inner = [*scopes, node] if isinstance(node, cst.FunctionDef) else scopes
            for child in children(node):
                todo.append((child, inner if isinstance(node, cst.FunctionDef) and child is node.body else scopes,
                             node))
        return out

    def _resolve(self, node: cst.CSTNode, scopes: list[cst.CSTNode]) -> str | None:
        """``c.qualname`` of ``node`` where no function of ``scopes`` binds its root (the walk has not reached it)."""
        root = (dotted(node) or "").split(".")[0]
        if not root or any(root in self.receivers.bindings(s) for s in scopes[1:]):
            return None
        return self.c.qualname(node)

    def _alias(self, node: cst.Assign, scopes: list[cst.CSTNode]) -> AliasGroup | None:
        if len(node.targets) != 1:
            return None
        target = node.targets[0].target
        method = scopes[-1] if isinstance(scopes[-1], cst.FunctionDef) else None
        own = method.params.params[0].name.value if method is not None and method.params.params else None
        attribute = isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name) and \
            target.value.value == own
        if not isinstance(target, cst.Name) and not attribute:
            return None
        value = node.value
        branches = [value.body, value.orelse] if isinstance(value, cst.IfExp) else [value]
        names = [self._resolve(b, scopes) if isinstance(b, (cst.Attribute, cst.Name)) else None for b in branches]
        cuda = [q for q in names if q and q.startswith("torch.cuda.") and q.rsplit(".", 1)[-1] in TYPED_CLASSES]
        if not cuda:
            return None
        name = node_code(target)
        group = AliasGroup(name, value, cuda[0])
        kind = cuda[0].rsplit(".", 1)[-1]
        dtype = _TYPED_DTYPES.get(kind.removesuffix("Tensor"))
        if dtype is None:  # DoubleTensor: OA206's
            group.why = f"`{kind}` has no dtype this port writes"
            return group
        group.dtype = dtype
        group.cpu_class, group.on_device = f"torch.{kind}", self.device
        if isinstance(value, cst.IfExp):
            on_device = [q == f"torch.cuda.{kind}" for q in names]
            # (torch.Tensor, float32 by default, as the CPU branch of FloatTensor: pix2pix's; kept as written where
            # the CUDA branch becomes the factory, an attribute's)
            loose = kind == "FloatTensor" and isinstance(target, cst.Attribute) and \
                sorted(names, key=str) == ["torch.Tensor", "torch.cuda.FloatTensor"]
            if sorted(names, key=str) != sorted([f"torch.cuda.{kind}", f"torch.{kind}"]) and not loose:
                group.why = "its branches are not the same class on CUDA and on the CPU"
                return group
            test = node_code(value.test).strip()
            group.device = f'{self.device} if {test} else "cpu"' if on_device[0] else \
                f'"cpu" if {test} else {self.device}'
        else:
            group.device = self.device
        if isinstance(target, cst.Attribute):
            group.factory, group.fix = True, "unsafe"  # a subclass or another module may hold a use of it
            self._attribute_uses(group, target)
            return group
        scope = scopes[-1]
        if name in self.receivers._declared_names():
            group.why = f"`{name}` is declared global or nonlocal"
            return group
        if len(self.receivers.bindings(scope).get(name, ())) != 1:
            group.why = f"`{name}` is bound more than once"
            return group
        if not isinstance(scope, cst.FunctionDef) and not self.script and not name.startswith("_"):
            group.fix = "unsafe"  # another module may import it, and call it as a class
        self._uses(group, node, scopes)
        return group

    def _uses(self, group: AliasGroup, assign: cst.Assign, chain: list[cst.CSTNode]) -> None:
        """Each use of the alias in its scope (the last of ``chain``, which starts with the module) and the scopes
        below that do not bind its name: a rewrite for each, or the reason of the first that has none."""
        name = group.name
        scope = chain[-1]
        body = scope.body if isinstance(scope, cst.FunctionDef) else scope
        todo: list[tuple[cst.CSTNode, tuple[cst.CSTNode, ...], list[cst.CSTNode]]] = [(body, (), chain)]
        while todo and group.why is None:
            node, parents, scopes = todo.pop()
            if node is assign.targets[0].target:
                continue
            if isinstance(node, _SCOPE_NODES) and node is not body:
                if name in self.receivers.bindings(node):
                    if isinstance(node, cst.ClassDef):  # (its methods would still see the alias)
                        group.why = f"class {node.name.value} binds `{name}` too"
                    continue  # its own `name`
                scopes = [*scopes, node]
            if isinstance(node, cst.Name) and node.value == name:
                self._use(group, node, parents, scopes)
                continue
            parents = (*parents, node)
            for child in children(node):
                if isinstance(node, cst.Attribute) and child is node.attr:
                    continue
                if isinstance(node, cst.Arg) and child is node.keyword:
                    continue
                todo.append((child, parents, scopes))
        if group.why is None and group.unknown:
            if group.conversions:
                group.why = f"`{group.unknown[0]}` may be given a size or data (not known which), beside " \
                            f"x.type({name}), which a function in its place could not convert to"
            else:  # every use a call: a function that builds what the class built, the calls as they are
                group.factory, group.uses = True, {}

    def _attribute_uses(self, group: AliasGroup, target: cst.Attribute) -> None:
        """The uses in this file of an attribute alias (``self.Tensor``): any ``<name>.Tensor`` not rooted in an
        import. A call or a call's argument takes the factory; anything else (a class test, ``x.type(...)``,
        another binding by the alias's class or a subclass of it in the file) keeps the group, and the finding says
        which. Another class's own ``self.Tensor = tensor`` (a loss given the alias) is that class's attribute."""
        attr = target.attr.value
        found: list[tuple[cst.Attribute, tuple[cst.CSTNode, ...]]] = []
        bases: dict[str, set[str]] = {}
        todo: list[tuple[cst.CSTNode, tuple[cst.CSTNode, ...]]] = [(self.module, ())]
        while todo:
            node, parents = todo.pop()
            todo.extend((child, (*parents, node)) for child in children(node))
            if isinstance(node, cst.ClassDef):
                bases[node.name.value] = {b.value.value for b in node.bases if isinstance(b.value, cst.Name)}
            elif isinstance(node, cst.Attribute) and node.attr.value == attr and isinstance(node.value, cst.Name) \
                    and self.c.qualname(node) is None:
                found.append((node, parents))

        def owner(parents: tuple[cst.CSTNode, ...]) -> str | None:
            return next((p.name.value for p in reversed(parents) if isinstance(p, cst.ClassDef)), None)

        family = {owner(next(ps for n, ps in found if n is target))} - {None}
        grew = True
        while grew:  # the alias's class and its subclasses in the file
            grew = False
            for name, of in bases.items():
                if name not in family and of & family:
                    family.add(name)
                    grew = True
        for node, parents in found:
            if node is target:
                continue
            parent = parents[-1]
            call = parents[-2] if len(parents) >= 2 else None
            if isinstance(parent, (cst.AssignTarget, cst.AugAssign, cst.AnnAssign, cst.Del, cst.Element)):
                if owner(parents) in family or not family:
                    group.why = f"`{group.name}` is bound more than once"
            elif isinstance(parent, cst.Call) and parent.func is node:
                group.calls += 1
            elif isinstance(parent, cst.Arg) and isinstance(call, cst.Call):
                if isinstance(call.func, cst.Name) and call.func.value in ("isinstance", "issubclass"):
                    group.why = f"`{_short(call)}` is a class test"
                elif isinstance(call.func, cst.Attribute) and call.func.attr.value in ("type", "new"):
                    group.why = f"`{_short(call)}` needs the class"
                else:
                    group.passed += 1
            elif isinstance(parent, cst.Attribute):
                group.why = f"`{_short(parent)}` reads an attribute of the class"
            else:
                group.why = f"`{_short(parent)}` uses the class as a value"
            if group.why is not None:
                return

    def _use(self, group: AliasGroup, node: cst.Name, parents: tuple[cst.CSTNode, ...],
             scopes: list[cst.CSTNode]) -> None:
        name = group.name
        parent = parents[-1] if parents else None
        statement = next((p for p in reversed(parents) if isinstance(p, (cst.SimpleStatementLine,
                                                                           cst.BaseCompoundStatement))), None)
        if statement is not None and "noqa" in node_code(statement):
            group.why = "a use of it is marked noqa"
            return
        if isinstance(parent, cst.Call) and parent.func is node:
            kind = self._call_kind(parent, scopes, parents)
            if kind is None:
                group.unknown.append(_short(parent))
            elif kind == "data":
                group.data += 1
            else:
                group.sizes += 1
                args = list(parent.args) or [cst.Arg(cst.Integer("0"))]
                last = cst.Arg(expr(f"{name}.keywords"), star="**")
                if isinstance(args[-1].comma, cst.Comma):  # a trailing comma (one argument a line): one more line
                    last = last.with_changes(comma=args[-1].comma)
                    args[-1] = args[-1].with_changes(comma=args[-2].comma if len(args) > 1 else comma())
                else:
                    args[-1] = args[-1].with_changes(comma=comma())
                group.uses[id(parent)] = parent.with_changes(func=expr("torch.empty"), args=[*args, last])
            return
        call = parents[-2] if len(parents) >= 2 else None
        if isinstance(parent, cst.Arg) and isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute):
            if call.func.attr.value == "type" and len(call.args) == 1 and parent.keyword is None and not parent.star:
                group.conversions += 1
                group.uses[id(call)] = call.with_changes(
                    func=call.func.with_changes(attr=cst.Name("to")),
                    args=[cst.Arg(expr(f"{name}.keywords"), star="**")])
                return
        if isinstance(parent, cst.Arg) and isinstance(call, cst.Call):
            if isinstance(call.func, cst.Name) and call.func.value in ("isinstance", "issubclass"):
                group.why = f"`{_short(call)}` is a class test"
            else:
                group.why = f"`{_short(call)}` is given the class itself"
        elif isinstance(parent, cst.Attribute):
            group.why = f"`{_short(parent)}` reads an attribute of the class"
        else:
            group.why = f"`{_short(parent or node)}` uses the class as a value"

    def _call_kind(self, call: cst.Call, scopes: list[cst.CSTNode], parents: tuple[cst.CSTNode, ...]) -> str | None:
        """"sizes" or "data": what a typed class is given; None where it is not known (a variable argument)."""
        if any(a.keyword is not None or a.star for a in call.args):
            return None
        if len(call.args) != 1:
            return "sizes"  # (a typed class takes data as one argument; none: an empty tensor)
        arg = call.args[0].value
        if isinstance(arg, cst.Name):
            value = _reaching(arg.value, parents)
            if value is not None:
                return self._value_kind(value, scopes, 1)
        return self._value_kind(arg, scopes, 0)

    def _value_kind(self, node: cst.CSTNode, scopes: list[cst.CSTNode], depth: int) -> str | None:
        if isinstance(node, cst.Integer):
            return "sizes"
        if isinstance(node, (cst.List, cst.Tuple, cst.ListComp)):
            return "data"
        if isinstance(node, cst.Subscript) and isinstance(node.value, cst.Attribute) and \
                node.value.attr.value == "shape" and len(node.slice) == 1 and \
                isinstance(node.slice[0].slice, cst.Index) and isinstance(node.slice[0].slice.value, cst.Integer):
            return "sizes"  # x.shape[0]: an int, of a tensor or an ndarray
        if isinstance(node, cst.Call):
            if isinstance(node.func, cst.Attribute) and node.func.attr.value in ("size", "numel", "dim") and \
                    self._resolve(node.func, scopes) is None:
                return "sizes"  # a tensor's (an ndarray's size is no method)
            if isinstance(node.func, cst.Name) and node.func.value in ("len", "int") and \
                    self._resolve(node.func, scopes) is None and node.func.value not in self.receivers.bindings(
                        scopes[0]):
                return "sizes"
            q = self._resolve(node.func, scopes) or ""
            if q.startswith("numpy.random."):
                if q.count(".") != 2 or q.rsplit(".", 1)[-1] not in _NUMPY_SAMPLERS:
                    return None
                at = _NUMPY_SAMPLERS[q.rsplit(".", 1)[-1]]
                sized = at is None or any(a.keyword is not None and a.keyword.value == "size" for a in node.args) or \
                    len([a for a in node.args if a.keyword is None and not a.star]) > at
                return "data" if sized else None
            if q.startswith("numpy.") and q.count(".") == 1 and q.split(".")[1] in _NUMPY_ARRAYS:
                return "data"
            return None
        if isinstance(node, cst.Name) and depth < 3:  # a name every binding of which is one kind, where it is used
            if node.value in self.receivers._declared_names():
                return None
            for s in reversed(scopes):
                bindings = self.receivers.bindings(s).get(node.value)
                if bindings is None:
                    continue
                kinds = {self._value_kind(what, scopes[:scopes.index(s) + 1], depth + 1) if how == "value" else None
                         for how, what in bindings}
                return kinds.pop() if len(kinds) == 1 else None
        return None


def _reaching(name: str, parents: tuple[cst.CSTNode, ...]) -> cst.BaseExpression | None:
    """The value of ``name = value``, the assignment that reaches a use of ``name`` (``parents``: the nodes above
    the use) in straight-line code: the last one before the use's statement in its block, or in a block around it
    that no loop (a later binding of a loop's body would reach the use too) or scope lies between; None where there
    is none, or a statement between them names ``name`` at all."""
    word = re.compile(rf"\b{re.escape(name)}\b")
    for i in range(len(parents) - 1, 0, -1):
        block, child = parents[i - 1], parents[i]
        if isinstance(block, _SCOPE_NODES) or isinstance(block, (cst.For, cst.While)) and child is block.body:
            return None
        if not isinstance(block, (cst.IndentedBlock, cst.Module)) or child not in block.body:
            continue
        before = list(block.body[:block.body.index(child)])
        for statement in reversed(before):
            small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) and \
                len(statement.body) == 1 else None
            if isinstance(small, cst.Assign) and len(small.targets) == 1 and \
                    isinstance(small.targets[0].target, cst.Name) and small.targets[0].target.value == name:
                return small.value
            if word.search(node_code(statement)):
                return None  # bound or changed some other way
    return None


def _short(node: cst.CSTNode) -> str:
    text = " ".join(node_code(node).split())
    return text if len(text) <= 60 else text[:57] + "..."


@on(cst.Assign)
def _typed_alias(c: FileCheck, node: cst.Assign) -> None:
    """The finding of an alias group (TypedAliases), on the alias's value: its rewrite, or why there is none."""
    group = c.state(TypedAliases).groups.get(id(node.value))
    if group is None:
        return
    rule = c.rules["OA109"]
    if group.why is not None:
        c.report(node.value, "OA109", f"{rule.summary}: `{group.cls}` in `{group.name}`, an alias of it (not "
                 f"rewritten: {group.why}; {c.target.title} has no typed tensor classes, and the alias is rewritten "
                 "with all its uses or not at all)", suggestion=rule_suggestion(c, rule))
        return
    if group.factory:
        _typed_factory(c, node, group)
        return
    if "functools" not in c.top_imports:  # imported with the fix, and taken out again where it is not applied
        c.plan.add_imports.add("functools")
        c.plan.remove_imports.add(("functools", None, None))
    new = f"functools.partial(torch.tensor, dtype=torch.{group.dtype}, device={group.device})"
    n = group.name
    done = [f"{group.sizes} call{'s' * (group.sizes != 1)} with sizes -> torch.empty(..., **{n}.keywords)",
            f"{group.data} call{'s' * (group.data != 1)} with data, kept (the alias builds the tensor)",
            f"{group.conversions} x.type({n}) -> x.to(**{n}.keywords)"]
    uses = "; ".join(d for d, k in zip(done, (group.sizes, group.data, group.conversions), strict=True) if k)
    why = "" if group.fix == "safe" else f"; unsafe: another module may import `{n}` and call it as a class"
    c.report(node.value, "OA109", f"{rule.summary}: `{n}`, an alias of `{group.cls}` -> a factory of "
             f"torch.{group.dtype} tensors on the device ({c.target.title} has no typed tensor classes), rewritten "
             f"with its uses: {uses or 'none'}{why}", expr(new), fix=group.fix)


def _typed_factory(c: FileCheck, node: cst.Assign, group: AliasGroup) -> None:
    """The alias's CUDA class becomes a function that builds the CPU class's tensor, from whatever the class was
    given (sizes, data, nothing), and moves it to the device: each call of it builds what it built on CUDA."""
    factory = f"lambda *size_or_data: {group.cpu_class}(*size_or_data).to({group.on_device})"
    value = node.value
    if isinstance(value, cst.IfExp):
        on_body = c.qualname(value.body) == group.cls
        branch = expr(f"({factory})" if on_body else factory)
        new: cst.BaseExpression = value.with_changes(body=branch) if on_body else value.with_changes(orelse=branch)
    else:
        new = expr(factory)
    n = group.name
    if group.unknown:
        calls = f"its {len(group.unknown)} call{'s' * (len(group.unknown) != 1)} stay as they are " \
                f"(`{group.unknown[0]}` may be given a size or data)"
    else:
        calls = f"its {group.calls} call{'s' * (group.calls != 1)} here stay as they are"
        if group.passed:
            calls += f", and it is passed on {group.passed} time{'s' * (group.passed != 1)}, to be called"
    why = "; unsafe: a subclass or another module may use it as a class (isinstance, x.type)" \
        if group.fix == "unsafe" else ""
    c.report(node.value, "OA109", f"{c.rules['OA109'].summary}: `{n}`, an alias of `{group.cls}` -> a function "
             f"that builds what the class built, {group.cpu_class}(...) moved to the device ({c.target.title} has no "
             f"typed tensor classes): {calls}{why}", new, fix=group.fix)


@on(cst.Call)
def _typed_alias_use(c: FileCheck, node: cst.Call) -> None:
    group = c.state(TypedAliases).uses.get(id(node))
    if group is not None:
        what = "sizes" if isinstance(node.func, cst.Name) else "a conversion"
        c.report(node, "OA109", f"{c.rules['OA109'].summary}: a call of `{group.name}`, an alias of `{group.cls}` "
                 f"({what}; rewritten with the alias)", group.uses[id(node)], fix=group.fix)


@on_finish
def _alias_groups_whole(c: FileCheck) -> None:
    """A use of an alias inside what another finding rewrites is rewritten inside that rewrite (which was built
    from the original node); where it cannot be, the group is not rewritten, and the file's probes stay CUDA's
    (a probe ported alone would send the device down the path of the alias it kept)."""
    state = c.state(TypedAliases)
    if not state.uses:
        return
    mine = [r for r in c.plan.reports if id(r.node) in state.uses and r.code == "OA109" and r.replacement is not None]
    broken: set[int] = set()
    for r in c.plan.reports:
        for use in mine:
            if use is r or r.replacement is None or id(r.node) not in use.ancestors:
                continue
            swap = _Substitute(use.node, use.replacement)
            new = r.replacement.visit(swap)
            if swap.done and isinstance(new, cst.CSTNode):
                r.replacement = new
            else:  # the rewrite around it was not built from its node
                broken.add(id(state.uses[id(use.node)].value))
    if not broken:
        return
    for r in list(c.plan.reports):
        if r.code != "OA109":
            continue
        if id(r.node) in state.groups and id(r.node) in broken:
            r.suggestion, r.replacement = node_code(r.replacement) if r.replacement else None, None
            r.message += " (not rewritten: a use of the alias sits inside another rewrite)"
        elif id(r.node) in state.uses and id(state.uses[id(r.node)].value) in broken:
            c.plan.reports.remove(r)
    stuck_probes(c)


class _Substitute(cst.CSTTransformer):
    """One node replaced by identity (``done`` once it was found)."""

    def __init__(self, old: cst.CSTNode, new: cst.CSTNode | None):
        super().__init__()
        self.old, self.new, self.done = old, new, False

    def on_leave(self, original_node, updated_node):  # type: ignore[no-untyped-def, override]
        if original_node is self.old and self.new is not None:
            self.done = True
            return self.new
        return updated_node
