"""The live probe: a Release read from the dispatcher of the running process.

On a machine with a vendor plugin installed (``import torch_npu``), the dispatcher knows exactly what
the plugin registered; the static data of coverage_db/ is checked against this. The probe reads:

- ``native``: ops with a kernel registered directly on the device's dispatch key, or on its sparse key (SparseCPU,
  SparsePrivateUse1: the sparse COO ops);
- ``autograd``: ops with a kernel on its autograd key (the plugin's own backward);
- the CPU fallback: whether a boxed backend fallback is registered on the key;
- the op table of the installed torch (the native_functions.yaml that torchgen ships in the wheel),
  through which composites resolve to their leaves like any other release.
"""

from __future__ import annotations

import importlib
from functools import cache
from pathlib import Path

import torch

from opaudit.errors import InputError
from opaudit.matrix.release import CpuFallback, Release
from opaudit.matrix.torchops import TorchOps, parse_native_functions

_KEYS = {"cpu": "CPU", "cuda": "CUDA", "meta": "Meta", "mps": "MPS", "xpu": "XPU", "xla": "XLA", "hpu": "HPU",
         "mtia": "MTIA", "privateuseone": "PrivateUse1"}


def dispatch_key(device_type: str) -> str:
    """The backend dispatch key of a device type (a renamed PrivateUse1 device gives PrivateUse1)."""
    d = device_type.lower()
    if d in _KEYS:
        return _KEYS[d]
    if d == torch._C._get_privateuse1_backend_name():
        return "PrivateUse1"
    raise InputError(f"unknown device type {device_type!r}",
                     hint="import the plugin first (--import torch_npu) so that its device type exists; known: "
                          + ", ".join(sorted(_KEYS)))


def _strip(name: str) -> str:
    return name[len("aten::"):] if name.startswith("aten::") else name


@cache
def installed_torch_ops() -> TorchOps | None:
    """The op table of the installed torch, from the native_functions.yaml torchgen ships with it."""
    try:
        import torchgen
    except ImportError:
        return None
    path = Path(torchgen.__file__).parent / "packaged" / "ATen" / "native" / "native_functions.yaml"
    if not path.is_file():
        return None
    return parse_native_functions(path, torch.__version__.split("+")[0])


def probe(device_type: str, *, imports: tuple[str, ...] = ()) -> Release:
    """A Release of what the dispatcher of this process holds for ``device_type``."""
    for name in imports:
        try:
            importlib.import_module(name)
        except ImportError as e:
            raise InputError(f"cannot import {name}: {e}") from None
    key = dispatch_key(device_type)
    registrations = list(torch._C._dispatch_get_registrations_for_dispatch_key(key))
    try:  # a sparse COO op (_indices, _coalesce) runs on the device's sparse key, as coverage_db's core targets read it
        registrations += torch._C._dispatch_get_registrations_for_dispatch_key("Sparse" + key)
    except RuntimeError:
        pass  # (a key without a sparse twin: Meta's is SparseMeta, XLA has none)
    ops: dict[str, set[str]] = {"native": set(), "custom": set()}
    for r in registrations:
        (ops["native"] if r.startswith("aten::") else ops["custom"]).add(_strip(r))
    autograd_key = "Autograd" + key
    try:
        ops["autograd"] = {_strip(r) for r in torch._C._dispatch_get_registrations_for_dispatch_key(autograd_key)
                           if r.startswith("aten::")}
    except RuntimeError:
        pass
    has_fallback = bool(torch._C._dispatch_has_backend_fallback(getattr(torch._C.DispatchKey, key)))
    version = torch.__version__.split("+")[0]
    return Release(
        vendor="probe", name=f"{device_type}-{torch.__version__}", torch=version, device_type=device_type,
        dispatch_key=key, package=", ".join(imports), import_name=imports[0] if imports else None,
        exact=True, accuracy=f"read from the live dispatcher of torch {torch.__version__}: kernels registered "
                             f"directly on {key} (composites resolve through the installed op table)",
        fallback=CpuFallback(has_fallback, has_fallback,
                             note=f"a boxed backend fallback is {'registered' if has_fallback else 'not registered'} "
                                  f"on {key} in this process"),
        ops={k: sorted(v) for k, v in ops.items() if v},
        notes=[f"probed in a process with: {', '.join(imports) or 'no plugin imported'}"],
    )
