"""The live probe: against the CPU and Meta keys of this torch, and a PrivateUse1 plugin registered here."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers import FIXTURES, ROOT

from opaudit.errors import InputError
from opaudit.matrix import load_matrix
from opaudit.matrix.matrix import Matrix
from opaudit.matrix.probe import installed_torch_ops, probe


def test_cpu_probe_matches_the_static_cpu_matrix():
    import torch

    live = probe("cpu")
    line = ".".join(torch.__version__.split(".")[:2])
    static = load_matrix(f"cpu@{line}").release.op_set("native")
    native = set(live.ops["native"])
    # every op the static data gives a CPU kernel is registered live ...
    assert static <= native
    # ... and what is registered beyond it is registered by hand in C++ (quantized RNNs), not in the yaml
    assert all(op.startswith("quantized_") for op in native - static), sorted(native - static)
    assert not live.fallback.exists


def test_meta_probe_and_the_installed_op_table():
    live = probe("meta")
    assert "add.out" in live.ops["native"] and "empty.memory_format" in live.ops["native"]
    ops = installed_torch_ops()
    assert ops is not None and ops.get("add.Tensor").delegate == "add.out"
    m = Matrix(live, ops)
    assert m.resolve("aten::add.Tensor").status == "native"
    assert m.resolve("aten::linear").status == "composite"


def test_unknown_device_type():
    with pytest.raises(InputError, match="unknown device type 'npu'"):
        probe("npu")


def test_probe_of_a_privateuse1_plugin(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(FIXTURES / "plugins"), "COLUMNS": "200"}
    out_file = tmp_path / "toy.toml"
    args = ["matrix", "probe", "--device", "toy", "--import", "toydevice", "--out", str(out_file),
            "--op", "aten::add_.Tensor", "--op", "aten::relu.default", "--op", "aten::dropout.default",
            "--op", "toy::fused_gelu"]
    proc = subprocess.run([sys.executable, "-m", "opaudit", *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "dispatch key PrivateUse1" in proc.stdout
    assert "CPU fallback: on by default" in proc.stdout
    m = load_matrix(str(out_file))
    assert m.release.device_type == "toy" and m.release.fallback.exists
    assert set(m.release.ops["native"]) == {"add.out", "mm", "empty.memory_format", "as_strided", "_copy_from",
                                            "native_dropout"}
    # toy's own op, beside the c10d collectives that torch itself registers for any PrivateUse1 device
    assert "toy::fused_gelu" in m.release.ops["custom"]
    assert all(op.startswith(("toy::", "c10d::")) for op in m.release.ops["custom"])
    assert (m.resolve("aten::add_.Tensor").status, m.resolve("aten::add_.Tensor").via) == ("native", "add.out")
    assert m.resolve("aten::relu.default").status == "cpu_fallback"  # no toy kernel: the fallback runs it
    assert m.resolve("aten::transpose.int").status == "composite"  # a view over as_strided
    assert m.resolve("toy::fused_gelu").status == "native"
    drop = m.resolve("aten::dropout.default")  # PrivateUse1 takes native_dropout, which toy has; not its backward
    assert drop.status == "cpu_fallback" and drop.via == "native_dropout_backward"
