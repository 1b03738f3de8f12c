"""The CUDA stand-in runs what CUDA runs: (op, dtype) pairs CUDA's kernels accept and the CPU's refuse run wide and
are cast back (opaudit/native/dtype_bridge.h, coverage_db/curated/cuda_dtypes.toml), and legacy typed CUDA tensors
work (opaudit/rehearsal/legacy.py), on the stand-in and on a rehearsal device."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers import FIXTURES, ROOT, run_cli

from opaudit.matrix.cuda_dtypes import from_opinfo, load

SCRIPTS = FIXTURES / "scripts"


def test_the_data_is_the_installed_torchs_opinfo():
    """cuda_dtypes.toml is what `opaudit db cuda-dtypes` reads from this torch's OpInfo database."""
    version, pairs, data = load()
    installed, found = from_opinfo()
    assert version == installed, "rerun: opaudit db cuda-dtypes"
    assert pairs == found
    assert {"aten::_softmax", "aten::_softmax_backward_data"} <= {k["op"] for k in data["kernel"]}
    assert ("histc", "", ("int16", "int32", "int64", "int8", "uint8")) in {(p.op, p.variant, p.dtypes) for p in pairs}


def test_every_opinfo_sample_of_every_pair_runs_on_the_stand_in(tmp_path):
    """Goal: every sample runs and equals the CPU's wide result rounded to the narrow dtype, but the pairs the
    data names as exceptions, each with its reason (and those fail: an exception that starts to run is removed)."""
    out = tmp_path / "report.json"
    done = subprocess.run([sys.executable, str(SCRIPTS / "opinfo_on_standin.py"), str(out)], capture_output=True,
                          text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    _, pairs, data = load()
    excepted = {e["op"] for e in data["exception"]}
    assert all(e["why"] for e in data["exception"])
    assert len(report["pairs"]) == sum(len(p.dtypes) for p in pairs)
    failed = {p["op"] for p in report["pairs"] if p["error"]}
    assert failed == excepted, [p for p in report["pairs"] if p["error"] and p["op"] not in excepted]
    assert [p for p in report["pairs"] if p["mismatch"]] == []
    ran = [p for p in report["pairs"] if not p["error"]]
    assert sum(p["samples"] for p in ran) > 1000 and len(ran) >= 0.95 * len(report["pairs"])
    bridged = {(op, dtype) for op, dtype, _ in report["bridged"]}
    assert ("aten::histc.default", "Int") in bridged and ("aten::abs.out", "Bool") in bridged
    # float16 convolutions run in float32 and rounded ([[wide]]: the CPU's half kernel is a slow reference path)
    assert {w["op"] for w in report["wide"]} == {"nn.functional.conv1d", "nn.functional.conv2d",
                                                  "nn.functional.conv_transpose2d"}
    assert all(w["samples"] and not w["error"] and not w["mismatch"] for w in report["wide"]), report["wide"]
    assert {("aten::convolution.default", "Half"), ("aten::convolution_backward.default", "Half")} <= bridged


def test_half_scores_softmaxed_into_float32_train_under_fp16_autocast(tmp_path):
    """x.half().softmax(-1, dtype=torch.float32) and histc of integer expert ids, in a model scanned with
    --train --amp fp16 on the CUDA path: a complete trace, the CUDA kernels recorded, the bridged calls counted
    as the device's own work and no op reported missing because of them."""
    out = tmp_path / "t.json"
    code, _, err = run_cli("scan", str(FIXTURES / "models" / "half_softmax_attention.py"), "--train", "--amp",
                           "fp16", "-t", "ascend", "-q", "--json", str(out))
    assert code == 0, err[-2000:]
    trace = json.loads(out.read_text())
    assert trace["meta"]["status"] == "complete" and trace["meta"]["simulated"]["engine"] == "stand-in"
    ops = {r["op"] for r in trace["records"]}
    assert {"aten::_softmax.default", "aten::_softmax_backward_data.default", "aten::histc.default"} <= ops
    half_to_float = [r for r in trace["records"] if r["op"] == "aten::_softmax.default"]
    assert any("float16" in json.dumps(r.get("dtypes", r)) for r in half_to_float)
    bridged = trace["meta"]["simulated"]["bridged"]
    assert bridged["aten::histc.default"] == {"int32": 1}
    assert any(op.startswith("aten::_softmax_backward_data") for op in bridged)


@pytest.mark.parametrize("how", [("trace", "-q", "--no-audit"), ("run", "--simulate", "ascend"),
                                 ("run", "--simulate", "cambricon")])
def test_legacy_cuda_tensor_types_run(tmp_path, how):
    """torch.cuda.FloatTensor(n, m), torch.cuda.LongTensor([...]), isinstance, .type(cls), .type('name') and
    x.type() as on a CUDA build: on the stand-in, and in a rehearsal of a target whose plugin has typed classes."""
    code, out, err = run_cli(*how, "--", str(SCRIPTS / "legacy_types.py"), cwd=tmp_path)
    assert code == 0, err[-2000:]
    device = "cuda" if how[0] == "trace" else {"ascend": "npu", "cambricon": "mlu"}[how[2]]
    assert f"legacy types ran on {device}:0" in out


def test_a_target_without_typed_classes_says_so_in_one_line(tmp_path):
    """MPS has no torch.mps.FloatTensor: the rehearsal names the class, the target, the line and lint's code."""
    code, out, err = run_cli("run", "--simulate", "mps", "--", str(SCRIPTS / "legacy_types.py"), cwd=tmp_path)
    assert code != 0
    assert "torch.cuda.FloatTensor: mps has no typed tensor classes on mps@" in err
    assert "OA109" in err and 'legacy_types.py", line 7' in err
    assert "Cannot initialize CUDA" not in err and "ATen_cuda" not in err
