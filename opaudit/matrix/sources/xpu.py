"""Intel GPU (device ``xpu``, key XPU, built into torch): one release per PyTorch line, from torch-xpu-ops.

Rules:
- one release per torch-xpu-ops release branch (folder ``release-X.Y``, a row of its SOURCES.md), named by the
  PyTorch line it ships in ("2.6", alias the branch "release/2.6"); ``torch`` is the staged PyTorch table of that
  line (``ctx.torch_for``), whose XPU keys are read too. Ordered by PyTorch line.
- 2.4 and 2.5: ``xpu_functions.yaml`` ``supported:`` (torchgen external-backend list, built then): each listed
  overload -> ``native`` as written, no structured_delegate expansion. From 2.6 the file is frozen and not built:
  read only for a note.
- 2.6 to 2.13: torch-xpu-ops' ``native_functions.yaml``: an overload is ``native`` if its entry has an ``XPU`` key
  or its ``structured_delegate`` has one; ``SparseXPU`` / ``SparseCsrXPU`` keys as written -> ``sparse``
  (torchgen does not pass sparse kernels through structured_delegate: they are no structured dispatch keys,
  fact structured-dispatch-keys);
  ``NestedTensorXPU`` -> no category (counted in the notes); CPU/CUDA/MPS keys copied along mean nothing.
- every line: UNION the XPU kernels of PyTorch core's native_functions.yaml (directly or through
  structured_delegate; SparseXPU / SparseCsrXPU as written -> ``sparse``).
- from 2.14 (pytorch PR 181233 moved the XPU entries into core, torch-xpu-ops dropped yaml/): PyTorch's table
  alone, one release per staged PyTorch line from 2.14 on.
- ``derived_cpu_fallback_ops.txt`` (the ``fallback_list`` of XPUFallback.template, derived) -> ``forced_cpu``:
  registered for XPU to the boxed CPU fallback, always. The generic CPU fallback exists, off by default
  (PYTORCH_ENABLE_XPU_FALLBACK=1).
- ``coverage_db/curated/xpu_torchvision_ops.tsv`` (the ``torchvision_ops_dispatching_table_`` map of the XPU
  fallback, derived, per release branch, 2.14 included): torchvision ops that torch-xpu-ops registers XPU
  kernels for -> ``custom``; those the map sends to the CPU fallback (``cpu_fallback`` true) -> ``forced_cpu``
  (as ``torchvision::name``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opaudit.matrix.provenance import cite
from opaudit.matrix.release import CpuFallback, Release, Source
from opaudit.matrix.sources import Context
from opaudit.matrix.sources.pytorch import PATH as CORE_PATH
from opaudit.matrix.sources.pytorch import REPO as CORE_REPO
from opaudit.matrix.sources.pytorch import provenance
from opaudit.matrix.torchops import TorchOps, minor, parse_native_functions
from opaudit.matrix.vendors import vendor

VENDOR = "xpu"
REPO = "intel/torch-xpu-ops"
_ID = vendor(VENDOR)  # coverage_db/curated/vendors.toml
DEVICE, KEY = _ID.device_type, _ID.dispatch_key
SPARSE_KEYS = ("SparseXPU", "SparseCsrXPU")
NESTED_KEY = "NestedTensorXPU"
XPU_FUNCTIONS = "yaml/xpu_functions.yaml"
NATIVE_YAML = "yaml/native/native_functions.yaml"
FALLBACK_FILE = "derived_cpu_fallback_ops.txt"
TORCHVISION_FILE = "xpu_torchvision_ops.tsv"  # coverage_db/curated/
LAST_SUPPORTED_ERA = (2, 5)  # xpu_functions.yaml `supported:` is what is built up to this line
CORE_ONLY_FROM = (2, 14)  # XPU dispatch entries live in PyTorch's own native_functions.yaml from this line on

_ROW = re.compile(r"^\|\s*(release-[\d.]+)\s*\|\s*(release/[\d.]+)\s*\|\s*([0-9a-f]{40})\s*\|"
                  r"\s*(\d{4}-\d\d-\d\d)\s*\|\s*(\d+\.\d+)\s*\|")
_FUNC = re.compile(r"(?m)^- func:")
SWITCH = ("PYTORCH_ENABLE_XPU_FALLBACK=1 turns it on; PYTORCH_DEBUG_XPU_FALLBACK=1 warns on each op that falls "
          "back; PYTORCH_XPU_FALLBACK_OP=op1,op2 (name.overload) sends the listed ops to the CPU as well")


@dataclass
class Branch:
    folder: str  # "release-2.6"
    branch: str  # "release/2.6"
    commit: str
    date: str
    line: str  # the PyTorch line it ships in: "2.6"


def branches(ctx: Context) -> list[Branch]:
    """The rows of the table of the staged folder's SOURCES.md, oldest PyTorch line first."""
    out = []
    for line in (ctx.folder(VENDOR) / "SOURCES.md").read_text(encoding="utf-8").splitlines():
        m = _ROW.match(line)
        if m:
            out.append(Branch(*m.groups()))
    return sorted(out, key=lambda b: minor(b.line))


