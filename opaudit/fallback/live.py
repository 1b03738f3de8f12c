"""Fallback kernels on a live backend: ``opaudit.fallback.install("ascend")``.

On a machine with the plugin, the dispatcher knows which aten ops have no kernel for the device's
dispatch key (nor a composite one that reaches it). ``install`` registers, for each of them, a Python
kernel on that key that runs the op another way (choose.Chooser): a decomposition into ops the device
has, or a CPU round trip (roundtrip.RoundTrip). Every call is counted in ``Installation.stats``.

    with opaudit.fallback.install("ascend", force_cpu=["aten::nonzero"]) as fb:
        train_step()
    print("\\n".join(fb.stats.lines()))

``uninstall()`` (or leaving the ``with`` block) removes exactly these kernels: the dispatcher is as it
was. ``OPAUDIT_FALLBACK=ascend`` lets an unmodified script opt in (opaudit.fallback.autostart).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import time
import warnings
from collections.abc import Callable, Iterable
from typing import Any

import torch

from opaudit import torchcompat
from opaudit.errors import InputError, describe_exception
from opaudit.fallback.choose import (
    INFRASTRUCTURE,
    OVERRIDEABLE,
    Chooser,
    decomposing,
    op_name,
    overload_of,
    plain_name,
    run_decomposition,
)
from opaudit.fallback.roundtrip import RoundTrip, outputs, reference, rel_error
from opaudit.fallback.stats import OpStat, Stats, user_line
from opaudit.matrix.probe import installed_torch_ops


class FallbackFailed(RuntimeError):
    """An op's fallback raised: names the op, the target and the user's line."""


_BUILTIN_KEYS = {"cuda": "CUDA", "xpu": "XPU", "mps": "MPS", "hpu": "HPU", "mtia": "MTIA", "xla": "XLA",
                 "privateuseone": "PrivateUse1"}


def live_key(device_type: str) -> str | None:
    """The dispatch key of ``device_type`` when it exists in this process (a plugin registered it)."""
    if device_type == torch._C._get_privateuse1_backend_name() and device_type != "privateuseone":
        return "PrivateUse1"
    return _BUILTIN_KEYS.get(device_type)


def resolve_target(target: str) -> tuple[str, str, str | None]:
    """(name shown, device type, module that registers it) of a target name or a device type. A vendor named
    without a release is the release this process runs (Database.installed): the installed plugin's version, else
    the newest built for this torch's line (torch_npu 2.1.0.postN beside torch 2.1, not the newest release)."""
    from opaudit.matrix import load_database

    db = load_database()
    try:
        entry = db.find(target)
        if "@" not in target:
            entry = db.installed(entry.vendor, _plugin_version(db.release(entry).import_name), torch.__version__)
        release = db.release(entry)
    except InputError:
        if live_key(target) is not None:
            return target, target, None
        raise
    return release.key, release.device_type, release.import_name


def _plugin_version(module: str | None) -> str | None:
    """The installed version of the distribution of a vendor's plugin module (torch_npu), or None."""
    if not module:
        return None
    try:
        return importlib.metadata.version(module)
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return None


def missing_ops(key: str) -> list[str]:
    """aten ops that fail on ``key`` today: no kernel, not even a composite one that reaches it, or a stub."""
    found = []
    for full in torch._C._dispatch_get_all_op_names():
        if not full.startswith("aten::"):
            continue
        name = full.removeprefix("aten::")
        base = name.split(".")[0]
        if name in INFRASTRUCTURE or base in INFRASTRUCTURE:
            continue
        if base in OVERRIDEABLE and not torch._C._dispatch_has_kernel_for_dispatch_key(full, key):
            found.append(name)
        elif not torch._C._dispatch_has_computed_kernel_for_dispatch_key(full, key):
            found.append(name)
    return found


