"""What the dispatcher says about an op outside aten: which dispatch keys have a kernel for it.

A user's ``torch.library`` op, torchvision's ``nms`` or a fused-kernel library's attention is in no
vendor's table, but the process that runs it knows exactly where it has kernels. The tracer reads that
once per op (``read``) and stores it in the trace (``Trace.registrations``), so that the matrix can
resolve the op per target (``Matrix.resolve(op, registration=...)``):

- ``CompositeImplicitAutograd``: decomposed into aten ops before any backend sees it;
- a kernel for the target's own key (``CUDA`` on cuda, ``MPS`` on mps, ...): runs there; a
  ``PrivateUse1`` kernel registered in the tracing process is *not* a vendor's (it is whatever
  backend was loaded there, often none);
- ``CompositeExplicitAutograd``: runs wherever the aten ops of its kernel exist;
- a ``CPU`` kernel only: a vendor's generic CPU fallback can run it, where that is on;
- ``Meta`` (a fake kernel for tracing) and ``Autograd``/``Autocast`` wrappers alone say nothing
  about where the op can run.

Kernels that a compiled library registers depend on how it was built: a CPU wheel of torchvision
registers no CUDA kernels although its CUDA wheel does. ``python`` lists the keys whose kernel was
registered from Python (the same on every machine), so that the matrix can tell the two apart, and
``torch`` the keys whose kernel PyTorch itself registers (its c10d collectives have a ``PrivateUse1``
kernel that runs any PrivateUse1 backend's process group: that one is evidence).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from typing import Any

# keys of backends a kernel can run on (Meta: shapes only, for tracing and compilation)
BACKEND_KEYS = ("CPU", "CUDA", "HIP", "MPS", "XPU", "HPU", "XLA", "Lazy", "MTIA", "MAIA", "PrivateUse1", "Meta")
# alias keys: one registration that covers many backends
ALIAS_KEYS = ("CompositeImplicitAutograd", "CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional",
              "Autograd")
# wrappers that run above a backend kernel: recorded for completeness, never evidence of one
WRAPPER_KEYS = ("AutogradCPU", "AutogradCUDA", "AutogradXPU", "AutogradMPS", "AutogradPrivateUse1", "AutogradOther",
                "AutocastCPU", "AutocastCUDA", "AutocastXPU", "AutocastMPS", "AutocastPrivateUse1",
                "FuncTorchBatched", "Functionalize", "SparseCPU", "SparseCUDA", "QuantizedCPU", "QuantizedCUDA")
KEYS = BACKEND_KEYS + ALIAS_KEYS + WRAPPER_KEYS
# backends whose kernels a compiled library builds in only when built for them (its own source registers them)
BUILT_IN_KEYS = ("CUDA", "HIP", "MPS", "XPU")
_DUMP_LINE = re.compile(r"^(\w+)(?:\[alias\])?: registered at (.+?):\d+(?: |$)")


@dataclass(frozen=True)
class Registration:
    """The dispatch keys with a kernel for one op overload, in the process that ran it."""

    __pydantic_config__ = {"extra": "forbid", "strict": True}  # read strictly from trace files

    keys: tuple[str, ...]
    python: tuple[str, ...] = ()  # of those, the keys whose kernel was registered from Python
    torch: tuple[str, ...] = ()  # of those, the keys whose kernel PyTorch's own C++ registers

    @property
    def backends(self) -> tuple[str, ...]:
        """Backend keys with a kernel, Meta excluded."""
        return tuple(k for k in self.keys if k in BACKEND_KEYS and k != "Meta")

    @property
    def compiled(self) -> tuple[str, ...]:
        """Backend keys (Meta excluded) whose kernel comes from compiled code."""
        return tuple(k for k in self.backends if k not in self.python)

    def describe(self) -> str:
        """``the dispatcher had kernels for CPU, Meta (Python), Autograd`` (wrappers left out)."""
        shown = [k + (" (Python)" if k in self.python else "") for k in self.keys if k not in WRAPPER_KEYS]
        if not shown:
            return "the dispatcher had no kernel for it when it was traced"
        return "the dispatcher had kernels for " + ", ".join(shown) + " when it was traced"

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"keys": list(self.keys)}
        if self.python:
            d["python"] = list(self.python)
        if self.torch:
            d["torch"] = list(self.torch)
        return d

    @classmethod
    def from_json(cls, d: Any) -> Registration:
        if not isinstance(d, dict) or not isinstance(d.get("keys"), list):
            raise ValueError(f"a registration is {{\"keys\": [...], \"python\": [...]}}, not {d!r}")
        return cls(tuple(str(k) for k in d["keys"]), tuple(str(k) for k in d.get("python", ())),
                   tuple(str(k) for k in d.get("torch", ())))


def dispatcher_name(op: str) -> str:
    """``ns::name.default`` -> ``ns::name`` (the dispatcher's name of the default overload)."""
    return op[: -len(".default")] if op.endswith(".default") else op


def read(op: str) -> Registration | None:
    """The registrations of ``op`` (``ns::name.overload``) in this process; None if it is not an op here."""
    import torch

    name = dispatcher_name(op)
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    try:
        keys = tuple(k for k in KEYS if has(name, k))
    except RuntimeError:  # not (or no longer) an operator of this process
        return None
    python: set[str] = set()
    own: set[str] = set()
    root = _torch_source_root()
    try:
        dump = torch._C._dispatch_dump(name)
    except RuntimeError:  # pragma: no cover - the op existed a moment ago
        dump = ""
    for line in dump.splitlines():
        m = _DUMP_LINE.match(line)
        if m and m.group(1) in keys:
            if m.group(2).endswith(".py"):
                python.add(m.group(1))
            elif root and m.group(2).startswith(root):
                own.add(m.group(1))
    return Registration(keys, tuple(k for k in keys if k in python), tuple(k for k in keys if k in own))


@cache
def _torch_source_root() -> str:
    """The source folder PyTorch was built from, as its kernels' registrations name it
    (``/__w/pytorch/pytorch/`` for the wheels): a kernel registered from below it is PyTorch's own."""
    import torch

    for line in torch._C._dispatch_dump("aten::add.Tensor").splitlines():
        m = _DUMP_LINE.match(line)
        if m and m.group(1) == "CPU" and "/aten/src/" in m.group(2):
            return m.group(2).split("/aten/src/")[0].removesuffix("/build") + "/"
    return ""
