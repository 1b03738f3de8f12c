"""The rule catalogue and the target tables, read from rules/: what each rule is, and what it becomes
on each target. Knowledge lives there; the mechanisms that find and rewrite code live in rules/ (one
module per family) and walk.py.

>>> rule = load_catalogue().rules["OA401"]                  # doctest: +SKIP
>>> rule.summary, rule.fix                             # doctest: +SKIP
('torch.cuda.synchronize waits for the CUDA device', 'safe')
>>> load_target("ascend").api_replacement("torch.cuda.synchronize", "2.1")   # doctest: +SKIP
'torch.npu.synchronize'
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache

from opaudit.data import data_dir, load_toml
from opaudit.errors import InputError

FIX_CLASSES = ("safe", "unsafe", "suggestion", "report")
GROUPS = {
    "OA0": "file-level and meta",
    "OA1": "devices and device strings",
    "OA2": "AMP, precision, optimizers",
    "OA3": "distributed",
    "OA4": "memory, streams, events, graphs, RNG, profiling",
    "OA5": "environment variables and launch",
    "OA6": "backend flags, attention kernels, compile and JIT",
    "OA7": "third-party CUDA-centric libraries",
    "OA8": "native extensions and custom-op registration",
}
CODE = re.compile(r"OA\d{3}")


@dataclass(frozen=True)
class Example:
    """Code a rule finds (``before``) and what ``fix --target`` makes of it (``after``; None when the
    fix leaves it, as for suggestions and reports). ``valid`` examples must raise no finding."""

    target: str
    before: str
    after: str | None = None
    unsafe: bool = False  # the fix needs --unsafe-fixes
    valid: bool = False
    min_torch: str = ""  # the --min-torch the example is linted with (default: the linter's)


@dataclass(frozen=True)
class Rule:
    code: str
    name: str
    summary: str
    fix: str  # one of FIX_CLASSES: what the fix does where the target has a replacement
    why: str = ""
    apis: tuple[str, ...] = ()  # qualified names this rule matches (the API checker)
    heuristic: bool = False  # matched by syntax, not by qualified name
    default: bool = True  # on unless selected explicitly (noisy, informational rules are off)
    severity: str = "error"  # "info": a flag with no effect off CUDA, shown but never a reason to exit 1
    examples: tuple[Example, ...] = ()
    targets: tuple[str, ...] = ()  # only on these targets (default: all)
    renames: dict[str, str] = field(default_factory=dict)  # deprecated CUDA name -> current CUDA name
    replace: str = ""  # vendor template: {module} {device} {dist_const} {dist_available} {package}
    replace_neutral: str = ""  # neutral template: {acc}
    neutral_min_torch: str = ""
    suggest: str = ""  # shown, never applied: vendor template
    suggest_neutral: str = ""
    modules: tuple[str, ...] = ()  # imports this rule reports (a module and its submodules)
    env: tuple[str, ...] = ()  # environment variable names
    env_prefix: tuple[str, ...] = ()
    triggers: tuple[str, ...] = ()  # words that must occur in a file for this rule to find anything
    strings: tuple[str, ...] = ()  # regular expressions a string literal's whole value matches (nvcc flags)

    @property
    def group(self) -> str:
        return GROUPS[self.code[:3]]


@dataclass(frozen=True)
class Target:
    """What a CUDA construct becomes on one target (rules/targets/<name>.toml)."""

    name: str
    title: str
    device: str = ""  # device type string replacing "cuda"; "" for neutral (an expression) and rocm (kept)
    module: str = ""  # torch.cuda -> this module
    package: str = ""  # the import that registers the backend
    method: str = ""  # x.cuda() -> x.<method>()
    is_attr: str = ""
    dist_backend: str = ""
    dist_const: str = ""
    dist_available: str = ""
    graph: str = ""
    neutral: bool = False
    keeps_cuda: bool = False  # ROCm: HIP answers to "cuda"; nothing to rename
    only_api: bool = False  # torch.cuda.X has a twin only where api names one (MPS)
    accelerator: str = ""
    accelerator_min_torch: str = ""
    device_module: str = ""
    device_module_min_torch: str = ""
    api: dict[str, tuple[str, str]] = field(default_factory=dict)  # qualified name -> (replacement, min torch)
    env: dict[str, tuple[str, str]] = field(default_factory=dict)  # CUDA variable -> (twin or "", minimum torch)
    notes: dict[str, str] = field(default_factory=dict)
    # the target's runtime names that `fix` writes, beyond what the rehearsal's device module answers, each
    # with how the rehearsal's stand-in answers it (rules/surface.toml's mirror, and [surface])
    surface: dict[str, str] = field(default_factory=dict)
    # the fields the device module's get_device_properties(...) answers in every release (empty: not known)
    device_properties: tuple[str, ...] = ()
    # codes whose findings are info on this target: a CUDA setting that runs harmlessly there and has no twin to
    # write (shown, never a reason for lint, fix or fix --verify to fail)
    info: tuple[str, ...] = ()
    # the torch from which torch.autograd.profiler.profile(use_device=<device>) profiles this device ("": never)
    profiler_device_min_torch: str = ""

    def api_replacement(self, qualname: str, min_torch: str) -> str | None:
        """What ``qualname`` (``torch.cuda.synchronize``) becomes here, or None when nothing does."""
        if qualname in self.api:
            new, gate = self.api[qualname]
            return new if new and version_at_least(min_torch, gate) else None
        if self.keeps_cuda or self.only_api or self.neutral or not self.module:
            return None
        return self.module + qualname[len("torch.cuda"):] if qualname.startswith("torch.cuda.") else None

    def device_module_form(self, qualname: str, min_torch: str) -> str | None:
        """``torch.get_device_module().X`` for ``torch.cuda.X``: shown as a suggestion on the neutral target,
        never applied, since the device modules differ (torch.mps and torch.cpu lack most of torch.cuda:
        of its public names only Event, device_count, is_available and synchronize are in all of them)."""
        rest = qualname.removeprefix("torch.cuda.")
        if not self.neutral or not self.device_module or rest == qualname or "." in rest or \
                not version_at_least(min_torch, self.device_module_min_torch):
            return None  # torch.cuda.amp.X and friends have no get_device_module() twin
        return f"{self.device_module}.{rest}"

    def accelerator_expr(self, min_torch: str) -> str | None:
        """The neutral expression for "the accelerator", when the minimum torch has it."""
        if self.neutral and version_at_least(min_torch, self.accelerator_min_torch):
            return self.accelerator
        return None

    def env_twin(self, name: str, min_torch: str) -> str | None:
        """This target's twin of a CUDA environment variable (None: none, or not for the minimum torch)."""
        twin, gate = self.env.get(name, ("", ""))
        return twin if twin and version_at_least(min_torch, gate) else None

    def note(self, code: str) -> str:
        return self.notes.get(code, "")


