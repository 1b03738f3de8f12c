"""OA3xx, distributed: the NCCL backend and what only NCCL does.

- ``init_process_group("nccl")`` / ``new_group(backend=...)``: the backend string, also in a conditional
  or an ``or`` (OA301); on the neutral target the argument is dropped (the default backend follows the
  device). ``"nccl"`` held for later (``backend = "nccl"``, ``default="nccl"``, a dict value) is an unsafe
  fix, made safe (``on_finish``) where the name reaches ``init_process_group(backend=...)``.
- ``"nccl"`` compared with (OA304), ``barrier(device_ids=...)`` (OA307), ``device_ids=[...]`` (OA305).

The ``torch.distributed`` and ``torch.cuda.nccl`` APIs matched by name (OA302, OA303, OA306) are the
catalogue's ``apis``: apis.py. Examples: rules/catalogue.toml [OA301] ... [OA307].
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from opaudit.lint.catalogue import version_at_least
from opaudit.lint.rules.devices import device_string, holds_a_device, value_holder
from opaudit.lint.walk import (
    FileCheck,
    Report,
    argument,
    comparison_operands,
    expr,
    file_state,
    on,
    on_call,
    on_finish,
    on_keyword,
    on_string,
    string_leaves,
    string_value,
    with_value,
    without_arg,
)

DIST_INIT = {"torch.distributed.init_process_group", "torch.distributed.new_group",
             "torch.distributed.distributed_c10d.init_process_group", "torch.distributed.distributed_c10d.new_group"}


@file_state
@dataclass
class Backends:
    """The file's backend strings followed through names."""

    values: list[tuple[str, Report]] = field(default_factory=list)  # backend = "nccl"
    names: set[str] = field(default_factory=set)  # init_process_group(backend=backend)


@on_call(*DIST_INIT)
def _init(c: FileCheck, node: cst.Call, q: str) -> None:
    a = argument(node, 0, "backend")
    if a is not None:
        _backend_string(c, node, a)


@on_call("torch.distributed.barrier")
def _barrier(c: FileCheck, node: cst.Call, q: str) -> None:
    if c.on("OA307") and argument(node, 99, "device_ids") is not None:
        c.report(node, "OA307", c.rules["OA307"].summary)


@on_keyword("device_ids")
def _device_ids(c: FileCheck, node: cst.Call, q: str | None, a: cst.Arg) -> None:
    if isinstance(a.value, (cst.List, cst.Tuple)):
        for el in a.value.elements:
            device_string(c, el.value, "OA305")


def _backend_string(c: FileCheck, call: cst.Call, arg: cst.Arg) -> None:
    """The backend argument of init_process_group / new_group: a string, or strings inside a conditional
    (``"nccl" if cuda else "gloo"``) or a default (``args.backend or "nccl"``)."""
    value = arg.value
    t = c.target
    key = c.name_key(value) if isinstance(value, (cst.Name, cst.Attribute)) else None
    if key is not None:
        c.state(Backends).names.add(key)
    leaves = [v for v in string_leaves(value) if _names_nccl(string_value(v) or "")]
    if not leaves:
        return
    for v in leaves:
        c.handled.add(id(v))
    if t.keeps_cuda:
        return
    summary = c.rules["OA301"].summary
    if t.neutral and leaves == [value]:
        positional = [a for a in call.args if a.keyword is None]
        if arg.keyword is not None or positional == [arg]:
            c.report(call, "OA301", f"{summary}: '{string_value(value)}'", without_arg(call, arg))
            return
    for v in leaves:
        text = string_value(v) or ""
        new: cst.CSTNode | None = None
        if t.neutral:
            if c.acc is not None and version_at_least(c.min_torch, "2.6"):
                new = expr(f"torch.distributed.get_default_backend_for_device({c.acc})")
                c.need_import("torch.distributed")
        elif t.dist_backend and t.device and isinstance(v, cst.SimpleString):
            out = []
            for p in (x.strip() for x in text.split(",")):
                if ":" in p:
                    dev, _, be = p.partition(":")
                    out.append(f"{t.device if dev == 'cuda' else dev}:{t.dist_backend if be == 'nccl' else be}")
                else:
                    out.append(t.dist_backend if p == "nccl" else p)
            new = with_value(v, ",".join(out))
        c.report(v, "OA301", f"{summary}: '{text}'", new)


def _names_nccl(text: str) -> bool:
    return any(p.strip().split(":")[-1] == "nccl" for p in text.split(","))


@on_string
def _string(c: FileCheck, node: cst.SimpleString, s: str) -> bool:
    if s in ("nccl", "NCCL") and c.on("OA301"):
        _nccl_value(c, node, s)
        return True
    return False


def _nccl_value(c: FileCheck, node: cst.SimpleString, s: str) -> None:
    """"nccl" held for later (``backend = "nccl"``, ``default="nccl"``, a dict value, a branch of
    ``"NCCL" if gpu else "GLOO"``): the value the backend will be. Rewritten with --unsafe-fixes, since
    where the value goes is not seen here."""
    child, parent = value_holder(c, node)
    depth = len(c.stack)
    while depth > 0 and c.stack[depth - 1] is not parent:
        depth -= 1
    saved = c.stack
    c.stack = c.stack[:depth]
    try:
        holds = holds_a_device(c, child, parent) or (isinstance(parent, cst.Arg) and parent.keyword is not None
                                                     and parent.keyword.value in ("backend", "dist_backend"))
    finally:
        c.stack = saved
    if not holds:
        return
    t = c.target
    if t.keeps_cuda:
        return
    new: cst.CSTNode | None = None
    if t.dist_backend:
        new = with_value(node, t.dist_backend.upper() if s.isupper() else t.dist_backend)
    elif t.neutral and c.acc is not None and version_at_least(c.min_torch, "2.6"):
        new = expr(f"torch.distributed.get_default_backend_for_device({c.acc})")
    c.report(node, "OA301", f"{c.rules['OA301'].summary}: '{s}' (a value held for later: check where it goes)",
             new, heuristic=True, fix="unsafe")
    key = c.assigned_name(node)
    if key is not None and c.plan.reports and c.plan.reports[-1].node is node:
        c.state(Backends).values.append((key, c.plan.reports[-1]))


@on(cst.Comparison)
def _visit_comparison(c: FileCheck, node: cst.Comparison) -> None:
    for op in comparison_operands(node):
        s = string_value(op)
        if s in ("nccl", "NCCL"):
            c.handled.add(id(op))
            c.report(op, "OA304", f"{c.rules['OA304'].summary}: '{s}'")


@on_finish
def _backends_reached(c: FileCheck) -> None:
    for name, r in c.state(Backends).values:
        if name in c.state(Backends).names and r.replacement is not None:
            r.fix = "safe"  # backend = "nccl" ... init_process_group(backend=backend)
            r.message = r.message.replace(" (a value held for later: check where it goes)", "")

