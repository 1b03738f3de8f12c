"""The biren adapter (torch_supa for BR2xx, BR1xx through DIPU) against its raw files and the documented numbers.

Documented numbers: biren/SOURCES.md (repository table, "Files" tables, "Related data elsewhere") and
research/vendors-dipu-biren-others.md section 4.3 (the table "registered aten ops (name.overload)" per torch, the
quantized / nested counts, "CUDA kernels dropped by the filter: 37 (41 from 2.11)").
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from opaudit.matrix.release import Release
from opaudit.matrix.sources import Context, biren

# biren/SOURCES.md "Files" (derived/privateuse1_ops_torch-<ver>.txt) = research section 4.3 table
DOC = {"2.6.0": 1206, "2.8.0": 1217, "2.9.0": 1226, "2.10.0": 1229, "2.11.0": 1233, "2.12.0": 1239}
# Re-applying the rule gives 5 more ops per release than documented. The staged derivation (a) does not count the
# kernels torchgen generates from ufunc_inner_loop (add.out has no CUDA dispatch key, only ufunc loops; its
# structured group add.Tensor / add_.Tensor follows) -- gen.py runs torchgen, so RegisterCUDA holds them -- and
# (b) calls std_mean.correction_out / var_mean.correction_out "absent from this torch", but they are autogen: ops
# of std_mean.correction / var_mean.correction, so Biren's yaml entries for them do register. We assert our numbers.
EXTRA = {"add.out", "add.Tensor", "add_.Tensor", "std_mean.correction_out", "var_mean.correction_out"}
# research section 4.3: "CUDA kernels dropped by the filter: 37 (41 from 2.11)"
FILTERED = {"2.6.0": 37, "2.8.0": 37, "2.9.0": 37, "2.10.0": 37, "2.11.0": 41, "2.12.0": 41}
# research section 4.3: "39 quantized ... registrations". gen.py drops the whole native_functions entry of every op
# in Biren's lists unless it is in preserve_quantized_dispatch, so empty.memory_format, empty_strided and
# masked_fill_.Scalar lose their QuantizedCUDA kernel too: 36 by the rule (the derived json keeps them).
QUANT_DOC, QUANT = 39, 36
QUANT_DROPPED = {"empty.memory_format", "empty_strided", "masked_fill_.Scalar"}
# biren/SOURCES.md Files table: supported (50), autograd (2), custom (3)
SUPPORTED, AUTOGRAD, CUSTOM = 50, 2, 3
# biren/SOURCES.md "Related data elsewhere": 353 DIPU supa candidates, 77 DIOPI test-skip cases
DIPU_SUPA, SUPA_SKIPS = 353, 77


@pytest.fixture(scope="module")
def rels(ctx: Context) -> list[Release]:
    return biren.releases(ctx)


@pytest.fixture(scope="module")
def supa(rels: list[Release]) -> dict[str, Release]:
    return {r.torch: r for r in rels if r.package == "torch_supa"}


@pytest.fixture(scope="module")
def folder(upstream: Path) -> Path:
    return upstream / "biren" / biren.NEW


def test_one_release_per_targeted_torch(supa: dict[str, Release], upstream: Path) -> None:
    text = (upstream / "biren" / "SOURCES.md").read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if "68fb624af2355ba2a659766fc4571eb51cee59e4" in line)
    assert re.findall(r"2\.\d+\.0", row) == list(DOC)  # the "PyTorch targeted" column
    assert "20600" in row and "21200" in row
    assert sorted(supa, key=biren._vkey) == list(DOC)
    for v, r in supa.items():
        code = biren.torch_code(v)
        assert r.name == f"1.0.0.{code}+br2xx" and f"1.0.0.{code}" in r.aliases and f"1.0.0+torch{v}" in r.aliases
        assert r.vendor == "biren" and r.vendor_release == "1.0.0" and r.torch == v
        assert (r.device_type, r.dispatch_key, r.package, r.import_name) == ("supa", "PrivateUse1", "torch_supa",
                                                                              "torch_supa")
        assert r.exact
    assert biren.torch_code("2.10.0") == "21000"


def test_order(rels: list[Release]) -> None:
    assert [r.order for r in rels] == list(range(1, len(rels) + 1))
    assert rels[0].name == "br1xx-dipu"  # BR1xx era (DIPU 2023-24) is older than torch_supa (2026)
    assert max(rels, key=lambda r: r.order).torch == "2.12.0"
    assert [r.torch for r in rels[1:]] == list(DOC)


def test_native_counts(supa: dict[str, Release], folder: Path) -> None:
    for v, n in DOC.items():
        staged = (folder / "derived" / f"privateuse1_ops_torch-{v}.txt").read_text(encoding="utf-8").split()
        assert len(staged) == n  # the documented count is the staged list
        native = set(supa[v].ops["native"])
        assert len(native) == n + len(EXTRA)
        assert native - set(staged) == EXTRA and not set(staged) - native
        assert any(f"counts {n} ops, this rule {n + len(EXTRA)}" in s for s in supa[v].notes)


def test_rule_reapplied(supa: dict[str, Release], ctx: Context, folder: Path) -> None:
    """CUDA set of the PyTorch release minus native = exactly the filtered names; native beyond it = Biren's."""
    flt = json.loads((folder / "derived" / "codegen_filter.json").read_text(encoding="utf-8"))
    subs = flt["op_name_substrings_filtered_out"]
    assert subs == ["miopen", "fft", "_cholesky_solve_helper", "sparse", "_cslt_compress",
                    "_convert_indices_from_csr_to_coo", "_convert_indices_from_coo_to_csr"]
    y = yaml.safe_load((folder / "supa_native_functions.yaml").read_text(encoding="utf-8"))
    own = set(y["supported"]) | set(y["autograd"])
    for v, r in supa.items():
        t = ctx.torch_for(v)
        assert t is not None and t.version == v
        cuda = t.with_kernel("CUDA")
        native = set(r.ops["native"])
        missing = cuda - native
        assert len(missing) == FILTERED[v]
        assert all(any(s in n for s in subs) for n in missing)
        assert native - cuda <= own  # beyond the CUDA set: only Biren's own names (cdist, convolution_overrideable...)
        share = 100 * len(cuda & native) / len(cuda)
        assert any(f"{share:.1f}%" in s for s in r.notes)


