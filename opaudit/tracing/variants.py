"""Re-traces that follow another device's autocast (Trace.variants).

A region the program enters with ``torch.autocast("cuda", ...)`` runs, ported, by the target's rules
(matrix/amp.py): off where the target's PyTorch does not list the dtype (MPS before 2.6 with bfloat16: the region runs
in float32), in another dtype where the program names none (XLA: bfloat16). The ops of such a region are not the ones
CUDA ran, so judging them by the CUDA trace's dtypes would blame a target for calls it never makes and miss the ones
it does. Where a target the trace will be audited against runs a region otherwise, the code is traced again with
the program's autocast objects set, after their ``__init__``, as that target's torch would set them
(recorder.Recording.autocast_outcome, autocast.RegionWatch), once per distinct outcome; the re-trace's records are
kept as a variant of the trace, and the audit judges those targets by them (auditing.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from opaudit.errors import OpauditError
from opaudit.matrix import amp
from opaudit.tracing.schema import Trace


def _releases(targets: Sequence[Any]) -> list[tuple[str, Any]]:
    """(key, release) of each target: a name (``mps@2.5.0``, ``all``), a matrix file or a Matrix."""
    from opaudit.matrix import Matrix, load_database, load_matrix

    out = []
    for t in targets:
        if isinstance(t, str) and t.strip().lower() == "all":
            db = load_database()
            out += [(e.key, load_matrix(e.key, db=db).release) for e in db.entries]
        else:
            m = t if isinstance(t, Matrix) else load_matrix(str(t))
            out.append((m.key, m.release))
    return out


def outcomes(trace: Trace, targets: Sequence[Any]) -> dict[str, tuple[dict[str, str], list[str]]]:
    """label -> (outcome, the targets that take it), for the targets whose autocast runs a region of ``trace``
    otherwise than CUDA (none where the trace entered no region)."""
    named = amp.named_regions(trace.records)
    if not named:
        return {}
    out: dict[str, tuple[dict[str, str], list[str]]] = {}
    for key, r in _releases(targets):
        o = amp.outcome(r.device_type, r.dispatch_key, r.torch, named)
        if o:
            out.setdefault(amp.label(o), (o, []))[1].append(key)
    return out


def follow_autocast(trace: Trace, targets: Sequence[Any] | None, retrace: Callable[[dict[str, str]], Trace],
                    note: Callable[[str], None] | None = None) -> Trace:
    """``trace`` with a variant for each autocast outcome of ``targets`` that differs from CUDA's, each made by
    ``retrace(outcome)``. A re-trace that fails is said in the trace's warnings (those targets are then judged by
    the CUDA path's dtypes, with the caveat the audit gives them)."""
    if not targets or trace.meta.status != "complete":
        return trace
    for lab, (o, keys) in outcomes(trace, targets).items():
        said = f"{amp.describe(o)}, as {_names(keys)} run{'s' if len(keys) == 1 else ''} it"
        if note is not None:
            note(f"tracing again: {said}")
        try:
            other = retrace(o)
        except OpauditError as e:
            trace.meta.warnings.append(f"the trace again with {said} failed ({e.message}): those targets are "
                                       "judged by the CUDA path's dtypes")
            continue
        if other.meta.status != "complete":
            trace.meta.warnings.append(f"the trace again with {said} ended {other.meta.status} "
                                       f"({other.meta.error}): those targets are judged by the CUDA path's dtypes")
            continue
        trace.variants[lab] = other.records
        for k, v in other.sources.items():
            trace.sources.setdefault(k, v)
        for k, v in other.modules.items():
            trace.modules.setdefault(k, v)
    return trace


def _names(keys: list[str]) -> str:
    return ", ".join(keys[:3]) + (f" and {len(keys) - 3} more" if len(keys) > 3 else "")
