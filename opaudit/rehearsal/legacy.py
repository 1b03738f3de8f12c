"""Legacy typed tensor classes on a device over host memory: ``torch.cuda.FloatTensor(n, 1)``,
``x.type(torch.cuda.HalfTensor)``, ``x.type('torch.cuda.LongTensor')``, ``isinstance(x, torch.cuda.FloatTensor)``,
``torch.set_default_tensor_type(torch.cuda.FloatTensor)``, as on a CUDA build.

The CPU build of PyTorch has the classes but refuses to make them ("type torch.cuda.FloatTensor not available"),
so GAN and tutorial programs written with them stop on the CUDA stand-in and in a rehearsal. Here each class is a
stand-in whose metaclass answers ``isinstance`` by dtype and device type and whose call builds the tensor with
the CPU class's own argument rules (sizes, a sequence, a storage) on the device. ``Tensor.type`` and
``set_default_tensor_type`` accept them (and their names as strings), as torch_npu's ``_npu_type`` does for its
``torch.npu`` classes (coverage_db/SOURCES.md#legacy-tensor-types).

Where a device's plugin has no such classes (vendors.toml ``legacy_types``), and where a rehearsal runs a port
with CUDA absent, a call of one raises a one-line error that names the device and the finding ``opaudit lint``
gives the construct (OA109; OA110 for ``set_default_tensor_type``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

from opaudit.rehearsal.patches import Patches
from opaudit.tracing import typed

# the typed classes of every backend, by name, and the dtype each holds (torch/csrc/tensor/python_tensor.cpp)
DTYPES = {"FloatTensor": torch.float32, "DoubleTensor": torch.float64, "HalfTensor": torch.float16,
          "BFloat16Tensor": torch.bfloat16, "ByteTensor": torch.uint8, "CharTensor": torch.int8,
          "ShortTensor": torch.int16, "IntTensor": torch.int32, "LongTensor": torch.int64, "BoolTensor": torch.bool}


class LegacyType(type):
    """The metaclass of a typed tensor class of the device (module doc)."""

    dtype: torch.dtype
    device_type: str  # the device type the class is named for ("cuda", "npu")
    runs_on: str | None  # the device its tensors go to; None: the class is refused (``refusal``)
    target: str  # the device's name in messages ("ascend@2.6.0")
    why: str  # why it is refused there
    matches: frozenset[str]  # device types whose tensors are its instances

    def refusal(cls, api: str | None = None) -> str:
        """One line: what, on which target, and the finding of ``opaudit lint`` that ports it."""
        code = "OA110" if api == "set_default_tensor_type" else "OA109"
        what = f"{api}({cls.__name__})" if api else cls.__name__
        return (f"{what}: {cls.why} on {cls.target} (opaudit lint: {code}; the port is a tensor with a dtype and "
                "a device)")

    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, torch.Tensor) and obj.dtype == cls.dtype and obj.device.type in cls.matches

    def __subclasscheck__(cls, sub: type) -> bool:
        return sub is cls

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        typed.heard(cls)
        if cls.runs_on is None:
            raise RuntimeError(cls.refusal())
        host = getattr(torch, cls.__name__.rsplit(".", 1)[1])(*args, **kwargs)
        return host.to(cls.runs_on)

    def __repr__(cls) -> str:
        return f"<class '{cls.__name__}'>"


def classes(device_type: str, runs_on: str | None, target: str, matches: Iterable[str],
            why: str = "no such class") -> dict[str, LegacyType]:
    """The typed classes ``torch.<device_type>.<Name>``; their tensors go to ``runs_on`` (None: refused)."""
    out = {}
    for name, dtype in DTYPES.items():
        cls = LegacyType(f"torch.{device_type}.{name}", (), {"__module__": f"torch.{device_type}"})
        cls.dtype, cls.device_type, cls.runs_on = dtype, device_type, runs_on
        cls.target, cls.why, cls.matches = target, why, frozenset(matches)
        out[name] = cls
    return out


def install(modules: dict[str, tuple[Any, dict[str, LegacyType]]],
            renamed: dict[str, str] | None = None) -> Callable[[], None]:
    """Set each module's classes (``{"cuda": (torch.cuda, classes)}``), and make ``Tensor.type`` and
    ``set_default_tensor_type`` take them; ``renamed`` maps a simulated device's name to the device type it
    stands for, which ``x.type()`` names (``torch.mps.FloatTensor``, not ``torch.mpssim.FloatTensor``).
    Returns the undo."""
    patch = Patches()
    by_name: dict[str, LegacyType] = {}
    for device_type, (module, found) in modules.items():
        for name, cls in found.items():
            patch(module, name, cls)
            by_name[f"torch.{device_type}.{name}"] = cls
    original_type = torch.Tensor.type
    original_default = torch.set_default_tensor_type

    def lookup(t: Any) -> LegacyType | None:
        if isinstance(t, LegacyType):
            return t
        return by_name.get(t) if isinstance(t, str) else None

    def type_(self: torch.Tensor, dtype: Any = None, non_blocking: bool = False, **kwargs: Any) -> Any:
        cls = lookup(dtype)
        if cls is None:
            named = original_type(self, dtype, non_blocking, **kwargs)
            if dtype is None and renamed and self.device.type in renamed:
                return named.replace(f"torch.{self.device.type}.", f"torch.{renamed[self.device.type]}.", 1)
            return named
        typed.heard(cls)
        if cls.runs_on is None:
            raise RuntimeError(cls.refusal("Tensor.type"))
        if self.dtype == cls.dtype and self.device.type in cls.matches:
            return self
        return self.to(device=cls.runs_on, dtype=cls.dtype, non_blocking=non_blocking)

    default_set: list[bool] = []  # a typed class of the device set the default device

    def set_default_tensor_type(t: Any) -> None:
        cls = lookup(t)
        if cls is None:
            if default_set:  # back to a host class: its tensors are made on the host again
                torch.set_default_device(None)
                default_set.clear()
            return original_default(t)
        typed.heard(cls)
        if cls.runs_on is None:
            raise RuntimeError(cls.refusal("set_default_tensor_type"))
        torch.set_default_dtype(cls.dtype)
        torch.set_default_device(cls.runs_on)
        default_set.append(True)
        return None

    def undo() -> None:
        if default_set:
            torch.set_default_device(None)
        patch.undo()

    type_.__doc__ = original_type.__doc__
    set_default_tensor_type.__doc__ = original_default.__doc__
    patch(torch.Tensor, "type", type_)
    patch(torch, "set_default_tensor_type", set_default_tensor_type)
    return undo

