"""The dipu adapter (DeepLink DIPU, one release per DIPU vendor) against its raw files and the documented numbers.

Documented numbers: dipu/SOURCES.md ("Counts at torch 2.1.x", the file tables) and research/vendors-dipu-biren-others.md
section 2.1 (393 entries, 370 distinct aten names, 262 SupportedDiopiFunctions names) and section 2.2 (the per-vendor
table: DIOPI functions defined, aten ops registered, generated but skipped; the DIOPI test-skip counts).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from opaudit.matrix.release import Release
from opaudit.matrix.sources import Context, dipu

# dipu/SOURCES.md "Counts at torch 2.1.x" = research 2.2 table: vendor -> (registered, generated but skipped);
# supa / droplet: candidates (upper bound), skipped unknown
COUNTS = {"cuda": (343, 8), "muxi": (342, 8), "camb": (335, 16), "ascend": (322, 32), "topsrider": (256, 98),
          "kunlunxin": (77, 276), "supa": (353, None), "droplet": (355, None)}
# research 2.2 table, "DIOPI impl dir and functions defined". muxi: the research writes "impl/torch + muxi: 357",
# the sum of 356 and the 1 muxi function; that function (diopiCat) is also defined in impl/torch, so the set muxi
# exports has 356 (as aten_ops_by_vendor.json's diopi_functions_implemented says). We assert 356.
FUNCTIONS = {"cuda": 356, "muxi": 356, "camb": 314, "ascend": 282, "topsrider": 194, "kunlunxin": 42}
# research 2.2 "DIOPI conformance-test skip lists ... Cases with skips / torch functions touched"
SKIPS = {"supa": (77, 58), "droplet": (263, 161), "topsrider": (290, 170), "camb": (161, 100), "ascend": (99, 60),
         "kunlunxin": (42, 31)}
DROPLET_CASES = 287  # research section 1 ("287 DIOPI test-skip cases": every case listed, with or without skips)
ALWAYS = 20  # dipu/SOURCES.md: always_registered_ops.txt, 20 ops
# research 2.2 "convert_config.yaml: implicit down-casts": camb, kunlunxin and topsrider cast int64->int32 and
# float64->float32, camb also complex128->complex64
COMMON_CASTS = {"camb": ["complex128", "float64", "int64"], "kunlunxin": ["float64", "int64"],
                "topsrider": ["float64", "int64"]}


@pytest.fixture(scope="module")
def rels(ctx: Context) -> dict[str, Release]:
    return {r.name: r for r in dipu.releases(ctx)}


@pytest.fixture(scope="module")
def root(upstream: Path) -> Path:
    return upstream / "dipu"


def test_one_release_per_vendor(rels: dict[str, Release], root: Path) -> None:
    data = json.loads((root / dipu.DIPU_DIR / "derived" / "aten_ops_by_vendor.json").read_text(encoding="utf-8"))
    assert sorted(rels) == sorted(COUNTS) == sorted(data["vendors"])
    assert data["torch_version_code"] == dipu.TORCH_CODE
    for r in rels.values():
        assert (r.vendor, r.torch, r.device_type, r.dispatch_key, r.package, r.import_name) == (
            "dipu", "2.1.0", "cuda", "XPU", "torch_dipu", "torch_dipu")
        assert r.exact == (COUNTS[r.name][1] is not None)
    assert sorted(r.order for r in rels.values()) == list(range(1, 9))
    assert max(rels.values(), key=lambda r: r.order).name == "camb"
    assert "biren" in rels["supa"].aliases and "mlu" in rels["camb"].aliases


def test_counts(rels: dict[str, Release], ctx: Context, root: Path) -> None:
    always = set((root / dipu.DIPU_DIR / "derived" / "always_registered_ops.txt").read_text(encoding="utf-8").split())
    assert len(always) == ALWAYS
    for vendor, (registered, skipped) in COUNTS.items():
        cov = dipu.coverage(ctx, vendor)
        raw = set((root / dipu.DIPU_DIR / "derived" / f"aten_ops_{vendor}.txt").read_text(encoding="utf-8").split())
        assert len(raw) == registered
        if skipped is None:
            assert len(cov.generated) == registered and cov.registered == cov.generated == raw
        else:
            assert (len(cov.registered), len(cov.missing)) == (registered, skipped)
            assert cov.registered == raw
            assert len(cov.functions or ()) == FUNCTIONS[vendor]
            assert any(f"{len(cov.generated)} aten ops generated for {vendor}: {registered} registered, {skipped} "
                       "skipped" in s for s in rels[vendor].notes)
        assert set(rels[vendor].ops["native"]) == raw | always
        assert set(rels[vendor].ops.get("cpu", ())) <= cov.missing


def test_map_and_function_lists(root: Path) -> None:
    entries = yaml.safe_load((root / dipu.DIPU_DIR / "derived" / "diopi_functions.index.yaml").read_text("utf-8"))
    assert len(entries) == 393  # research 2.1: 393 entries
    assert len({e["op"] for e in entries}) == 370  # research 2.1: 370 distinct aten op names
    supported = (root / dipu.DIPU_DIR / "SupportedDiopiFunctions.txt").read_text(encoding="utf-8").split()
    assert len(supported) == 262
    declared = (root / dipu.DIOPI_DIR / "derived" / "diopi_declared_functions.txt").read_text(encoding="utf-8").split()
    assert len(declared) == 486
    cfg = yaml.safe_load((root / dipu.DIOPI_DIR / "impl" / "ascend_npu" / "ascend_config.yaml").read_text("utf-8"))
    assert (len(cfg["ascend"]), len(cfg["ascend_npu"])) == (269, 13)


def test_spot_checks(rels: dict[str, Release], root: Path) -> None:
    index = (root / dipu.DIPU_DIR / "derived" / "diopi_functions.index.yaml").read_text(encoding="utf-8")
    assert re.search(r"- op: ctc_loss\.Tensor\n.*\n  diopi_key_function: diopiCTCLoss\n(?:.*\n){2}  device:\n"
                     r"  - camb\n", index)
    assert "ctc_loss.Tensor" in rels["camb"].ops["native"] and "ctc_loss.Tensor" in rels["camb"].ops["autograd"]
    for v in ("cuda", "ascend", "topsrider", "supa"):
        assert "ctc_loss.Tensor" not in rels[v].ops["native"]
    funcs = json.loads((root / dipu.DIOPI_DIR / "derived" / "diopi_impl_functions_by_vendor.json").read_text("utf-8"))
    assert "diopiAbs" not in funcs["vendors"]["kunlunxin"]["functions"]
    assert "diopiAbs" in funcs["vendors"]["camb"]["functions"]
    assert "abs.out" not in rels["kunlunxin"].ops["native"] and "abs.out" in rels["camb"].ops["native"]
    assert "empty.memory_format" in rels["kunlunxin"].ops["native"]  # hand-registered for every vendor
    assert rels["topsrider"].ops["autograd"] == ["max_pool2d"]  # device: [topsrider], autograd: true
    assert "_amp_update_scale_" in rels["cuda"].ops["cpu"]  # custom_fallback, diopiAmpUpdateScaleInp missing


def test_all_ops_are_torch_ops(rels: dict[str, Release], ctx: Context) -> None:
    t = ctx.torch_for("2.1.0")
    assert t is not None
    for r in rels.values():
        for cat in ("native", "autograd", "cpu"):
            assert all(t.get(n) is not None for n in r.ops.get(cat, ()))


def test_caveats(rels: dict[str, Release], root: Path) -> None:
    for vendor, dtypes in COMMON_CASTS.items():
        star = [c for c in rels[vendor].caveats if c.op == "*"]
        assert [c.dtypes for c in star] == [dtypes]
    assert [c.dtypes for c in rels["supa"].caveats if c.op == "*"] == [["bool"]]  # research 4.1: bool as float
    raw = (root / dipu.DIOPI_DIR / "impl" / "ascend" / "convert_config.yaml").read_text(encoding="utf-8")
    assert "- diopiGelu:\n    dtype: (float64)->float32" in raw
    gelu = next(c for c in rels["ascend"].caveats if c.op == "gelu.out" and not c.api)
    assert gelu.dtypes == ["float64"] and "diopiGelu" in gelu.note
    for vendor, (cases, names) in SKIPS.items():
        path = root / dipu.DIOPI_DIR / "derived" / f"diopi_test_skips_{vendor}.json"
        _, total, with_skips, touched = dipu.skip_caveats(path, "x")
        assert (with_skips, touched) == (cases, names)
        assert any(f"{with_skips} with skips touching {touched}" in s for s in rels[vendor].notes)
        if vendor == "droplet":
            assert total == DROPLET_CASES
    api = {c.op: c for c in rels["supa"].caveats if c.api}
    assert "float16" in api["batch_norm"].dtypes and "bool" in api["copy_"].dtypes  # bool_ -> bool


def test_fallback_and_sources(rels: dict[str, Release], root: Path, upstream: Path) -> None:
    text = (root / "SOURCES.md").read_text(encoding="utf-8")
    for r in rels.values():
        fb = r.fallback
        assert fb.exists and fb.default_on and "DIPU_FORCE_FALLBACK_OPS_LIST" in (fb.switch or "")
        assert "cpu_fallback" in fb.note
        for s in r.sources:
            assert s.commit in text and (upstream / s.staged).is_file()
        assert any("9dd3808" in s and "02f03c6" in s for s in r.notes)
    assert not rels["supa"].exact and rels["supa"].accuracy.startswith("UPPER BOUND")
