"""Enflame torch_gcu (device ``gcu``, key PrivateUse1): one release per chip of its fallback list.

Rules:
- ``gcu_native_functions.yaml`` ``supported:`` names without ``disable: true`` that are ops of PyTorch 2.10 (the
  release it targets), plus every op of PyTorch 2.10 whose ``structured_delegate`` is one of them (the functional
  and in-place variants torchgen derives) -> ``native`` (fact enflame-effective-ops). The ``optional:``
  item is only named in the notes.
- ``gcu_op_fallback.yaml``: per chip, a name with ``all`` is forced to the CPU -> ``forced_cpu`` and out of
  ``native``. The codegen (codegen/gen_op_fallback_register.py) registers the forced fallback for that exact op
  name only, so its structured variants stay ``native``. A name forced only for some arguments stays ``native``
  with a caveat (its dtypes when the condition names dtypes).
- The two chips differ only in that list, so each gets its release (a single release would call ops native that
  one chip always runs on the CPU): S60 (the README's supported card, the newest order: plain ``enflame``) and
  L600.
- ``gcu_vision_functions.yaml`` names without ``disable`` -> ``custom`` as ``torchvision::name``.
- No native 64-bit types: a caveat for float64 / int64 on every op (silent down-cast).
- CPU fallback: on by default, ops not connected fall back to torch CPU (fact enflame-cpu-fallback).
- Provenance: a third-party copy (sunnygui-L/torch-gcu), said so in accuracy and notes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from opaudit.matrix.provenance import cite
from opaudit.matrix.release import Caveat, CpuFallback, Release, Source
from opaudit.matrix.sources import Context
from opaudit.matrix.sources.dipu import full_commit, load_json, load_yaml, share_note
from opaudit.matrix.torchops import TorchOps
from opaudit.matrix.vendors import vendor

VENDOR = "enflame"
REPO = "sunnygui-L/torch-gcu"
OFFICIAL = "EnflameTechnology/torch-gcu"
FOLDER = "torch-gcu-f17a922a"
_ID = vendor(VENDOR)  # coverage_db/curated/vendors.toml
DEVICE, KEY, PACKAGE = _ID.device_type, _ID.dispatch_key, _ID.package
TORCH = "2.10.0"
TOPSRIDER = "3.7.1"
# chip -> (order, description); S60 last: plain ``enflame`` means the README's supported card
CHIPS = {"l600": (1, "L600"), "s60": (2, "S60 (CloudBlazer inference; the README's supported card)")}
# ScalarType names of gcu_op_fallback.yaml conditions -> torch dtype names
SCALAR_TYPES = {"Byte": "uint8", "Char": "int8", "Short": "int16", "Int": "int32", "Long": "int64",
                "Half": "float16", "Float": "float32", "Double": "float64", "BFloat16": "bfloat16", "Bool": "bool",
                "ComplexFloat": "complex64", "ComplexDouble": "complex128"}

FALLBACK = CpuFallback(
    exists=True, default_on=True,
    switch="ENFLAME_PT_OP_DEBUG_CONFIG=\"fallback_cpu=all_ops,<op>,-<op> ...\" (set before import torch_gcu) forces "
           "compute ops onto it; ENFLAME_LOG_DEBUG_MOD=TORCH_GCU logs each op that falls back (or TORCH_GCU/FALLBACK "
           "with ENFLAME_LOG_DEBUG_LEVEL=DEBUG)",
    note="ops not yet connected fall back to torch CPU automatically (log: '<op> ... fallback to torch cpu'); "
         "per chip some ops are always forced to it (gcu_op_fallback.yaml -> forced_cpu). "
         f"Source: {cite('enflame-cpu-fallback')}",
)


def fallback_lists(data: dict[str, Any], chip: str) -> tuple[list[str], dict[str, list[dict[str, Any]]]]:
    """(names forced for every call, names forced under argument conditions -> the conditions) for one chip."""
    always, conditional = [], {}
    for e in data.get("fallback") or []:
        cfg = e.get(chip)
        if cfg is None:
            continue
        if cfg == "all":
            always.append(str(e["name"]))
        else:
            conditional[str(e["name"])] = list(cfg)
    return always, conditional


def _condition_caveat(name: str, conds: list[dict[str, Any]], chip: str, staged: str) -> Caveat:
    dtypes: set[str] = set()
    parts = []
    for cond in conds:
        for arg, values in cond.items():
            vals = [v.strip() for v in str(values).split(",") if v.strip()]
            parts.append(f"{arg} in {{{', '.join(vals)}}}")
            dtypes.update(SCALAR_TYPES[v] for v in vals if v in SCALAR_TYPES)
    return Caveat(name, sorted(dtypes), f"forced to the CPU on {chip.upper()} when {' or '.join(parts)} "
                                        "(gcu_op_fallback.yaml; the codegen checks these arguments at each call)",
                  staged, kind="cpu")


def blocked_names(supported: list[dict[str, Any]]) -> set[str]:
    """Listed ops whose fallback_cpu is false: the codegen registers no forced fallback for them."""
    return {str(e["name"]) for e in supported if e.get("fallback_cpu") is False}


def effective(torch_ops: TorchOps, listed: list[str]) -> set[str]:
    present = {n for n in listed if n in torch_ops}
    return present | {n for n, op in torch_ops.ops.items() if op.delegate in present}


def chip_release(ctx: Context, chip: str) -> Release:
    root = ctx.folder(VENDOR)
    torch_ops = ctx.torch_for(TORCH)
    if torch_ops is None:
        raise ValueError(f"{VENDOR}: no PyTorch {TORCH} op table staged")
    commit = full_commit(root / "SOURCES.md", FOLDER.rsplit("-", 1)[1])
    sources: list[Source] = []

    def src(path_in_repo: str, file: str, note: str = "") -> Path:
        path = root / FOLDER / file
        sources.append(ctx.source(REPO, path_in_repo, commit, path, note))
        return path

    y = load_yaml(src("codegen/gcu_native_functions.yaml", "gcu_native_functions.yaml",
                      "codegen input: the aten ops with GCU kernels (third-party copy)"))
    fb = load_yaml(src("codegen/gcu_op_fallback.yaml", "gcu_op_fallback.yaml",
                       "per-chip forced CPU fallback (third-party copy)"))
    vision = load_yaml(src("codegen/gcu_vision_functions.yaml", "gcu_vision_functions.yaml",
                           "torchvision ops with GCU kernels"))
    derived = load_json(src("codegen/gcu_native_functions.yaml", "derived/gcu_ops_effective_torch-2.10.0.json",
                            "DERIVED, not an upstream file: the effective list and the forced lists, compared in the "
                            "notes"))
    supported = list(y.get("supported") or [])
    disabled = sorted(str(e["name"]) for e in supported if e.get("disable"))
    listed = [str(e["name"]) for e in supported if not e.get("disable")]
    unknown = sorted(n for n in listed if n not in torch_ops)
    eff = effective(torch_ops, listed)
    always, conditional = fallback_lists(fb, chip)
    forced = sorted(n for n in always if n in torch_ops and n not in blocked_names(supported))
    native = eff - set(forced)
    staged = f"{VENDOR}/{FOLDER}/gcu_op_fallback.yaml"
    caveats = [Caveat("*", ["float64", "int64"],
                      "the hardware has no native 64-bit types: torch_gcu silently down-casts float64 / int64 (and "
                      "uint64) to 32 bits; TORCH_GCU_ENABLE_INT64_AND_UINT64=true tries 64-bit where available",
                      cite("enflame-64bit"), kind="converted")]
    caveats += [_condition_caveat(n, conds, chip, staged) for n, conds in sorted(conditional.items())]
    custom = sorted(f"torchvision::{e['name']}" for e in vision.get("supported") or [] if not e.get("disable"))

    other = next(c for c in CHIPS if c != chip)
    other_always, other_cond = fallback_lists(fb, other)
    optional = [str(e["name"]) for e in y.get("optional") or []]
    no_fb = [str(e["name"]) for e in supported if e.get("fallback_cpu") is False]
    yes_fb = [str(e["name"]) for e in supported if e.get("fallback_cpu") is True]
    blocked = sorted(set(no_fb) & set(always))
    notes = [f"third-party copy: {REPO} at {commit and commit[:7]} (branch not recorded), apparently a mirror of the "
             f"official {OFFICIAL}, of which no copy was available; provenance not verified, check against Enflame's "
             f"release before relying on it ({cite('enflame-third-party-copy')})",
             f"torch_gcu for PyTorch {TORCH} with TopsRider v{TOPSRIDER}, chip {CHIPS[chip][1]}",
             f"gcu_native_functions.yaml: {len(supported)} supported names, {len(disabled)} disabled "
             f"({', '.join(disabled)}); {len(listed)} + their structured variants = {len(eff)} effective ops",
             f"forced to the CPU on {chip.upper()}: {len(always)} ops always"
             + (f", {len(conditional)} for some arguments ({', '.join(sorted(conditional))})" if conditional else "")
             + f" (gcu_op_fallback.yaml lists {len(always) + len(conditional)} for {chip}); the forced op names leave "
               "native, their functional / in-place variants stay (the fallback is registered per op name)",
             f"the other chip, {other.upper()}, forces {len(other_always) + len(other_cond)}: "
             + ", ".join(sorted(other_always + list(other_cond))),
             "the forced CPU fallback is allowed for every listed op unless it sets fallback_cpu: false (default "
             f"true): {len(no_fb)} memory / view ops say false, {', '.join(yes_fb)} says true explicitly",
             f"optional: {', '.join(optional)}: the codegen scripts read it with the supported names "
             f"(codegen/gen_backend_stubs.py), the effective rule ({cite('enflame-effective-ops')}) leaves it out; "
             "not in native (a CompositeImplicitAutograd op in PyTorch, so it runs either way)",
             f"custom: torchvision ops {', '.join(custom)} (ps_roi_pool and roi_pool are disable: true)",
             "device: torch.gcu; distributed backend eccl (README: backend='nccl' -> 'eccl'); from torch_gcu import "
             "transfer_to_gcu redirects .cuda() and torch.cuda.* and disables torch.jit.script",
             share_note(native, torch_ops)]
    if blocked:
        notes.append(f"forced for {chip} but fallback_cpu: false, so not forced: {', '.join(blocked)}")
    if unknown:
        notes.append(f"{len(unknown)} listed names are no op of PyTorch {torch_ops.version}: {', '.join(unknown)}")
    doc = set(derived.get("effective_registered_ops", ()))
    if doc != eff:
        notes.append(f"the derived json lists {len(doc)} effective ops, this rule {len(eff)}: differing "
                     f"{', '.join(sorted(doc ^ eff))}")
    absent = [n for n in derived.get("listed_but_absent_in_torch_2_10", []) if n in torch_ops]
    if absent:
        notes.append(f"the derived json calls {', '.join(absent)} absent from PyTorch {TORCH}; it is an autogen: op "
                     "there (bincount's entry), so it counts")
    ops = {"native": sorted(native), "forced_cpu": forced, "custom": custom}
    order, _ = CHIPS[chip]
    short = commit[:7] if commit else "f17a922"
    return Release(
        vendor=VENDOR, name=f"{short}-{chip}", torch=TORCH, device_type=DEVICE, dispatch_key=KEY, package=PACKAGE,
        import_name=_ID.import_name,
        aliases=[chip, chip.upper(), f"{TOPSRIDER}-{chip}", f"topsrider{TOPSRIDER}-{chip}"],
        vendor_release=TOPSRIDER, order=order, exact=True,
        accuracy="the codegen input gcu_native_functions.yaml (+ structured variants) minus the chip's forced CPU "
                 "list, from a third-party copy of torch-gcu (not verified against Enflame's release); kernels "
                 "registered by hand in C++ and dtype limits inside kernels are not captured",
        fallback=FALLBACK, ops={k: v for k, v in ops.items() if v}, caveats=caveats, sources=sources, notes=notes,
    )


def releases(ctx: Context) -> list[Release]:
    return [chip_release(ctx, c) for c in sorted(CHIPS, key=lambda c: CHIPS[c][0])]
