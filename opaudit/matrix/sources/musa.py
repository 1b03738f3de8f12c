"""Moore Threads torch_musa (device ``musa``, key PrivateUse1): one release per staged tag of torch_musa.

Rules:
- tag, commit, date and target PyTorch of each folder come from the table of the staged SOURCES.md; releases are
  ordered by tag date.
- v1.0.0 / v1.1.0: ``derived_aten_privateuse1_ops.txt`` (a regex extraction of ``m.impl("...")`` calls in
  TORCH_LIBRARY_IMPL(aten, PrivateUse1) blocks, not an upstream file): every name -> ``native``, except
  names that are no op of that PyTorch (they register nothing; named in the notes). Marked approximate.
- later tags, ``musa_functions.yaml`` (torch_musa's torchgen-based codegen): an entry without ``dispatch``
  reuses PyTorch's structured kernel ("Legacy") -> ``native``; ``dispatch`` keys decide otherwise:
  PrivateUse1 -> ``native``, QuantizedPrivateUse1 -> ``quant``, SparsePrivateUse1 / SparseCsrPrivateUse1 ->
  ``sparse``, NestedTensorPrivateUse1 -> no category (notes). An entry with only non-PrivateUse1 keys whose
  PyTorch op has a ``structured_delegate`` that is native still gets the PrivateUse1 kernel through its
  structured group (the codegen keeps the delegate), e.g. ``cat`` -> ``cat.out``. Each overload is listed on
  its own: no other structured_delegate expansion.
- MUSA-only aten ops (defined by torch_patches/aten_src_ATen_native_native_functions.yaml.patch, absent from
  stock PyTorch) are kept in ``native``: they exist in torch_musa's patched torch.
- ``ops_list.md`` = the yaml list + hand-registered C++ ops: ``(quantized op)`` aten names -> ``quant``,
  ``quantized::`` names and ``(torchvision op)`` names -> ``custom``.
- no generic CPU fallback (fact musa-no-cpu-fallback).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opaudit.matrix.provenance import cite
from opaudit.matrix.release import CpuFallback, Release, Source
from opaudit.matrix.sources import Context
from opaudit.matrix.torchops import TorchOps
from opaudit.matrix.vendors import vendor

VENDOR = "musa"
REPO = "MooreThreads/torch_musa"
_ID = vendor(VENDOR)  # coverage_db/curated/vendors.toml
DEVICE, KEY, PACKAGE = _ID.device_type, _ID.dispatch_key, _ID.package
YAML_PATH = "torch_musa/csrc/aten/ops/musa_functions.yaml"
OPS_LIST_PATH = "tools/ops_scanner/ops_list.md"
PATCH_PATH = "torch_patches/aten_src_ATen_native_native_functions.yaml.patch"
PATCH = "aten_src_ATen_native_native_functions.yaml.patch"
DERIVED = "derived_aten_privateuse1_ops.txt"

# dispatch key of musa_functions.yaml -> op category
CATEGORY = {
    "PrivateUse1": "native",
    "QuantizedPrivateUse1": "quant",
    "SparsePrivateUse1": "sparse",
    "SparseCsrPrivateUse1": "sparse",
}

FALLBACK = CpuFallback(
    exists=False,
    note="none generic: torch_musa registers only Autograd/Autocast fallthroughs "
         "(torch_musa/csrc/core/VariableFallbackKernel_musa.cpp); an op without a musa kernel raises \"Could not "
         "run 'aten::X' with arguments from the 'musa' backend\" (torch_musa#72). Related environment variables: "
         "TORCH_USE_MUSA_DOUBLE_CAST (casts float64 to float32), TORCH_MUSA_OP_DEBUG* (op logging), "
         f"PYTORCH_MUSA_ALLOC_CONF, MUSA_LAUNCH_BLOCKING. Source: {cite('musa-no-cpu-fallback')}",
)

_ROW = re.compile(r"^\|\s*(v[\w.-]+)\s*\|\s*(v[\w.-]+)\s*\|\s*([0-9a-f]{40})\s*\|"
                  r"\s*(\d{4}-\d\d-\d\d)\s*\|\s*([\d.]+)\s*\|")
_LIST_ITEM = re.compile(r"^- `([^`]+)`(?: \((quantized|torchvision) op\))?\s*$")
_TOTAL = re.compile(r"^Total amount of ops:\s*(\d+)")
_PATCH_FUNC = re.compile(r"^\+- func:\s*([A-Za-z0-9_.]+)\(")


@dataclass
class Tag:
    folder: str
    tag: str
    commit: str
    date: str
    torch: str


def tags(ctx: Context) -> list[Tag]:
    """The rows of the table in the staged SOURCES.md, oldest first."""
    out = []
    for line in (ctx.folder(VENDOR) / "SOURCES.md").read_text(encoding="utf-8").splitlines():
        m = _ROW.match(line)
        if m:
            out.append(Tag(*m.groups()))
    return sorted(out, key=lambda t: (t.date, t.tag))


def _load(path: Path) -> Any:
    import yaml

    with open(path, encoding="utf-8") as f:
        return yaml.load(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


@dataclass
class MusaFunctions:
    """What one musa_functions.yaml lists: name -> dispatch keys (empty: no dispatch, the Legacy strategy)."""

    keys: dict[str, set[str]] = field(default_factory=dict)
    entries: int = 0

    @property
    def with_dispatch(self) -> int:
        return sum(1 for k in self.keys.values() if k)


def read_musa_functions(path: Path) -> MusaFunctions:
    out = MusaFunctions()
    for e in _load(path) or []:
        out.entries += 1
        keys: set[str] = set()
        for k in (e.get("dispatch") or {}):
            keys.update(p.strip() for p in str(k).split(",") if p.strip())
        out.keys.setdefault(str(e["func"]).strip(), set()).update(keys)
    return out


@dataclass
class OpsList:
    total: int  # the "Total amount of ops" line
    ops: list[str] = field(default_factory=list)  # plain entries (the yaml list)
    quantized: list[str] = field(default_factory=list)
    torchvision: list[str] = field(default_factory=list)


def read_ops_list(path: Path) -> OpsList:
    lines = path.read_text(encoding="utf-8").splitlines()
    m = _TOTAL.match(lines[0]) if lines else None
    if m is None:
        raise ValueError(f"{path}: first line is not 'Total amount of ops: N'")
    out = OpsList(int(m.group(1)))
    for line in lines[1:]:
        item = _LIST_ITEM.match(line.strip())
        if item is None:
            if line.strip():
                raise ValueError(f"{path}: cannot read {line!r}")
            continue
        name, kind = item.groups()
        {"quantized": out.quantized, "torchvision": out.torchvision}.get(kind or "", out.ops).append(name)
    return out


def patch_ops(path: Path) -> list[str]:
    """Names of the aten ops the native_functions.yaml patch adds."""
    return [m.group(1) for line in path.read_text(encoding="utf-8").splitlines() if (m := _PATCH_FUNC.match(line))]


def read_derived(path: Path) -> list[str]:
    lines = (line.strip() for line in path.read_text(encoding="utf-8").splitlines())
    return [s for s in lines if s and not s.startswith("#")]


def _share(native: set[str], torch_ops: TorchOps) -> str:
    cuda = torch_ops.with_kernel("CUDA")
    hit = len(cuda & native)
    return (f"native reaches {hit} of the {len(cuda)} CUDA-kernel ops of PyTorch {torch_ops.version} "
            f"({100 * hit / len(cuda):.1f}%)")


def release(ctx: Context, t: Tag, order: int) -> Release:
    folder = ctx.folder(VENDOR) / t.folder
    torch_ops = ctx.torch_for(t.torch)
    if torch_ops is None:
        raise ValueError(f"{VENDOR}/{t.folder}: no PyTorch {t.torch} op table staged")
    sources: list[Source] = []
    notes: list[str] = [f"tag {t.tag} (commit {t.commit[:7]} of {t.date}) builds a patched PyTorch {t.torch} "
                        "(PYTORCH_TAG in build.sh)"]
    ops: dict[str, set[str]] = {c: set() for c in ("native", "quant", "sparse", "custom")}

    def src(path_in_repo: str, file: str, note: str = "") -> Path:
        path = folder / file
        sources.append(ctx.source(REPO, path_in_repo, t.commit, path, note))
        return path

    if (folder / DERIVED).is_file():
        names = read_derived(src("torch_musa/csrc/", DERIVED,
                                 "DERIVED, not an upstream file: names of m.impl(\"...\") calls in "
                                 "TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) blocks under torch_musa/csrc/"))
        stale = sorted(n for n in set(names) if torch_ops.get(n) is None)
        ops["native"] = set(names) - set(stale)
        exact = False
        accuracy = ("regex extraction of m.impl(\"...\") registrations from the tag's C++ sources (this release has "
                    "no musa_functions.yaml): approximate, registrations written another way are not caught")
        notes.append(f"{len(set(names))} overloads extracted from C++ (no musa_functions.yaml before v1.2.1)")
        if stale:
            notes.append(f"{len(stale)} extracted names are no op of PyTorch {torch_ops.version} and this tag ships "
                         f"no native_functions patch in the staged data: {', '.join(stale)}; left out of native")
    else:
        mf = read_musa_functions(src(YAML_PATH, "musa_functions.yaml", "codegen list: aten overloads with a musa "
                                                                       "kernel, dispatch keys per overload"))
        ol = read_ops_list(src(OPS_LIST_PATH, "ops_list.md", "musa_functions.yaml + hand-registered quantized and "
                                                            "torchvision ops (tools/ops_scanner/auto_scan_ops.py)"))
        added = patch_ops(src(PATCH_PATH, PATCH, "the MUSA-only aten ops torch_musa adds to PyTorch"))
        exact = True
        accuracy = ("musa_functions.yaml: overloads registered for PrivateUse1 (no dispatch, a PrivateUse1 "
                    "dispatch, or a native structured_delegate); aten kernels registered by hand in C++ outside "
                    "the yaml are not listed")
        nested: list[str] = []
        unknown: list[str] = []
        for name, keys in mf.keys.items():
            if torch_ops.get(name) is None and name not in added:
                unknown.append(name)
                continue
            if not keys:
                ops["native"].add(name)
            for k in keys:
                if k in CATEGORY:
                    ops[CATEGORY[k]].add(name)
                elif k == "NestedTensorPrivateUse1":
                    nested.append(name)
        via_delegate = []
        for name in mf.keys:
            op = torch_ops.get(name)
            if name not in ops["native"] and op is not None and op.delegate in ops["native"]:
                ops["native"].add(name)
                via_delegate.append(name)
        for name in ol.quantized:
            if "::" in name and not name.startswith("aten::"):
                ops["custom"].add(name)
            else:
                ops["quant"].add(name.removeprefix("aten::"))
        ops["custom"].update(ol.torchvision)
        musa_only = sorted(n for n in mf.keys if torch_ops.get(n) is None and n in added)
        no_p1 = sorted(set(mf.keys) - ops["native"] - set(unknown))
        notes.append(f"musa_functions.yaml: {mf.entries} overloads, {mf.with_dispatch} with dispatch (MUSA "
                     f"implementation), {mf.entries - mf.with_dispatch} without (PyTorch's structured kernel, ported "
                     "CUDA code in its DispatchStub)")
        notes.append(f"ops_list.md: total {ol.total} = {len(ol.ops)} yaml overloads + {len(ol.quantized)} quantized "
                     f"+ {len(ol.torchvision)} torchvision ops registered by hand in C++")
        extra = sorted(set(ol.ops) ^ set(mf.keys))
        if extra or ol.total != len(ol.ops) + len(ol.quantized) + len(ol.torchvision):
            notes.append(f"ops_list.md and musa_functions.yaml disagree: {len(ol.ops)} plain entries vs "
                         f"{len(mf.keys)} yaml overloads, differing names {', '.join(extra[:10])}")
        if musa_only:
            notes.append(f"{len(musa_only)} MUSA-only aten ops (added to PyTorch's native_functions.yaml by "
                         f"torch_musa's patch, absent from stock PyTorch {t.torch}) are kept in native: "
                         f"{', '.join(musa_only)}")
        if via_delegate:
            notes.append(f"native through the structured group (their own entry names other keys only): "
                         f"{', '.join(sorted(via_delegate))}")
        if no_p1:
            notes.append(f"{len(no_p1)} listed overloads have no PrivateUse1 kernel, only quantized / sparse / "
                         f"nested keys: {', '.join(no_p1)}")
        if nested:
            notes.append("NestedTensorPrivateUse1 kernels (no category for nested tensors): "
                         + ", ".join(sorted(nested)))
        if unknown:
            notes.append(f"{len(unknown)} listed names are neither PyTorch {torch_ops.version} ops nor added by the "
                         f"patch, left out: {', '.join(sorted(unknown))}")
    notes.append(_share(ops["native"], torch_ops))
    if torch_ops.version != t.torch:
        notes.append(f"op names checked against PyTorch {torch_ops.version}'s table (nearest staged release)")
    if _vt(t.tag) >= (2, 1, 0):
        notes.append("setup.py also declares a torch.backends entry point (torch_musa = torch_musa:_autoload): "
                     "PyTorch's device autoload imports torch_musa")
    if t.tag == "v2.7.1":
        notes.append("torch_musa/__init__.py raises on a torch older than 2.7.1")
    name = t.tag.removeprefix("v")
    return Release(
        vendor=VENDOR, name=name, torch=t.torch, device_type=DEVICE, dispatch_key=KEY, package=PACKAGE,
        import_name=_ID.import_name, aliases=[t.tag], vendor_release=None, order=order, exact=exact,
        accuracy=accuracy, fallback=FALLBACK, ops={k: sorted(v) for k, v in ops.items() if v}, caveats=[],
        sources=sources, notes=notes,
    )


def _vt(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v.split("-")[0]))


def releases(ctx: Context) -> list[Release]:
    return [release(ctx, t, order) for order, t in enumerate(tags(ctx), start=1)]
