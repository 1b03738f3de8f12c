"""Sophgo torch-tpu (device ``tpu``, key PrivateUse1): one release, the staged main snapshot.

Rules:
- ``derived/aten_ops_PrivateUse1.txt`` (= ``aten:TPU`` of ``registered_ops.json``: string literals of
  ``m.impl(...)`` in TORCH_LIBRARY_IMPL(aten, TPU) blocks, TPU being PrivateUse1) -> ``native``, each overload on
  its own (registered by hand, no structured_delegate expansion). Chip ``#ifdef`` blocks were not evaluated, so
  the list is the union over chip builds: exact=False.
- ``aten:AutogradPrivateUse1`` -> ``autograd``; ``tpu:PrivateUse1`` -> ``custom`` as ``tpu::name``;
  ``aten:CatchAll`` -> notes.
- names that are no op of PyTorch 2.8 (the pinned torch) register nothing: left out, named in the notes.
- CPU fallback: boxed on PrivateUse1 (cpu_fallback_for_dynamo -> at::native::cpu_fallback), on.
"""

from __future__ import annotations

from pathlib import Path

from opaudit.matrix.provenance import cite
from opaudit.matrix.release import CpuFallback, Release, Source
from opaudit.matrix.sources import Context
from opaudit.matrix.sources.dipu import full_commit, load_json, read_lines, share_note
from opaudit.matrix.vendors import vendor

VENDOR = "sophgo"
REPO = "sophgo/torch-tpu"
FOLDER = "torch-tpu-fe9b478b"
_ID = vendor(VENDOR)  # coverage_db/curated/vendors.toml
DEVICE, KEY, PACKAGE = _ID.device_type, _ID.dispatch_key, _ID.package
TORCH = "2.8.0"  # docker/requirements.txt pins torch==2.8.0+cpu
DATE = "2025-12-09"
CSRC = "torch_tpu/csrc/"

FALLBACK = CpuFallback(
    exists=True, default_on=True, switch=None,
    note="a boxed fallback on PrivateUse1 (cpu_fallback_for_dynamo) runs PyTorch's stock at::native::cpu_fallback "
         "for ops without a tpu kernel; several kernels also copy to the host internally in special cases (some "
         f"index paths, 0-dim inputs). Source: {cite('sophgo-cpu-fallback')}",
)


def releases(ctx: Context) -> list[Release]:
    root = ctx.folder(VENDOR)
    torch_ops = ctx.torch_for(TORCH)
    if torch_ops is None:
        raise ValueError(f"{VENDOR}: no PyTorch {TORCH} op table staged")
    commit = full_commit(root / "SOURCES.md", FOLDER.rsplit("-", 1)[1])
    sources: list[Source] = []

    def src(file: str, note: str) -> Path:
        path = root / FOLDER / file
        sources.append(ctx.source(REPO, CSRC, commit, path, note))
        return path

    listed = read_lines(src("derived/aten_ops_PrivateUse1.txt",
                            "DERIVED, not an upstream file: m.impl(\"...\") names of TORCH_LIBRARY_IMPL(aten, TPU) "
                            "blocks under torch_tpu/csrc/ (chip #ifdefs not evaluated)"))
    reg = load_json(src("derived/registered_ops.json",
                        "DERIVED, not an upstream file: the same scan grouped by namespace:dispatch key"))
    groups: dict[str, list[str]] = reg["by_namespace_and_key"]
    unknown = sorted(n for n in set(listed) if torch_ops.get(n) is None)
    native = set(listed) - set(unknown)
    autograd = sorted(n for n in groups.get("aten:AutogradPrivateUse1", []) if torch_ops.get(n) is not None)
    custom = sorted({f"{k.split(':')[0]}::{n}" for k, names in groups.items()
                     if not k.startswith("aten:") and k.endswith(":PrivateUse1") for n in names})
    counts = ", ".join(f"{k} {len(v)}" for k, v in sorted(groups.items()))
    notes = [f"main branch {commit and commit[:7]} of {DATE} (a master ref also exists; tag v0.1 is older); "
             f"PyTorch {TORCH} (docker/requirements.txt pins torch==2.8.0+cpu; the sources also keep branches for "
             "2.1); chips SG2260 / SG2260E and BM1684X / BM1690 (kernels call tpudnn)",
             f"no op yaml: the list is a scan of the C++ registrations; by namespace:key {counts}",
             "chip-specific #ifdef / #ifndef BACKEND_SG2260, USING_PPL and __bm1690__ blocks were not evaluated: "
             "the list is the union over chip builds, one build may register fewer",
             "every overload is registered by hand (e.g. add.out is listed, add.Tensor is not); an unlisted "
             "structured functional op still runs: PyTorch's CompositeExplicitAutogradNonFunctional kernel calls "
             f"the listed .out kernel ({cite('structured-functional-via-out')}), so it resolves native via its .out",
             "many kernels have dtype and shape restrictions inside that this list does not capture",
             f"custom ops {', '.join(custom)} also get AutogradPrivateUse1 kernels; aten:CatchAll registers "
             + ", ".join(groups.get("aten:CatchAll", [])),
             "device: PrivateUse1 renamed to tpu in C++ (macro TPU), torch.tpu; distributed backends sccl and "
             "scclhost (torch lower-cases SCCL / SCCLHOST)",
             share_note(native, torch_ops)]
    if unknown:
        notes.append(f"{len(unknown)} scanned names are no op of PyTorch {torch_ops.version} (their m.impl registers "
                     f"nothing usable): {', '.join(unknown)}; left out of native")
    ops = {"native": sorted(native), "autograd": autograd, "custom": custom}
    short = commit[:7] if commit else FOLDER.rsplit("-", 1)[1][:7]
    return [Release(
        vendor=VENDOR, name=f"main-{short}", torch=TORCH, device_type=DEVICE, dispatch_key=KEY, package=PACKAGE,
        import_name=_ID.import_name, aliases=["main", short, DATE], vendor_release=None, order=1,
        prerelease=True, exact=False,
        accuracy="a scan of the m.impl registrations in the C++ sources without evaluating chip #ifdefs: the union "
                 "over chip builds, an upper bound for any one build",
        fallback=FALLBACK, ops={k: v for k, v in ops.items() if v}, caveats=[], sources=sources, notes=notes,
    )]
