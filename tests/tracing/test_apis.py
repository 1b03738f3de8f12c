"""CompositeImplicitAutograd APIs recorded above their decomposition (trace/apis.py), and how releases on
an older PyTorch are judged for them and for the ops of a newer optimizer (version_skew)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import opaudit
from opaudit.report.audit import markdown_text, to_json
from opaudit.tracing.apis import api_ops

SCHEMA = json.loads((Path(opaudit.__file__).parent / "report" / "audit.schema.json").read_text())
OLD_CUDA = ["cuda@2.0.0", "cuda@2.1.0", "cuda@2.2.0", "cuda@2.3.0"]


class DiffAttentionBlock(nn.Module):
    """In the style of a differential-attention layer: a per-head nn.RMSNorm after SDPA."""

    def __init__(self, dim: int = 16, heads: int = 2):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.head_norm = nn.RMSNorm(dim // heads, eps=1e-5, elementwise_affine=False)
        self.out = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).reshape(b, t, 3, self.heads, d // self.heads).transpose(1, 3).unbind(2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = self.head_norm(y)
        return self.norm(x + self.out(y.transpose(1, 2).reshape(b, t, d)))


@pytest.fixture(scope="module")
def rms_trace() -> opaudit.Trace:
    torch.manual_seed(0)
    return opaudit.trace(DiffAttentionBlock(), (torch.randn(2, 5, 16),), train=True)


@pytest.fixture(scope="module")
def rms_audit(rms_trace):
    return opaudit.audit(rms_trace, ["cuda@2.3.0", "cuda@2.4.0", "ascend@2.1.0", "ascend@2.4.0"])


def test_rms_norm_is_recorded_above_its_decomposition(rms_trace):
    apis = {(r.op, r.phase): r for r in rms_trace.records if r.kind == "api"}
    rms = apis[("aten::rms_norm.default", "forward")]
    assert rms.module == "head_norm" and rms.calls == 1
    assert rms.source is not None and rms.source.endswith(f"test_apis.py:{_line_of('self.head_norm(y)')}")
    assert ("aten::layer_norm.default", "forward") in apis and ("aten::linear.default", "forward") in apis
    # no backend receives it: the ops are its decomposition, and api records are not op calls
    assert "aten::rms_norm.default" not in rms_trace.ops()
    assert "aten::rsqrt.default" in rms_trace.ops("forward")
    assert rms_trace.calls() == rms_trace.meta.total_calls
    # attention stays a device-selected choice, recorded once as such
    kinds = {r.kind for r in rms_trace.records if r.op == "aten::scaled_dot_product_attention.default"}
    assert kinds == {"choice"}
    assert "scaled_dot_product_attention" not in api_ops()


def test_the_bindings_are_put_back(rms_trace):
    for f in (torch.rms_norm, torch.layer_norm, F.linear, torch._C._nn.linear, torch.Tensor.reshape):
        assert not hasattr(f, "__opaudit_original__")
    assert F.linear is torch._C._nn.linear


def test_a_later_recording_follows_bindings_changed_since_the_last(tmp_path, monkeypatch):
    """The second recording of a process replaces what the first did without resolving each binding again,
    unless a binding changed since: a module loaded in between that binds an api under its own name is
    watched too, and an entry point someone else replaced is left to them."""
    class Calls(nn.Module):
        def __init__(self, fn):
            super().__init__()
            self.fn = fn

        def forward(self, x):
            return self.fn(x)

    def rms_calls(fn) -> int:
        rec = opaudit.trace(Calls(fn), (torch.randn(2, 4),))
        return sum(r.calls for r in rec.records if r.kind == "api" and r.op == "aten::rms_norm.default")

    from opaudit.tracing import apis

    assert rms_calls(lambda x: torch.rms_norm(x, [4])) == 1
    planned = apis._plan[1]
    assert rms_calls(lambda x: torch.rms_norm(x, [4])) == 1
    assert apis._plan[1] is planned  # nothing changed: the same replacements, not resolved again
    (tmp_path / "binds_rms.py").write_text("import torch\n\nrms = torch.rms_norm\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import binds_rms

    assert rms_calls(lambda x: binds_rms.rms(x, [4])) == 1
    assert binds_rms.rms is torch.rms_norm  # put back

    def mine(*args, **kwargs):
        return torch._C._VariableFunctions.rms_norm(*args, **kwargs)

    monkeypatch.setattr(torch, "rms_norm", mine)
    assert rms_calls(lambda x: torch.rms_norm(x, [4])) == 0  # not a builtin any more: not watched
    assert torch.rms_norm is mine


def _line_of(code: str) -> int:
    lines = Path(__file__).read_text(encoding="utf-8").splitlines()
    return next(i for i, line in enumerate(lines, 1) if code in line and "def " not in line and "_line_of" not in line)


def test_rms_norm_model_is_version_skew_before_pytorch_2_4(rms_audit):
    a = rms_audit
    v = a.verdict("cuda@2.3.0")
    assert v.verdict == "version_skew" and v.needs_torch == "2.4.0"
    assert v.skew == ["rms_norm (forward)"]
    assert v.summary.startswith("needs PyTorch >= 2.4.0: 1 op not in its PyTorch 2.3.0")
    assert not v.runs
    assert a.verdict("cuda@2.4.0").verdict == "runs"
    # a vendor's release on PyTorch 2.1 needs the newer PyTorch too, whatever its kernels
    assert a.verdict("ascend@2.1.0").verdict == "version_skew"
    assert a.verdict("ascend@2.4.0").verdict != "version_skew"
    rows = a.frame[(a.frame["kind"] == "api") & (a.frame["op"] == "aten::rms_norm.default")]
    by_target = dict(zip(rows["target"], rows["status"], strict=True))
    assert by_target["cuda@2.3.0"] == "version_skew" and by_target["cuda@2.4.0"] == "composite"


def test_the_landscape_shows_releases_with_an_older_pytorch_apart(rms_audit):
    a = rms_audit
    oldest = a.oldest_running()
    assert oldest["cuda"]["native"] == "cuda@2.4.0"
    assert oldest["cuda"]["version_skew"] == OLD_CUDA
    land = {v.target: v for v in a.landscape()["cuda"]}
    assert all(land[t].verdict == "version_skew" for t in OLD_CUDA)
    assert all(land[t].verdict == "runs" for t in land if t not in OLD_CUDA)
    md = markdown_text(a)
    assert "| PyTorch too old |" in md and "| cuda | cuda@2.4.0 | cuda@2.4.0 | 2.0.0 … 2.3.0 (4) |" in md
    doc = to_json(a)
    jsonschema.validate(doc, SCHEMA)
    target = next(t for t in doc["targets"] if t["target"] == "cuda@2.3.0")
    assert target["verdict"] == "version_skew" and target["needs_torch"] == "2.4.0"


def test_foreach_step_counters_of_a_newer_optimizer_on_older_cuda():
    """torch.optim's foreach AdamW increments CPU step counters with _foreach_add_.Tensor (PyTorch >= 2.2);
    PyTorch 2.0 and 2.1 do the same with _foreach_add_.Scalar: those releases run it, not 'uncertain'."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    trace = opaudit.trace(model, (torch.randn(4, 8),), train=True,
                          optimizer=lambda params: torch.optim.AdamW(params, foreach=True))
    assert "aten::_foreach_add_.Tensor" in trace.ops("optimizer")
    a = opaudit.audit(trace, ["cuda@2.0.0", "cuda@2.1.0", "cuda@2.2.0"], landscape=False)
    f = a.frame[a.frame["op"] == "aten::_foreach_add_.Tensor"]
    for target in ("cuda@2.0.0", "cuda@2.1.0"):
        row = f[f["target"] == target].iloc[0]
        assert row["status"] == "native" and row["via"] == "_foreach_add_.Scalar"
    for v in a.selected_verdicts:
        assert "aten::_foreach_add_.Tensor" not in " ".join(v.unknown + v.skew)


