"""PyTorch/XLA (device ``xla``, key XLA, ``import torch_xla``): one release per staged folder of pytorch/xla.

Rules:
- ref, commit, date, path and target PyTorch of each folder come from the table of the staged SOURCES.md;
  releases are ordered by date. A tag vX.Y.Z is the torch_xla package X.Y.Z (name "X.Y.Z", aliases the tag and "X.Y"),
  built against PyTorch X.Y.Z, except v2.8.1: PyTorch has no 2.8.1 release, so it pairs with 2.8.0. Branch
  r2.10 (no tag) is named "r2.10" for PyTorch 2.10.0; master is named "master" (alias "nightly"): it builds
  against a PyTorch nightly, paired here with the newest staged PyTorch table. Both are ``prerelease``: no
  torch_xla package was published from them.
- ``xla_native_functions.yaml`` (torchgen external backend): ``full_codegen`` ∪ ``supported`` -> ``native``, each
  overload as listed (no structured_delegate logic); ``ir_gen`` (IR class only, all of it also in supported) and
  ``symint`` (a modifier) add nothing; ``autograd`` (registered for AutogradXLA) -> ``autograd``.
- ``einsum`` -> ``native`` too: registered by hand in torch_xla/csrc/xla_manual_registration.cpp (fact
  xla-manual-registration), and XLA's own einsum at AutogradXLA in every release (the yaml's autograd list).
- names that are no op of the paired PyTorch table are left out (named in the notes).
- functionalization = true in every release: in-place and out= calls run as their functional op (fact
  xla-functionalization); the data agrees: no staged yaml lists a single in-place overload.
- CPU fallback: always on, no switch (torch_xla/csrc/aten_fallback.cpp).
- ``coverage_db/curated/xla_torchvision_ops.tsv`` (derived from xla_manual_registration.cpp at each release's
  commit): the torchvision ops registered by hand for XLA -> ``custom`` (``torchvision::nms`` from v2.4.0; the
  file does not exist before).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opaudit.matrix.provenance import cite
from opaudit.matrix.release import CpuFallback, Release
from opaudit.matrix.sources import Context, sha256
from opaudit.matrix.torchops import TorchOps, minor
from opaudit.matrix.vendors import vendor

VENDOR = "xla"
REPO = "pytorch/xla"
_ID = vendor(VENDOR)  # coverage_db/curated/vendors.toml
DEVICE, KEY, PACKAGE = _ID.device_type, _ID.dispatch_key, _ID.package
FILE = "xla_native_functions.yaml"
MANUAL = "torch_xla/csrc/xla_manual_registration.cpp"
HAND_REGISTERED = ("einsum",)
TORCHVISION_FILE = "xla_torchvision_ops.tsv"  # coverage_db/curated/
# torch_xla patch releases whose X.Y.Z is no PyTorch release: the PyTorch they build against
NO_SUCH_TORCH = {"v2.8.1": "2.8.0"}

_ROW = re.compile(r"^\|\s*([\w.]+)\s*\|\s*(tag|branch)\s+([\w.]+)[^|]*\|\s*([0-9a-f]{40})\s*\|"
                  r"\s*(\d{4}-\d\d-\d\d)\s*\|\s*(\S+)\s*\|\s*([\w.]+)\s*\|")

FALLBACK = CpuFallback(
    exists=True, default_on=True, switch=None,
    note="always on, no switch: the boxed CPU fallback of torch_xla/csrc/aten_fallback.cpp runs every aten op "
         "without an XLA lowering on the CPU (host copies, graph breaks); each one shows up as an aten:: counter "
         "in the metrics report (torch_xla.debug.metrics.executed_fallback_ops(), pytorch/xla#7116) and "
         "PT_XLA_DEBUG_LEVEL=2 prints 'Op(s) not lowered' (docs/source/learn/troubleshoot.md). "
         f"Source: {cite('xla-cpu-fallback')}",
)


@dataclass
class Ref:
    folder: str  # "v2.5.0", "r2.10", "master"
    kind: str  # "tag" or "branch"
    ref: str
    commit: str
    date: str
    path: str  # path of the yaml in the repository
    target: str  # the PyTorch line it targets ("2.5", "nightly")


def refs(ctx: Context) -> list[Ref]:
    """The rows of the table in the staged folder's SOURCES.md, oldest first."""
    out = []
    for line in (ctx.folder(VENDOR) / "SOURCES.md").read_text(encoding="utf-8").splitlines():
        m = _ROW.match(line)
        if m:
            out.append(Ref(*m.groups()))
    return sorted(out, key=lambda r: (r.date, r.folder))


