"""opaudit.trace on a model the caller built, on the simulated CUDA device (tests/tracing/test_device.py): the
model stays where it was; the trace is CUDA's, autocast's casts and the optimizer's foreach ops included. A model
with weight norm (whose hooks hold its parameters) moves there as on a GPU, each Parameter kept."""

import torch

import opaudit

m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8))
t = opaudit.trace(m, torch.randn(2, 8), train=True, amp="bf16", device="cuda")
assert next(m.parameters()).device.type == "cpu", "the given model was moved"
assert t.meta.device == "cuda" and t.meta.simulated["name"] == "cudasim", t.meta
assert ("float32->bfloat16",) in {r.dtypes for r in t.records if r.op == "aten::_to_copy.default"}
assert "aten::_foreach_add_.Tensor" in t.host_ops() and "aten::_foreach_lerp_.Scalar" in t.ops()
for norm in (torch.nn.utils.weight_norm, torch.nn.utils.parametrizations.weight_norm):
    t = opaudit.trace(lambda norm=norm: norm(torch.nn.Conv1d(4, 4, 3)), lambda: torch.randn(1, 4, 8), train=True,
                      mode="real", device="cuda")
    assert t.meta.status == "complete" and "aten::_weight_norm_interface.default" in t.ops(), (norm, t.ops())
print("ok")
