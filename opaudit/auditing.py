"""Audit: a Trace joined with target Matrices -> one frame, one row per op x phase x target.

>>> a = opaudit.audit(trace, ["ascend@2.6.0.post5", "cambricon"])      # doctest: +SKIP
>>> a.verdict("cambricon").summary                                     # doctest: +SKIP
'fails: 2 ops missing (3 calls)'
>>> a.frame.query("status == 'missing'")                               # doctest: +SKIP

Every report format (terminal, JSON, CSV, Markdown, HTML) is a view of ``Audit.frame`` and of the
per-target ``Verdict`` computed from it. The targets a user names are ``selected``; by default the
audit also resolves the trace against every other release of every vendor in coverage_db (the
landscape: which releases run the model, and the oldest of each vendor that does).

How a trace row maps to a status on a target:
- an aten op: ``Matrix.resolve``; a custom op: ``Matrix.resolve`` with the dispatch keys that had
  kernels for it when it was traced (``Trace.registrations``);
- a ``choice`` row (a composite whose kernel PyTorch picks per device): what the target would pick;
- an op recorded *within* a choice (the backward of the CPU's pick): the status of the choice on the
  target, since the target runs its own pick's backward, not the CPU's;
- an op recorded within a device branch of torch's Python (``branch:<id>``, tracing/branches.py): as recorded
  on targets that take the CUDA arm; on a target whose device type takes the other arm, the status of that arm's
  ops (the target never runs the recorded ones);
- an ``api`` row (a CompositeImplicitAutograd function the model called, such as ``rms_norm``): whether
  the target's PyTorch has it (``Matrix.resolve_api``); its decomposition's ops are rows of their own, so
  it counts in the verdict only where that PyTorch lacks it (``version_skew``), or has kernels for it
  that the target lacks (where the data says nothing of it, its decomposition's ops still speak).

A release whose PyTorch lacks ops or APIs of the trace gets the verdict ``version_skew``: the model as
traced needs a newer PyTorch there (or a re-trace under that version), whatever its kernels.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from opaudit.errors import InputError
from opaudit.matrix import Database, Matrix, Support, amp, load_database, load_matrix, load_targets
from opaudit.matrix.matrix import STATUSES, dtype_names
from opaudit.matrix.torchops import version_key
from opaudit.tracing import branches, typed
from opaudit.tracing.schema import PHASES, OpRecord, Trace

if TYPE_CHECKING:
    import pandas as pd

RUNS = ("native", "composite")  # statuses that run on the device itself
VERDICTS = {
    "runs": "runs natively",
    "cpu_fallback": "runs, with ops on the vendor's CPU fallback",
    "uncertain": "no op is missing, but the data says nothing about some",
    "fails": "fails: ops are missing",
    "version_skew": "needs a newer PyTorch (or a re-trace under the release's)",
}
# --fail-on levels, worst first; a level trips on its own status and on every worse one, so a gate set at
# `unknown` (what opaudit.testing uses) never passes on ops the data knows nothing about
FAIL_ON = ("missing", "version_skew", "unknown", "cpu_fallback", "composite")
_TRIPS = {"missing": ("missing",), "version_skew": ("version_skew",), "unknown": ("unknown",),
          "cpu_fallback": ("opaudit_fallback", "cpu_fallback"), "composite": ("composite",)}
# devices whose tensors make torch.optim default to foreach (_get_foreach_kernels_supported_devices in
# torch/utils/_foreach_utils.py): these device types, and the PrivateUse1 device whatever its name
FOREACH_DEVICES = ("cuda", "xpu", "mtia")
COLUMNS = ["target", "vendor", "release", "torch", "selected", "op", "kind", "phase", "within", "status", "via",
           "note", "calls", "dtypes", "modules", "sources", "caveats"]


@dataclass(frozen=True)
class OpGroup:
    """The trace's calls of one op in one phase (and one enclosing choice), all modules and lines together."""

    op: str
    kind: str
    phase: str
    within: str | None
    calls: int
    dtypes: tuple[str, ...]  # dtype signatures, most called first
    modules: tuple[str, ...]
    sources: tuple[str, ...]


def op_groups(trace: Trace, *, host: bool = False) -> list[OpGroup]:
    """The trace's device records (``host``: its host records) grouped by (op, kind, phase, within), in
    phase order, most called first. Host records run beside the device, on no target's kernels."""
    return _grouped(trace.host_records if host else trace.device_records)


