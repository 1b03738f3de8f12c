"""The cambricon adapter (torch_mlu) against its raw files and the documented numbers.

Documented numbers: research/vendors-ascend-cambricon.md, table 3.2 (op counts per folder), table 2.4 (coverage
of the CUDA set) and table 3.3 (runtime facts); cambricon/SOURCES.md and MANIFEST.csv (versions, commits).
"""

from __future__ import annotations

import csv
import hashlib
import re
from pathlib import Path

import pytest

from opaudit.matrix.release import Release
from opaudit.matrix.sources import Context, cambricon

# research table 3.2: dir -> (torch_mlu version, PyTorch, aten overloads listed, of which custom_autograd,
# SparsePrivateUse1 entries, torchvision ops, torchaudio ops, torch_mlu custom ops,
# torch_api.yaml APIs / supported=true / with limitations or None where absent)
TABLE_3_2: dict[str, tuple[str, str, int, int, int, int, int, int, tuple[int, int, int] | None]] = {
    "r1.22_pt2.1.0": ("1.22.2", "2.1.0", 715, 9, 0, 5, 1, 23, None),
    "r1.22_pt2.3.0": ("1.22.2", "2.3.0", 718, 13, 0, 5, 1, 24, None),
    "r1.22_pt2.4.0": ("1.22.2", "2.4.0", 723, 13, 0, 5, 1, 24, None),
    "r2.1_develop-1.23.0-e1cd182": ("1.23.0", "2.1.0", 753, 9, 5, 5, 1, 23, (3826, 1774, 138)),
    "r2.1_develop-1.24.0-af07413": ("1.24.0", "2.1.0", 774, 9, 5, 5, 1, 25, (3830, 1780, 138)),
    "r2.1_develop-1.25.0-d5b005d": ("1.25.0", "2.1.0", 788, 9, 5, 5, 1, 25, (3830, 1781, 138)),
    "r2.3_develop-1.23.0-63ed429": ("1.23.0", "2.3.0", 719, 13, 0, 5, 1, 24, (4110, 1845, 136)),
    "r2.4_develop-1.23.0-08e9fd5": ("1.23.0", "2.4.0", 765, 14, 4, 5, 1, 24, (4256, 2066, 137)),
    "r2.4_develop-1.24.0-c7b4953": ("1.24.0", "2.4.0", 786, 14, 4, 5, 1, 26, (4260, 2072, 136)),
    "r2.4_develop-1.25.0-9e95f97": ("1.25.0", "2.4.1", 799, 14, 4, 5, 1, 26, (4260, 2073, 136)),
}

# research table 2.4 (cambricon rows): dir -> (compared with PyTorch, CUDA-kernel ops upstream, covered, %)
TABLE_2_4 = {
    "r1.22_pt2.1.0": ("2.1.0", 1195, 676, 56.6),
    "r2.1_develop-1.25.0-d5b005d": ("2.1.0", 1195, 748, 62.6),
    "r1.22_pt2.3.0": ("2.3.0", 1213, 676, 55.7),
    "r2.3_develop-1.23.0-63ed429": ("2.3.0", 1213, 677, 55.8),
    "r1.22_pt2.4.0": ("2.4.0", 1226, 680, 55.5),
    "r2.4_develop-1.25.0-9e95f97": ("2.4.0", 1226, 755, 61.6),
}

# dtype-naming limitations of torch_api.yaml encoded as api caveats, per folder (our number: the research
# counts all 136-138 limitations, most of which are argument limits and are not encoded)
CAVEATS = {"r2.3_develop-1.23.0-63ed429": 4}


@pytest.fixture(scope="module")
def rels(ctx: Context) -> dict[str, Release]:
    """Releases by folder name (their first alias)."""
    return {r.aliases[0]: r for r in cambricon.releases(ctx)}


def _aten(folder: Path) -> str:
    text = (folder / "mlu_functions.yaml").read_text(encoding="utf-8")
    return text.split("\naten:\n", 1)[1].split("\nvision:", 1)[0]


def _section(folder: Path, name: str) -> str:
    """The raw text of a top-level section of mlu_functions.yaml, up to the next top-level key."""
    text = (folder / "mlu_functions.yaml").read_text(encoding="utf-8")
    rest = text.split(f"\n{name}:\n", 1)[1]
    end = re.search(r"(?m)^[a-z_]+:\s*$", rest)
    return rest[: end.start()] if end else rest


def test_one_release_per_folder(rels: dict[str, Release], upstream: Path) -> None:
    folders = sorted(p.name for p in (upstream / "cambricon").iterdir() if p.is_dir())
    assert sorted(rels) == folders == sorted(TABLE_3_2)
    names = [r.name for r in rels.values()]
    assert len(set(names)) == len(names)


