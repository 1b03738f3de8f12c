"""The Trace: what a model ran, aggregated, and its versioned JSON form (docs/trace-format.md)."""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import asdict, dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

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
MODES = ("real", "meta", "fake")


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

    __pydantic_config__ = {"extra": "forbid", "strict": True}  # read strictly (trace files: _parse)

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

    __pydantic_config__ = {"extra": "forbid", "strict": True}  # read strictly (trace files: _parse)

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
    # a trace again as a target runs autocast (Trace.variants) that did not complete: its label -> why (the
    # exception and the program's line); those targets are judged by this trace, with that said
    retrace_errors: dict[str, str] = field(default_factory=dict)
    # the device was simulated on the CPU (opaudit.rehearsal.simulate): {"target": "cuda@2.13", "name": "cudasim"}
    simulated: dict[str, Any] | None = None
    # the recorder that took it (tracing/native.py): native (C++) or python (a TorchDispatchMode); None: not said
    recorder: str | None = None


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
    # the same code traced again as another device runs its autocast regions (tracing/variants.py): the label of
    # the outcome (matrix/amp.py label: "autocast:bfloat16=off") -> that trace's records
    variants: dict[str, list[OpRecord]] = field(default_factory=dict)

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
            **({"variants": {k: [r.to_json() for r in v] for k, v in sorted(self.variants.items())}}
               if self.variants else {}),
        }

    @classmethod
    def from_json(cls, data: Any, *, origin: str = "trace") -> Trace:
        """The trace of a parsed JSON document, checked as strictly as a file (:func:`load_trace`)."""
        return _parse(json.dumps(data), data, origin)

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
    return _parse(text, None, str(p))


def _header_error(data: Any, origin: str) -> InputError | None:
    """The message for a document that is not a trace of this schema version, if it is not one."""
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        return InputError(f"{origin} is not an opaudit trace (no \"schema\": \"{SCHEMA}\" field)")
    version = data.get("version")
    if version == SCHEMA_VERSION:
        return None
    older = isinstance(version, int) and version < SCHEMA_VERSION
    return InputError(
        f"{origin} uses trace schema version {version!r}; this opaudit reads version {SCHEMA_VERSION}"
        + (" (version 2 records where each op's tensors live, host or device, and the output dtype of casts)"
           if older else ""),
        hint="re-run the scan with this version of opaudit, or install the opaudit that wrote it",
    )


def _parse(text: str, data: Any, origin: str) -> Trace:
    """Parse and check a trace document in one pass (pydantic, strict types, no unknown keys: the same
    contract as trace.schema.json); a document that fails is diagnosed: not a trace, another schema
    version, or the first wrong key with its path."""
    from pydantic import ValidationError

    try:
        doc = _document_adapter().validate_json(text)
    except ValidationError as e:
        if data is None:
            try:
                data = json.loads(text)
            except json.JSONDecodeError as je:
                raise InputError(f"{origin} is not valid JSON (line {je.lineno}, column {je.colno}: {je.msg})"
                                 ) from None
        header = _header_error(data, origin)
        if header is not None:
            raise header from None
        raise InputError(f"{origin} is damaged: {_describe(e)}",
                         hint="the trace format is documented in docs/trace-format.md "
                              "(JSON Schema: opaudit/tracing/trace.schema.json)") from None
    for where, records in [("records", doc.records),
                           *((f"variants[{k!r}]", v) for k, v in doc.variants.items())]:
        for i, r in enumerate(records):
            for name, value, allowed in (("kind", r.kind, KINDS), ("phase", r.phase, PHASES),
                                         ("where", r.where, PLACES)):
                if value not in allowed:
                    raise InputError(f"{origin} is damaged: {where}[{i}].{name}: {value!r} is not one of "
                                     + ", ".join(allowed))
            if r.calls < 1:
                raise InputError(f"{origin} is damaged: {where}[{i}].calls: {r.calls} (at least 1)")
    if doc.meta.mode not in MODES:
        raise InputError(f"{origin} is damaged: meta.mode: {doc.meta.mode!r} is not one of " + ", ".join(MODES))
    return Trace(meta=doc.meta, records=doc.records, modules=doc.modules, sources=doc.sources,
                 registrations=doc.registrations, variants=doc.variants)


def _describe(e: Any) -> str:
    """pydantic's first error as ``records[3].calls: Input should be a valid integer``."""
    err = e.errors()[0]
    where = ""
    for part in err["loc"]:
        where += f"[{part}]" if isinstance(part, int) else (f".{part}" if where else str(part))
    if err["type"] in ("unexpected_keyword_argument", "extra_forbidden"):
        return f"{where}: unknown key" if where else "unknown key"
    if err["type"] == "missing_argument" or err["type"] == "missing":
        return f"{where}: missing"
    return f"{where}: {err['msg']}" if where else err["msg"]


@dataclass
class _Document:
    """The trace file as a whole (docs/trace-format.md); ``_parse`` validates it."""

    __pydantic_config__ = {"extra": "forbid", "strict": True}  # read strictly (trace files: _parse)

    schema: Literal["opaudit-trace"]
    version: Literal[2]
    meta: TraceMeta
    modules: dict[str, str]
    sources: dict[str, str]
    records: list[OpRecord]
    registrations: dict[str, Registration] = field(default_factory=dict)
    variants: dict[str, list[OpRecord]] = field(default_factory=dict)


@cache
def _document_adapter() -> Any:
    """A pydantic validator for ``_Document`` (built once; pydantic is imported only to read a trace).
    Every dataclass of the document forbids unknown keys and takes JSON types strictly (their
    ``__pydantic_config__``)."""
    from pydantic import TypeAdapter

    return TypeAdapter(_Document)
