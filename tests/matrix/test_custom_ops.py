"""Ops outside aten: their registrations recorded in the trace, and resolved per target from them.

The ops are real ``torch.library`` ops defined here, registered for the keys a library would use
(a CPU-only kernel, a CUDA-only kernel with a fake kernel for tracing, a composite, a fake kernel
alone); the compiled ones are PyTorch's own (mkldnn::, c10d::).
"""

from __future__ import annotations

import json
import textwrap

import pytest
import torch
import torch.distributed  # noqa: F401  (registers the c10d:: ops)
from helpers import run_cli

import opaudit
from opaudit.cli import EXIT_FAIL_ON
from opaudit.errors import InputError
from opaudit.matrix import load_matrix
from opaudit.matrix.registrations import Registration, read
from opaudit.tracing.schema import Trace

NS = "opaudit_custom_test"
TARGETS = ["cuda@2.13.0", "cpu@2.13.0", "mps@2.13.0", "xpu@2.13", "musa@2.7.1", "ascend@2.13.0",
           "cambricon@1.25.0.dev+torch2.4.1"]


@pytest.fixture(scope="module")
def lib():
    lib = torch.library.Library(NS, "DEF")
    lib.define("cpu_only(Tensor x) -> Tensor")
    lib.impl("cpu_only", lambda x: x * 2, "CPU")
    lib.define("cuda_only(Tensor x) -> Tensor")  # a fused kernel: CUDA, plus a fake kernel to trace it
    lib.impl("cuda_only", lambda x: x * 2, "CUDA")
    torch.library.register_fake(f"{NS}::cuda_only", lambda x: torch.empty_like(x), lib=lib)
    lib.define("explicit(Tensor x) -> Tensor")
    lib.impl("explicit", lambda x: x.sin() * 2, "CompositeExplicitAutograd")
    lib.define("implicit(Tensor x) -> Tensor")
    lib.impl("implicit", lambda x: x.cos() + 1, "CompositeImplicitAutograd")
    lib.define("fake_only(Tensor x) -> Tensor")
    torch.library.register_fake(f"{NS}::fake_only", lambda x: torch.empty_like(x), lib=lib)
    lib.define("pu1_only(Tensor x) -> Tensor")  # what a backend loaded in the tracing process registers
    lib.impl("pu1_only", lambda x: x, "PrivateUse1")
    lib.impl("pu1_only", lambda x: torch.empty_like(x), "Meta")
    yield lib
    lib._destroy()


def op(name: str) -> str:
    return f"{NS}::{name}.default"


@pytest.fixture(scope="module")
def trace(lib) -> Trace:
    x, m = torch.randn(4), torch.randn(4, device="meta")
    ops = torch.ops.opaudit_custom_test
    with opaudit.record() as rec:
        ops.cpu_only(x)
        ops.explicit(x)
        ops.cuda_only(m)
        ops.fake_only(m)
        ops.pu1_only(m)
        with torch.inference_mode():  # the only mode in which a composite op reaches the recorder
            ops.implicit(torch.randn(4))
    return rec.trace


@pytest.fixture(scope="module")
def statuses(trace):
    a = opaudit.audit(trace, TARGETS, landscape=False)
    return {(k, g.op): s for k in a.selected for g, s in zip(a.groups, a.results[k], strict=True)}


def test_registrations_are_read_from_the_dispatcher(lib):
    assert read(op("cpu_only")) == Registration(("CPU",), ("CPU",))
    cuda = read(op("cuda_only"))
    assert cuda is not None and cuda.keys == ("CUDA", "Meta") and cuda.backends == ("CUDA",) and not cuda.compiled
    assert read(op("implicit")) == Registration(("CompositeImplicitAutograd",), ("CompositeImplicitAutograd",))
    assert read(f"{NS}::no_such_op.default") is None
    # compiled kernels: PyTorch's own, and its c10d PrivateUse1 kernel that any PrivateUse1 backend runs
    linear = read("mkldnn::_linear_pointwise.default")
    assert linear is not None and linear.compiled == ("CPU",) and linear.python == ("Meta",)
    allreduce = read("c10d::allreduce_.default")
    assert allreduce is not None and "PrivateUse1" in allreduce.keys and "PrivateUse1" in allreduce.torch


def test_the_trace_records_them_once_per_op_and_the_backend_view_of_a_composite(trace):
    assert trace.custom_ops == {op(n) for n in ("cpu_only", "explicit", "cuda_only", "fake_only", "pu1_only")}
    assert set(trace.registrations) == trace.custom_ops
    assert trace.registrations[op("cuda_only")].keys == ("CUDA", "Meta")
    # the CompositeImplicitAutograd op is not what a backend receives: its aten ops are recorded instead
    assert {"aten::cos.default", "aten::add.Tensor"} <= trace.ops()
    assert op("implicit") not in trace.ops()


