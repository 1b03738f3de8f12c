"""References for ops the CPU has no kernel for: each checked against PyTorch's own composite math in float64
(forward and backward), the list of such ops closed against coverage_db, and the rehearsal of recurrent
models that reach them (each run in a fresh process, as a process simulates one device type)."""

from __future__ import annotations

import re

import pytest
import torch
from helpers import FIXTURES, run_cli

from opaudit.fallback.choose import cpu_impl, decomposition, overload_of
from opaudit.fallback.references import (
    BEFORE_CPU_KERNEL,
    REFERENCES,
    has_cpu_kernel,
    native_without_cpu_kernel,
    scope,
)

aten = torch.ops.aten
F64 = torch.float64


def _close(a, b):
    assert (a is None) == (b is None)
    if a is not None:
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def _gates(batch, hidden, n, bias=True):
    g = torch.Generator().manual_seed(n * 100 + hidden)
    r = lambda *s: torch.randn(*s, dtype=F64, generator=g)  # noqa: E731
    return r(batch, n * hidden), r(batch, n * hidden), r(batch, hidden), (r(n * hidden) if bias else None), \
        (r(n * hidden) if bias else None)


@pytest.mark.parametrize("bias", [True, False])
def test_lstm_cell_forward_equals_torch_lstm_cell(bias):
    batch, hidden, inp = 3, 5, 4
    g = torch.Generator().manual_seed(1)
    x, hx, cx = (torch.randn(batch, inp, dtype=F64, generator=g), torch.randn(batch, hidden, dtype=F64, generator=g),
                 torch.randn(batch, hidden, dtype=F64, generator=g))
    w_ih, w_hh = torch.randn(4 * hidden, inp, dtype=F64, generator=g), torch.randn(4 * hidden, hidden, dtype=F64,
                                                                                    generator=g)
    b_ih, b_hh = (torch.randn(4 * hidden, dtype=F64, generator=g) for _ in range(2)) if bias else (None, None)
    hy, cy, _ = REFERENCES["_thnn_fused_lstm_cell"](x @ w_ih.t(), hx @ w_hh.t(), cx, b_ih, b_hh)
    ref_hy, ref_cy = torch.lstm_cell(x, (hx, cx), w_ih, w_hh, b_ih, b_hh)  # the CPU's composite cell
    _close(hy, ref_hy)
    _close(cy, ref_cy)


@pytest.mark.parametrize("bias", [True, False])
def test_gru_cell_forward_equals_torch_gru_cell(bias):
    batch, hidden, inp = 3, 5, 4
    g = torch.Generator().manual_seed(2)
    x, hx = torch.randn(batch, inp, dtype=F64, generator=g), torch.randn(batch, hidden, dtype=F64, generator=g)
    w_ih, w_hh = torch.randn(3 * hidden, inp, dtype=F64, generator=g), torch.randn(3 * hidden, hidden, dtype=F64,
                                                                                    generator=g)
    b_ih, b_hh = (torch.randn(3 * hidden, dtype=F64, generator=g) for _ in range(2)) if bias else (None, None)
    hy, _ = REFERENCES["_thnn_fused_gru_cell"](x @ w_ih.t(), hx @ w_hh.t(), hx, b_ih, b_hh)
    _close(hy, torch.gru_cell(x, hx, w_ih, w_hh, b_ih, b_hh))


@pytest.mark.parametrize("grads", ["both", "hy", "cy"])
@pytest.mark.parametrize("bias", [True, False])
def test_lstm_cell_backward_equals_the_differentiable_composite(bias, grads):
    """_thnn_fused_lstm_cell_backward_impl against PyTorch's _thnn_differentiable_lstm_cell_backward (the
    CompositeImplicitAutograd formula autograd uses under create_graph) and against autograd itself."""
    ig, hg, cx, ib, hb = _gates(3, 5, 4, bias)
    hy, cy, ws = REFERENCES["_thnn_fused_lstm_cell"](ig, hg, cx, ib, hb)
    g = torch.Generator().manual_seed(3)
    ghy = torch.randn(3, 5, dtype=F64, generator=g) if grads in ("both", "hy") else None
    gcy = torch.randn(3, 5, dtype=F64, generator=g) if grads in ("both", "cy") else None
    grad_gates, grad_cx, grad_bias = REFERENCES["_thnn_fused_lstm_cell_backward_impl"](ghy, gcy, cx, cy, ws, bias)
    d_ig, d_hg, d_cx, d_ib, d_hb = aten._thnn_differentiable_lstm_cell_backward(ghy, gcy, ig, hg, ib, hb, cx, cy)
    _close(grad_gates, d_ig)
    _close(grad_gates, d_hg)
    _close(grad_cx, d_cx)
    _close(grad_bias, d_ib if bias else None)

    # and autograd through the forward reference (its ops have derivatives)
    leaves = [t.clone().requires_grad_() for t in (ig, hg, cx)]
    a_hy, a_cy, _ = REFERENCES["_thnn_fused_lstm_cell"](*leaves, ib, hb)
    outs = [(o, go) for o, go in ((a_hy, ghy), (a_cy, gcy)) if go is not None]
    auto = torch.autograd.grad([o for o, _ in outs], leaves, [go for _, go in outs])
    _close(grad_gates, auto[0])
    _close(grad_cx, auto[2])