class Installation:
    """The kernels ``install`` registered; a context manager that uninstalls on exit."""

    def __init__(self, target: str, device_type: str, key: str, *, force_cpu: Iterable[str] = (),
                 forbid: Iterable[str] = (), check_numerics: bool = False):
        self.target, self.device_type, self.key = target, device_type, key
        self.stats = Stats(target, device_type, "installed")
        self.check_numerics = check_numerics
        direct = {n.removeprefix("aten::").split(".")[0]
                  for n in torch._C._dispatch_get_registrations_for_dispatch_key(key) if n.startswith("aten::")}
        forced = []
        for name in force_cpu:  # checked before anything is registered: a bad name leaves nothing behind
            plain = plain_name(name)
            if plain in INFRASTRUCTURE or plain.split(".")[0] in INFRASTRUCTURE:
                raise InputError(f"force_cpu: {name} is what a CPU round trip itself needs on the device",
                                 hint="allocation, copies and as_strided cannot be sent to the CPU")
            try:
                forced.append(overload_of(plain))
            except AttributeError:
                raise InputError(f"force_cpu: no aten op {name!r}") from None
        self.missing = missing_ops(key)
        lacking = set(self.missing)
        tops = installed_torch_ops()

        def has(name: str) -> bool:  # a structured functional op runs only where its out= op does
            op = tops.get(name) if tops is not None else None
            return name not in lacking and not (op is not None and op.delegate and op.delegate in lacking)

        self.chooser = Chooser(has, force_cpu=force_cpu, forbid=forbid,
                               has_base=lambda base: base in direct, out_variants=False)
        self._lib: torch.library.Library | None = torch.library.Library("aten", "IMPL")
        self.registered: list[str] = []
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "Overriding a previously registered kernel" (the stubs)
                for name in self.missing:
                    try:
                        op = overload_of(name)
                    except AttributeError:
                        continue
                    self._lib.impl(name, self._kernel(op), key)
                    self.registered.append(name)
                # force_cpu may name ops the device has: they are sent to the CPU too
                for op in forced:
                    if op_name(op) not in self.registered:
                        self._lib.impl(op_name(op), self._kernel(op), key)
                        self.registered.append(op_name(op))
        except BaseException:
            torchcompat.destroy_library(self._lib)
            self._lib = None
            raise

    # -- the kernels ------------------------------------------------------------------------------------
    def _kernel(self, op: torch._ops.OpOverload):
        name = op_name(op)
        trip = RoundTrip(op)
        stats = self.stats

        def kernel(*args: Any, **kwargs: Any) -> Any:
            choice = self.chooser.confirm(op, args, kwargs)
            path = choice.path
            if path == "decomposition" and decomposing(op):
                path = "cpu"  # a decomposition that calls its own op: the inner call goes through the CPU
            s = stats.op(name, path, choice.reason if path == choice.path else "called by its own decomposition")
            s.calls += 1
            if path == "forbidden":
                stats.errors.append(f"{name}: fallback forbidden")
                raise NotImplementedError(
                    f"Could not run 'aten::{name}' with arguments from the '{self.device_type}' backend: "
                    f"the device has no kernel for it and opaudit's fallback is forbidden for it")

            def round_trip() -> Any:
                moved = [0, 0]
                out = trip(args, kwargs, moved)
                s.to_host += moved[0]
                s.to_device += moved[1]
                return out

            return run_fallback(op, path, s, stats, self.target, args, kwargs, round_trip,
                                check=self.check_numerics, host=_host)

        return kernel

    # -- lifetime ---------------------------------------------------------------------------------------
    @property
    def installed(self) -> bool:
        return self._lib is not None

    def uninstall(self) -> None:
        """Remove every kernel this installation registered: the dispatcher is back as it was."""
        global _current
        if self._lib is not None:
            torchcompat.destroy_library(self._lib)
            self._lib = None
            self.stats.finish()
        if _current is self:
            _current = None

    def __enter__(self) -> Installation:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.uninstall()


