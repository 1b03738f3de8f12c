"""DeepLink DIPU (torch_dipu; key XPU, device shown as ``cuda``): one release per DIPU vendor.

Rules (the staged SOURCES.md, "How the derived data was made"; fact dipu-coverage):
- coverage = (aten -> DIOPI map) ∩ (DIOPI functions the vendor implements). The map is
  ``derived/diopi_functions.index.yaml`` (one entry per entry of DIPU's diopi_functions.yaml). An entry is
  generated for a vendor when its ``device`` list names the vendor or holds ``all`` without ``-vendor``, its
  ``torch_ver`` list admits torch 2.1.x (code ``20100``: named, or ``all`` without ``-20100``) and
  ``register_operator`` is true. A generated entry is registered (``native``) when the vendor's DIOPI library
  defines its key function (``diopi_key_function``).
- the vendor's DIOPI functions: cuda = impl/torch; muxi = impl/torch + impl/muxi; camb, topsrider,
  kunlunxin = their impl dir (``derived/diopi_impl_functions_by_vendor.json``, a source scan); ascend = the two
  lists of ``impl/ascend_npu/ascend_config.yaml``. supa and droplet ship closed libraries: every generated
  entry is a candidate, the list is an upper bound (exact=False).
- the 20 ops of ``always_registered_ops.txt`` (DIPU's hand-written RegisterDIPU.cpp) are ``native`` everywhere.
- generated entries with ``autograd: true`` that register -> also ``autograd`` (AutogradXPU wrapper);
  generated entries with ``custom_fallback: true`` whose key function is missing -> ``cpu`` (the
  DIOPI_ATEN_FUNC_CUSTOM_FALLBACK macro of RegisterDIPU.hpp registers the hand-written CPU fallback instead).
- names that are no op of PyTorch 2.1 are left out and named in the notes.
- caveats: ``convert_config.yaml`` dtype casts of the vendor's DIOPI adaptor (``common_config`` -> every op,
  a function's own rule -> the registered aten ops that call it); the DIOPI conformance-test skip lists
  (``diopi_test_skips_<vendor>.json``, torch function names -> api caveats, the skipped dtypes of each name).
- CPU fallback: DIPU's boxed fallback on XPU (at::native::cpu_fallback), always on; no vendor ships a forced
  list (DIPU_FORCE_FALLBACK_OPS_LIST is empty by default).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from opaudit.matrix.provenance import cite
from opaudit.matrix.release import Caveat, CpuFallback, Release, Source
from opaudit.matrix.sources import Context
from opaudit.matrix.torchops import TorchOps
from opaudit.matrix.vendors import vendor

VENDOR = "dipu"
DIPU_REPO = "DeepLink-org/deeplink.framework"
DIOPI_REPO = "DeepLink-org/DIOPI"
DIPU_DIR = "deeplink.framework-9dd38082"
DIOPI_DIR = "DIOPI-02f03c6a"
_ID = vendor(VENDOR)  # coverage_db/curated/vendors.toml: it poses as cuda, under the XPU key
DEVICE, KEY, PACKAGE = _ID.device_type, _ID.dispatch_key, _ID.package
TORCH = "2.1.0"  # the derived lists are computed for DIPU version code 20100
TORCH_CODE = "20100"
YAML_PATH = "dipu/scripts/autogen_diopi_wrapper/diopi_functions.yaml"
REGISTER_CPP = "dipu/torch_dipu/csrc_dipu/aten/RegisterDIPU.cpp"

# DIPU vendor -> (order, vendor_type string, chip / company, aliases). There is no chronology: every release is
# the same DIPU commit. The order puts the reference build (cuda) first and camb (DIPU's first and most complete
# non-NVIDIA vendor, exact data) last, so that plain ``dipu`` means dipu@camb.
VENDORS: dict[str, tuple[int, str, str, list[str]]] = {
    "cuda": (1, "CUDA", "NVIDIA GPUs (DIPU's reference build)", ["nvidia"]),
    "muxi": (2, "MUXI", "MetaX (MACA)", ["metax"]),
    "kunlunxin": (3, "KLX", "Kunlunxin XPUs", ["klx"]),
    "droplet": (4, "DROPLET", "unknown chip (tang runtime, PCCL collectives)", []),
    "supa": (5, "SUPA", "Biren BR1xx", ["biren"]),
    "topsrider": (6, "GCU", "Enflame GCUs (TopsRider)", ["gcu", "enflame"]),
    "ascend": (7, "NPU", "Huawei Ascend NPUs", ["npu"]),
    "camb": (8, "MLU", "Cambricon MLUs", ["mlu", "cambricon"]),
}
# DIPU vendor -> its DIOPI impl dirs in diopi_impl_functions_by_vendor.json (None: closed library; ascend: config)
IMPL_DIRS: dict[str, list[str] | None] = {
    "cuda": ["torch"], "muxi": ["torch", "muxi"], "camb": ["camb"], "topsrider": ["topsrider"],
    "kunlunxin": ["kunlunxin"], "ascend": [], "supa": None, "droplet": None,
}
# DIPU vendor -> impl dir of its staged convert_config.yaml
CONVERT_DIRS = {"cuda": "torch", "muxi": "muxi", "camb": "camb", "topsrider": "topsrider", "kunlunxin": "kunlunxin",
                "ascend": "ascend"}
# the collective library under DIPU's dicl backend
COLLECTIVES = {"cuda": "NCCL", "muxi": "NCCL", "camb": "CNCL", "ascend": "HCCL", "topsrider": "ECCL",
               "kunlunxin": "BKCL", "supa": "SUCCL", "droplet": "PCCL"}

FALLBACK = CpuFallback(
    exists=True, default_on=True,
    switch="DIPU_FORCE_FALLBACK_OPS_LIST=<comma-separated regexes of aten names> (or a "
           ".dipu_force_fallback_op_list.config file in the working directory) forces matching ops onto it at "
           "registration (empty by default)",
    note="ops DIPU does not register use PyTorch's Composite kernel if one exists, else DIPU's boxed fallback on "
         "the XPU key (dipu_fallback -> at::native::cpu_fallback), which logs 'fallback to cpu, name=aten::...'; "
         "a missing DIOPI function is reported at import as '<diopiFn> is not yet implemented, <op> will be "
         f"fallback to cpu'. Source: {cite('dipu-coverage')}",
)

_CAST = re.compile(r"\(([^)]*)\)\s*->\s*([A-Za-z0-9_]+)")
_COMMIT = re.compile(r"\b[0-9a-f]{40}\b")


def full_commit(sources_md: Path, short: str) -> str | None:
    """The 40-hex commit of SOURCES.md that starts with ``short`` (the staged folders name it by prefix)."""
    for c in _COMMIT.findall(sources_md.read_text(encoding="utf-8")):
        if c.startswith(short):
            return c
    return None


def load_yaml(path: Path) -> Any:
    import yaml

    with open(path, encoding="utf-8") as f:
        return yaml.load(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def load_json(path: Path) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def read_lines(path: Path) -> list[str]:
    lines = (line.strip() for line in path.read_text(encoding="utf-8").splitlines())
    return [s for s in lines if s and not s.startswith("#")]


def share_note(native: set[str], torch_ops: TorchOps) -> str:
    cuda = torch_ops.with_kernel("CUDA")
    hit = len(cuda & native)
    return (f"native reaches {hit} of the {len(cuda)} CUDA-kernel ops of PyTorch {torch_ops.version} "
            f"({100 * hit / len(cuda):.1f}%)")


def generated(entry: dict[str, Any], vendor: str, code: str = TORCH_CODE) -> bool:
    """Whether DIPU's generator emits ``entry`` for ``vendor`` at torch version ``code`` (autogen_diopi_wrapper)."""
    dev = entry.get("device")
    if dev and not (vendor in dev or ("all" in dev and f"-{vendor}" not in dev)):
        return False
    tv = entry.get("torch_ver")
    if tv and not (code in tv or ("all" in tv and f"-{code}" not in tv)):
        return False
    return bool(entry.get("register_operator"))


