"""OA5xx, environment variables and launch: CUDA and NCCL variable names, and how a job is started.

- Variable names (the catalogue's ``env`` and ``env_prefix``, per rule) wherever they name a variable:
  ``os.environ[...]``, ``os.environ.get/setdefault/pop``, ``os.getenv``, ``os.environ.update(...)``, a dict's
  keys (an env dict for subprocess, built anywhere), ``env={...}``, ``"X" in os.environ``; the twin of
  each on a target is rules/targets/<target>.toml's [env].
- Launch: ``--local_rank`` and ``torch.distributed.launch`` (OA505), ``nvidia-smi`` / ``nvcc`` run as a
  command (OA506), ``--nproc_per_node=gpu`` (OA509).

Examples: rules/catalogue.toml [OA501] ... [OA509].
"""

from __future__ import annotations

import libcst as cst

from opaudit.lint.walk import (
    FileCheck,
    argument,
    comparison_operands,
    on,
    on_call,
    on_keyword,
    on_method,
    on_string,
    string_value,
    with_value,
)

ENVIRON_CALLS = {"os.environ.get", "os.environ.setdefault", "os.environ.pop", "os.getenv", "os.putenv",
                 "os.unsetenv", "os.environ.__getitem__"}


@on_call(*ENVIRON_CALLS)
def _environ_call(c: FileCheck, node: cst.Call, q: str) -> None:
    a = argument(node, 0)
    if a is not None:
        _env_string(c, a.value)


@on_call("os.environ.update")
def _environ_update(c: FileCheck, node: cst.Call, q: str) -> None:
    for a in node.args:
        if a.keyword is not None:
            _env_name(c, a.keyword, a.keyword.value, keyword=True)
        elif isinstance(a.value, cst.Dict):
            _env_dict(c, a.value)


@on_keyword("env")
def _env_keyword(c: FileCheck, node: cst.Call, q: str | None, a: cst.Arg) -> None:
    if isinstance(a.value, cst.Dict):
        _env_dict(c, a.value)


@on(cst.Subscript)
def _visit_subscript(c: FileCheck, node: cst.Subscript) -> None:
    if c.qualname(node.value) == "os.environ" and len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index):
        _env_string(c, node.slice[0].slice.value)


@on(cst.Dict)
def _visit_dict(c: FileCheck, node: cst.Dict) -> None:
    """Environment variable names as keys (an env dict for subprocess or os.environ.update, built anywhere)."""
    for e in node.elements:
        if isinstance(e, cst.DictElement):
            s = string_value(e.key)
            if s is not None and (s in c.env_names or s.startswith(tuple(c.env_prefixes))):
                _env_string(c, e.key)


@on(cst.Comparison)
def _visit_comparison(c: FileCheck, node: cst.Comparison) -> None:
    """``"NCCL_DEBUG" in os.environ``."""
    for op in comparison_operands(node):
        s = string_value(op)
        if s is not None and (s in c.env_names or s.startswith(tuple(c.env_prefixes))):
            right = node.comparisons[0].comparator if node.comparisons else None
            if right is not None and c.qualname(right) == "os.environ":
                _env_string(c, op)


def _env_dict(c: FileCheck, node: cst.Dict) -> None:
    for e in node.elements:
        if isinstance(e, cst.DictElement):
            _env_string(c, e.key)


def _env_string(c: FileCheck, value: cst.CSTNode) -> None:
    s = string_value(value)
    if s is None or id(value) in c.handled:
        return
    c.handled.add(id(value))
    _env_name(c, value, s)


def _env_name(c: FileCheck, node: cst.CSTNode, name: str, *, keyword: bool = False) -> None:
    code = c.env_names.get(name) or next((code for p, code in c.env_prefixes.items() if name.startswith(p)), None)
    if code is None or c.target.keeps_cuda:
        return
    twin = c.target.env_twin(name, c.min_torch)
    new: cst.CSTNode | None = None
    if twin and not keyword and isinstance(node, cst.SimpleString):
        new = with_value(node, twin)
    elif twin and keyword and isinstance(node, cst.Name):
        new = cst.Name(twin)
    message = f"{c.rules[code].summary}: {name}"
    if twin:
        message += f" -> {twin}"
    elif name in c.target.env:
        message += f" (no equivalent on {c.target.name})"
    c.report(node, code, message, new)


# -- launch ---------------------------------------------------------------------------------------------
@on_method("add_argument")
def _add_argument(c: FileCheck, node: cst.Call, func: cst.Attribute) -> None:
    if c.on("OA505"):
        if any(string_value(a.value) in ("--local_rank", "--local-rank") for a in node.args):
            c.report(node, "OA505", c.rules["OA505"].summary, suggestion='int(os.environ["LOCAL_RANK"])')


@on_string
def _command(c: FileCheck, node: cst.SimpleString, s: str) -> bool:
    """A command or launcher argument: nvidia-smi, nvcc, --nproc_per_node=gpu, torch.distributed.launch."""
    parent = c.parent
    if s.startswith(("nvidia-smi", "nvcc")) and c.on("OA506") and isinstance(parent, (cst.Arg, cst.Element)):
        c.report(node, "OA506", f"{c.rules['OA506'].summary}: '{s.split()[0]}'")
        return True
    if ("--nproc_per_node=gpu" in s or "--nproc-per-node=gpu" in s) and c.on("OA509"):
        c.report(node, "OA509", c.rules["OA509"].summary)
        return True
    if s == "torch.distributed.launch" and c.on("OA505") and isinstance(parent, (cst.Arg, cst.Element)):
        c.report(node, "OA505", c.rules["OA505"].summary, suggestion="torchrun")
        return True
    return False
