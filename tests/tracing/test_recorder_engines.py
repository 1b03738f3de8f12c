"""The tracer's two recorders (opaudit/tracing/native.py): the C++ one on the dispatcher's Fake key, and the Python
TorchDispatchMode that records where the C++ one cannot. They must build the same records.

They differ only where a dispatch mode changes what PyTorch sends below it (at::isTensorSubclassLike holds while a
mode is on): a reshape's view where a plain tensor reaches ``_reshape_alias``, AccumulateGrad's out-of-place ``add``
where it adds into the gradient (``add_``), and ``detach`` calls made for the mode. The C++ recorder sees what a
device receives; those ops are compared by name only."""

from __future__ import annotations

import inspect
import json
from collections import Counter

import pytest
import torch
import torch.nn.functional as F
from helpers import ROOT, recorder_engine, run_cli
from torch import nn

import opaudit
from opaudit.tracing import native

# what a dispatch mode changes (module doc): a reshape's view or _reshape_alias, a gradient's add or add_, detach
FOLD = {"aten::_reshape_alias.default": "view|_reshape_alias", "aten::view.default": "view|_reshape_alias",
        "aten::add.Tensor": "add|add_", "aten::add_.Tensor": "add|add_"}
MODE_ONLY = "aten::detach.default"

pytestmark = pytest.mark.skipif(native.load() is None, reason=f"the C++ recorder cannot be built: {native.reason()}")


def _rows(records) -> Counter:
    out: Counter = Counter()
    for r in records:
        r = r if isinstance(r, dict) else vars(r)
        out[(r["op"], r["kind"], r["phase"], tuple(r["dtypes"]), r["module"], r["source"], r["within"],
             r["where"])] += r["calls"]
    return out


def _agree(a: Counter, b: Counter) -> None:
    """Equal, every op with its calls per phase, dtypes, module, line, choice and placement; where a mode changes
    which of two ops PyTorch sends, the pair's calls are added up."""
    def fold(c: Counter) -> Counter:
        out: Counter = Counter()
        for k, n in c.items():
            if k[0] != MODE_ONLY:
                out[(FOLD.get(k[0], k[0]), *k[1:])] += n
        return out

    fa, fb = fold(a), fold(b)
    assert {k: (fa[k], fb[k]) for k in set(fa) | set(fb) if fa[k] != fb[k]} == {}


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 16)
        self.lstm = nn.LSTM(16, 16, batch_first=True)
        self.norm = nn.RMSNorm(16)
        self.head = nn.Linear(16, 50)
        self.drop = nn.Dropout(0.1)

    def forward(self, ids):
        # in float32: oneDNN's bfloat16 LSTM needs AVX-512, and a CPU with AVX2 only refuses it
        with torch.autocast("cpu", enabled=False):
            h, _ = self.lstm(self.emb(ids))
        h = self.drop(F.layer_norm(self.norm(h), (16,)))
        out = self.head(h).float()
        return out if self.training else torch.ops.opaudit_engines.twice(out)


