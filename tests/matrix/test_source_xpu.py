"""The xpu adapter (torch-xpu-ops + PyTorch core's XPU keys) against its raw files and the documented numbers.

Documented numbers: research/vendors-musa-xpu-xla-core.md section 2 (the "Intel XPU" table: supported entries,
native yaml funcs, XPU direct, XPU eff., +core XPU and share of CUDA, SparseXPU, SparseCsrXPU, NestedXPU,
CPU-fallback list; the PyTorch core table's "CUDA eff." and "XPU eff." columns) and section 3 (runtime facts);
xpu/SOURCES.md (branches, commits, formats, the 741 frozen entries, the 2.14 move into core).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from opaudit.data import data_dir
from opaudit.matrix.release import Release
from opaudit.matrix.sources import Context, sha256, xpu
from opaudit.matrix.torchops import TorchOps

# research section 2, Intel XPU table: branch line -> (xpu_functions supported entries, native yaml funcs,
# XPU direct, XPU eff., +core XPU, share of CUDA in %, SparseXPU, SparseCsrXPU, NestedXPU, CPU-fallback list)
TABLE: dict[str, tuple[int, int | None, int | None, int | None, int | None, float | None, int | None, int | None,
                       int | None, int | None]] = {
    "2.4": (294, None, None, None, None, None, None, None, None, 303),
    "2.5": (716, None, None, None, None, None, None, None, None, 141),
    "2.6": (741, 1351, 704, 1053, 1071, 86.3, 151, 0, 0, 39),
    "2.7": (741, 1456, 734, 1091, 1111, 89.2, 161, 127, 93, 33),
    "2.8": (741, 1481, 744, 1106, 1127, 89.7, 161, 127, 93, 28),
    "2.9": (741, 1487, 745, 1108, 1131, 89.4, 161, 127, 93, 31),
    "2.10": (741, 1489, 747, 1110, 1140, 89.9, 161, 127, 93, 34),
    "2.11": (741, 1501, 751, 1114, 1152, 90.3, 171, 127, 93, 32),
    "2.12": (741, 1507, 752, 1115, 1155, 90.3, 171, 141, 94, 30),
    "2.13": (741, 1461, 755, 1118, 1158, 90.5, 173, 145, 94, 29),
}
# the same table's last row, "(2.14.1 core)": XPU eff. 1155, share 90.3%, SparseXPU 173, SparseCsrXPU 145, Nested 94
CORE_214 = (1155, 90.3, 173, 145, 94)
# research section 2, PyTorch core table: "XPU eff." and "CUDA eff." per staged PyTorch release
CORE_XPU = {"2.4.0": 0, "2.5.0": 0, "2.6.0": 18, "2.7.1": 20, "2.8.0": 21, "2.9.0": 23, "2.10.0": 30, "2.11.0": 38,
            "2.12.0": 40, "2.13.0": 40, "2.14.1": 1155}
CUDA_EFF = {"2.6.0": 1228, "2.7.1": 1230, "2.8.0": 1239, "2.9.0": 1248, "2.10.0": 1251, "2.11.0": 1259,
            "2.12.0": 1265, "2.13.0": 1265, "2.14.1": 1268}
# The research's CUDA set resolves structured_delegate but leaves out the kernels torchgen generates from
# ufunc_inner_loop (add.out, and through it add.Tensor / add_.Tensor); the project's op table counts them, so our
# CUDA set is these 3 ops larger. XPU has all three, so the research's share is (hit - 3) / (CUDA - 3).
UFUNC = {"add.out", "add.Tensor", "add_.Tensor"}
# Our share of CUDA (ctx.torch_for(X.Y).with_kernel("CUDA"), ufunc kernels counted): line -> (hit, CUDA ops).
# Rounded, it differs from the research's column at 2.8 (89.8 vs 89.7) and 2.10 (90.0 vs 89.9): the 3 ufunc ops.
OUR_SHARE = {"2.6": (1063, 1231), "2.7": (1100, 1233), "2.8": (1115, 1242), "2.9": (1119, 1251),
             "2.10": (1128, 1254), "2.11": (1140, 1262), "2.12": (1145, 1268), "2.13": (1148, 1268),
             "2.14": (1148, 1271)}
# xpu/SOURCES.md table: line -> branch head commit
COMMITS = {
    "2.4": "97d692eb8c4b3afab17700a2fd918adcea0cba45", "2.5": "7e3d00acea9f0d3728048a5b2743de20d55c64ba",
    "2.6": "fe4ac6a6848c15e08a27f82298956eead9c5793c", "2.7": "3ee2bd2f13e1ed17a685986ff667a58bed5f2aa5",
    "2.8": "3a9419c8bb6a98dd3e3cd473c36691fb4abeae40", "2.9": "789f59d8261b521282a26025c4a7a201621b4683",
    "2.10": "60bb67cae89d267fee2040f3e4b18e2ad64055e8", "2.11": "80f8591b5a04097e4403caf2737abed75aa4860f",
    "2.12": "62b793fed8e0a708551d451712af635b6255b322", "2.13": "21172da81103fd54a94ebc39260a03627ddceb0d",
}
LINES = list(TABLE) + ["2.14"]


@pytest.fixture(scope="module")
def rels(ctx: Context) -> dict[str, Release]:
    return {r.name: r for r in xpu.releases(ctx)}


@pytest.fixture(scope="module")
def raw(upstream: Path) -> dict[str, list[dict[str, Any]]]:
    """torch-xpu-ops' native_functions.yaml entries per line (2.6 to 2.13), read here without the adapter."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    out = {}
    for line in TABLE:
        p = upstream / "xpu" / f"release-{line}" / "native_functions.yaml"
        if p.is_file():
            out[line] = yaml.load(p.read_text(encoding="utf-8"), Loader=loader)
    return out


