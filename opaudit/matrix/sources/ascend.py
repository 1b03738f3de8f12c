"""Huawei Ascend torch_npu (+ op-plugin), device ``npu``: one release per torch_npu release.

Releases:
- one per tag folder of ascend/ (MANIFEST.csv gives tag, Ascend release, package version, PyTorch version and
  provenance); named by the torch_npu package version, the tag as alias, the Ascend release as vendor_release;
- a folder of ascend/pypi-wheels/ whose version equals a tag's package version is the same release: merged,
  and its ``npu_native_functions_by_codegen.yaml`` (+ ``npu_native_functions.yaml``), the build's own output,
  gives the op lists; every difference to the tag-derived lists goes to ``notes``. A wheel without a tag folder
  is a release of its own (torch version from its METADATA.txt);
- ``master`` and ``v26.2.0-beta.1-pytorch2.13.0`` build PyTorch 2.13/2.14/2.15 from one tree: one release per
  line with a staged PyTorch table, named ``master+2.13``, ``26.2.0-beta.1+2.13`` ... (development snapshot /
  pre-release, marked ``prerelease``); op-plugin is filtered with that line's key. The 2.15 line has no staged
  table: not produced.
- order: Ascend release (rc < final, beta < final, master last), ties by PyTorch version; a wheel without a tag
  sorts right after the newest tag folder that builds its PyTorch line (its package version is higher).

Op lists, by era (fact ascend-eras):
- 1.5.0 fork: entries of the fork's native_functions.yaml with ``npu_dispatch`` -> ``native``; entries with
  ``npu_dispatch_only`` (NPU-only ops, in the aten namespace in the fork) -> ``custom`` by bare name.
- npu_native_functions.yaml: an item is a name or ``{func: name}``; the op is the text before ``(``.
  ``supported`` and ``autograd`` (its autograd override, registered on the autograd key of the device; the
  forward runs NPU code) -> ``native``; ``autograd`` also -> ``autograd``; ``tocpu`` -> ``cpu``;
  ``unsupported`` -> ``unsupported``; ``custom``/``custom_autograd`` full schemas -> ``custom`` as ``npu::name``.
  1.8.1 and the 3.0.x releases for 1.11: ``supported`` is a candidate list (the build dropped names without a
  C++ kernel): exact = False.
- op_plugin_functions.yaml per line (5.0.rc3 .. 6.0.rc2): every ``official`` / ``autograd`` item counts
  (``autograd`` also -> ``autograd``); ``tocpu`` -> ``cpu``, ``unsupported`` -> ``unsupported``, ``quant`` ->
  ``quant``, ``custom`` -> ``custom``. An item with ``sparse`` is also -> ``sparse``; one with ``sparse`` and no
  ``impl_ns`` has only a SparsePrivateUse1 kernel: ``sparse`` only, not ``native``.
- unified op_plugin_functions.yaml (6.0.rc3 on): key ``vX.Y`` of the release's PyTorch line; versions are
  ``all_version``, an inclusive ``[vA, vB]`` / ``[vA, newest]`` or a comma list; an item is kept iff the key is
  in acl_op ∪ op_api ∪ sparse (``dvm`` does not count); kept only through ``sparse`` -> ``sparse`` only.
  ``tocpu``/``unsupported`` items carry ``version:`` (only v1.11/v2.0 ever, so empty for the 2.1+ lines).
- the wheel's by_codegen file: ``supported`` (merged torch_npu + op-plugin, already filtered) and
  ``autograd`` -> ``native`` (sparse-only items as above), ``custom`` -> ``custom``, ``quant`` -> ``quant``.
- every custom name (bare) is removed from the aten categories. No structured_delegate expansion: each overload
  is listed on its own. Names missing from the line's PyTorch table (stale 2.0.1 entries) are kept, so the counts
  stay those of the files, and named in the notes.

Caveats (api=True, keys are PyTorch OpInfo names, not aten ops): op-plugin test/unsupported_ops_info_base.yaml
plus the line's test/test_v2r<N>_ops/unsupported_ops_info.yaml (5.0.0: test/unsupported_ops_info.yaml), for
the 2.1+ lines of a tag folder; one caveat per OpInfo name: the union of the skipped dtypes, each test with its
dtypes in the note. msFmkTransplt's supported_op_2_*.json dtype notes are not used (Python-API level, third-party
mirror, ~1,150 more caveats per 2.6-2.8 release).

CPU fallback (facts ascend-cpu-fallback, ascend-fallback-switch, ascend-tocpu): boxed PrivateUse1 fallback on
by default for every release built for PyTorch >= 2.1, no off switch in any release tag;
TORCH_NPU_FALLBACK_CPU_DISABLE=1 exists on master only (dev branches, 2026-08-20). Before 2.1 no generic
fallback (1.11/2.0 from 5.0.rc1: per-op tocpu list). Dispatch key: NPU (fork), XLA (1.8.1, 1.11, 2.0.1 lines),
PrivateUse1 (2.1 on).
"""