def _load(path: Path) -> Any:
    import yaml

    with open(path, encoding="utf-8") as f:
        return yaml.load(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


@dataclass
class XlaFunctions:
    full_codegen: list[str]
    supported: list[str]
    ir_gen: list[str]
    symint: list[str]
    autograd: list[str]

    @property
    def registered(self) -> set[str]:
        """Overloads registered for the XLA key by the codegen."""
        return set(self.full_codegen) | set(self.supported)


def read_xla_functions(path: Path) -> XlaFunctions:
    data = _load(path) or {}
    if data.get("backend") != KEY:
        raise ValueError(f"{path}: backend is {data.get('backend')!r}, not {KEY}")

    def names(key: str) -> list[str]:
        return [str(n).strip() for n in data.get(key) or []]

    return XlaFunctions(names("full_codegen"), names("supported"), names("ir_gen"), names("symint"),
                        names("autograd"))


def torch_version(ctx: Context, r: Ref) -> str:
    """The PyTorch a ref builds against (see the module docstring)."""
    if r.folder in NO_SUCH_TORCH:
        return NO_SUCH_TORCH[r.folder]
    if r.kind == "tag":
        return r.ref.removeprefix("v")
    if r.target == "nightly":
        return max(ctx.torch, key=lambda v: tuple(int(x) for x in v.split(".")))
    t = ctx.torch_for(r.target)
    return t.version if t is not None else f"{r.target}.0"


def _share(native: set[str], torch_ops: TorchOps) -> str:
    cuda = torch_ops.with_kernel("CUDA")
    hit = len(cuda & native)
    return (f"native reaches {hit} of the {len(cuda)} CUDA-kernel ops of PyTorch {torch_ops.version} "
            f"({100 * hit / len(cuda):.1f}%): XLA lists functional overloads only; counted as in "
            f"{cite('cuda-kernel-ops')}")


def torchvision_ops(ctx: Context) -> dict[str, tuple[str, str, list[str]]]:
    """Folder -> (commit, path, the torchvision ops registered for XLA by hand there)."""
    out: dict[str, tuple[str, str, list[str]]] = {}
    for row in ctx.curated(TORCHVISION_FILE).read_text(encoding="utf-8").splitlines():
        if not row or row.startswith(("#", "dir\t")):
            continue
        folder, commit, path, op = row.split("\t")
        ops = out.setdefault(folder, (commit, path, []))[2]
        if op != "-":
            ops.append(op)
    return out


def release(ctx: Context, r: Ref, order: int, same: list[str]) -> Release:
    path = ctx.folder(VENDOR) / r.folder / FILE
    xf = read_xla_functions(path)
    torch = torch_version(ctx, r)
    table = ctx.torch_for(torch)
    src = ctx.source(REPO, r.path, r.commit, path, "torchgen external-backend yaml: full_codegen, supported, "
                                                   "ir_gen, symint, autograd")
    native = xf.registered | set(HAND_REGISTERED)
    autograd = set(xf.autograd)
    notes = [f"{r.kind} {r.ref}, commit {r.commit[:7]} of {r.date}",
             f"xla_native_functions.yaml: full_codegen {len(xf.full_codegen)}, supported {len(xf.supported)}, "
             f"ir_gen {len(xf.ir_gen)}, symint {len(xf.symint)}, autograd {len(xf.autograd)}; registered for XLA "
             f"(full_codegen | supported) {len(xf.registered)}",
             f"einsum is added to native by hand: {MANUAL} registers aten::einsum outside the yaml; the yaml's "
             "autograd list also registers XLA's own einsum for AutogradXLA, so einsum runs as XLA and never "
             f"decomposes ({cite('xla-manual-registration')})"]
    ir_only = sorted(set(xf.ir_gen) - xf.registered)
    if ir_only:
        notes.append(f"ir_gen names not registered (IR class only, no kernel): {', '.join(ir_only)}")
    sources = [src]
    custom: list[str] = []
    vision = torchvision_ops(ctx).get(r.folder)
    if vision is not None:
        sources.append(ctx.source(REPO, vision[1], vision[0], ctx.curated(TORCHVISION_FILE),
                                  "DERIVED, not an upstream file: the torchvision ops of "
                                  "TORCH_LIBRARY_IMPL(torchvision, XLA) in this file at this commit"))
        custom = sorted(vision[2])
        notes.append(f"{MANUAL} registers torchvision ops by hand: {', '.join(custom)}" if custom else
                     f"{MANUAL} does not exist at this commit: no torchvision op has an XLA kernel")
    else:
        notes.append("the torchvision ops of this ref are not staged")
    notes.append(f"XLA lists functional overloads: in-place and out= calls reach them through functionalization "
                 f"({cite('xla-functionalization')}); "
                 "Composite* ops decompose into them; everything else runs on the always-on CPU fallback")
    exact = True
    accuracy = (f"full_codegen | supported of {r.path} (each overload listed on its own), plus aten::einsum "
                f"registered by hand ({MANUAL})")
    if table is None:
        notes.append(f"no PyTorch {minor(torch)[0]}.{minor(torch)[1]} op table is staged: names not checked")
    else:
        unknown = sorted(n for n in native | autograd if table.get(n) is None)
        if unknown:
            native -= set(unknown)
            autograd -= set(unknown)
            notes.append(f"{len(unknown)} listed names are no op of PyTorch {table.version}, left out: "
                         f"{', '.join(unknown)} (the yaml still registers them, so it builds against a PyTorch that "
                         "has them)")
        notes.append(_share(native, table))
    aliases = [r.ref, f"{minor(r.ref)[0]}.{minor(r.ref)[1]}"] if r.kind == "tag" else []
    if r.kind == "tag":
        name = r.ref.removeprefix("v")
        if r.folder in NO_SUCH_TORCH:
            notes.append(f"tag vX.Y.Z builds against PyTorch X.Y.Z, but PyTorch has no {name} release (PyPI: "
                         f"2.8.0, then 2.9.0): paired with PyTorch {torch} ({cite('xla-torch-pairing')})")
    elif r.target == "nightly":
        name = r.ref
        aliases = ["nightly"]
        exact = False
        accuracy += (f"; development snapshot built against a PyTorch nightly of {r.date[:7]}, paired with the newest "
                     f"staged PyTorch table ({torch}): op names that table lacks are left out")
        notes.append(f"development snapshot of {r.date}: built against the PyTorch nightly of its day; paired with "
                     f"PyTorch {torch}, the newest staged table (assumption, not a documented pairing)")
    else:
        name = r.ref
        aliases = [r.target]
        notes.append(f"release branch {r.ref}: the copy of the repository read has no v{r.target} tag (and PyPI lists "
                     f"no torch_xla {r.target}); it targets PyTorch {r.target}")
    if same:
        notes.append(f"xla_native_functions.yaml identical (sha256) to that of {', '.join(same)}")
    return Release(
        vendor=VENDOR, name=name, torch=torch, device_type=DEVICE, dispatch_key=KEY, package=PACKAGE,
        import_name=_ID.import_name, aliases=aliases, vendor_release=None, order=order, exact=exact, accuracy=accuracy,
        fallback=FALLBACK, functionalization=True, prerelease=r.kind != "tag",
        ops={k: sorted(v) for k, v in (("native", native), ("autograd", autograd), ("custom", custom)) if v},
        caveats=[], sources=sources, notes=notes,
    )


def releases(ctx: Context) -> list[Release]:
    rows = refs(ctx)
    digest = {r.folder: sha256(ctx.folder(VENDOR) / r.folder / FILE) for r in rows}
    return [release(ctx, r, order, [o.folder for o in rows if o is not r and digest[o.folder] == digest[r.folder]])
            for order, r in enumerate(rows, start=1)]
