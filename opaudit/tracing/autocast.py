"""Mixed precision as an accelerator runs it: CUDA's autocast policy, applied on CPU, meta and fake.

CPU autocast follows another policy than CUDA (on CPU softmax, layer_norm, exp or sum stay in low
precision), and meta tensors have no autocast at all. Accelerator plugins copy CUDA's lists. So,
for the duration of a trace, this module registers Python kernels on the AutocastCPU key that
implement CUDA's policy (coverage_db/curated/autocast_policy.toml), makes every other AutocastCPU
kernel a fallthrough, and includes the AutocastCPU key for meta tensors too. Leaving the context
removes the kernels, and torch's own are back.
"""

from __future__ import annotations

import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import torch

from opaudit import torchcompat
from opaudit.data import load_toml

_KEY = torch._C.DispatchKey.AutocastCPU
AMP_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


@dataclass
class Policy:
    """op key (``aten::softmax.int``) -> policy name, for the ops the installed torch registers."""

    ops: dict[str, str]
    append_dtype: dict[str, str]  # registered norm overload -> the dtype-taking overload
    unknown: list[str] = field(default_factory=list)  # on AutocastCUDA here, not in the data


def _key(name: str) -> str:
    return f"aten::{name}"


@cache
def cuda_policy() -> Policy:
    data = load_toml("coverage_db", "curated/autocast_policy.toml")["policy"]
    registered = set(torch._C._dispatch_get_registrations_for_dispatch_key("AutocastCUDA"))
    ops: dict[str, str] = {}
    append: dict[str, str] = {}
    for policy, names in data.items():
        for name in names:
            if policy == "fp32_append_dtype":
                name, _, target = name.partition("=")
                append[_key(name)] = target
            if _key(name) in registered:
                ops[_key(name)] = policy
    unknown = sorted(registered - set(ops))
    return Policy(ops, append, unknown)


def _overload(key: str) -> torch._ops.OpOverload:
    name = key.removeprefix("aten::")
    base, _, ov = name.partition(".")
    return getattr(getattr(torch.ops.aten, base), ov or "default")


class _Caster:
    """The casts of one autocast policy, with torch's cache of low-precision copies of weights
    (aten/src/ATen/autocast_mode.cpp, cached_cast): a cast to the low precision of a float32 leaf that
    requires grad (no view) is made once and reused until the outermost autocast region exits
    (``clear``, called from ``torch.clear_autocast_cache``). Two rules are stricter than torch's: a cast
    is cached only while grad mode is on (a copy made under ``no_grad`` has no autograd history, and
    reusing it in a training step would leave its weight without a gradient), and a copy is reused only
    while its weight is unchanged (same object, same version)."""

    def __init__(self, low: torch.dtype | Callable[[], torch.dtype]):
        self._low = low
        self.cache: dict[int, tuple[torch.Tensor, int, torch.Tensor]] = {}

    @property
    def low(self) -> torch.dtype:
        """The region's low precision (read at each call where it is the device's autocast dtype)."""
        return self._low if isinstance(self._low, torch.dtype) else self._low()

    def clear(self) -> None:
        self.cache.clear()

    @staticmethod
    def eligible(t: Any) -> bool:
        return isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != torch.float64

    def cast(self, t: Any, dtype: torch.dtype, low: torch.dtype | None = None) -> Any:
        """``t`` in ``dtype`` (``low``: the region's low precision, when the caller has read it)."""
        if not isinstance(t, torch.Tensor):
            if isinstance(t, (list, tuple)):
                return type(t)(self.cast(x, dtype, low) for x in t)
            return t
        have = t.dtype
        if have == dtype or have == torch.float64 or not t.is_floating_point():
            return t
        if (have == torch.float32 and t.requires_grad and t.is_leaf and dtype == (low or self.low)
                and torch.is_grad_enabled() and torch.is_autocast_cache_enabled() and not t._is_view()
                and not torch.is_inference_mode_enabled()):
            hit = self.cache.get(id(t))
            if hit is not None and hit[0] is t and hit[1] == t._version:
                return hit[2]
            out = t.to(dtype)
            self.cache[id(t)] = (t, t._version, out)
            return out
        return t.to(dtype)

    def widest(self, args) -> torch.dtype:
        out = self.low
        for a in args:
            for t in a if isinstance(a, (list, tuple)) else (a,):
                if self.eligible(t) and t.dtype == torch.float32:
                    return torch.float32
        return out