@dataclass
class Coverage:
    """What DIPU registers for one vendor."""

    vendor: str
    generated: set[str] = field(default_factory=set)  # aten ops generated for the vendor
    registered: set[str] = field(default_factory=set)  # key DIOPI function present (all generated if unknown)
    missing: set[str] = field(default_factory=set)  # generated but the key function is absent
    missing_functions: set[str] = field(default_factory=set)
    autograd: set[str] = field(default_factory=set)
    custom_fallback: set[str] = field(default_factory=set)  # missing, registered as a hand-written CPU fallback
    functions: set[str] | None = None  # the vendor's DIOPI functions (None: closed library)
    calls: dict[str, set[str]] = field(default_factory=dict)  # registered op -> DIOPI functions referenced


def vendor_functions(ctx: Context, vendor: str) -> set[str] | None:
    dirs = IMPL_DIRS[vendor]
    if dirs is None:
        return None
    if vendor == "ascend":
        cfg = load_yaml(ctx.folder(VENDOR) / DIOPI_DIR / "impl" / "ascend_npu" / "ascend_config.yaml")
        return set(cfg.get("ascend") or []) | set(cfg.get("ascend_npu") or [])
    by_dir = impl_functions(ctx)
    out: set[str] = set()
    for d in dirs:
        out |= by_dir[d]
    return out


