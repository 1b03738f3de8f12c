"""The CUDA path without a GPU: scripts and models traced on a simulated CUDA device, host and device records,
and the trace agreeing with the rehearsal of the same script.

The simulation renames PrivateUse1 once per process, so everything that simulates runs through the command
line, in a process of its own."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from helpers import ROOT, run_cli, run_python

import opaudit
from opaudit.fallback import Stats
from opaudit.matrix import load_matrix
from opaudit.rehearsal import compare_device_ops

SCRIPT = ROOT / "tests" / "fixtures" / "scripts" / "cuda_bf16_fused.py"


def _records(path):
    return json.loads(path.read_text())["records"]


# the command line's two engines for CUDA: the C++ stand-in (opaudit.standin, the default where it builds) and
# the rehearsal's simulated device (where it does not, or OPAUDIT_CUDA_STAND_IN=0)
ENGINES = {"stand-in": ({}, "cuda"), "simulator": ({"OPAUDIT_CUDA_STAND_IN": "0"}, "cudasim")}


@pytest.mark.parametrize("engine", ENGINES)
def test_a_cuda_script_takes_its_cuda_path_without_a_gpu(tmp_path, engine):
    env, name = ENGINES[engine]
    out = tmp_path / "cuda.json"
    audit = tmp_path / "audit.json"
    rc, stdout, stderr = run_cli("trace", "-q", "--json", str(out), "-t", "musa@1.3.0", "--audit-json", str(audit),
                                 "--", str(SCRIPT), cwd=tmp_path, env=env)
    assert rc == 0, stderr[-2000:]
    assert "(bfloat16, cuda)" in stdout  # torch.cuda.is_available() and is_bf16_supported() answered True
    meta = json.loads(out.read_text())["meta"]
    assert meta["device"] == "cuda" and meta["simulated"]["name"] == name and meta["simulated"]["engine"] == engine
    assert meta["simulated"]["target"].startswith("cuda@")
    records = _records(out)
    fused = [r for r in records if r["op"] == "aten::_fused_adamw_.default"]
    assert fused and all(r["phase"] == "optimizer" and r["where"] == "device" for r in fused)
    casts = {tuple(r["dtypes"]) for r in records if r["op"] == "aten::_to_copy.default" and r["where"] == "device"}
    assert ("float32->bfloat16",) in casts  # autocast's casts, with the dtype they cast to
    where = {(r["op"], r["where"]) for r in records}
    # the batches are cut on the host (randint, stack), then copied to the device
    assert {("aten::randint.default", "host"), ("aten::stack.default", "host"),
            ("aten::_to_copy.default", "mixed")} <= where
    assert ("aten::_local_scalar_dense.default", "device") in where  # loss.item()
    # model.to(device) copies the parameters, as on a GPU; the simulation's swap of Parameter objects
    # (detach, requires_grad_) is not the script's and is not recorded
    line = SCRIPT.read_text().splitlines().index("model = TinyLM().to(device)") + 1
    at_to = {r["op"] for r in records if r["source"] and r["source"].endswith(f"{SCRIPT.name}:{line}")}
    assert "aten::_to_copy.default" in at_to
    assert not at_to & {"aten::requires_grad_.default", "aten::detach.default"}
    # the audit holds the device's records to the target: musa 1.3.0 lacks the fused AdamW, as the rehearsal says
    (verdict,) = json.loads(audit.read_text())["targets"]
    assert verdict["target"] == "musa@1.3.0" and verdict["missing"] == ["_fused_adamw_ (optimizer)"]
    rc, _, stderr = run_cli("run", "--simulate", "musa@1.3.0", "--strict", "--", str(SCRIPT), cwd=tmp_path)
    assert rc == 3 and "aten::_fused_adamw_" in stderr


def test_device_cpu_traces_the_cpu_path(tmp_path):
    out = tmp_path / "cpu.json"
    rc, stdout, stderr = run_cli("trace", "-q", "--no-audit", "--device", "cpu", "--json", str(out), "--",
                                 str(SCRIPT), "--device", "cpu", cwd=tmp_path)
    assert rc == 0, stderr[-2000:]
    assert "(float16, cpu)" in stdout
    data = json.loads(out.read_text())
    assert data["meta"]["device"] == "cpu" and data["meta"]["simulated"] is None
    assert {r["where"] for r in data["records"]} == {"device"}  # on the CPU, the CPU is the device
    ops = {r["op"] for r in data["records"]}
    assert "aten::_fused_adamw_.default" not in ops and "aten::_foreach_add_.Scalar" not in ops
    rc, _, stderr = run_cli("trace", "--device", "gpu", "--", str(SCRIPT))
    assert rc == 2 and "gpu" in stderr


def test_a_disagreement_between_trace_and_rehearsal_is_named(tmp_path):
    """The same comparison finds an op the rehearsal ran that the trace does not have, and the reverse."""
    out, stats = tmp_path / "t.json", tmp_path / "stats.json"
    rc, _, stderr = run_cli("trace", "-q", "--no-audit", "--json", str(out), "--", str(SCRIPT), cwd=tmp_path)
    assert rc == 0, stderr[-2000:]
    trace = opaudit.load_trace(out)
    rc, _, stderr = run_cli("run", "--simulate", trace.meta.simulated["target"], "-q", "--stats", str(stats), "--",
                            str(SCRIPT), cwd=tmp_path)
    assert rc == 0, stderr[-2000:]
    data = json.loads(stats.read_text())
    gone = next(o for o in data["ops"] if o["op"] == "mm")
    data["ops"].remove(gone)
    data["ops"].append({**gone, "op": "_thnn_fused_gru_cell"})
    changed = Stats.from_json(data)
    agreement = compare_device_ops(trace, changed)
    assert agreement.trace_only == {"mm"} and agreement.rehearsal_only == {"_thnn_fused_gru_cell"}
    assert not agreement.equal and agreement.to_json()["equal"] is False
    # a checkpoint's storages on the trace's device (set_ over a storage, the empty tensor a storage copy sets),
    # which the rehearsal's checkpoints move without those ops, are reported apart; an empty tensor alone is not
    model = next(r for r in trace.records if r.where == "device" and r.kind == "op")
    empty = dataclasses.replace(model, op="aten::empty.memory_format")
    storage = dataclasses.replace(model, op="aten::set_.source_Storage_storage_offset")
    data["ops"] = [o for o in data["ops"] if o["op"] != "empty.memory_format"]
    no_empty = Stats.from_json(data)
    trace.records.append(empty)
    alone = compare_device_ops(trace, no_empty)
    assert "empty.memory_format" in alone.trace_only and not alone.checkpoint_storage
    trace.records.append(storage)
    both = compare_device_ops(trace, no_empty)
    assert both.checkpoint_storage == {"empty.memory_format", "set_.source_Storage_storage_offset"}
    assert both.trace_only == {"mm"} and both.to_json()["checkpoint_storage"] == sorted(both.checkpoint_storage)
    # a gradient summed in place (add_) on the C++ recorder's device path, which a rehearsal on the wrapper
    # engine (a tensor subclass to PyTorch) sums out of place: excused as mode_path, and only against the wrapper
    assert trace.meta.recorder == "native"
    trace.records.append(dataclasses.replace(model, op="aten::add_.Tensor", phase="backward"))
    data["ops"] = [o for o in data["ops"] if o["op"] != "add_.Tensor"]
    native_rehearsal = compare_device_ops(trace, Stats.from_json(data))
    assert "add_.Tensor" in native_rehearsal.trace_only
    wrapper_rehearsal = compare_device_ops(trace, Stats.from_json({**data, "engine": "wrapper"}))
    assert "add_.Tensor" not in wrapper_rehearsal.trace_only and "add_.Tensor" in wrapper_rehearsal.mode_path


@pytest.mark.parametrize("engine", ENGINES)
def test_scan_builds_and_runs_the_model_on_simulated_cuda(tmp_path, engine):
    env, name = ENGINES[engine]
    out = tmp_path / "scan.json"
    rc, stdout, stderr = run_cli("scan", "examples/model.py", "--train", "--amp", "bf16", "-q", "--json", str(out),
                                 "-t", "musa@1.3.0", "-t", "musa@2.0.1", env=env)
    assert rc == 0, stderr[-2000:]
    data = json.loads(out.read_text())
    assert data["meta"]["device"] == "cuda" and data["meta"]["simulated"]["name"] == name
    assert data["meta"]["simulated"]["engine"] == engine
    host = {r["op"] for r in data["records"] if r["where"] == "host"}
    # AdamW(foreach) keeps its step counters on the host, as on CUDA: no device runs those ops
    assert {"aten::_foreach_add_.Tensor", "aten::lift_fresh.default"} <= host
    assert any(r["dtypes"] == ["float32->bfloat16"] for r in data["records"] if r["op"] == "aten::_to_copy.default")
    assert "musa@1.3.0   2.2.0     runs natively" in stdout and "musa@2.0.1   2.2.0     runs natively" in stdout


def test_meta_mode_tells_host_calls_apart_too():
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    trace = opaudit.trace(lambda: model, lambda: torch.randn(4, 8), train=True, mode="meta", amp="bf16")
    host = {r.op for r in trace.host_records}
    assert "aten::_foreach_add_.Tensor" in host  # AdamW's step counters
    assert "aten::_foreach_add_.Tensor" not in trace.ops()
    assert "aten::_foreach_add_.Tensor" in trace.ops(host=True)
    assert any(r.dtypes == ("float32->bfloat16",) for r in trace.records if r.op == "aten::_to_copy.default")
    keys = [(r.op, r.kind, r.phase, r.dtypes, r.module, r.source, r.within, r.shapes, r.where) for r in trace.records]
    assert len(keys) == len(set(keys))


def test_a_cpu_trace_is_all_device_and_casts_carry_their_output_dtype():
    x = torch.randn(4, 4)

    def step():
        y = x.to(torch.bfloat16)
        return y.view(torch.int16).sum() + x.double().sum()

    with opaudit.record() as rec:
        step()
        step()
    t = rec.trace
    assert {r.where for r in t.records} == {"device"}
    casts = sorted(r.dtypes for r in t.records if r.op in ("aten::_to_copy.default", "aten::view.dtype"))
    assert casts == [("bfloat16->int16",), ("float32->bfloat16",), ("float32->float64",)]
    keys = [(r.op, r.phase, r.dtypes, r.source) for r in t.records]
    assert len(keys) == len(set(keys))  # one record per distinct key, however many bytecode offsets a line has


def test_caveats_match_either_side_of_a_cast():
    m = load_matrix("mps@2.5.0")  # documents float64 as unsupported for every op
    plain = m.caveats("aten::_to_copy.default", ("float64",))
    assert plain and m.caveats("aten::_to_copy.default", ("float32->float64",)) == plain
    assert m.caveats("aten::_to_copy.default", ("float64->float32",)) == plain
    assert m.caveats("aten::_to_copy.default", ("float32->bfloat16",)) == []


def test_the_api_traces_a_given_model_on_simulated_cuda_and_leaves_it_where_it_was():
    proc = run_python("trace_api_on_cuda.py")
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


def test_cuda_idioms_answer_as_a_cuda_build_on_its_gpu_and_as_a_cpu_build_on_a_plugin(tmp_path):
    """A 0-dim device tensor formats as its number, torch.version.cuda / cuDNN / the capability answer as the
    CUDA wheel of the release's torch on the GPU of coverage_db/curated/cuda_build.toml (so the script picks
    bf16 and c10d's per-device backend form), gradient clipping takes CUDA's foreach path, and a group bound
    to its device (device_id) forms. A vendor's rehearsal answers as its plugin's CPU build of torch: no CUDA
    version, so fp16 and a plain "nccl", mapped onto the target's backend."""
    from opaudit.rehearsal.device import cuda_build

    script = ROOT / "tests" / "fixtures" / "scripts" / "cuda_idioms.py"
    out = tmp_path / "trace.json"
    rc, stdout, stderr = run_cli("trace", "-q", "--no-audit", "--json", str(out), "--", str(script), cwd=tmp_path)
    assert rc == 0, stderr[-2000:]
    build = cuda_build(torch.__version__)
    assert f"cuda {build['cuda']} capability-8 True autocast torch.bfloat16" in stdout
    assert "fp32 autocast True" in stdout and "not supported" not in stderr
    assert "step 2 loss 0." in stdout and "norm " in stdout
    where = {(r["op"], r["where"]) for r in _records(out)}
    assert ("aten::_foreach_norm.Scalar", "device") in where and ("aten::_foreach_mul_.Tensor", "device") in where
    assert ("aten::_to_copy.default", "device") in where
    rc, stdout, stderr = run_cli("run", "--simulate", "ascend", "--", str(script), cwd=tmp_path)
    assert rc == 0, stderr[-2000:]
    assert "cuda None capability-8 False autocast torch.float16" in stdout and "step 2 loss 0." in stdout
    # torch_npu's autocast takes fp16 and bf16 only: torch's warning, at the user's line
    assert "fp32 autocast False" in stdout
    assert f"cuda_idioms.py:{_line_of(script, 'dtype=torch.float32')}: UserWarning: In npu autocast" in stderr


def test_cuda_build_versions_come_from_the_nearest_listed_torch():
    from opaudit.rehearsal.device import cuda_build

    assert cuda_build("2.13.0")["cuda"] == "13.0" and cuda_build("2.13.0")["cudnn"] == "9.20.0"
    assert cuda_build("2.12.1")["release"] == "2.11.0"  # 2.12 publishes no METADATA: the newest below it
    assert cuda_build("1.13.1")["release"] == "2.0.1"  # below every entry: the oldest
    assert cuda_build("2.13.0")["gpu"]["capability"] == [9, 0]


def _line_of(path, text):
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)

