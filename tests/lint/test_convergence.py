"""One run of `fix` converges: nested and overlapping edits (a call rewritten around an argument that is
rewritten too) are applied until nothing is left within the run, so a second run changes nothing, on every
file of the linter's fixtures, for every target, with and without --unsafe-fixes."""

from __future__ import annotations

import ast

import pytest
from helpers import FIXTURES

from opaudit.lint import Settings, fix_source

FILES = sorted(p for p in (FIXTURES / "lint").rglob("*.py"))
TARGETS = ["ascend", "cambricon", "musa", "xpu", "mps", "rocm", "neutral", "biren"]

NESTED = b"""import torch
with torch.cuda.amp.autocast(enabled=torch.cuda.is_available()):
    pass
with torch.cuda.amp.autocast(enabled=torch.cuda.is_available(), dtype=torch.cuda.is_bf16_supported()):
    pass
"""


def test_two_edits_of_one_rule_inside_two_replaced_calls():
    new = fix_source(NESTED, Settings(target="ascend")).new
    assert new.count(b"torch.npu.is_available()") == 2 and b"torch.cuda.is_available" not in new
    assert fix_source(new, Settings(target="ascend")).new == new


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("unsafe", [False, True])
def test_a_second_fix_changes_nothing(target, unsafe):
    settings = Settings(target=target, select=("ALL",), unsafe_fixes=unsafe)
    assert len(FILES) >= 20
    for path in FILES:
        once = fix_source(path.read_bytes(), settings)
        assert once.error is None, once.error
        ast.parse(once.new)
        twice = fix_source(once.new, settings)
        assert twice.new == once.new, f"{path.name}: a second fix changed it"
        assert not [f for f in twice.findings if f.fixable and (f.fix == "safe" or unsafe and f.fix == "unsafe")], \
            f"{path.name}: fixable findings left after one run"