from __future__ import annotations

import csv
import gc
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opaudit.matrix.provenance import cite
from opaudit.matrix.release import Caveat, CpuFallback, Release, Source
from opaudit.matrix.sources import Context, sha256
from opaudit.matrix.torchops import minor
from opaudit.matrix.vendors import vendor

VENDOR = "ascend"
OP_REPO = "Ascend/op-plugin"
PYPI = "pypi:torch-npu"
_ID = vendor(VENDOR)  # coverage_db/curated/vendors.toml
DEVICE = _ID.device_type
PACKAGE = _ID.package
WHEELS = "pypi-wheels"

# -- small readers ---------------------------------------------------------------------------------------


_CAVEATS: dict[tuple[str, ...], list[Caveat]] = {}  # caveat lists, shared by releases with the same files
_PARSED: dict[str, Any] = {}  # sha256 -> parsed content (many tags pin the same op-plugin commit)


def load_yaml(path: Path) -> Any:
    """A parsed YAML file, parsed once per distinct content."""
    import yaml

    digest = sha256(path)
    if digest not in _PARSED:
        # the parse allocates ~10^5 containers; with PyTorch's op tables in memory the cyclic GC would walk the
        # whole heap again and again (4x slower), and parsed YAML has no reference cycles to collect
        enabled = gc.isenabled()
        gc.disable()
        try:
            with open(path, encoding="utf-8") as f:
                _PARSED[digest] = yaml.load(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        finally:
            if enabled:
                gc.enable()
    return _PARSED[digest]


def op_key(item: Any) -> str:
    """``add.Tensor`` from ``add.Tensor``, ``{func: add.Tensor}`` or ``{func: "add.Tensor(Tensor self, ...)"}``."""
    f = item["func"] if isinstance(item, dict) else item
    return str(f).split("(", 1)[0].strip()


def names(items: Any) -> set[str]:
    return {op_key(i) for i in items or []}


def version_set(value: Any, all_version: list[str]) -> set[str]:
    """The PyTorch-line keys an op-plugin version value stands for (the unified op_plugin_functions.yaml)."""
    if value is None or value is False:
        return set()
    if value == "all_version":
        return set(all_version)
    if isinstance(value, list):
        lo, hi = (str(v).strip() for v in value)
        hi = all_version[-1] if hi == "newest" else hi
        return set(all_version[all_version.index(lo):all_version.index(hi) + 1])
    return {v.strip() for v in str(value).split(",") if v.strip()}


def line_key(torch: str) -> str:
    major, mi = minor(torch)
    return f"v{major}.{mi}"


def vtuple(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v)[:3])


# -- op lists --------------------------------------------------------------------------------------------


