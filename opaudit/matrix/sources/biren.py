"""Biren SUPA (device ``supa``): torch_supa (BR2xx), one release per PyTorch; BR1xx via DIPU.

Rules for torch_supa (key PrivateUse1), Biren's codegen rule re-applied to ``pytorch/v<X>/native_functions.yaml``
(script/codegen_native/gen.py, values in ``derived/codegen_filter.json``):
- every op with a dense CUDA kernel (a ``CUDA`` dispatch key, a ``ufunc_inner_loop`` -- torchgen generates CPU
  and CUDA kernels for it -- or a ``structured_delegate`` to such an op) is re-registered on PrivateUse1, except
  names containing a filtered substring (miopen, fft, sparse, ...) -> ``native``;
- ops whose name or structured_delegate is listed under ``supported`` / ``perf_supported`` / ``autograd`` of
  ``supa_native_functions.yaml`` (newest staged commit) are dropped from that codegen and registered by Biren's
  own code instead; they, and the listed names that are ops of that PyTorch, are ``native``;
- ``autograd`` -> also ``autograd`` (AutogradPrivateUse1); ``custom`` schemas -> ``custom::name``
  (TORCH_LIBRARY(custom) of templates/CustomRegisterSchema.cpp);
- QuantizedCUDA kernels of the ops that remain (and of ``preserve_quantized_dispatch``) -> ``quant``;
  NestedTensorCUDA kernels -> notes only; sparse registrations are not transformed (none);
- the staged per-torch lists (``derived/privateuse1_ops_torch-<X>.txt``) are compared, differences in the notes;
- caveats: ``derived/api_limitations.json`` (user guide "API限制说明") -> api caveats, plus aten caveats for its
  ``aten_hint`` ops (the project's own mapping, said so in each note); float64 and the quantized dtypes -> caveats
  for every op;
- the earlier commit 86c42639 is read for the notes only (what changed in the yaml and in the registered set);
- CPU fallback: boxed, on, warns once per op (fact biren-cpu-fallback).
BR1xx: torch_br, Biren's own BR1xx plugin, has no public source or op list. The only public data is DeepLink DIPU's
``supa`` vendor (../dipu/), so the BR1xx release is that DIPU build (torch_dipu, key XPU, device ``cuda``), an
upper bound (exact=False) -- the same data as dipu@supa, filed here so that ``biren@br1xx`` finds it.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

from opaudit.matrix.provenance import cite
from opaudit.matrix.release import Caveat, CpuFallback, Release, Source
from opaudit.matrix.sources import Context, dipu
from opaudit.matrix.sources.dipu import full_commit, load_json, load_yaml, read_lines, share_note
from opaudit.matrix.torchops import TorchOps
from opaudit.matrix.vendors import vendor

VENDOR = "biren"
REPO = "BIRENSUPA/torch-supa"
_ID = vendor(VENDOR)  # coverage_db/curated/vendors.toml
DEVICE, KEY, PACKAGE = _ID.device_type, _ID.dispatch_key, _ID.package
VERSION = "1.0.0"  # the user guide's version (chapter00, 2026-06-24); wheels torch_supa-1.0.0.<torch code>+br2xx
NEW = "torch-supa-68fb624a"
OLD = "torch-supa-86c42639"
YAML = "supa_native_functions.yaml"
YAML_PATH = "torch_supa/csrc/aten/supa_native_functions.yaml"
GEN_PATH = "script/codegen_native/gen.py"
GUIDE_PATH = "docs/user_guide/source/chapter05_torch_supa_api_limitations.rst"
GUIDE_COMMIT = "f79c0e7f07938c3636a7b0c8d16de96a71f57ab1"  # the staged SOURCES.md: f79c0e7f
BIREN_LISTS = ("supported", "perf_supported", "autograd")
FLOATS = ["float16", "bfloat16", "float32", "float64", "complex64", "complex128"]
QUANTIZED = ["quint8", "quint4x2", "quint2x4", "qint32", "qint8"]

FALLBACK = CpuFallback(
    exists=True, default_on=True, switch=None,
    note="boxed TORCH_LIBRARY_IMPL(_, PrivateUse1) fallback with the stock at::native::cpu_fallback; it warns once "
         "per op \"CAUTION: The operator '...' is not currently supported on the SUPA backend and will fall back to "
         "run on the CPU. This may have performance implications.\"; sparse ops raise instead; AutogradPrivateUse1 "
         "falls through; no documented switch or forced-fallback list (BRTB_ENABLE_NATIVE_OP only chooses between "
         f"Biren-rewritten and PyTorch-ported kernels). Source: {cite('biren-cpu-fallback')}",
)


def torch_code(version: str) -> str:
    """``"2.10.0"`` -> ``"21000"`` (the wheel suffix, as in torch_supa-1.0.0.21000+br2xx)."""
    major, minor_, patch = (int(x) for x in version.split(".")[:3])
    return f"{major * 10000 + minor_ * 100 + patch}"


def _vkey(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v))


def biren_lists(y: dict[str, Any]) -> dict[str, list[str]]:
    return {k: [str(n) for n in (y.get(k) or [])] for k in (*BIREN_LISTS, "preserve_quantized_dispatch")}


def custom_ops(y: dict[str, Any]) -> list[str]:
    out = []
    for e in y.get("custom") or []:
        m = re.match(r"([A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)?)\(", str(e["func"]))
        if m:
            out.append(f"custom::{m.group(1)}")
    return out


def registered(torch_ops: TorchOps, y: dict[str, Any], filters: list[str]) -> dict[str, set[str]]:
    """Biren's codegen rule on one PyTorch op table: the sets of one torch_supa build."""
    lists = biren_lists(y)
    own = set(lists["supported"]) | set(lists["perf_supported"]) | set(lists["autograd"])
    preserved = set(lists["preserve_quantized_dispatch"])
    ops = torch_ops.ops

    def filtered(n: str) -> bool:
        return any(s in n for s in filters)

    def replaced(n: str) -> bool:
        return n in own or (ops[n].delegate or "") in own

    cuda = torch_ops.with_kernel("CUDA")
    out = {
        "cuda": cuda,
        "filtered": {n for n in cuda if filtered(n)},
        "replaced": {n for n in cuda if not filtered(n) and replaced(n)},
        "biren": {n for n in own if n in torch_ops},
        "absent": {n for n in own if n not in torch_ops},
        "autograd": {n for n in lists["autograd"] if n in torch_ops},
    }
    out["from_cuda"] = cuda - out["filtered"] - out["replaced"]
    out["native"] = out["from_cuda"] | out["replaced"] | out["biren"]
    out["quant"] = {n for n, op in ops.items() if "QuantizedCUDA" in op.keys and not filtered(n)
                    and (not replaced(n) or n in preserved or (op.delegate or "") in preserved)}
    out["nested"] = {n for n, op in ops.items() if "NestedTensorCUDA" in op.keys and not filtered(n)
                     and not replaced(n)}
    return out


