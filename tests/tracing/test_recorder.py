"""What the recorder keeps: op keys, kinds, dtypes, phases, choices; and what it leaves as it found it."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import opaudit
from opaudit.tracing.choices import choice_entries


def _ops(trace, **match):
    return {r.op for r in trace.records if all(getattr(r, k) == v for k, v in match.items())}


def test_op_keys_are_overloads_and_noise_is_counted_not_recorded():
    x = torch.randn(3, 4)
    with opaudit.record() as rec:
        y = x + x
        torch.relu(y)
        with torch.autograd.profiler.record_function("user-region"):
            y.sum()
    t = rec.trace
    assert _ops(t) == {"aten::add.Tensor", "aten::relu.default", "aten::sum.default"}
    assert t.meta.noise_calls == 2  # the profiler record's enter and exit
    assert t.meta.status == "complete"
    add = next(r for r in t.records if r.op == "aten::add.Tensor")
    assert add.dtypes == ("float32", "float32") and add.kind == "op" and add.phase == "forward"
    assert add.source.endswith("test_recorder.py:" + str(test_op_keys_are_overloads_and_noise_is_counted_not_recorded
                                                         .__code__.co_firstlineno + 3))


def test_dtype_signature_covers_tensor_lists_and_shapes_are_optional():
    a, b = torch.ones(2, dtype=torch.bfloat16), torch.ones(3, dtype=torch.int64)
    with opaudit.record(shapes=True) as rec:
        torch.cat([a.float(), b.float()])
        torch._foreach_add([a, a], 1.0)
    recs = {r.op: r for r in rec.trace.records}
    assert recs["aten::cat.default"].dtypes == ("float32[]",)
    assert recs["aten::_foreach_add.Scalar"].dtypes == ("bfloat16[]",)
    assert recs["aten::_to_copy.default"].shapes in {("2",), ("3",)}
    assert recs["aten::cat.default"].shapes == ("[2]",)


def test_custom_ops_are_findings_of_their_own():
    lib = torch.library.Library("opaudit_test", "DEF")
    try:
        lib.define("scale(Tensor x, float s) -> Tensor")
        lib.impl("scale", lambda x, s: x * s, "CompositeExplicitAutograd")
        with opaudit.record() as rec:
            torch.ops.opaudit_test.scale(torch.randn(4), 2.0)
        t = rec.trace
        assert t.custom_ops == {"opaudit_test::scale.default"}
        assert next(r for r in t.records if r.op == "opaudit_test::scale.default").kind == "custom"
    finally:
        lib._destroy()


class _Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.mha = nn.MultiheadAttention(16, 4, batch_first=True)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        y, _ = self.mha(x, x, x, need_weights=False)
        return self.drop(y) + F.scaled_dot_product_attention(x[:, None], x[:, None], x[:, None])[:, 0]


def test_device_selected_composites_are_recorded_where_the_choice_happens():
    torch.manual_seed(0)
    model = _Attention().train()
    trace = opaudit.trace(model, torch.randn(2, 5, 16), train=True)
    choices = {(r.op, r.module) for r in trace.records if r.kind == "choice"}
    # the attention inside nn.MultiheadAttention is seen too: the watch wraps module-level names
    assert ("aten::scaled_dot_product_attention.default", "mha") in choices
    assert ("aten::scaled_dot_product_attention.default", "") in choices
    assert ("aten::dropout.default", "drop") in choices
    # what the CPU picks inside runs unrecorded in forward; its backward is marked as inside the choice
    assert "aten::bernoulli_.float" not in trace.ops()
    inner = {(r.phase, r.op, r.module) for r in trace.records if r.within == "aten::dropout.default"}
    assert ("backward", "aten::mul.Tensor", "drop") in inner


def test_an_in_place_dropout_records_the_ops_it_runs():
    """nn.Dropout(inplace=True) calls dropout_, which takes the bernoulli mask on every device (no fused kernel):
    its forward ops are device ops like any other. It returns its input, which must not pass for an eval-mode
    dropout that ran nothing (torchvision's MobileNetV3 drops in place: its trace lacked them)."""
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5, inplace=True), nn.Linear(4, 2)).train()
    trace = opaudit.trace(model, torch.randn(2, 4), train=True)
    assert not [r for r in trace.records if r.kind == "choice"]
    forward = {r.op for r in trace.records if r.phase == "forward" and r.module == "1"}
    assert {"aten::bernoulli_.float", "aten::div_.Scalar", "aten::mul_.Tensor"} <= forward, forward


def test_eval_mode_dropout_runs_no_op_and_leaves_no_choice():
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5)).eval()
    trace = opaudit.trace(model, torch.randn(2, 4))
    assert not [r for r in trace.records if r.kind == "choice"]
    assert trace.meta.phases == ["forward"] and not trace.meta.train


def test_watched_entry_points_are_restored_even_after_an_error():
    before = [(holder, attr, getattr(holder, attr)) for holder, attr, _ in choice_entries()]
    try:
        with opaudit.record():
            F.dropout(torch.randn(3), 0.5)
            raise KeyError("boom")
    except KeyError:
        pass
    for holder, attr, fn in before:
        assert getattr(holder, attr) is fn, f"{holder.__name__}.{attr} was left wrapped"
    assert not hasattr(torch._VF.__dict__.get("lstm", None), "__opaudit_original__")


def test_phases_follow_autograd_and_the_optimizer():
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with opaudit.record(root=model) as rec:
        loss = model(torch.randn(3, 4)).pow(2).mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    t = rec.trace
    assert t.meta.phases == ["forward", "backward", "optimizer"]
    assert "aten::ones_like.default" in _ops(t, phase="backward")  # the gradient seed
    assert "aten::mm.default" in _ops(t, phase="backward")
    assert "aten::add_.Tensor" in _ops(t, phase="optimizer") or "aten::_foreach_add_.List" in _ops(t, phase="optimizer")
    assert {r.module for r in t.records if r.phase == "optimizer" and r.op.startswith("aten::_foreach_norm")} == {None}


def test_max_ops_stops_the_recording_with_what_was_seen():
    x = torch.randn(2)
    with opaudit.record(max_ops=10) as rec:
        for _ in range(100):
            x = x + 1
    assert rec.trace.meta.status == "stopped"
    assert rec.trace.meta.total_calls == 10 == sum(r.calls for r in rec.trace.records)
    assert "max-ops" in rec.trace.meta.error