@dataclass
class Ops:
    """The op categories of one build, before they become a Release."""

    native: set[str] = field(default_factory=set)
    autograd: set[str] = field(default_factory=set)
    cpu: set[str] = field(default_factory=set)
    unsupported: set[str] = field(default_factory=set)
    sparse: set[str] = field(default_factory=set)
    quant: set[str] = field(default_factory=set)
    custom: set[str] = field(default_factory=set)  # bare names
    owned: set[str] = field(default_factory=set)  # torch_npu's own supported list (npu_native_functions.yaml)
    plugin: set[str] = field(default_factory=set)  # op-plugin official (kept)
    autograd_only: set[str] = field(default_factory=set)

    def normalize(self) -> Ops:
        """Remove custom names from the aten categories."""
        for cat in ("native", "autograd", "cpu", "unsupported", "sparse", "quant", "owned", "plugin"):
            getattr(self, cat).difference_update(self.custom)
        self.autograd_only = self.autograd - self.owned - self.plugin
        return self

    def categories(self, custom_ns: str | None = "npu") -> dict[str, list[str]]:
        out = {cat: sorted(getattr(self, cat)) for cat in ("native", "autograd", "cpu", "unsupported", "sparse",
                                                           "quant")}
        out["custom"] = sorted(f"{custom_ns}::{n}" if custom_ns else n for n in self.custom)
        return {k: v for k, v in out.items() if v}

    @property
    def aten(self) -> set[str]:
        """The registered aten set (dense, autograd and sparse-only together)."""
        return self.native | self.sparse


def read_fork(path: Path) -> Ops:
    ops = Ops()
    for e in load_yaml(path):
        if "npu_dispatch" in e:
            ops.native.add(op_key(e))
        if "npu_dispatch_only" in e:
            ops.custom.add(op_key(e))
    ops.owned = set(ops.native)
    return ops.normalize()


def read_torch_npu(path: Path, ops: Ops) -> None:
    """torch_npu's npu_native_functions.yaml (any era) into ``ops``."""
    d = load_yaml(path) or {}
    sup, ag = names(d.get("supported")), names(d.get("autograd"))
    ops.owned |= sup
    ops.native |= sup | ag
    ops.autograd |= ag
    ops.cpu |= names(d.get("tocpu"))
    ops.unsupported |= names(d.get("unsupported"))
    ops.custom |= names(d.get("custom")) | names(d.get("custom_autograd"))


def read_op_plugin(path: Path, key: str, ops: Ops) -> None:
    """op-plugin's op_plugin_functions.yaml, per-line or unified (filtered with ``key``), into ``ops``."""
    d = load_yaml(path) or {}
    allv = d.get("all_version")

    def kept(item: dict[str, Any]) -> tuple[bool, bool]:
        """(kept at all, kept only through ``sparse``)."""
        if allv is None:
            return True, "sparse" in item and "impl_ns" not in item
        dense = any(key in version_set(item.get(k), allv) for k in ("acl_op", "op_api"))
        sparse = key in version_set(item.get("sparse"), allv)
        return dense or sparse, sparse and not dense

    def in_line(item: Any) -> bool:
        return allv is None or not isinstance(item, dict) or "version" not in item \
            or key in version_set(item["version"], allv)

    for section in ("official", "autograd"):
        for item in d.get(section) or []:
            ok, sparse_only = kept(item)
            if not ok:
                continue
            name = op_key(item)
            if item.get("sparse") is not None and (allv is None or key in version_set(item["sparse"], allv)):
                ops.sparse.add(name)
            if section == "official":
                ops.plugin.add(name)  # table 2.3's "op-plugin official" column counts sparse-only entries too
            if sparse_only:
                continue
            ops.native.add(name)
            if section == "autograd":
                ops.autograd.add(name)
    ops.quant |= {op_key(i) for i in d.get("quant") or [] if kept(i)[0]}
    ops.custom |= {op_key(i) for i in d.get("custom") or [] if kept(i)[0]}
    ops.cpu |= {op_key(i) for i in d.get("tocpu") or [] if in_line(i)}
    ops.unsupported |= {op_key(i) for i in d.get("unsupported") or [] if in_line(i)}


def read_wheel(folder: Path) -> Ops:
    """A wheel's npu_native_functions_by_codegen.yaml (+ its npu_native_functions.yaml)."""
    ops = Ops()
    read_torch_npu(folder / "npu_native_functions.yaml", ops)
    d = load_yaml(folder / "npu_native_functions_by_codegen.yaml") or {}
    for section in ("supported", "autograd"):
        for item in d.get(section) or []:
            name = op_key(item)
            if isinstance(item, dict) and item.get("sparse") is not None:
                ops.sparse.add(name)
                if "impl_ns" not in item and "(" in str(item["func"]):
                    continue  # an op-plugin entry with only a SparsePrivateUse1 kernel
            ops.native.add(name)
            (ops.plugin if section == "supported" else ops.autograd).add(name)
    ops.quant |= names(d.get("quant"))
    ops.custom |= names(d.get("custom")) | names(d.get("custom_autograd"))
    return ops.normalize()


