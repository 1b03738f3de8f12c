"""Stand-ins for a target's runtime surface: the names ``opaudit fix`` writes (``torch.npu.matmul.allow_hf32``,
``torch_npu.npu.mstx.range_push``, ``torch_npu.optim.NpuFusedAdamW``) exist in a rehearsal of its output.

What the names are and how each is answered is data (rules/surface.toml and [surface] of
rules/targets/<name>.toml); this module only builds the objects and sets them where a name is missing,
for the length of a simulation (names the device module or torch already has are left as they are):

- ``flag``: a setting, False until the script sets it; ``noop``: a function that does nothing;
- ``context``: a function returning a context that does nothing; ``true`` / ``false`` / ``text`` /
  ``list`` / ``dict`` / ``none``: functions returning that (``none``: the value None itself);
- ``generators``: the device's generators (the CPU's, where the simulated device keeps its data);
- ``backend``: the target's collective backend name; ``autocast_dtype`` / ``set_autocast_dtype``: the
  device's autocast dtype, as ``torch.get_autocast_dtype(device)`` answers it;
- ``as:<torch name>``: that object of torch (a fused optimizer runs as torch's own);
- ``unavailable``: calling it raises: the rehearsal cannot run it (a graph capture, a native build).
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import types
from collections.abc import Callable
from typing import Any

import torch

from opaudit import torchcompat
from opaudit.lint.catalogue import Target


class SurfaceUnavailable(RuntimeError):
    """A name of the target's runtime that the rehearsal has no stand-in for."""


def standin(name: str, kind: str, target: Target, device: str) -> Any:
    """The object answering ``name`` (a dotted name) of kind ``kind`` (module doc)."""
    simple: dict[str, Any] = {"flag": False, "none": None, "backend": target.dist_backend}
    if kind in simple:
        return simple[kind]
    if kind.startswith("as:"):
        return resolve(kind[3:])
    if kind == "generators":
        return (torch.default_generator,)
    returns: dict[str, Callable[[], Any]] = {"noop": lambda: None, "true": lambda: True, "false": lambda: False,
                                             "text": lambda: "", "list": list, "dict": dict,
                                             "context": contextlib.nullcontext}
    if kind in returns:
        make = returns[kind]

        def call(*args: Any, **kwargs: Any) -> Any:
            return make()
        call.__name__ = call.__qualname__ = name.rsplit(".", 1)[-1]
        return call
    if kind == "autocast_dtype":
        return lambda: torchcompat.autocast_dtype(device)
    if kind == "set_autocast_dtype":
        return lambda dtype: torchcompat.set_autocast_dtype(device, dtype)
    if kind == "unavailable":
        def unavailable(*args: Any, **kwargs: Any) -> Any:
            raise SurfaceUnavailable(f"{name} of {target.title} cannot run in a rehearsal on the CPU")
        return unavailable
    raise ValueError(f"rules/targets/{target.name}.toml: unknown stand-in kind {kind!r} for {name}")


def resolve(name: str) -> Any:
    """The object a dotted name names (modules imported on the way, as the code's own import would);
    raises AttributeError or ImportError where it does not exist."""
    parts = name.split(".")
    obj: Any = sys.modules.get(parts[0]) or importlib.import_module(parts[0])
    for i, part in enumerate(parts[1:], start=1):
        if not hasattr(obj, part) and isinstance(obj, types.ModuleType) and obj.__spec__ is not None \
                and obj.__spec__.loader is not None:
            with contextlib.suppress(ImportError):
                importlib.import_module(".".join(parts[:i + 1]))
        obj = getattr(obj, part)
    return obj


def install(target: Target, device: str, setattr_: Callable[[Any, str, Any], None],
            roots: dict[str, Any] | None = None) -> None:
    """Set the stand-ins of ``target``'s surface where their names are missing, through ``setattr_`` (the
    simulation's patcher, which undoes them). ``roots``: top-level modules not imported yet that an import
    will return (the plugin's stand-in, device._StandIn). Names under a package that is neither imported
    nor in ``roots`` are skipped."""
    for name, kind in target.surface.items():
        parts = name.split(".")
        holder: Any = sys.modules.get(parts[0]) or (roots or {}).get(parts[0])
        if holder is None:
            continue
        for i, part in enumerate(parts[1:-1], start=1):
            nxt = getattr(holder, part, None)
            if nxt is None:
                nxt = types.ModuleType(".".join(parts[:i + 1]), f"a stand-in in a simulation of {target.title}")
                setattr_(holder, part, nxt)
            holder = nxt
        if not hasattr(holder, parts[-1]):
            setattr_(holder, parts[-1], standin(name, kind, target, device))
