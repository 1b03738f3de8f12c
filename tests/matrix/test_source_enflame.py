"""The enflame adapter (torch_gcu, one release per chip) against its raw files and the documented numbers.

Documented numbers: enflame/SOURCES.md ("Files": 455 supported items, 2 disabled, 1 optional item, 28 fallback
items, 728 effective ops, forced CPU fallback s60 23 / l600 6) and research/vendors-dipu-biren-others.md section 1
(455 entries, 728 ops, 28 forced-fallback ops) and section 5 (torch 2.10.0, TopsRider 3.7.1, S60 / L600).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from opaudit.matrix.release import Release
from opaudit.matrix.sources import Context, enflame

SUPPORTED, DISABLED, OPTIONAL, FALLBACK_ITEMS, EFFECTIVE = 455, 2, 1, 28, 728
FORCED = {"s60": 23, "l600": 6}  # gcu_op_fallback.yaml entries per chip
# S60 forces scatter_reduce.two_out only for reduce in {prod, mean}: it stays native with a caveat, so forced_cpu
# holds 22 for S60; L600 forces all 6 for every call.
CONDITIONAL = {"s60": {"scatter_reduce.two_out"}, "l600": set()}


@pytest.fixture(scope="module")
def rels(ctx: Context) -> dict[str, Release]:
    return {r.aliases[0]: r for r in enflame.releases(ctx)}


@pytest.fixture(scope="module")
def folder(upstream: Path) -> Path:
    return upstream / "enflame" / enflame.FOLDER


def test_releases(rels: dict[str, Release]) -> None:
    assert sorted(rels) == ["l600", "s60"]
    assert rels["s60"].order > rels["l600"].order  # plain `enflame` is the README's S60
    for chip, r in rels.items():
        assert r.name == f"f17a922-{chip}" and r.vendor_release == "3.7.1"
        assert (r.vendor, r.torch, r.device_type, r.dispatch_key, r.package, r.import_name) == (
            "enflame", "2.10.0", "gcu", "PrivateUse1", "torch_gcu", "torch_gcu")
        assert r.exact and "third-party" in r.accuracy
        assert any(s.startswith("third-party copy: sunnygui-L/torch-gcu") for s in r.notes)
        fb = r.fallback
        assert fb.exists and fb.default_on and "ENFLAME_PT_OP_DEBUG_CONFIG" in (fb.switch or "")


def test_yaml_counts(folder: Path, ctx: Context) -> None:
    raw = (folder / "gcu_native_functions.yaml").read_text(encoding="utf-8")
    y = yaml.safe_load(raw)
    assert len(y["supported"]) == SUPPORTED and len(y["optional"]) == OPTIONAL
    assert len(re.findall(r"(?m)^  disable: true$", raw)) == DISABLED
    assert "- name: angle\n  disable: true" in raw
    fb = yaml.safe_load((folder / "gcu_op_fallback.yaml").read_text(encoding="utf-8"))
    assert len(fb["fallback"]) == FALLBACK_ITEMS
    for chip, n in FORCED.items():
        assert sum(1 for e in fb["fallback"] if chip in e) == n
    t = ctx.torch_for("2.10.0")
    assert t is not None
    eff = enflame.effective(t, [e["name"] for e in y["supported"] if not e.get("disable")])
    assert len(eff) == EFFECTIVE
    derived = json.loads((folder / "derived" / "gcu_ops_effective_torch-2.10.0.json").read_text(encoding="utf-8"))
    assert set(derived["effective_registered_ops"]) == eff and derived["effective_count"] == EFFECTIVE
    assert {k: len(v) for k, v in derived["forced_cpu_fallback_by_chip"].items()} == FORCED


def test_native_and_forced(rels: dict[str, Release], folder: Path) -> None:
    fb = yaml.safe_load((folder / "gcu_op_fallback.yaml").read_text(encoding="utf-8"))
    for chip, r in rels.items():
        forced = set(r.ops["forced_cpu"])
        listed = {e["name"] for e in fb["fallback"] if chip in e}
        assert forced == listed - CONDITIONAL[chip] and len(forced) == FORCED[chip] - len(CONDITIONAL[chip])
        assert len(r.ops["native"]) == EFFECTIVE - len(forced)
        assert not forced & set(r.ops["native"])
        assert any(f"gcu_op_fallback.yaml lists {FORCED[chip]} for {chip}" in s for s in r.notes)
    s60, l600 = (set(rels[c].ops["native"]) for c in ("s60", "l600"))
    # spot checks against the raw yaml
    assert "sinh.out" in s60 and "sinh.out" not in l600 and "sinh.out" in rels["l600"].ops["forced_cpu"]
    assert "sinh" in s60 and "sinh" in l600  # only the listed name is forced; its functional variant stays
    assert "convolution_backward" in rels["s60"].ops["forced_cpu"] and "convolution_backward" in l600
    assert "scatter_reduce.two_out" in s60 and "scatter_reduce.two_out" in rels["l600"].ops["forced_cpu"]
    cav = next(c for c in rels["s60"].caveats if c.op == "scatter_reduce.two_out")
    assert "prod" in cav.note and "mean" in cav.note and cav.dtypes == []
    assert "bincount.out" in rels["s60"].ops["forced_cpu"]  # an autogen op of PyTorch 2.10 (the json says absent)
    for absent in ("angle", "angle.out", "repeat_interleave.self_Tensor"):
        assert absent not in s60
    assert "add.out" in s60 and "add.Tensor" in s60  # structured variant of a listed .out


def test_share_custom_and_caveats(rels: dict[str, Release], ctx: Context) -> None:
    t = ctx.torch_for("2.10.0")
    assert t is not None
    cuda = t.with_kernel("CUDA")
    for r in rels.values():
        native = set(r.ops["native"])
        assert any(f"{100 * len(cuda & native) / len(cuda):.1f}%" in s for s in r.notes)
        assert r.ops["custom"] == ["torchvision::nms", "torchvision::ps_roi_align", "torchvision::roi_align"]
        star = [c for c in r.caveats if c.op == "*"]
        assert [c.dtypes for c in star] == [["float64", "int64"]] and "silently down-casts" in star[0].note
        for s in r.sources:
            assert s.repo == "sunnygui-L/torch-gcu" and s.commit == "f17a922ab48d82b4458b6c8c4c2dd8dc7a3fba5e"
