"""Training traces: forward, loss, backward, at least two optimizer steps, the accelerator's optimizer."""

from __future__ import annotations

import torch
from torch import nn

import opaudit


def test_default_optimizer_is_foreach_adamw_stepped_twice(resnet_train):
    trace, model = resnet_train
    assert trace.meta.optimizer == "AdamW(foreach=True)"
    assert trace.meta.optimizer_steps == 2 and trace.meta.steps == 1
    opt = trace.ops("optimizer")
    assert {"aten::_foreach_lerp_.Scalar", "aten::_foreach_addcdiv_.ScalarList", "aten::_foreach_sqrt.default"} <= opt
    # step 1 initialises the state (zeros_like per parameter), later steps do not
    n_params = len(list(model.parameters()))
    assert trace.calls("aten::zeros_like.default", "optimizer") == 2 * n_params
    assert trace.calls("aten::_foreach_lerp_.Scalar", "optimizer") == 2


def test_llama_7b_shaped_model_trains_on_meta(llama7b_meta):
    t = llama7b_meta
    assert t.meta.mode == "meta" and "6,738.4 M parameters" in t.meta.mode_reason
    assert t.meta.phases == ["forward", "backward", "optimizer"] and t.meta.status == "complete"
    assert "aten::embedding_dense_backward.default" in t.ops("backward")
    assert "aten::_foreach_addcdiv_.ScalarList" in t.ops("optimizer")
    assert {r.module for r in t.records if r.op == "aten::embedding_dense_backward.default"} == {"model.embed_tokens"}
    # 32 decoder layers, each attending once: the choice is recorded per layer
    sdpa = [r for r in t.records if r.kind == "choice" and r.op == "aten::scaled_dot_product_attention.default"]
    assert sum(r.calls for r in sdpa) == 32
    assert len({r.module for r in sdpa}) == 32


def test_custom_loss_and_optimizer_are_used():
    model = nn.Sequential(nn.Linear(6, 3))

    def loss_fn(out, inputs):
        return nn.functional.mse_loss(out, torch.zeros_like(out))

    trace = opaudit.trace(model, torch.randn(4, 6), train=True, steps=3, loss_fn=loss_fn,
                          optimizer=lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9))
    assert trace.meta.optimizer == "SGD" and trace.meta.steps == 3 and trace.meta.optimizer_steps == 3
    assert "aten::mse_loss.default" in trace.ops("forward")
    assert "aten::mse_loss_backward.default" in trace.ops("backward")
    assert trace.calls("aten::addmm.default", "forward") == 3


def test_a_model_without_trainable_parameters_cannot_be_trained():
    model = nn.ReLU()
    try:
        opaudit.trace(model, torch.randn(3), train=True)
    except opaudit.OpauditError as e:
        assert "no parameter that requires grad" in e.message and e.exit_code == 2
    else:
        raise AssertionError("expected an error")


def test_a_failing_backward_keeps_a_partial_trace():
    class BadLoss(nn.Module):
        def forward(self, x):
            return x.detach().sum()  # nothing requires grad

    model = nn.Sequential(nn.Linear(3, 3))
    try:
        opaudit.trace(model, torch.randn(2, 3), train=True, loss_fn=lambda out, x: BadLoss()(out))
    except opaudit.OpauditError as e:
        assert e.exit_code == 3
        assert "the model failed in the backward pass" in e.message
        assert e.partial is not None and e.partial.meta.status == "partial"
        assert "aten::addmm.default" in e.partial.ops("forward")
    else:
        raise AssertionError("expected an error")


def test_bert_training_attributes_embeddings_and_classifier():
    import hf_models

    torch.manual_seed(0)
    t = opaudit.trace(hf_models.bert, train=True, mode="real")
    emb = {r.module: r.calls for r in t.records if r.op == "aten::embedding_dense_backward.default"}
    assert emb == {"bert.embeddings.word_embeddings": 1, "bert.embeddings.position_embeddings": 1,
                   "bert.embeddings.token_type_embeddings": 1}
    # the classification loss is the model's own (labels were given): computed in its forward
    assert "aten::nll_loss_forward.default" in t.ops("forward")
    layer_norm_bw = {r.module for r in t.records if r.op == "aten::native_layer_norm_backward.default"}
    assert len(layer_norm_bw) == 1 + 12 * 2  # embeddings.LayerNorm and two per encoder layer
    assert t.modules["classifier"] == "Linear"