def _workload():
    torch.manual_seed(0)
    model = _Net()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    ids = torch.randint(0, 50, (2, 7))
    losses = []
    for _ in range(2):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(ids)
        loss = F.cross_entropy(logits.reshape(-1, 50), ids.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    model.eval()
    with torch.no_grad(), torch.autograd.profiler.record_function("evaluation"):
        model(ids).argmax(-1).to(torch.int32)
    return model, losses


@pytest.fixture(scope="module")
def twice_op():
    lib = torch.library.Library("opaudit_engines", "DEF")
    lib.define("twice(Tensor x) -> Tensor")
    lib.impl("twice", lambda x: x * 2, "CPU")  # a CPU-only custom op: the matrix resolves it by its kernels
    lib.impl("twice", lambda x: torch.empty_like(x), "Meta")
    yield
    lib._destroy()


def test_both_recorders_build_the_same_records_of_a_training_script(twice_op):
    traces, params = {}, {}
    for name in ("native", "python"):
        with recorder_engine(name), opaudit.record() as rec:
            model, losses = _workload()
        traces[name] = rec.trace
        params[name] = (losses, [p.detach().clone() for p in model.parameters()])
    native_trace, python_trace = traces["native"], traces["python"]
    assert (native_trace.meta.recorder, python_trace.meta.recorder) == ("native", "python")  # the trace says which
    _agree(_rows(native_trace.records), _rows(python_trace.records))
    # the recording changed nothing that ran
    assert params["native"][0] == params["python"][0]
    assert all(torch.equal(a, b) for a, b in zip(params["native"][1], params["python"][1], strict=True))
    ops = {(r.op, r.kind, r.phase) for r in native_trace.records}
    assert ("aten::lstm.input", "choice", "forward") in ops  # a device-selected composite, recorded whole
    assert ("aten::rms_norm.default", "api", "forward") in ops  # a CompositeImplicitAutograd API
    assert ("opaudit_engines::twice.default", "custom", "forward") in ops
    assert ("aten::_local_scalar_dense.default", "op", "forward") in ops  # loss.item()
    assert any(phase == "optimizer" and op.startswith("aten::_foreach_") for op, _, phase in ops)
    assert native_trace.meta.noise_calls == python_trace.meta.noise_calls > 0  # the profiler's markers
    assert native_trace.registrations.keys() == python_trace.registrations.keys() == {"opaudit_engines::twice.default"}
    casts = {r.dtypes[0] for r in native_trace.records if r.op == "aten::_to_copy.default"}
    assert {"float32->bfloat16", "int64->int32"} <= casts  # a cast records its output dtype
    # backward ops go to the module and line of the forward op that made their node
    lstm_back = [r for r in native_trace.records if r.phase == "backward" and r.within == "aten::lstm.input"]
    assert lstm_back and {r.module for r in lstm_back} == {"_Net.lstm"}
    src, first = inspect.getsourcelines(_Net.forward)
    line = first + next(i for i, text in enumerate(src) if "self.lstm(" in text)
    assert {r.source for r in lstm_back} == {f"tests/tracing/test_recorder_engines.py:{line}"}


def test_the_recorder_in_use_and_why():
    x = torch.ones(3)
    with opaudit.record() as rec:
        x + x
    assert rec.recording.engine == "native"
    with recorder_engine("python"), opaudit.record() as rec:
        x + x
    assert rec.recording.engine == "python" and "OPAUDIT_TRACER" in rec.recording.engine_reason
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(), opaudit.record() as rec:  # a mode's tensors never reach the key below the Python key
        torch.ones(3) + 1
    assert rec.recording.engine == "python" and "TorchDispatchMode" in rec.recording.engine_reason
    assert {r.op for r in rec.trace.records} >= {"aten::add.Tensor"}
    with opaudit.record() as outer:  # one recording in C++ at a time: a nested one records in Python
        with opaudit.record() as inner:
            x * x
    assert outer.recording.engine == "native" and inner.recording.engine == "python"


@pytest.mark.parametrize("name", ["native", "python"])
def test_max_ops_stops_at_the_same_op_on_both(name):
    x = torch.ones(3)
    with recorder_engine(name), opaudit.record(max_ops=5) as rec:
        for _ in range(10):
            x = x + 1
    assert rec.trace.meta.status == "stopped" and rec.trace.meta.total_calls == 5
    assert x.tolist() == [6.0, 6.0, 6.0]  # five adds ran, the sixth never did


def test_meta_mode_records_alike(twice_op):
    """On meta tensors: .item() answered by the oracle, and the optimizer's foreach shortcuts (the Python paths of the
    C++ recorder)."""
    def trace(name):
        with recorder_engine(name):
            return opaudit.trace(lambda: (_Net(), torch.zeros(2, 7, dtype=torch.long)), mode="meta", train=True,
                                 steps=2)
    a, b = trace("native"), trace("python")
    _agree(_rows(a.records), _rows(b.records))
    assert a.meta.mode == "meta" and any(r.op.startswith("aten::_foreach_") for r in a.records)


def test_the_command_line_records_alike_on_the_cuda_stand_in(tmp_path):
    """``opaudit trace`` of an unmodified CUDA script (bf16 autocast, fused AdamW, GradScaler): same records."""
    script = ROOT / "tests" / "fixtures" / "scripts" / "cuda_bf16_fused.py"
    data = {}
    for name in ("native", "python"):
        out = tmp_path / f"{name}.json"
        rc, _, stderr = run_cli("trace", "-q", "--no-audit", "--json", str(out), "--", str(script), cwd=tmp_path,
                                env={native.ENV_ENGINE: name})
        assert rc == 0, stderr[-2000:]
        data[name] = json.loads(out.read_text())
    assert data["native"]["meta"]["device"] == "cuda"
    _agree(_rows(data["native"]["records"]), _rows(data["python"]["records"]))


def test_without_a_compiler_the_python_recorder_records_and_the_command_line_says_why(tmp_path):
    script = tmp_path / "tiny.py"
    script.write_text("import torch\nx = torch.ones(3)\nprint((x + x).sum().item())\n")
    out = tmp_path / "t.json"
    rc, _, stderr = run_cli("trace", "-q", "--device", "cpu", "--no-audit", "--json", str(out), "--", str(script),
                            cwd=tmp_path, env={"CXX": "/bin/false", native.ENV_BUILD: str(tmp_path / "build")})
    assert rc == 0, stderr[-2000:]
    assert "building the tracer's C++ recorder failed" in stderr and "the Python recorder records instead" in stderr
    data = json.loads(out.read_text())
    assert data["meta"]["recorder"] == "python"
    assert {"aten::add.Tensor", "aten::sum.default"} <= {r["op"] for r in data["records"]}