def _grouped(records: Sequence[OpRecord]) -> list[OpGroup]:
    calls: Counter[tuple] = Counter()
    per: dict[tuple, dict[str, Counter[str]]] = {}
    for r in records:
        key = (r.op, r.kind, r.phase, r.within)
        calls[key] += r.calls
        c = per.setdefault(key, {"dtypes": Counter(), "modules": Counter(), "sources": Counter()})
        c["dtypes"]["|".join(r.dtypes)] += r.calls
        if r.module is not None:
            c["modules"][r.module] += r.calls
        if r.source:
            c["sources"][r.source] += r.calls

    def ranked(counter: Counter[str]) -> tuple[str, ...]:
        return tuple(k for k, _ in sorted(counter.items(), key=lambda kv: (-kv[1], kv[0])))

    order = {p: i for i, p in enumerate(PHASES)}
    keys = sorted(calls, key=lambda k: (order.get(k[2], 9), k[3] or "", -calls[k], k[0]))
    return [OpGroup(k[0], k[1], k[2], k[3], calls[k], ranked(per[k]["dtypes"]), ranked(per[k]["modules"]),
                    ranked(per[k]["sources"])) for k in keys]


@dataclass
class Verdict:
    """Whether the trace runs on one target, and what to do where the data knows."""

    target: str
    vendor: str
    release: str
    torch: str
    order: int
    exact: bool
    prerelease: bool
    selected: bool
    verdict: str  # a key of VERDICTS
    ops: dict[str, int]  # distinct ops (op x phase x within) per status
    calls: dict[str, int]  # calls per status
    missing: list[str] = field(default_factory=list)
    fallback: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    skew: list[str] = field(default_factory=list)  # ops and APIs the release's PyTorch lacks
    needs_torch: str | None = None  # the PyTorch release that has all of them (version_skew)
    caveats: list[str] = field(default_factory=list)  # ops called with a dtype the target documents a limit for
    advice: list[str] = field(default_factory=list)
    fallback_switch: str | None = None
    # judged by the trace's variant of this label (autocast runs otherwise there: tracing/variants.py)
    traced_as: str | None = None

    @property
    def runs(self) -> bool:
        """Every op is known to run: on the device, or some on the vendor's CPU fallback."""
        return self.verdict in ("runs", "cpu_fallback")

    @property
    def summary(self) -> str:
        def n(k: str) -> str:
            count = self.ops.get(k, 0)
            return f"{count} op{'s' if count != 1 else ''}"

        def calls(k: str) -> str:
            count = self.calls.get(k, 0)
            return f"{count:,} call{'s' if count != 1 else ''}"

        if self.verdict == "version_skew":
            needs = f"needs PyTorch >= {self.needs_torch}" if self.needs_torch else "needs another PyTorch"
            text = f"{needs}: {n('version_skew')} not in its PyTorch {self.torch}"
            if self.ops.get("missing"):
                text += f"; {n('missing')} missing"
        elif self.verdict == "fails":
            text = f"fails: {n('missing')} missing ({calls('missing')})"
        elif self.verdict == "cpu_fallback":
            text = f"runs with {n('cpu_fallback')} on the CPU fallback ({calls('cpu_fallback')})"
        elif self.verdict == "uncertain":
            text = f"no op missing; {n('unknown')} not in the data"
            if self.ops.get("cpu_fallback"):
                text += f"; {n('cpu_fallback')} on the CPU fallback"
        else:
            text = "runs natively"
        if self.verdict not in ("fails", "version_skew") and self.ops.get("missing"):
            text += f"; {n('missing')} missing"
        return text + ("" if self.exact else " (the target's list is an upper bound)")

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target, "vendor": self.vendor, "release": self.release, "torch": self.torch,
            "order": self.order, "exact": self.exact, "prerelease": self.prerelease, "selected": self.selected,
            "verdict": self.verdict, "summary": self.summary, "ops": dict(self.ops), "calls": dict(self.calls),
            "missing": list(self.missing), "cpu_fallback": list(self.fallback), "unknown": list(self.unknown),
            "version_skew": list(self.skew), "needs_torch": self.needs_torch,
            "caveats": list(self.caveats), "advice": list(self.advice), "traced_as": self.traced_as,
        }