def _table(ctx: Context, version: str) -> TorchOps:
    t = ctx.torch_for(version)
    assert t is not None, f"no PyTorch {version} table staged"
    return t


def _name(entry: dict[str, Any]) -> str:
    return str(entry["func"]).split("(", 1)[0]


def _keys(entry: dict[str, Any]) -> set[str]:
    return {p.strip() for k in (entry.get("dispatch") or {}) for p in str(k).split(",")}


def _with_key(entries: list[dict[str, Any]], key: str, follow_delegate: bool) -> set[str]:
    direct = {_name(e) for e in entries if key in _keys(e)}
    if not follow_delegate:
        return direct
    return direct | {_name(e) for e in entries if e.get("structured_delegate") in direct}


def _supported(upstream: Path, line: str) -> list[str]:
    text = (upstream / "xpu" / f"release-{line}" / "xpu_functions.yaml").read_text(encoding="utf-8")
    body = text.split("supported:", 1)[1]
    return re.findall(r"(?m)^\s+- (\S+)\s*$", body)


def _fallback_list(upstream: Path, line: str) -> list[str]:
    text = (upstream / "xpu" / f"release-{line}" / "derived_cpu_fallback_ops.txt").read_text(encoding="utf-8")
    return [s.strip() for s in text.splitlines() if s.strip() and not s.startswith("#")]


def test_one_release_per_branch_and_214(rels: dict[str, Release], upstream: Path) -> None:
    folders = sorted(p.name for p in (upstream / "xpu").iterdir() if p.is_dir())
    assert folders == sorted(f"release-{line}" for line in TABLE)
    assert sorted(rels, key=lambda n: tuple(map(int, n.split(".")))) == LINES
    assert [rels[line].order for line in LINES] == list(range(1, 12))
    for line in LINES:
        r = rels[line]
        assert r.aliases == [f"release/{line}"]
        assert (r.vendor, r.device_type, r.dispatch_key, r.package, r.import_name) == ("xpu", "xpu", "XPU", "torch",
                                                                                        None)
    # torch = the staged PyTorch release of the line (2.7.1 and 2.14.1 are the staged ones of their lines)
    assert {line: rels[line].torch for line in LINES} == {
        "2.4": "2.4.0", "2.5": "2.5.0", "2.6": "2.6.0", "2.7": "2.7.1", "2.8": "2.8.0", "2.9": "2.9.0",
        "2.10": "2.10.0", "2.11": "2.11.0", "2.12": "2.12.0", "2.13": "2.13.0", "2.14": "2.14.1"}