def impl_functions(ctx: Context) -> dict[str, set[str]]:
    """impl dir -> DIOPI functions defined there (the json's keys carry a gloss in parentheses)."""
    data = load_json(ctx.folder(VENDOR) / DIOPI_DIR / "derived" / "diopi_impl_functions_by_vendor.json")
    return {k.split(" (")[0]: set(v["functions"]) for k, v in data["vendors"].items() if "effective" not in k}


@cache
def index_entries(path: Path) -> list[dict[str, Any]]:
    """The entries of derived/diopi_functions.index.yaml (read once; callers must not change them)."""
    return list(load_yaml(path) or [])


def coverage(ctx: Context, vendor: str) -> Coverage:
    entries = index_entries(ctx.folder(VENDOR) / DIPU_DIR / "derived" / "diopi_functions.index.yaml")
    funcs = vendor_functions(ctx, vendor)
    cov = Coverage(vendor, functions=funcs)
    for e in entries:
        if not generated(e, vendor):
            continue
        op, key = str(e["op"]), str(e["diopi_key_function"])
        cov.generated.add(op)
        if funcs is None or key in funcs:
            cov.registered.add(op)
            cov.calls.setdefault(op, set()).update(e.get("diopi_functions_referenced") or [])
            if e.get("autograd"):
                cov.autograd.add(op)
        else:
            cov.missing_functions.add(key)
            if e.get("custom_fallback"):
                cov.custom_fallback.add(op)
    cov.missing = cov.generated - cov.registered
    cov.custom_fallback -= cov.registered
    return cov


def parse_casts(text: str) -> dict[str, str]:
    """``"(int64)->int32, (float64)->float32"`` -> {"int64": "int32", "float64": "float32"}."""
    out = {}
    for srcs, dst in _CAST.findall(text):
        for s in srcs.split(","):
            if s.strip():
                out[s.strip()] = dst
    return out


def _cast_text(casts: dict[str, str]) -> str:
    return ", ".join(f"{s}->{d}" for s, d in casts.items())


