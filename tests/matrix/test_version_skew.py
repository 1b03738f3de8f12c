"""Releases built on another PyTorch than the tracing one: ops their PyTorch lacks, read from the staged
op tables, and overloads an older PyTorch calls for the same work (curated/overloads.toml)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from opaudit.data import data_dir, load_toml
from opaudit.matrix import load_database, load_matrix
from opaudit.matrix.matrix import STATUSES, Support, equivalents, worst
from opaudit.matrix.torchops import load_torch_ops, op_history, version_key

DB = data_dir("coverage_db")


def _table_lines(version: str, name: str) -> list[str]:
    text = (DB / "pytorch" / f"ops-{version}.tsv").read_text(encoding="utf-8")
    return [line for line in text.splitlines() if line.split("\t")[0] == name]


def test_the_op_tables_say_when_foreach_add_tensor_appeared():
    # read the tsv lines themselves, not through the code under test
    assert not _table_lines("2.0.0", "_foreach_add_.Tensor")
    assert not _table_lines("2.1.0", "_foreach_add_.Tensor")
    assert _table_lines("2.2.0", "_foreach_add_.Tensor")
    assert _table_lines("2.1.0", "_foreach_add_.Scalar")
    h = op_history(DB)
    assert h.added_after("_foreach_add_.Tensor", "2.0.0") == "2.2.0"
    assert h.added_after("_foreach_add_.Tensor", "2.1.0") == "2.2.0"
    assert h.last_before("_foreach_add_.Tensor", "2.1.0") is None


@pytest.mark.parametrize("target", ["cuda@2.0.0", "cuda@2.1.0"])
def test_foreach_add_tensor_on_an_older_cuda_is_judged_as_the_overload_its_optimizers_call(target):
    m = load_matrix(target)
    s = m.resolve("aten::_foreach_add_.Tensor")
    assert s.status == "native" and s.via == "_foreach_add_.Scalar"
    assert f"PyTorch {m.release.torch} has no _foreach_add_.Tensor" in s.note
    # out of place, nothing curated: the op tables say the release's PyTorch lacks it
    s = m.resolve("aten::_foreach_add.Tensor")
    assert s.status == "version_skew" and s.since == "2.2.0"
    assert "PyTorch 2.2.0 added it" in s.note


def test_foreach_add_tensor_runs_as_itself_from_2_2():
    for target in ("cuda@2.2.0", "cuda@2.13.0"):
        s = load_matrix(target).resolve("aten::_foreach_add_.Tensor")
        assert s.status == "native" and s.via is None


def test_an_op_added_later_is_version_skew_with_the_first_release_that_has_it():
    assert not _table_lines("2.0.0", "_fused_adamw_.tensor_lr") and _table_lines("2.1.0", "_fused_adamw_.tensor_lr")
    s = load_matrix("cuda@2.0.0").resolve("aten::_fused_adamw_.tensor_lr")
    assert s.status == "version_skew" and s.since == "2.1.0"
    assert load_matrix("cuda@2.1.0").resolve("aten::_fused_adamw_.tensor_lr").status == "native"
    # a vendor release on PyTorch 2.1 gets the same answer from the same table
    s = load_matrix("ascend@2.1.0").resolve("aten::_foreach_add.Tensor")
    assert s.status == "version_skew" and s.since == "2.2.0"


def test_an_op_of_no_staged_release_stays_unknown():
    s = load_matrix("cuda@2.0.0").resolve("aten::no_such_op_anywhere.default")
    assert s.status == "unknown" and "nor of any staged PyTorch release" in s.note


def test_an_op_pytorch_removed_is_version_skew_on_newer_releases():
    h = op_history(DB)
    tables = h.tables
    old, new = tables[0], tables[-1]
    removed = sorted(n for n in old.ops if n not in new)
    assert removed, "some op of the oldest staged PyTorch is gone from the newest"
    name = removed[0]
    s = load_matrix(f"cuda@{new.version}").resolve(name)
    assert s.status == "version_skew" and s.since is None
    assert f"PyTorch {h.last_before(name, new.version)} was the last with it" in s.note


def test_rms_norm_api_needs_pytorch_2_4():
    for v in ("2.0.0", "2.1.0", "2.2.0", "2.3.0"):
        assert not _table_lines(v, "rms_norm")
    assert _table_lines("2.4.0", "rms_norm")
    s = load_matrix("cuda@2.3.0").resolve_api("aten::rms_norm.default")
    assert s.status == "version_skew" and s.since == "2.4.0"
    for target in ("cuda@2.4.0", "cuda@2.13.0"):
        assert load_matrix(target).resolve_api("aten::rms_norm.default").status == "composite"
    assert load_matrix("cuda@2.0.0").resolve_api("aten::layer_norm.default").status == "composite"


def test_version_skew_ranks_after_missing():
    assert "version_skew" in STATUSES
    assert STATUSES.index("missing") < STATUSES.index("version_skew") < STATUSES.index("unknown")
    assert worst([Support("missing"), Support("version_skew")]).status == "version_skew"
    # the status table of the docs (docs/targets.md) lists exactly these statuses, in the order STATUSES ranks them
    page = (Path(__file__).resolve().parents[2] / "docs" / "targets.md").read_text(encoding="utf-8")
    table = page.split("Each op resolves to one status", 1)[1].split("\n\n", 2)[1]
    listed = re.findall(r"^\| `([a-z_]+)` \|", table, re.M)
    assert tuple(listed) == STATUSES


def test_curated_equivalents_name_their_sources_and_fit_the_op_tables():
    data = load_toml("coverage_db", "curated/overloads.toml")["equivalent"]
    assert data and len(equivalents()) == len(data)
    versions = sorted((t.version for t in op_history(DB).tables), key=version_key)
    for e in data:
        assert e["source"] and e["context"] and e["note"]
        # where the op is absent, the older overload exists: the substitution always has a target
        absent = [v for v in versions if load_torch_ops(DB, v).get(e["op"]) is None]
        assert absent, f"{e['op']} is in every staged table: nothing to substitute"
        assert all(load_torch_ops(DB, v).get(e["older"]) is not None for v in absent)


def test_every_release_resolves_with_the_history_loaded():
    db = load_database()
    for e in db.entries:
        m = load_matrix(e.key, db=db)
        assert m.history is not None


def test_a_release_older_than_every_op_table_lacks_what_the_oldest_table_lacks():
    m = load_matrix("ascend@1.11.0")
    assert m.torch_ops is None and m.release.torch == "1.11.0"
    s = m.resolve_api("aten::rms_norm.default")
    assert s.status == "version_skew" and s.since == "2.4.0"
    # an op of PyTorch 2.0 may or may not be older than 1.11: the data does not say
    assert m.resolve_api("aten::layer_norm.default").status == "unknown"
    assert m.resolve("aten::_fused_adamw_.tensor_lr").status == "version_skew"


def test_a_choice_path_on_a_release_older_than_every_op_table_leaves_out_ops_added_later():
    # the math attention path lists _safe_softmax, which PyTorch 2.5 added: no part of it on PyTorch 1.13
    assert not _table_lines("2.0.0", "_safe_softmax")
    s = load_matrix("xla@1.13.0").resolve("aten::scaled_dot_product_attention.default")
    assert s.status != "version_skew" and "_safe_softmax" not in s.note
