"""Which way an op the target lacks runs: a decomposition into other ops, or a CPU round trip.

Decompositions come from PyTorch's own tables, first that has the op:

1. ``torch._decomp.core_aten_decompositions()`` (into the core ATen opset);
2. ``torch._decomp.decomposition_table`` (all registered decompositions, some into ``prims::``);
3. opaudit's references for ops the CPU has no kernel for (references.py: the fused RNN cells, ...);
4. ``OpOverload.decompose()`` for ops with a CompositeImplicitAutograd kernel.

A forward op and the backward op its derivative formula calls (derivatives.yaml) take the same way or
neither is decomposed: the backward of ``_scaled_dot_product_flash_attention_for_cpu`` reads the
``logsumexp`` its forward saved, and a decomposed forward leaves something else there (a relative
gradient error of ~200; tests/fallback/test_install.py measures the pairs). So a pair is decomposed only
when every member the target lacks has a decomposition and no member runs natively; otherwise its
missing members go through the CPU, whose kernels compute what their partners expect.

Some ops are never fallen back: allocation, copies and ``as_strided`` are what a CPU round trip itself
needs on the device (INFRASTRUCTURE).
"""

from __future__ import annotations

import re
import threading
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import torch

from opaudit.fallback.references import has_cpu_kernel, reference
from opaudit.fallback.stats import PATH_TEXT, PATHS  # noqa: F401 (the paths Choice.path names)

# ops a device must have for anything to run on it, the fallback included: moving data there and back
INFRASTRUCTURE = frozenset({
    "empty.memory_format", "empty_strided", "_copy_from", "_copy_from_and_resize", "as_strided", "resize_",
    "set_.source_Storage", "set_.source_Storage_storage_offset", "set_.source_Tensor", "set_",
})
# stubs that a backend overrides: their CPU round trip runs the op they stand for
OVERRIDEABLE = {
    "convolution_overrideable": "convolution",
    "convolution_backward_overrideable": "convolution_backward",
}


def op_name(op: torch._ops.OpOverload) -> str:
    """``aten::add.Tensor`` -> ``add.Tensor``; ``aten::relu.default`` -> ``relu`` (the matrix's names)."""
    name = op._schema.name.removeprefix("aten::")
    overload = op._overloadname
    return name if overload == "default" else f"{name}.{overload}"


def overload_of(name: str) -> torch._ops.OpOverload:
    """``add.Tensor`` or ``aten::add.Tensor`` -> the OpOverload (``relu`` -> ``relu.default``)."""
    base, _, overload = name.removeprefix("aten::").partition(".")
    return getattr(getattr(torch.ops.aten, base), overload or "default")


@cache
def _tables() -> tuple[Any, dict]:
    from torch._decomp import core_aten_decompositions, decomposition_table

    return core_aten_decompositions(), decomposition_table


def decomposition(op: torch._ops.OpOverload) -> Callable[..., Any] | None:
    """A Python decomposition of ``op``, from the first table that has one (module doc), else None."""
    core, table = _tables()
    if op in core:
        return core[op]
    fn = table.get(op)
    if fn is not None:
        return fn
    fn = reference(op)  # ops without a CPU kernel: opaudit's reference, written in aten ops
    if fn is not None:
        return fn
    try:
        implicit = torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeImplicitAutograd")
    except RuntimeError:  # an overload of TorchScript only (tanh.int): not an op of the dispatcher
        return None
    return op.decompose if implicit else None


_impls: dict[Any, Callable[..., Any] | None] = {}


def cpu_impl(op: Any) -> Callable[..., Any] | None:
    """What runs ``op`` on CPU tensors: the op itself where the CPU has a kernel, else opaudit's reference
    (references.py), else PyTorch's decomposition of it, else None (nothing can: a limit of the rehearsal)."""
    try:
        return _impls[op]
    except KeyError:
        pass
    impl: Callable[..., Any] | None = op
    if isinstance(op, torch._ops.OpOverload) and not has_cpu_kernel(op):
        impl = reference(op)
        if impl is None:
            impl = decomposition(op)
    _impls[op] = impl
    return impl


_decomposing = threading.local()  # .ops: the ops being decomposed on this thread


def decomposing(op: torch._ops.OpOverload) -> bool:
    """Whether ``op`` is being decomposed on this thread: a decomposition that calls its own op (the
    caller sends that inner call another way)."""
    return op in getattr(_decomposing, "ops", ())