@pytest.mark.parametrize("bias", [True, False])
def test_gru_cell_backward_equals_the_differentiable_composite(bias):
    ig, hg, hx, ib, hb = _gates(3, 5, 3, bias)
    _, ws = REFERENCES["_thnn_fused_gru_cell"](ig, hg, hx, ib, hb)
    ghy = torch.randn(3, 5, dtype=F64, generator=torch.Generator().manual_seed(4))
    ours = REFERENCES["_thnn_fused_gru_cell_backward"](ghy, ws, bias)
    theirs = aten._thnn_differentiable_gru_cell_backward(ghy, ig, hg, hx, ib, hb)
    for a, b in zip(ours, theirs, strict=True):
        _close(a, b if a is not None else None)
    assert (ours[3] is None) == (not bias)
    leaves = [t.clone().requires_grad_() for t in (ig, hg, hx)]
    hy, _ = REFERENCES["_thnn_fused_gru_cell"](*leaves, ib, hb)
    auto = torch.autograd.grad(hy, leaves, ghy)
    for a, b in zip(ours[:3], auto, strict=True):
        _close(a, b)


def test_gradcheck_of_the_fused_cells_through_their_backward():
    """The reference backward, wired as the derivative of the reference forward, passes gradcheck."""

    class Lstm(torch.autograd.Function):
        @staticmethod
        def forward(ctx, ig, hg, cx, ib, hb):
            hy, cy, ws = REFERENCES["_thnn_fused_lstm_cell"](ig, hg, cx, ib, hb)
            ctx.save_for_backward(cx, cy, ws)
            return hy, cy

        @staticmethod
        def backward(ctx, ghy, gcy):
            cx, cy, ws = ctx.saved_tensors
            gg, gcx, gb = REFERENCES["_thnn_fused_lstm_cell_backward_impl"](ghy, gcy, cx, cy, ws, True)
            return gg, gg, gcx, gb, gb

    class Gru(torch.autograd.Function):
        @staticmethod
        def forward(ctx, ig, hg, hx, ib, hb):
            hy, ws = REFERENCES["_thnn_fused_gru_cell"](ig, hg, hx, ib, hb)
            ctx.save_for_backward(ws)
            return hy

        @staticmethod
        def backward(ctx, ghy):
            return REFERENCES["_thnn_fused_gru_cell_backward"](ghy, ctx.saved_tensors[0], True)

    for fn, n in ((Lstm, 4), (Gru, 3)):
        args = [t.requires_grad_() for t in _gates(2, 3, n)]
        assert torch.autograd.gradcheck(fn.apply, args)