def fallback_template(line: str) -> str:
    """Where the fallback_list lives in torch-xpu-ops on that branch."""
    return "src/aten/XPUFallback.template" if minor(line) <= (2, 4) else "src/ATen/native/xpu/XPUFallback.template"


def fallback(line: str, listed: int | None) -> CpuFallback:
    where = fallback_template(line)
    always = (f"its fallback_list ({listed} overloads, category forced_cpu) runs on the CPU with host copies "
              "whether or not the switch is set" if listed is not None else
              "its always-on fallback_list is not staged for this line (forced_cpu is not listed)")
    return CpuFallback(
        exists=True, default_on=False, switch=SWITCH,
        note=f"boxed CPU fallback of torch-xpu-ops ({where}), off by default: an op without an XPU kernel raises "
             f"NotImplementedError; {always}. Source: {cite('xpu-cpu-fallback')}")


@dataclass
class VisionOps:
    """The torchvision ops of one line's map (coverage_db/curated/xpu_torchvision_ops.tsv)."""

    branch: str
    commit: str
    path: str
    xpu: list[str]
    cpu: list[str]


def torchvision_ops(ctx: Context) -> dict[str, VisionOps]:
    """PyTorch line -> the torchvision ops torch-xpu-ops registers for XPU on that line's branch."""
    path = ctx.curated(TORCHVISION_FILE)
    out: dict[str, VisionOps] = {}
    for row in path.read_text(encoding="utf-8").splitlines():
        if not row or row.startswith(("#", "line\t")):
            continue
        line, branch, commit, where, op, cpu = row.split("\t")
        v = out.setdefault(line, VisionOps(branch, commit, where, [], []))
        if op != "-":
            (v.cpu if cpu == "true" else v.xpu).append(op)
    return out


