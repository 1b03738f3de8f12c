"""Cambricon torch_mlu (device ``mlu``, key PrivateUse1): one release per staged branch or commit of torch_mlu.

Rules:
- provenance, torch_mlu version, PyTorch version and commit date of each folder come from MANIFEST.csv;
  ``r1.22_pt*`` folders are the release branches (torch_mlu 1.22.2, one per PyTorch), the
  ``<branch>-<version>-<commit>`` folders are development snapshots (not published releases: ``prerelease``).
- ``mlu_functions.yaml`` section ``aten``: the op name is the text of ``func`` before any ``(`` (a few
  entries carry a full schema), as the codegen (codegen/gen_mlu_stubs.py) reads it. An entry is registered
  for the keys of its ``dispatch`` (default PrivateUse1): PrivateUse1 -> ``native``, SparsePrivateUse1 ->
  ``sparse``; ``custom_autograd: True`` -> also ``autograd`` (an AutogradPrivateUse1 kernel). Every
  overload is listed on its own (functional, in-place and ``.out`` of a structured group alike) and the
  codegen registers only listed names, so no structured_delegate expansion is done.
- a listed name that is no overload of the PyTorch release (``bernoulli_.p``) registers nothing: it is left
  out of every category and named in the notes.
- where the yaml header documents it (``Note: [SparsePrivateUse1]``), every aten op whose SparseCPU and
  SparseCUDA kernels are the same function in PyTorch's native_functions.yaml is also registered for
  SparsePrivateUse1 (``sparse``), as gen_mlu_stubs.py does.
- sections ``vision`` / ``audio`` / ``custom`` (full schemas) -> ``custom`` as ``torchvision::name``,
  ``torchaudio::name``, ``torch_mlu::name`` (TORCH_LIBRARY(torch_mlu)).
- torch_api.yaml (development snapshots only) is Python-API level with Chinese free-text limitations: only
  the limitations that name dtypes become api caveats (``_DTYPE_LIMITS``); its counts go to the notes.
- CPU fallback: on by default (fact cambricon-cpu-fallback).
"""

from __future__ import annotations

import csv
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

VENDOR = "cambricon"
REPO = "Cambricon/torch_mlu"
_ID = vendor(VENDOR)  # coverage_db/curated/vendors.toml
DEVICE, KEY = _ID.device_type, _ID.dispatch_key
SPARSE_KEY = "SparsePrivateUse1"
PACKAGE = _ID.package

FALLBACK = CpuFallback(
    exists=True, default_on=True,
    switch="ENABLE_FALLBACK_TO_CPU=0 (or OFF/off) replaces it by a NotImplementedError; "
           "ENABLE_MLU_FAIL_FALLBACK=1 (default off) also re-runs an op on the CPU when its MLU kernel throws",
    note="boxed PrivateUse1 fallback (torch_mlu/csrc/aten/MLUFallback.cpp) warns once per op and runs "
         "at::native::cpu_fallback; the fail-fallback wraps every generated aten kernel except empty.memory_format, "
         "empty_strided, copy_ and _copy_from_and_resize (codegen/dest/gen_external_mlu.py); all three behaviours "
         "exist on the 1.22 release branches too. It fails for ops without a CPU kernel and for some factory ops "
         f"with device arguments (triu_indices, pytorch#121289). Source: {cite('cambricon-cpu-fallback')}",
)

# torch_api.yaml limitations (Chinese free text) that name dtypes: (pattern, dtypes affected, English gloss)
_DTYPE_LIMITS: list[tuple[re.Pattern[str], list[str], str]] = [
    (re.compile(r"half数据类型.*indices为short"), ["float16"],
     "with float16 input the returned indices are int16 (short), not int64"),
    (re.compile(r"数据类型只支持float"), ["float16", "bfloat16", "float64", "complex64", "complex128"],
     "only float32 is supported"),
    (re.compile(r"输入是int16, ?输出是int8"), ["int16"], "int16 input with an int8 result is not supported"),
    (re.compile(r"输入数据类型是half.*不支持dim"), ["float16"], "float16 input: the dim argument is not supported"),
]
_SPARSE_NOTE = "Note: [SparsePrivateUse1]"