def run_decomposition(op: torch._ops.OpOverload, args: tuple, kwargs: dict[str, Any]) -> Any:
    """``op`` through its decomposition."""
    fn = decomposition(op)
    assert fn is not None
    ops = getattr(_decomposing, "ops", None)
    if ops is None:
        ops = _decomposing.ops = set()
    ops.add(op)
    try:
        return fn(*args, **kwargs)
    finally:
        ops.discard(op)


_CALL = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*backward[A-Za-z0-9_]*)\s*\(")


@cache
def backward_pairs() -> dict[str, frozenset[str]]:
    """op base name -> the base names it is paired with (forward <-> the backward ops its formula calls)."""
    import torchgen
    import yaml

    path = Path(torchgen.__file__).parent / "packaged" / "autograd" / "derivatives.yaml"
    if not path.is_file():  # a stripped install: say what changes rather than change it silently
        warnings.warn(f"opaudit: {path} is missing from this PyTorch install, so a forward op and the backward "
                      "ops of its derivative formula are no longer sent the same way (CPU or decomposition) by "
                      "the fallback; reinstall torch to get it back", RuntimeWarning, stacklevel=2)
        return {}
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    entries = yaml.load(path.read_text(), Loader=loader)
    known = {n.removeprefix("aten::").split(".")[0] for n in torch._C._dispatch_get_all_op_names()
             if n.startswith("aten::")}
    pairs: dict[str, set[str]] = {}
    for e in entries:
        forward = e["name"].split("(")[0].split(".")[0]
        for key, formula in e.items():
            if key in ("name", "dispatch", "output_differentiability") or not isinstance(formula, str):
                continue
            for called in _CALL.findall(formula):
                called = called.removesuffix("_symint")
                if called in known and called != forward:
                    pairs.setdefault(forward, set()).add(called)
                    pairs.setdefault(called, set()).add(forward)
    return {k: frozenset(v) for k, v in pairs.items()}


# kernels of other devices' libraries: never what a backend's own op is paired with at run time
_OTHER_DEVICES = ("cudnn_", "_cudnn", "miopen_", "_miopen", "mkldnn_", "_mkldnn", "mps_", "_mps", "_nnpack", "nnpack_",
                  "quantized_", "_fbgemm", "fbgemm_", "_xnnpack", "xnnpack_")


def partners(name: str) -> frozenset[str]:
    """The base names ``name`` (``native_batch_norm`` or ``native_batch_norm.default``) is paired with
    (other devices' library kernels, ``cudnn_batch_norm`` and the like, left out)."""
    return frozenset(p for p in backward_pairs().get(name.split(".")[0], ()) if not p.startswith(_OTHER_DEVICES))


@dataclass(frozen=True)
class Choice:
    path: str  # a key of PATH_TEXT
    reason: str = ""


class Chooser:
    """Decides, once per op, how an op the target lacks runs.

    ``has(name)`` says whether the target runs an op (``add.out``, by base name for partners) itself;
    ``force_cpu`` and ``forbid`` are op names (``aten::`` optional, ``.default`` optional) that a user
    sends to the CPU, or refuses to fall back.
    """

    def __init__(self, has: Callable[[str], bool], *, force_cpu: Iterable[str] = (), forbid: Iterable[str] = (),
                 has_base: Callable[[str], bool] | None = None, out_variants: bool = True):
        self.has = has
        self.has_base = has_base or (lambda base: has(base))
        # False on a live backend whose functional ops reach their out= variant (structured kernels): the
        # decomposition of an out= op is the functional op, which would come back to it
        self.out_variants = out_variants
        self.force_cpu = {plain_name(n) for n in force_cpu}
        self.forbid = {plain_name(n) for n in forbid}
        self._cache: dict[str, Choice] = {}
        self._confirmed: set[str] = set()
        self._decomposed: set[str] = set()  # base names that ran decomposed: their partners must follow
        self._to_cpu: dict[str, str] = {}  # base name -> why its pair goes through the CPU

    def choose(self, op: torch._ops.OpOverload) -> Choice:
        name = op_name(op)
        hit = self._cache.get(name)
        if hit is None:
            hit = self._cache[name] = self._choose(op, name)
        return hit

    def _choose(self, op: torch._ops.OpOverload, name: str) -> Choice:
        base = name.split(".")[0]
        if name in self.forbid or base in self.forbid:
            return Choice("forbidden", "forbidden by the user")
        if name in self.force_cpu or base in self.force_cpu:
            return Choice("cpu", "sent to the CPU by the user")
        if base in OVERRIDEABLE:
            return Choice("cpu", f"a backend stub: the CPU runs {OVERRIDEABLE[base]}")
        if base in self._to_cpu:
            return Choice("cpu", self._to_cpu[base])
        fn = decomposition(op)
        if fn is None:
            return Choice("cpu", "no decomposition")
        if not self.out_variants and is_out_variant(op) and not self.has_base(base):
            return Choice("cpu", "an out= variant: its decomposition, the functional op, comes back to it")
        mates = partners(name)
        forced = sorted(m for m in mates if m in self.force_cpu)
        if forced:
            return Choice("cpu", f"its partner {forced[0]} is sent to the CPU: the pair goes through the CPU together")
        native = sorted(m for m in mates if self.has_base(m))
        if native:
            return Choice("cpu", f"its partner {native[0]} runs natively: decomposing one side of a forward/backward "
                                 "pair corrupts gradients")
        for m in sorted(mates):
            if not _any_decomposition(m):
                return Choice("cpu", f"its partner {m} has no decomposition: the pair goes through the CPU together")
        return Choice("decomposition", "decomposed together with " + ", ".join(sorted(mates)) if mates else "")

    def confirm(self, op: torch._ops.OpOverload, args: tuple, kwargs: dict[str, Any]) -> Choice:
        """On an op's first call: a decomposition is kept only if the ops it emits for these arguments
        (traced on meta tensors) are ops the target has; else the op, and its pair with it, go through
        the CPU (one round trip rather than one per emitted op). A pair one of whose members already ran
        decomposed stays decomposed: its members must agree."""
        choice = self.choose(op)
        name = op_name(op)
        base = name.split(".")[0]
        if choice.path != "decomposition" or name in self._confirmed:
            if choice.path == "decomposition":
                self._decomposed.add(base)
            return choice
        self._confirmed.add(name)
        mates = partners(name)
        if not any(m in self._decomposed for m in mates):
            fn = decomposition(op)
            assert fn is not None
            emitted = emitted_ops(fn, args, kwargs)
            lacking = sorted(e for e in emitted or () if "::" not in e and e != name and not self.has(e))
            if lacking:
                why = f"its decomposition needs {lacking[0]}, which the target lacks too"
                for member in (base, *mates):
                    self._to_cpu[member] = why + ("" if member == base else f" (in the decomposition of {name})")
                for key in [k for k in self._cache if k.split(".")[0] in (base, *mates)]:
                    del self._cache[key]
                return self.choose(op)
        self._decomposed.add(base)
        return choice


def emitted_ops(fn: Callable[..., Any], args: tuple, kwargs: dict[str, Any]) -> set[str] | None:
    """The ops ``fn`` (a decomposition) runs for these arguments, traced on meta tensors with their
    sizes and strides (no data; None when it cannot run on meta)."""
    from torch.utils import _pytree as pytree
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: set[str] = set()

    class Collect(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.add(op_name(func) if func.namespace == "aten" else f"{func.namespace}::{func._schema.name}")
            return func(*args, **(kwargs or {}))

    def meta(t: torch.Tensor) -> torch.Tensor:
        return torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device="meta")

    margs, mkwargs = pytree.tree_map_only(torch.Tensor, meta, (args, kwargs))
    if mkwargs.get("device") is not None:
        mkwargs["device"] = torch.device("meta")
    try:
        with Collect():
            fn(*margs, **mkwargs)
    except Exception:
        return None
    return seen


def is_out_variant(op: torch._ops.OpOverload) -> bool:
    """An ``out=`` overload: it writes keyword-only arguments."""
    return any(a.kwarg_only and a.alias_info is not None and a.alias_info.is_write for a in op._schema.arguments)


def plain_name(name: str) -> str:
    return name.removeprefix("aten::").removesuffix(".default")


@cache
def _any_decomposition(base: str) -> bool:
    """Every overload of ``base`` that exists has a decomposition (the formula names no overload)."""
    packet = getattr(torch.ops.aten, base, None)
    if packet is None:
        return False
    overloads = [getattr(packet, o) for o in packet.overloads()]
    dispatched = [o for o in overloads if torch._C._dispatch_has_kernel(o.name())]
    return bool(dispatched) and all(decomposition(o) is not None for o in dispatched
                                    if not o._schema.is_mutable or o._overloadname == "default")