def _limit_dtypes(limitation: str) -> list[str]:
    """The dtypes a limitation of api_limitations.json rules out (all floating types when 'unsupported')."""
    if limitation.strip() == "unsupported":
        return list(FLOATS)
    m = re.search(r"((?:(?:b?float|complex)\d+(?:, | and ))*(?:b?float|complex)\d+) only", limitation)
    if m is None:
        return []
    allowed = set(re.split(r", | and ", m.group(1)))
    return [d for d in FLOATS if d not in allowed]


def api_caveats(data: dict[str, Any], staged: str, torch_ops: TorchOps, native: set[str]) -> list[Caveat]:
    out = []
    hinted: dict[str, tuple[set[str], list[str]]] = {}
    for a in data["apis"]:
        dtypes = _limit_dtypes(str(a["limitation"]))
        out.append(Caveat(str(a["api"]), dtypes, f"user guide: {a['limitation']}", staged, api=True))
        for h in a.get("aten_hint") or []:
            if torch_ops.get(h) is None:
                continue
            slot = hinted.setdefault(h, (set(), []))
            slot[0].update(dtypes)
            slot[1].append(f"{a['api']}: {a['limitation']}")
    for op, (ds, why) in sorted(hinted.items()):
        out.append(Caveat(op, sorted(ds, key=FLOATS.index),
                          "the user guide limits the API behind it (" + "; ".join(why) + "); the mapping API -> aten "
                          "op is this project's guess (aten_hint), not Biren's; "
                          + ("its kernel is registered" if op in native else "no kernel is registered (CPU fallback)"),
                          staged))
    return out


def _pytorch_source(ctx: Context, version: str) -> Source:
    from opaudit.matrix.sources import pytorch

    path = ctx.upstream / "pytorch" / f"v{version}" / "native_functions.yaml"
    commit, wheel = pytorch.provenance(ctx).get(f"v{version}", (None, ""))
    return ctx.source(pytorch.REPO, pytorch.PATH, commit, path,
                      f"PyTorch {version}: the CUDA kernels Biren's codegen re-registers on PrivateUse1"
                      + (f"; copy shipped in {wheel}" if wheel else ""))


