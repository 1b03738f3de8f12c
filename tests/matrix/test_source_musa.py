"""The musa adapter (torch_musa) against its raw files and the documented numbers.

Documented numbers: research/vendors-musa-xpu-xla-core.md section 2 (MUSA table: yaml overloads, with / without
dispatch, ops_list totals, share of CUDA; the PyTorch core table's "CUDA eff." column) and section 3 (runtime
facts); musa/SOURCES.md (tags, commits, target PyTorch, file formats).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from opaudit.matrix.release import Release
from opaudit.matrix.sources import Context, musa

# research section 2, MUSA table: folder -> (PyTorch, yaml overloads, with dispatch, without, ops_list total,
# share of CUDA in %). v1.0.0 / v1.1.0: 349 names derived from C++, no yaml, no ops_list.
TABLE = {
    "v1.0.0": ("2.0.0", 349, None, None, None, 26.9),
    "v1.1.0": ("2.0.0", 349, None, None, None, 26.9),
    "v1.2.1": ("2.0.0", 609, 493, 116, 641, 46.4),
    "v1.3.0": ("2.2.0", 649, 529, 120, 681, 48.2),
    "v1.3.2": ("2.2.0", 678, 554, 124, 710, 50.4),
    "v2.0.0": ("2.2.0", 736, 587, 149, 768, 54.5),
    "v2.0.0-pt25": ("2.5.0", 737, 590, 147, 769, 53.7),
    "v2.0.1": ("2.2.0", 741, 592, 149, 773, 54.9),
    "v2.1.0": ("2.5.0", 903, 654, 249, 935, 66.9),
    "v2.1.1": ("2.5.0", 916, 655, 261, 948, 68.1),
    "v2.5.0": ("2.5.0", 978, 712, 266, 1010, 71.5),
    "v2.7.0": ("2.7.1", 997, 734, 263, 1018, 72.5),
    "v2.7.1": ("2.7.1", 1212, 905, 307, 1233, 89.5),
}
# research section 2, PyTorch core table, column "CUDA eff."
CUDA_EFF = {"2.0.0": 1169, "2.2.0": 1203, "2.5.0": 1222, "2.7.1": 1230}
# The research's "CUDA eff." set resolves structured_delegate but does not count kernels generated from
# ufunc_inner_loop: it lacks add.out and, through it, add.Tensor / add_.Tensor. The project's op table counts
# them (torchops.py), hence our CUDA set is these 3 ops larger.
UFUNC = {"add.out", "add.Tensor", "add_.Tensor"}
# research section 2: the 14 yaml names (v2.0.0+) not in stock PyTorch, defined by the native_functions patch
MUSA_ONLY = {
    "_fused_rmsnorm_forward", "_fused_rmsnorm_backward", "_fused_swiglu_forward", "_fused_swiglu_backward",
    "_fused_rope_forward", "_fused_rope_backward", "_scaled_dot_product_attention_flash_musa",
    "_scaled_dot_product_attention_flash_musa_backward", "_scaled_dot_product_attention_math_musa",
    "_scaled_dot_product_attention_math_musa_backward", "gated_silu", "cross_entropy_loss_2d_choice",
    "_fused_cross_entropy_loss_2d_forward", "_fused_cross_entropy_loss_2d_backward",
}
# musa/SOURCES.md table: tag -> date (the order of the releases)
DATES = {
    "v1.0.0": "2023-07-11", "v1.1.0": "2023-07-25", "v1.2.1": "2024-08-07", "v1.3.0": "2024-10-23",
    "v1.3.2": "2025-04-23", "v2.0.0": "2025-04-27", "v2.0.0-pt25": "2025-05-09", "v2.0.1": "2025-06-26",
    "v2.1.0": "2025-07-17", "v2.1.1": "2025-09-09", "v2.5.0": "2025-10-21", "v2.7.0": "2025-11-20",
    "v2.7.1": "2026-01-19",
}


@pytest.fixture(scope="module")
def rels(ctx: Context) -> dict[str, Release]:
    """Releases by tag (their alias)."""
    return {r.aliases[0]: r for r in musa.releases(ctx)}


def _raw_names(folder: Path) -> list[str]:
    yml = folder / "musa_functions.yaml"
    if yml.is_file():
        return re.findall(r"(?m)^- func: (\S+)\s*$", yml.read_text(encoding="utf-8"))
    lines = (folder / "derived_aten_privateuse1_ops.txt").read_text(encoding="utf-8").splitlines()
    return [s.strip() for s in lines if s.strip() and not s.startswith("#")]


def test_one_release_per_tag(rels: dict[str, Release], upstream: Path) -> None:
    folders = sorted(p.name for p in (upstream / "musa").iterdir() if p.is_dir())
    assert sorted(rels) == folders == sorted(TABLE)
    assert sorted(r.name for r in rels.values()) == sorted(t.removeprefix("v") for t in TABLE)
    by_order = [t for t, _ in sorted(rels.items(), key=lambda kv: kv[1].order)]
    assert by_order == sorted(DATES, key=lambda t: DATES[t])
    assert [rels[t].order for t in by_order] == list(range(1, 14))
    assert rels["v2.7.1"].order == 13 and rels["v2.0.0"].order < rels["v2.0.0-pt25"].order < rels["v2.0.1"].order


def test_musa_table_counts_from_raw_text(rels: dict[str, Release], upstream: Path) -> None:
    for tag, (torch, overloads, with_dispatch, without, total, _share) in TABLE.items():
        folder = upstream / "musa" / tag
        names = _raw_names(folder)
        assert len(names) == len(set(names)) == overloads, tag
        r = rels[tag]
        assert r.torch == torch, tag
        if with_dispatch is None:
            continue
        text = (folder / "musa_functions.yaml").read_text(encoding="utf-8")
        blocks = re.split(r"(?m)^- func:", text)[1:]
        n = sum(1 for b in blocks if re.search(r"(?m)^\s+dispatch:", b))
        assert (n, len(blocks) - n) == (with_dispatch, without), tag
        lines = (folder / "ops_list.md").read_text(encoding="utf-8").splitlines()
        assert lines[0] == f"Total amount of ops: {total}", tag
        items = [x for x in lines[1:] if x.startswith("- `")]
        assert len(items) == total, tag
        quantized = [x for x in items if x.endswith("(quantized op)")]
        torchvision = [x for x in items if x.endswith("(torchvision op)")]
        # research: the rest is exactly 21 quantized + 11 torchvision (0 torchvision from v2.7.0)
        assert len(quantized) == 21, tag
        assert len(torchvision) == (0 if tag in ("v2.7.0", "v2.7.1") else 11), tag
        plain = [x[3:].split("`")[0] for x in items if x.endswith("`")]
        # the plain entries are exactly the yaml list; the rest are the hand-registered ops
        assert len(plain) == len(names) and set(plain) == set(names), tag
        assert f"ops_list.md: total {total} = {overloads} yaml overloads" in " ".join(r.notes), tag
        assert len(r.op_set("custom")) == 15 + len(torchvision), tag


def test_share_of_cuda(ctx: Context, rels: dict[str, Release], upstream: Path) -> None:
    for tag, (torch, *_, share) in TABLE.items():
        tops = ctx.torch_for(torch)
        assert tops is not None
        cuda = tops.with_kernel("CUDA")
        assert UFUNC <= cuda and len(cuda) - len(UFUNC) == CUDA_EFF[torch], tag
        listed = set(_raw_names(upstream / "musa" / tag))
        research_cuda = cuda - UFUNC
        # the research's share: every listed name (whatever its dispatch keys) over its CUDA eff. set
        assert round(100 * len(listed & research_cuda) / len(research_cuda), 1) == share, tag
        # ours: the native set over the project's CUDA set; it drops the listed overloads without a
        # PrivateUse1 kernel (quantized / sparse only) and adds the 3 ufunc ops: within half a point
        hit = len(rels[tag].op_set("native") & cuda)
        assert abs(100 * hit / len(cuda) - share) < 0.5, tag
        assert f"native reaches {hit} of the {len(cuda)} CUDA-kernel ops" in " ".join(rels[tag].notes), tag


def test_musa_only_ops_kept(ctx: Context, rels: dict[str, Release], upstream: Path) -> None:
    for tag in TABLE:
        if tag < "v2.0.0":
            continue
        r = rels[tag]
        tops = ctx.torch_for(r.torch)
        assert tops is not None
        listed = set(_raw_names(upstream / "musa" / tag))
        assert {n for n in listed if tops.get(n) is None} == MUSA_ONLY, tag
        assert MUSA_ONLY <= r.op_set("native"), tag
        patch = (upstream / "musa" / tag / musa.PATCH).read_text(encoding="utf-8")
        for op in MUSA_ONLY:
            assert f"+- func: {op}(" in patch, (tag, op)
        assert any(n.startswith("14 MUSA-only aten ops") for n in r.notes), tag


def test_derived_v1_list(ctx: Context, rels: dict[str, Release], upstream: Path) -> None:
    # research: the v1.x derived list has 2 non-stock names (_cat, max_pool2d_with_indices_backward_out); they
    # name no op of PyTorch 2.0.0, so they register nothing: 347 native
    for tag in ("v1.0.0", "v1.1.0"):
        r = rels[tag]
        names = _raw_names(upstream / "musa" / tag)
        assert {"_cat", "max_pool2d_with_indices_backward_out"} <= set(names)
        assert len(r.op_set("native")) == 347 and not r.op_set("quant") and not r.op_set("custom")
        assert "_cat" not in r.op_set("native") and "add.Tensor" in r.op_set("native")
        assert not r.exact and "regex" in r.accuracy
        assert any("_cat, max_pool2d_with_indices_backward_out" in n for n in r.notes)
    assert rels["v1.0.0"].op_set("native") == rels["v1.1.0"].op_set("native")
    assert all(rels[t].exact for t in TABLE if not t.startswith("v1.0") and not t.startswith("v1.1"))


def test_spot_checks_against_raw_yaml(rels: dict[str, Release], upstream: Path) -> None:
    text = (upstream / "musa" / "v2.7.1" / "musa_functions.yaml").read_text(encoding="utf-8")
    r = rels["v2.7.1"]
    native = r.op_set("native")
    # no dispatch (PyTorch's structured kernel) and a PrivateUse1 dispatch
    assert re.search(r"(?m)^- func: bitwise_right_shift.Tensor_out\n\n", text)
    assert "bitwise_right_shift.Tensor_out" in native
    assert re.search(r"- func: amax.out\n  dispatch:\n    PrivateUse1: AMaxOut", text) and "amax.out" in native
    # cat: QuantizedPrivateUse1 only in its own entry, PrivateUse1 through its structured delegate cat.out
    assert re.search(r"- func: cat\n  dispatch:\n    QuantizedPrivateUse1: CatQuantizedMusa\n", text)
    assert "cat" in native and "cat" in r.op_set("quant") and "cat.out" in native
    # quantized-only (clone, int_repr), sparse-only (_coalesce): not native
    assert re.search(r"- func: clone\n(?:  .*\n)*?  dispatch:\n    QuantizedPrivateUse1: quantized_clone", text)
    assert "clone" not in native and "clone" in r.op_set("quant")
    assert "int_repr" in r.op_set("quant") and "int_repr" not in native
    assert "_coalesce" in r.op_set("sparse") and "_coalesce" not in native
    assert "crow_indices" in r.op_set("sparse")
    # ops_list.md's hand-registered quantized aten ops -> quant; quantized:: -> custom
    assert {"gelu", "sigmoid", "relu_", "_copy_from", "add.Tensor"} <= r.op_set("quant")
    assert {"quantized::linear", "quantized::conv2d.new"} <= r.op_set("custom")
    # torchvision ops moved to MooreThreads/vision from v2.7.0
    assert "torchvision::nms" in rels["v2.5.0"].op_set("custom")
    assert "torchvision::nms" not in r.op_set("custom")
    # absent from the raw list and from native (torch_musa#17 / #18 name missing ops of early tags)
    for op in ("_cslt_compress", "_cudnn_rnn_flatten_weight"):
        assert f"- func: {op}\n" not in text and op not in native, op
    # missing in v1.2.1, added by v2.7.1
    early = (upstream / "musa" / "v1.2.1" / "musa_functions.yaml").read_text(encoding="utf-8")
    for op in ("triu_indices", "linalg_eig", "_scaled_mm"):
        assert f"- func: {op}\n" not in early and op not in rels["v1.2.1"].op_set("native"), op
        assert f"- func: {op}\n" in text and op in native, op


def test_facts(rels: dict[str, Release], upstream: Path) -> None:
    sources = (upstream / "musa" / "SOURCES.md").read_text(encoding="utf-8")
    for tag, r in rels.items():
        assert (r.vendor, r.device_type, r.dispatch_key, r.package, r.import_name) == (
            "musa", "musa", "PrivateUse1", "torch_musa", "torch_musa"), tag
        # research section 3: no generic CPU fallback, only Autograd/Autocast fallthroughs
        fb = r.fallback
        assert not fb.exists and not fb.default_on and fb.switch is None
        assert "VariableFallbackKernel_musa.cpp" in fb.note and "TORCH_USE_MUSA_DOUBLE_CAST" in fb.note
        assert not r.caveats
        for s in r.sources:
            assert s.repo == "MooreThreads/torch_musa" and s.commit and s.commit in sources, tag
            assert s.staged.startswith(f"musa/{tag}/")
        autoload = any("torch.backends entry point" in n for n in r.notes)
        assert autoload == (tag >= "v2.1.0"), tag
    assert len(rels["v2.7.1"].sources) == 3 and len(rels["v1.0.0"].sources) == 1
