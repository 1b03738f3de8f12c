"""The zoo page (zoo.html) in a real headless Chromium at 1400 x 1000: the heat map's cells on screen (boxes inside
the viewport, the cell itself under its centre) even beside a 500-character spec, models labelled by type with the
spec in the tooltip, op demand opening on the target that lacks the most ops, tables as wide as the page, filters,
and markup in a spec shown as text."""

from __future__ import annotations

import json

import pytest
from helpers import CHROMIUM, NO_CHROMIUM, open_page

from opaudit.zoo.report import html_text, labels
from opaudit.zoo.run import ZooResult

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason=NO_CHROMIUM)
EVIL = "<script>alert(1)</script>"
WIDTH, HEIGHT = 1400, 1000


def open_zoo(browser, path):
    return open_page(browser, path, "#heat tbody tr", WIDTH, HEIGHT)


def _doc(tiny_zoo):
    out, _, _ = tiny_zoo
    return json.loads((out / "zoo.json").read_text())


def on_screen(page, locator) -> bool:
    """The element's box lies inside the viewport and the element is what is drawn at its centre (not hidden by
    an ancestor's scrolling or by another element)."""
    box = locator.bounding_box()
    if box is None or box["width"] < 4 or box["height"] < 4:
        return False
    if box["x"] < 0 or box["y"] < 0 or box["x"] + box["width"] > WIDTH or box["y"] + box["height"] > HEIGHT:
        return False
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    return locator.evaluate("(e, [x, y]) => document.elementFromPoint(x, y) === e", [x, y])


def test_the_heat_map_filters_and_op_demand(browser, tiny_zoo):
    out, _, _ = tiny_zoo
    doc = _doc(tiny_zoo)
    path = out / "zoo.html"
    page, events = open_zoo(browser, path)
    assert events["console"] == [] and events["requests"] == [path.as_uri()]
    models, targets = doc["models"], doc["targets"]
    cells = page.locator("#heat td.cell")
    assert cells.count() == len(models) * len(targets)
    want = {(m["spec"], t["target"]): t["verdict"] for m in models for t in m["targets"]}
    for row in page.locator("#heat tbody tr").all():
        spec = row.get_attribute("data-model")
        for c in row.locator("td.cell").all():
            assert c.get_attribute("data-verdict") == want.get((spec, c.get_attribute("data-target")), "error")
    # op demand opens on the target that lacks the most ops, not on the first (ascend lacks none of these)
    most = max(targets, key=lambda t: len(doc["op_demand"][t]))
    assert page.locator("#demand-target").input_value() == most == "musa@1.2.1" != targets[0]
    assert doc["op_demand"][targets[0]] == []
    shown = [(r.get_attribute("data-op"), int(r.get_attribute("data-count")))
             for r in page.locator("#demand tbody tr").all()]
    assert shown == [(d["op"], d["models"]) for d in doc["op_demand"]["musa@1.2.1"]] and shown[0][1] == 2
    # filters: a vendor keeps its releases' columns, a family its models' rows
    page.select_option("#vendor", "mps")
    assert [th.get_attribute("data-key") for th in page.locator("#heat th.target").all()] == \
        [t for t in targets if t.startswith("mps@")]
    page.select_option("#vendor", "")
    page.select_option("#family", "bert")
    assert [r.get_attribute("data-model") for r in page.locator("#heat tbody tr").all()] == \
        [m["spec"] for m in models if m["family"] == "bert"]
    page.select_option("#family", "gpt2")
    page.select_option("#demand-target", "musa@1.2.1")  # the vendor filter moved it to an MPS release
    assert {int(r.get_attribute("data-count")) for r in page.locator("#demand tbody tr").all()} == {1}
    failed = [r.get_attribute("data-model") for r in page.locator("#failed tbody tr").all()]
    assert failed == [m["spec"] for m in models if m["status"] != "ok"] == ["hf:lama"]


