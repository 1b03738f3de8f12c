"""The Trace: what a model ran, aggregated, and its versioned JSON form (docs/trace-format.md)."""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from opaudit.errors import InputError
from opaudit.files import write_atomic
from opaudit.matrix.registrations import Registration

if TYPE_CHECKING:
    import pandas as pd

SCHEMA = "opaudit-trace"
SCHEMA_VERSION = 2  # 2: records say where their tensors live (``where``), casts their output dtype
PHASES = ("forward", "backward", "optimizer")
KINDS = ("op", "custom", "choice", "api")
PLACES = ("device", "host", "mixed")


@dataclass(frozen=True)
class OpRecord:
    """One aggregated row: calls of ``op`` with the same phase, dtypes, module, line and choice.

    ``kind`` is ``op`` for an aten op as a backend receives it, ``custom`` for an op of another
    namespace (a vendor's ``npu::``, a user's ``torch.library`` op), and ``choice`` for a call of a
    composite whose kernel PyTorch picks per device (see coverage_db/curated/device_selected.toml);
    the backward ops of what the choice ran carry its name in ``within``. ``api`` is a call of a
    CompositeImplicitAutograd function (``aten::rms_norm.default``), recorded above its decomposition
    (trace/apis.py): no backend receives it, but the target's PyTorch must have it.

    ``where`` says where the call's tensors lived while tracing on a device (simulated cuda, meta):
    ``device``; ``host`` (every tensor on the CPU: an optimizer's step counters, ``.item()`` reads, CPU
    index tensors, data loading; it runs on the host beside a GPU and is held to no target's matrix);
    ``mixed`` (device tensors with host ones: 0-dim host scalars, host<->device copies, CPU indices).
    A CPU trace's records are all ``device``: the CPU is the device there.
    """

    op: str
    kind: str
    phase: str
    dtypes: tuple[str, ...]
    module: str | None
    source: str | None
    within: str | None
    calls: int
    shapes: tuple[str, ...] | None = None
    where: str = "device"

    @property
    def on_host(self) -> bool:
        return self.where == "host"

    @property
    def namespace(self) -> str:
        return self.op.split("::", 1)[0]

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "op": self.op,
            "kind": self.kind,
            "phase": self.phase,
            "dtypes": list(self.dtypes),
            "module": self.module,
            "source": self.source,
            "within": self.within,
            "calls": self.calls,
            "where": self.where,
        }
        if self.shapes is not None:
            d["shapes"] = list(self.shapes)
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> OpRecord:
        shapes = d.get("shapes")
        return cls(
            op=d["op"],
            kind=d["kind"],
            phase=d["phase"],
            dtypes=tuple(d["dtypes"]),
            module=d.get("module"),
            source=d.get("source"),
            within=d.get("within"),
            calls=int(d["calls"]),
            shapes=None if shapes is None else tuple(shapes),
            where=d.get("where", "device"),
        )


@dataclass
class TraceMeta:
    """How a trace was taken. The op set depends on every one of these, so they travel with it."""

    opaudit_version: str
    torch_version: str
    python_version: str
    mode: str  # real | meta | fake
    mode_reason: str
    device: str  # the device the traced code ran on: cuda (simulated), cpu or meta
    train: bool
    phases: list[str]
    amp: dict[str, Any] | None = None  # {"dtype": "float16", "policy": "cuda", "grad_scaler": true}
    optimizer: str | None = None
    steps: int = 0  # forward/backward passes when training
    optimizer_steps: int = 0  # at least 2: step 1 initialises the optimizer state
    source: dict[str, Any] = field(default_factory=dict)  # what was traced: model file, script, api
    status: str = "complete"  # complete | partial (failed) | stopped (--max-ops / --timeout)
    error: str | None = None
    created: str = ""
    duration_s: float = 0.0
    total_calls: int = 0
    noise_calls: int = 0  # profiler::, prim::, prims:: calls: dropped from the records
    unattributed_backward_calls: int = 0
    scalar_guesses: dict[str, int] = field(default_factory=dict)  # meta mode: .item() answered by a guess
    warnings: list[str] = field(default_factory=list)
    # the device was simulated on the CPU (opaudit.fallback.simulate): {"target": "cuda@2.13", "name": "cudasim"}
    simulated: dict[str, Any] | None = None