def test_table_3_2_counts_from_raw_text(rels: dict[str, Release], upstream: Path) -> None:
    for d, (version, torch, listed, autograd, sparse, vision, audio, custom, _api) in TABLE_3_2.items():
        folder = upstream / "cambricon" / d
        aten = _aten(folder)
        names = re.findall(r"(?m)^  - func: ([^\s(]+)", aten)
        blocks = re.split(r"(?m)^  - func:", aten)[1:]
        assert len(set(names)) == listed, d
        assert len(re.findall(r"(?m)^    custom_autograd: True", aten)) == autograd, d
        assert sum(1 for b in blocks if re.search(r"dispatch:.*SparsePrivateUse1", b)) == sparse, d
        r = rels[d]
        assert (r.torch, r.name.split("+")[0].removesuffix(".dev")) == (torch, version), d
        # native = the listed names minus the stale bernoulli_.p minus the SparsePrivateUse1-only _coalesce
        sparse_only = 1 if sparse else 0
        assert len(r.op_set("native")) == listed - 1 - sparse_only, d
        assert len(r.op_set("autograd")) == autograd, d
        ns = [c.split("::")[0] for c in r.op_set("custom")]
        assert (ns.count("torchvision"), ns.count("torchaudio")) == (vision, audio), d
        assert ns.count("torch_mlu") == custom_count(folder) == custom, d


def custom_count(folder: Path) -> int:
    return len(re.findall(r"(?m)^  - func: \w+(?:\.\w+)?\(", _section(folder, "custom")))


def test_torch_api_counts(rels: dict[str, Release], upstream: Path) -> None:
    for d, row in TABLE_3_2.items():
        api = row[8]
        path = upstream / "cambricon" / d / "torch_api.yaml"
        r = rels[d]
        if api is None:
            assert not path.exists() and not r.caveats, d
            continue
        text = path.read_text(encoding="utf-8")
        raw = (len(re.findall(r"(?m)^\s*- api:", text)), len(re.findall(r"(?m)^\s*supported: true\s*$", text)),
               len(re.findall(r"(?m)^\s*limitations:", text)))
        parsed = cambricon.read_torch_api(path)
        assert raw == (parsed.apis, parsed.supported, parsed.limited) == api, d
        assert any(f"{api[0]} Python APIs" in n and f"{api[2]} with limitations" in n for n in r.notes), d
        assert len(r.caveats) == CAVEATS.get(d, 6), d
        assert all(c.api and c.source.endswith(f"{d}/torch_api.yaml") for c in r.caveats), d


def test_cuda_share_table_2_4(ctx: Context, rels: dict[str, Release]) -> None:
    # The research's CUDA set ("dispatch has a CUDA key, or structured_delegate") misses add.out, whose CUDA
    # kernel torchgen generates from ufunc_inner_loop; the project's op table counts it. So our CUDA set and
    # our covered count are both exactly one higher than table 2.4 (add.out is listed by every folder).
    for d, (torch, cuda_doc, covered_doc, pct) in TABLE_2_4.items():
        tops = ctx.torch_for(torch)
        assert tops is not None
        cuda = tops.with_kernel("CUDA")
        native = rels[d].op_set("native")
        assert "add.out" in cuda and "add.out" in native
        assert len(cuda) - 1 == cuda_doc, d
        assert len(cuda & native) - 1 == covered_doc, d
        assert round(100 * covered_doc / cuda_doc, 1) == pct, d
        hit = len(cuda & native)
        assert f"native reaches {hit} of the {len(cuda)} CUDA-kernel ops" in " ".join(rels[d].notes), d


def test_spot_checks_against_raw_yaml(rels: dict[str, Release], upstream: Path) -> None:
    head = "r2.4_develop-1.25.0-9e95f97"
    aten = _aten(upstream / "cambricon" / head)
    r = rels[head]
    native = r.op_set("native")
    for op in ("add.Tensor", "cat", "cat.out", "copy_", "_local_scalar_dense", "isin.Tensor_Tensor_out",
               "_foreach_mul_.Scalar", "_foreach_norm.Scalar", "upsample_nearest1d.out"):
        assert f"  - func: {op}\n" in aten + "\n" and op in native, op
    # absent from the raw list and from native (triu_indices: pytorch#121289, falls back to the CPU)
    for op in ("triu_indices", "_cudnn_rnn_flatten_weight", "_scaled_mm", "linalg_eig", "_cslt_compress"):
        assert f"func: {op}\n" not in aten and f"func: {op}(" not in aten and op not in native, op
    # torch_mlu has the fused encoder layer that Ascend lacks (research 2.4), written with a full schema
    assert "  - func: _transformer_encoder_layer_fwd(Tensor src" in aten and "_transformer_encoder_layer_fwd" in native
    # an entry written with a full schema counts by its name, with its custom_autograd
    assert "  - func: scaled_dot_product_attention(Tensor query" in aten
    assert "scaled_dot_product_attention" in native and "scaled_dot_product_attention" in r.op_set("autograd")
    # lstm.input: custom_autograd -> native and autograd
    assert re.search(r"- func: lstm.input\n    custom_autograd: True", aten)
    assert "lstm.input" in r.op_set("autograd") and "lstm.input" in native
    # listed twice, counted once
    assert aten.count("  - func: logical_or.out\n") == 2
    # _coalesce: SparsePrivateUse1 only; addmm.out: both keys
    assert re.search(r"- func: _coalesce\n    dispatch: SparsePrivateUse1", aten)
    assert "_coalesce" in r.op_set("sparse") and "_coalesce" not in native
    assert "addmm.out" in native and "addmm.out" in r.op_set("sparse")
    # abs: the header's example of an op registered for SparsePrivateUse1 automatically
    assert "abs" in r.op_set("sparse") and "  - func: abs\n" not in aten
    assert "abs" not in rels["r1.22_pt2.4.0"].op_set("sparse")
    assert not rels["r1.22_pt2.4.0"].op_set("sparse") and not rels["r2.3_develop-1.23.0-63ed429"].op_set("sparse")
    # custom namespaces, overloads kept
    custom = r.op_set("custom")
    assert {"torchvision::nms", "torchvision::roi_align", "torchaudio::rnnt_loss", "torch_mlu::fused_adam",
            "torch_mlu::fused_lamb_amp.dst_param", "torch_mlu::dynamic_stitch"} <= custom
    assert "torch_mlu::dynamic_stitch" not in rels["r1.22_pt2.1.0"].op_set("custom")


