"""CompositeImplicitAutograd functions a model calls, recorded above their decomposition.

The recorder sits below autograd, where a CompositeImplicitAutograd op (``rms_norm``, ``layer_norm``,
``linear``, ...) has already become the ops it decomposes into: no backend ever receives it, so the
dispatch-level trace cannot tell that the model needs it. Its PyTorch must still have it:
``nn.RMSNorm`` calls ``torch.rms_norm``, which PyTorch 2.4 added, and on a release built on 2.3 the
model stops at that call whatever the vendor's kernels.

While recording, each Python binding of such an op (``torch.rms_norm``, ``torch._C._nn.linear``,
``Tensor.reshape``, and every module-level name bound to the same builtin, such as
``torch.nn.functional.linear``) is replaced by a thin wrapper that counts the call as an ``api``
record (``aten::rms_norm.default``) with its phase, dtypes, module and line, then calls the builtin.
The audit judges an ``api`` record by whether the target's PyTorch has the op (Matrix.resolve_api);
it is not a kernel anyone must provide, and it is not counted among the trace's op calls.

Which ops: the public ops of the installed torch whose one overload (out= variants aside) has a
CompositeImplicitAutograd kernel and returns tensors: the overload of a call is then known without
parsing its arguments, and queries such as ``numel`` or ``is_floating_point`` are left out.
Device-selected composites (``scaled_dot_product_attention``, ``dropout``, ``batch_norm``, ...) are
left to choices.py, which records each call of them as a ``choice``.
"""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any

import torch

from opaudit.torchcompat import TensorBase
from opaudit.tracing.choices import choice_entries
from opaudit.tracing.patching import Patches, references, standing
from opaudit.tracing.shapes import shapes as shapes_of

_CIA = "CompositeImplicitAutograd"
_BUILTIN = (type(torch.relu), type(TensorBase.relu))  # builtin function, method descriptor
_current_node = torch._C._current_autograd_node


@cache
def _holders() -> tuple[tuple[Any, Mapping[str, Any]], ...]:
    """(object to patch, namespace to look names up in): torch's builtin namespaces and the Tensor class."""
    c = torch._C
    out: list[tuple[Any, Mapping[str, Any]]] = [(torch, vars(torch))]
    for name in ("_nn", "_linalg", "_special", "_fft"):
        sub = getattr(c, name, None)
        if sub is not None:
            out.append((sub, vars(sub)))
    out.append((torch.Tensor, vars(TensorBase)))  # a method set on torch.Tensor shadows TensorBase's
    return tuple(out)


@cache
def api_ops() -> dict[str, str]:
    """Base name -> op key (``"rms_norm"`` -> ``"aten::rms_norm.default"``) of every op of the installed
    torch with a single non-out overload, CompositeImplicitAutograd, and not a device-selected choice."""
    overloads: dict[str, list[str]] = {}
    for qualified in torch._C._dispatch_get_all_op_names():
        if not qualified.startswith("aten::"):
            continue
        name = qualified[6:]
        base, _, overload = name.partition(".")
        if overload == "out" or overload.endswith("_out") or base.startswith("_"):
            continue  # out= variants, and private ops: torch's internals, not a model's API
        overloads.setdefault(base, []).append(qualified)
    choices = {c.op.removeprefix("aten::") for _, _, c in choice_entries()}
    out = {}
    for base, names in overloads.items():
        if len(names) != 1 or base in choices:
            continue
        if torch._C._dispatch_has_kernel_for_dispatch_key(names[0], _CIA) and _returns_tensors(names[0]):
            overload = names[0].partition(".")[2] or "default"
            out[base] = f"aten::{base}.{overload}"
    return out


def _returns_tensors(qualified: str) -> bool:
    """Whether the op returns tensors only: ``numel``, ``is_floating_point`` or ``item`` query a tensor,
    they are not an API a model needs from a release."""
    base, _, overload = qualified.partition(".")
    for schema in torch._C._jit_get_schemas_for_operator(base):
        if schema.overload_name == overload:
            types = [str(r.type) for r in schema.returns]
            return bool(types) and all(t in ("Tensor", "List[Tensor]") for t in types)
    return False


@cache
def api_entries() -> tuple[tuple[Any, str, str], ...]:
    """(holder, attribute, op key) for every builtin binding of an api op in the installed torch."""
    ops = api_ops()
    out = []
    for holder, namespace in _holders():
        for base, key in ops.items():
            f = namespace.get(base)
            if f is not None and isinstance(f, _BUILTIN):
                out.append((holder, base, key))
    return tuple(out)


_scanned: dict[str, tuple[str, ...]] = {}  # module name -> its names bound to a watched builtin
_holding: dict[str, tuple[str, ...]] = {}  # the modules of _scanned that hold any


