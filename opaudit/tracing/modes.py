"""Execution modes: where the traced tensors live, and the choice between them.

``real``  CPU tensors: exact, data-dependent paths taken as in eager; costs the model's memory.
``meta``  meta tensors: no memory and no data; ``.item()`` is answered by a guess (scalars.py), and
          attention takes PyTorch's math path (the tracer records the choice, see choices.py).
``fake``  FakeTensorMode: no memory, device cpu; some libraries (transformers) take other code
          paths when they detect fake tensors.
``auto``  real when the model fits comfortably, meta otherwise (see :func:`choose`).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils import _pytree as pytree

from opaudit.errors import OpauditError
from opaudit.torchcompat import tree_leaves

MODES = ("auto", "real", "meta", "fake")

# "comfortably": the parameters, gradients and two AdamW states (4x the parameters when training)
# take at most this share of the memory available now.
COMFORT_SHARE = 0.25


@dataclass
class Prepared:
    model: nn.Module
    inputs: Any
    mode: str
    reason: str
    context: Callable[[], AbstractContextManager]  # entered around the traced run (fake mode)

    @property
    def device(self) -> str:
        for t in self.model.parameters():
            return t.device.type
        for t in tree_leaves(self.inputs):
            if isinstance(t, torch.Tensor):
                return t.device.type
        return "cpu"


# what torch says when code reads the data of a meta tensor (a model whose step depends on its values)
_META_DATA = ("cannot copy out of meta tensor", "cannot be called on meta tensors",
              "register_meta function for torch.nonzero()", "meta_nonzero_assume_all_nonzero")


def needs_data(message: str) -> bool:
    """Whether an error ``message`` is torch's for code that read the data of a meta tensor: the step can only be
    traced for real, not that it is wrong."""
    text = message.lower()
    return any(m.lower() in text for m in _META_DATA)


def available_memory() -> int | None:
    """Bytes of memory available now (MemAvailable on Linux), or None when unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def model_bytes(model: nn.Module) -> tuple[int, int]:
    """(parameter count, bytes of parameters and buffers)."""
    n = sum(p.numel() for p in model.parameters())
    size = sum(t.numel() * t.element_size() for t in (*model.parameters(), *model.buffers()))
    return n, size


def choose(model: nn.Module, train: bool, available: int | None = None) -> tuple[str, str]:
    """``("real" | "meta", reason)`` for a model built on meta to be measured."""
    n, size = model_bytes(model)
    need = size * (4 if train else 1)
    available = available_memory() if available is None else available
    what = f"{n / 1e6:,.1f} M parameters, {_gib(size)}"
    if available is None:
        if need <= 2 * 2**30:
            return "real", f"{what}; needs ~{_gib(need)} (available memory unknown)"
        return "meta", f"{what}; needs ~{_gib(need)} and available memory is unknown"
    if need <= COMFORT_SHARE * available:
        return "real", f"{what}; needs ~{_gib(need)} of {_gib(available)} available"
    return "meta", f"{what}; needs ~{_gib(need)}, more than {COMFORT_SHARE:.0%} of {_gib(available)} available"


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def _mode_of(model: nn.Module, inputs: Any) -> str:
    from torch._subclasses.fake_tensor import FakeTensor

    for t in (*model.parameters(), *model.buffers(), *tree_leaves(inputs)):
        if isinstance(t, FakeTensor):
            return "fake"
        if isinstance(t, torch.Tensor):
            return "meta" if t.device.type == "meta" else "real"
    return "real"