def test_biren_lists(supa: dict[str, Release], folder: Path) -> None:
    raw = (folder / "supa_native_functions.yaml").read_text(encoding="utf-8")
    y = yaml.safe_load(raw)
    assert (len(y["supported"]), len(y["autograd"]), len(y["custom"])) == (SUPPORTED, AUTOGRAD, CUSTOM)
    assert "backend: SUPA" in raw and not y["perf_supported"]
    r = supa["2.6.0"]
    assert r.ops["autograd"] == ["renorm", "renorm_"]
    assert r.ops["custom"] == ["custom::_get_data_ptr", "custom::normalize_fused", "custom::one_hot_fused"]
    native = set(r.ops["native"])
    assert set(y["supported"]) <= native
    # spot checks against the raw text
    assert "  - mm.out\n" in raw and {"mm.out", "mm"} <= native
    assert "  - binary_cross_entropy_with_logits\n" in raw and "binary_cross_entropy_with_logits" in native
    assert "  - cdist\n" in raw and "cdist" in native  # a CompositeImplicit op Biren registers itself
    assert "relu" in native and "add.out" in native
    for absent in ("_fft_r2c", "_fft_c2c.out", "miopen_convolution", "_to_sparse_csr", "_cholesky_solve_helper",
                   "cross_entropy_loss"):
        assert absent not in native


def test_earlier_commit_only_in_notes(supa: dict[str, Release], upstream: Path) -> None:
    old = (upstream / "biren" / biren.OLD / "supa_native_functions.yaml").read_text(encoding="utf-8")
    y = yaml.safe_load(old)
    assert y["perf_supported"] == ["binary_cross_entropy_with_logits", "cross_entropy_loss"]
    for r in supa.values():
        assert any("86c4263" in s and "cross_entropy_loss" in s for s in r.notes)
        assert "cross_entropy_loss" not in r.ops["native"]
        assert any(s.commit == "86c42639734b8b1cb87959810ddb6fff83f48d1f" for s in r.sources)