# -- the folders -----------------------------------------------------------------------------------------


@dataclass
class Folder:
    """One tag folder (or master) of ascend/, with its MANIFEST.csv rows."""

    name: str
    tag: str
    ascend: str  # "7.3.0", "26.2.0-beta.1", "master"
    package: str  # "2.6.0.post5"; "2.15.0/2.14.0/2.13.0" for the multi-line trees
    torch: list[str]  # ["2.6.0"]; several for the multi-line trees
    files: dict[str, dict[str, str]] = field(default_factory=dict)

    @property
    def multi(self) -> bool:
        return len(self.torch) > 1

    @property
    def era(self) -> str:
        if "native_functions.yaml" in self.files:
            return "fork"
        if "op_plugin_functions.yaml" not in self.files:
            t = self.torch[0]
            if minor(t) == (1, 8) or (minor(t) == (1, 11) and self.ascend.startswith("3.")):
                return "candidate"
            return "torch_npu"
        return "op-plugin"


def folders(ctx: Context) -> list[Folder]:
    base = ctx.folder(VENDOR)
    out: dict[str, Folder] = {}
    with open(base / "MANIFEST.csv", encoding="utf-8", newline="") as f:
        for row in csv.DictReader(f):
            d = row["dir"]
            if not row["torch_npu_tag_or_branch"]:
                continue  # the msFmkTransplt folder
            if d not in out:
                out[d] = Folder(d, row["torch_npu_tag_or_branch"], row["ascend_release"],
                                row["torch_npu_package_version"], sorted(row["pytorch_version"].split("/"),
                                                                         key=vtuple))
            out[d].files[row["file"]] = row
    return list(out.values())


@dataclass
class Wheel:
    version: str
    torch: str
    wheel: str  # the wheel's file name
    sha: str  # the wheel's sha256
    folder: Path


_WHEEL_ROW = re.compile(r"^\|\s*(\S+)\s*\|\s*(\S+\.whl)\s*\|\s*([0-9a-f]{64})\s*\|")
_REQ_TORCH = re.compile(r"^Requires-Dist:\s*torch\s*\(?\s*==\s*([0-9][0-9.]*[0-9])")


def wheels(ctx: Context) -> list[Wheel]:
    base = ctx.folder(VENDOR) / WHEELS
    table = {}
    for line in (base / "SOURCES.md").read_text(encoding="utf-8").splitlines():
        m = _WHEEL_ROW.match(line)
        if m:
            table[m.group(1)] = (m.group(2), m.group(3))
    out = []
    for d in sorted(p for p in base.iterdir() if p.is_dir()):
        torch = ""
        for line in (d / "METADATA.txt").read_text(encoding="utf-8").splitlines():
            m = _REQ_TORCH.match(line)
            if m:
                torch = m.group(1)
        if not torch:
            raise ValueError(f"{d}/METADATA.txt names no torch version")
        whl, sha = table.get(d.name, ("", ""))
        out.append(Wheel(d.name, torch, whl, sha, d))
    return out


# -- provenance ------------------------------------------------------------------------------------------


def folder_source(ctx: Context, f: Folder, file: str, note: str = "") -> Source:
    row = f.files[file]
    return ctx.source(row["repo"], row["path_in_repo"], row["commit"], ctx.folder(VENDOR) / f.name / file,
                      note or row["ref"])


def wheel_source(ctx: Context, w: Wheel, file: str) -> Source:
    path = (f"torch_npu-{w.version}.dist-info/METADATA" if file == "METADATA.txt"
            else f"torch_npu/csrc/aten/{file}")
    note = f"inside {w.wheel or 'the torch-npu ' + w.version + ' wheel'}"
    if w.sha:
        note += f" (wheel sha256 {w.sha})"
    if file == "METADATA.txt":
        note += "; only its Version and Requires-Dist lines are staged"
    return ctx.source(PYPI, path, None, w.folder / file, note)


# -- one build: op lists + caveats -----------------------------------------------------------------------