@dataclass(frozen=True)
class Catalogue:
    rules: dict[str, Rule]

    def expand(self, selectors: list[str]) -> set[str]:
        """Codes matched by selectors: a code (``OA101``), a prefix (``OA1``, ``OA10``) or ``ALL``."""
        out: set[str] = set()
        for s in selectors:
            s = s.strip().upper()
            if not s:
                continue
            if s == "ALL":
                out |= set(self.rules)
                continue
            matched = {c for c in self.rules if c.startswith(s)}
            if not matched:
                raise InputError(f"no rule matches {s!r}", hint="codes look like OA101; a prefix such as OA1 "
                                 "selects a group; `opaudit rules` lists them")
            out |= matched
        return out

    def select(self, select: list[str] | None = None, ignore: list[str] | None = None,
               extend_select: list[str] | None = None) -> frozenset[str]:
        """The active codes: ``select`` (default: every rule on by default), plus ``extend_select``,
        minus ``ignore``."""
        codes = self.expand(select) if select else {c for c, r in self.rules.items() if r.default}
        codes |= self.expand(extend_select or [])
        codes -= self.expand(ignore or [])
        return frozenset(codes)


def version_at_least(version: str, gate: str) -> bool:
    """``2.10`` >= ``2.9``: numeric on each dotted part (anything after a ``+`` or a letter is ignored)."""
    if not gate:
        return True
    def parts(v: str) -> tuple[int, ...]:
        return tuple(int(re.match(r"\d*", p).group() or 0) for p in v.split("+")[0].split("."))  # type: ignore[union-attr]
    return parts(version) >= parts(gate)


