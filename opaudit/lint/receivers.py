"""What the receiver of ``.cuda()`` / ``.is_cuda`` / ``.type(torch.cuda.FloatTensor)`` is known to be.

A method matched by name could belong to a class of the user's own; the fix is safe only where the
receiver is known to be a torch tensor or module:

- made by torch: a factory or op (``torch.randn(...)``), a module of ``torch.nn`` built in place
  (``nn.Sequential(...)``), and what tensor and module methods return (``.float()``, ``.to(...)``, ...);
- an instance of a class of this file that subclasses an ``nn.Module`` (``self`` in its methods too);
- a parameter or buffer: ``for p in model.parameters()``, ``for n, p in m.named_parameters()``,
  ``next(model.parameters())``;
- a name annotated as ``torch.Tensor``, ``nn.Parameter`` or an ``nn.Module`` (parameters included);
- a name every binding of which, in the scope the use resolves to, is one of the above (a conditional
  expression counts when both its branches do: ``model = model.cuda() if cuda else model``).

- ``self.x`` in a method, where every value the class's methods bind ``self.x`` to is one of the above
  (``self.mean = torch.mean(x)`` ... ``self.mean = self.mean.cuda()``).

Anything else (another attribute, a subscript, a loop variable over a data loader, a parameter without an
annotation, a name declared global or nonlocal somewhere) is not known, and its fix stays unsafe.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import libcst as cst

if TYPE_CHECKING:
    from opaudit.lint.walk import FileCheck

# methods of a tensor or module that return a tensor or module of the same kind
SAME_KIND = frozenset({"float", "half", "double", "bfloat16", "long", "int", "short", "bool", "byte", "char",
                       "contiguous", "detach", "clone", "eval", "train", "to", "cuda", "cpu", "requires_grad_",
                       "share_memory", "share_memory_", "detach_", "pin_memory", "t", "view", "reshape",
                       "permute", "transpose", "squeeze", "unsqueeze", "flatten", "expand", "repeat"})
TENSOR_TYPES = frozenset({"torch.Tensor", "torch.nn.Parameter", "torch.nn.parameter.Parameter", "torch.FloatTensor",
                          "torch.LongTensor", "torch.HalfTensor", "torch.IntTensor", "torch.BoolTensor",
                          "torch.ByteTensor", "torch.DoubleTensor", "torch.BFloat16Tensor"})
TYPED_CLASSES = frozenset(f"{kind}Tensor" for kind in ("Float", "Double", "Half", "BFloat16", "Long", "Int", "Short",
                                                        "Char", "Byte", "Bool"))
NOT_MODULES = frozenset({"Parameter", "UninitializedParameter", "UninitializedBuffer", "Buffer"})
PARAMETER_ITERATORS = {"parameters": 0, "buffers": 0, "named_parameters": 1, "named_buffers": 1}
_FUNCTIONS = (cst.FunctionDef, cst.Lambda)
_COMPREHENSIONS = (cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)
_NESTED = (cst.FunctionDef, cst.ClassDef, cst.Lambda, *_COMPREHENSIONS)
_DEPTH = 6


class Receivers:
    """Per file: the scopes' bindings, worked out when first asked (most files never ask)."""

    def __init__(self, c: FileCheck, module: cst.Module, source: bytes):
        self.c = c
        self.module = module
        self._bindings: dict[int, dict[str, list[tuple[str, Any]]]] = {}
        self._declared: set[str] | None = None  # names declared global or nonlocal anywhere in the file
        self._source = source
        self._classes: dict[str, cst.ClassDef] | None = None
        self._module_classes: dict[str, str | None] = {}

    # -- what a receiver is -------------------------------------------------------------------------
    def kind(self, node: cst.CSTNode, stack: list[cst.CSTNode]) -> str | None:
        """How ``node`` (an expression at the top of ``stack``'s innermost scope) is known to be a tensor or
        module, in words for the message; None when it is not known."""
        return self._expr(node, stack, 0, set())

    def _expr(self, node: cst.CSTNode, stack: list[cst.CSTNode], depth: int, visiting: set[tuple[int, str]]
              ) -> str | None:
        if depth > _DEPTH:
            return None
        while isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and \
                _same_kind(node.func.attr.value) and self.c.qualname(node.func) is None:
            node = node.func.value
        if isinstance(node, cst.Call):
            return self._call(node, stack)
        if isinstance(node, cst.IfExp):  # model.cuda() if cuda else model: known when both branches are
            kinds = [self._expr(branch, stack, depth + 1, visiting) for branch in (node.body, node.orelse)]
            return None if any(k is None for k in kinds) else next((k for k in kinds if k), "")
        if isinstance(node, cst.Name):
            return self._name(node.value, stack, depth, visiting)
        attr = _own(node)
        if attr is not None:
            return self._own_attribute(attr, stack, depth, visiting)
        return None

    def _own_attribute(self, attr: str, stack: list[cst.CSTNode], depth: int, visiting: set[tuple[int, str]]
                       ) -> str | None:
        """``self.mean`` in a method: known where the methods of the class bind it, and every value they bind
        it to is known (``self.mean = torch.mean(x)`` ... ``self.mean = self.mean.cuda()``)."""
        if "self" in self._declared_names():
            return None
        at = next((i for i in range(len(stack) - 3, -1, -1) if isinstance(stack[i], cst.ClassDef)
                   and stack[i + 1] is getattr(stack[i], "body", None) and isinstance(stack[i + 2], cst.FunctionDef)),
                  None)
        if at is None:
            return None
        cls = stack[at]
        assert isinstance(cls, cst.ClassDef)
        method = stack[at + 2]
        assert isinstance(method, cst.FunctionDef)
        params = method.params.params
        if method.decorators or not params or params[0].name.value != "self":
            return None
        key = (id(cls), f"self.{attr}")
        if key in visiting:
            return ""  # the attribute's other bindings decide (self.mean = self.mean.cuda())
        visiting = visiting | {key}
        values: list[tuple[cst.CSTNode, list[cst.CSTNode]]] = []
        for m in cls.body.body:
            if not isinstance(m, cst.FunctionDef):
                continue
            for n in _walk(m.body):
                targets = [t.target for t in n.targets] if isinstance(n, cst.Assign) else \
                    [n.target] if isinstance(n, (cst.AnnAssign, cst.AugAssign)) else []
                for t in targets:
                    if isinstance(t, (cst.Tuple, cst.List)) and any(_own(e.value) == attr for e in t.elements):
                        return None  # unpacked: not followed
                    if _own(t) == attr:
                        if isinstance(n, cst.AugAssign) or getattr(n, "value", None) is None:
                            return None
                        values.append((n.value, [*stack[:at + 2], m, m.body]))
        if not values:
            return None
        kinds = [self._expr(v, s, depth + 1, visiting) for v, s in values]
        if any(k is None for k in kinds):
            return None
        return next((k for k in kinds if k), None)

    def _call(self, node: cst.Call, stack: list[cst.CSTNode]) -> str | None:
        q = self.c.qualname(node.func) or ""
        if q.startswith("torch.") and not q.startswith(("torch.cuda", "torch.utils", "torch.hub", "torch.load",
                                                        "torch.jit.load")):
            return "made by torch: a tensor or a module"
        if isinstance(node.func, cst.Name):
            if node.func.value == "next" and len(node.args) == 1 and self._resolves_to_module_scope("next", stack) \
                    and self._parameter_iterator(node.args[0].value) is not None:
                return "a parameter of a module"
            name = node.func.value
            if self._resolves_to_module_scope(name, stack) and self._module_class(name) is not None:
                return f"an instance of {name}, an nn.Module subclass"
            if self._typed_alias(name, stack):
                return f"made by {name}, a typed tensor class"
        return None

    def _typed_alias(self, name: str, stack: list[cst.CSTNode]) -> bool:
        """Whether every binding of ``name`` is a typed tensor class: ``Tensor = torch.cuda.FloatTensor if cuda
        else torch.FloatTensor`` (the legacy GAN style)."""
        if name in self._declared_names():
            return False
        for scope, _ in reversed(self._scopes(stack)):
            bindings = self.bindings(scope).get(name)
            if bindings is None:
                continue
            return all(how == "value" and self._typed_class(what) for how, what in bindings)
        return False

    def _typed_class(self, node: cst.CSTNode) -> bool:
        if isinstance(node, cst.IfExp):
            return self._typed_class(node.body) and self._typed_class(node.orelse)
        q = self.c.qualname(node) or ""
        return q.startswith("torch.") and q.endswith("Tensor") and q.rsplit(".", 1)[-1] in TYPED_CLASSES

    def _name(self, name: str, stack: list[cst.CSTNode], depth: int, visiting: set[tuple[int, str]]) -> str | None:
        if name in self._declared_names():
            return None
        scopes = self._scopes(stack)
        for i in range(len(scopes) - 1, -1, -1):
            scope, inner_stack = scopes[i]
            if isinstance(scope, cst.ClassDef) and i != len(scopes) - 1:
                continue  # a class body's names are not seen by the functions in it
            bindings = self.bindings(scope).get(name)
            if bindings is None:
                continue
            key = (id(scope), name)
            if key in visiting:
                return ""  # the name's other bindings decide (x = x.float())
            visiting = visiting | {key}
            kinds = [self._binding(b, scope, inner_stack, depth, visiting) for b in bindings]
            if any(k is None for k in kinds):
                return None
            return next((k for k in kinds if k), None)
        return None

    def _binding(self, binding: tuple[str, Any], scope: cst.CSTNode, stack: list[cst.CSTNode], depth: int,
                 visiting: set[tuple[int, str]]) -> str | None:
        how, what = binding
        if how == "value":
            return self._expr(what, stack, depth + 1, visiting)
        if how == "annotation":
            return self._annotation(what)
        if how == "param":
            param, index = what
            if param.annotation is not None:
                return self._annotation(param.annotation.annotation)
            cls = stack[-3] if len(stack) >= 3 else None
            if index == 0 and isinstance(scope, cst.FunctionDef) and isinstance(cls, cst.ClassDef) and \
                    stack[-2] is cls.body and not scope.decorators and self._module_class_node(cls):
                return f"self in {cls.name.value}, an nn.Module subclass"
            return None
        if how == "loop":
            return "a parameter of a module" if what else None
        return None

    def _annotation(self, node: cst.BaseExpression) -> str | None:
        q = self.c.qualname(node)
        if q in TENSOR_TYPES:
            return f"annotated as {q}"
        if q is not None and self._torch_module(q):
            return f"annotated as {q}"
        if isinstance(node, cst.Name) and self._module_class(node.value) is not None:
            return f"annotated as {node.value}, an nn.Module subclass"
        return None

    @staticmethod
    def _parameter_iterator(node: cst.CSTNode) -> int | None:
        """``x.parameters()`` -> 0, ``x.named_parameters()`` -> 1 (the index of the parameter in what it
        yields), else None."""
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
            return PARAMETER_ITERATORS.get(node.func.attr.value)
        return None

    # -- classes ------------------------------------------------------------------------------------
    @staticmethod
    def _torch_module(q: str) -> bool:
        """A class of torch.nn whose instances are modules (nn.Module, nn.Linear, DistributedDataParallel)."""
        if not q.startswith("torch.nn."):
            return False
        last = q.rsplit(".", 1)[-1]
        inner = q[len("torch.nn."):].split(".")[:-1]
        return last[:1].isupper() and last not in NOT_MODULES and all(p in ("modules", "parallel") or
                                                                      p.islower() for p in inner) and \
            not any(p in ("functional", "init", "utils", "attention") for p in inner)

    def _module_class(self, name: str) -> cst.ClassDef | None:
        """The module-level class ``name`` of this file, when it subclasses an nn.Module (through other classes
        of the file too) and is the name's only module-level binding."""
        if self._classes is None:
            self._classes = {}
            top = self.bindings(self.module)
            for stmt in self.module.body:
                if isinstance(stmt, cst.ClassDef) and len(top.get(stmt.name.value, ())) == 1:
                    self._classes[stmt.name.value] = stmt
        cls = self._classes.get(name)
        return cls if cls is not None and self._is_module_class(cls, 0) else None

    def _module_class_node(self, cls: cst.ClassDef) -> bool:
        self._module_class("")  # (the file's classes, once)
        return self._is_module_class(cls, 0)

    def _is_module_class(self, cls: cst.ClassDef, depth: int) -> bool:
        if depth > _DEPTH:
            return False
        for base in cls.bases:
            if base.keyword is not None:
                continue
            q = self.c.qualname(base.value)
            if q is not None and self._torch_module(q):
                return True
            if isinstance(base.value, cst.Name) and self._classes is not None:
                other = self._classes.get(base.value.value)
                if other is not None and other is not cls and self._is_module_class(other, depth + 1):
                    return True
        return False

    # -- scopes and bindings ------------------------------------------------------------------------
    def _scopes(self, stack: list[cst.CSTNode]) -> list[tuple[cst.CSTNode, list[cst.CSTNode]]]:
        """The scopes a name used at the top of ``stack`` is looked up in, outermost first, each with the stack
        down to it. A function's decorators, defaults and annotations are in the enclosing scope."""
        out: list[tuple[cst.CSTNode, list[cst.CSTNode]]] = [(self.module, [])]
        for i, node in enumerate(stack):
            if isinstance(node, _NESTED):
                below = stack[i + 1] if i + 1 < len(stack) else None
                if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)) and below is not node.body:
                    continue
                out.append((node, stack[:i + 1]))
        return out

    def _resolves_to_module_scope(self, name: str, stack: list[cst.CSTNode]) -> bool:
        """Whether no enclosing scope but the module's binds ``name`` (a builtin or a module-level class)."""
        scopes = self._scopes(stack)
        return not any(name in self.bindings(s) for s, _ in scopes[1:]) and name not in self._declared_names() \
            and (name != "next" or name not in self.bindings(self.module))

    def _declared_names(self) -> set[str]:
        if self._declared is None:
            self._declared = set()
            if b"global" in self._source or b"nonlocal" in self._source:
                for node in _walk(self.module):
                    if isinstance(node, (cst.Global, cst.Nonlocal)):
                        self._declared.update(n.name.value for n in node.names)
        return self._declared

    def bindings(self, scope: cst.CSTNode) -> dict[str, list[tuple[str, Any]]]:
        """Every binding of every name in ``scope`` (nested scopes aside): ("value", expression),
        ("annotation", annotation), ("param", (Param, index)), ("loop", a parameter iterator's item?), or
        ("other", None)."""
        found = self._bindings.get(id(scope))
        if found is not None:
            return found
        out: dict[str, list[tuple[str, Any]]] = {}

        def add(name: str, how: str, what: Any = None) -> None:
            out.setdefault(name, []).append((how, what))

        if isinstance(scope, _FUNCTIONS):
            p = scope.params
            for i, param in enumerate((*p.posonly_params, *p.params, *p.kwonly_params)):
                add(param.name.value, "param", (param, i))
            for star in (p.star_arg, p.star_kwarg):
                if isinstance(star, cst.Param):
                    add(star.name.value, "other")
            body: list[cst.CSTNode] = [scope.body]
        elif isinstance(scope, _COMPREHENSIONS):
            comp: cst.CompFor | None = scope.for_in
            while comp is not None:
                _loop_targets(comp.target, comp.iter, add, self._parameter_iterator)
                comp = comp.inner_for_in
            body = []
        elif isinstance(scope, cst.ClassDef):
            body = [scope.body]
        else:
            body = list(scope.body)  # type: ignore[attr-defined]
        todo = list(reversed(body))
        while todo:
            node = todo.pop()
            if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
                add(node.name.value, "other")
                todo.extend(reversed([*(d.decorator for d in node.decorators)]))
                continue
            if isinstance(node, (cst.Lambda, *_COMPREHENSIONS)):
                continue
            if isinstance(node, cst.Assign):
                for t in node.targets:
                    if isinstance(t.target, cst.Name):
                        add(t.target.value, "value", node.value)
                    else:
                        _others(t.target, add)
            elif isinstance(node, cst.AnnAssign):
                if isinstance(node.target, cst.Name):
                    add(node.target.value, "annotation", node.annotation.annotation)
            elif isinstance(node, cst.AugAssign):
                _others(node.target, add)
            elif isinstance(node, cst.For):
                _loop_targets(node.target, node.iter, add, self._parameter_iterator)
            elif isinstance(node, cst.WithItem) and node.asname is not None:
                _others(node.asname.name, add)
            elif isinstance(node, cst.ExceptHandler) and node.name is not None:
                _others(node.name.name, add)
            elif isinstance(node, cst.NamedExpr):
                _others(node.target, add)
            elif isinstance(node, (cst.Import, cst.ImportFrom)):
                if not isinstance(node.names, cst.ImportStar):
                    for alias in node.names:
                        bound: cst.BaseExpression = alias.asname.name if alias.asname is not None else alias.name
                        while isinstance(bound, cst.Attribute):
                            bound = bound.value
                        if isinstance(bound, cst.Name):
                            add(bound.value, "other")
                continue
            elif isinstance(node, (cst.MatchAs, cst.MatchStar)) and node.name is not None:
                add(node.name.value, "other")
            elif isinstance(node, cst.MatchMapping) and node.rest is not None:
                add(node.rest.value, "other")
            todo.extend(reversed(list(_children(node))))
        self._bindings[id(scope)] = out
        return out


