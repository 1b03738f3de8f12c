"""Reference implementations of ops a target registers natively but the CPU has no kernel for.

The rehearsal runs a device's ops on their CPU data, and the fallback's round trip runs an op's CPU
kernel. Some ops that plugins register have no CPU kernel at all: the fused RNN cells that
``aten/src/ATen/native/RNN.cpp`` calls for CUDA, XPU and PrivateUse1 inputs (``_thnn_fused_lstm_cell``,
``_thnn_fused_gru_cell`` and their backward ops), ``mm(..., out_dtype=)`` and a few more. For those this
module has a Python implementation written with aten ops the CPU has, checked against PyTorch's own
composite math (tests/fallback/test_references.py); choose.cpu_impl gives the rehearsal what to run on the
CPU for an op: its CPU kernel, else the reference here, else PyTorch's own decomposition, else None.

The references double as decompositions (choose.decomposition): an op the target lacks runs as these aten
ops on the device. coverage_db/curated/no_cpu_kernel.toml lists every op some target registers natively
that the CPU cannot run, with how the rehearsal runs it or why it is out of its scope.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import cache
from typing import Any

import torch

from opaudit.data import load_toml

Tensor = torch.Tensor
aten = torch.ops.aten


class RehearsalLimit(NotImplementedError):
    """An op that nothing in the rehearsal can run (no CPU kernel, no reference): a limit of the rehearsal."""


# -- the fused RNN cells (RNN.cpp: LSTMCell / GRUCell on CUDA, XPU and PrivateUse1) ----------------------------

def _thnn_fused_lstm_cell(input_gates: Tensor, hidden_gates: Tensor, cx: Tensor, input_bias: Tensor | None = None,
                          hidden_bias: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """(hy, cy, workspace): gates in the order input, forget, cell, output; the workspace keeps the
    activated gates (what the backward reads)."""
    gates = aten.add.Tensor(input_gates, hidden_gates)
    if input_bias is not None:
        gates = aten.add.Tensor(gates, input_bias)
    if hidden_bias is not None:
        gates = aten.add.Tensor(gates, hidden_bias)
    i, f, g, o = aten.split.Tensor(gates, gates.shape[1] // 4, 1)
    i, f, g, o = aten.sigmoid(i), aten.sigmoid(f), aten.tanh(g), aten.sigmoid(o)
    cy = aten.add.Tensor(aten.mul.Tensor(f, cx), aten.mul.Tensor(i, g))
    hy = aten.mul.Tensor(o, aten.tanh(cy))
    return hy, cy, aten.cat([i, f, g, o], 1)


def _thnn_fused_lstm_cell_backward_impl(grad_hy: Tensor | None, grad_cy: Tensor | None, cx: Tensor, cy: Tensor,
                                        workspace: Tensor, has_bias: bool) -> tuple[Tensor, Tensor, Tensor | None]:
    """(grad of the gates, grad of cx, grad of the bias or None)."""
    if grad_hy is None and grad_cy is None:  # the CUDA kernel returns undefined tensors
        return None, None, None  # type: ignore[return-value]
    i, f, g, o = aten.split.Tensor(workspace, workspace.shape[1] // 4, 1)
    tanh_cy = aten.tanh(cy)
    gh = grad_hy if grad_hy is not None else aten.zeros_like(cy)
    gc = aten.mul.Tensor(aten.mul.Tensor(gh, o), aten.rsub.Scalar(aten.mul.Tensor(tanh_cy, tanh_cy), 1))
    if grad_cy is not None:
        gc = aten.add.Tensor(gc, grad_cy)
    gi = aten.mul.Tensor(aten.mul.Tensor(gc, g), aten.mul.Tensor(aten.rsub.Scalar(i, 1), i))
    gf = aten.mul.Tensor(aten.mul.Tensor(gc, cx), aten.mul.Tensor(aten.rsub.Scalar(f, 1), f))
    gg = aten.mul.Tensor(aten.mul.Tensor(gc, i), aten.rsub.Scalar(aten.mul.Tensor(g, g), 1))
    go = aten.mul.Tensor(aten.mul.Tensor(gh, tanh_cy), aten.mul.Tensor(aten.rsub.Scalar(o, 1), o))
    grad_gates = aten.cat([gi, gf, gg, go], 1)
    grad_cx = aten.mul.Tensor(gc, f)
    grad_bias = aten.sum.dim_IntList(grad_gates, [0], False) if has_bias else None
    return grad_gates, grad_cx, grad_bias  # type: ignore[return-value]


def _thnn_fused_gru_cell(input_gates: Tensor, hidden_gates: Tensor, hx: Tensor, input_bias: Tensor | None = None,
                         hidden_bias: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """(hy, workspace): gates in the order reset, update (input), new; the workspace holds r, z, n, hx and
    the hidden part of the new gate."""
    if input_bias is not None:
        input_gates = aten.add.Tensor(input_gates, input_bias)
    if hidden_bias is not None:
        hidden_gates = aten.add.Tensor(hidden_gates, hidden_bias)
    h = input_gates.shape[1] // 3
    ir, ii, in_ = aten.split.Tensor(input_gates, h, 1)
    hr, hi, hn = aten.split.Tensor(hidden_gates, h, 1)
    r = aten.sigmoid(aten.add.Tensor(ir, hr))
    z = aten.sigmoid(aten.add.Tensor(ii, hi))
    n = aten.tanh(aten.add.Tensor(in_, aten.mul.Tensor(r, hn)))
    hy = aten.add.Tensor(n, aten.mul.Tensor(z, aten.sub.Tensor(hx, n)))
    return hy, aten.cat([r, z, n, hx, hn], 1)


def _thnn_fused_gru_cell_backward(grad_hy: Tensor, workspace: Tensor, has_bias: bool
                                  ) -> tuple[Tensor, Tensor, Tensor, Tensor | None, Tensor | None]:
    """(grad of the input gates, of the hidden gates, of hx, of the input bias, of the hidden bias)."""
    r, z, n, hx, hn = aten.split.Tensor(workspace, workspace.shape[1] // 5, 1)
    gz = aten.mul.Tensor(aten.mul.Tensor(grad_hy, aten.sub.Tensor(hx, n)), aten.mul.Tensor(aten.rsub.Scalar(z, 1), z))
    ghx = aten.mul.Tensor(grad_hy, z)
    gn = aten.mul.Tensor(aten.mul.Tensor(grad_hy, aten.rsub.Scalar(z, 1)), aten.rsub.Scalar(aten.mul.Tensor(n, n), 1))
    ghn = aten.mul.Tensor(gn, r)
    gr = aten.mul.Tensor(aten.mul.Tensor(gn, hn), aten.mul.Tensor(aten.rsub.Scalar(r, 1), r))
    grad_input = aten.cat([gr, gz, gn], 1)
    grad_hidden = aten.cat([gr, gz, ghn], 1)
    if not has_bias:
        return grad_input, grad_hidden, ghx, None, None
    return (grad_input, grad_hidden, ghx, aten.sum.dim_IntList(grad_input, [0], False),
            aten.sum.dim_IntList(grad_hidden, [0], False))


# -- matrix products with an output dtype (torch.mm(a, b, out_dtype=...), CUDA's and plugins') ---------------

def _mm_dtype(self: Tensor, mat2: Tensor, out_dtype: torch.dtype) -> Tensor:
    return aten._to_copy(aten.mm(aten._to_copy(self, dtype=torch.float32), aten._to_copy(mat2, dtype=torch.float32)),
                         dtype=out_dtype)


def _bmm_dtype(self: Tensor, mat2: Tensor, out_dtype: torch.dtype) -> Tensor:
    return aten._to_copy(aten.bmm(aten._to_copy(self, dtype=torch.float32), aten._to_copy(mat2, dtype=torch.float32)),
                         dtype=out_dtype)


def _addmm_dtype(self: Tensor, mat1: Tensor, mat2: Tensor, out_dtype: torch.dtype, *, beta: Any = 1,
                 alpha: Any = 1) -> Tensor:
    f = torch.float32
    return aten._to_copy(aten.addmm(aten._to_copy(self, dtype=f), aten._to_copy(mat1, dtype=f),
                                    aten._to_copy(mat2, dtype=f), beta=beta, alpha=alpha), dtype=out_dtype)


def _baddbmm_dtype(self: Tensor, batch1: Tensor, batch2: Tensor, out_dtype: torch.dtype, *, beta: Any = 1,
                   alpha: Any = 1) -> Tensor:
    f = torch.float32
    return aten._to_copy(aten.baddbmm(aten._to_copy(self, dtype=f), aten._to_copy(batch1, dtype=f),
                                      aten._to_copy(batch2, dtype=f), beta=beta, alpha=alpha), dtype=out_dtype)


def _out(functional: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """The ``out=`` form of a reference: the functional result copied into ``out`` (resized first)."""

    def run(*args: Any, out: Tensor, **kwargs: Any) -> Tensor:
        result = functional(*args, **kwargs)
        if out.shape != result.shape:
            aten.resize_(out, result.shape)
        aten.copy_(out, result)
        return out

    return run


# -- small ones ------------------------------------------------------------------------------------------

def _masked_scale(self: Tensor, mask: Tensor, scale: float) -> Tensor:
    return aten.mul.Scalar(aten.mul.Tensor(self, mask), scale)


def _resize_output_(self: Tensor, size: list[int], device: Any) -> Tensor:
    if list(self.shape) != list(size):
        aten.resize_(self, size)
    return self


def _record_stream(self: Tensor, s: Any) -> None:
    """Nothing to do: the rehearsal's memory is the CPU's, which no stream reuses early."""
    return None


# -- ops of one device's path, run as another device's generic path (paths.py: a target of another kind) -------

def _native_dropout_as_bernoulli(input: Tensor, p: float, train: bool | None) -> tuple[Tensor, Tensor]:
    """native_dropout as Dropout.cpp's _dropout_impl does it where the fused kernel is not taken (CPU, MPS):
    a bernoulli_ mask scaled by 1/(1-p), the same draws from the generator as that path makes."""
    if not train or p == 0:
        return aten.clone(input), aten.ones_like(input, dtype=torch.bool)
    if p == 1:
        return aten.zeros_like(input), aten.zeros_like(input, dtype=torch.bool)
    noise = aten.empty_like(input)
    aten.bernoulli_.float(noise, 1 - p)
    aten.div_.Scalar(noise, 1 - p)
    return aten.mul.Tensor(input, noise), aten._to_copy(noise, dtype=torch.bool)


# op -> how the device-independent path of its composite computes it, where that is not its decomposition
AS_GENERIC_PATH: dict[str, Callable[..., Any]] = {
    "native_dropout": _native_dropout_as_bernoulli,
}


# -- GradScaler's ops, whose CPU kernels came with torch 2.3 (torch.amp.GradScaler("cpu")) ----------------------

def _amp_foreach_non_finite_check_and_unscale_(self: list[Tensor], found_inf: Tensor, inv_scale: Tensor) -> None:
    """Each tensor times ``inv_scale``, in place; ``found_inf`` set to 1 where one holds an inf or a NaN (as
    AmpKernels.cpp's CPU kernel and CUDA's do)."""
    for t in self:
        finite = aten.all.default(aten.isfinite.default(t))
        aten.masked_fill_.Scalar(found_inf, aten.logical_not.default(finite), 1.0)
        aten.mul_.Tensor(t, inv_scale)


def _amp_update_scale_(self: Tensor, growth_tracker: Tensor, found_inf: Tensor, scale_growth_factor: float,
                       scale_backoff_factor: float, growth_interval: int) -> Tensor:
    """GradScaler's scale after a step (AmpKernels.cpp): backed off where an inf was found, grown after
    ``growth_interval`` steps without one (where the grown scale is finite)."""
    if float(found_inf.item()):
        aten.mul_.Scalar(self, scale_backoff_factor)
        aten.fill_.Scalar(growth_tracker, 0)
        return self
    successful = int(growth_tracker.item()) + 1
    if successful == growth_interval:
        grown = float(self.item()) * scale_growth_factor
        if math.isfinite(grown):
            aten.fill_.Scalar(self, grown)
        successful = 0
    aten.fill_.Scalar(growth_tracker, successful)
    return self


# op -> (the torch whose CPU has a kernel for it, the reference run where the installed torch is older)
BEFORE_CPU_KERNEL: dict[str, tuple[tuple[int, int], Callable[..., Any]]] = {
    "_amp_foreach_non_finite_check_and_unscale_": ((2, 3), _amp_foreach_non_finite_check_and_unscale_),
    "_amp_update_scale_": ((2, 3), _amp_update_scale_),
}


REFERENCES: dict[str, Callable[..., Any]] = {
    "_thnn_fused_lstm_cell": _thnn_fused_lstm_cell,
    "_thnn_fused_lstm_cell_backward_impl": _thnn_fused_lstm_cell_backward_impl,
    "_thnn_fused_gru_cell": _thnn_fused_gru_cell,
    "_thnn_fused_gru_cell_backward": _thnn_fused_gru_cell_backward,
    "mm.dtype": _mm_dtype,
    "mm.dtype_out": _out(_mm_dtype),
    "bmm.dtype": _bmm_dtype,
    "bmm.dtype_out": _out(_bmm_dtype),
    "addmm.dtype": _addmm_dtype,
    "addmm.dtype_out": _out(_addmm_dtype),
    "baddbmm.dtype": _baddbmm_dtype,
    "baddbmm.dtype_out": _out(_baddbmm_dtype),
    "_masked_scale": _masked_scale,
    "_resize_output_": _resize_output_,
    "record_stream": _record_stream,
}


def _name(op: torch._ops.OpOverload) -> str:
    name = op._schema.name.removeprefix("aten::")
    return name if op._overloadname == "default" else f"{name}.{op._overloadname}"


def reference(op: torch._ops.OpOverload) -> Callable[..., Any] | None:
    """This module's implementation of ``op``, if it has one (one of BEFORE_CPU_KERNEL's where the installed
    torch's CPU has no kernel for it)."""
    if op.namespace != "aten":
        return None
    name = _name(op)
    found = REFERENCES.get(name)
    if found is None and name in BEFORE_CPU_KERNEL and not has_cpu_kernel(op):
        return BEFORE_CPU_KERNEL[name][1]
    return found