def test_matrix_products_with_an_output_dtype():
    g = torch.Generator().manual_seed(5)
    a, b = torch.randn(4, 6, generator=g).bfloat16(), torch.randn(6, 3, generator=g).bfloat16()
    c = torch.randn(4, 3, generator=g).bfloat16()
    exact = a.double() @ b.double()
    out = REFERENCES["mm.dtype"](a, b, torch.float32)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.double(), exact, rtol=1e-6, atol=1e-6)  # float32 accumulation of bf16 inputs
    out = REFERENCES["addmm.dtype"](c, a, b, torch.float32, beta=0.5, alpha=2.0)
    torch.testing.assert_close(out.double(), 0.5 * c.double() + 2.0 * exact, rtol=1e-6, atol=1e-6)
    into = torch.empty(0)
    assert REFERENCES["bmm.dtype_out"](a[None], b[None], torch.float32, out=into) is into
    torch.testing.assert_close(into[0].double(), exact, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(REFERENCES["baddbmm.dtype"](c[None], a[None], b[None], torch.float32)[0].double(),
                               c.double() + exact, rtol=1e-6, atol=1e-6)


def test_grad_scalers_ops_before_their_cpu_kernels_do_what_the_cpu_kernels_do():
    """The references a torch older than 2.3 runs GradScaler's ops with (no CPU kernel there) give what 2.3's CPU
    kernels give: unscaling with the inf check, and the scale's backoff, growth and growth tracker."""
    unscale = BEFORE_CPU_KERNEL["_amp_foreach_non_finite_check_and_unscale_"][1]
    update = BEFORE_CPU_KERNEL["_amp_update_scale_"][1]
    assert has_cpu_kernel(aten._amp_update_scale_.default)  # (this torch has them: the references are not taken)
    for values in ([1.0, 2.0], [1.0, float("inf")], [float("nan"), 3.0]):
        for dtype in (torch.float32, torch.float16):
            ours = [torch.tensor(values, dtype=dtype), torch.tensor([4.0], dtype=dtype)]
            theirs = [t.clone() for t in ours]
            found_ours, found_theirs = torch.zeros(()), torch.zeros(())
            unscale(ours, found_ours, torch.tensor(0.5))
            aten._amp_foreach_non_finite_check_and_unscale_(theirs, found_theirs, torch.tensor(0.5))
            for a, b in zip(ours, theirs, strict=True):
                torch.testing.assert_close(a, b, equal_nan=True)
            assert found_ours.item() == found_theirs.item()
    for found, tracker, interval in ((1.0, 3, 4), (0.0, 1, 4), (0.0, 3, 4), (0.0, 0, 1)):
        ours = (torch.tensor(1024.0), torch.tensor(tracker, dtype=torch.int32))
        theirs = (ours[0].clone(), ours[1].clone())
        assert update(*ours, torch.tensor(found), 2.0, 0.5, interval) is ours[0]
        aten._amp_update_scale_(*theirs, torch.tensor(found), 2.0, 0.5, interval)
        assert ours[0].item() == theirs[0].item() and ours[1].item() == theirs[1].item()


def test_the_list_of_ops_without_a_cpu_kernel_is_closed():
    """Every op a release registers natively that the CPU cannot run is in no_cpu_kernel.toml, and each
    entry says the truth about how the rehearsal runs it."""
    found = native_without_cpu_kernel()
    listed = scope()
    assert "_thnn_fused_lstm_cell" in found and "_thnn_fused_gru_cell_backward" in found
    assert sorted(set(found) - set(listed)) == [], "ops without a CPU kernel that no_cpu_kernel.toml does not list"
    for name, entry in listed.items():
        assert entry["how"] in ("reference", "decomposition", "infrastructure", "out_of_scope"), name
        assert entry["reason"].strip(), name
        op = overload_of(name)
        assert not has_cpu_kernel(op), f"{name} has a CPU kernel now: drop it from the list"
        impl = cpu_impl(op)
        if entry["how"] == "reference":
            assert impl is REFERENCES[name], name
        elif entry["how"] == "decomposition":
            assert impl is not None and impl is decomposition(op) and name not in REFERENCES, name
        elif entry["how"] == "out_of_scope":
            assert impl is None, f"{name} can run after all: say how"
    assert set(REFERENCES) <= set(listed)


@pytest.mark.parametrize("target", ["ascend", "musa@1.3.0"])
@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_recurrent_models_rehearse_and_match_the_cpu(target, kind, tmp_path):
    """ascend registers the fused cells natively (the references run them on the CPU data); musa@1.3.0
    lacks them (opaudit's fallback decomposes them into the references' ops, each held to the matrix)."""
    stats = tmp_path / "stats.json"
    rc, stdout, stderr = run_cli("run", "--simulate", target, "--stats", str(stats), "--",
                                 str(FIXTURES / "fallback" / "rnn_step.py"), kind)
    assert rc == 0, stderr[-2000:]
    worst = float(re.search(r"worst relative difference (\S+)", stdout).group(1))
    assert worst < 1e-5, stdout
    import json

    ops = {o["op"]: o for o in json.loads(stats.read_text())["ops"]}
    cell = f"_thnn_fused_{kind.lower()}_cell"
    assert ops[cell]["calls"] == 10  # 2 layers x 5 steps: the fused path of RNN.cpp for PrivateUse1
    assert ops[cell]["path"] == ("native" if target == "ascend" else "decomposition")


def test_an_op_nothing_can_run_is_named_as_a_limit_of_the_rehearsal():
    rc, _, stderr = run_cli("run", "--simulate", "ascend", "--", str(FIXTURES / "fallback" / "no_cpu_kernel.py"))
    assert rc == 3
    assert "aten::batch_norm_stats cannot be rehearsed" in stderr
    assert "limit of the CPU rehearsal, not of ascend" in stderr and "SyncBatchNorm" in stderr
    assert "--cpu OP" not in stderr and "Traceback" not in stderr and "Facebook" not in stderr


def test_native_dropout_as_the_bernoulli_path_draws_what_the_cpu_draws():
    """On a target whose dropout is the bernoulli mask (MPS), the stand-in's native_dropout runs as that path:
    the same output as the CPU's dropout from the same generator state, and the mask of the kept elements."""
    from opaudit.fallback.references import AS_GENERIC_PATH

    x = torch.randn(64, 33)
    torch.manual_seed(7)
    expected = torch.nn.functional.dropout(x, 0.3, training=True)
    torch.manual_seed(7)
    out, mask = AS_GENERIC_PATH["native_dropout"](x, 0.3, True)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    assert mask.dtype == torch.bool and torch.equal(mask, expected != 0)
    same, keep = AS_GENERIC_PATH["native_dropout"](x, 0.3, False)
    assert torch.equal(same, x) and bool(keep.all())