def run_fallback(op: torch._ops.OpOverload, path: str, s: OpStat, stats: Stats, target: str, args: tuple,
                 kwargs: dict[str, Any], cpu: Callable[[], Any], *, check: bool,
                 host: Callable[[torch.Tensor], torch.Tensor],
                 passthrough: tuple[type[BaseException], ...] = ()) -> Any:
    """One call of ``op`` on a fallback ``path``: its decomposition, else ``cpu()`` (the CPU round trip);
    timed into ``s``, compared with the CPU kernel when ``check`` (``host`` gives a tensor's data on the
    host), and an error turned into FallbackFailed, except ``passthrough`` ones, which stay what they are."""
    t0 = time.perf_counter()
    try:
        expected = None
        if check and torch.Tag.nondeterministic_seeded not in op.tags:
            expected = reference(op, args, kwargs, host)
        out = run_decomposition(op, args, kwargs) if path == "decomposition" else cpu()
        if expected is not None:
            stats.numerics(s, rel_error(outputs(op, out, args, kwargs), expected, host))
        return out
    except FallbackFailed:
        raise
    except passthrough:
        raise
    except Exception as e:
        raise failed(s, target, e, stats) from e
    finally:
        s.seconds += time.perf_counter() - t0


def failed(s: OpStat, target: str, e: Exception, stats: Stats) -> FallbackFailed:
    """The error of a fallback that raised: the op, its path, the target and the user's line of this call
    (kept in the statistics' errors too)."""
    line = user_line()
    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    msg = (f"opaudit's fallback of aten::{s.op} ({s.path}) on {target}" + (f" at {line}" if line else "")
           + f" failed: {type(e).__name__}: {first}")
    stats.errors.append(msg)
    return FallbackFailed(msg)


def _host(t: torch.Tensor) -> torch.Tensor:
    return t.to("cpu") if t.device.type != "cpu" else t


_current: Installation | None = None


def install(target: str, *, force_cpu: Iterable[str] = (), forbid: Iterable[str] = (),
            check_numerics: bool = False, import_plugin: bool = True) -> Installation:
    """Register fallback kernels for every op the live ``target`` device lacks (module doc).

    ``target``: a vendor or release (``ascend``, ``ascend@2.6.0.post5``: its device type and plugin
    come from coverage_db) or a device type that exists in this process (``npu``). ``force_cpu``: ops
    sent to the CPU even where the device has them or a decomposition exists; ``forbid``: ops that must
    not fall back (they fail as they would without opaudit). ``check_numerics``: compare every fallback
    call with the CPU kernel on copies of its inputs (slow) and keep the worst relative error per op.
    """
    global _current
    if _current is not None and _current.installed:
        raise InputError(f"opaudit's fallback is already installed for {_current.target}",
                         hint="uninstall() it first, or use it as a context manager")
    shown, device_type, module = resolve_target(target)
    key = live_key(device_type)
    if key is None and module and import_plugin:
        try:
            importlib.import_module(module)
        except ImportError as e:
            raise InputError(f"{shown}: the {device_type!r} device does not exist in this process and {module} "
                             f"cannot be imported ({e})",
                             hint=f"install the vendor's plugin ({module}), or rehearse on a CPU with "
                                  f"opaudit run --simulate {shown}") from None
        except Exception as e:  # noqa: BLE001 - a plugin that is there but fails to load: its error, not opaudit's
            raise InputError(f"{shown}: importing the vendor's plugin {module} failed: {describe_exception(e)}",
                             hint=f"check that {module} loads in this environment (python -c 'import {module}'), "
                                  f"or rehearse on a CPU with opaudit run --simulate {shown}") from None
        key = live_key(device_type)
    if key is None:
        raise InputError(f"{shown}: no {device_type!r} device in this process",
                         hint=f"import the plugin that registers it{f' ({module})' if module else ''} first, "
                              f"or rehearse on a CPU with opaudit run --simulate")
    _current = Installation(shown, device_type, key, force_cpu=force_cpu, forbid=forbid,
                            check_numerics=check_numerics)
    return _current


def uninstall() -> None:
    """Remove the installed fallback, if any."""
    if _current is not None:
        _current.uninstall()


def current() -> Installation | None:
    return _current if _current is not None and _current.installed else None