def folder_ops(ctx: Context, f: Folder, torch: str) -> tuple[Ops, list[Source]]:
    base = ctx.folder(VENDOR) / f.name
    if f.era == "fork":
        return read_fork(base / "native_functions.yaml"), [folder_source(ctx, f, "native_functions.yaml")]
    ops = Ops()
    read_torch_npu(base / "npu_native_functions.yaml", ops)
    sources = [folder_source(ctx, f, "npu_native_functions.yaml")]
    if "op_plugin_functions.yaml" in f.files:
        read_op_plugin(base / "op_plugin_functions.yaml", line_key(torch), ops)
        sources.append(folder_source(ctx, f, "op_plugin_functions.yaml"))
    return ops.normalize(), sources


def opinfo_caveats(ctx: Context, f: Folder, torch: str) -> tuple[list[Caveat], list[Source]]:
    """The OpInfo skip list of op-plugin (base file, then the line's addendum) as api caveats."""
    base = ctx.folder(VENDOR) / f.name
    major, mi = minor(torch)
    files = []
    for file in ("unsupported_ops_info_base.yaml", "unsupported_ops_info.yaml"):
        row = f.files.get(file)
        if row is None:
            continue
        m = re.search(r"test_v(\d+)r(\d+)_ops/", row["path_in_repo"])
        if m and (int(m.group(1)), int(m.group(2))) != (major, mi):
            continue  # the addendum staged is another line's (master: v2r14)
        files.append(file)
    if not files:
        return [], []
    paths = [f"{OP_REPO} {f.files[x]['path_in_repo']}" for x in files]
    key = tuple(sha256(base / x) for x in files) + tuple(paths)
    if key not in _CAVEATS:
        merged: dict[str, dict[str, set[str]]] = {}
        origin: dict[str, list[str]] = {}
        for file, where in zip(files, paths, strict=True):
            for op, tests in (load_yaml(base / file) or {}).items():
                if op is None or not isinstance(tests, dict):
                    continue
                for test, dtypes in tests.items():
                    ds = {str(x) for x in (dtypes or []) if x}
                    if ds:
                        merged.setdefault(str(op), {}).setdefault(str(test), set()).update(ds)
                        if where not in origin.setdefault(str(op), []):
                            origin[str(op)].append(where)
        _CAVEATS[key] = [
            Caveat(op, sorted(set().union(*tests.values())),
                   "OpInfo tests skipped on NPU: " + " ".join(f"{t}[{','.join(sorted(ds))}]"
                                                             for t, ds in sorted(tests.items())),
                   " + ".join(origin[op]), api=True, kind="test_skip")
            for op, tests in sorted(merged.items())
        ]
    return list(_CAVEATS[key]), [folder_source(ctx, f, x) for x in files]


# -- facts per era ---------------------------------------------------------------------------------------


def dispatch_key(era: str, torch: str) -> str:
    if era == "fork":
        return "NPU"
    return "XLA" if minor(torch) < (2, 1) else "PrivateUse1"


