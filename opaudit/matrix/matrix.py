"""Matrix: what one target release does with each op -> Support(status, via, note).

Status of an op on a target, first that applies (DESIGN.md):

- ``native``: the plugin registers a kernel for it, or for the ``.out`` op its functional form
  delegates to (structured ops);
- ``composite``: PyTorch has a CompositeExplicitAutograd kernel for it that runs on any backend
  whose leaf ops exist (stubs that only throw, ``*_overrideable``, do not count); the leaves known
  from the op table are checked, and a missing leaf gives the op its status;
- ``cpu_fallback``: the plugin runs it on the CPU: its own round-trip kernel, a list of ops it
  always sends there, or its generic CPU fallback when that is on by default (and a CPU kernel
  exists for the fallback to run);
- ``missing``: it fails at run time (the note says when a fallback that is off by default, or a
  CPU kernel that opaudit's fallback could use, exists);
- ``version_skew``: the release's PyTorch has no such op, and a newer one has (``since``): the model
  needs a newer PyTorch there, or a re-trace under that version (where an older release does the same
  work through another overload, coverage_db/curated/overloads.toml, that overload is judged instead);
- ``unknown``: the data says nothing (an op outside every staged PyTorch table, a release whose PyTorch
  line has no staged op table, an op of another library whose registrations say nothing about the target).

Ops of other namespaces (a user's ``torch.library`` op, torchvision's, a fused-kernel library's) are
``native`` where the target's data lists them (a vendor's kernels for torchvision ops); else they
resolve from the dispatcher's registrations recorded with the trace (registrations.py and
``_foreign``): where the op has kernels decides where it runs.

``opaudit_fallback`` belongs to opaudit's own fallback kernels (fallback/), which this matrix does
not assume. Device-selected composites (attention, dropout, batch norm, RNNs, ...) resolve to what
the target would pick (coverage_db/curated/device_selected.toml), and so do the CPU's picks found
in a CPU trace.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache

from opaudit.data import load_toml
from opaudit.matrix.registrations import BUILT_IN_KEYS, Registration
from opaudit.matrix.release import Caveat, Release
from opaudit.matrix.torchops import OpHistory, TorchOp, TorchOps, version_key

# best first; ``worst()`` ranks by this order. version_skew after missing: the verdict of the release
# is about its PyTorch, not its kernels (the model as written cannot run there at all)
STATUSES = ("native", "composite", "cpu_fallback", "opaudit_fallback", "missing", "version_skew", "unknown")
_RANK = {s: i for i, s in enumerate(STATUSES)}
_MAX_DEPTH = 4


@dataclass(frozen=True)
class Support:
    status: str
    via: str | None = None  # the op (or path) that provides it, when not the op itself
    note: str = ""
    leaves: tuple[str, ...] = ()  # leaf ops a composite needs, where known
    since: str | None = None  # version_skew: the first PyTorch release with the op

    def __str__(self) -> str:
        via = f" via {self.via}" if self.via else ""
        return f"{self.status}{via}" + (f": {self.note}" if self.note else "")


@dataclass(frozen=True)
class ChoicePath:
    name: str
    when: tuple[str, ...]
    ops: tuple[str, ...]
    forced: bool
    generic: bool
    versions: str = ""  # the PyTorch versions that take it (">=2.3"); "" for all
    condition: str = ""  # the test PyTorch's source makes
    source: str = ""  # where in pytorch/pytorch

    def applies(self, key: str, torch_version: str | None) -> bool:
        """Whether a device of dispatch key ``key`` on PyTorch ``torch_version`` can take this path."""
        return ("*" in self.when or key in self.when) and holds(self.versions, torch_version)


def _version_tuple(v: str) -> tuple[int, ...] | None:
    m = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", v.strip())
    return tuple(int(x or 0) for x in m.groups()) if m else None


def holds(spec: str, version: str | None) -> bool:
    """Whether ``version`` ("2.2.0") meets ``spec`` (">=2.3", ">=2.0,<2.5", "" for any); an unknown
    version meets every spec."""
    if not spec or not version:
        return True
    v = _version_tuple(version)
    if v is None:
        return True
    for bound in spec.split(","):
        m = re.match(r"\s*(>=|<=|==|<|>)\s*(\S+)", bound)
        if m is None:
            raise ValueError(f"device_selected.toml: bad version bound {bound!r}")
        b = _version_tuple(m.group(2))
        assert b is not None, bound
        n = max(len(v), len(b))
        a, c = v + (0,) * (n - len(v)), b + (0,) * (n - len(b))
        if not {">=": a >= c, "<=": a <= c, "==": a == c, "<": a < c, ">": a > c}[m.group(1)]:
            return False
    return True


@dataclass(frozen=True)
class ChoiceRule:
    op: str  # "aten::lstm"
    paths: tuple[ChoicePath, ...]
    cpu_kernels: tuple[str, ...]
    plain_overload: str = "default"  # the overload a call without a packed sequence reaches ("input")


@dataclass(frozen=True)
class Equivalent:
    """An overload an older PyTorch calls for the same work (coverage_db/curated/overloads.toml)."""

    op: str
    older: str
    note: str
    source: str


@cache
def equivalents() -> dict[str, Equivalent]:
    return {e["op"]: Equivalent(e["op"], e["older"], e["note"], e["source"])
            for e in load_toml("coverage_db", "curated/overloads.toml").get("equivalent", [])}


@cache
def choice_rules() -> dict[str, ChoiceRule]:
    """Choice op base name ("lstm") -> rule, and each CPU kernel name -> the same rule."""
    rules: dict[str, ChoiceRule] = {}
    for c in load_toml("coverage_db", "curated/device_selected.toml")["choice"]:
        rule = ChoiceRule(
            c["op"],
            tuple(ChoicePath(p["name"], tuple(p["when"]), tuple(p["ops"]), bool(p.get("forced")),
                             bool(p.get("generic")), p.get("versions", ""), p.get("condition", ""),
                             p.get("source", "")) for p in c.get("path", [])),
            tuple(c.get("cpu_kernels", [])),
            c.get("overloads", {}).get("otherwise", "default"),
        )
        rules[c["op"].removeprefix("aten::")] = rule
        for k in rule.cpu_kernels:
            rules.setdefault(k, rule)
    return rules


def normalize(op: str) -> str:
    """``aten::relu.default`` -> ``relu``; ``aten::add.Tensor`` -> ``add.Tensor``; others kept whole."""
    if op.startswith("aten::"):
        op = op[6:]
    return op[:-8] if op.endswith(".default") else op


@dataclass
class Matrix:
    """One target release, ready to answer per op."""

    release: Release
    torch_ops: TorchOps | None  # PyTorch's op table of the release's line (None: not staged)
    history: OpHistory | None = None  # every staged op table: in which release an op appears
    _native: frozenset[str] = field(init=False)
    _cache: dict[str, Support] = field(init=False, default_factory=dict)
    _custom_cache: dict[tuple[str, Registration], Support] = field(init=False, default_factory=dict)
    _caveat_index: dict[str, list[Caveat]] | None = field(init=False, default=None)
    _caveat_found: dict[tuple, list[Caveat]] = field(init=False, default_factory=dict)  # (op, dtypes) -> caveats
    _status_kinds: bool | None = field(init=False, default=None)  # has caveats of kind unsupported or cpu

    def __post_init__(self) -> None:
        r = self.release
        self._native = r.op_set("native")
        self._cpu = r.op_set("cpu")
        self._forced = r.op_set("forced_cpu")
        self._unsupported = r.op_set("unsupported")
        self._custom = r.op_set("custom")

    @property
    def key(self) -> str:
        return self.release.key

    def resolve(self, op: str, registration: Registration | None = None) -> Support:
        """How ``op`` (``aten::name.overload``, ``name.overload`` or ``ns::name.overload``) runs here.

        ``registration``: for an op of another namespace, the dispatch keys that had kernels for it
        where it ran (``Trace.registrations``); without it such an op is ``unknown`` unless the
        target's data lists it."""
        name = normalize(op)
        if registration is not None and "::" in name:
            key = (name, registration)
            found = self._custom_cache.get(key)
            if found is None:
                found = self._custom_cache[key] = self._foreign(name, registration)
            return found
        hit = self._cache.get(name)
        if hit is None:
            hit = self._cache[name] = self._resolve(name, 0)
        return hit

    def resolve_call(self, op: str, dtypes: tuple[str, ...] | list[str] = (),
                     registration: Registration | None = None) -> Support:
        """``resolve`` for calls with ``dtypes`` (the trace's dtype signatures): a caveat of kind
        ``unsupported`` that names one of them makes the op ``missing``, one of kind ``cpu`` sends an op that
        runs on the device to the CPU fallback."""
        base = self.resolve(op, registration)
        if base.status not in ("native", "composite", "cpu_fallback") or not dtypes:
            return base
        if self._status_kinds is None:  # most releases have no caveat that changes a status: no search then
            self._status_kinds = any(c.kind in ("unsupported", "cpu") and not c.api
                                     for c in self.release.all_caveats())
        if not self._status_kinds:
            return base
        found = self.caveats(op, dtypes)
        for c in found:
            if c.kind == "unsupported":
                used = ", ".join(d for d in c.dtypes if d in dtype_names(dtypes))
                return Support("missing", via=base.via, note=f"{used} on {self.release.device_type}: {c.note}",
                               leaves=base.leaves)
        if base.status != "cpu_fallback":
            for c in found:
                if c.kind == "cpu":
                    return Support("cpu_fallback", via=base.via, note=c.note, leaves=base.leaves)
        return base

    def supports(self, op: str) -> bool:
        return self.resolve(op).status in ("native", "composite")

    def caveats(self, op: str, dtypes: tuple[str, ...] | list[str] = ()) -> list[Caveat]:
        """Documented dtype limits that apply to ``op`` called with ``dtypes`` (all, without dtypes)."""
        key = (op, tuple(dtypes))  # (asked for twice per op and target by an audit: its status, its caveats)
        done = self._caveat_found.get(key)
        if done is None:
            done = self._caveat_found[key] = self._find_caveats(op, dtypes)
        return list(done)

    def _find_caveats(self, op: str, dtypes: tuple[str, ...] | list[str]) -> list[Caveat]:
        name = normalize(op)
        if self._caveat_index is None:
            index: dict[str, list[Caveat]] = {}
            for c in self.release.all_caveats():
                if not c.api:
                    index.setdefault(c.op, []).append(c)
            self._caveat_index = index
        keys = dict.fromkeys(("*", name, name.split(".")[0]))
        if not dtypes:
            return [c for key in keys for c in self._caveat_index.get(key, ())]
        used = dtype_names(dtypes)
        return [c for key in keys for c in self._caveat_index.get(key, ()) if not used.isdisjoint(c.dtypes)]

    # -- the rules --------------------------------------------------------------------------------------
    def _resolve(self, name: str, depth: int) -> Support:
        r = self.release
        bound = "" if r.exact else f"listed, but the list is only an upper bound ({r.accuracy})"
        if "::" in name:
            if self._listed_custom(name):
                return Support("native", note=f"{r.package or r.vendor} registers a kernel for it")
            if self._forced_custom(name):
                return Support("cpu_fallback", note=f"{r.package or r.vendor} always runs it on the CPU")
            return Support("unknown", note=f"an op outside aten that {r.package or r.vendor}'s data does not list: it "
                                           "runs where its library registers kernels, which a trace records (one "
                                           "taken before opaudit recorded them has none: re-trace)")
        if name in self._unsupported:
            return Support("missing", note=f"{r.package or r.vendor} registers a kernel that raises for it")
        if name in self._native:
            return Support("native", note=bound)
        tops = self.torch_ops
        op = tops.get(name) if tops is not None else None
        if op is not None and op.delegate and op.delegate in self._native:
            return Support("native", via=op.delegate, note=bound)
        if r.functionalization and tops is not None and depth < _MAX_DEPTH:
            functional = tops.functional(name)
            if functional is not None:
                s = self._cache.get(functional) or self._resolve(functional, depth + 1)
                if s.status in ("native", "composite"):
                    return Support(s.status, via=functional, note=f"functionalization runs it as {functional}"
                                   + (f"; {s.note}" if s.note else ""))
        if name in self._cpu:
            return Support("cpu_fallback", note=f"{r.package or r.vendor} registers a CPU round trip for it")
        if name in self._forced:
            return Support("cpu_fallback", note=f"{r.package or r.vendor} always runs it on the CPU")
        rule = choice_rules().get(name.split(".")[0]) or choice_rules().get(name)
        if rule is not None and depth == 0:
            return self._choice(rule, name)
        if tops is None:
            return self._before_tables(name) or Support(
                "unknown", note=f"no PyTorch {r.torch} op table is staged, so composites are not known")
        if op is None:
            return self._skew(name, depth)
        if op.implicit:
            return Support("composite", note="CompositeImplicitAutograd: decomposed before it reaches the backend")
        if op.explicit and not name.endswith("_overrideable"):
            return self._composite(op, depth)
        return self._absent(op)

    def _listed_custom(self, name: str) -> bool:
        return name in self._custom or name.split(".")[0] in self._custom

    def _forced_custom(self, name: str) -> bool:
        return name in self._forced or name.split(".")[0] in self._forced

    def _foreign(self, name: str, reg: Registration) -> Support:
        """An op of another namespace, from the target's data, else from where it had kernels."""
        r = self.release
        who = r.package or r.vendor
        key = r.dispatch_key
        if self._listed_custom(name):
            return Support("native", note=f"{who} registers a kernel for it")
        if self._forced_custom(name):
            return Support("cpu_fallback", note=f"{who} always runs it on the CPU; {reg.describe()}")
        keys = set(reg.keys)
        said = reg.describe()
        if "CompositeImplicitAutograd" in keys:
            return Support("composite", note="CompositeImplicitAutograd: decomposed into aten ops before a backend "
                                             f"sees it, and those are judged on their own; {said}")
        if key in keys and (key != "PrivateUse1" or key in reg.torch):
            own = " by PyTorch itself (for any PrivateUse1 backend)" if key in reg.torch else ""
            return Support("native", note=f"a {key} kernel is registered for it{own}; {said}")
        if keys & {"CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional"}:
            return Support("composite", note="CompositeExplicitAutograd: runs where the aten ops its kernel calls "
                                             f"exist (they are not in the trace); {said}")
        namespace = name.split("::")[0]
        listed = sorted(o for o in self._custom if o.startswith(namespace + "::"))
        extra = ""
        if "PrivateUse1" in keys and key == "PrivateUse1":  # the backend loaded where it was traced, if any
            extra += f"; the PrivateUse1 kernel of the tracing process is not {who}'s"
        if listed:
            extra += f"; {who} registers {len(listed)} {namespace} op(s), not this one"
        backends = reg.backends
        if not backends:
            return Support("unknown", note=f"{said}: no backend kernel, so nothing says where it runs{extra}")
        if key in BUILT_IN_KEYS and reg.compiled:
            return Support("unknown", note=f"{said}: its compiled kernels are those of the build installed where it "
                                           f"was traced, and no data says whether a {r.device_type} build of "
                                           f"{namespace} registers one{extra}")
        if key == "CPU":
            return Support("missing", note=f"no CPU kernel; {said}")
        fb = r.fallback
        if "CPU" in backends:
            if fb.exists and fb.default_on:
                return Support("cpu_fallback", note=f"no {r.device_type} kernel, but a CPU kernel: {who}'s CPU "
                                                    "fallback runs it" + (f" ({fb.switch})" if fb.switch else "")
                                                    + f"; {said}{extra}")
            hint = (f"{who}'s CPU fallback is off by default: {fb.switch or fb.note}" if fb.exists
                    else "a CPU kernel exists (a CPU round trip could run it)")
            return Support("missing", note=f"no {r.device_type} kernel; {hint}; {said}{extra}")
        return Support("missing", note=f"no {r.device_type} kernel, and no CPU kernel for a fallback to run; "
                                       f"{said}{extra}")

    def resolve_api(self, op: str) -> Support:
        """A CompositeImplicitAutograd API the model called (``aten::rms_norm``), recorded above its
        decomposition: whether the release's PyTorch has it. Its decomposition's ops are judged on
        their own; here only the API itself: ``native`` where the plugin registers a kernel for it,
        ``composite`` where PyTorch decomposes it, ``version_skew`` where that PyTorch lacks it."""
        name = normalize(op)
        key = "api:" + name
        hit = self._cache.get(key)
        if hit is None:
            hit = self._cache[key] = self._resolve_api(name)
        return hit

    def _resolve_api(self, name: str) -> Support:
        tops = self.torch_ops
        base = name.partition(".")[0]
        if tops is None:
            return self._before_tables(base, base=True) or Support(
                "unknown", note=f"no PyTorch {self.release.torch} op table is staged")
        if name in self._native or base in self._native:
            return Support("native", note=f"{self.release.package or self.release.vendor} registers a kernel for it")
        op = tops.get(name)
        if op is None and not tops.has_base(base):
            return self._skew(base, 0, base=True)
        if op is None or op.implicit:  # (recorded by its base name: some overload of it)
            return Support("composite", note=f"CompositeImplicitAutograd in PyTorch {tops.version}: "
                                             "it runs as its decomposition")
        return self.resolve(name)  # the release's PyTorch has kernels for it: judged as an op

    def _skew(self, name: str, depth: int, *, base: bool = False) -> Support:
        """An op the op table of the release's PyTorch lacks."""
        tops = self.torch_ops
        assert tops is not None
        eq = equivalents().get(name)
        if eq is not None and tops.get(eq.older) is not None and depth < _MAX_DEPTH:
            s = self._cache.get(eq.older) or self._resolve(eq.older, depth + 1)
            return Support(s.status, via=eq.older, note=f"PyTorch {tops.version} has no {name}: {eq.note}"
                           + (f"; {s.note}" if s.note else ""), leaves=s.leaves, since=s.since)
        h = self.history
        added = h.added_after(name, tops.version, base=base) if h is not None else None
        if added is not None:
            return Support("version_skew", note=f"not an op of PyTorch {tops.version}: PyTorch {added} added it; "
                           f"the model needs PyTorch >= {added} here, or a re-trace under PyTorch {tops.version}",
                           since=added)
        last = h.last_before(name, tops.version, base=base) if h is not None else None
        if last is not None:
            return Support("version_skew", note=f"not an op of PyTorch {tops.version}: PyTorch {last} was the last "
                           f"with it; re-trace under PyTorch {tops.version}")
        return Support("unknown", note=f"not an op of PyTorch {tops.version}, nor of any staged PyTorch release")

    def _before_tables(self, name: str, *, base: bool = False) -> Support | None:
        """On a release whose PyTorch is older than every staged op table: version_skew for an op that the
        oldest table lacks and a later one has (PyTorch added it after that release too), else None."""
        h = self.history
        torch = self.release.torch
        if h is None or not h.tables or not version_key(torch):
            return None
        oldest = h.tables[0]
        if version_key(torch) >= version_key(oldest.version):
            return None
        if oldest.has_base(name) if base else oldest.get(name) is not None:
            return None
        added = h.added_after(name, oldest.version, base=base)
        if added is None:
            return None
        return Support("version_skew", note=f"not an op of PyTorch {torch}: PyTorch {added} added it (PyTorch "
                       f"{oldest.version}, the oldest staged op table, lacks it); the model needs PyTorch >= {added}",
                       since=added)

    def _composite(self, op: TorchOp, depth: int) -> Support:
        leaves = tuple(self._leaves(op))
        if not leaves or depth >= _MAX_DEPTH:
            return Support("composite", note="CompositeExplicitAutograd", leaves=leaves)
        worst: tuple[str, Support] | None = None
        for leaf in leaves:
            s = self._cache.get(leaf) or self._resolve(leaf, depth + 1)
            if worst is None or _RANK[s.status] > _RANK[worst[1].status]:
                worst = (leaf, s)
        assert worst is not None
        leaf, s = worst
        if s.status in ("native", "composite"):
            return Support("composite", note="CompositeExplicitAutograd", leaves=leaves)
        return Support(s.status, via=leaf, note=f"a composite whose leaf {leaf} is {s.status}"
                       + (f" ({s.note})" if s.note else ""), leaves=leaves)

    def _leaves(self, op: TorchOp) -> list[str]:
        """The leaf ops of a CompositeExplicitAutograd kernel, where the op table tells them."""
        tops = self.torch_ops
        assert tops is not None
        name = op.name
        if op.view:
            return ["as_strided"] if name != "as_strided" else []
        if op.autogen:  # a generated out= wrapper around the functional op
            base, _, overload = name.partition(".")
            functional = base if overload in ("out", "") else f"{base}.{overload.removesuffix('_out')}"
            return [functional] if tops.get(functional) is not None and functional != name else []
        base, _, overload = name.partition(".")
        for out in (f"{base}.out", f"{name}_out" if overload else f"{base}.out"):
            o = tops.get(out)
            if o is not None and out != name and (o.backend_keys() or o.delegate):
                return [out]
        return []

    def _absent(self, op: TorchOp) -> Support:
        """An op with backend kernels in PyTorch, none of them the target's."""
        r = self.release
        tops = self.torch_ops
        assert tops is not None
        has_cpu = tops.kernel_on(op.name, "CPU")
        fb = r.fallback
        who = r.package or r.vendor
        if not r.exact:
            return Support("unknown", note=f"not in the candidate list of {who} {r.name}; {r.accuracy}")
        if fb.exists and fb.default_on:
            if has_cpu:
                return Support("cpu_fallback", note=f"no {r.device_type} kernel: {who}'s CPU fallback runs it"
                               + (f" ({fb.switch})" if fb.switch else ""))
            return Support("missing", note=f"no {r.device_type} kernel, and no CPU kernel for the fallback to run")
        hint = ""
        if fb.exists and has_cpu:
            hint = f"; {who}'s CPU fallback is off by default: {fb.switch or fb.note}"
        elif has_cpu:
            hint = "; a CPU kernel exists (a CPU round trip could run it)"
        return Support("missing", note=f"no {r.device_type} kernel{hint}")

    def _choice(self, rule: ChoiceRule, name: str) -> Support:
        """A device-selected composite, or a CPU pick of one: what this target would run."""
        r = self.release
        tops = self.torch_ops
        choice = rule.op.removeprefix("aten::")
        is_cpu_pick = name in rule.cpu_kernels
        prefix = f"the CPU's pick for {choice}; " if is_cpu_pick else ""
        key = r.dispatch_key
        for path in rule.paths:
            if not path.applies(key, r.torch):
                continue
            ops = [self._choice_op(o, name, choice, is_cpu_pick) for o in path.ops]
            if tops is not None:
                ops = [o for o in ops if tops.get(o) is not None or o in self._native]
            else:  # older than every op table: a path op PyTorch added later (_safe_softmax) is no part of it
                ops = [o for o in ops if o in self._native or self._before_tables(o) is None]
            if not ops:
                continue
            statuses = [(o, self._resolve(o, 1)) for o in ops]
            if not path.forced:
                if all(s.status == "native" for _, s in statuses):
                    return Support("native", via=path.name if len(ops) > 1 else ops[0],
                                   note=prefix + f"{path.name}: {', '.join(ops)}")
                continue
            worst_op, worst = max(statuses, key=lambda x: _RANK[x[1].status])
            if worst.status in ("native", "composite"):
                status = "native" if (not path.generic and worst.status == "native") else "composite"
                return Support(status, via=path.name, note=prefix + f"{path.name}: {', '.join(ops)}", leaves=tuple(ops))
            return Support(worst.status, via=worst_op, note=prefix + f"{path.name} needs {worst_op}: {worst.note}",
                           leaves=tuple(ops))
        return Support("unknown", note=prefix + f"no rule for {choice} on {key}")

    @staticmethod
    def _choice_op(op: str, name: str, choice: str, is_cpu_pick: bool) -> str:
        if op != "{op}":
            return op
        return choice if is_cpu_pick else name


_DTYPE_WORD = re.compile(r"[a-z][a-z0-9_]*")


@cache
def _names(signatures: tuple[str, ...]) -> frozenset[str]:
    return frozenset(w for sig in signatures for w in _DTYPE_WORD.findall(sig))


def dtype_names(signatures: tuple[str, ...] | list[str]) -> frozenset[str]:
    """The dtype names in a trace's dtype signatures (``float32|int64[]``, ``float32->bfloat16``)."""
    return _names(tuple(signatures))


def worst(supports: list[Support]) -> Support:
    return max(supports, key=lambda s: _RANK[s.status])
