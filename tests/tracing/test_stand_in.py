"""The C++ stand-in for CUDA (opaudit.standin): the command line's device for CUDA code, checked against the
rehearsal's simulated device, which stays the device wherever the stand-in cannot be loaded.

Each trace runs the command line in a process of its own (the stand-in must be loaded before torch is)."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from helpers import ROOT, run_cli, run_python

import opaudit
from opaudit import standin
from opaudit.fallback import Stats
from opaudit.matrix.matrix import normalize
from opaudit.rehearsal import compare_device_ops

SCRIPTS = {
    "lm-bf16-fused": (ROOT / "tests" / "fixtures" / "scripts" / "cuda_bf16_fused.py", []),
    "train_cuda": (ROOT / "examples" / "train_cuda.py",
                   ["--epochs", "1", "--steps-per-epoch", "2", "--batch-size", "4"]),
    "ddp-one-rank": (ROOT / "tests" / "fixtures" / "scripts" / "ddp_one_rank.py", []),
    # an LSTM: PyTorch sends CUDA tensors to the fused cell, which has no CPU kernel (it reads ./input.txt)
    "lstm": (ROOT / "tests" / "fixtures" / "rehearsal_corpus" / "owner__tiny" / "train.py", ["--device", "cuda"]),
    # sparse embeddings: a dense op's sparse gradient on the device, and SparseCUDA's ops (host_sparse.h)
    "sparse-embedding": (ROOT / "tests" / "fixtures" / "scripts" / "sparse_embedding.py", []),
}


def _trace(tmp_path, name, script, args, env):
    out = tmp_path / f"{name}.json"
    rc, stdout, stderr = run_cli("trace", "-q", "--no-audit", "--json", str(out), "--", str(script), *args,
                                 cwd=tmp_path, env=env)
    assert rc == 0, stderr[-2000:]
    # cuDNN is reported available (as on a GPU) and takes no tensor (the device runs the native kernels): an
    # RNN asks without torch's "compiled without cuDNN" warning
    assert "without cuDNN" not in stderr
    if name == "ddp-one-rank":  # the one-rank group answers to NCCL's name, as on a GPU
        assert "done on nccl" in stdout
    return json.loads(out.read_text())


def _counts(data) -> Counter:
    return Counter({(r["op"], r["kind"], r["phase"], r["where"], tuple(r["dtypes"])): r["calls"]
                    for r in data["records"]})


@pytest.mark.parametrize("name", SCRIPTS)
def test_the_stand_in_records_what_the_simulated_device_records(tmp_path, name):
    """Two engines, one answer (and, for three of the scripts, the rehearsal runs the trace's device ops),
    where PyTorch's C++ does not test for CUDA itself (README: it does for
    ``x[mask] = 0``, ctc_loss, checkpoints): every op, phase, placement and dtype with its number of calls (the
    scripts cover bf16 autocast, fused and foreach AdamW, GradScaler, clip_grad_norm_, a DataLoader, a one-rank
    DDP, an LSTM)."""
    script, args = SCRIPTS[name]
    (tmp_path / "input.txt").write_text("a few words of text for a character model to learn from\n" * 8)
    native = _trace(tmp_path, name, script, args, {})
    simulated = _trace(tmp_path, name, script, args, {"OPAUDIT_CUDA_STAND_IN": "0"})
    assert native["meta"]["simulated"] == {**simulated["meta"]["simulated"], "name": "cuda", "engine": "stand-in"}
    if name == "sparse-embedding":  # SGD over a sparse gradient steps each parameter on CUDA too: no CPU warning
        assert native["meta"]["warnings"] == simulated["meta"]["warnings"] == []
    a, b = _counts(native), _counts(simulated)
    assert {k: (a[k], b[k]) for k in set(a) | set(b) if a[k] != b[k]} == {}
    if name in REHEARSED:
        _the_rehearsal_runs_the_device_ops_of_the_trace(tmp_path, name, script, args)


REHEARSED = {"lm-bf16-fused", "train_cuda", "ddp-one-rank"}


def _the_rehearsal_runs_the_device_ops_of_the_trace(tmp_path, name, script, args) -> None:
    """The trace's device ops (not the host's: data loading, step counters) are the ones its rehearsal on the
    target the trace stands for runs (opaudit.rehearsal.compare_device_ops)."""
    trace = opaudit.load_trace(tmp_path / f"{name}.json")  # the stand-in's, which scan and trace use by default
    target, stats = trace.meta.simulated["target"], tmp_path / "stats.json"
    rc, _, stderr = run_cli("run", "--simulate", target, "-q", "--stats", str(stats), "--", str(script), *args,
                            cwd=tmp_path)
    assert rc == 0, stderr[-2000:]
    host_only = {normalize(o) for o in trace.host_ops()} - {normalize(o) for o in trace.ops(kinds=("op",))}
    assert host_only, "the script has host-side ops (data loading, step counters)"
    agreement = compare_device_ops(trace, Stats.load(stats))
    assert agreement.target == target and agreement.trace_device and agreement.rehearsed
    assert (agreement.trace_only, agreement.rehearsal_only, agreement.host_on_device) == (set(), set(), set())
    assert agreement.equal


def test_a_stand_in_that_does_not_build_leaves_the_simulated_device(tmp_path):
    """No working compiler: the trace says why and runs on the simulated device, with the same result."""
    script, args = SCRIPTS["lm-bf16-fused"]
    # every part that this process may build goes to a folder of its own: a failed build is remembered where it
    # was tried, and the suite's shared folders (tests/conftest.py) are the other tests'
    env = {"OPAUDIT_CUDA_STAND_IN_BUILD": str(tmp_path / "build"), "CXX": "/bin/false",
           "OPAUDIT_REHEARSAL_DEVICE_BUILD": str(tmp_path / "device"), "OPAUDIT_TRACER_BUILD": str(tmp_path / "tracer")}
    out = tmp_path / "t.json"
    rc, stdout, stderr = run_cli("trace", "-q", "--no-audit", "--json", str(out), "--", str(script), *args,
                                 cwd=tmp_path, env=env)
    assert rc == 0, stderr[-2000:]
    assert "building the CUDA stand-in failed" in stderr and "simulated CUDA device instead" in stderr
    assert "(bfloat16, cuda)" in stdout
    assert json.loads(out.read_text())["meta"]["simulated"]["engine"] == "simulator"
    assert not (tmp_path / "build" / f"{standin.NAME}.so").exists()


def _python(*args: str) -> str:
    done = run_python("stand_in_child.py", *args, env={"PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def test_the_loader_imports_no_torch_and_declines_once_torch_is_imported():
    assert _python("loader") == "torch was imported before the stand-in could be loaded"


def test_the_library_api_takes_the_stand_in_where_the_caller_loaded_it_and_the_simulator_elsewhere():
    native = _python("api", "--stand-in")
    simulated = _python("api")
    assert native.startswith("stand-in ") and simulated.startswith("simulator ")
    # the same ops; the caller's model stays where it was
    assert native.split(" ", 1)[1] == simulated.split(" ", 1)[1] and native.endswith(" cpu")
