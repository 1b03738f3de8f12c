"""OA8xx, native extensions and custom-op registration.

- ``torch.utils.cpp_extension.load(...)`` / ``load_inline`` of CUDA sources (OA802), and calls into the
  module it returns (``_plugin.bias_act(...)``, OA805), also where the sources are kept in a name.
- Kernels registered for the CUDA dispatch key: ``torch.library.impl(..., "CUDA")``, ``lib.impl``,
  ``register_kernel``, ``custom_op(..., device_types="cuda")`` (OA803).
- CUDA source file names (OA806) and nvcc's own flags (OA807): string literals matching the catalogue's
  ``strings``, and items of a list given to nvcc (``{"nvcc": [...]}``, ``extra_cuda_cflags=[...]``) that
  are not flags every C compiler takes.

``.cu`` files themselves (OA804) are reported by the engine. Examples: rules/catalogue.toml [OA801] ...
[OA807].
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import libcst as cst

from opaudit.lint.walk import (
    FileCheck,
    dotted,
    file_state,
    is_docstring,
    node_code,
    on,
    on_call,
    on_keyword,
    on_method,
    on_string,
    string_leaves,
    string_value,
)


@file_state
@dataclass
class Extensions:
    """What the file builds from CUDA sources."""

    cuda_sources: bool = False  # the file names a CUDA source file
    names: set[str] = field(default_factory=set)  # names bound to a module built from CUDA sources

    @classmethod
    def start(cls, c: FileCheck, module: cst.Module, source: bytes) -> Extensions:
        return cls(cuda_sources=b".cu'" in source or b'.cu"' in source)


@on_call("torch.utils.cpp_extension.load", "torch.utils.cpp_extension.load_inline")
def _load(c: FileCheck, node: cst.Call, q: str) -> None:
    if c.on("OA802"):
        cuda = any(a.keyword is not None and (a.keyword.value in ("extra_cuda_cflags", "cuda_sources") or (
            a.keyword.value == "with_cuda" and isinstance(a.value, cst.Name) and a.value.value == "True"))
            for a in node.args) or ".cu'" in node_code(node) or '.cu"' in node_code(node)
        if cuda or c.state(Extensions).cuda_sources:  # (sources held in a name: the file names .cu files)
            c.report(node, "OA802", c.rules["OA802"].summary, heuristic=not cuda)
            extension_name(c, node)


@on(cst.Assign)
def _visit_assign(c: FileCheck, node: cst.Assign) -> None:
    if c.state(Extensions).cuda_sources and isinstance(node.value, cst.Call) and len(node.targets) == 1 and (
            ".cu'" in node_code(node.value) or '.cu"' in node_code(node.value)):
        extension_name(c, node.value, node)  # _plugin = get_plugin(sources=["bias_act.cpp", "bias_act.cu"])


def extension_name(c: FileCheck, call: cst.Call, assign: cst.Assign | None = None) -> None:
    """The name a module built from CUDA sources is kept in (``_plugin = load(..., sources=[...".cu"])``,
    ``ext = importlib.import_module("fused_adam_cuda")``): calls into it are reported where they are made."""
    if assign is None:
        assign = c.parent if isinstance(c.parent, cst.Assign) else None
    if assign is None or assign.value is not call or len(assign.targets) != 1:
        return
    name = dotted(assign.targets[0].target)
    if name is not None:
        c.state(Extensions).names.add(name)


def extension_call(c: FileCheck, node: cst.CSTNode) -> bool:
    """``_plugin.bias_act(...)`` where ``_plugin`` holds a module built from CUDA sources."""
    d = dotted(node)
    if d is None or not isinstance(c.parent, cst.Call) or c.parent.func is not node:
        return False
    head = d.rsplit(".", 1)[0]
    if head == d or head not in c.state(Extensions).names:
        return False
    c.report(node, "OA805", f"{c.rules['OA805'].summary}: `{d}`", heuristic=True)
    return True


@on_call("torch.library.impl", "torch.library.register_kernel", "torch.library.Library.impl")
def _library_impl(c: FileCheck, node: cst.Call, q: str) -> None:
    _dispatch_key(c, node, heuristic=False)


@on_method("impl", "register_kernel")
def _impl(c: FileCheck, node: cst.Call, func: cst.Attribute) -> None:
    _dispatch_key(c, node, heuristic=True)


@on_keyword("device_types")
def _device_types(c: FileCheck, node: cst.Call, q: str | None, a: cst.Arg) -> None:
    """torch.library.custom_op(..., device_types="cuda"): a kernel for CUDA only."""
    keys = [v for v in string_leaves(a.value) + [e.value for e in getattr(a.value, "elements", ())]
            if string_value(v) in ("cuda", "CUDA")]
    for v in keys:
        c.handled.add(id(v))
    if keys:
        c.report(node, "OA803", c.rules["OA803"].summary)


def _dispatch_key(c: FileCheck, node: cst.Call, *, heuristic: bool) -> None:
    """A kernel registered for the CUDA dispatch key: which key the target needs is a judgement."""
    keys = [a.value for a in node.args if string_value(a.value) in ("CUDA", "cuda")]
    for k in keys:
        c.handled.add(id(k))
    if keys:
        c.report(node, "OA803", c.rules["OA803"].summary, heuristic=heuristic)


@on_string
def _string(c: FileCheck, node: cst.SimpleString, s: str) -> bool:
    """A CUDA source file name or an nvcc flag."""
    parent = c.parent
    if c.strings and not is_docstring(parent):
        for pattern, code in c.strings:
            if pattern.fullmatch(s.strip()):
                c.report(node, code, f"{c.rules[code].summary}: '{s.strip()}'")
                return True
        if isinstance(parent, cst.Element) and c.on("OA807") and _nvcc_list(c) and \
                not GENERIC_COMPILER_FLAG.fullmatch(s.strip()):
            c.report(node, "OA807", f"{c.rules['OA807'].summary}: '{s.strip()}' (given to nvcc)")
            return True
    return False


@on(cst.FormattedString)
def _visit_fstring(c: FileCheck, node: cst.FormattedString) -> bool:
    """f"-gencode=arch=compute_{cc},code=sm_{cc}": the literal text, each expression standing for a word."""
    if c.strings and not is_docstring(c.parent):
        text = "".join(p.value if isinstance(p, cst.FormattedStringText) else "0" for p in node.parts).strip()
        for pattern, code in c.strings:
            if pattern.fullmatch(text):
                c.report(node, code, f"{c.rules[code].summary}: '{node_code(node)}'")
                return True
    return False


# flags every C/C++ compiler takes (optimisation, debug info, language standard, include and library
# paths, macros not of CUDA's): in an nvcc list they port as they are; the list's "nvcc" is the finding
GENERIC_COMPILER_FLAG = re.compile(r"-(?:O[0-3s]?|g\d?|w|std=[\w+]+|[IL]\S*|l\w+|[DU](?!\w*CUDA)\w+(?:=\S*)?|pthread)")


def _nvcc_list(c: FileCheck) -> bool:
    """Whether the string being visited is an item of a list of nvcc's flags: ``{"nvcc": [...]}`` (added to
    or passed through a helper too), ``extra_cuda_cflags=[...]``."""
    i = len(c.stack) - 2  # above the Element: its List
    if i < 0 or not isinstance(c.stack[i], cst.List):
        return False
    i -= 1
    while i >= 0 and isinstance(c.stack[i], (cst.BinaryOperation, cst.Arg, cst.Call)):
        n = c.stack[i]
        if isinstance(n, cst.Arg) and n.keyword is not None:
            return n.keyword.value in ("extra_cuda_cflags", "nvcc")
        i -= 1
    holder = c.stack[i] if i >= 0 else None
    return isinstance(holder, cst.DictElement) and string_value(holder.key) == "nvcc"

