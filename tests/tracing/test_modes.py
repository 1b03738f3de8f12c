"""Execution modes: real, meta, fake; the automatic choice; the scalar guesses on meta."""

from __future__ import annotations

import hf_models
import pytest
import resnet
import torch
from torch import nn

import opaudit
from opaudit.tracing.modes import choose, prepare


def _op_set(trace):
    return {(r.phase, r.op) for r in trace.records if r.kind != "choice"}


def test_resnet_runs_the_same_ops_in_real_meta_and_fake():
    traces = {mode: opaudit.trace(resnet.get_model, resnet.get_inputs, train=True, mode=mode,
                                  loss_fn=resnet.get_loss) for mode in ("real", "meta", "fake")}
    assert {t.meta.mode for t in traces.values()} == {"real", "meta", "fake"}
    assert traces["meta"].meta.device == "meta"
    # the optimizer's step counter lives on the CPU in every mode: its lift_fresh/_to_copy may differ
    # the autograd engine sums a residual branch's gradients in place (add_) where it may reuse the buffer, out of
    # place (add) on meta tensors and under a dispatch mode; fake tensors run under FakeTensorMode, so the Python
    # recorder takes them, under whose own mode a reshape also views where the C++ recorder sees _reshape_alias, and
    # PyTorch detaches for the mode
    assert [traces[m].meta.recorder for m in ("real", "meta", "fake")] == ["native", "native", "python"]
    fold = {"aten::add_.Tensor": "aten::add.Tensor", "aten::_reshape_alias.default": "aten::view.default"}
    folded = lambda ops: {(phase, fold.get(op, op)) for phase, op in ops if op != "aten::detach.default"}  # noqa: E731
    real = {k for k in _op_set(traces["real"]) if k[0] != "optimizer"}
    for mode in ("meta", "fake"):
        assert folded(real) == folded(k for k in _op_set(traces[mode]) if k[0] != "optimizer")
    foreach = {op for phase, op in _op_set(traces["real"]) if phase == "optimizer" and "_foreach_" in op}
    assert foreach and foreach <= {op for _, op in _op_set(traces["meta"])}


def test_auto_mode_measures_on_meta_and_says_why():
    said = []
    small = opaudit.trace(resnet.get_model, resnet.get_inputs, on_mode=lambda m, why: said.append((m, why)))
    assert small.meta.mode == "real" and "25.6 M parameters" in small.meta.mode_reason
    assert said == [("real", small.meta.mode_reason)]

    class Huge(nn.Module):  # 4 G parameters: built only on meta, never allocated
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.empty(65536, 65536))

        def forward(self, x):
            return x @ self.w[: x.shape[-1]]

    big = opaudit.trace(Huge, lambda: torch.randn(2, 8))
    assert big.meta.mode == "meta" and "more than 25%" in big.meta.mode_reason


def test_choice_thresholds_on_available_memory():
    with torch.device("meta"):
        m = nn.Linear(1024, 1024)  # 4 MiB of parameters
    assert choose(m, train=True, available=2**30)[0] == "real"
    assert choose(m, train=True, available=32 * 2**20)[0] == "meta"  # 16 MiB needed > 25% of 32 MiB


def test_a_given_cpu_model_traced_on_meta_is_copied_not_moved():
    model = nn.Linear(8, 8)
    weight = model.weight
    trace = opaudit.trace(model, torch.randn(2, 8), mode="meta")
    assert trace.meta.mode == "meta"
    assert model.weight is weight and model.weight.device.type == "cpu"


def test_bert_traces_on_meta_with_a_recorded_guess():
    real = opaudit.trace(hf_models.bert, mode="real")
    meta = opaudit.trace(hf_models.bert, mode="meta")
    assert sum(meta.meta.scalar_guesses.values()) >= 1
    assert all(k.endswith(".py:" + k.rsplit(":", 1)[1]) for k in meta.meta.scalar_guesses)
    assert not real.meta.scalar_guesses
    # the same ops, except where PyTorch picks per device (attention): compare outside choices
    # (the math path returns another memory layout, so .contiguous() after it copies: one clone, after which the
    # reshape views; on the CPU's path the output is contiguous and reshape takes _reshape_alias)
    outside = lambda t: {r.op for r in t.records if r.within is None and r.kind != "choice"}  # noqa: E731
    assert outside(real) ^ outside(meta) <= {"aten::clone.default", "aten::_reshape_alias.default"}
    choices = lambda t: {r.op for r in t.records if r.kind == "choice"}  # noqa: E731
    assert choices(real) == choices(meta) == {"aten::scaled_dot_product_attention.default"}


def test_user_scalar_oracle_decides_the_branch():
    class Branchy(nn.Module):
        def forward(self, x):
            return x.exp() if bool((x > 0).all()) else x.abs()

    seen = []

    def oracle(t, where):
        seen.append(where)
        return False

    trace = opaudit.trace(Branchy(), torch.randn(3), mode="meta", scalar_oracle=oracle)
    assert "aten::abs.default" in trace.ops() and "aten::exp.default" not in trace.ops()
    assert seen and seen[0].startswith("test_modes.py:")


def test_fake_mode_builds_inside_fake_tensor_mode():
    p = prepare(lambda: nn.Linear(4, 4), lambda: torch.randn(2, 4), "fake", train=False)
    from torch._subclasses.fake_tensor import FakeTensor

    assert isinstance(p.model.weight, FakeTensor) and p.mode == "fake"


def test_a_factory_error_is_the_users_error():
    def broken():
        raise ValueError("no such layer size")

    with pytest.raises(opaudit.OpauditError) as err:
        opaudit.trace(broken, lambda: torch.randn(1))
    assert err.value.exit_code == 3
    assert "no such layer size" in err.value.message
    assert "test_modes.py" in err.value.details


def test_meta_shortcuts_give_what_the_meta_kernels_give():
    # on meta, an optimizer's foreach updates and zeros_like skip torch's slow Python meta kernels;
    # the results must be the same tensors (shape, dtype, strides), and the ops still recorded
    ps = [torch.randn(3, 4, device="meta"), torch.randn(5, device="meta").expand(2, 5).t()]
    cases = [(torch._foreach_sqrt, (ps,)), (torch._foreach_add, (ps, 1.0)), (torch._foreach_mul, (ps, ps)),
             (torch._foreach_addcdiv, (ps, ps, ps, [0.1, 0.2])), (torch.zeros_like, (ps[1],)),
             (torch.ones_like, (ps[0],))]
    for op, args in cases:
        ref = op(*args)
        with opaudit.record() as rec:
            got = op(*args)
        as_list = lambda r: r if isinstance(r, (list, tuple)) else [r]  # noqa: E731
        assert [(t.shape, t.dtype, t.stride(), t.device.type) for t in as_list(ref)] == \
               [(t.shape, t.dtype, t.stride(), t.device.type) for t in as_list(got)], op
        assert len(rec.trace.records) == 1
    with opaudit.record() as rec:
        torch._foreach_add_(ps[:1], 1.0)  # in place: still recorded
    assert rec.trace.ops() == {"aten::_foreach_add_.Scalar"}
    # mixed dtypes promote: the shortcut steps aside for them
    mixed = [torch.randn(2, device="meta"), torch.randn(2, device="meta", dtype=torch.float16)]
    with opaudit.record():
        out = torch._foreach_mul(mixed, [mixed[1], mixed[0]])
    assert [t.dtype for t in out] == [torch.float32, torch.float32]