def _kernel(op: torch._ops.OpOverload, policy: str, caster: _Caster, target, exclude: torch._C.DispatchKeySet):
    if policy == "lower_precision_fp":
        def k(*args, **kwargs):
            low = caster.low
            cast = caster.cast
            with torch._C._ExcludeDispatchKeyGuard(exclude):
                if kwargs:
                    return op(*[cast(a, low, low) for a in args], **{n: cast(v, low, low) for n, v in kwargs.items()})
                return op(*[cast(a, low, low) for a in args])
    elif policy == "fp32":
        def k(*args, **kwargs):
            cast = caster.cast
            f32 = torch.float32
            with torch._C._ExcludeDispatchKeyGuard(exclude):
                if kwargs:
                    return op(*[cast(a, f32) for a in args], **{n: cast(v, f32) for n, v in kwargs.items()})
                return op(*[cast(a, f32) for a in args])
    elif policy == "fp32_set_opt_dtype":
        names = [a.name for a in op._schema.arguments]
        pos = names.index("dtype") if "dtype" in names else None

        def k(*args, **kwargs):
            with torch._C._ExcludeDispatchKeyGuard(exclude):
                if args and caster.eligible(args[0]):
                    if pos is not None and len(args) > pos:
                        if args[pos] is None:
                            args = (*args[:pos], torch.float32, *args[pos + 1:])
                    elif kwargs.get("dtype") is None:
                        kwargs = {**kwargs, "dtype": torch.float32}
                return op(*args, **kwargs)
    elif policy == "fp32_append_dtype":
        schema = op._schema.arguments

        def k(*args, **kwargs):
            with torch._C._ExcludeDispatchKeyGuard(exclude):
                full = list(args)
                for a in schema[len(args):]:
                    full.append(kwargs.get(a.name, a.default_value))
                out_type = torch.float32 if caster.eligible(args[0]) else args[0].dtype
                return target(*full, dtype=out_type)
    elif policy == "promote":
        def k(*args, **kwargs):
            with torch._C._ExcludeDispatchKeyGuard(exclude):
                to = caster.widest((*args, *kwargs.values()))
                return op(*(caster.cast(a, to) for a in args),
                          **{n: caster.cast(v, to) for n, v in kwargs.items()})
    elif policy == "banned":
        def k(*args, **kwargs):
            raise RuntimeError(
                "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast "
                "(CUDA autocast refuses them); use binary_cross_entropy_with_logits / BCEWithLogitsLoss"
            )
    else:  # pragma: no cover - the data file names only the policies above
        raise ValueError(f"unknown autocast policy {policy!r}")
    return k


# the casters of the installed policies: torch.clear_autocast_cache (which autocast.__exit__ calls when the
# outermost region exits) clears theirs too, while any is installed
_installed: list[_Caster] = []
_torch_clear: list[Callable[[], None]] = []


def _clear_autocast_cache() -> None:
    _torch_clear[0]()
    for caster in _installed:
        caster.clear()


def _hook_clear(caster: _Caster) -> None:
    if not _installed:
        _torch_clear.append(torch.clear_autocast_cache)
        torch.clear_autocast_cache = _clear_autocast_cache
    _installed.append(caster)


def _unhook_clear(caster: _Caster) -> None:
    caster.clear()
    if caster in _installed:
        _installed.remove(caster)
    if not _installed and _torch_clear:
        torch.clear_autocast_cache = _torch_clear.pop()


class CudaAutocast:
    """Installs CUDA's autocast policy on an autocast key (AutocastCPU; a simulated device's
    AutocastPrivateUse1, whose low precision is the device's autocast dtype: ``low``) while it is
    installed (see module doc)."""

    def __init__(self, dtype: torch.dtype, *, key: str = "AutocastCPU",
                 low: Callable[[], torch.dtype] | None = None):
        self.dtype = dtype
        self.key = key
        self.policy = cuda_policy()
        self.caster = _Caster(low or dtype)
        self._lib: torch.library.Library | None = None

    def install(self) -> None:
        """Register the policy's kernels; the key's other registered kernels (torch's own CPU policy) step
        aside."""
        lib = torch.library.Library("aten", "IMPL")
        ours = set()
        exclude = torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, self.key))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Overriding a previously registered kernel"
            for key, policy in self.policy.ops.items():
                op = _overload(key)
                target = _overload(_key(self.policy.append_dtype[key])) if policy == "fp32_append_dtype" else None
                lib.impl(key.removeprefix("aten::"), _kernel(op, policy, self.caster, target, exclude), self.key)
                ours.add(key)
            for key in torch._C._dispatch_get_registrations_for_dispatch_key(self.key):
                if key.startswith("aten::") and key not in ours:
                    lib.impl(key.removeprefix("aten::"), torch.library.fallthrough_kernel, self.key)
        self._lib = lib
        _hook_clear(self.caster)

    def uninstall(self) -> None:
        if self._lib is not None:
            torchcompat.destroy_library(self._lib)
            self._lib = None
            _unhook_clear(self.caster)

    @contextmanager
    def region(self) -> Iterator[None]:
        """A forward pass under autocast (the equivalent of ``with torch.autocast("cuda"):``)."""
        was = _cpu_enabled()
        _set_cpu_enabled(True)
        try:
            with torch._C._IncludeDispatchKeyGuard(_KEY):
                yield
        finally:
            _set_cpu_enabled(was)
            self.caster.clear()


def _cpu_enabled() -> bool:
    try:
        return torch.is_autocast_enabled("cpu")
    except TypeError:  # torch < 2.4
        return torch.is_autocast_cpu_enabled()