def _convert(obj: Any, convert: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    return pytree.tree_map(lambda t: convert(t) if isinstance(t, torch.Tensor) else t, obj)


def twin(model: nn.Module, convert: Callable[[torch.Tensor], torch.Tensor]) -> nn.Module:
    """A copy of ``model`` whose parameters and buffers are ``convert``-ed; the original is untouched.

    The parameters are converted first and handed to ``copy.deepcopy`` through its memo, so no
    real-memory copy of the weights is ever made.
    """
    memo: dict[int, Any] = {}
    for p in model.parameters():
        if id(p) not in memo:
            memo[id(p)] = nn.Parameter(convert(p.detach()), requires_grad=p.requires_grad)
    for b in model.buffers():
        if id(b) not in memo:
            memo[id(b)] = convert(b.detach())
    return copy.deepcopy(model, memo)


def _to_meta(t: torch.Tensor) -> torch.Tensor:
    return t.to("meta")


def prepare(model: Any, inputs: Any, mode: str, train: bool) -> Prepared:
    """Build (or convert) the model and its inputs for ``mode``.

    ``model`` is a module or a zero-argument factory, which may return a module or a
    ``(module, inputs)`` pair; ``inputs`` is an object or a zero-argument factory (``None``: the
    pair's inputs, or no arguments at all). A factory is called under the mode
    (``with torch.device("meta")``, or inside FakeTensorMode); for ``auto`` it is first called on
    meta to measure the model, and called again for real when the model fits.
    """
    built = isinstance(model, nn.Module)
    make_model, make_inputs = _factories(model, inputs)

    if built:
        current = _mode_of(model, inputs)
        if mode in ("auto", current):
            return Prepared(model, make_inputs(), current, _given_reason(current, model), nullcontext)
        if mode == "meta":
            return Prepared(twin(model, _to_meta), _convert(make_inputs(), _to_meta), "meta",
                            "requested (a meta copy of the model was made)", nullcontext)
        if mode == "fake":
            return _fake(make_model, make_inputs, "requested (a fake copy of the model was made)")
        raise OpauditError(f"a model already on {current} cannot be traced in mode {mode!r}",
                           hint="pass a factory (a function that builds the model) instead of the model")

    if mode == "real":
        m = make_model()
        return Prepared(m, make_inputs(), "real", "requested", nullcontext)
    if mode == "fake":
        return _fake(make_model, make_inputs, "requested")

    with torch.device("meta"):
        meta_model = make_model()
        meta_inputs = make_inputs()
    if mode == "auto":
        chosen, reason = choose(meta_model, train)
        if chosen == "real":
            del meta_model, meta_inputs
            m = make_model()
            return Prepared(m, make_inputs(), "real", reason, nullcontext)
    else:
        reason = "requested"
    if any(t.device.type != "meta" for t in (*meta_model.parameters(), *meta_model.buffers())):
        meta_model = twin(meta_model, _to_meta)  # tensors the factory made on an explicit device
    return Prepared(meta_model, _convert(meta_inputs, _to_meta), "meta", reason, nullcontext)


def _factories(model: Any, inputs: Any) -> tuple[Callable[[], nn.Module], Callable[[], Any]]:
    """(make_model, make_inputs); make_inputs must be called after make_model (a factory may return
    the inputs together with the model)."""
    pair: dict[str, Any] = {}

    def make_model() -> nn.Module:
        result = model() if callable(model) and not isinstance(model, nn.Module) else model
        if isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], nn.Module):
            pair["inputs"] = result[1]
            return result[0]
        pair.pop("inputs", None)
        if not isinstance(result, nn.Module):
            raise TypeError(f"the model factory returned {type(result).__name__}, not a torch.nn.Module "
                            "or a (model, inputs) pair")
        return result

    def make_inputs() -> Any:
        if inputs is not None:
            return inputs() if callable(inputs) and not isinstance(inputs, torch.Tensor) else inputs
        return pair.get("inputs", ())

    return make_model, make_inputs


def _given_reason(mode: str, model: nn.Module) -> str:
    n, size = model_bytes(model)
    return f"the model was given on {'fake tensors' if mode == 'fake' else mode} ({n / 1e6:,.1f} M parameters)"


def _fake(make_model, make_inputs, reason: str) -> Prepared:
    from torch._subclasses.fake_tensor import FakeTensorMode

    fake = FakeTensorMode(allow_non_fake_inputs=True)
    with fake:
        m = make_model()
        x = make_inputs()
    # tensors the factory made outside the mode (or a model given already built) become fake copies
    if not all(_is_fake(t) for t in (*m.parameters(), *m.buffers())):
        m = twin(m, lambda t: t if _is_fake(t) else fake.from_tensor(t))
    x = _convert(x, lambda t: t if _is_fake(t) else fake.from_tensor(t))
    return Prepared(m, x, "fake", reason, lambda: fake)


def _is_fake(t: torch.Tensor) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(t, FakeTensor)