@dataclass
class Audit:
    trace: Trace
    groups: list[OpGroup]
    matrices: dict[str, Matrix]  # every audited target, selected first, by key
    selected: list[str]  # the targets asked for, in order
    results: dict[str, list[Support]]  # target -> one Support per group
    caveats: dict[str, list[list[str]]]  # target -> per group, the caveats that apply
    verdicts: dict[str, Verdict]
    fallback: list[Any] = field(default_factory=list)  # fallback.Stats of runs of the same code, if any
    host: list[OpGroup] = field(default_factory=list)  # calls on host tensors only: held to no target
    # per target judged by a variant of the trace (Verdict.traced_as): each group as that variant ran it (None: not
    # called there), in the order of ``groups``
    traced: dict[str, list[OpGroup | None]] = field(default_factory=dict)
    # per selected target, the groups only some of whose calls fail there (one dtype signature of several): by index
    # in ``groups``, those calls alone (their dtypes, modules and lines)
    failing: dict[str, dict[int, OpGroup]] = field(default_factory=dict)
    _frame: pd.DataFrame | None = field(default=None, repr=False)

    # -- views -------------------------------------------------------------------------------------
    @property
    def frame(self) -> pd.DataFrame:
        """One row per op x phase (x enclosing choice) x target: the table every report reads."""
        if self._frame is None:
            self._frame = self.to_pandas()
        return self._frame

    def to_pandas(self, targets: Sequence[str] | None = None) -> pd.DataFrame:
        import pandas as pd

        keys = list(targets) if targets is not None else list(self.matrices)
        cols: dict[str, list[Any]] = {c: [] for c in COLUMNS}
        for key in keys:
            v = self.verdicts[key]
            for g, s, cav in zip(self.rows(key), self.results[key], self.caveats[key], strict=True):
                cols["target"].append(key)
                cols["vendor"].append(v.vendor)
                cols["release"].append(v.release)
                cols["torch"].append(v.torch)
                cols["selected"].append(v.selected)
                cols["op"].append(g.op)
                cols["kind"].append(g.kind)
                cols["phase"].append(g.phase)
                cols["within"].append(g.within)
                cols["status"].append(s.status)
                cols["via"].append(s.via)
                cols["note"].append(s.note)
                cols["calls"].append(g.calls)
                cols["dtypes"].append(g.dtypes)
                cols["modules"].append(g.modules)
                cols["sources"].append(g.sources)
                cols["caveats"].append(tuple(cav))
        df = pd.DataFrame(cols, columns=COLUMNS)
        df["status"] = pd.Categorical(df["status"], categories=list(STATUSES), ordered=True)
        return df

    def rows(self, key: str) -> list[OpGroup]:
        """``groups`` as target ``key`` is judged on them: as the trace of its own autocast ran them (``traced``; a
        group that trace does not call has no calls), and where some of a group's calls fail there, those calls
        alone (``failing``)."""
        ran, narrow = self.traced.get(key), self.failing.get(key, {})
        if ran is None and not narrow:
            return self.groups
        out = []
        for i, g in enumerate(self.groups):
            if ran is not None and ran[i] is None:  # not called there: no calls, dtypes nor lines of its own
                out.append(replace(g, calls=0, dtypes=(), modules=(), sources=()))
            else:
                out.append(narrow.get(i) or (ran[i] if ran is not None else None) or g)
        return out

    def verdict(self, target: str) -> Verdict:
        if target in self.verdicts:
            return self.verdicts[target]
        for key in self.selected:
            if self.matrices[key].release.vendor == target.split("@")[0] and "@" not in target:
                return self.verdicts[key]
        raise KeyError(target)

    @property
    def selected_verdicts(self) -> list[Verdict]:
        return [self.verdicts[k] for k in self.selected]

    def landscape(self) -> dict[str, list[Verdict]]:
        """Every audited release, by vendor, oldest first."""
        out: dict[str, list[Verdict]] = {}
        for v in self.verdicts.values():
            out.setdefault(v.vendor, []).append(v)
        for rels in out.values():
            rels.sort(key=lambda v: (v.order, v.release))
        return dict(sorted(out.items()))

    def oldest_running(self) -> dict[str, dict[str, Any]]:
        """Per vendor: the oldest release that runs the trace natively, the oldest that runs it at all,
        and the releases whose PyTorch is too old for it (version_skew: neither failing nor running)."""
        out: dict[str, dict[str, Any]] = {}
        for vendor, rels in self.landscape().items():
            published = [v for v in rels if not v.prerelease] or rels
            native = next((v.target for v in published if v.verdict == "runs"), None)
            anyhow = next((v.target for v in published if v.runs), None)
            out[vendor] = {"native": native, "runs": anyhow,
                           "version_skew": [v.target for v in rels if v.verdict == "version_skew"]}
        return out

    def worst(self, targets: Sequence[str] | None = None) -> str | None:
        """The worst status of any op on the selected targets (None for an empty trace)."""
        found = [st for k in (targets or self.selected) for st in self._statuses(k)]
        return max(found, key=STATUSES.index) if found else None

    def fails_on(self, level: str) -> list[str]:
        """The selected targets with an op at ``level`` or a worse one (FAIL_ON, worst first: missing,
        version_skew, unknown, cpu_fallback, composite)."""
        bad = tripping(level)
        return [k for k in self.selected if any(st in bad for st in self._statuses(k))]

    def _statuses(self, key: str) -> list[str]:
        """The statuses of ``key``'s rows that a gate reads: an API its PyTorch has is no backend's op."""
        return [s.status for g, s in zip(self.groups, self.results[key], strict=True)
                if not (g.kind == "api" and s.status in RUNS)]


