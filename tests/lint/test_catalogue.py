"""The rule catalogue and target tables (rules/): well formed, and every rule proven by its own examples.

Each example of rules/catalogue.toml is a test: `before` must raise the rule's code on its target,
`fix` must turn it into `after` exactly (or leave it, for suggestions and reports), the output must
parse, and fixing it again must change nothing. `valid` examples must raise no finding and stay
byte-identical."""

from __future__ import annotations

import ast

import pytest

from opaudit.lint import Settings, fix_source, lint_source, load_catalogue, load_target, target_names
from opaudit.lint.catalogue import FIX_CLASSES, GROUPS
from opaudit.report.lint import explain_text, rules_table

CAT = load_catalogue()
EXAMPLES = [(code, i, ex) for code, rule in CAT.rules.items() for i, ex in enumerate(rule.examples)]
TARGETS = ["ascend", "biren", "cambricon", "mps", "musa", "neutral", "rocm", "xpu"]


@pytest.mark.parametrize(("code", "i", "ex"), EXAMPLES, ids=[f"{c}-{i}-{e.target}" for c, i, e in EXAMPLES])
def test_example(code, i, ex):
    settings = Settings(target=ex.target, select=("ALL",), unsafe_fixes=ex.unsafe,
                        **({"min_torch": ex.min_torch} if ex.min_torch else {}))
    before = ex.before.encode()
    found = [f.code for f in lint_source(before, settings).findings]
    fixed = fix_source(before, settings)
    assert fixed.error is None, fixed.error
    if ex.valid:
        assert code not in found, found
        assert fixed.new == before
        return
    assert code in found, f"{code} not found in its own example; found {found}"
    expected = (ex.after if ex.after is not None else ex.before).encode()
    assert fixed.new.decode() == expected.decode()
    ast.parse(fixed.new)
    again = fix_source(fixed.new, settings)
    assert again.new == fixed.new, "fixing twice changed the code"
    if ex.unsafe and ex.after is not None and ex.after != ex.before:
        safe_only = fix_source(before, Settings(target=ex.target, select=("ALL",)))
        assert safe_only.new != fixed.new, "marked unsafe, but the safe fix already does it"


def test_codes_groups_and_fix_classes():
    assert len(CAT.rules) >= 95
    for code, rule in CAT.rules.items():
        assert code[:3] in GROUPS and rule.fix in FIX_CLASSES and rule.summary and rule.name
        assert rule.name == rule.name.lower() and " " not in rule.name, code
    names = [r.name for r in CAT.rules.values()]
    assert len(names) == len(set(names)), "rule names must be unique"


def test_every_rule_but_the_file_level_one_has_examples():
    missing = [c for c, r in CAT.rules.items() if not r.examples and c != "OA804"]
    assert not missing, missing
    fixable = [c for c, r in CAT.rules.items() if r.fix in ("safe", "unsafe")]
    for code in fixable:
        assert any(e.after is not None and not e.valid for e in CAT.rules[code].examples), f"{code}: no fix example"


def test_every_example_names_a_real_target():
    assert target_names() == TARGETS
    for _, _, ex in EXAMPLES:
        assert ex.target in TARGETS


def test_each_target_table_is_complete():
    for name in TARGETS:
        t = load_target(name)
        assert t.name == name and t.title
        if not (t.neutral or t.keeps_cuda):
            assert t.device and t.module.startswith("torch.")
        for code in t.notes:
            assert code in CAT.rules, f"{name}: note for unknown rule {code}"
        for api in t.api:
            assert any(api == a or api.startswith(a.removesuffix("*")) for r in CAT.rules.values() for a in r.apis), \
                f"{name}: [api] entry {api} belongs to no rule"


def test_selection_by_prefix_and_defaults():
    assert CAT.expand(["OA1"]) == {c for c in CAT.rules if c.startswith("OA1")}
    assert CAT.expand(["OA40"]) == {c for c in CAT.rules if c.startswith("OA40")}
    default = CAT.select()
    assert "OA610" not in default and "OA101" in default
    assert "OA610" in CAT.select(extend_select=["OA610"])
    assert not {c for c in CAT.select(ignore=["OA4"]) if c.startswith("OA4")}
    from opaudit.errors import InputError

    with pytest.raises(InputError):
        CAT.expand(["XY1"])


def test_rule_pages_and_list_come_from_the_catalogue():
    rows = rules_table(CAT)
    assert [r["code"] for r in rows] == list(CAT.rules)
    page = explain_text(CAT.rules["OA101"])
    assert page.startswith("# OA101 (cuda-method)") and "--unsafe-fixes" in page
    assert "torch.ones(2).npu(non_blocking=True)" in page
    assert "OA613" not in [r["code"] for r in rules_table(CAT, load_target("xpu"))]