def supa_release(ctx: Context, version: str, order: int) -> Release:
    root = ctx.folder(VENDOR)
    torch_ops = ctx.torch_for(version)
    if torch_ops is None:
        raise ValueError(f"{VENDOR}: no PyTorch {version} op table staged")
    commit = full_commit(root / "SOURCES.md", NEW.rsplit("-", 1)[1])
    old_commit = full_commit(root / "SOURCES.md", OLD.rsplit("-", 1)[1])
    sources: list[Source] = []

    def src(path_in_repo: str, rel: str, note: str = "", at: str | None = commit) -> Path:
        path = root / rel
        sources.append(ctx.source(REPO, path_in_repo, at, path, note))
        return path

    y = load_yaml(src(YAML_PATH, f"{NEW}/{YAML}", "Biren's own kernels (supported, autograd, custom)"))
    flt = load_json(src(GEN_PATH, f"{NEW}/derived/codegen_filter.json",
                        "DERIVED, not an upstream file: the values of gen.py (filters, keys re-targeted)"))
    sources.append(_pytorch_source(ctx, torch_ops.version))
    by_torch = load_json(src(YAML_PATH, f"{NEW}/derived/privateuse1_ops_by_torch_version.json",
                             "DERIVED, not an upstream file: the staged result of the same rule, compared in the "
                             "notes"))
    staged_list = set(read_lines(src(YAML_PATH, f"{NEW}/derived/privateuse1_ops_torch-{version}.txt",
                                     "DERIVED, not an upstream file: the staged list, compared in the notes")))
    limits = load_json(src(GUIDE_PATH, f"{NEW}/derived/api_limitations.json",
                           "DERIVED, not an upstream file: the user guide's API limitation table, translated; "
                           "aten_hint is the project's guess", at=GUIDE_COMMIT))
    old_y = load_yaml(src(YAML_PATH, f"{OLD}/{YAML}", "the earlier version of the yaml, read for the notes only",
                          at=old_commit))
    filters = [str(s) for s in flt["op_name_substrings_filtered_out"]]
    reg = registered(torch_ops, y, filters)
    rec = by_torch["versions"].get(version, {})
    nested_doc = rec.get("nestedtensor_privateuse1_ops", ())
    old = registered(torch_ops, old_y, filters)
    native = reg["native"]
    code = torch_code(version)

    notes = [f"torch_supa {VERSION} for PyTorch {version} (wheel torch_supa-{VERSION}.{code}+br2xx, cp310) as "
             f"generated from the default-branch commit {commit and commit[:7]} (the files came without branch or "
             "tag; the user guide says v1.0.0 of 2026-06-24); needs the CPU-only PyTorch wheel",
             f"native = {len(reg['from_cuda'])} CUDA kernels of PyTorch {torch_ops.version} re-registered on "
             f"PrivateUse1 + {len(reg['replaced'])} CUDA ops whose registration moved to Biren's code + "
             f"Biren's {len(y.get('supported') or [])} supported / {len(y.get('autograd') or [])} autograd names "
             f"({len(reg['biren'])} are ops of this PyTorch) = {len(native)}; kernels come from torch-supa-op "
             "(ATen CUDA sources patched and compiled for SUPA; not public, so which .cu files really build is "
             "unknown)",
             f"{len(reg['filtered'])} CUDA kernels are not registered (codegen filters {', '.join(filters)}): "
             + ", ".join(sorted(reg["filtered"])) + "; they reach the CPU fallback",
             "registered does not mean working: the user guide marks most of torch.linalg, torch.fft, torch.sparse and "
             "torch.ao.quantization unsupported although many of their kernels are registered (see the caveats)",
             f"{len(reg['nested'])} NestedTensorCUDA kernels are re-registered for NestedTensorPrivateUse1 "
             "(no category for nested tensors)"
             + (f"; the derived json lists {len(nested_doc)}, keeping ops whose entries gen.py drops (Biren's own "
                "lists)" if len(nested_doc) != len(reg["nested"]) else "")]
    if rec:
        doc = set(rec.get("registered_privateuse1_ops", ()))
        more, less = sorted(native - doc), sorted(doc - native)
        if more or less or len(doc) != len(staged_list):
            notes.append(f"the staged derived list counts {len(staged_list)} ops, this rule {len(native)}: "
                         + (f"added here {', '.join(more)}" if more else "")
                         + (f"; missing here {', '.join(less)}" if less else "")
                         + " (the derived list misses the ufunc_inner_loop kernels torchgen generates for add.out "
                           "and the autogen: ops std_mean.correction_out / var_mean.correction_out, which it calls "
                           "absent from PyTorch)")
        qdoc = set(rec.get("quantized_privateuse1_ops", ()))
        if qdoc != reg["quant"]:
            notes.append(f"quant: {len(reg['quant'])} by gen.py's rule, the derived json lists {len(qdoc)} "
                         f"(it keeps {', '.join(sorted(qdoc - reg['quant']))}, whose whole entries gen.py drops "
                         "because they are in Biren's supported list; only preserve_quantized_dispatch entries keep "
                         "their QuantizedCUDA kernel). gen.py also strips every generated TORCH_LIBRARY_IMPL(aten, "
                         "QuantizedPrivateUse1) block that registers a preserve_quantized_dispatch op "
                         f"({', '.join(biren_lists(y)['preserve_quantized_dispatch'])}), so fewer may survive")
    gained, lost = sorted(old["native"] - native), sorted(native - old["native"])
    old_perf = biren_lists(old_y)["perf_supported"]
    notes.append(f"earlier commit {old_commit and old_commit[:7]}: perf_supported held {', '.join(old_perf)}; "
                 "binary_cross_entropy_with_logits moved to supported and cross_entropy_loss was dropped, so "
                 + (f"the earlier build also registered {', '.join(gained)}" if gained else "no op was lost")
                 + (f" and lacked {', '.join(lost)}" if lost else "") + " for this PyTorch")
    notes.append(f"custom ops (TORCH_LIBRARY(custom), torch.ops.custom.*): {', '.join(custom_ops(y))}")
    notes.append("device: torch.utils.rename_privateuse1_backend('supa'), torch.supa; auto-loaded through "
                 "TORCH_DEVICE_BACKEND_AUTOLOAD; torch_supa.contrib.transfer_to_supa maps cuda->supa and nccl->bccl "
                 "and disables torch.jit.script; distributed backend bccl")
    notes.append(share_note(native, torch_ops))
    if torch_ops.version != version:
        notes.append(f"op names checked against PyTorch {torch_ops.version}'s table (nearest staged release)")

    staged = f"{VENDOR}/{NEW}/derived/api_limitations.json"
    caveats = api_caveats(limits, staged, torch_ops, native)
    caveats.append(Caveat("*", ["float64"], "float64 is only partly supported: UserWarning 'SUPA device does not "
                                            "support double (float64)'; transfer_to_supa maps torch.cuda.DoubleTensor "
                                            "to torch.supa.FloatTensor", staged))
    caveats.append(Caveat("*", list(QUANTIZED), "quantized dtypes are declared unsupported when the privateuse1 "
                                                "Tensor/Module/Storage methods are generated", staged,
                             kind="unsupported"))
    ops = {"native": sorted(native), "autograd": sorted(reg["autograd"]), "quant": sorted(reg["quant"]),
           "custom": custom_ops(y)}
    notes += [f"user guide: {x}" for x in limits.get("other_documented_limits", [])[2:]]
    minor_ = ".".join(version.split(".")[:2])
    return Release(
        vendor=VENDOR, name=f"{VERSION}.{code}+br2xx", torch=version, device_type=DEVICE, dispatch_key=KEY,
        package=PACKAGE, import_name=_ID.import_name,
        aliases=[f"{VERSION}.{code}", f"{VERSION}+torch{version}", f"br2xx-torch{minor_}"],
        vendor_release=VERSION, order=order, exact=True,
        accuracy="Biren's codegen rule (gen.py) re-applied to PyTorch's native_functions.yaml plus its "
                 "supa_native_functions.yaml: what is registered on PrivateUse1, not what the closed torch-supa-op "
                 "kernels compile or support",
        fallback=FALLBACK, ops={k: v for k, v in ops.items() if v}, caveats=caveats, sources=sources, notes=notes,
    )


