"""The Ascend adapter (sources/ascend.py) against the staged files and research/vendors-ascend-cambricon.md."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from opaudit.matrix.release import CATEGORIES, Release
from opaudit.matrix.sources import Context, ascend

# research/vendors-ascend-cambricon.md table 2.3: tag, package, aten overloads, torch_npu-owned, op-plugin
# official, npu custom ops, tocpu, unsupported, quant, aten autograd overrides (empty cells written as 0/None)
TABLE_2_3 = [
    ("v3.0.0-pytorch1.5.0", "1.5.0.post8", 817, None, None, 124, 0, 0, 0, 0),
    ("v3.0.rc1-pytorch1.8.1", "1.8.1rc1", 1853, None, None, 109, 0, 0, 0, 3),
    ("v3.0.rc2-pytorch1.8.1", "1.8.1rc2", 1856, None, None, 121, 0, 0, 0, 3),
    ("v3.0.rc3-pytorch1.8.1", "1.8.1rc3", 1856, None, None, 128, 0, 0, 0, 6),
    ("v3.0.0-pytorch1.8.1", "1.8.1", 1857, None, None, 131, 0, 0, 0, 6),
    ("v5.0.rc1-pytorch1.8.1", "1.8.1.post1", 1857, None, None, 145, 0, 0, 0, 10),
    ("v5.0.rc2-pytorch1.8.1", "1.8.1.post2", 1857, None, None, 145, 0, 0, 0, 10),
    ("v3.0.rc3-pytorch1.11.0", "1.11.rc1", 1796, None, None, 131, 0, 0, 0, 6),
    ("v3.0.0-pytorch1.11.0", "1.11.0.rc2", 1798, None, None, 134, 0, 0, 0, 6),
    ("v5.0.rc1-pytorch1.11.0", "1.11.0", 879, None, None, 155, 239, 0, 0, 11),
    ("v5.0.rc2-pytorch1.11.0", "1.11.0.post1", 902, None, None, 157, 230, 64, 0, 11),
    ("v5.0.rc3-pytorch1.11.0", "1.11.0.post4", 944, 56, 896, 167, 213, 59, 0, 2),
    ("v5.0.0-pytorch1.11.0", "1.11.0.post8", 993, 48, 945, 179, 155, 57, 0, 2),
    ("v6.0.rc1-pytorch1.11.0", "1.11.0.post11", 1007, 48, 961, 208, 148, 57, 0, 2),
    ("v6.0.rc2-pytorch1.11.0", "1.11.0.post14", 1006, 48, 960, 215, 145, 57, 0, 2),
    ("v5.0.rc2-pytorch2.0.1", "2.0.1.rc1", 920, None, None, 154, 199, 64, 0, 19),
    ("v5.0.rc3-pytorch2.0.1", "2.0.1", 949, 83, 867, 153, 192, 60, 0, 1),
    ("v5.0.0-pytorch2.0.1", "2.0.1.post1", 964, 83, 909, 170, 157, 58, 0, 1),
    ("v5.0.rc3-pytorch2.1.0", "2.1.0.rc1", 929, 50, 879, 153, 0, 0, 0, 0),
    ("v5.0.0-pytorch2.1.0", "2.1.0", 986, 49, 937, 172, 0, 0, 0, 0),
    ("v6.0.rc1-pytorch2.1.0", "2.1.0.post3", 1008, 49, 959, 206, 0, 0, 0, 0),
    ("v6.0.rc2-pytorch2.1.0", "2.1.0.post6", 1020, 49, 971, 215, 0, 0, 0, 0),
    ("v6.0.rc3-pytorch2.1.0", "2.1.0.post8", 1084, 49, 1035, 221, 0, 0, 0, 0),
    ("v6.0.0-pytorch2.1.0", "2.1.0.post10", 1094, 49, 1045, 223, 0, 0, 0, 0),
    ("v7.0.0-pytorch2.1.0", "2.1.0.post12", 1082, 48, 1034, 255, 0, 0, 0, 0),
    ("v7.1.0-pytorch2.1.0", "2.1.0.post13", 1091, 48, 1043, 285, 0, 0, 0, 0),
    ("v7.2.0-pytorch2.1.0", "2.1.0.post17", 1072, 48, 1024, 321, 0, 0, 0, 0),
    ("v6.0.rc1-pytorch2.2.0", "2.2.0", 1007, 49, 958, 195, 0, 0, 9, 0),
    ("v6.0.rc2-pytorch2.2.0", "2.2.0.post2", 1011, 49, 962, 206, 0, 0, 9, 0),
    ("v6.0.rc2-pytorch2.3.1", "2.3.1", 1007, 49, 958, 206, 0, 0, 3, 0),
    ("v6.0.rc3-pytorch2.3.1", "2.3.1.post2", 1079, 49, 1030, 213, 0, 0, 3, 0),
    ("v6.0.0-pytorch2.3.1", "2.3.1.post4", 1090, 49, 1041, 215, 0, 0, 3, 0),
    ("v7.0.0-pytorch2.3.1", "2.3.1.post6", 1078, 48, 1030, 247, 0, 0, 3, 0),
    ("v6.0.rc3-pytorch2.4.0", "2.4.0", 1079, 49, 1030, 213, 0, 0, 3, 0),
    ("v6.0.0-pytorch2.4.0", "2.4.0.post2", 1090, 49, 1041, 215, 0, 0, 3, 0),
    ("v7.0.0-pytorch2.4.0", "2.4.0.post4", 1078, 48, 1030, 247, 0, 0, 3, 0),
    ("v7.0.0-pytorch2.5.1", "2.5.1", 1078, 48, 1030, 247, 0, 0, 3, 0),
    ("v7.1.0-pytorch2.5.1", "2.5.1.post1", 1088, 48, 1040, 277, 0, 0, 3, 1),
    ("v7.1.0-pytorch2.6.0", "2.6.0", 1088, 48, 1040, 277, 0, 0, 3, 1),
    ("v7.2.0-pytorch2.6.0", "2.6.0.post3", 1069, 48, 1021, 313, 0, 0, 3, 1),
    ("v7.3.0-pytorch2.6.0", "2.6.0.post5", 1068, 48, 1020, 335, 0, 0, 3, 1),
    ("v7.2.0-pytorch2.7.1", "2.7.1", 1069, 48, 1021, 313, 0, 0, 3, 1),
    ("v7.3.0-pytorch2.7.1", "2.7.1.post2", 1068, 48, 1020, 335, 0, 0, 3, 1),
    ("v26.0.0-pytorch2.7.1", "2.7.1.post4", 1070, 46, 1024, 404, 0, 0, 3, 1),
    ("v26.1.0-pytorch2.7.1", "2.7.1.post8", 1077, 48, 1029, 418, 0, 0, 3, 1),
    ("v7.2.0-pytorch2.8.0", "2.8.0", 1069, 48, 1021, 313, 0, 0, 3, 1),
    ("v7.3.0-pytorch2.8.0", "2.8.0.post2", 1068, 48, 1020, 335, 0, 0, 3, 1),
    ("v26.0.0-pytorch2.8.0", "2.8.0.post4", 1070, 46, 1024, 404, 0, 0, 3, 1),
    ("v7.3.0-pytorch2.9.0", "2.9.0", 1068, 48, 1020, 335, 0, 0, 3, 1),
    ("v26.0.0-pytorch2.9.0", "2.9.0.post2", 1070, 46, 1024, 404, 0, 0, 3, 1),
    ("v26.1.0-pytorch2.9.0", "2.9.0.post6", 1083, 48, 1035, 418, 0, 0, 3, 1),
    ("v26.0.0-pytorch2.10.0", "2.10.0", 1070, 46, 1024, 404, 0, 0, 3, 1),
    ("v26.1.0-pytorch2.10.0", "2.10.0.post4", 1085, 48, 1037, 418, 0, 0, 3, 1),
    ("v26.1.0-pytorch2.11.0", "2.11.0", 1085, 48, 1037, 418, 0, 0, 3, 1),
    ("v26.1.0-pytorch2.12.0", "2.12.0", 1085, 48, 1037, 418, 0, 0, 3, 1),
    # one tree, three PyTorch lines: the table gives 1,065 for each of v2.13/v2.14/v2.15 (2.15: no staged table)
    ("v26.2.0-beta.1-pytorch2.13.0", "26.2.0-beta.1+2.13", 1065, 47, 1018, 422, 0, 0, 3, 1),
    ("v26.2.0-beta.1-pytorch2.13.0", "26.2.0-beta.1+2.14", 1065, 47, 1018, 422, 0, 0, 3, 1),
    ("master", "master+2.13", 1065, 47, 1018, 422, 0, 0, 3, 1),
    ("master", "master+2.14", 1065, 47, 1018, 422, 0, 0, 3, 1),
]

# research table 2.4: release, PyTorch compared with, CUDA-kernel ops upstream, covered
TABLE_2_4 = [
    ("2.1.0", "2.1.0", 1195, 733),  # v5.0.0-pytorch2.1.0
    ("2.1.0.post17", "2.1.0", 1195, 855),  # v7.2.0-pytorch2.1.0
    ("2.2.0.post2", "2.2.0", 1205, 758),  # v6.0.rc2-pytorch2.2.0
    ("2.5.1", "2.5.0", 1224, 839),  # v7.0.0-pytorch2.5.1
    ("2.6.0.post5", "2.6.0", 1230, 850),  # v7.3.0-pytorch2.6.0
    ("2.9.0.post6", "2.9.0", 1250, 868),  # v26.1.0-pytorch2.9.0
    ("2.12.0", "2.12.0", 1269, 870),  # v26.1.0-pytorch2.12.0
    ("master+2.14", "2.14.1", 1272, 878),  # master filtered as v2.14
]


@pytest.fixture(scope="module")
def rels(ctx: Context) -> dict[str, Release]:
    produced = ascend.releases(ctx)
    out = {r.name: r for r in produced}
    assert len(out) == len(produced)  # names unique
    return out


@pytest.fixture(scope="module")
def by_alias(rels: dict[str, Release]) -> dict[str, Release]:
    return {a: r for r in rels.values() for a in r.aliases}


def aten(r: Release) -> frozenset[str]:
    """The registered aten set of research 2.2 (dense kernels, autograd overrides, sparse-only kernels)."""
    return r.op_set("native") | r.op_set("sparse")


def line(r: Release) -> tuple[int, int]:
    major, mi = r.torch.split(".")[:2]
    return int(major), int(mi)


def folder(ctx: Context, tag: str) -> ascend.Folder:
    return next(f for f in ascend.folders(ctx) if f.tag == tag)


def test_table_2_3_counts_for_every_tag(rels: dict[str, Release]) -> None:
    for tag, name, n, _, _, custom, tocpu, unsupported, quant, autograd in TABLE_2_3:
        r = rels[name]
        assert tag in r.aliases or tag in ("master", "v26.2.0-beta.1-pytorch2.13.0"), (tag, r.aliases)
        got = (len(aten(r)), len(r.op_set("custom")), len(r.op_set("cpu")), len(r.op_set("unsupported")),
               len(r.op_set("quant")), len(r.op_set("autograd")))
        assert got == (n, custom, tocpu, unsupported, quant, autograd), (tag, name)


def test_table_2_3_owned_and_op_plugin_columns(ctx: Context) -> None:
    for tag, name, _, owned, plugin, *_ in TABLE_2_3:
        if owned is None:
            continue
        f = folder(ctx, tag)
        torch = f.torch[0] if not f.multi else name.split("+")[1] + ".0"
        ops, _ = ascend.folder_ops(ctx, f, torch)
        assert (len(ops.owned), len(ops.plugin)) == (owned, plugin), tag


def test_multi_line_trees_filtered_as_v2_12(ctx: Context) -> None:
    # research 2.3 note: master / 26.2.0-beta.1 give 1,092 if filtered as v2.12
    for tag in ("master", "v26.2.0-beta.1-pytorch2.13.0"):
        ops, _ = ascend.folder_ops(ctx, folder(ctx, tag), "2.12.0")
        assert len(ops.aten) == 1092


def test_every_tag_folder_is_a_release(ctx: Context, rels: dict[str, Release], by_alias: dict[str, Release]) -> None:
    for f in ascend.folders(ctx):
        if f.multi:
            lines = [t for t in f.torch if ctx.torch_for(t) is not None]
            assert lines == ["2.13.0", "2.14.0"]  # 2.15: no staged PyTorch table
            short = "master" if f.tag == "master" else f.ascend
            for t in lines:
                r = rels[f"{short}+{t[:4]}"]
                assert r.torch == t and any("one tree builds PyTorch 2.13.0, 2.14.0, 2.15.0" in n for n in r.notes)
            assert not any(n.endswith("+2.15") for n in rels)
        else:
            r = by_alias[f.tag]
            assert (r.name, r.torch, r.vendor_release) == (f.package, f.torch[0], f.ascend)
    assert by_alias["master"].name == "master+2.14"
    assert by_alias["v26.2.0-beta.1-pytorch2.13.0"].name == "26.2.0-beta.1+2.13"
    assert any("development snapshot" in n for n in rels["master+2.13"].notes)
    assert any("pre-release" in n for n in rels["26.2.0-beta.1+2.14"].notes)


def test_upper_bound_eras(rels: dict[str, Release]) -> None:
    bound = {"1.8.1rc1", "1.8.1rc2", "1.8.1rc3", "1.8.1", "1.8.1.post1", "1.8.1.post2", "1.11.rc1", "1.11.0.rc2"}
    for r in rels.values():
        assert r.exact == (r.name not in bound), r.name
        if r.name in bound:
            assert "upper bound" in r.accuracy
    assert all(not r.exact for r in rels.values() if r.torch == "1.8.1")


def test_tocpu_and_unsupported_of_the_1_11_and_2_0_lines(ctx: Context, rels: dict[str, Release]) -> None:
    # SOURCES.md era 3/4: tocpu/unsupported in npu_native_functions.yaml for 5.0.rc1/rc2, in op-plugin's per-line file
    # from 5.0.rc3 on; raw text spot checks
    up = ctx.folder("ascend")
    text = (up / "v5.0.rc2-pytorch2.0.1" / "npu_native_functions.yaml").read_text(encoding="utf-8")
    tocpu = text.split("\ntocpu:\n")[1].split("\nunsupported:\n")[0]
    assert len(re.findall(r"^ *- ", tocpu, re.M)) == len(rels["2.0.1.rc1"].op_set("cpu")) == 199
    text = (up / "v5.0.0-pytorch1.11.0" / "op_plugin_functions.yaml").read_text(encoding="utf-8")
    unsupported = text.split("\nunsupported:\n")[1].split("\ncustom:\n")[0]
    assert len(re.findall(r"^ *- ", unsupported, re.M)) == len(rels["1.11.0.post8"].op_set("unsupported")) == 57
    for r in rels.values():
        if line(r) >= (2, 1) or r.exact is False or r.torch == "1.5.0":
            assert not r.op_set("cpu") and not r.op_set("unsupported"), r.name


def test_spot_checks_against_raw_text(ctx: Context, rels: dict[str, Release]) -> None:
    up = ctx.folder("ascend")
    # isin.Tensor_Tensor_out: absent before 6.0.rc3 (Ascend/pytorch#40, torch_npu 2.2.0), present from 6.0.rc3 on
    for r in rels.values():
        before = r.vendor_release is not None and re.match(r"[35]\.|6\.0\.rc[12]$", r.vendor_release) is not None
        assert ("isin.Tensor_Tensor_out" in r.op_set("native")) != before, r.name
    raw = (up / "v6.0.rc3-pytorch2.1.0" / "op_plugin_functions.yaml").read_text(encoding="utf-8")
    assert "- func: isin.Tensor_Tensor_out(" in raw
    assert "isin.Tensor_Tensor_out" not in (up / "v6.0.rc2-pytorch2.2.0" / "op_plugin_functions.yaml").read_text(
        encoding="utf-8")
    # absent from every release (Ascend/pytorch#51), and never in any staged file
    for r in rels.values():
        assert "_transformer_encoder_layer_fwd" not in aten(r)
        assert "_scaled_dot_product_efficient_attention" not in aten(r)
    assert "_transformer_encoder_layer_fwd" not in raw
    # present ones: a kernel in every release of the op-plugin era; the fork's npu_dispatch on abs
    assert {"add.Tensor", "mm", "index_put_", "_softmax"} <= rels["2.6.0.post5"].op_set("native")
    fork = (up / "v3.0.0-pytorch1.5.0" / "native_functions.yaml").read_text(encoding="utf-8")
    assert "- func: abs(Tensor self) -> Tensor" in fork and "abs" in rels["1.5.0.post8"].op_set("native")
    assert "npu_conv2d" in rels["1.5.0.post8"].op_set("custom")  # npu_dispatch_only: aten-namespace NPU op
    # quantized ops: only v2.2 gets q_scale (acl_op: v2.2); dequantize.self from v2.2 on
    assert "q_scale" in rels["2.2.0.post2"].op_set("quant") and "q_scale" not in rels["2.6.0.post5"].op_set("quant")
    assert "dequantize.self" in rels["master+2.14"].op_set("quant") and not rels["2.1.0.post8"].op_set("quant")
    # sparse: _coalesce has only a SparsePrivateUse1 kernel; add.out both
    r = rels["master+2.14"]
    assert "_coalesce" in r.op_set("sparse") and "_coalesce" not in r.op_set("native")
    assert "add.out" in r.op_set("sparse") and "add.out" in r.op_set("native")
    assert "npu::npu_fusion_attention" in r.op_set("custom") and "_thnn_fused_gru_cell" in r.op_set("autograd")
    # a version range that ends: an official entry of master's file whose kernels stop at v2.12
    f = folder(ctx, "master")
    d = ascend.load_yaml(up / "master" / "op_plugin_functions.yaml")
    allv = d["all_version"]
    ended = sorted(ascend.op_key(i) for i in d["official"]
                   if any("v2.12" in ascend.version_set(i.get(k), allv) for k in ("acl_op", "op_api", "sparse"))
                   and not any("v2.13" in ascend.version_set(i.get(k), allv) for k in ("acl_op", "op_api", "sparse")))
    assert ended
    v212, _ = ascend.folder_ops(ctx, f, "2.12.0")
    assert set(ended) <= v212.aten
    assert not set(ended) & aten(rels["master+2.13"]) - v212.owned


def test_cuda_share_of_table_2_4(ctx: Context, rels: dict[str, Release]) -> None:
    for name, version, cuda_n, covered in TABLE_2_4:
        r, t = rels[name], ctx.torch_for(rels[name].torch)
        assert t is not None and t.version == version
        # the research's rule: `dispatch` has a CUDA key, or the entry has a structured_delegate
        research = {n for n, op in t.ops.items() if "CUDA" in op.keys or op.delegate} - {"add.out"}
        assert (len(research), len(aten(r) & research)) == (cuda_n, covered), name
        # ctx's CUDA set differs by design: add.out gets its CUDA kernel from ufunc_inner_loop (torchops.py), and
        # from 2.12 _upsample_lanczos2d_aa(_backward) delegate to .out ops with a CPU kernel only. Ascend registers
        # add.out, so the covered share is one op higher than the table's.
        cuda = t.with_kernel("CUDA")
        lanczos = {"_upsample_lanczos2d_aa", "_upsample_lanczos2d_aa_backward"} & research
        assert cuda == (research | {"add.out"}) - lanczos
        assert len(aten(r) & cuda) == covered + 1
        assert not [n for n in aten(r) if t.get(n) is None]  # every listed name exists in that PyTorch


def test_runtime_facts(rels: dict[str, Release]) -> None:
    for r in rels.values():
        assert r.device_type == "npu"
        if r.name == "1.5.0.post8":
            assert (r.dispatch_key, r.package, r.import_name) == ("NPU", "torch", None)
            continue
        assert (r.package, r.import_name) == ("torch_npu", "torch_npu")
        new = line(r) >= (2, 1)
        assert r.dispatch_key == ("PrivateUse1" if new else "XLA"), r.name
        fb = r.fallback
        assert (fb.exists, fb.default_on) == (new, new), r.name
        assert "VariableFallbackKernel.cpp" in fb.note if new else "no generic CPU fallback" in fb.note
        # TORCH_NPU_FALLBACK_CPU_DISABLE exists only on master (dev branches from 2026-08-20), in no release tag
        assert (fb.switch is not None) == r.name.startswith("master+"), r.name
        if fb.switch:
            assert "TORCH_NPU_FALLBACK_CPU_DISABLE=1" in fb.switch
    assert "tocpu" in rels["1.11.0.post8"].fallback.note
    assert "fallthrough" in rels["2.4.0.post2"].fallback.note.replace("falls through", "fallthrough")
    assert "not implemented" in rels["2.6.0.post5"].fallback.note


def test_wheels_merged_or_their_own(ctx: Context, rels: dict[str, Release]) -> None:
    ws = {w.version: w for w in ascend.wheels(ctx)}
    packages = {f.package for f in ascend.folders(ctx)}
    for v, w in ws.items():
        r = rels[v]
        assert any(s.repo == "pypi:torch-npu" and s.staged.startswith(f"ascend/pypi-wheels/{v}/") for s in r.sources)
        if v in packages:  # merged with its tag: same lists (checked, and said so)
            assert r.vendor_release is not None and r.aliases[0].startswith("v")
            assert any("the tag's files give the same lists" in n for n in r.notes), v
            ops = ascend.read_wheel(w.folder)
            assert aten(r) == ops.aten and len(r.op_set("custom")) == len(ops.custom)
        else:
            assert r.vendor_release is None and not r.aliases and not r.caveats
            assert r.torch == w.torch
    assert set(ws) - packages == {"2.7.1.post11", "2.8.0.post5", "2.9.1", "2.10.0.post7", "2.11.0.post3",
                                  "2.12.0.post3", "2.13.0", "2.14.0"}
    assert rels["2.9.1"].torch == "2.9.1" and rels["2.1.0.post17"].torch == "2.1.0"
    # the wheel-only 2.12.0.post3 has 21 aten ops more than tag v26.1.0-pytorch2.12.0 (_fused_adam_, ...)
    assert len(aten(rels["2.12.0.post3"])) == 1106
    assert any(n.startswith("aten ops: the wheel 1106 vs tag v26.1.0-pytorch2.12.0 filtered as v2.12 1085: "
                            "21 only in the wheel") for n in rels["2.12.0.post3"].notes)
    assert any("same aten, custom, quant and autograd lists as tag v26.0.0-pytorch2.9.0" in n
               for n in rels["2.9.1"].notes)
    # 2.13.0 / 2.14.0 are not the 26.2.0-beta.1 / master builds of those lines: 13 more aten ops
    assert len(aten(rels["2.13.0"])) == len(aten(rels["2.14.0"])) == 1078


def test_order(rels: dict[str, Release]) -> None:
    order = sorted(rels.values(), key=lambda r: r.order)
    assert [r.order for r in order] == list(range(1, len(rels) + 1))
    pos = {r.name: r.order for r in order}
    assert pos["1.8.1rc1"] == 1 and order[-1].name == "master+2.14"
    assert pos["2.6.0"] < pos["2.6.0.post3"] < pos["2.6.0.post5"] < pos["2.7.1.post4"] < pos["2.7.1.post8"]
    assert pos["2.1.0.post6"] < pos["2.1.0.post8"]  # 6.0.rc2 < 6.0.rc3
    assert pos["2.12.0"] < pos["2.12.0.post3"] < pos["26.2.0-beta.1+2.13"] < pos["2.13.0"] < pos["master+2.13"]
    assert pos["2.8.0.post4"] < pos["2.8.0.post5"] < pos["2.7.1.post8"]  # after the newest tag of its line


def test_opinfo_caveats(ctx: Context, rels: dict[str, Release]) -> None:
    import yaml

    up = ctx.folder("ascend")
    with open(up / "v7.3.0-pytorch2.6.0" / "unsupported_ops_info_base.yaml", encoding="utf-8") as f:
        raw = yaml.load(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    named = {k for k, tests in raw.items() if k is not None and any(x for v in tests.values() for x in v or [])}
    r = rels["2.6.0.post5"]
    assert len(r.caveats) == len(named) == 935 and all(c.api for c in r.caveats)
    c = next(c for c in r.caveats if c.op == "__rmul__")
    assert c.dtypes == ["bool", "complex128", "complex64", "float32", "float64"]
    assert "test_compare_cpu[float32]" in c.note and "test_variant_consistency_eager[complex64,float32]" in c.note
    assert c.source == "Ascend/op-plugin test/unsupported_ops_info_base.yaml"  # commit: in the [[source]] entries
    assert not rels["2.0.1.post1"].caveats and not rels["1.8.1"].caveats  # the skip lists start with the 2.1 line
    assert len(rels["2.1.0"].caveats) == 898  # 5.0.0: the single test/unsupported_ops_info.yaml


def test_files_and_sources(ctx: Context, rels: dict[str, Release]) -> None:
    up = Path(ctx.upstream)
    for r in rels.values():
        assert set(r.ops) <= set(CATEGORIES) and r.sources and r.notes and r.accuracy
        for s in r.sources:
            assert (up / s.staged).is_file() and len(s.sha256) == 64
            assert s.commit is None or re.fullmatch(r"[0-9a-f]{40}", s.commit)
    r = rels["1.11.0.post8"]
    assert [s.path for s in r.sources] == ["torch_npu/csrc/aten/npu_native_functions.yaml",
                                           "op_plugin/config/v1r11/op_plugin_functions.yaml"]
    again = Release.from_toml(rels["2.6.0.post5"].to_toml())
    assert again.ops == rels["2.6.0.post5"].ops and again.aliases == ["v7.3.0-pytorch2.6.0"]
    assert Release.from_toml(rels["1.5.0.post8"].to_toml()).op_set("custom") == rels["1.5.0.post8"].op_set("custom")


def test_the_issue_reports_resolve_as_observed(ctx: Context, rels: dict[str, Release]) -> None:
    from opaudit.matrix.matrix import Matrix

    def status(name: str, op: str) -> str:
        r = rels[name]
        return Matrix(r, ctx.torch_for(r.torch)).resolve(op).status

    # Ascend/pytorch#40: torch_npu 2.2.0 runs isin.Tensor_Tensor_out through the CPU fallback; native from 6.0.rc3
    assert status("2.2.0", "isin.Tensor_Tensor_out") == "cpu_fallback"
    assert status("2.4.0", "isin.Tensor_Tensor_out") == "native"
    # Ascend/pytorch#51: _transformer_encoder_layer_fwd falls back to the CPU (torch 2.1)
    assert status("2.1.0", "_transformer_encoder_layer_fwd") == "cpu_fallback"
    # the 2.0 line has no generic fallback: tocpu ops round-trip, unsupported ones raise
    assert status("2.0.1.post1", "_cholesky_solve_helper") == "cpu_fallback"
    assert status("2.0.1.post1", "bitwise_left_shift.Tensor") == "missing"
