"""--amp: CUDA's autocast policy, on CPU, meta and fake tensors, and torch left as it was."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import opaudit
from opaudit.data import load_toml
from opaudit.tracing.autocast import cuda_policy


class _Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)
        self.norm = nn.LayerNorm(16)
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        h = self.norm(torch.relu(self.fc(x)))
        return self.head(h).log_softmax(-1)


def _dtypes(trace, op, phase="forward"):
    return {r.dtypes for r in trace.records if r.op == op and r.phase == phase}


def test_policy_data_matches_this_torchs_autocast_cuda_registrations():
    data = load_toml("coverage_db", "curated/autocast_policy.toml")["policy"]
    listed = {"aten::" + n.partition("=")[0] for names in data.values() for n in names}
    registered = set(torch._C._dispatch_get_registrations_for_dispatch_key("AutocastCUDA"))
    assert registered <= listed, f"on AutocastCUDA but not in the data: {sorted(registered - listed)}"
    # what the data lists and this torch lacks are Dimname overloads (not registered in this build)
    assert all("imname" in name or "names_" in name for name in listed - registered)
    assert cuda_policy().unknown == []


@pytest.mark.parametrize("mode", ["real", "meta", "fake"])
def test_fp16_training_shows_the_cuda_policy(mode):
    torch.manual_seed(0)
    trace = opaudit.trace(_Block, lambda: torch.randn(8, 16), train=True, amp="fp16", mode=mode)
    assert trace.meta.amp == {"dtype": "float16", "policy": "cuda", "grad_scaler": True}
    # matmuls in half, layer_norm and log_softmax in float32 (on CPU autocast they would stay half)
    assert _dtypes(trace, "aten::addmm.default") == {("float16", "float16", "float16")}
    assert _dtypes(trace, "aten::native_layer_norm.default") == {("float32", "float32", "float32")}
    assert _dtypes(trace, "aten::_log_softmax.default") == {("float32",)}
    assert "aten::_to_copy.default" in trace.ops("forward")
    # the GradScaler of fp16 training, as a CUDA AMP script runs it
    opt = trace.ops("optimizer")
    assert "aten::_amp_foreach_non_finite_check_and_unscale_.default" in opt
    assert "aten::_amp_update_scale_.default" in opt


def test_bf16_has_no_grad_scaler_and_casts_to_bfloat16():
    trace = opaudit.trace(_Block(), torch.randn(4, 16), train=True, amp="bf16")
    assert trace.meta.amp["grad_scaler"] is False
    assert _dtypes(trace, "aten::addmm.default") == {("bfloat16", "bfloat16", "bfloat16")}
    assert not any("_amp_" in op for op in trace.ops())


def test_autocast_kernels_are_removed_after_the_trace():
    opaudit.trace(_Block(), torch.randn(4, 16), amp="fp16")
    # CPU autocast is torch's own again: softmax stays in low precision under the CPU policy
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = torch.randn(4, 4) @ torch.randn(4, 4)
        z = y.softmax(-1)
    assert y.dtype == torch.bfloat16 and z.dtype == torch.bfloat16
    assert not torch.is_autocast_enabled("cpu")


def test_attention_choice_reports_the_dtype_it_runs_in():
    class Attn(nn.Module):
        def forward(self, q):
            return nn.functional.scaled_dot_product_attention(q, q, q)

    trace = opaudit.trace(Attn(), torch.randn(1, 2, 4, 8), amp="bf16")
    choice = [r for r in trace.records if r.kind == "choice"]
    assert [r.dtypes for r in choice] == [("bfloat16", "bfloat16", "bfloat16")]
