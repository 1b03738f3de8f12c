"""The sophgo adapter (torch-tpu) against its raw files and the documented numbers.

Documented numbers: sophgo/SOURCES.md ("Files": aten:TPU 322, aten:AutogradPrivateUse1 7, tpu:* 2+2, aten:CatchAll
1; PyTorch 2.8.0; commit fe9b478b of 2025-12-09) and research/vendors-dipu-biren-others.md section 5.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from opaudit.matrix.release import Release
from opaudit.matrix.sources import Context, sophgo

COUNTS = {"aten:TPU": 322, "aten:AutogradPrivateUse1": 7, "tpu:PrivateUse1": 2, "tpu:AutogradPrivateUse1": 2,
          "aten:CatchAll": 1}
# 3 of the 322 scanned names are no op of PyTorch 2.8 (isfinite.out, leakyRelu_, reshape_symint): their m.impl
# registers nothing usable, so native holds 319. The documented 322 counts the scanned names.
NOT_OPS = ["isfinite.out", "leakyRelu_", "reshape_symint"]


@pytest.fixture(scope="module")
def rel(ctx: Context) -> Release:
    rels = sophgo.releases(ctx)
    assert len(rels) == 1
    return rels[0]


@pytest.fixture(scope="module")
def folder(upstream: Path) -> Path:
    return upstream / "sophgo" / sophgo.FOLDER


def test_identity(rel: Release, upstream: Path) -> None:
    assert (rel.vendor, rel.name, rel.torch, rel.device_type, rel.dispatch_key, rel.package, rel.import_name) == (
        "sophgo", "main-fe9b478", "2.8.0", "tpu", "PrivateUse1", "torch_tpu", "torch_tpu")
    assert not rel.exact and "union" in rel.accuracy
    fb = rel.fallback
    assert fb.exists and fb.default_on and "cpu_fallback_for_dynamo" in fb.note
    assert "coverage_db/SOURCES.md#sophgo-cpu-fallback" in fb.note
    text = (upstream / "sophgo" / "SOURCES.md").read_text(encoding="utf-8")
    assert "torch==2.8.0+cpu" in text and "cpu_fallback_for_dynamo" in text
    for s in rel.sources:
        assert s.commit == "fe9b478bf1d648d0a6cc062f0e55cfb07f7e582c" and s.commit in text


def test_counts(rel: Release, folder: Path) -> None:
    reg = json.loads((folder / "derived" / "registered_ops.json").read_text(encoding="utf-8"))
    assert reg["counts"] == COUNTS
    assert {k: len(v) for k, v in reg["by_namespace_and_key"].items()} == COUNTS
    raw = (folder / "derived" / "aten_ops_PrivateUse1.txt").read_text(encoding="utf-8").split()
    assert len(raw) == COUNTS["aten:TPU"] and set(raw) == set(reg["by_namespace_and_key"]["aten:TPU"])
    assert set(raw) - set(rel.ops["native"]) == set(NOT_OPS)
    assert len(rel.ops["native"]) == COUNTS["aten:TPU"] - len(NOT_OPS)
    assert len(rel.ops["autograd"]) == COUNTS["aten:AutogradPrivateUse1"]
    assert rel.ops["custom"] == ["tpu::tpu_format_cast", "tpu::tpu_format_cast.Tensor"]
    assert any(", ".join(NOT_OPS) in s for s in rel.notes)


def test_spot_checks(rel: Release, folder: Path, ctx: Context) -> None:
    raw = set((folder / "derived" / "aten_ops_PrivateUse1.txt").read_text(encoding="utf-8").split())
    native = set(rel.ops["native"])
    for present in ("add.out", "mm.out", "native_layer_norm", "index.Tensor", "_copy_from", "where.self"):
        assert present in raw and present in native
    for absent in ("add.Tensor", "conv2d", "_fft_r2c", "linalg_qr"):
        assert absent not in raw and absent not in native
    assert "silu_backward" in rel.ops["autograd"] and "silu_backward" not in native
    t = ctx.torch_for("2.8.0")
    assert t is not None
    cuda = t.with_kernel("CUDA")
    assert any(f"{100 * len(cuda & native) / len(cuda):.1f}%" in s for s in rel.notes)
