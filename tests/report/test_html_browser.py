"""The HTML report in a real headless Chromium: loads offline without errors, shows the audit's numbers,
sorts and filters, and shows names holding markup as text."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import CHROMIUM, FIXTURES, NO_CHROMIUM, open_page, run_cli

import opaudit
from opaudit.report import render

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason=NO_CHROMIUM)
EVIL = "<script>alert(1)</script>"
READY = "#ops tbody tr"  # the report has drawn its op table


@pytest.fixture(scope="module")
def resnet_report(resnet_train, tmp_path_factory):
    trace, _ = resnet_train
    a = opaudit.audit(trace, ["musa@1.2.1", "ascend@2.1.0", "xla@2.9.0"])
    folder = tmp_path_factory.mktemp("html")
    path = folder / "resnet.html"
    path.write_text(render(a, "html"), encoding="utf-8")
    return a, json.loads(render(a, "json")), path


def test_loads_offline_with_no_error_and_the_numbers_of_the_json(browser, resnet_report, tmp_path):
    a, doc, path = resnet_report
    page, events = open_page(browser, path, READY)
    assert events["console"] == []
    assert events["requests"] == [path.as_uri()]  # the file itself, nothing else
    for t in doc["targets"]:
        card = page.locator(f'.card[data-target="{t["target"]}"]')
        assert card.locator(".verdict").text_content() == t["summary"]
        shown = {s.get_attribute("data-status"): int(s.get_attribute("data-count"))
                 for s in card.locator("[data-status]").all()}
        assert shown == t["ops"]
    # the heat map has one cell per release checked, coloured by its verdict
    cells = page.locator("#heatmap rect.cell")
    assert cells.count() == len(doc["landscape"])
    verdict = {r["target"]: r["verdict"] for r in doc["landscape"]}
    for i in range(0, cells.count(), 17):
        c = cells.nth(i)
        assert c.get_attribute("data-verdict") == verdict[c.get_attribute("data-key")]
    # the op table of each target holds every op with that target's status
    for t in doc["targets"]:
        page.select_option("#target", t["target"])
        rows = page.locator("#ops tbody tr")
        assert rows.count() == len(doc["ops"])
        assert page.locator("#shown").text_content() == f"{len(doc['ops'])} of {len(doc['ops'])} ops"
        statuses = sorted(r.get_attribute("data-status") for r in rows.all())
        assert statuses == sorted(op["results"][t["target"]]["status"] for op in doc["ops"])
    shot = tmp_path / "report.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 20_000


def test_sorting_and_filtering(browser, resnet_report):
    a, doc, path = resnet_report
    page, events = open_page(browser, path, READY)
    page.select_option("#target", "musa@1.2.1")
    page.click('#ops th[data-key="calls"]')
    calls = [int(r.get_attribute("data-calls")) for r in page.locator("#ops tbody tr").all()]
    assert calls == sorted(calls, reverse=True) and calls[0] > calls[-1]
    page.click('#ops th[data-key="calls"]')
    calls = [int(r.get_attribute("data-calls")) for r in page.locator("#ops tbody tr").all()]
    assert calls == sorted(calls)
    page.click('#ops th[data-key="op"]')
    ops = [r.get_attribute("data-op") for r in page.locator("#ops tbody tr").all()]
    assert ops == sorted(ops)
    page.fill("#filter", "layer1.0.conv1")
    rows = page.locator("#ops tbody tr")
    expected = [op for op in doc["ops"] if any("layer1.0.conv1" in m for m in op["modules"])
                or "layer1.0.conv1" in op["op"]]
    assert rows.count() == len(expected) > 0
    page.fill("#filter", "")
    missing = [op for op in doc["ops"] if op["results"]["musa@1.2.1"]["status"] == "missing"]
    page.select_option("#status-filter", "missing")
    assert page.locator("#ops tbody tr").count() == len(missing) > 0
    assert events["console"] == []


def test_names_with_markup_are_text(browser, tmp_path):
    model = torch.nn.Sequential()
    model.add_module(EVIL, torch.nn.Linear(4, 4))
    model.add_module("<b>bold</b>", torch.nn.GELU())
    trace = opaudit.trace(model, torch.randn(2, 4))
    path = tmp_path / "evil.html"
    path.write_text(render(opaudit.audit(trace, ["mps@2.2.0"], landscape=False), "html"), encoding="utf-8")
    page, events = open_page(browser, path, READY)
    assert events["dialogs"] == [] and events["console"] == []
    assert page.locator("script").count() == 2  # the report's own: its data and its code
    assert page.locator("#tree b").count() == 0
    tree = page.locator("#tree").text_content()
    assert EVIL in tree and "<b>bold</b>" in tree
    assert EVIL in page.locator("#ops tbody").text_content()


def test_the_fallback_summary_of_a_rehearsal(browser, tmp_path):
    """opaudit run --simulate --html: the audit of what the script ran, and the fallback section, which
    names the op the target lacks, its path and its cost, beside the summary of every path."""
    html, stats = tmp_path / "run.html", tmp_path / "stats.json"
    rc, _, stderr = run_cli("run", "--simulate", "musa@1.2.1", "--html", str(html), "--stats", str(stats), "--",
                            str(FIXTURES / "fallback" / "gpt2_cuda.py"))
    assert rc == 0, stderr[-2000:]
    page, events = open_page(browser, html, READY)
    assert events["console"] == [] and events["requests"] == [html.as_uri()]
    assert page.locator("h2", has_text="Fallback on musa@1.2.1").is_visible()
    summary = page.locator("#fallback-summary-1").text_content()
    assert "a CPU rehearsal (musa)" in summary and "a CPU round trip: 2 calls / 1 op" in summary
    rows = page.locator("table.fallback tbody tr")
    st = json.loads(stats.read_text())
    fell = [o for o in st["ops"] if o["path"] != "native"]
    assert rows.count() == len(fell) == 1
    cells = [c.text_content() for c in rows.first.locator("td").all()]
    assert cells[0] == "_foreach_lerp_.Scalar" and cells[1] == "a CPU round trip"
    assert cells[3] == "2" and cells[4] == f"{fell[0]['to_host'] + fell[0]['to_device']:,}"
    assert cells[7].startswith("tests/fixtures/fallback/gpt2_cuda.py:")  # the user's line
