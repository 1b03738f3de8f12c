"""Guard a model in your own test suite: fail the test when it stops running on a target.

    from opaudit.testing import assert_runs_on

    def test_model_runs_on_ascend():
        assert_runs_on(MyModel(), torch.randn(2, 3, 32, 32), "ascend@2.6.0.post5", train=True)

The failure message lists each op that does not run, with the modules and source lines that issue
it, and what the data suggests (a later release, the fallback switch).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from opaudit.api import trace
from opaudit.auditing import RUNS, Audit, audit, short, tripping
from opaudit.tracing import Trace


class NotSupported(AssertionError):
    """The model has ops the target cannot run at the allowed level; ``audit`` holds the details."""

    def __init__(self, message: str, result: Audit):
        super().__init__(message)
        self.audit = result


def assert_runs_on(model: Any, inputs: Any = None, target: str | Sequence[str] = "ascend", *,
                   fail_on: str = "unknown", **trace_kwargs: Any) -> Audit:
    """Trace ``model`` on ``inputs`` (``opaudit.trace`` arguments: ``train=True``, ``mode=``, ``loss_fn=``...)
    and assert that every ``target`` runs it: no op at ``fail_on`` level or a worse one. Levels, worst first:
    ``missing``, ``version_skew``, ``unknown``, ``cpu_fallback``, ``composite``; the default, ``unknown``,
    also fails where the data knows nothing about an op. Returns the audit. A target whose torch runs the model's
    autocast regions otherwise than CUDA is judged by a trace of the model as it runs them there."""
    targets = [target] if isinstance(target, str) else list(target)
    t = trace(model, inputs, **{"targets": targets, **trace_kwargs})
    return assert_trace_runs_on(t, target, fail_on=fail_on)


def assert_trace_runs_on(t: Trace, target: str | Sequence[str], *, fail_on: str = "unknown") -> Audit:
    """The same check for a trace you already have (``opaudit.load_trace("trace.json")``)."""
    targets = [target] if isinstance(target, str) else list(target)
    result = audit(t, targets, landscape=False)
    failing = result.fails_on(fail_on)
    if failing:
        raise NotSupported(_message(result, failing, fail_on), result)
    return result


def _message(a: Audit, failing: list[str], level: str, limit: int = 10) -> str:
    bad = tripping(level)
    lines = []
    for key in failing:
        v = a.verdicts[key]
        lines.append(f"{key} (PyTorch {v.torch}): {v.summary}")
        rows = [(g, s) for g, s in zip(a.rows(key), a.results[key], strict=True)
                if s.status in bad and g.kind != "choice" and not (g.kind == "api" and s.status in RUNS)]
        rows.sort(key=lambda gs: -gs[0].calls)
        for g, s in rows[:limit]:
            where = ", ".join([*g.modules[:2], *g.sources[:2]])
            lines.append(f"  {s.status:<12} {short(g.op)} [{g.phase}] x{g.calls}" + (f" at {where}" if where else ""))
            if s.note:
                lines.append(f"  {'':<12} {s.note}")
        if len(rows) > limit:
            lines.append(f"  ... and {len(rows) - limit} more")
        lines += [f"  -> {x}" for x in v.advice]
    return "\n".join(lines)