def tripping(level: str) -> frozenset[str]:
    """The statuses a gate at ``level`` trips on: its own and every worse one."""
    if level not in FAIL_ON:
        raise InputError(f"unknown --fail-on level {level!r}", hint=f"one of (worst first) {', '.join(FAIL_ON)}")
    return frozenset(s for lv in FAIL_ON[:FAIL_ON.index(level) + 1] for s in _TRIPS[lv])


# -- building it -----------------------------------------------------------------------------------


def audit(trace: Trace, targets: Sequence[str | Matrix] | None = None, *, landscape: bool = True,
          db: Database | None = None, fallback: Sequence[Any] = ()) -> Audit:
    """Join ``trace`` with each target (default: the newest published release of every vendor).

    ``targets`` are names (``ascend@2.6.0.post5``, ``cambricon``, a matrix file) or Matrix objects;
    ``"all"`` names every release of every vendor. With ``landscape`` every other release of coverage_db
    is resolved too (not selected), for the cross-vendor view. ``fallback``: the statistics
    (fallback.Stats) of runs of the same code with opaudit's fallback, shown beside the audit.
    """
    db = db or load_database()
    matrices: dict[str, Matrix] = {}
    selected: list[str] = []
    for m in load_targets(list(targets) if targets else default_targets(db), db=db):
        if m.key not in matrices:
            matrices[m.key] = m
            selected.append(m.key)
    if landscape:
        for e in db.entries:
            if e.key not in matrices:
                matrices[e.key] = load_matrix(e.key, db=db)
    groups = op_groups(trace)
    views = _variant_views(trace, groups)  # (and the groups only a variant has, appended to ``groups``)
    named = amp.named_regions(trace.records)
    results: dict[str, list[Support]] = {}
    caveats: dict[str, list[list[str]]] = {}
    verdicts: dict[str, Verdict] = {}
    traced: dict[str, list[OpGroup | None]] = {}
    failing: dict[str, dict[int, OpGroup]] = {}
    calls_of: dict[str | None, dict[tuple, list[OpRecord]]] = {}  # per trace view: (group key, dtypes) -> records
    for key, m in matrices.items():
        r = m.release
        label = amp.label(o) if (o := amp.outcome(r.device_type, r.dispatch_key, r.torch, named)) else None
        label = label if label in views else None
        view = views[label]
        seen = [view.get(_group_key(g)) for g in groups]  # each group as this target's trace ran it (None: not)
        results[key] = [_not_called(m, label) if v is None
                        else _status(m, v, trace) if label is None
                        else _as_run(_status(m, v, trace, retraced=True), g, v, label)
                        for g, v in zip(groups, seen, strict=True)]
        caveats[key] = [_caveats(m, v, retraced=label is not None) if v is not None else [] for v in seen]
        if label is not None:
            traced[key] = seen
        rows = [v if v is not None else g for g, v in zip(groups, seen, strict=True)]
        if key in selected:
            if label not in calls_of:
                calls_of[label] = _calls_by_signature(trace.variants[label] if label else trace.device_records)
            narrow = _failing_calls(m, rows, results[key], calls_of[label], trace)
            if narrow:
                failing[key] = {i: n for i, (n, _) in narrow.items()}
                rows = [failing[key].get(i, r) for i, r in enumerate(rows)]
                for i, (_, said) in narrow.items():
                    s = results[key][i]
                    results[key][i] = replace(s, note=f"{said}; {s.note}" if s.note else said)
        verdicts[key] = _verdict(m, rows, results[key], caveats[key], key in selected,
                                 called=[v is not None for v in seen])
        verdicts[key].traced_as = label
    result = Audit(trace, groups, matrices, selected, results, caveats, verdicts, list(fallback),
                   op_groups(trace, host=True), traced=traced, failing=failing)
    for key in selected:
        _advise(result, key, db)
    return result


# the oldest PyTorch opaudit runs on, every command (its simulated devices too: torchcompat.py)
OLDEST_TORCH = (2, 1)