def _load(path: Path) -> Any:
    import yaml

    with open(path, encoding="utf-8") as f:
        return yaml.load(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def read_supported(path: Path) -> list[str]:
    """The ``supported:`` entries of an external-backend yaml, as listed (duplicates kept)."""
    return [str(s).strip() for s in (_load(path) or {}).get("supported") or []]


def read_fallback_list(path: Path) -> list[str]:
    lines = (line.strip() for line in path.read_text(encoding="utf-8").splitlines())
    return [s for s in lines if s and not s.startswith("#")]


def direct(table: TorchOps, key: str) -> set[str]:
    """Ops whose own entry names ``key`` (no structured_delegate expansion)."""
    return {n for n, op in table.ops.items() if key in op.keys}


def _sparse_note(table: TorchOps, origin: str) -> str:
    counts = ", ".join(f"{k} {len(direct(table, k))}" for k in SPARSE_KEYS)
    through = {k: sorted(table.with_kernel(k) - direct(table, k)) for k in SPARSE_KEYS}
    return (f"sparse: {counts} overloads as written in {origin}"
            + "".join(f"; {k} + {len(v)} if structured_delegate were followed ({_fmt(v)}): torchgen does not, {k} "
                      f"is no structured dispatch key ({cite('structured-dispatch-keys')})"
                      for k, v in through.items() if v))


def _share(native: set[str], torch_ops: TorchOps) -> str:
    cuda = torch_ops.with_kernel("CUDA")
    hit = len(cuda & native)
    return (f"native reaches {hit} of the {len(cuda)} CUDA-kernel ops of PyTorch {torch_ops.version} "
            f"({100 * hit / len(cuda):.1f}%), counted as in {cite('cuda-kernel-ops')}")


def _fmt(names: set[str] | list[str], limit: int = 12) -> str:
    s = sorted(names)
    return ", ".join(s[:limit]) + (f" ... ({len(s)} in all)" if len(s) > limit else "")


def release(ctx: Context, line: str, b: Branch | None, order: int) -> Release:
    core = ctx.torch_for(line)
    if core is None:
        raise ValueError(f"{VENDOR} {line}: no PyTorch {line} op table staged")
    prov = provenance(ctx).get(f"v{core.version}")
    sources: list[Source] = []
    notes: list[str] = []
    ops: dict[str, set[str]] = {c: set() for c in ("native", "sparse", "forced_cpu")}
    core_native = core.with_kernel(KEY)
    core_sparse = set().union(*(direct(core, k) for k in SPARSE_KEYS))
    core_nested = direct(core, NESTED_KEY)
    sources.append(ctx.source(
        CORE_REPO, CORE_PATH, prov[0] if prov else None,
        ctx.folder("pytorch") / f"v{core.version}" / "native_functions.yaml",
        "PyTorch core's XPU / SparseXPU / SparseCsrXPU keys" + (f" (build-time copy shipped in {prov[1]})"
                                                               if prov else "")))
    listed: int | None = None
    exact = True
    if b is not None:
        folder = ctx.folder(VENDOR) / b.folder

        def src(path_in_repo: str, file: str, note: str = "") -> Path:
            path = folder / file
            sources.append(ctx.source(REPO, path_in_repo, b.commit, path, note))
            return path

        notes.append(f"torch-xpu-ops branch {b.branch}, head commit {b.commit[:7]} of {b.date}; PyTorch {line} "
                     "clones torch-xpu-ops at the commit pinned in third_party/xpu.txt, on (or near) this branch, "
                     "which may be a little older")
        supported = read_supported(src(XPU_FUNCTIONS, "xpu_functions.yaml",
                                       "external-backend list (supported:); built up to 2.5, frozen and not "
                                       "built from 2.6 on"))
        if minor(line) <= LAST_SUPPORTED_ERA:
            own = set(supported)
            dupes = sorted({n for n in supported if supported.count(n) > 1})
            notes.append(f"xpu_functions.yaml supported: {len(supported)} entries, {len(own)} distinct overloads"
                         + (f" (listed twice: {', '.join(dupes)})" if dupes else "")
                         + "; each overload listed on its own, no structured_delegate expansion")
            exact = False
            accuracy = ("a lower bound: xpu_functions.yaml supported: (torch-xpu-ops) plus the XPU keys of "
                        "PyTorch's yaml (none yet); PyTorch 2.4/2.5 registered its oneDNN XPU kernels by hand in "
                        "C++ (TORCH_LIBRARY_IMPL(aten, XPU) in aten/src/ATen/native/mkldnn/xpu: the mm / addmm / "
                        "bmm / baddbmm / addmv family that 2.6 moved into yaml XPU keys, convolution_overrideable), "
                        "which no staged file lists")
            notes.append("not listed (registered by hand in C++ by PyTorch core, no staged file names them): the "
                         "oneDNN matmul family (mm, addmm, bmm, baddbmm, addmv and their out / in-place forms) "
                         "and convolution_overrideable / convolution_backward_overrideable")
        else:
            path = src(NATIVE_YAML, "native_functions.yaml",
                       "filtered copy of PyTorch's yaml with the XPU dispatch keys: what is built for 2.6 to 2.13")
            table = parse_native_functions(path, line)
            entries = len(_FUNC.findall(path.read_text(encoding="utf-8")))
            own_direct = direct(table, KEY)
            own = table.with_kernel(KEY)
            sparse = set().union(*(direct(table, k) for k in SPARSE_KEYS))
            nested = direct(table, NESTED_KEY)
            ops["sparse"] |= sparse
            core_nested |= nested
            notes.append(f"torch-xpu-ops native_functions.yaml: {entries} entries, "
                         f"{len(own_direct)} with an XPU key, {len(own)} counting structured_delegate")
            notes.append(f"xpu_functions.yaml still lists {len(supported)} entries but is not built from 2.6 on "
                         "(commented out of cmake/Codegen.cmake): not used")
            notes.append(_sparse_note(table, "torch-xpu-ops' yaml"))
            accuracy = ("the XPU keys of torch-xpu-ops' native_functions.yaml and of PyTorch's, directly or through "
                        "structured_delegate; kernels registered by hand in C++ (TORCH_LIBRARY_IMPL) are not in "
                        "these files")
            notes.append("not listed (registered by hand in C++ by PyTorch core, in no yaml): "
                         "convolution_overrideable / convolution_backward_overrideable "
                         "(TORCH_LIBRARY_IMPL(aten, XPU) in pytorch's aten/src/ATen/native/mkldnn/xpu/Conv.cpp)")
        ops["native"] = own | core_native
        notes.append(f"native = {len(own)} of torch-xpu-ops | {len(core_native)} XPU keys of PyTorch "
                     f"{core.version}'s own yaml = {len(ops['native'])}")
        fl = read_fallback_list(src(fallback_template(line), FALLBACK_FILE,
                                    "DERIVED, not an upstream file: the strings of the fallback_list array of "
                                    "XPUFallback.template at the same commit"))
        listed = len(set(fl))
        ops["forced_cpu"] = set(fl)
        both = sorted(ops["forced_cpu"] & ops["native"])
        if both:
            notes.append(f"in the fallback_list and with an XPU kernel: {', '.join(both)}")
        aliases = [b.branch]
    else:
        ops["native"] = core_native
        accuracy = ("the XPU keys of PyTorch's native_functions.yaml, directly or through structured_delegate "
                    "(the XPU registrations moved into core with pytorch PR 181233); kernels registered by hand "
                    "in C++ (TORCH_LIBRARY_IMPL) are not in this file")
        notes.append(f"PyTorch {line}: torch-xpu-ops dropped its yaml/ folder (commit 08c2910, 'Remove the "
                     "obsolete folder yaml/') after pytorch PR 181233 moved the XPU dispatch entries into "
                     "PyTorch's native_functions.yaml")
        notes.append("the always-on fallback_list (XPUFallback.template) of this line is not staged: ops it "
                     "sends to the CPU are not in forced_cpu")
        notes.append("not listed (registered by hand in C++, in no yaml): convolution_overrideable / "
                     "convolution_backward_overrideable (TORCH_LIBRARY_IMPL(aten, XPU) in pytorch's "
                     "aten/src/ATen/native/mkldnn/xpu/Conv.cpp)")
        aliases = [f"release/{line}"]
    ops["sparse"] |= core_sparse
    if core_sparse:
        notes.append(_sparse_note(core, f"PyTorch {core.version}'s yaml"))
    if core_nested:
        notes.append(f"NestedTensorXPU kernels: {len(core_nested)} (no category for nested tensors; not listed)")
    unknown = sorted(n for cat in ("native", "forced_cpu") for n in ops[cat] if core.get(n) is None)
    if unknown:
        for cat in ("native", "forced_cpu"):
            ops[cat] -= set(unknown)
        notes.append(f"{len(unknown)} names are no op of PyTorch {core.version}, left out: {_fmt(unknown)}")
    vision = torchvision_ops(ctx).get(line)
    if vision is not None:
        sources.append(ctx.source(REPO, vision.path, vision.commit, ctx.curated(TORCHVISION_FILE),
                                  "DERIVED, not an upstream file: the torchvision_ops_dispatching_table_ map of the "
                                  f"XPU fallback on {vision.branch}, registered lazily for the XPU key"))
        ops["custom"] = set(vision.xpu)
        ops["forced_cpu"] |= set(vision.cpu)
        notes.append(f"torchvision ops with XPU kernels of torch-xpu-ops ({vision.branch}): "
                     + (_fmt(vision.xpu) if vision.xpu else "none")
                     + (f"; sent to the CPU fallback by the same map: {_fmt(vision.cpu)}" if vision.cpu else ""))
    else:
        notes.append("the torchvision ops torch-xpu-ops registers on this line are not staged")
    notes.append(_share(ops["native"], core))
    if core.version != f"{line}.0":
        notes.append(f"ships in the PyTorch {line} releases; paired with {core.version}, the staged release of that "
                     "line")
    return Release(
        vendor=VENDOR, name=line, torch=core.version, device_type=DEVICE, dispatch_key=KEY, package=_ID.package,
        import_name=_ID.import_name, aliases=aliases, vendor_release=None, order=order, exact=exact, accuracy=accuracy,
        fallback=fallback(line, listed), ops={k: sorted(v) for k, v in ops.items() if v}, caveats=[],
        sources=sources, notes=notes,
    )


def releases(ctx: Context) -> list[Release]:
    lines: dict[str, Branch | None] = {b.line: b for b in branches(ctx)}
    for version in ctx.torch:
        x, y = minor(version)
        if (x, y) >= CORE_ONLY_FROM:
            lines.setdefault(f"{x}.{y}", None)
    ordered = sorted(lines, key=minor)
    return [release(ctx, line, lines[line], order) for order, line in enumerate(ordered, start=1)]