def test_sources_and_commits(rels: dict[str, Release], upstream: Path) -> None:
    for line in LINES:
        r = rels[line]
        core = [s for s in r.sources if s.repo == "pytorch/pytorch"]
        assert len(core) == 1 and core[0].staged == f"pytorch/v{r.torch}/native_functions.yaml"
        own = [s for s in r.sources if s.repo == "intel/torch-xpu-ops"]
        for s in r.sources:
            base = data_dir("coverage_db").parent if s.staged.startswith("coverage_db/") else upstream
            assert s.sha256 == sha256(base / s.staged)
        if line == "2.14":  # only the torchvision map of branch release/2.14 (curated xpu_torchvision_ops.tsv)
            assert [(s.commit, s.path, s.staged) for s in own] == [
                ("a4c530f07a68a526003c6867542b92e89fb1fd29", "src/ATen/native/xpu/XPUFallback.cpp",
                 "coverage_db/curated/xpu_torchvision_ops.tsv")]
            continue
        assert {s.commit for s in own} == {COMMITS[line]}
        staged = {Path(s.staged).name for s in own}
        assert {"xpu_functions.yaml", "derived_cpu_fallback_ops.txt"} <= staged
        assert ("native_functions.yaml" in staged) == (line not in ("2.4", "2.5"))
        template = [s.path for s in own if s.staged.endswith("derived_cpu_fallback_ops.txt")]
        assert template == ["src/aten/XPUFallback.template" if line == "2.4"
                            else "src/ATen/native/xpu/XPUFallback.template"]


def test_supported_era_24_25(rels: dict[str, Release], upstream: Path, ctx: Context) -> None:
    for line in ("2.4", "2.5"):
        listed = _supported(upstream, line)
        assert len(listed) == TABLE[line][0]  # 294 / 716 entries as the research counts them ...
        # ... of which 4 are listed twice (_softmax, _softmax.out, _softmax_backward_data(.out)): 290 / 712 ops
        assert len(set(listed)) == TABLE[line][0] - 4
        r = rels[line]
        assert r.op_set("native") == set(listed)  # core has no XPU key before 2.6 (core table: XPU eff. 0)
        assert len(_table(ctx, line).with_kernel("XPU")) == CORE_XPU[r.torch] == 0
        assert not r.exact and "lower bound" in r.accuracy and "mkldnn/xpu" in r.accuracy
        assert any("294 entries, 290 distinct" in n for n in r.notes) if line == "2.4" else True
    # spot checks against the raw text: listed as written, no structured_delegate expansion
    r24 = rels["2.4"]
    text = (upstream / "xpu" / "release-2.4" / "xpu_functions.yaml").read_text(encoding="utf-8")
    assert "\n  - add.Tensor\n" in text and "add.Tensor" in r24.op_set("native")
    assert "\n  - mm\n" not in text and "mm" not in r24.op_set("native")  # registered in C++ by core: not listed
    assert "sparse" not in r24.ops