def test_cuda_only_op_runs_on_cuda_and_nowhere_else(statuses):
    name = op("cuda_only")
    assert statuses[("cuda@2.13.0", name)].status == "native"
    for target in TARGETS[1:]:
        s = statuses[(target, name)]
        assert s.status == "missing", (target, s)
        assert "no CPU kernel for a fallback" in s.note or target == "cpu@2.13.0"
        assert "CUDA (Python), Meta (Python)" in s.note  # the note says what the dispatcher said


def test_cpu_only_op_takes_the_vendor_fallback_where_it_is_on(statuses):
    name = op("cpu_only")
    assert statuses[("cpu@2.13.0", name)].status == "native"
    assert statuses[("ascend@2.13.0", name)].status == "cpu_fallback"  # torch_npu's fallback is on by default
    assert statuses[("cambricon@1.25.0.dev+torch2.4.1", name)].status == "cpu_fallback"
    mps = statuses[("mps@2.13.0", name)]
    assert mps.status == "missing" and "PYTORCH_ENABLE_MPS_FALLBACK=1" in mps.note  # off by default
    assert statuses[("cuda@2.13.0", name)].status == "missing"  # registered from Python: the same on a GPU
    assert statuses[("musa@2.7.1", name)].status == "missing"


def test_composite_meta_only_and_foreign_private_use1(statuses):
    for target in TARGETS:
        assert statuses[(target, op("explicit"))].status == "composite"
        fake = statuses[(target, op("fake_only"))]
        assert fake.status == "unknown" and "no backend kernel" in fake.note
    pu1 = statuses[("ascend@2.13.0", op("pu1_only"))]  # not torch_npu's kernel: nothing runs it on the npu
    assert pu1.status == "missing" and "not torch_npu's" in pu1.note


def test_compiled_kernels_say_nothing_about_another_build():
    linear = read("mkldnn::_linear_pointwise.default")
    assert linear is not None
    cuda = load_matrix("cuda@2.13.0").resolve("mkldnn::_linear_pointwise.default", linear)
    assert cuda.status == "unknown" and "build installed where it was traced" in cuda.note
    assert load_matrix("ascend@2.13.0").resolve("mkldnn::_linear_pointwise.default", linear).status == "cpu_fallback"
    allreduce = read("c10d::allreduce_.default")
    assert allreduce is not None
    hccl = load_matrix("ascend@2.13.0").resolve("c10d::allreduce_.default", allreduce)
    assert hccl.status == "native" and "by PyTorch itself" in hccl.note


def test_vendor_data_for_third_party_ops_comes_first():
    cpu_build = Registration(("CPU", "Meta", "AutocastCPU"), ("Meta",))  # torchvision's CPU wheel registers these
    mlu = load_matrix("cambricon@1.25.0.dev+torch2.4.1")
    assert mlu.resolve("torchvision::nms.default", cpu_build).status == "native"
    roi_pool = mlu.resolve("torchvision::roi_pool.default", cpu_build)  # torch_mlu registers no roi_pool
    assert roi_pool.status == "cpu_fallback" and "not this one" in roi_pool.note
    assert load_matrix("musa@2.1.0").resolve("torchvision::nms.default", cpu_build).status == "native"
    assert load_matrix("cuda@2.13.0").resolve("torchvision::nms.default", cpu_build).status == "unknown"


def test_registrations_survive_json_and_old_traces_still_load(trace, tmp_path):
    back = Trace.load(trace.save(tmp_path / "t.json"))
    assert back.registrations == trace.registrations
    data = json.loads((tmp_path / "t.json").read_text())
    del data["registrations"]  # a trace written before they were recorded
    old = Trace.from_json(data)
    assert old.registrations == {}
    s = opaudit.audit(old, ["musa@2.7.1"], landscape=False)
    cuda_only = next(r for g, r in zip(s.groups, s.results["musa@2.7.1"], strict=True) if g.op == op("cuda_only"))
    assert cuda_only.status == "unknown" and "re-trace" in cuda_only.note
    data["registrations"] = {op("cuda_only"): ["CUDA"]}
    with pytest.raises(InputError, match="damaged"):
        Trace.from_json(data)