def br1xx_release(ctx: Context, order: int) -> Release:
    base = dipu.vendor_release(ctx, "supa")
    notes = ["BR1xx (BR100/BR104, 'Biren106M') through DeepLink DIPU's supa vendor, the only public BR1xx data; the "
             "same data as dipu@supa. Biren's own BR1xx plugin torch_br (e.g. 1.10.0.20900+br1xx, device supa, "
             "PrivateUse1) has no public source or op list and is NOT described by this release",
             "UPPER BOUND: the ops DIPU would register for supa if Biren's closed DIOPI library (biren-diopi deb) "
             "implemented every function DIPU calls",
             *base.notes]
    return dataclasses.replace(
        base, vendor=VENDOR, name="br1xx-dipu", aliases=["br1xx", "dipu-supa"], vendor_release=None, order=order,
        exact=False, accuracy="UPPER BOUND for BR1xx through DIPU: " + base.accuracy + " (torch_br is not covered)",
        notes=notes,
    )


def releases(ctx: Context) -> list[Release]:
    by_torch = load_json(ctx.folder(VENDOR) / NEW / "derived" / "privateuse1_ops_by_torch_version.json")
    versions = sorted(by_torch["versions"], key=_vkey)
    return [br1xx_release(ctx, 1)] + [supa_release(ctx, v, i) for i, v in enumerate(versions, start=2)]