def convert_caveats(path: Path, staged: str, cov: Coverage, only: set[str] | None) -> tuple[list[Caveat], int]:
    """Caveats from one convert_config.yaml; ``only``: the DIOPI functions the file serves (None: all).

    Returns the caveats and the number of DIOPI functions with their own casts. A function's casts already made
    by ``common_config`` are not repeated per op."""
    rules: dict[str, dict[str, str]] = {}  # DIOPI function -> "dtype" or "dtype of <tensor>" -> target dtype
    common: dict[str, str] = {}
    for item in load_yaml(path) or []:
        for fn, cfg in (item or {}).items():
            cfg = cfg or {}
            if fn == "common_config":
                common.update(parse_casts(str(cfg.get("dtype", ""))))
                continue
            if only is not None and fn not in only:
                continue
            if cfg.get("dtype"):
                rules.setdefault(fn, {}).update(parse_casts(str(cfg["dtype"])))
            for tensor, text in (cfg.get("tensor_dtype") or {}).items():
                rules.setdefault(fn, {}).update({f"{s} of {tensor}": d for s, d in parse_casts(str(text)).items()})
    out = []
    if common:
        out.append(Caveat("*", sorted(common), f"the vendor's DIOPI adaptor casts {_cast_text(common)} before every "
                                               "DIOPI call (convert_config.yaml common_config): no native support, "
                                               "results lose 64-bit range or precision", staged, kind="converted"))
    for op in sorted(cov.registered):
        own = {fn: {s: d for s, d in rules[fn].items() if common.get(s) != d}
               for fn in sorted(cov.calls.get(op, ())) if fn in rules}
        own = {fn: casts for fn, casts in own.items() if casts}
        if not own:
            continue
        dtypes = sorted({s.split(" of ")[0] for casts in own.values() for s in casts})
        note = "; ".join(f"{fn}: {_cast_text(casts)}" for fn, casts in own.items())
        out.append(Caveat(op, dtypes, f"the vendor's DIOPI adaptor casts before the call ({note}): no native support "
                                      "for these dtypes", staged, kind="converted"))
    return out, len(rules)


def skip_caveats(path: Path, staged: str) -> tuple[list[Caveat], int, int, int]:
    """api caveats from a DIOPI test-skip json: (caveats, cases, cases with skips, names those touch)."""
    data = load_json(path)
    by_name: dict[str, tuple[set[str], list[str]]] = {}
    cases = data["cases"]
    with_skips = {k: c for k, c in cases.items() if c.get("skips")}
    for case, c in sorted(with_skips.items()):
        dtypes = {("bool" if v == "bool_" else v) for s in c["skips"] if s.get("param") == "dtype"
                  for v in s.get("values") or []}
        if not dtypes:
            continue
        for name in c["name"]:
            slot = by_name.setdefault(name, (set(), []))
            slot[0].update(dtypes)
            slot[1].append(case)
    caveats = [Caveat(name, sorted(ds), "DIOPI conformance-test cases the vendor skips (marks failing) for these "
                                        f"dtypes: {', '.join(cs)} (some only with particular shapes or arguments)",
                      staged, api=True, kind="test_skip") for name, (ds, cs) in sorted(by_name.items())]
    names = {n for c in with_skips.values() for n in c["name"]}
    return caveats, len(cases), len(with_skips), len(names)