def fallback(torch: str, ascend: str, era: str, *, switch: bool = False, wheel_only: bool = False) -> CpuFallback:
    if minor(torch) < (2, 1):
        if era == "fork":
            note = ("no generic CPU fallback is documented for the PyTorch 1.5.0 fork: an op without an NPU kernel "
                    "raises")
        elif era == "candidate":
            note = ("no generic CPU fallback: the boxed PrivateUse1 fallback exists only from the 2.1 line "
                    "(5.0.rc3) on, and these releases have no per-op tocpu list either")
        else:
            note = ("no generic CPU fallback (it exists only from the 2.1 line, 5.0.rc3, on); instead a per-op "
                    "`tocpu` list is compiled in (category cpu: generated wrappers copy inputs to the host, run the "
                    "CPU kernel, copy back; build option to_cpu, default on) and the `unsupported` list raises")
        src = cite("ascend-no-fallback-early" if era in ("fork", "candidate") else "ascend-tocpu")
        return CpuFallback(False, False, None, f"{note}. Source: {src}")
    autograd = ("AutogradPrivateUse1 falls through" if ascend[:1].isdigit() and vtuple(ascend) < (7,)
                else "AutogradPrivateUse1 has a 'not implemented' autograd fallback (from 7.0.0)")
    note = ("boxed fallback for all of PrivateUse1 (torch_npu/csrc/aten/VariableFallbackKernel.cpp) warns once per "
            "op ('CAUTION: The operator ... will fall back to run on the CPU') and runs at::native::cpu_fallback; "
            "it fails for ops without a CPU kernel (e.g. _scaled_dot_product_efficient_attention); the "
            f"SparsePrivateUse1 fallback raises; {autograd}. ")
    if switch:
        switch_text = ("TORCH_NPU_FALLBACK_CPU_DISABLE=1 disables it (default 0; added to master and the v2.x dev "
                       "branches on 2026-08-20, in no release tag)")
        return CpuFallback(True, True, switch_text,
                           note + f"Sources: {cite('ascend-cpu-fallback')}, {cite('ascend-fallback-switch')}")
    extra = ("No off switch in any release tag; whether this wheel carries TORCH_NPU_FALLBACK_CPU_DISABLE "
             "(master/dev branches from 2026-08-20) is not recorded. " if wheel_only else
             "No off switch in any release tag (TORCH_NPU_FALLBACK_CPU_DISABLE exists only on master/dev branches "
             "from 2026-08-20). ")
    return CpuFallback(True, True, None, note + extra + f"Sources: {cite('ascend-cpu-fallback')}, "
                                                      f"{cite('ascend-fallback-switch')}")


def accuracy(era: str) -> tuple[bool, str]:
    if era == "fork":
        return True, ("ops with npu_dispatch in the fork's native_functions.yaml (the fork's codegen registers "
                      "exactly those NPU kernels)")
    if era == "candidate":
        return False, ("upper bound: npu_native_functions.yaml `supported` was a candidate list of ~1,850 names; the "
                       "build silently dropped every name without an NPUNativeFunctions C++ kernel (printed as "
                       "'Unsupported Ops List'), so the registered set is smaller and not recoverable from data")
    if era == "torch_npu":
        return True, "torch_npu's npu_native_functions.yaml (a listed op without a kernel is a build error)"
    return True, ("torch_npu's npu_native_functions.yaml + op-plugin's op_plugin_functions.yaml as the build merges "
                  "them (unified file filtered with the line's vX.Y key)")


ERA_NOTE = {
    "fork": "torch_npu 3.0.0 for PyTorch 1.5.0 was a patched PyTorch fork (package torch, `import torch`); its "
            "NPU-only ops live in the aten namespace (torch.npu_*), listed under `custom` without namespace",
    "candidate": "candidate list (upper bound): the 1.8.1 / 3.0.x-for-1.11 yaml names almost every aten op",
    "torch_npu": "op list from torch_npu's npu_native_functions.yaml alone, with its tocpu/unsupported sections",
    "op-plugin": "op list from torch_npu's npu_native_functions.yaml + op-plugin's op_plugin_functions.yaml",
}


# -- releases --------------------------------------------------------------------------------------------


def ascend_rank(ascend: str) -> tuple[int, ...]:
    """Chronological rank of an Ascend release: rc < beta < final; master last."""
    if ascend == "master":
        return (10**6, 0, 0, 0, 0)
    m = re.match(r"(\d+)\.(\d+)\.(?:rc(\d+)|(\d+))(?:-beta\.(\d+))?$", ascend)
    if not m:
        raise ValueError(f"cannot rank Ascend release {ascend!r}")
    major, mi, rc, patch, beta = m.groups()
    if rc is not None:
        return (int(major), int(mi), 0, int(rc), 0)
    return (int(major), int(mi), 1, int(patch), -1 if beta is not None else 0)