@dataclass
class Folder:
    """One folder of cambricon/: its files with provenance (rows of MANIFEST.csv)."""

    name: str
    version: str  # torch_mlu version in build.property
    torch: str
    date: str
    ref: str  # "branch:r1.22_pt2.1.0", "commit on r2.1_develop"
    commit: str
    files: dict[str, dict[str, str]] = field(default_factory=dict)  # file name -> manifest row

    @property
    def release_branch(self) -> bool:
        return self.name.startswith("r1.22_pt")

    @property
    def branch(self) -> str:
        return self.name if self.release_branch else self.name.split("-")[0]

    @property
    def head(self) -> bool:
        return self.ref.startswith("branch:")


def folders(ctx: Context) -> list[Folder]:
    """The folders of MANIFEST.csv, in chronological order (commit date, torch_mlu version, PyTorch version)."""
    root = ctx.folder(VENDOR)
    out: dict[str, Folder] = {}
    with open(root / "MANIFEST.csv", encoding="utf-8", newline="") as f:
        for row in csv.DictReader(f):
            d = out.setdefault(row["dir"], Folder(row["dir"], row["torch_mlu_version"], row["pytorch_version"],
                                                  row["commit_date"], row["ref"], row["commit"]))
            d.files[row["file"]] = row
    return sorted(out.values(), key=lambda d: (d.date, _vt(d.version), _vt(d.torch)))


def _vt(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v))


