"""PyTorch itself: the CUDA (reference), CPU and MPS kernels of each release, from its native_functions.yaml.

Rules: an op has a kernel on a backend when its ``dispatch`` names the backend's key, or when its
``structured_delegate`` points at an op that does. Composite ops are not listed here: every target
resolves them through the op table (coverage_db/pytorch/ops-<version>.tsv). The XPU kernels of core
go to the ``xpu`` target (sources/xpu.py), with those of torch-xpu-ops.
"""

from __future__ import annotations

import re

from opaudit.matrix.release import Caveat, CpuFallback, Release
from opaudit.matrix.sources import Context
from opaudit.matrix.torchops import minor
from opaudit.matrix.vendors import vendor as vendor_identity

REPO = "pytorch/pytorch"
PATH = "aten/src/ATen/native/native_functions.yaml"
_ROW = re.compile(r"^\|\s*(v[\d.]+)\s*\|\s*(v[\d.]+)\s*\|\s*([0-9a-f]{40})\s*\|\s*(\S+\.whl)\s*\|")

FALLBACKS = {  # the core targets' CPU fallback (their identity: coverage_db/curated/vendors.toml)
    "cuda": CpuFallback(False, note="no CPU fallback: an op without a CUDA kernel raises"),
    "cpu": CpuFallback(False, note="the CPU itself"),
    "mps": CpuFallback(True, False, "PYTORCH_ENABLE_MPS_FALLBACK=1 turns it on",
                       "boxed CPU fallback in aten/src/ATen/mps/MPSFallback.mm; off by default "
                       "(NotImplementedError pointing to pytorch#77764 / #141287)"),
}


def provenance(ctx: Context) -> dict[str, tuple[str, str]]:
    """dir -> (source commit, wheel read), from the table of the staged SOURCES.md."""
    out = {}
    for line in (ctx.folder("pytorch") / "SOURCES.md").read_text(encoding="utf-8").splitlines():
        m = _ROW.match(line)
        if m:
            out[m.group(1)] = (m.group(3), m.group(4))
    return out


def releases(ctx: Context) -> list[Release]:
    prov = provenance(ctx)
    versions = sorted(ctx.torch, key=lambda v: tuple(int(x) for x in v.split(".")))
    out = []
    for order, version in enumerate(versions, start=1):
        ops = ctx.torch[version]
        folder = ctx.folder("pytorch") / f"v{version}"
        commit, wheel = prov.get(f"v{version}", (None, ""))
        src = ctx.source(REPO, PATH, commit, folder / "native_functions.yaml",
                         f"build-time copy shipped in {wheel}" if wheel else "")
        for vendor, fallback in FALLBACKS.items():
            ident = vendor_identity(vendor)
            key, device = ident.dispatch_key, ident.device_type
            caveats = []
            if vendor == "mps":
                caveats.append(Caveat("*", ["float64", "complex128"],
                                      "the MPS framework has no 64-bit floating types: tensors of these dtypes "
                                      "cannot be created on mps", "PyTorch MPS backend (aten/src/ATen/mps)",
                                      kind="unsupported"))
            out.append(Release(
                vendor=vendor, name=version, torch=version, device_type=device, dispatch_key=key,
                package=ident.package, import_name=ident.import_name,
                aliases=[f"{minor(version)[0]}.{minor(version)[1]}"],
                order=order, exact=True,
                accuracy=f"the {key} and Sparse{key} keys of native_functions.yaml (directly or through "
                         "structured_delegate): a sparse COO op (_indices, _coalesce) runs on the device's sparse key; "
                         "kernels registered by hand in C++ (TORCH_LIBRARY_IMPL) are not in this file",
                fallback=fallback, ops={"native": sorted(ops.with_kernel(key) | ops.with_kernel(f"Sparse{key}"))},
                caveats=caveats, sources=[src],
            ))
    return out
