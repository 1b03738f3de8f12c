"""What the fallback did: per op, the path it took, its calls, the bytes it moved and the time it took.

>>> with opaudit.fallback.install("ascend") as fb:          # doctest: +SKIP
...     train_step()
>>> fb.stats.table()                                         # doctest: +SKIP

One ``Stats`` per installation or simulation; it is JSON (``to_json``/``load``), it joins an Audit
(``Audit.fallback``) and the HTML report shows it.
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from opaudit.files import write_atomic
from opaudit.tracing.attribution import user_line  # noqa: F401 - the rehearsal's modules take it from here

SCHEMA = "opaudit.fallback/1"
# the ways an op ran, best first
PATHS = ("native", "vendor_cpu", "decomposition", "cpu", "forbidden")
PATH_TEXT = {
    "native": "runs on the device",
    "vendor_cpu": "the vendor's CPU fallback",
    "decomposition": "decomposed into other ops (each held to the device in turn)",
    "cpu": "a CPU round trip",
    "forbidden": "fallback forbidden: fails as on the device",
}


@dataclass
class OpStat:
    """One op on one path."""

    op: str  # "add.Tensor" (aten), or "ns::name.overload"
    path: str  # a key of choose.PATH_TEXT
    reason: str = ""
    status: str | None = None  # the matrix status that sent it here (simulation)
    calls: int = 0
    to_host: int = 0  # bytes copied device -> host
    to_device: int = 0  # bytes copied host -> device
    seconds: float = 0.0
    checked: int = 0  # calls compared with the CPU reference (check_numerics)
    max_rel_error: float | None = None
    source: str | None = None  # the first user line that reached it ("train.py:42")
    # an API the target's PyTorch lacks, called from Python (rehearsal/skew.py; ``reason`` starts with its name):
    # counted and said, never a device op of the summary
    api: bool = False

    @property
    def bytes(self) -> int:
        return self.to_host + self.to_device


@dataclass
class Stats:
    target: str  # "ascend@2.6.0.post5", or the device type of a live backend
    device: str  # "npu"
    kind: str  # "installed" (a live backend) or "simulated" (a CPU rehearsal)
    engine: str = ""  # a rehearsal's device engine (rehearsal/native.py): "native" (C++) or "wrapper" (Python)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # what the run did otherwise than the device would
    started: float = field(default_factory=time.perf_counter)
    duration_s: float = 0.0
    _ops: dict[tuple[str, str], OpStat] = field(default_factory=dict, repr=False)
    # brings the counts up to date before they are read: the rehearsal's C++ device counts the calls it runs
    # natively itself (simulator.Simulator.sync_counts)
    refresh: Callable[[], None] | None = field(default=None, repr=False, compare=False)

    @property
    def ops(self) -> dict[tuple[str, str], OpStat]:
        """(op, path) -> its statistic."""
        if self.refresh is not None:
            self.refresh()
        return self._ops

    # -- recording ------------------------------------------------------------------------------------
    def op(self, name: str, path: str, reason: str = "", status: str | None = None) -> OpStat:
        key = (name, path)
        s = self._ops.get(key)
        if s is None:
            s = self._ops[key] = OpStat(name, path, reason, status, source=user_line())
        return s

    def fallback_calls(self) -> int:
        """The calls on the fallback's paths counted so far, as they stand: without a sync of the C++ device's
        counts (its own ops, never the fallback's), so a progress display may read it from another thread."""
        return sum(s.calls for s in list(self._ops.values()) if s.path != "native")

    def numerics(self, s: OpStat, error: float) -> None:
        s.checked += 1
        if s.max_rel_error is None or error > s.max_rel_error or error != error:
            s.max_rel_error = error

    def finish(self) -> None:
        self.duration_s = round(time.perf_counter() - self.started, 4)

    # -- views ----------------------------------------------------------------------------------------
    @property
    def calls(self) -> Counter[str]:
        """Calls per path (a simulation counts the ops that run on the device too)."""
        return Counter({p: r["calls"] for p, r in self.summary().items()})

    @property
    def statuses(self) -> Counter[str]:
        """Calls per matrix status (a simulation)."""
        out: Counter[str] = Counter()
        for s in self.ops.values():
            if s.status:
                out[s.status] += s.calls
        return out

    def fallen_back(self) -> list[OpStat]:
        """The ops that did not run on the device itself, most calls first."""
        return sorted((s for s in self.ops.values() if s.path != "native"), key=lambda s: (-s.calls, s.op, s.path))

    def summary(self) -> dict[str, dict[str, float]]:
        """Per path: distinct ops, calls, bytes moved, seconds."""
        out: dict[str, dict[str, float]] = {}
        for s in self.ops.values():
            if s.api:
                continue
            row = out.setdefault(s.path, {"ops": 0, "calls": 0, "bytes": 0, "seconds": 0.0})
            row["ops"] += 1
            row["calls"] += s.calls
            row["bytes"] += s.bytes
            row["seconds"] += s.seconds
        return {p: out[p] for p in PATHS if p in out}

    def lines(self) -> list[str]:
        """A few lines for a terminal."""
        parts = []
        for p, r in self.summary().items():
            ops = f" / {_n(int(r['ops']), 'op')}" if r["ops"] else ""
            parts.append(f"{PATH_TEXT[p]}: {_n(int(r['calls']), 'call')}{ops}")
        how = f"{self.kind}, device {self.device}" + (f", {self.engine} engine" if self.engine else "")
        out = [f"fallback on {self.target} ({how}): " + (", ".join(parts) or "no op ran")]
        fallen = self.fallen_back()
        for st in fallen[:20]:
            err = f", max rel. error {st.max_rel_error:.2g}" if st.max_rel_error is not None else ""
            moved = f", {_size(st.bytes)} moved" if st.bytes else ""
            where = f"  [{st.source}]" if st.source else ""
            out.append(f"  {st.op:<48} {st.path:<13} {st.calls:>7,} calls, {st.seconds * 1e3:8.1f} ms"
                       f"{moved}{err}{where}")
        if len(fallen) > 20:
            out.append(f"  ... and {len(fallen) - 20} more")
        out += [f"warning: {w}" for w in self.warnings]
        newer = self.newer()
        apis = [s for s in newer if s.api]
        others = [s for s in newer if not s.api]
        if apis:
            shown = ", ".join(f"{s.reason.split(',')[0]} ({_n(s.calls, 'call')}"
                              + (f", first at {s.source}" if s.source else "") + ")" for s in apis[:6])
            more = f" and {len(apis) - 6} more" if len(apis) > 6 else ""
            out.append(f"needs a newer PyTorch than the target's (the audit: version_skew): it calls {shown}{more}, "
                       "which the target's PyTorch lacks; run there, the program stops at such a call, or takes "
                       "another path where it checks torch first (here it saw this torch): a rehearsal under the "
                       "target's PyTorch shows which")
        if others:
            shown = ", ".join(f"{s.op} ({s.calls:,})" for s in others[:8]) + (
                f" and {len(others) - 8} more" if len(others) > 8 else "")
            out.append(f"ops the target's PyTorch lacks, run on this torch's path ({_n(len(others), 'op')}; mostly "
                       f"torch's own, which that PyTorch does otherwise): {shown}")
        unknown = self.unknown()
        if unknown:
            shown = ", ".join(s.op for s in unknown[:8]) + (f" and {len(unknown) - 8} more" if len(unknown) > 8 else "")
            n = f"{len(unknown)} op" + ("s" if len(unknown) > 1 else "")
            out.append(f"unknown to the data, run as if native ({n}; --strict-unknown stops on them): {shown}")
        return out

    def newer(self) -> list[OpStat]:
        """The ops and APIs the target's PyTorch lacks (simulation: the installed torch ran them), most calls first."""
        return sorted((s for s in self.ops.values() if s.status == "version_skew" and s.calls),
                      key=lambda s: (-s.calls, s.op))

    def unknown(self) -> list[OpStat]:
        """The ops whose status the data does not know (simulation), run as if native, most calls first."""
        return sorted((s for s in self.ops.values() if s.status == "unknown" and s.path == "native"),
                      key=lambda s: (-s.calls, s.op))

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA, "target": self.target, "device": self.device, "kind": self.kind, "engine": self.engine,
            "duration_s": self.duration_s, "calls": dict(self.calls), "statuses": dict(self.statuses),
            "errors": list(self.errors), "warnings": list(self.warnings), "summary": self.summary(),
            "ops": [asdict(s) for s in sorted(self.ops.values(), key=lambda s: (s.path, -s.calls, s.op))],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Stats:
        s = cls(data["target"], data["device"], data["kind"], data.get("engine", ""),
                errors=list(data.get("errors", [])),
                warnings=list(data.get("warnings", [])))
        s.duration_s = data.get("duration_s", 0.0)
        for row in data.get("ops", []):
            o = OpStat(**row)
            s.ops[(o.op, o.path)] = o
        return s

    def save(self, path: str | Path) -> None:
        write_atomic(path, json.dumps(self.to_json(), indent=1) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> Stats:
        return cls.from_json(json.loads(Path(path).read_text()))


def _n(count: int, what: str) -> str:
    return f"{count:,} {what}{'s' if count != 1 else ''}"


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def warn_at_user(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn`` pointing at the first frame outside opaudit and torch, as torch's and a plugin's own
    warnings point at the caller of their API, never at the rehearsal's frames in between."""
    import torch

    skip = (str(Path(__file__).resolve().parents[1]), str(Path(torch.__file__).resolve().parent))
    frame: FrameType | None = sys._getframe(1)
    level = 2  # stacklevel 2: the caller of this function
    while frame is not None and frame.f_code.co_filename.startswith(skip):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level if frame is not None else 2)