def _n(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


def _diff(label: str, mine: set[str], other: set[str], what: str) -> str | None:
    plus, minus = sorted(mine - other), sorted(other - mine)
    if not plus and not minus:
        return None
    parts = []
    if plus:
        parts.append(f"{len(plus)} only in {label} (e.g. {', '.join(plus[:4])})")
    if minus:
        parts.append(f"{len(minus)} only in {what} (e.g. {', '.join(minus[:4])})")
    return "; ".join(parts)


def compare(wheel: Ops, tag: Ops, label: str, what: str) -> list[str]:
    """Differences between a wheel's lists and a tag-derived build, per category, with numbers."""
    out = []
    for cat, a, b in (("aten ops", wheel.aten, tag.aten), ("custom ops", wheel.custom, tag.custom),
                      ("quant ops", wheel.quant, tag.quant), ("autograd overrides", wheel.autograd, tag.autograd)):
        d = _diff(label, a, b, what)
        if d:
            out.append(f"{cat}: {label} {len(a)} vs {what} {len(b)}: {d}")
    return out


@dataclass
class Build:
    """One release before it is a Release: what it is built from."""

    name: str
    torch: str
    rank: tuple[int, ...]
    folder: Folder | None = None
    wheel: Wheel | None = None
    aliases: list[str] = field(default_factory=list)
    neighbour: Folder | None = None  # wheel without a tag: the newest tag folder of its line, compared with it
    same_line: list[Folder] = field(default_factory=list)  # wheel without a tag: every folder building its line


def builds(ctx: Context) -> list[Build]:
    fs = folders(ctx)
    ws = {w.version: w for w in wheels(ctx)}
    out = []
    used = set()
    for f in fs:
        rank = ascend_rank(f.ascend)
        if not f.multi:
            w = ws.get(f.package)
            if w is not None:
                used.add(w.version)
            out.append(Build(f.package, f.torch[0], rank + (0,), f, w, [f.tag]))
            continue
        short = f.tag if f.tag == "master" else f.ascend
        for t in f.torch:
            if ctx.torch_for(t) is None:
                continue  # no staged PyTorch table for this line (2.15): not produced
            aliases = []
            if f.tag != "master" and f.tag.endswith(f"pytorch{t}"):
                aliases.append(f.tag)
            out.append(Build(f"{short}+{minor(t)[0]}.{minor(t)[1]}", t, rank + (0,), f, None, aliases))
    for v, w in ws.items():
        if v in used:
            continue
        # after the newest released tag folder that builds the wheel's PyTorch line
        line = [f for f in fs if any(minor(t) == minor(w.torch) for t in f.torch)]
        near = [f for f in line if f.tag != "master"]
        nb = max(near, key=lambda f: ascend_rank(f.ascend)) if near else None
        rank = (ascend_rank(nb.ascend) if nb else (0, 0, 0, 0, 0)) + (1,)
        out.append(Build(v, w.torch, rank, None, w, [], nb, line))
    out.sort(key=lambda b: (b.rank, vtuple(b.torch), b.name))
    return out


def release(ctx: Context, b: Build, order: int) -> Release:
    f, w = b.folder, b.wheel
    notes: list[str] = []
    sources: list[Source] = []
    caveats: list[Caveat] = []
    era = f.era if f is not None else "op-plugin"
    tag_ops = None
    if f is not None:
        tag_ops, srcs = folder_ops(ctx, f, b.torch)
        sources += srcs
        notes.append(ERA_NOTE[era] + (f" (tag {f.tag}, Ascend release {f.ascend})" if f.ascend != "master"
                                      else " (branch master)"))
    if w is not None:
        ops = read_wheel(w.folder)
        sources += [wheel_source(ctx, w, x) for x in ("npu_native_functions_by_codegen.yaml",
                                                      "npu_native_functions.yaml", "METADATA.txt")]
        if tag_ops is not None:
            diffs = compare(ops, tag_ops, "the wheel", "the tag's files")
            notes.append("op lists from the PyPI wheel's npu_native_functions_by_codegen.yaml (the build's own "
                         "output) + npu_native_functions.yaml; "
                         + ("the tag's files give the same lists" if not diffs else "they differ from the tag's files"))
            notes += diffs
            if minor(w.torch) != minor(b.torch):
                notes.append(f"the wheel pins torch {w.torch}, the tag names PyTorch {b.torch}")
        else:
            notes.append("PyPI wheel whose version no staged tag folder has (patch and later tags were not copied, "
                         f"{cite('ascend-pypi-wheels')}): op lists from its npu_native_functions_by_codegen.yaml + "
                         "npu_native_functions.yaml; no OpInfo skip list is staged for it")
            if b.neighbour is not None:
                nb_ops, _ = folder_ops(ctx, b.neighbour, b.torch)
                diffs = compare(ops, nb_ops, "the wheel", f"tag {b.neighbour.tag} filtered as {line_key(b.torch)}")
                notes += diffs or [f"same lists as tag {b.neighbour.tag} filtered as {line_key(b.torch)}"]
            same = [f.tag for f in b.same_line if f is not b.neighbour
                    and not compare(ops, folder_ops(ctx, f, b.torch)[0], "", "")]
            if same:
                notes.append(f"same aten, custom, quant and autograd lists as tag {', '.join(same)} "
                             f"(filtered as {line_key(b.torch)})")
    else:
        assert tag_ops is not None
        ops = tag_ops
    if f is not None and f.multi:
        lines = ", ".join(f.torch)
        dev = "development snapshot of the master branch" if f.tag == "master" else \
            f"pre-release tag {f.tag}"
        skipped = [t for t in f.torch if ctx.torch_for(t) is None]
        notes.append(f"{dev}: one tree builds PyTorch {lines}; this is its {minor(b.torch)[0]}.{minor(b.torch)[1]} "
                     f"build (op-plugin filtered with {line_key(b.torch)})"
                     + (f"; the {', '.join(skipped)} build is not produced (no staged PyTorch table)"
                        if skipped else ""))
    exact, acc = accuracy(era)
    cats = ops.categories(None if era == "fork" else "npu")
    if ops.autograd_only:
        notes.append(f"{_n(len(ops.autograd_only), 'aten op')} registered only as torch_npu autograd overrides (the "
                     f"override's forward runs NPU code; counted as native): "
                     f"{', '.join(sorted(ops.autograd_only)[:6])}{' ...' if len(ops.autograd_only) > 6 else ''}")
    sparse_only = ops.sparse - ops.native
    if sparse_only:
        notes.append(f"{_n(len(sparse_only), 'op')} with only a SparsePrivateUse1 kernel (category sparse, "
                     "not native): " + ", ".join(sorted(sparse_only)))
    table = ctx.torch_for(b.torch)
    if table is not None:
        unknown = sorted({n for cat, ns in cats.items() if cat != "custom" for n in ns if table.get(n) is None})
        if unknown:
            notes.append(f"{_n(len(unknown), 'listed name')} not in PyTorch {table.version}'s native_functions.yaml "
                         f"(stale entries; kept so the counts match the files): {', '.join(unknown)}")
    both = ops.native & ops.cpu
    if both:
        notes.append(f"listed both with an NPU kernel and in tocpu (so in categories native and cpu; which "
                     f"registration wins is not in the data): {', '.join(sorted(both))}")
    if ops is tag_ops and era == "op-plugin":
        notes.append(f"{len(ops.owned)} torch_npu-owned + {len(ops.plugin)} op-plugin official aten ops "
                     f"({len(ops.aten)} distinct aten ops registered)")
    if f is not None and minor(b.torch) >= (2, 1):
        cv, srcs = opinfo_caveats(ctx, f, b.torch)
        caveats += cv
        sources += srcs
        if cv:
            notes.append(f"{len(cv)} api caveats from op-plugin's OpInfo skip list: keys are PyTorch OpInfo names "
                         "(not aten ops), each with the test_ops.py tests skipped on NPU and their dtypes")
    is_master = f is not None and f.tag == "master"
    fb = fallback(b.torch, f.ascend if f is not None else "", era, switch=is_master,
                  wheel_only=f is None)
    fork = era == "fork"
    return Release(
        vendor=VENDOR, name=b.name, torch=b.torch, device_type=DEVICE, dispatch_key=dispatch_key(era, b.torch),
        package="torch" if fork else PACKAGE, import_name=None if fork else _ID.import_name, aliases=b.aliases,
        vendor_release=f.ascend if f is not None and f.ascend != "master" else None, order=order,
        prerelease=f is not None and f.multi, exact=exact,
        accuracy=acc, fallback=fb, ops=cats, caveats=caveats, sources=sources, notes=notes,
    )


def releases(ctx: Context) -> list[Release]:
    out = [release(ctx, b, order) for order, b in enumerate(builds(ctx), start=1)]
    # "master" names the line its requirements pin (torch 2.14 nightly)
    for r in out:
        if r.name == "master+2.14":
            r.aliases.append("master")
    return out