def retrace_advice(trace: Trace, r: Any) -> str:
    """What to run to trace the same code under release ``r``'s PyTorch (a version_skew verdict: the trace holds
    ops or APIs that PyTorch lacks, which code written for it would not call): a venv with that torch, opaudit
    installed from where this one runs, and the command that made this trace, for that target."""
    import shlex

    torch_v = r.torch
    have = version_key(torch_v)[:2]
    if have < OLDEST_TORCH:
        return (f"opaudit runs on PyTorch >= {OLDEST_TORCH[0]}.{OLDEST_TORCH[1]}: {r.key}'s PyTorch {torch_v} "
                "cannot re-trace the code; the audit above is what the data says")
    src = trace.meta.source or {}
    kind = src.get("kind")
    if kind == "model" and src.get("path"):
        factory = src.get("factory")
        spec = src["path"] + (f":{factory}" if factory and factory != "get_model" else "")
        command = ["scan", spec] + (["--train"] if trace.meta.train else [])
    elif kind == "spec" and src.get("spec"):
        command = ["scan", str(src["spec"])] + (["--train"] if trace.meta.train else [])
    elif kind == "script" and src.get("path"):
        command = ["trace", "-t", r.key, "--", *(["-m"] if src.get("module") else []), src["path"],
                   *src.get("argv", [])]
    else:
        command = ["scan", "MODEL"]
    if command[0] == "scan":
        command += ["-t", r.key]
    pins = [f"torch=={torch_v}"] + (["numpy<2", "pandas<3"] if have < (2, 3) else [])
    if kind == "spec" and str(src.get("spec", "")).startswith("hf:"):
        # transformers states its torch floor in its torch extra: pip picks the newest release that takes this torch
        # (4.55.4 for torch 2.1: 4.56 needs 2.2), where a bare transformers would be one that no longer runs on it
        pins.append("transformers[torch]")
    here = Path(__file__).resolve().parent.parent
    install = [*pins, "-e", str(here)] if (here / "pyproject.toml").exists() else [*pins, "opaudit"]
    venv = f".venv-torch{torch_v}"
    return (f"re-trace under {r.key}'s PyTorch {torch_v}: python -m venv {venv} && . {venv}/bin/activate && "
            f"pip install {shlex.join(install)} && opaudit {shlex.join(command)}")


def default_targets(db: Database | None = None) -> list[str]:
    """The newest published release of every vendor, and of CUDA and MPS (not of the CPU itself)."""
    db = db or load_database()
    return [db.newest(v).key for v in db.vendors if v != "cpu"]


def _status(m: Matrix, g: OpGroup, trace: Trace, *, retraced: bool = False) -> Support:
    branch = branches.of(g.within)
    if branch is not None:
        if branch.taken_elsewhere(m.release.device_type, m.release.torch):
            return _other_arm(m, branch, g.dtypes)
    elif g.within:
        choice = m.resolve(g.within)
        pick = choice.via or g.within.removeprefix("aten::").removesuffix(".default")
        return Support(choice.status, via=pick,
                       note=f"backward of {g.within}: the target runs the backward of its own pick"
                            + (f" ({choice.note})" if choice.note else ""))
    if g.kind == "api":
        if g.op == amp.OP:
            r = m.release
            return amp.support(r.device_type, r.dispatch_key, r.torch, g.dtypes, retraced)
        if g.op == typed.OP:
            return _typed_classes(m)
        return m.resolve_api(g.op)
    instead = branches.kernel_instead(g.op, m.release.dispatch_key) if g.kind == "op" else None
    if instead is not None:  # aten's C++ takes another op for the target's tensors (device_branches.toml)
        s = m.resolve_call(f"{instead.instead}.default", g.dtypes)
        note = instead.describe() + (f" ({s.note})" if s.note else "")
        return Support(s.status, via=short(instead.instead), note=note)
    return m.resolve_call(g.op, g.dtypes, trace.registrations.get(g.op) if g.kind == "custom" else None)


def _typed_classes(m: Matrix) -> Support:
    """CUDA's typed tensor classes (``torch.cuda.FloatTensor(n)``, tracing/typed.py) on a target: they run where its
    plugin has typed classes of its own for them to stand for (vendors.toml ``legacy_types``), and fail elsewhere,
    as a rehearsal of the target refuses them."""
    from opaudit.matrix.vendors import vendors

    r = m.release
    v = vendors().get(r.vendor)
    if v is not None and v.legacy_types:
        return Support("native", note=f"{v.module or 'torch.cuda'} has typed tensor classes (FloatTensor, ...)")
    return Support("missing", note=f"{r.device_type} has no typed tensor classes: torch.cuda.FloatTensor and the "
                                   "others fail there (opaudit lint: OA109, OA110 port them to a tensor with a dtype "
                                   "and a device)")


def _group_key(g: OpGroup) -> tuple[str, str, str, str | None]:
    return g.op, g.kind, g.phase, g.within


def _variant_views(trace: Trace, groups: list[OpGroup]) -> dict[str | None, dict[tuple, OpGroup]]:
    """The groups of the trace (key None) and of each of its variants (tracing/variants.py), by group key; the
    groups only a variant has are appended to ``groups`` (they are rows of the audit, run only where it is)."""
    views: dict[str | None, dict[tuple, OpGroup]] = {None: {_group_key(g): g for g in groups}}
    rows = set(views[None])
    for label, records in trace.variants.items():
        views[label] = {_group_key(g): g for g in _grouped([r for r in records if r.where != "host"])}
        for k, g in views[label].items():
            if k not in rows:
                groups.append(g)
                rows.add(k)
    return views


_NARROWED = ("missing", "cpu_fallback", "unknown", "version_skew")