@dataclass
class Trace:
    """Every op a model hit, aggregated, with how it was taken.

    >>> trace = opaudit.trace(model, inputs, train=True)          # doctest: +SKIP
    >>> sorted(trace.ops("backward"))[:2]                           # doctest: +SKIP
    ['aten::add.Tensor', 'aten::convolution_backward.default']
    """

    meta: TraceMeta
    records: list[OpRecord]
    modules: dict[str, str] = field(default_factory=dict)  # module path -> class name
    sources: dict[str, str] = field(default_factory=dict)  # "file:line" -> the code on that line
    # ops of other namespaces -> the dispatch keys that had kernels for them where they ran
    registrations: dict[str, Registration] = field(default_factory=dict)

    # -- queries -------------------------------------------------------------------------------
    @property
    def device_records(self) -> list[OpRecord]:
        """The records a device runs (``where`` is ``device`` or ``mixed``): what a target is held to."""
        return [r for r in self.records if r.where != "host"]

    @property
    def host_records(self) -> list[OpRecord]:
        """The records of calls whose tensors all stayed on the host (``where == "host"``)."""
        return [r for r in self.records if r.where == "host"]

    def ops(self, phase: str | None = None, *, kinds: tuple[str, ...] = ("op", "custom"),
            host: bool = False) -> set[str]:
        """The distinct ops of ``kinds`` (by default what a backend receives), optionally of one phase; the
        device's ops only, unless ``host`` (then the host's ops are included)."""
        return {r.op for r in self.records if r.kind in kinds and (phase is None or r.phase == phase)
                and (host or r.where != "host")}

    def host_ops(self, phase: str | None = None) -> set[str]:
        """The distinct ops run only on host tensors (of some call: an op may run on both)."""
        return {r.op for r in self.records if r.where == "host" and r.kind != "choice"
                and (phase is None or r.phase == phase)}

    def calls(self, op: str | None = None, phase: str | None = None) -> int:
        return sum(
            r.calls
            for r in self.records
            if (op is None or r.op == op) and (phase is None or r.phase == phase) and r.kind not in ("choice", "api")
        )

    def by_op(self) -> Counter[tuple[str, str]]:
        """Calls per (phase, op), choice and api records excluded."""
        c: Counter[tuple[str, str]] = Counter()
        for r in self.records:
            if r.kind not in ("choice", "api"):
                c[(r.phase, r.op)] += r.calls
        return c

    @property
    def custom_ops(self) -> set[str]:
        return {r.op for r in self.records if r.kind == "custom"}

    def to_pandas(self) -> pd.DataFrame:
        """One row per record: op, kind, phase, dtypes, module, module_type, source, code, within, calls."""
        import pandas as pd

        rows = []
        for r in self.records:
            rows.append(
                {
                    "op": r.op,
                    "kind": r.kind,
                    "phase": r.phase,
                    "dtypes": ",".join(r.dtypes),
                    "module": r.module,
                    "module_type": self.modules.get(r.module) if r.module is not None else None,
                    "source": r.source,
                    "code": self.sources.get(r.source) if r.source else None,
                    "within": r.within,
                    "calls": r.calls,
                    "shapes": None if r.shapes is None else ";".join(r.shapes),
                    "where": r.where,
                }
            )
        columns = ["op", "kind", "phase", "dtypes", "module", "module_type", "source", "code", "within",
                   "calls", "shapes", "where"]
        return pd.DataFrame(rows, columns=columns)

    # -- JSON ----------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "version": SCHEMA_VERSION,
            "meta": asdict(self.meta),
            "modules": dict(sorted(self.modules.items())),
            "sources": dict(sorted(self.sources.items())),
            "records": [r.to_json() for r in self.records],
            "registrations": {op: reg.to_json() for op, reg in sorted(self.registrations.items())},
        }

    @classmethod
    def from_json(cls, data: Any, *, origin: str = "trace") -> Trace:
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise InputError(f"{origin} is not an opaudit trace (no \"schema\": \"{SCHEMA}\" field)")
        version = data.get("version")
        if version != SCHEMA_VERSION:
            older = isinstance(version, int) and version < SCHEMA_VERSION
            raise InputError(
                f"{origin} uses trace schema version {version!r}; this opaudit reads version {SCHEMA_VERSION}"
                + (" (version 2 records where each op's tensors live, host or device, and the output dtype of casts)"
                   if older else ""),
                hint="re-run the scan with this version of opaudit, or install the opaudit that wrote it",
            )
        try:
            known = {f.name for f in fields(TraceMeta)}
            meta = TraceMeta(**{k: v for k, v in data["meta"].items() if k in known})
            records = [OpRecord.from_json(r) for r in data["records"]]
            # absent in traces written before opaudit recorded them: their custom ops resolve as unknown
            registrations = {str(op): Registration.from_json(reg)
                             for op, reg in dict(data.get("registrations") or {}).items()}
        except (KeyError, TypeError, ValueError) as e:
            raise InputError(f"{origin} is damaged: {type(e).__name__}: {e}") from None
        return cls(meta=meta, records=records, modules=dict(data.get("modules", {})),
                   sources=dict(data.get("sources", {})), registrations=registrations)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the trace as JSON, atomically: the file is either the old one or the new one."""
        path = Path(path)
        text = json.dumps(self.to_json(), indent=1, ensure_ascii=False) + "\n"
        write_atomic(path, text)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Trace:
        return load_trace(path)


def load_trace(path: str | os.PathLike[str]) -> Trace:
    """Read a trace written by :meth:`Trace.save` (or ``opaudit scan --json``)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"trace file not found: {p}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"cannot read trace file {p}: {e}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"{p} is not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    return Trace.from_json(data, origin=str(p))
