"""Device-selected paths in the rehearsal: where the stand-in device would take another path than the target.

The rehearsal's device is PrivateUse1 on the installed PyTorch. Inside a device-selected composite
(coverage_db/curated/device_selected.toml: attention, dropout, RNNs, ...) PyTorch picks kernels by device
kind and version, so the stand-in reaches the ops of PrivateUse1's path on the installed PyTorch. A target of
another device kind (MPS, XLA, CUDA, XPU: built-in types simulated on PrivateUse1) or of an older PyTorch
line (musa@1.3.0 builds 2.2, whose LSTM cells have no PrivateUse1 branch) takes another path there.

``detours(matrix)`` lists the ops the stand-in would reach that the target's own path never runs. When the
rehearsal meets one:

- where the target's path is PyTorch's device-independent composite (``generic``), the op runs as its
  decomposition into those ops (references.py: the fused cells; native_dropout as the bernoulli mask), each
  held to the matrix in turn: the rehearsal takes the target's path, and counts the op as a composite;
- where the target registers the composite itself (torch_npu's ``gru.input``: the dispatcher runs the plugin's
  kernel for the whole GRU, PyTorch's cells never reach the device), an op of the stand-in's path that the
  target lacks (``_thnn_fused_gru_cell_backward``) is no op the target runs when it is reached inside a call of
  that overload (``own_kernel_detours``; the simulator watches the call and marks the tensors saved for its
  backward): it runs on its CPU data as a step of the target's own kernel (opaudit's reference where the CPU has
  no kernel), counted as running on the device with the reason; the ops of that path the target has run as
  they are. Reached elsewhere (``nn.GRUCell``, a packed sequence's ``gru.data``) the op is held to the matrix
  as any other;
- otherwise (real MPS runs ``_lstm_mps``, which the stand-in cannot reach) it stops with an error that names
  the real device's path and says it is a limit of the rehearsal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from opaudit.matrix.matrix import ChoicePath, ChoiceRule, choice_rules

if TYPE_CHECKING:
    from opaudit.matrix.matrix import Matrix

STAND_IN_KEY = "PrivateUse1"


def installed_torch() -> str:
    return torch.__version__.split("+")[0]


@dataclass(frozen=True)
class Detour:
    op: str  # the op the stand-in reaches ("_thnn_fused_lstm_cell")
    choice: str  # the composite it is reached in ("lstm")
    stand_in: str  # the stand-in's path there
    target: ChoicePath  # the path the target takes instead
    runs: bool  # the target's path is the generic composite: the op runs as its decomposition
    why: str  # one sentence on both paths
    inside: str = ""  # own_kernel_detours: the overload whose call the op must be reached in ("aten::gru.input")


def _target_path(rule: ChoiceRule, matrix: Matrix) -> ChoicePath | None:
    """The path the audit resolves the choice to for this target (its name is Support.via)."""
    r = matrix.release
    support = matrix.resolve(rule.op.removeprefix("aten::"))
    applicable = [p for p in rule.paths if p.applies(r.dispatch_key, r.torch) and "{op}" not in p.ops]
    for p in applicable:
        if support.via in (p.name, *p.ops):
            return p
    forced = [p for p in applicable if p.forced]
    return forced[0] if forced else None


def _own_kernel(rule: ChoiceRule, matrix: Matrix) -> ChoicePath | None:
    """The path "a kernel of the plugin for the composite" where the target registers the overload of the choice
    that a plain call reaches (``gru.input``) as a kernel of its own."""
    r = matrix.release
    name = f"{rule.op.removeprefix('aten::')}.{rule.plain_overload}"
    support = matrix.resolve(name)
    if support.status != "native" or support.via not in (None, name):
        return None
    return next((p for p in rule.paths if "{op}" in p.ops and p.applies(r.dispatch_key, r.torch)), None)


def own_kernel_detours(matrix: Matrix) -> dict[str, Detour]:
    """Op name -> the Detour for an op of the stand-in's path that ``matrix``'s target lacks, inside a choice whose
    plain overload the target registers itself (``inside``): reached in a call of that overload, the op is no op
    of the target's; reached elsewhere (``nn.GRUCell`` reaches the same fused cell), it is held to the matrix."""
    version = installed_torch()
    found: dict[str, Detour] = {}
    for rule in {r.op: r for r in choice_rules().values()}.values():
        own = _own_kernel(rule, matrix)
        if own is not None:
            for op, detour in _own_kernel_detours(rule, matrix, own, version).items():
                found.setdefault(op, detour)
    return found


def _own_kernel_detours(rule: ChoiceRule, matrix: Matrix, own: ChoicePath, version: str) -> dict[str, Detour]:
    """The ops of the stand-in's path that a target running the whole composite in its own kernel lacks."""
    r = matrix.release
    choice = rule.op.removeprefix("aten::")
    overload = f"{choice}.{rule.plain_overload}"
    found: dict[str, Detour] = {}
    for path in rule.paths:
        if not path.applies(STAND_IN_KEY, version) or path.generic or "{op}" in path.ops:
            continue
        for op in path.ops:
            if matrix.resolve(op).status not in ("missing", "unknown"):
                continue
            why = (f"inside aten::{overload}, the stand-in ({STAND_IN_KEY} on PyTorch {version}) takes '{path.name}', "
                   f"but {r.key} registers aten::{overload} itself ('{own.name}': {own.condition}), so the real "
                   f"device never runs aten::{op} as such; the rehearsal runs it as a step of that kernel "
                   f"[device_selected.toml; {own.source}]")
            found.setdefault(op, Detour(op, choice, path.name, own, True, why, f"aten::{overload}"))
    return found


def detours(matrix: Matrix) -> dict[str, Detour]:
    """Op name -> the Detour the rehearsal of ``matrix``'s target takes when the stand-in reaches it."""
    r = matrix.release
    version = installed_torch()
    seen: set[str] = set()
    found: dict[str, Detour] = {}
    for rule in choice_rules().values():
        if rule.op in seen:
            continue
        seen.add(rule.op)
        target_ops = {o for p in rule.paths if p.applies(r.dispatch_key, r.torch) for o in p.ops}
        stand_in = [p for p in rule.paths if p.applies(STAND_IN_KEY, version) and not p.generic and "{op}" not in p.ops]
        foreign = {o: p for p in stand_in for o in p.ops if o not in target_ops}
        if not foreign:
            continue
        target = _target_path(rule, matrix)
        if target is None:
            continue
        choice = rule.op.removeprefix("aten::")
        who = f"{r.device_type} on PyTorch {r.torch}" if r.torch else r.device_type
        for op, path in foreign.items():
            why = (f"inside aten::{choice}, the stand-in ({STAND_IN_KEY} on PyTorch {version}) takes '{path.name}', "
                   f"but {r.key} ({who}) takes '{target.name}' ({', '.join(target.ops)}): {target.condition} "
                   f"[device_selected.toml; {target.source}]")
            found.setdefault(op, Detour(op, choice, path.name, target, target.generic, why))
    return found


def limit(detour: Detour, target: str) -> str:
    """The error of a detour the rehearsal cannot take."""
    return (f"aten::{detour.op} cannot be rehearsed for {target}: {detour.why}. The stand-in cannot take the real "
            f"device's path, so this is a limit of the CPU rehearsal, not of {target}")