def _calls_by_signature(records: Sequence[OpRecord]) -> dict[tuple, list[OpRecord]]:
    out: dict[tuple, list[OpRecord]] = {}
    for r in records:
        out.setdefault((r.op, r.kind, r.phase, r.within, "|".join(r.dtypes)), []).append(r)
    return out


def _failing_calls(m: Matrix, rows: list[OpGroup], results: list[Support], calls: dict[tuple, list[OpRecord]],
                   trace: Trace) -> dict[int, tuple[OpGroup, str]]:
    """The groups of several dtype signatures that fail on ``m`` for some of them only: by index, the failing calls
    alone as a group, and a note saying which (``_to_copy`` missing for its float32->float64 copy, not for its
    other calls: the lines shown are that copy's)."""
    out = {}
    for i, (g, s) in enumerate(zip(rows, results, strict=True)):
        if s.status not in _NARROWED or g.kind not in ("op", "custom") or len(g.dtypes) < 2:
            continue
        each = {d: _status(m, replace(g, dtypes=(d,)), trace).status for d in g.dtypes}
        bad = [d for d, st in each.items() if st == s.status]
        if not bad or len(bad) == len(g.dtypes):
            continue
        records = [r for d in bad for r in calls.get((*_group_key(g), d), ())]
        if not records:
            continue
        narrowed = _grouped(records)[0]
        shown = ", ".join(d or "no dtype" for d in bad[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")
        runs = all(st in RUNS for st in each.values() if st != s.status)
        others = "; its other calls run on the device" if runs else ""
        out[i] = narrowed, f"{s.status} for its calls in {shown} only ({narrowed.calls:,} of {g.calls:,}){others}"
    return out


def _as_run(s: Support, g: OpGroup, ran: OpGroup, label: str) -> Support:
    """``s``, judged on the calls of a target's own trace (``ran``), saying so where their dtypes are not the
    trace's (``g``)."""
    if ran.dtypes == g.dtypes or g.kind == "api":
        return s
    dtypes = ", ".join(x or "no dtype" for x in ran.dtypes[:3]) + (
        f" and {len(ran.dtypes) - 3} more" if len(ran.dtypes) > 3 else "")
    said = f"called in {dtypes} here, where {amp.describe(amp.parse(label))}"
    return replace(s, note=f"{said}; {s.note}" if s.note else said)


def _not_called(m: Matrix, label: str | None) -> Support:
    """A group the target's trace does not have: the code calls it only as another device runs its autocast."""
    r = m.release
    if label is None:
        return Support("native", note=f"not called on {r.device_type}: only where autocast runs otherwise "
                                      "than on CUDA (traced again so)")
    return Support("native", note=f"not called on {r.device_type}, where {amp.describe(amp.parse(label))} "
                                  "(traced again so)")


def _other_arm(m: Matrix, branch: branches.Branch, recorded: tuple[str, ...]) -> Support:
    """An op of a device branch's CUDA arm, on a target that takes the other arm: the status of the other arm's
    ops there (the worst of them), with the branch named. An op of the other arm without dtypes in the data runs
    on the tensors of the recorded one: it is judged with the ``recorded`` op's dtypes (a float16 attention's
    other arm in float16)."""
    results = [m.resolve_call(op, ("|".join(dtypes),) if dtypes else recorded) for op, dtypes in branch.other_arm]
    worst = max(results, key=lambda s: STATUSES.index(s.status), default=Support("native"))
    via = ", ".join(short(op) for op, _ in branch.other_arm) or None
    return Support(worst.status, via=via, note=branch.describe(m.release.device_type)
                   + (f" ({worst.note})" if worst.note else ""))


def _judged_as_recorded(m: Matrix, g: OpGroup) -> bool:
    """False for an op of a device branch's CUDA arm on a target that takes the other arm."""
    branch = branches.of(g.within)
    return branch is None or not branch.taken_elsewhere(m.release.device_type, m.release.torch)


def _caveats(m: Matrix, g: OpGroup, *, retraced: bool = False) -> list[str]:
    if g.op == amp.OP:
        said = amp.caveat(m.release.device_type, m.release.dispatch_key, m.release.torch, g.dtypes, retraced)
        return [said] if said else []
    if (g.kind == "choice" and not g.dtypes) or g.kind == "api" or not _judged_as_recorded(m, g):
        return []
    return [c.describe() for c in m.caveats(g.op, g.dtypes)]


def source_name(trace: Trace) -> str:
    """What was traced, in a few words: ``model.py:get_model``, ``train.py``, ``hf:llama``, or ``the Python API``."""
    src = trace.meta.source or {}
    if src.get("kind") == "spec" and src.get("spec"):
        return str(src["spec"])
    path = src.get("path")
    if src.get("kind") == "model" and path:
        return f"{Path(path).name}:{src['factory']}" if src.get("factory") else Path(path).name
    if src.get("kind") == "script" and path:
        return ("-m " if src.get("module") else "") + str(path)
    return "a model traced through the Python API"


def host_summary(a: Audit, limit: int = 6) -> str | None:
    """One sentence on the calls that ran on host tensors only (every report says it the same way)."""
    if not a.host:
        return None
    by_op: Counter[tuple[str, str]] = Counter()  # an op's calls in and out of a device branch together
    for g in a.host:
        by_op[g.op, g.phase] += g.calls
    calls = sum(by_op.values())
    top = sorted(by_op.items(), key=lambda kv: -kv[1])[:limit]
    shown = ", ".join(f"{short(op)} ({phase}) x{n:,}" for (op, phase), n in top)
    more = f" and {len(by_op) - limit} more" if len(by_op) > limit else ""
    n = len(by_op)
    return (f"{n} op{'s' if n != 1 else ''} ran on host tensors only ({calls:,} calls), held to no target: "
            f"{shown}{more}")


def skew_span(targets: list[str]) -> str:
    """The releases judged version_skew, in a few words: ``2.0.0 … 2.3.0 (4)``."""
    if not targets:
        return "none"
    names = [t.partition("@")[2] or t for t in targets]
    return names[0] if len(names) == 1 else f"{names[0]} … {names[-1]} ({len(names)})"


def short(op: str) -> str:
    """``aten::view.default`` -> ``view``; other namespaces kept."""
    return op.removeprefix("aten::").removesuffix(".default")


def _label(g: OpGroup) -> str:
    """``op (phase)``, with the choice it was recorded within; a device branch of torch's Python is not named (the
    op is what the target runs, as recorded or by its own arm, and its note says which)."""
    within = f", within {short(g.within)}" if g.within and not branches.of(g.within) else ""
    return f"{short(g.op)} ({g.phase}{within})"


def _verdict(m: Matrix, groups: list[OpGroup], results: list[Support], caveats: list[list[str]],
             selected: bool, called: Sequence[bool] | None = None) -> Verdict:
    r = m.release
    ops: Counter[str] = Counter()
    calls: Counter[str] = Counter()
    lists: dict[str, list[str]] = {"missing": [], "cpu_fallback": [], "unknown": [], "version_skew": []}
    flagged = []
    since: list[str] = []
    for i, (g, s, cav) in enumerate(zip(groups, results, caveats, strict=True)):
        if called is not None and not called[i]:
            continue  # the target's trace does not call it
        if s.status == "version_skew" and s.since:
            since.append(s.since)
        if g.kind == "choice" or (g.kind == "api" and s.status in (*RUNS, "unknown")):
            continue  # its own ops are recorded (or resolved through it): count each call once
        ops[s.status] += 1
        calls[s.status] += g.calls
        label = _label(g)
        if s.status in lists and label not in lists[s.status]:  # an op in and out of a branch: once
            lists[s.status].append(label)
        if cav and label not in flagged:
            flagged.append(label)
    # a choice whose target pick is missing shows up through the ops recorded within it, or not at all
    for g, s in zip(groups, results, strict=True):
        if g.kind == "choice" and s.status in lists and not any(x.within == g.op for x in groups):
            ops[s.status] += 1
            calls[s.status] += g.calls
            lists[s.status].append(_label(g))
    if ops["version_skew"]:
        verdict = "version_skew"
    elif ops["missing"]:
        verdict = "fails"
    elif ops["unknown"]:  # before the CPU fallback: "runs" is a claim about every op, and these are not known
        verdict = "uncertain"
    elif ops["cpu_fallback"]:
        verdict = "cpu_fallback"
    else:
        verdict = "runs"
    fb = r.fallback
    return Verdict(m.key, r.vendor, r.name, r.torch, r.order, r.exact, r.prerelease, selected, verdict,
                   {k: ops[k] for k in STATUSES if ops[k]}, {k: calls[k] for k in STATUSES if calls[k]},
                   lists["missing"], lists["cpu_fallback"], lists["unknown"], lists["version_skew"],
                   max(since, key=version_key) if since else None, flagged,
                   fallback_switch=fb.switch if fb.exists else None)


def _advise(a: Audit, key: str, db: Database) -> None:
    """What to do where the data knows: a later release that adds what is missing, the CPU-fallback
    switch, the dtypes to avoid."""
    v = a.verdicts[key]
    m = a.matrices[key]
    r = m.release
    bad = [(g, s) for g, s in zip(a.rows(key), a.results[key], strict=True)
           if s.status in ("missing", "cpu_fallback") and g.kind != "choice"]
    if bad and r.vendor in db.by_vendor and any(e.key == key for e in db.by_vendor[r.vendor]):
        later = [e for e in db.by_vendor[r.vendor] if e.order > r.order and not e.prerelease]
        remaining = {g.op for g, _ in bad}
        for e in later:
            other = a.matrices.get(e.key) or load_matrix(e.key, db=db)
            # judged there as here: in the dtypes of the calls that fail (float64 stays missing on every MPS)
            fixed = sorted(op for op in remaining
                           if all(_status(other, g, a.trace).status in RUNS for g, _ in bad if g.op == op))
            if fixed:
                shown = ", ".join(o.removeprefix("aten::").removesuffix(".default") for o in fixed[:6])
                more = f" and {len(fixed) - 6} more" if len(fixed) > 6 else ""
                v.advice.append(f"{e.key} (PyTorch {e.torch}) runs {shown}{more} on the device")
                remaining -= set(fixed)
            if not remaining:
                break
    skewed = [(g, s) for g, s in zip(a.groups, a.results[key], strict=True) if s.status == "version_skew"]
    if any(g.op != amp.OP for g, _ in skewed):  # an op its PyTorch lacks: the trace may take another path there
        v.advice.append(retrace_advice(a.trace, r))
    regions: dict[tuple[str, ...], list[str]] = {}  # autocast off there, or in another dtype: said per region
    for rec in a.trace.records:
        if rec.op == amp.OP:
            regions.setdefault(("|".join(rec.dtypes),), []).append(rec.source or "the traced autocast region")
    outcome = amp.outcome(r.device_type, r.dispatch_key, r.torch, amp.named_regions(a.trace.records))
    for named, sources in regions.items():
        said = amp.caveat(r.device_type, r.dispatch_key, r.torch, named, retraced=v.traced_as is not None)
        if said:
            v.advice.append(f"{said} ({', '.join(sorted(set(sources))[:3])})")
    if outcome and v.traced_as is None:  # the regions run otherwise there, and no trace of that is judged
        stopped = a.trace.meta.retrace_errors.get(amp.label(outcome))
        if stopped:
            v.advice.append(f"traced again as {r.device_type} runs autocast here ({amp.describe(outcome)}), the code "
                            f"stopped: {stopped}. The program may stop there on {key}, or running it a second time "
                            f"did (a file or folder it makes, its input read once): opaudit run --simulate {key} "
                            "--strict runs it once as the target would")
        else:
            v.advice.append(f"trace the code with -t {key} (without --no-retrace) to have it traced again as "
                            f"{r.device_type} runs autocast ({amp.describe(outcome)}) and judged by that")
    for g, s in skewed:
        if g.op == amp.OP:  # no re-trace changes this: the program's autocast itself
            v.advice.append(f"autocast for {r.device_type} needs PyTorch {s.since} or later: a release of "
                            f"{r.vendor} on it, or the program without autocast on this target "
                            f"({', '.join(g.sources[:3])})")
    foreach = [g for g, _ in bad if g.op.startswith("aten::_foreach_") and g.phase == "optimizer"]
    if foreach and r.device_type not in FOREACH_DEVICES and r.dispatch_key != "PrivateUse1":
        v.advice.append(f"torch.optim picks its foreach path by default only on {', '.join(FOREACH_DEVICES)} and "
                        "the PrivateUse1 device "
                        f"(torch/utils/_foreach_utils.py): on {r.device_type} the optimizer runs its single-tensor "
                        f"path unless foreach=True is passed, and that path needs none of the {len(foreach)} "
                        "_foreach_ op(s)")
    missing_with_cpu = [g for g, s in bad if s.status == "missing" and "CPU fallback is off by default" in s.note]
    if missing_with_cpu and r.fallback.exists and not r.fallback.default_on:
        v.advice.append(f"{len(missing_with_cpu)} missing op(s) have a CPU kernel that {r.package or r.vendor}'s "
                        f"CPU fallback would run: {r.fallback.switch or r.fallback.note}")
    if v.fallback and r.fallback.default_on and r.fallback.switch:
        v.advice.append(f"ops on the CPU fallback are correct but slow (host copies); {r.fallback.switch}")
    limited: Counter[str] = Counter()
    limited_ops, skipped_ops = set(), set()
    for g in (x for x in a.traced.get(key, a.groups) if x is not None):  # as the target's trace ran them
        if (g.kind == "choice" and not g.dtypes) or not _judged_as_recorded(m, g):
            continue
        for c in m.caveats(g.op, g.dtypes):
            if c.kind == "test_skip":
                skipped_ops.add(g.op)
            elif c.kind in ("limit", "converted"):
                limited_ops.add(g.op)
                limited.update(d for d in c.dtypes if d in dtype_names(g.dtypes))
    if limited:
        v.advice.append(f"{len(limited_ops)} op(s) are called with a dtype {r.vendor} documents limits for "
                        f"({', '.join(d for d, _ in limited.most_common(4))}): see their caveats")
    if skipped_ops:
        v.advice.append(f"{r.vendor}'s own tests skip {len(skipped_ops)} op(s) for dtypes the model uses: not a "
                        "documented limit, but worth a test on the device")