def test_gates_read_an_api_only_where_its_pytorch_lacks_it(rms_audit):
    a = rms_audit
    assert a.worst(["cuda@2.3.0"]) == "version_skew"
    f = a.frame[(a.frame["target"] == "cuda@2.4.0") & (a.frame["kind"] != "api")]
    assert a.worst(["cuda@2.4.0"]) == f["status"].max()


def test_each_api_call_is_counted_once_on_the_simulated_cuda_device():
    """On the rehearsal's simulated device (the library API's where torch came first), with its own wrappers of
    the entry points that take a device, each api call is counted once, as on the CPU."""
    torch.manual_seed(0)
    on_cpu = opaudit.trace(DiffAttentionBlock(), (torch.randn(2, 5, 16),), train=True)
    torch.manual_seed(0)
    on_cuda = opaudit.trace(DiffAttentionBlock(), (torch.randn(2, 5, 16),), train=True, device="cuda")
    assert on_cuda.meta.simulated

    def apis(t):
        calls: dict[tuple[str, str], int] = {}
        for r in t.records:
            if r.kind == "api":
                calls[r.op, r.phase] = calls.get((r.op, r.phase), 0) + r.calls
        return calls
    assert apis(on_cuda) == apis(on_cpu)
    assert apis(on_cuda)[("aten::linear.default", "forward")] == 2