MODEL = '''
import torch
from torch import nn

lib = torch.library.Library("opaudit_fused", "DEF")
lib.define("gelu_bias(Tensor x, Tensor b) -> Tensor")
lib.impl("gelu_bias", lambda x, b: torch.nn.functional.gelu(x + b), "CUDA")
torch.library.register_fake("opaudit_fused::gelu_bias", lambda x, b: torch.empty_like(x), lib=lib)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return torch.ops.opaudit_fused.gelu_bias(self.fc(x), self.fc.bias)


def get_model():
    return Block()


def get_inputs():
    return (torch.randn(2, 8),)
'''


def test_fail_on_missing_trips_on_a_cuda_only_op_for_musa(tmp_path):
    model = tmp_path / "fused.py"
    model.write_text(textwrap.dedent(MODEL))
    trace = tmp_path / "t.json"
    code, out, err = run_cli("scan", str(model), "--mode", "meta", "-q", "--json", str(trace),
                             "-t", "musa", "-t", "cuda", "--fail-on", "missing")
    assert code == EXIT_FAIL_ON, err
    assert "opaudit_fused::gelu_bias" in out
    code, out, err = run_cli("report", str(trace), "-t", "cuda", "--fail-on", "missing")
    assert code == 0, err


SCRIPT = '''
import torch

lib = torch.library.Library("opaudit_userlib", "DEF")
lib.define("scale(Tensor x) -> Tensor")
lib.impl("scale", lambda x: x * 2, "CPU")

y = torch.ops.opaudit_userlib.scale(torch.ones(4, device="cuda"))
print("sum", float(y.sum()))
'''


def test_strict_rehearsal_fails_on_a_custom_op_the_target_lacks(tmp_path):
    script = tmp_path / "cpu_op.py"
    script.write_text(textwrap.dedent(SCRIPT))
    code, out, err = run_cli("run", "--simulate", "musa@2.7.1", "--strict", "--", str(script), cwd=tmp_path)
    assert code != 0 and "sum" not in out
    assert "opaudit_userlib::scale" in err and "no musa kernel" in err
    # Ascend's CPU fallback is on by default: the device runs it on the CPU, and so does the rehearsal
    stats = tmp_path / "stats.json"
    code, out, err = run_cli("run", "--simulate", "ascend@2.13.0", "--strict", "--stats", str(stats), "--",
                             str(script), cwd=tmp_path)
    assert code == 0, err
    assert "sum 8.0" in out
    ops = {o["op"]: o for o in json.loads(stats.read_text())["ops"]}
    assert ops["opaudit_userlib::scale"]["path"] == "vendor_cpu"


def test_torch_xpu_ops_registers_torchvision_kernels_by_release():
    """coverage_db/curated/xpu_torchvision_ops.tsv: the lazy XPU registrations of torch-xpu-ops, per release branch."""
    cpu_build = Registration(("CPU", "Meta", "AutocastCPU"), ("Meta",))
    nms, roi_align, deform = "torchvision::nms.default", "torchvision::roi_align.default", "torchvision::deform_conv2d"
    assert load_matrix("xpu@2.4").resolve(nms, cpu_build).status == "unknown"  # no map yet: no data
    xpu25 = load_matrix("xpu@2.5")
    assert xpu25.resolve(nms, cpu_build).status == "native"
    assert xpu25.resolve(roi_align, cpu_build).status == "cpu_fallback"  # the map's is_cpu_fallback
    assert load_matrix("xpu@2.6").resolve(roi_align, cpu_build).status == "native"
    assert xpu25.resolve(deform, cpu_build).status == "unknown"
    for line in ("2.7", "2.13", "2.14"):
        assert load_matrix(f"xpu@{line}").resolve(deform, cpu_build).status == "native"
    staged = {s.staged for s in load_matrix("xpu@2.14").release.sources}
    assert "coverage_db/curated/xpu_torchvision_ops.tsv" in staged


def test_pytorch_xla_registers_nms_by_hand_from_2_4():
    """coverage_db/curated/xla_torchvision_ops.tsv: TORCH_LIBRARY_IMPL(torchvision, XLA) of
    xla_manual_registration.cpp."""
    cpu_build = Registration(("CPU", "Meta", "AutocastCPU"), ("Meta",))
    old = load_matrix("xla@2.3.0").resolve("torchvision::nms.default", cpu_build)
    assert old.status == "cpu_fallback"  # no XLA kernel yet: XLA's always-on CPU fallback runs it
    for ref in ("2.4.0", "2.9.0", "master"):
        assert load_matrix(f"xla@{ref}").resolve("torchvision::nms.default", cpu_build).status == "native"
    assert load_matrix("xla@2.9.0").resolve("torchvision::roi_align.default", cpu_build).status == "cpu_fallback"