def _references(module: Any, originals: dict[int, Any]) -> tuple[str, ...]:
    if any(module is h for h, _ in _holders()):  # patched directly
        return ()
    return references(module, originals)


class _Active:
    """The recording the wrappers count into (None between recordings), and its thread."""

    rec: Any = None
    thread: int | None = None
    inside: str | None = None  # the api whose counted call is running (on the recording's thread)


_active = _Active()
# the last install: the bindings it found ((holder, attribute, value) of every entry and of every other name it
# replaced), what it replaced ((holder, attribute, whether the holder's own, builtin, wrapper)), and the number of
# loaded modules (one loaded since may bind a builtin under another name). While all are as they were, the next
# install makes the same replacements without resolving each entry again (a fifth of a recording's set-up).
_plan: list[Any] = [(), None, 0]
_wrappers: dict[int, tuple[Any, Callable]] = {}  # id(builtin) -> (builtin, its wrapper), made once per process


def _wrapper(original: Callable, key: str) -> Callable:
    """The wrapper of one builtin: built once per process, it counts into the active recording."""
    hit = _wrappers.get(id(original))
    if hit is not None and hit[0] is original:
        return hit[1]
    active = _active
    get_ident = threading.get_ident
    getframe = sys._getframe

    def api(*args, **kwargs):
        rec = active.rec
        # not between recordings, nor inside a choice (the CPU's pick), nor on another thread, nor from
        # a kernel written in Python (a meta kernel, a decomposition: the recorder's mode is popped then),
        # nor inside a counted call: a builtin hands its call to a torch function mode (a user's), which
        # may call this wrapper again
        if (rec is not None and rec.within is None and active.inside is None and get_ident() == active.thread
                and rec.is_active()):
            node = _current_node()
            if node is not None:  # called while the autograd engine runs a node (a recomputation)
                module, loc, _ = rec.seq.get(node._sequence_nr()) or (None, None, None)
                phase = "backward"
            else:
                phase, module, loc, _ = rec._where(getframe(1))
            sig, where = rec.call_signature(args, kwargs)
            k = (key, "api", phase, sig, module, loc, None, shapes_of(args, kwargs) if rec.shapes else None, where)
            counts = rec.counts
            counts[k] = counts.get(k, 0) + 1
            active.inside = key
            try:
                return original(*args, **kwargs)
            finally:
                active.inside = None
        return original(*args, **kwargs)

    try:
        functools.update_wrapper(api, original)
    except (AttributeError, TypeError):  # pragma: no cover - a builtin without some attribute
        pass
    api.__opaudit_original__ = original  # type: ignore[attr-defined]
    _wrappers[id(original)] = (original, api)
    return api


class ApiWatch(Patches):
    """Installs the wrappers for one recording (``rec``: a recorder.Recording) and takes them away."""

    def __init__(self, rec: Any):
        super().__init__()
        self.rec = rec
        self._outer: tuple[Any, int | None] = (None, None)

    def install(self) -> None:
        self._outer = (_active.rec, _active.thread)
        _active.rec, _active.thread = self.rec, threading.get_ident()
        checks, plan, modules = _plan
        if plan is not None and modules == len(sys.modules) and all(getattr(h, a) is v for h, a, v in checks):
            # every binding as the last install found it: the same replacements, without resolving each again
            for holder, attr, _, _, w in plan:
                setattr(holder, attr, w)
            self._saved.extend((h, a, own, b) for h, a, own, b, _ in plan)
            return
        before = [(h, a, getattr(h, a)) for h, a, _ in api_entries()]
        self._install()
        plan = [(h, a, own, b, getattr(h, a)) for h, a, own, b in self._saved]
        _plan[:] = [before + [(h, a, b) for h, a, _, b, _ in plan], plan, len(sys.modules)]

    def _install(self) -> None:
        wrappers: dict[int, Callable] = {}
        originals: dict[int, Any] = {}
        for holder, attr, key in api_entries():
            original = getattr(holder, attr)
            if id(original) not in standing:  # (a simulation's wrapper stands for the builtin: wrapped in turn)
                original = getattr(original, "__opaudit_original__", original)
                if not isinstance(original, _BUILTIN):  # replaced by someone else (a choice wrapper): left alone
                    continue
            w = wrappers.get(id(original))
            if w is None:
                w = wrappers[id(original)] = _wrapper(original, key)
                originals[id(original)] = original
            self.patch(holder, attr, w)
        # other names bound to the same builtins (torch.nn.functional.linear is torch._C._nn.linear)
        self.patch_aliases(originals, wrappers, _scanned, _holding, _references)

    def remove(self) -> None:
        super().remove()
        _active.rec, _active.thread = self._outer
