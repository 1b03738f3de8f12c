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

import re
from collections.abc import Callable, Sequence
from typing import Any

from opaudit.errors import OpauditError
from opaudit.matrix import amp, load_targets
from opaudit.tracing.schema import Trace


def outcomes(trace: Trace, targets: Sequence[Any]) -> dict[str, tuple[dict[str, str], list[str]]]:
    """label -> (outcome, the targets that take it), for the targets whose autocast runs a region of ``trace``
    otherwise than CUDA (none where the trace entered no region)."""
    named = amp.named_regions(trace.records)
    if not named:
        return {}
    out: dict[str, tuple[dict[str, str], list[str]]] = {}
    for m in load_targets(targets):
        r = m.release
        o = amp.outcome(r.device_type, r.dispatch_key, r.torch, named)
        if o:
            out.setdefault(amp.label(o), (o, []))[1].append(m.key)
    return out


def follow_autocast(trace: Trace, targets: Sequence[Any] | None, retrace: Callable[[dict[str, str]], Trace],
                    note: Callable[[str], None] | None = None) -> Trace:
    """``trace`` with a variant for each autocast outcome of ``targets`` that differs from CUDA's, each made by
    ``retrace(outcome)`` (``note`` hears of each before it runs). A trace again that fails is kept in the trace's
    ``meta.retrace_errors`` with the program's line (the audit says it on those targets, judged by the CUDA path's
    dtypes meanwhile); a trace that did not complete (--max-ops, --timeout) is not taken again, which its warnings
    say."""
    if not targets:
        return trace
    needed = outcomes(trace, targets)
    if needed and trace.meta.status != "complete":
        said = "; ".join(f"{amp.describe(o)} ({_names(keys)})" for o, keys in needed.values())
        trace.meta.warnings.append(f"not traced again as the targets run autocast, the trace being {trace.meta.status}"
                                   f": {said}; those targets are judged by the CUDA path's dtypes")
        return trace
    for lab, (o, keys) in needed.items():
        said = f"{amp.describe(o)}, as {_names(keys)} run{'s' if len(keys) == 1 else ''} it"
        if note is not None:
            note(f"tracing again: {said}")
        try:
            other = retrace(o)
            failure = None if other.meta.status == "complete" else f"it ended {other.meta.status}: {other.meta.error}"
        except OpauditError as e:
            line = _last_line(e.details)
            failure = e.message + (f" (at {line})" if line and line not in e.message else "")
        if failure is not None:
            trace.meta.retrace_errors[lab] = failure
            trace.meta.warnings.append(f"traced again with {said}, the code stopped: {failure}; those targets are "
                                       "judged by the CUDA path's dtypes")
            continue
        trace.variants[lab] = other.records
        for k, v in other.sources.items():
            trace.sources.setdefault(k, v)
        for k, v in other.modules.items():
            trace.modules.setdefault(k, v)
    return trace


def _last_line(details: str | None) -> str | None:
    """``path:line`` of the last frame of a traceback text (the program's line where it stopped)."""
    found = re.findall(r'File "([^"]+)", line (\d+)', details or "")
    return f"{found[-1][0]}:{found[-1][1]}" if found else None


def _names(keys: list[str]) -> str:
    return ", ".join(keys[:3]) + (f" and {len(keys) - 3} more" if len(keys) > 3 else "")
