"""The example reports linked from the README and docs/audit.md say what the audit of their committed trace says
today: the targets asked for, in order, each with its verdict, and every op a target lacks or falls back on named
in both the Markdown and the HTML report. A change of coverage_db or of the audit that changes a verdict or an op
fails here (then: python examples/make_reports.py --render); a change of the reports' layout alone does not."""

from __future__ import annotations

import html
import re

import make_reports
import pytest
from helpers import ROOT

import opaudit

FOLDER = ROOT / "reports" / "examples"
ROW = re.compile(r"^\| `([^`]+)` \| [^|]+ \| \S+ (.+?) \|$", re.M)  # | `target` | PyTorch | ⚠️ verdict |


@pytest.mark.parametrize("name", sorted(make_reports.EXAMPLES))
def test_each_example_report_says_what_the_audit_of_its_trace_says(name: str) -> None:
    trace = opaudit.load_trace(FOLDER / f"{name}.trace.json")
    result = opaudit.audit(trace, make_reports.EXAMPLES[name][1])
    md = (FOLDER / f"{name}.md").read_text(encoding="utf-8")
    page = html.unescape((FOLDER / f"{name}.html").read_text(encoding="utf-8"))
    assert f"traced in {trace.meta.mode} mode" in md
    rows = dict(ROW.findall(md))
    assert list(rows) == result.selected
    named = 0
    for key in result.selected:
        verdict = result.verdicts[key]
        assert rows[key] == verdict.summary, key
        assert key in page and verdict.summary in page, key
        for entry in verdict.missing + verdict.fallback:  # "op (phase[, within composite])"
            op = entry.split(" ")[0]
            assert f"`{op}`" in md and op in page, (key, op)
            named += 1
    if name == "demo-train":  # the demo's targets differ: one fails, three fall back, two run natively
        assert named >= 8  # (xla's _reshape_alias is no finding since aten takes view for its tensors)
        assert {result.verdicts[k].verdict for k in result.selected} == {"fails", "cpu_fallback", "runs"}


def test_every_example_has_its_trace_and_reports() -> None:
    expected = {f"{n}{suffix}" for n in make_reports.EXAMPLES for suffix in (".trace.json", ".html", ".md")}
    atlas = {"zoo-hf.html", "zoo-hf.csv"}  # the transformers atlas, made by bench/zoo_hf.py (a benchmark's run)
    assert {p.name for p in FOLDER.iterdir()} == expected | atlas