def _same_kind(method: str) -> bool:
    """A method of a tensor or module that returns one of the same kind: a conversion, or an in-place op
    (``add_``, ``scatter_``, ``requires_grad_``), which returns its receiver."""
    return method in SAME_KIND or (method.endswith("_") and not method.startswith("_"))


def _others(target: cst.CSTNode, add: Any) -> None:
    for name in _names(target):
        add(name, "other")


def _names(target: cst.CSTNode) -> list[str]:
    if isinstance(target, cst.Name):
        return [target.value]
    if isinstance(target, (cst.Tuple, cst.List)):
        return [n for e in target.elements for n in _names(e.value)]
    if isinstance(target, cst.StarredElement):
        return _names(target.value)
    return []


def _loop_targets(target: cst.CSTNode, iterable: cst.CSTNode, add: Any, parameter_iterator: Any) -> None:
    """A loop's targets: ``p`` of ``for p in m.parameters()`` and of ``for n, p in m.named_parameters()`` is a
    parameter; any other target is not known."""
    index = parameter_iterator(iterable)
    if index == 0 and isinstance(target, cst.Name):
        add(target.value, "loop", True)
        return
    if index == 1 and isinstance(target, cst.Tuple) and len(target.elements) == 2 and \
            isinstance(target.elements[1].value, cst.Name):
        _others(target.elements[0].value, add)
        add(target.elements[1].value.value, "loop", True)  # type: ignore[attr-defined]
        return
    _others(target, add)


def _own(node: cst.CSTNode) -> str | None:
    """``x`` where ``node`` is ``self.x``, else None."""
    if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value == "self":
        return node.attr.value
    return None


def _children(node: cst.CSTNode) -> list[cst.CSTNode]:
    from opaudit.lint.walk import children

    return list(children(node))


def _walk(node: cst.CSTNode) -> Any:
    todo = [node]
    while todo:
        n = todo.pop()
        yield n
        todo.extend(_children(n))
