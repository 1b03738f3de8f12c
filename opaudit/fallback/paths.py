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
