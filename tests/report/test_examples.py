"""The example reports linked from the README and docs/audit.md are current: re-rendering each committed trace with
today's coverage_db and report code gives the committed files byte for byte."""

from __future__ import annotations

import make_reports
import pytest
from helpers import ROOT

FOLDER = ROOT / "reports" / "examples"


@pytest.mark.parametrize("name", sorted(make_reports.EXAMPLES))
def test_example_reports_are_current(name: str) -> None:
    for file, text in make_reports.render(name).items():
        committed = (FOLDER / file).read_text(encoding="utf-8")
        assert text == committed, f"reports/examples/{file} is stale: run python examples/make_reports.py --render"


def test_every_example_has_its_trace_and_reports() -> None:
    expected = {f"{n}{suffix}" for n in make_reports.EXAMPLES for suffix in (".trace.json", ".html", ".md")}
    atlas = {"zoo-hf.html", "zoo-hf.csv"}  # the transformers atlas, made by bench/zoo_hf.py (a benchmark's run)
    assert {p.name for p in FOLDER.iterdir()} == expected | atlas
