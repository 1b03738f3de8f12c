"""One target vocabulary: the names users type for a vendor's device (npu, mlu, supa, gcu, tpu) name the same
target in lint, fix, scan, run, zoo and the Python API, from one table (coverage_db/curated/vendors.toml)."""

from __future__ import annotations

import pytest
from helpers import ROOT, run_cli

from opaudit.errors import InputError
from opaudit.lint.catalogue import load_target
from opaudit.lint.engine import Settings
from opaudit.matrix import load_matrix
from opaudit.matrix.vendors import canonical, vendors

EXAMPLES = ROOT / "examples"


@pytest.mark.parametrize(("typed", "vendor"), [("npu", "ascend"), ("NPU", "ascend"), ("mlu", "cambricon"),
                                               ("supa", "biren"), ("br", "biren"), ("gcu", "enflame"),
                                               ("tpu", "xla"), ("torch_npu", "ascend"), ("ascend", "ascend")])
def test_typed_names_name_the_vendor(typed, vendor):
    assert canonical(typed) == vendor
    assert load_matrix(typed).release.vendor == vendor
    assert load_matrix(f"{typed}@{load_matrix(vendor).release.name}").release.key == load_matrix(vendor).release.key


def test_every_name_is_one_vendors():
    seen: dict[str, str] = {}
    for v in vendors().values():
        for n in (v.name, *v.names):
            assert seen.setdefault(n, v.name) == v.name, n


def test_lint_takes_them_and_says_which_vendors_have_no_table():
    assert load_target("npu") is load_target("ascend") and Settings(target="mlu").target == "cambricon"
    with pytest.raises(InputError, match="PyTorch/XLA has no lint table"):
        load_target("tpu")


def test_the_commands_take_them(tmp_path):
    lint_npu = run_cli("lint", str(EXAMPLES), "-t", "npu", "--output-format", "json")
    lint_ascend = run_cli("lint", str(EXAMPLES), "-t", "ascend", "--output-format", "json")
    assert lint_npu[0] == lint_ascend[0] and lint_npu[1] == lint_ascend[1]
    code, out, err = run_cli("scan", str(EXAMPLES / "model.py"), "--device", "cpu", "-t", "mlu", "-q")
    assert code == 0, err[-2000:]
    code, out, err = run_cli("run", "--simulate", "npu", "--", str(EXAMPLES / "train_cuda.py"), "--epochs", "1",
                             "--steps-per-epoch", "1", "--batch-size", "2", cwd=tmp_path)
    assert code == 0 and "ascend@" in out + err, err[-2000:]
    code, _, err = run_cli("fix", str(EXAMPLES), "-t", "bogus", "--diff")
    assert code == 2 and "also typed as:" in err and "npu, torch_npu, huawei = ascend" in err