def _load(path: Path) -> Any:
    import yaml

    with open(path, encoding="utf-8") as f:
        return yaml.load(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


@dataclass
class MluFunctions:
    """What one mlu_functions.yaml lists."""

    entries: int = 0  # aten entries, duplicates included
    keys: dict[str, set[str]] = field(default_factory=dict)  # aten name -> dispatch keys
    custom_autograd: set[str] = field(default_factory=set)
    full_schema: set[str] = field(default_factory=set)  # aten entries written with a schema
    custom: list[str] = field(default_factory=list)  # ns::name of vision / audio / custom
    sections: dict[str, int] = field(default_factory=dict)  # vision/audio/custom -> entries
    auto_sparse_rule: bool = False  # the header documents the automatic SparsePrivateUse1 registration


_CUSTOM_NS = {"vision": "torchvision", "audio": "torchaudio", "custom": "torch_mlu"}


def read_mlu_functions(path: Path) -> MluFunctions:
    text = path.read_text(encoding="utf-8")
    data = _load(path)
    out = MluFunctions(auto_sparse_rule=_SPARSE_NOTE in text.split("\naten:", 1)[0])
    for e in data.get("aten") or []:
        func = str(e["func"])
        name = func.split("(", 1)[0].strip()
        out.entries += 1
        if "(" in func:
            out.full_schema.add(name)
        keys = {k.strip() for k in str(e.get("dispatch", KEY)).split(",") if k.strip()}
        # the header spells it "Privateuse1" once; the codegen only accepts these two keys
        keys = {SPARSE_KEY if k.lower() == SPARSE_KEY.lower() else KEY if k.lower() == KEY.lower() else k for k in keys}
        out.keys.setdefault(name, set()).update(keys)
        if e.get("custom_autograd"):
            out.custom_autograd.add(name)
    for section, ns in _CUSTOM_NS.items():
        items = data.get(section) or []
        out.sections[section] = len(items)
        out.custom += [f"{ns}::{str(e['func']).split('(', 1)[0].strip()}" for e in items]
    return out


@cache
def shared_sparse_kernels(native_functions: Path) -> frozenset[str]:
    """Ops of a PyTorch native_functions.yaml whose SparseCPU and SparseCUDA kernels are the same function."""
    out = set()
    for e in _load(native_functions):
        flat: dict[str, str] = {}
        for k, v in (e.get("dispatch") or {}).items():
            for part in str(k).split(","):
                flat[part.strip()] = str(v)
        if "SparseCPU" in flat and flat.get("SparseCPU") == flat.get("SparseCUDA"):
            out.add(str(e["func"]).split("(", 1)[0].strip())
    return frozenset(out)


@dataclass
class TorchApi:
    """Counts and dtype limits of one torch_api.yaml."""

    apis: int = 0
    supported: int = 0
    limited: int = 0
    headings: int = 0
    caveats: list[tuple[str, list[str], str, str]] = field(default_factory=list)  # api, dtypes, gloss, text


def read_torch_api(path: Path) -> TorchApi:
    out = TorchApi()
    for heading in _load(path) or []:
        for _, items in heading.items():
            out.headings += 1
            for it in items or []:
                out.apis += 1
                out.supported += it.get("supported") is True
                text = str(it.get("limitations") or "").strip()
                if not text:
                    continue
                out.limited += 1
                for pattern, dtypes, gloss in _DTYPE_LIMITS:
                    if pattern.search(text):
                        out.caveats.append((str(it["api"]), dtypes, gloss, text))
    return out


def _pytorch_source(ctx: Context, torch_ops: TorchOps) -> tuple[Path, Source]:
    from opaudit.matrix.sources import pytorch

    version = torch_ops.version
    path = ctx.upstream / "pytorch" / f"v{version}" / "native_functions.yaml"
    commit, wheel = pytorch.provenance(ctx).get(f"v{version}", (None, ""))
    src = ctx.source(pytorch.REPO, pytorch.PATH, commit, path,
                     f"PyTorch {version}: read for the ops whose SparseCPU and SparseCUDA kernels are one function "
                     f"(registered for SparsePrivateUse1 automatically){f'; copy shipped in {wheel}' if wheel else ''}")
    return path, src


def release(ctx: Context, d: Folder, order: int) -> Release:
    root = ctx.folder(VENDOR)
    folder = root / d.name
    torch_ops = ctx.torch_for(d.torch)
    if torch_ops is None:
        raise ValueError(f"{VENDOR}/{d.name}: no PyTorch {d.torch} op table staged")
    sources: list[Source] = []
    notes: list[str] = []

    def src(file: str, note: str = "") -> Path:
        row = d.files[file]
        path = folder / file
        sources.append(ctx.source(row["repo"], row["path_in_repo"], row["commit"], path, note))
        return path

    mf = read_mlu_functions(src("mlu_functions.yaml", "codegen list: aten overloads with an MLU kernel, "
                                                    "torchvision/torchaudio/torch_mlu schemas"))
    known = {n for n in mf.keys if torch_ops.get(n) is not None}
    unknown = sorted(set(mf.keys) - known)
    native = sorted(n for n in known if KEY in mf.keys[n])
    listed_sparse = sorted(n for n in known if SPARSE_KEY in mf.keys[n])
    sparse = set(listed_sparse)
    auto: set[str] = set()
    if mf.auto_sparse_rule:
        nf, nf_src = _pytorch_source(ctx, torch_ops)
        sources.append(nf_src)
        auto = set(shared_sparse_kernels(nf)) - sparse
        sparse |= auto
    autograd = sorted(n for n in mf.custom_autograd if n in known)

    if d.release_branch:
        name = f"{d.version}+torch{d.torch}"
        aliases = [d.name, f"{d.version}-torch{d.torch}"]
        notes.append(f"torch_mlu {d.version} release branch {d.name} (build.property \"{d.version}-torch{d.torch}\", "
                     f"commit {d.commit[:7]} of {d.date}); the repository has no tags, the branch is the release")
    else:
        name = f"{d.version}.dev+torch{d.torch}"
        aliases = [d.name] + ([d.branch] if d.head else [])
        where = (f"head of branch {d.branch}" if d.head else
                 f"last commit of branch {d.branch} before build.property moved past {d.version}")
        notes.append(f"development snapshot, not a published release: {where}, commit {d.commit[:7]} "
                     f"of {d.date}, build.property version {d.version}; the op list is exact for this commit, the "
                     f"released torch_mlu {d.version} may differ ({cite('cambricon-dev-snapshots')})")
    if torch_ops.version != d.torch:
        notes.append(f"targets PyTorch {d.torch}; op names checked against PyTorch {torch_ops.version}'s table "
                     "(the nearest staged release)")
    if _vt(d.torch)[:2] in ((2, 1), (2, 3)):
        notes.append(f"for PyTorch {d.torch} torch_mlu needs Cambricon's patched torch wheel (pytorch_patches/); "
                     f"names are checked against the stock native_functions.yaml ({cite('cambricon-patched-torch')})")
    dup = mf.entries - len(mf.keys)
    notes.append(f"mlu_functions.yaml: {mf.entries} aten entries = {len(mf.keys)} distinct overloads"
                 + (f" ({dup} listed twice)" if dup else "")
                 + f"; {len(mf.full_schema)} written with a full schema (the name before '(' is used)")
    for n in unknown:
        notes.append(f"{n} is listed but is no overload of PyTorch {torch_ops.version}: a stale name the codegen "
                     "tolerates (it matches names against PyTorch's native_functions.yaml and registers nothing "
                     "for it); left out of native")
    notes.append(f"custom_autograd: {len(autograd)} aten ops also get an AutogradPrivateUse1 kernel (autograd)")
    if mf.auto_sparse_rule:
        notes.append(f"sparse: {len(listed_sparse)} listed with SparsePrivateUse1 + {len(auto)} registered "
                     f"automatically (SparseCPU and SparseCUDA share the kernel in PyTorch {torch_ops.version}'s "
                     "native_functions.yaml; rule of the yaml header and codegen/gen_mlu_stubs.py)")
    notes.append(f"custom ops: {mf.sections['vision']} torchvision, {mf.sections['audio']} torchaudio, "
                 f"{mf.sections['custom']} torch_mlu (TORCH_LIBRARY(torch_mlu): torch.ops.torch_mlu.*)")
    cuda = torch_ops.with_kernel("CUDA")
    hit = len(cuda & set(native))
    notes.append(f"native reaches {hit} of the {len(cuda)} CUDA-kernel ops of PyTorch {torch_ops.version} "
                 f"({100 * hit / len(cuda):.1f}%)")

    caveats: list[Caveat] = []
    if "torch_api.yaml" in d.files:
        api = read_torch_api(src("torch_api.yaml", "Python-API support list with Chinese limitations; "
                                                  "only dtype-naming limitations are encoded (as api caveats)"))
        staged = f"{VENDOR}/{d.name}/torch_api.yaml"
        caveats = [Caveat(a, dtypes, f"{gloss} (limitations: {text})", staged, api=True)
                   for a, dtypes, gloss, text in api.caveats]
        notes.append(f"torch_api.yaml: {api.apis} Python APIs under {api.headings} headings, {api.supported} "
                     f"supported=true, {api.limited} with limitations (Chinese free text, mostly argument limits); "
                     f"the {len(api.caveats)} that name dtypes are api caveats")

    ops = {"native": native, "autograd": autograd, "sparse": sorted(sparse), "custom": sorted(set(mf.custom))}
    return Release(
        vendor=VENDOR, name=name, torch=d.torch, device_type=DEVICE, dispatch_key=KEY, package=PACKAGE,
        import_name=_ID.import_name, aliases=aliases, vendor_release=None, order=order,
        prerelease=not d.release_branch, exact=True,
        accuracy="the aten entries of codegen/mlu_functions.yaml registered for PrivateUse1; the few kernels "
                 "torch_mlu registers by hand in C++ (e.g. has_compatible_shallow_copy_type, pin_memory, fft "
                 f"internals; {cite('cambricon-hand-registered')}) are not in this file",
        fallback=FALLBACK, ops={k: v for k, v in ops.items() if v}, caveats=caveats, sources=sources, notes=notes,
    )


def releases(ctx: Context) -> list[Release]:
    return [release(ctx, d, order) for order, d in enumerate(folders(ctx), start=1)]
