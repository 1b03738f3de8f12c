"""Module and source-line attribution, asserted against the models' own structure."""

from __future__ import annotations

from collections import Counter

import torch
from torch import nn

import opaudit
from opaudit.tracing.recorder import Recording, recording


def _calls_by_module(trace, op, phase):
    c: Counter[str] = Counter()
    for r in trace.records:
        if r.op == op and r.phase == phase:
            c[r.module] += r.calls
    return c


def test_resnet_forward_ops_belong_to_the_module_that_runs_them(resnet_train):
    trace, model = resnet_train
    convs = {name for name, m in model.named_modules() if isinstance(m, nn.Conv2d)}
    bns = {name for name, m in model.named_modules() if isinstance(m, nn.BatchNorm2d)}
    steps = trace.meta.steps
    assert _calls_by_module(trace, "aten::convolution.default", "forward") == {c: steps for c in convs}
    # batch norm is a device-selected composite: one choice record per call, not the CPU's kernels
    assert _calls_by_module(trace, "aten::batch_norm.default", "forward") == {b: steps for b in bns}
    assert "aten::native_batch_norm.default" not in trace.ops("forward")
    assert trace.modules["layer4.0.downsample.0"] == "Conv2d"
    assert trace.modules["layer4.0"] == "Bottleneck"


def test_resnet_backward_is_exact_where_hook_based_tracking_is_not(resnet_train):
    # ModuleTracker reports layer4.0.conv3/bn3's backward as downsample.0 (residual branches
    # interleave in backward); sequence numbers tie each backward op to its forward op.
    trace, model = resnet_train
    convs = {name for name, m in model.named_modules() if isinstance(m, nn.Conv2d)}
    bns = {name for name, m in model.named_modules() if isinstance(m, nn.BatchNorm2d)}
    steps = trace.meta.steps
    conv_bw = _calls_by_module(trace, "aten::convolution_backward.default", "backward")
    bn_bw = _calls_by_module(trace, "aten::native_batch_norm_backward.default", "backward")
    assert {r.within for r in trace.records if r.op == "aten::native_batch_norm_backward.default"} == {
        "aten::batch_norm.default"}
    assert conv_bw == {c: steps for c in convs}
    assert bn_bw == {b: steps for b in bns}
    in_layer4_0 = {m for m in conv_bw if m.startswith("layer4.0.")}
    assert in_layer4_0 == {"layer4.0.conv1", "layer4.0.conv2", "layer4.0.conv3", "layer4.0.downsample.0"}
    # every backward op has a module (AccumulateGrad names its parameter's module) except those of
    # the loss, computed outside the model, and the gradient seed of loss.backward()
    loose = [r for r in trace.records if r.phase == "backward" and r.module is None]
    loss_line = {r.source for r in loose if r.source}
    assert len(loss_line) == 1 and trace.sources[loss_line.pop()].startswith("return nn.functional.cross_entropy")
    assert {r.op for r in loose if r.source is None} == {"aten::ones_like.default"}
    assert trace.meta.unattributed_backward_calls == 0


def test_resnet_source_lines_point_at_the_model_file(resnet_train):
    trace, _ = resnet_train
    conv_sources = {r.source for r in trace.records if r.op == "aten::convolution.default"}
    assert all(s.startswith("examples/resnet.py:") for s in conv_sources)
    lines = {trace.sources[s] for s in conv_sources}
    assert "out = self.relu(self.bn1(self.conv1(x)))" in lines
    assert "identity = self.downsample(x)" in lines
    # backward ops carry the line of the forward op that created their autograd node
    bw = {r.source for r in trace.records if r.op == "aten::convolution_backward.default"}
    assert bw == conv_sources


def test_gpt2_embedding_backward_goes_to_each_embedding(gpt2_train):
    # ModuleTracker reports the wte embedding's backward under wpe
    bw = _calls_by_module(gpt2_train, "aten::embedding_dense_backward.default", "backward")
    assert bw == {"transformer.wte": 1, "transformer.wpe": 1}
    assert gpt2_train.sources  # transformers' modeling file lines are the model's lines
    assert any(s.startswith("transformers/models/gpt2/modeling_gpt2.py:")
               for s in gpt2_train.sources)


class _LSTMTagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(50, 16)
        self.lstm = nn.LSTM(16, 32, num_layers=2, batch_first=True)
        self.head = nn.Linear(32, 5)

    def forward(self, tokens):
        out, _ = self.lstm(self.embed(tokens))
        return self.head(out)


def test_lstm_choice_and_its_backward_are_attributed_to_the_lstm():
    torch.manual_seed(0)
    trace = opaudit.trace(_LSTMTagger(), torch.randint(0, 50, (3, 7)), train=True)
    choice = [r for r in trace.records if r.kind == "choice"]
    assert {r.op for r in choice} == {"aten::lstm.input"}
    assert {r.module for r in choice} == {"lstm"}
    # the forward kernels are this CPU's pick (oneDNN's RNN): not recorded; their backward runs in
    # the autograd engine, and is recorded, marked as the CPU's choice and tied to the LSTM
    inner = [r for r in trace.records if r.within == "aten::lstm.input"]
    assert {r.phase for r in inner} == {"backward"}
    assert {r.module for r in inner} == {"lstm"}
    assert any(r.op.startswith("aten::mkldnn_rnn_layer_backward") for r in inner)


def test_module_outside_the_root_is_named_by_its_caller():
    class Wrapper(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = nn.Linear(4, 4)

        def forward(self, x):
            return self.inner(x)

    helper = nn.ReLU()
    model = Wrapper()
    rec = Recording(root=model)
    with recording(rec):
        helper(model(torch.randn(2, 4)))
    records, modules, _ = rec.records()
    by_op = {r.op: r.module for r in records}
    assert by_op["aten::addmm.default"] == "inner"
    assert by_op["aten::relu.default"] == "ReLU"  # a top-level module the tracer was not told about
    assert modules["inner"] == "Linear"


def test_optimizer_ops_are_attributed_to_the_optimizer(resnet_train):
    trace, _ = resnet_train
    opt = [r for r in trace.records if r.phase == "optimizer"]
    assert opt and {r.module for r in opt} == {"<AdamW>"}
    assert trace.modules["<AdamW>"] == "AdamW"
