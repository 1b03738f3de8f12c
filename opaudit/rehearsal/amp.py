"""The simulated device's GradScaler where torch has none for it: torch < 2.3, before torch.amp.GradScaler(device).

The plugins of those releases shipped a copy of CUDA's (torch_npu 2.1's ``torch.npu.amp.GradScaler``, torch_mlu's
``torch.mlu.amp.GradScaler``): the same class with the device's tensors where CUDA's asserts ``is_cuda``. This is
that copy, as a subclass of ``torch.cuda.amp.GradScaler`` overriding the methods that assert it (``scale``,
``_unscale_grads_``, ``update`` with a tensor) and its constructor (which asks whether CUDA is available). From
torch 2.3 on the device module's ``amp.GradScaler`` is ``torch.amp.GradScaler(device)`` (rehearsal/device.py).

A program ``opaudit fix`` ported for a newer torch calls that torch's names, which a rehearsal on an older one
stands in for on the simulated device, as rehearsal/surface.py does for the target's runtime names:
``torch.amp.GradScaler(device)`` (DeviceTypeGradScaler) and the autocast functions of a device type
(device_type_autocast).
"""

from __future__ import annotations

from collections import abc, defaultdict
from typing import Any

import torch
from torch.cuda.amp import grad_scaler as _cuda

# the per-optimizer state of torch < 2.3's CUDA GradScaler (not a name of the newer torch.cuda.amp)
_refresh_per_optimizer_state = getattr(_cuda, "_refresh_per_optimizer_state", None)


class _Replicator:
    """A tensor's copy per device, made once each (torch's _MultiDeviceReplicator, without its CUDA assertion)."""

    def __init__(self, master: torch.Tensor) -> None:
        self.master = master
        self._per_device_tensors: dict[torch.device, torch.Tensor] = {}

    def get(self, device: torch.device) -> torch.Tensor:
        out = self._per_device_tensors.get(device)
        if out is None:
            out = self._per_device_tensors[device] = self.master.to(device=device, non_blocking=True, copy=True)
        return out


class GradScaler(_cuda.GradScaler):
    """``torch.<device>.amp.GradScaler`` of the simulated device on torch < 2.3 (module doc); the arguments are
    torch.cuda.amp.GradScaler's."""

    def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, enabled: bool = True) -> None:
        # (CUDA's constructor disables itself where CUDA is not available: built disabled, then enabled here)
        super().__init__(init_scale, growth_factor, backoff_factor, growth_interval, enabled=False)
        self._device = torch._C._get_privateuse1_backend_name()
        self._enabled = enabled
        if enabled:
            assert growth_factor > 1.0, "The growth factor must be > 1.0."
            assert backoff_factor < 1.0, "The backoff factor must be < 1.0."
            self._init_scale = init_scale
            self._scale = None
            self._growth_factor = growth_factor
            self._backoff_factor = backoff_factor
            self._growth_interval = growth_interval
            self._init_growth_tracker = 0
            self._growth_tracker = None
            self._per_optimizer_states = defaultdict(_refresh_per_optimizer_state)

    def scale(self, outputs: Any) -> Any:
        if not self._enabled:
            return outputs
        if isinstance(outputs, torch.Tensor):
            if self._scale is None:
                self._lazy_init_scale_growth_tracker(outputs.device)
            assert self._scale is not None
            return outputs * self._scale.to(device=outputs.device, non_blocking=True)
        stash: list[_Replicator] = []

        def apply_scale(val: Any) -> Any:
            if isinstance(val, torch.Tensor):
                if not stash:
                    if self._scale is None:
                        self._lazy_init_scale_growth_tracker(val.device)
                    assert self._scale is not None
                    stash.append(_Replicator(self._scale))
                return val * stash[0].get(val.device)
            if isinstance(val, abc.Iterable):
                iterable = map(apply_scale, val)
                return type(val)(iterable) if isinstance(val, (list, tuple)) else iterable
            raise ValueError("outputs must be a Tensor or an iterable of Tensors")

        return apply_scale(outputs)

    def _unscale_grads_(self, optimizer: Any, inv_scale: torch.Tensor, found_inf: torch.Tensor,
                        allow_fp16: bool) -> dict[torch.device, torch.Tensor]:
        per_device_inv_scale = _Replicator(inv_scale)
        per_device_found_inf = _Replicator(found_inf)
        grouped: dict[torch.device, dict[torch.dtype, list[torch.Tensor]]] = defaultdict(lambda: defaultdict(list))
        with torch.no_grad():
            for group in optimizer.param_groups:
                for param in group["params"]:
                    if param.grad is None:
                        continue
                    if not allow_fp16 and param.grad.dtype == torch.float16:
                        raise ValueError("Attempting to unscale FP16 gradients.")
                    if param.grad.is_sparse:
                        if param.grad.dtype is torch.float16:
                            param.grad = param.grad.coalesce()
                        to_unscale = param.grad._values()
                    else:
                        to_unscale = param.grad
                    grouped[to_unscale.device][to_unscale.dtype].append(to_unscale)
            for device, per_dtype in grouped.items():
                for grads in per_dtype.values():
                    torch._amp_foreach_non_finite_check_and_unscale_(grads, per_device_found_inf.get(device),
                                                                     per_device_inv_scale.get(device))
        return per_device_found_inf._per_device_tensors

    def update(self, new_scale: Any = None) -> None:
        if not self._enabled or not isinstance(new_scale, torch.Tensor):
            return super().update(new_scale)
        self._check_scale_growth_tracker("update")
        reason = f"new_scale should be a float or a 1-element {self._device} float32 tensor with requires_grad=False."
        assert new_scale.device.type == self._device and new_scale.dtype == torch.float32, reason
        assert new_scale.numel() == 1, reason
        assert new_scale.requires_grad is False, reason
        self._scale.copy_(new_scale)  # type: ignore[union-attr]
        self._per_optimizer_states = defaultdict(_refresh_per_optimizer_state)