def test_native_yaml_era_counts(rels: dict[str, Release], raw: dict[str, list[dict[str, Any]]], ctx: Context,
                                upstream: Path) -> None:
    for line, entries in raw.items():
        supported, funcs, direct, eff, plus_core = TABLE[line][:5]
        text = (upstream / "xpu" / f"release-{line}" / "native_functions.yaml").read_text(encoding="utf-8")
        assert len(entries) == len(re.findall(r"(?m)^- func:", text)) == funcs
        assert len(_with_key(entries, "XPU", False)) == direct
        own = _with_key(entries, "XPU", True)
        assert len(own) == eff
        core = _table(ctx, line).with_kernel("XPU")
        assert len(core) == CORE_XPU[rels[line].torch]
        r = rels[line]
        assert r.op_set("native") == own | core
        assert len(r.op_set("native")) == plus_core
        assert r.exact
        # the frozen, dead xpu_functions.yaml (SOURCES.md: same 741 entries, not built) is not what is listed
        assert len(_supported(upstream, line)) == supported == 741
        assert any("741 entries but is not built" in n for n in r.notes)


def test_core_only_214(rels: dict[str, Release], ctx: Context) -> None:
    r = rels["2.14"]
    core = _table(ctx, "2.14")
    assert core is not None and core.version == "2.14.1"
    assert r.op_set("native") == core.with_kernel("XPU")
    assert len(r.op_set("native")) == CORE_214[0] == CORE_XPU["2.14.1"]
    assert "forced_cpu" not in r.ops  # the 2.14 fallback_list is not staged ("n/a" in the research table)
    assert any("not staged" in n for n in r.notes)
    assert any("PR 181233" in n for n in r.notes)


def test_share_of_cuda(rels: dict[str, Release], ctx: Context) -> None:
    for line in LINES:
        if line in ("2.4", "2.5"):
            continue
        r = rels[line]
        table = _table(ctx, line)
        cuda = table.with_kernel("CUDA")
        native = r.op_set("native")
        assert (len(native & cuda), len(cuda)) == OUR_SHARE[line]
        assert any(f"native reaches {OUR_SHARE[line][0]} of the {OUR_SHARE[line][1]}" in n for n in r.notes)
        # the research's numbers, with its CUDA set (the ufunc-generated add kernels left out)
        research = cuda - UFUNC
        assert len(research) == CUDA_EFF[r.torch]
        assert UFUNC <= native
        documented = CORE_214[1] if line == "2.14" else TABLE[line][5]
        assert round(100 * len(native & research) / len(research), 1) == documented


def test_sparse_and_nested(rels: dict[str, Release], raw: dict[str, list[dict[str, Any]]], ctx: Context) -> None:
    for line in LINES[2:]:
        if line == "2.14":
            t = _table(ctx, "2.14")
            eff = [len(t.with_kernel(k)) for k in ("SparseXPU", "SparseCsrXPU", "NestedTensorXPU")]
            direct = {n for n, op in t.ops.items() if op.keys & {"SparseXPU", "SparseCsrXPU"}}
            assert eff == list(CORE_214[2:])
        else:
            entries = raw[line]
            # the research counts sparse keys through structured_delegate too: reproduced here ...
            eff = [len(_with_key(entries, k, True)) for k in ("SparseXPU", "SparseCsrXPU", "NestedTensorXPU")]
            assert eff == list(TABLE[line][6:9])
            direct = _with_key(entries, "SparseXPU", False) | _with_key(entries, "SparseCsrXPU", False)
            # ... but core's yaml has no sparse XPU keys before 2.14
            assert not {n for n, op in _table(ctx, line).ops.items() if op.keys & {"SparseXPU", "SparseCsrXPU"}}
        # ... while the release lists the keys as written: torchgen passes only structured dispatch keys (CPU, CUDA,
        # MPS, XPU, ...) through structured_delegate, so e.g. pow_.Scalar gets no SparseXPU kernel from
        # pow.Tensor_Scalar_out. 2.6: 149 listed, not the research's 151 (floor_ and pow_.Scalar).
        r = rels[line]
        assert r.op_set("sparse") == direct
        assert "pow_.Scalar" not in r.op_set("sparse") and "pow.Tensor_Scalar_out" in r.op_set("sparse")
        assert any(n.startswith("sparse: SparseXPU") and "structured_delegate" in n for n in r.notes)
        nested = TABLE[line][8] if line != "2.14" else CORE_214[4]
        if nested:
            assert any(f"NestedTensorXPU kernels: {nested}" in n for n in r.notes)
    assert len(rels["2.6"].op_set("sparse")) == 149
    assert "floor_" not in rels["2.6"].op_set("sparse") and "floor_" in rels["2.6"].op_set("native")