_KERNEL_KEYS = ("CPU", "SparseCPU", "CompositeImplicitAutograd", "CompositeExplicitAutograd",
                "CompositeExplicitAutogradNonFunctional")


def has_cpu_kernel(op: torch._ops.OpOverload) -> bool:
    """Whether the CPU can run ``op`` (its own kernel, dense or sparse COO, or a composite one)."""
    try:
        return any(torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), k) for k in _KERNEL_KEYS)
    except RuntimeError:  # not an op of the dispatcher
        return True


@cache
def scope() -> dict[str, dict[str, str]]:
    """coverage_db/curated/no_cpu_kernel.toml: op -> {"how": "reference" | "decomposition" | "out_of_scope",
    "reason": ...}."""
    data = load_toml("coverage_db", "curated/no_cpu_kernel.toml")
    return {name: dict(entry) for name, entry in data["op"].items()}


def limit_message(name: str, target: str, where: str) -> str:
    """The error of an op nothing in the rehearsal can run: says it is the rehearsal's limit, not the target's."""
    entry = scope().get(name) or scope().get(name.split(".")[0])
    why = f" ({entry['reason']})" if entry and entry.get("how") == "out_of_scope" else ""
    return (f"aten::{name} cannot be rehearsed: {where}, but the CPU has no kernel for it and opaudit has no "
            f"reference implementation of it{why}. This is a limit of the CPU rehearsal, not of {target}; "
            f"sending the op to the CPU (--cpu) cannot help either")


def native_without_cpu_kernel() -> dict[str, list[str]]:
    """Ops some release in coverage_db registers natively that the installed torch's CPU cannot run (no CPU
    kernel, no composite one) -> the vendors that register them. What no_cpu_kernel.toml must cover."""
    from opaudit.matrix import load_database

    db = load_database()
    found: dict[str, set[str]] = {}
    for entry in db.entries:
        for name in db.release(entry).op_set("native"):
            if "::" in name:
                continue
            base, _, overload = name.partition(".")
            packet = getattr(torch.ops.aten, base, None)
            if packet is None or (overload or "default") not in packet.overloads():
                continue  # not an op of the installed torch
            if not has_cpu_kernel(getattr(packet, overload or "default")):
                found.setdefault(name, set()).add(entry.vendor)
    return {k: sorted(v) for k, v in sorted(found.items())}