def vendor_release(ctx: Context, vendor: str) -> Release:
    """The release of one DIPU vendor (biren.py reuses the supa one for BR1xx)."""
    root = ctx.folder(VENDOR)
    torch_ops = ctx.torch_for(TORCH)
    if torch_ops is None:
        raise ValueError(f"{VENDOR}: no PyTorch {TORCH} op table staged")
    dipu_commit = full_commit(root / "SOURCES.md", DIPU_DIR.rsplit("-", 1)[1])
    diopi_commit = full_commit(root / "SOURCES.md", DIOPI_DIR.rsplit("-", 1)[1])
    sources: list[Source] = []

    def src(repo: str, path_in_repo: str, rel: str, note: str = "") -> Path:
        path = root / rel
        commit = dipu_commit if repo == DIPU_REPO else diopi_commit
        sources.append(ctx.source(repo, path_in_repo, commit, path, note))
        return path

    order, vendor_type, chip, aliases = VENDORS[vendor]
    src(DIPU_REPO, YAML_PATH, f"{DIPU_DIR}/derived/diopi_functions.index.yaml",
        "DERIVED, not an upstream file: one entry per diopi_functions.yaml entry (op, key DIOPI function, "
        "device / torch_ver filters, flags)")
    if vendor == "ascend":
        src(DIOPI_REPO, "impl/ascend_npu/ascend_config.yaml", f"{DIOPI_DIR}/impl/ascend_npu/ascend_config.yaml",
            "the DIOPI functions the Ascend build exports (ascend: legacy impl/ascend, ascend_npu: op-plugin based)")
    elif IMPL_DIRS[vendor] is not None:
        src(DIOPI_REPO, "impl/", f"{DIOPI_DIR}/derived/diopi_impl_functions_by_vendor.json",
            "DERIVED, not an upstream file: DIOPI functions defined in each impl/<dir> (regex scan of the sources)")
    always_path = src(DIPU_REPO, REGISTER_CPP, f"{DIPU_DIR}/derived/always_registered_ops.txt",
                      "DERIVED, not an upstream file: the ops RegisterDIPU.cpp registers by hand for every vendor")
    cov = coverage(ctx, vendor)
    always = set(read_lines(always_path))
    derived_list = set(read_lines(src(DIPU_REPO, YAML_PATH, f"{DIPU_DIR}/derived/aten_ops_{vendor}.txt",
                                      "DERIVED, not an upstream file: the staged result of the same rule, "
                                      "compared in the notes")))
    native = cov.registered | always
    unknown = sorted(n for n in native | cov.custom_fallback if torch_ops.get(n) is None)
    native -= set(unknown)
    cpu = cov.custom_fallback - set(unknown)
    autograd = cov.autograd - set(unknown)
    closed = cov.functions is None

    notes = [f"DIPU main {dipu_commit and dipu_commit[:7]} (2024-10-31, tag droplet_v0.11.0 + 5 commits) with DIOPI "
             f"v0.4.3-a0 ({diopi_commit and diopi_commit[:7]}); torch_dipu built with DIPU_DEVICE={vendor} for "
             f"{chip}; torch_dipu.dipu.vendor_type == '{vendor_type}'",
             f"lists computed for PyTorch 2.1.x (DIPU version code {TORCH_CODE}); this DIPU also builds for 2.0.0, "
             "2.1.1 and 2.2.2 (DIPU_SUPPORT_TORCHS), and 8 yaml entries depend on the torch version",
             "device naming: DIPU registers on the XPU dispatch key but masquerades as CUDA by default "
             "(DIPU_MOCK_CUDA=True, DIPU_PYTHON_DEVICE_AS_CUDA=True): torch.device('cuda'), .cuda() and torch.cuda.* "
             "are redirected and devices print as cuda; 'dipu' is accepted as an alias; internally tensors are xpu, "
             "which collides with Intel XPU",
             f"distributed backend dicl (ProcessGroupDICL, over {COLLECTIVES[vendor]}); with mock-cuda on, nccl "
             "requests are served by dicl",
             "a 2024 snapshot: DeepLink has been quiet since late 2024; DIOPI main one month later already defined "
             "408 functions in impl/torch (356 here)"]
    if closed:
        exact = False
        accuracy = (f"UPPER BOUND: the {len(cov.generated)} aten ops DIPU generates for {vendor} (+ its "
                    "hand-registered ops) would register only if the vendor's closed DIOPI library defined every "
                    "key function; which it defines is not public")
        notes.append(f"upper bound: {vendor}'s DIOPI library is a closed binary (impl/{vendor} holds only CMake, test "
                     f"glue and device_configs.py); {len(cov.generated)} candidate ops if it were complete")
    else:
        exact = True
        accuracy = ("DIPU's registration rule applied to its diopi_functions.yaml and the DIOPI functions "
                    + ("the Ascend build exports (ascend_config.yaml)" if vendor == "ascend" else
                       "defined in the vendor's impl sources (a source scan: macros and #if are not modelled)"))
        notes.append(f"{len(cov.generated)} aten ops generated for {vendor}: {len(cov.registered)} registered, "
                     f"{len(cov.missing)} skipped because their key DIOPI function is missing ("
                     f"{', '.join(sorted(cov.missing_functions))}): {', '.join(sorted(cov.missing))}")
        notes.append(f"the vendor's DIOPI library defines {len(cov.functions or ())} functions"
                     + (" (ascend_config.yaml: ascend + ascend_npu lists)" if vendor == "ascend" else ""))
    notes.append(f"{len(always)} ops registered by hand in RegisterDIPU.cpp for every vendor (empty, views, set_, "
                 "copy helpers, pinning, record_stream) are in native; "
                 f"{len(always & cov.registered)} of them are also generated entries")
    listed = cov.generated if closed else cov.registered
    if listed != derived_list:
        notes.append(f"aten_ops_{vendor}.txt (staged result) lists {len(derived_list)} ops, this rule {len(listed)}: "
                     f"differing {', '.join(sorted(listed ^ derived_list))}")
    if cpu:
        notes.append(f"{len(cpu)} generated ops whose key DIOPI function is missing carry custom_fallback: DIPU "
                     "registers their hand-written CPU fallback on XPU (cpu): " + ", ".join(sorted(cpu)))
    if autograd:
        notes.append(f"autograd: true entries (DIPU's own AutogradXPU wrapper): {', '.join(sorted(autograd))}")
    if unknown:
        notes.append(f"{len(unknown)} names are no op of PyTorch {torch_ops.version}, left out: {', '.join(unknown)}")
    if vendor == "camb":
        notes.append("DIPU's camb CI forces fill_.Scalar and argmax.out, all.out, all.all_out, any.all_out, any.out to "
                     "the CPU (DIPU_FORCE_FALLBACK_OPS_LIST in its test scripts); not a shipped default")
    notes.append(share_note(native, torch_ops))

    caveats: list[Caveat] = []
    if vendor in CONVERT_DIRS:
        d = CONVERT_DIRS[vendor]
        rel = f"{DIOPI_DIR}/impl/{d}/convert_config.yaml"
        path = src(DIOPI_REPO, f"impl/{d}/convert_config.yaml", rel,
                   "adaptor rules per DIOPI function: dtype casts (what the chip lacks), layouts")
        only = None
        if vendor == "ascend":
            only = set((load_yaml(root / DIOPI_DIR / "impl" / "ascend_npu" / "ascend_config.yaml") or {})
                       .get("ascend") or [])
        cvs, nrules = convert_caveats(path, f"{VENDOR}/{rel}", cov, only)
        caveats += cvs
        if nrules or any(c.op == "*" for c in cvs):
            notes.append(f"convert_config.yaml (impl/{d}): {nrules} DIOPI functions with their own dtype casts"
                         + ("; a common_config cast for every function" if any(c.op == "*" for c in cvs) else "")
                         + (" (only the functions served by impl/ascend are read)" if vendor == "ascend" else ""))
    skips = root / DIOPI_DIR / "derived" / f"diopi_test_skips_{vendor}.json"
    if skips.is_file():
        rel = f"{DIOPI_DIR}/derived/diopi_test_skips_{vendor}.json"
        src(DIOPI_REPO, f"impl/{vendor}/device_configs.py", rel,
            "DERIVED, not an upstream file: the conformance-test skip list, read from the syntax tree")
        cvs, ncases, nskip, nnames = skip_caveats(skips, f"{VENDOR}/{rel}")
        caveats += cvs
        notes.append(f"DIOPI conformance tests (impl/{vendor}/device_configs.py): {ncases} cases listed, {nskip} with "
                     f"skips touching {nnames} torch functions; the {len(cvs)} functions with dtype skips are api "
                     "caveats")
    if vendor == "supa":
        caveats.append(Caveat("*", ["bool"], "bool tensors are represented as float on SUPA (a copy quirk of DIPU's "
                                             "supa vendor code)", cite("dipu-supa-bool"),
                                kind="converted"))

    ops = {"native": sorted(native), "autograd": sorted(autograd), "cpu": sorted(cpu)}
    return Release(
        vendor=VENDOR, name=vendor, torch=TORCH, device_type=DEVICE, dispatch_key=KEY, package=PACKAGE,
        import_name=_ID.import_name, aliases=[*aliases, f"{vendor}-{(dipu_commit or '')[:7]}"], vendor_release=None,
        order=order, exact=exact, accuracy=accuracy, fallback=FALLBACK,
        ops={k: v for k, v in ops.items() if v}, caveats=caveats, sources=sources, notes=notes,
    )


def releases(ctx: Context) -> list[Release]:
    return [vendor_release(ctx, v) for v in sorted(VENDORS, key=lambda v: VENDORS[v][0])]