def test_forced_cpu_lists(rels: dict[str, Release], upstream: Path, ctx: Context) -> None:
    for line in TABLE:
        listed = _fallback_list(upstream, line)
        assert len(listed) == len(set(listed)) == TABLE[line][9]
        r = rels[line]
        aten = {o for o in r.op_set("forced_cpu") if "::" not in o}  # 2.5 sends two torchvision ops there too
        assert aten == set(listed)
        assert not r.op_set("forced_cpu") & r.op_set("native")
        # research: every op of the CPU-fallback lists also has a CUDA kernel (they are real gaps)
        assert set(listed) <= _table(ctx, line).with_kernel("CUDA")
        assert f"fallback_list ({len(listed)} overloads" in r.fallback.note
    # spot checks against the raw text
    assert "acosh.out" in rels["2.4"].op_set("forced_cpu") and "acosh.out" not in rels["2.6"].op_set("forced_cpu")
    for line in ("2.6", "2.13"):
        assert "cholesky" in _fallback_list(upstream, line) and "cholesky" in rels[line].op_set("forced_cpu")
    assert {"geqrf", "ormqr", "linalg_eig", "_efficient_attention_forward"} <= rels["2.13"].op_set("forced_cpu")
    assert {o for o in rels["2.5"].op_set("forced_cpu") if "::" in o} == {"torchvision::roi_align",
                                                                           "torchvision::_roi_align_backward"}


def test_fallback_facts(rels: dict[str, Release]) -> None:
    for line in LINES:
        fb = rels[line].fallback
        # research section 3: opt-in global CPU fallback plus the always-on fallback_list
        assert fb.exists and not fb.default_on
        assert fb.switch is not None
        for var in ("PYTORCH_ENABLE_XPU_FALLBACK=1", "PYTORCH_DEBUG_XPU_FALLBACK", "PYTORCH_XPU_FALLBACK_OP"):
            assert var in fb.switch
        assert "XPUFallback.template" in fb.note and "NotImplementedError" in fb.note
    assert "src/aten/XPUFallback.template" in rels["2.4"].fallback.note
    assert "src/ATen/native/xpu/XPUFallback.template" in rels["2.13"].fallback.note


def test_spot_checks_native(rels: dict[str, Release], upstream: Path) -> None:
    text = (upstream / "xpu" / "release-2.6" / "native_functions.yaml").read_text(encoding="utf-8")
    # floor_: structured_delegate floor.out, whose entry has an XPU key
    assert re.search(r"- func: floor_\(.*\n(?:  .*\n)*?  structured_delegate: floor\.out", text)
    assert re.search(r"- func: floor\.out\(.*\n(?:  .*\n)*?    XPU: floor_out", text)
    assert {"floor_", "floor.out", "floor"} <= rels["2.6"].op_set("native")
    # mm / addmm: no entry in torch-xpu-ops' yaml, an XPU key in PyTorch core's
    assert "- func: mm(" not in text
    assert {"mm", "mm.out", "addmm", "bmm"} <= rels["2.6"].op_set("native")
    # cholesky: absent from the yaml, on the fallback_list
    assert "- func: cholesky(" not in text and "cholesky" not in rels["2.6"].op_set("native")
    # 2.14: only core; cholesky no longer exists in PyTorch 2.14
    assert {"mm", "floor_", "add.Tensor"} <= rels["2.14"].op_set("native")
    assert "cholesky" not in rels["2.14"].op_set("native")
