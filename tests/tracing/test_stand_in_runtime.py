"""torch's own Python code on the C++ stand-in for CUDA (opaudit.standin.install): the CUDA runtime calls it makes
that the CPU build lacks (checkpoints loaded to cuda, nn.DataParallel's split) work there as on a GPU, and the
trace records the ops a GPU's trace has for them."""

from __future__ import annotations

import json

from helpers import ROOT, run_cli

SCRIPT = ROOT / "tests" / "fixtures" / "scripts" / "cuda_checkpoint_dp.py"


def _trace(tmp_path, env):
    out = tmp_path / "t.json"
    rc, stdout, stderr = run_cli("trace", "-q", "--no-audit", "--json", str(out), "--", str(SCRIPT), cwd=tmp_path,
                                 env=env)
    assert rc == 0, stderr[-2000:]
    return stdout, json.loads(out.read_text())


def _calls(data, op, where):
    return sum(r["calls"] for r in data["records"] if r["op"] == op and r["where"] == where and r["kind"] == "op")


def test_a_checkpoint_loads_back_to_cuda_and_data_parallel_splits_its_batch_on_the_stand_in(tmp_path):
    stdout, data = _trace(tmp_path, {})
    assert data["meta"]["simulated"]["engine"] == "stand-in"
    assert "loaded cuda:0 same" in stdout
    # DataParallel's scatter: one chunk per device (torch/csrc/cuda/comm.cpp splits in C++, as here)
    assert _calls(data, "aten::split.Tensor", "device") == 2
    assert not [r for r in data["records"] if r["kind"] == "api" and r["op"] in ("aten::chunk.default",)]
    # torch.load rebuilds each of the 4 parameters on its cuda storage, as on a GPU
    assert _calls(data, "aten::set_.source_Storage_storage_offset", "device") == 4