def test_cells_on_screen_beside_a_long_spec_and_tables_as_wide_as_the_page(browser, tiny_zoo, tmp_path):
    """A 500-character spec (overrides of a real configuration) once pushed every cell off a 1400 px screen."""
    doc = _doc(tiny_zoo)
    gpt2, bert, bad = doc["models"]
    tail = "&".join(f"task_specific_params.summarization.field_{i}={i}" for i in range(11))
    long_spec = gpt2["spec"] + "&" + tail
    long_error = "the model failed in the forward pass: " + "x" * 3000  # one unbreakable word
    assert len(long_spec) > 500
    records = [{**gpt2, "spec": long_spec}, bert, {**bad, "spec": "hf:lama?" + tail, "error": long_error}]
    path = tmp_path / "zoo.html"
    path.write_text(html_text(ZooResult(records, doc["targets"], True)), encoding="utf-8")
    page, events = open_zoo(browser, path)
    assert events["console"] == []
    # labelled by type, the spec in full in the tooltip
    label = page.locator("#heat td.model").first
    assert label.text_content() == "gpt2" and long_spec in label.get_attribute("title")
    assert on_screen(page, label)
    cells = page.locator("#heat td.cell")
    assert cells.count() == 3 * len(doc["targets"])
    hidden = [c.get_attribute("data-target") for c in cells.all() if not on_screen(page, c)]
    assert hidden == [], f"heat map cells off a {WIDTH} px screen: {hidden}"
    # no table wider than the page: the document does not scroll sideways, each table ends inside the viewport
    assert page.evaluate("document.documentElement.scrollWidth") <= WIDTH
    for table in ("#demand", "#failed", "#heat"):
        box = page.locator(table).bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= WIDTH, (table, box)
    assert page.locator("#failed tbody tr td").first.text_content() == "hf:lama?" + tail


def test_labels_name_the_type_then_the_head_then_a_number():
    def record(spec, family, head):
        return {"spec": spec, "family": family, "head": head}

    records = [record("hf:bert", "bert", "MaskedLM"), record("hf:bert:SequenceClassification", "bert",
                                                               "SequenceClassification"),
               record("hf:llama?num_hidden_layers=1", "llama", "CausalLM"),
               record("hf:llama?num_hidden_layers=2", "llama", "CausalLM"),
               record("hf:lama?x=1", "", ""), record("diffusers:UNet2DModel", "UNet2DModel", "")]
    assert labels(records) == ["bert:MaskedLM", "bert:SequenceClassification", "llama #1", "llama #2", "lama",
                               "UNet2DModel"]


def test_markup_in_a_spec_is_text(browser, tiny_zoo, tmp_path):
    doc = _doc(tiny_zoo)
    records = [*doc["models"], {**doc["models"][-1], "spec": EVIL, "error": EVIL, "family": EVIL}]
    path = tmp_path / "zoo.html"
    path.write_text(html_text(ZooResult(records, doc["targets"], True)), encoding="utf-8")
    page, events = open_zoo(browser, path)
    assert events["dialogs"] == [] and events["console"] == []
    assert page.locator("#failed tbody tr").last.locator("td").first.text_content() == EVIL
    assert page.locator("#heat td.model").last.text_content() == EVIL


def test_the_configuration_fixes_a_result_stands_on(browser, tiny_zoo, tmp_path):
    doc = _doc(tiny_zoo)
    fixes = {"vocab_size": 33, "pad_token_id": 1}
    records = [{**doc["models"][0], "config_fixes": fixes}, *doc["models"][1:-1],
               {**doc["models"][-1], "config_fixes": fixes}]
    path = tmp_path / "zoo.html"
    path.write_text(html_text(ZooResult(records, doc["targets"], True)), encoding="utf-8")
    page, events = open_zoo(browser, path)
    assert events["console"] == []
    assert "2 models marked" in page.locator("#fixed-note").text_content()
    first = page.locator("#heat td.model").first
    assert first.text_content() == "gpt2 \u2020" and "vocab_size=33; pad_token_id=1" in first.get_attribute("title")
    assert page.locator("#heat td.model").nth(1).get_attribute("data-fixes") == ""
    assert page.locator("#failed tbody tr").last.locator("td").nth(2).text_content() == "vocab_size=33; pad_token_id=1"