class DeviceTypeGradScaler(GradScaler):
    """``torch.amp.GradScaler(device, ...)`` (torch >= 2.3) in a rehearsal on an older torch, where ``opaudit fix``
    wrote it: the simulated device's GradScaler, for its device type and the types mapped onto it (``names``)."""

    names: frozenset[str] = frozenset()

    def __init__(self, device: str = "cuda", *args: Any, **kwargs: Any) -> None:
        kind = _device_type(device)
        if kind != torch._C._get_privateuse1_backend_name() and kind not in self.names:
            raise RuntimeError(f"torch.amp.GradScaler({device!r}) needs torch >= 2.3, this is torch "
                               f"{torch.__version__.split('+')[0]}: the rehearsal stands in for it on the simulated "
                               "device only")
        super().__init__(*args, **kwargs)


def _device_type(device: Any) -> str:
    return device.type if isinstance(device, torch.device) else str(device).split(":")[0]


def device_type_autocast(name: str, aliases: frozenset[str]) -> dict[str, Any]:
    """For torch < 2.4, in a rehearsal: torch's autocast functions that take a device type (torch >= 2.4's
    ``torch.is_autocast_enabled(device_type)``, ``set_autocast_enabled``, ``get_autocast_dtype``,
    ``set_autocast_dtype``, which ``opaudit fix`` writes), the simulated device's (``name``, and the types in
    ``aliases`` mapped onto it) answered by its module, the CPU's and CUDA's by torch's own functions of that
    torch. Without a device type they are CUDA's, as there (the device's where ``cuda`` is mapped onto it), and so
    are ``get_autocast_gpu_dtype`` and ``set_autocast_gpu_dtype``. Name -> function, to set on torch."""
    module = getattr(torch, name)
    own: dict[str, Any] = {"is": torch.is_autocast_enabled, "set": torch.set_autocast_enabled,
           "get_dtype": torch.get_autocast_gpu_dtype, "set_dtype": torch.set_autocast_gpu_dtype}

    def kind_of(device_type: Any) -> str:
        kind = _device_type(device_type)
        return name if kind in aliases else kind

    def unsupported(kind: str) -> RuntimeError:
        return RuntimeError(f"autocast of device type {kind!r} in a rehearsal of {name} on torch "
                            f"{torch.__version__.split('+')[0]}: only {name}, cpu and cuda")

    def is_autocast_enabled(device_type: Any = "cuda") -> bool:
        kind = kind_of(device_type)
        if kind == name:
            return module.is_autocast_enabled()
        if kind == "cpu":
            return torch.is_autocast_cpu_enabled()
        if kind == "cuda":
            return own["is"]()
        raise unsupported(kind)

    def set_autocast_enabled(*args: Any) -> None:
        kind, on = ("cuda", *args) if len(args) == 1 else args
        kind = kind_of(kind)
        if kind == name:
            module.set_autocast_enabled(bool(on))
        elif kind == "cpu":
            torch.set_autocast_cpu_enabled(on)
        elif kind == "cuda":
            own["set"](on)
        else:
            raise unsupported(kind)

    def get_autocast_dtype(device_type: Any) -> torch.dtype:
        kind = kind_of(device_type)
        if kind == name:
            return module.get_autocast_dtype()
        if kind == "cpu":
            return torch.get_autocast_cpu_dtype()
        if kind == "cuda":
            return own["get_dtype"]()
        raise unsupported(kind)

    def set_autocast_dtype(device_type: Any, dtype: torch.dtype) -> None:
        kind = kind_of(device_type)
        if kind == name:
            module.set_autocast_dtype(dtype)
        elif kind == "cpu":
            torch.set_autocast_cpu_dtype(dtype)
        elif kind == "cuda":
            own["set_dtype"](dtype)
        else:
            raise unsupported(kind)

    return {"is_autocast_enabled": is_autocast_enabled, "set_autocast_enabled": set_autocast_enabled,
            "get_autocast_dtype": get_autocast_dtype, "set_autocast_dtype": set_autocast_dtype,
            "get_autocast_gpu_dtype": lambda: get_autocast_dtype("cuda"),
            "set_autocast_gpu_dtype": lambda dtype: set_autocast_dtype("cuda", dtype)}


def scaler_classes() -> tuple[Any, ...]:
    """The GradScaler classes whose ``scale`` a program's loss goes through on this torch: torch.amp.GradScaler
    (torch >= 2.3, the base of torch.cuda.amp's), else torch.cuda.amp's and the device's."""
    amp = getattr(torch.amp, "GradScaler", None)
    return (amp,) if amp is not None else (_cuda.GradScaler, GradScaler)