def test_quant_and_nested(supa: dict[str, Release], folder: Path) -> None:
    data = json.loads((folder / "derived" / "privateuse1_ops_by_torch_version.json").read_text(encoding="utf-8"))
    for v, r in supa.items():
        doc = set(data["versions"][v]["quantized_privateuse1_ops"])
        assert len(doc) == QUANT_DOC
        assert len(r.ops["quant"]) == QUANT and doc - set(r.ops["quant"]) == QUANT_DROPPED
        assert "_index_put_impl_" in r.ops["quant"]  # preserve_quantized_dispatch
        nested = len(data["versions"][v]["nestedtensor_privateuse1_ops"])
        assert 98 <= nested <= 101  # research: "about 100 nested-tensor registrations"
        assert any("NestedTensorCUDA" in s for s in r.notes)


def test_caveats(supa: dict[str, Release], folder: Path) -> None:
    limits = json.loads((folder / "derived" / "api_limitations.json").read_text(encoding="utf-8"))
    r = supa["2.12.0"]
    api = {c.op: c for c in r.caveats if c.api}
    assert len(api) == len(limits["apis"])
    assert api["inverse"].dtypes == ["float16", "bfloat16", "float64", "complex64", "complex128"]  # float32 only
    assert "float32" not in api["torch.linalg.norm"].dtypes and "float16" not in api["torch.linalg.norm"].dtypes
    assert "float32" in api["torch.linalg.qr"].dtypes  # unsupported: every floating dtype
    assert set(api["scaled_dot_product_attention"].dtypes) == {"float16", "float64", "complex64", "complex128"}
    aten = {c.op: c for c in r.caveats if not c.api and c.op != "*"}
    assert "linalg_qr" in aten and "aten_hint" in aten["linalg_qr"].note and "is registered" in aten["linalg_qr"].note
    assert "no kernel is registered" in aten["_fft_r2c"].note
    star = {tuple(c.dtypes): c for c in r.caveats if c.op == "*"}
    assert ("float64",) in star and "does not support double" in star[("float64",)].note
    assert ("quint8", "quint4x2", "quint2x4", "qint32", "qint8") in star


def test_fallback_and_sources(supa: dict[str, Release], upstream: Path) -> None:
    r = supa["2.6.0"]
    assert r.fallback.exists and r.fallback.default_on
    assert "CAUTION: The operator" in r.fallback.note and "coverage_db/SOURCES.md#biren-cpu-fallback" in r.fallback.note
    commits = {s.path: s.commit for s in r.sources}
    assert commits[biren.YAML_PATH] in ("68fb624af2355ba2a659766fc4571eb51cee59e4",
                                        "86c42639734b8b1cb87959810ddb6fff83f48d1f")
    assert commits[biren.GUIDE_PATH].startswith("f79c0e7f")
    for s in r.sources:
        assert (upstream / s.staged).is_file() and len(s.sha256) == 64
    assert any(s.repo == "pytorch/pytorch" for s in r.sources)


def test_br1xx_is_the_dipu_upper_bound(rels: list[Release], upstream: Path) -> None:
    r = rels[0]
    assert not r.exact and r.accuracy.startswith("UPPER BOUND")
    assert any("UPPER BOUND" in s for s in r.notes) and any("torch_br" in s and "NOT" in s for s in r.notes)
    assert (r.device_type, r.dispatch_key, r.package, r.import_name, r.torch) == ("cuda", "XPU", "torch_dipu",
                                                                                  "torch_dipu", "2.1.0")
    d = upstream / "dipu" / "deeplink.framework-9dd38082" / "derived"
    cands = set((d / "aten_ops_supa.txt").read_text(encoding="utf-8").split())
    always = set((d / "always_registered_ops.txt").read_text(encoding="utf-8").split())
    assert len(cands) == DIPU_SUPA
    assert set(r.ops["native"]) == cands | always
    skips = json.loads((upstream / "dipu" / "DIOPI-02f03c6a" / "derived" / "diopi_test_skips_supa.json")
                       .read_text(encoding="utf-8"))
    assert len(skips["cases"]) == SUPA_SKIPS
    assert any(c.op == "*" and c.dtypes == ["bool"] for c in r.caveats)
    assert "br1xx" in r.aliases