def test_auto_sparse_ops_have_shared_sparse_kernels(ctx: Context, rels: dict[str, Release]) -> None:
    for d in ("r2.1_develop-1.23.0-e1cd182", "r2.4_develop-1.25.0-9e95f97"):
        r = rels[d]
        tops = ctx.torch_for(r.torch)
        assert tops is not None
        for op in r.op_set("sparse") - r.op_set("native") - {"_coalesce"}:
            o = tops.get(op)
            assert o is not None and {"SparseCPU", "SparseCUDA"} <= o.keys, (d, op)


def test_stale_bernoulli_p(ctx: Context, rels: dict[str, Release], upstream: Path) -> None:
    # research 3.2: one listed name, bernoulli_.p, does not exist upstream; it registers nothing
    for d, r in rels.items():
        assert "  - func: bernoulli_.p\n" in _aten(upstream / "cambricon" / d), d
        tops = ctx.torch_for(r.torch)
        assert tops is not None and tops.get("bernoulli_.p") is None
        assert all("bernoulli_.p" not in names for names in r.ops.values()), d
        assert any(n.startswith("bernoulli_.p is listed but is no overload") for n in r.notes), d
        assert "bernoulli_.float" in tops.ops  # the in-place overloads PyTorch has


def test_facts(rels: dict[str, Release]) -> None:
    for d, r in rels.items():
        assert (r.vendor, r.device_type, r.dispatch_key, r.package, r.import_name) == (
            "cambricon", "mlu", "PrivateUse1", "torch_mlu", "torch_mlu"), d
        assert r.exact, d
        # research table 3.3: fallback on by default, ENABLE_FALLBACK_TO_CPU=0 turns it off,
        # ENABLE_MLU_FAIL_FALLBACK=1 re-runs failed MLU kernels on the CPU; also on the 1.22 branches
        fb = r.fallback
        assert fb.exists and fb.default_on
        assert fb.switch and "ENABLE_FALLBACK_TO_CPU=0" in fb.switch and "ENABLE_MLU_FAIL_FALLBACK=1" in fb.switch
        assert "MLUFallback.cpp" in fb.note
        dev = any(n.startswith("development snapshot, not a published release") for n in r.notes)
        assert dev == (not d.startswith("r1.22_pt")), d
    assert rels["r1.22_pt2.1.0"].name == "1.22.2+torch2.1.0"
    assert rels["r1.22_pt2.4.0"].aliases == ["r1.22_pt2.4.0", "1.22.2-torch2.4.0"]
    assert rels["r2.4_develop-1.25.0-9e95f97"].name == "1.25.0.dev+torch2.4.1"
    assert "r2.4_develop" in rels["r2.4_develop-1.25.0-9e95f97"].aliases
    assert "r2.1_develop" not in rels["r2.1_develop-1.24.0-af07413"].aliases
    by_order = sorted(rels.values(), key=lambda r: r.order)
    assert [r.order for r in by_order] == list(range(1, 11))
    assert [r.aliases[0] for r in by_order[:3]] == ["r1.22_pt2.1.0", "r1.22_pt2.3.0", "r1.22_pt2.4.0"]
    assert by_order[-1].aliases[0] == "r2.4_develop-1.25.0-9e95f97"


def test_sources_match_manifest(rels: dict[str, Release], upstream: Path) -> None:
    with open(upstream / "cambricon" / "MANIFEST.csv", encoding="utf-8", newline="") as f:
        rows = {(row["dir"], row["file"]): row for row in csv.DictReader(f)}
    for d, r in rels.items():
        mine = {s.staged: s for s in r.sources}
        for file in ("mlu_functions.yaml", "torch_api.yaml"):
            row = rows.get((d, file))
            if row is None:
                continue
            s = mine[f"cambricon/{d}/{file}"]
            assert (s.repo, s.path, s.commit, s.sha256) == (row["repo"], row["path_in_repo"], row["commit"],
                                                             row["sha256"]), (d, file)
            data = (upstream / "cambricon" / d / file).read_bytes()
            assert hashlib.sha256(data).hexdigest() == s.sha256