@cache
def load_catalogue() -> Catalogue:
    raw = load_toml("rules", "catalogue.toml")
    rules = {}
    for code, d in raw.items():
        if not CODE.fullmatch(code):
            raise ValueError(f"rules/catalogue.toml: {code!r} is not a rule code")
        if d["fix"] not in FIX_CLASSES:
            raise ValueError(f"rules/catalogue.toml: {code}: fix must be one of {FIX_CLASSES}")
        examples = tuple(Example(**e) for e in d.get("examples", ()))
        tuples = {k: tuple(d.get(k, ())) for k in ("apis", "targets", "modules", "env", "env_prefix", "triggers",
                                                  "strings")}
        strings = {k: d.get(k, "") for k in ("why", "replace", "replace_neutral", "neutral_min_torch", "suggest",
                                              "suggest_neutral")}
        unknown = set(d) - set(tuples) - set(strings) - {"name", "summary", "fix", "heuristic", "default", "examples",
                                                         "renames", "severity"}
        if unknown:
            raise ValueError(f"rules/catalogue.toml: {code}: unknown keys {sorted(unknown)}")
        rules[code] = Rule(code=code, name=d["name"], summary=d["summary"], fix=d["fix"],
                           heuristic=d.get("heuristic", False), default=d.get("default", True), examples=examples,
                           severity=d.get("severity", "error"),
                           renames=dict(d.get("renames", {})), **tuples, **strings)  # type: ignore[arg-type]
    return Catalogue(dict(sorted(rules.items())))


def target_names() -> list[str]:
    return sorted(p.stem for p in (data_dir("rules") / "targets").glob("*.toml"))


def lint_target_name(name: str) -> str:
    """The rules/targets/ table a name users type stands for: its own name, or the vendor's (``npu`` -> ``ascend``,
    ``mlu`` -> ``cambricon``: coverage_db/curated/vendors.toml ``names``, one vocabulary for every command)."""
    from opaudit.matrix.vendors import canonical

    key = name.strip().lower()
    return key if key in target_names() else canonical(key)


def _typed_lint() -> dict[str, list[str]]:
    from opaudit.matrix.vendors import typed_names

    return {v: n for v, n in typed_names().items() if v in target_names()}


def load_target(name: str) -> Target:
    """A target of rules/targets/ by name: ascend, cambricon, biren, musa, xpu, mps, rocm, neutral (or a name
    users type for one: npu, mlu, supa)."""
    return _load_target(lint_target_name(name))


@cache
def _load_target(key: str) -> Target:
    name = key
    if key not in target_names():
        import difflib

        from opaudit.matrix.vendors import vendors

        known = vendors().get(key)
        if known is not None:  # a vendor of coverage_db without a porting table
            raise InputError(f"{known.title} has no lint table (the audit knows it: opaudit scan -t {key})",
                             hint="lint targets: " + ", ".join(target_names()))
        close = difflib.get_close_matches(key, target_names(), n=3)
        raise InputError(f"unknown lint target {name!r}",
                         hint=("did you mean " + ", ".join(close) + "? " if close else "")
                         + "targets: " + ", ".join(target_names()) + "; also typed as: "
                         + "; ".join(f"{', '.join(n)} = {v}" for v, n in sorted(_typed_lint().items())))
    d = dict(load_toml("rules", f"targets/{key}.toml"))
    api = {}
    for q, v in d.pop("api", {}).items():
        api[q] = (v[0], v[1]) if isinstance(v, list) else (v, "")
    env = {k: (v[0], v[1]) if isinstance(v, list) else (v, "") for k, v in d.pop("env", {}).items()}
    surface = dict(d.pop("surface", {}))
    properties = tuple(d.pop("device_properties", ()))
    info = tuple(d.pop("info", ()))
    if d.get("package") and d.get("module"):  # a vendor plugin's device module mirrors torch.cuda's
        mirror = load_toml("rules", "surface.toml")["mirror"]
        surface = {f"{d['module']}.{k}": v for k, v in mirror.items()} | surface
    return Target(api=api, env=env, notes=d.pop("notes", {}), surface=surface, device_properties=properties,
                  info=info, **d)