def _set_cpu_enabled(on: bool) -> None:
    try:
        torch.set_autocast_enabled("cpu", on)
    except TypeError:  # torch < 2.4
        torch.set_autocast_cpu_enabled(on)


def policy_dtypes(op: str, dtypes: tuple, low: torch.dtype) -> tuple:
    """The dtypes a call of ``op`` (a choice record) runs in under the CUDA policy."""
    policy = cuda_policy().ops.get(op.removesuffix(".default"))
    floating = (torch.float32, torch.float16, torch.bfloat16)
    if policy == "lower_precision_fp":
        return tuple(low if d in floating else d for d in dtypes)
    if policy == "fp32":
        return tuple(torch.float32 if d in floating else d for d in dtypes)
    return dtypes


NAMED = "_opaudit_named"  # set on an autocast object before its __init__: the dtype the program named (None: none)


def legacy_autocast(device_type: str, dtype: torch.dtype | None = None, *, default: torch.dtype = torch.float16,
                    **kwargs: Any) -> Any:
    """``torch.autocast(device_type)`` for a device module's ``amp.autocast(enabled, dtype=float16, ...)`` (the
    signature of torch.cuda.amp.autocast, which a rehearsal's device module copies), in ``default`` where the program
    names no dtype (CUDA's float16; a rehearsed device's own default, as the port ``torch.amp.autocast(device)``
    takes), telling a recording (:class:`RegionWatch`) which dtype the program named."""
    cls = torch.amp.autocast_mode.autocast
    obj = cls.__new__(cls)
    obj.__dict__[NAMED] = dtype
    cls.__init__(obj, device_type, dtype=default if dtype is None else dtype, **kwargs)
    return obj


class RegionWatch:
    """The autocast regions a recorded program enters for CUDA: ``torch.autocast.__init__`` wrapped for one
    recording, each enabled region of a device type the recording stands for CUDA counted as an ``api`` record of
    ``torch::autocast`` with the dtype the program named (none: the device's default), so that the audit judges the
    region on each target (matrix/amp.py). ``torch.cuda.amp.autocast`` passes float16 on where the program names no
    dtype, and is ported to ``torch.amp.autocast(device)``, whose dtype is then the device's default: its own
    ``__init__`` is wrapped too, to see what the program named (a rehearsal's device module, through
    :func:`legacy_autocast`). Regions opaudit enters itself (``scan --amp``) are recorded the same way.

    ``override(device type, dtype named)`` says how the region runs instead, in a re-trace that follows another
    device's autocast (matrix/amp.py ``runs_in``): ``"off"`` (torch turns it off there), a dtype name, or None (as
    asked). The region is recorded as the program wrote it all the same."""

    def __init__(self, note: Callable[[str, str | None, Any], None],
                 override: Callable[[str, str | None], str | None] | None = None):
        self._note = note  # (the device type asked for; the dtype named, or None; the caller's frame)
        self._override = override
        self._saved: list[tuple[Any, Any]] = []

    def install(self) -> None:
        base = torch.amp.autocast_mode.autocast
        legacy = getattr(getattr(torch.cuda, "amp", None), "autocast", None)
        note, override, thread = self._note, self._override, threading.get_ident()
        original = base.__dict__["__init__"]

        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            named = self.__dict__.pop(NAMED, _UNSET)
            original(self, *args, **kwargs)
            if getattr(self, "_enabled", False) and threading.get_ident() == thread:
                if named is _UNSET:
                    named = kwargs.get("dtype", args[1] if len(args) > 1 else None)
                asked = str(kwargs.get("device_type", args[0] if args else None))
                name = str(named).removeprefix("torch.") if named is not None else None
                note(asked, name, sys._getframe(1))
                instead = override(asked, name) if override is not None else None
                if instead == "off":  # as torch does for a dtype the device does not list: the region runs in float32
                    self._enabled = False
                elif instead is not None:
                    self.fast_dtype = getattr(torch, instead)

        self._wrap(base, __init__)
        if isinstance(legacy, type) and issubclass(legacy, base) and "__init__" in legacy.__dict__:
            own = legacy.__dict__["__init__"]

            def legacy_init(self: Any, *args: Any, **kwargs: Any) -> None:
                # torch.cuda.amp.autocast(enabled=True, dtype=torch.float16, cache_enabled=True)
                self.__dict__[NAMED] = kwargs.get("dtype", args[1] if len(args) > 1 else None)
                own(self, *args, **kwargs)

            self._wrap(legacy, legacy_init)

    def _wrap(self, cls: type, wrapper: Any) -> None:
        wrapper.__wrapped__ = cls.__dict__["__init__"]
        self._saved.append((cls, cls.__dict__["__init__"]))
        cls.__init__ = wrapper  # type: ignore[misc]

    def remove(self) -> None:
        for cls, original in reversed(self._saved):
            cls.__init__ = original  # type: ignore[misc]
        self._saved.clear()


_UNSET = object()
