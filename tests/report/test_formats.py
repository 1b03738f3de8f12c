"""JSON, CSV and Markdown of one audit state the same numbers as its frame."""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path

import jsonschema
import pytest

import opaudit
from opaudit.report import render, write_reports
from opaudit.report.html import payload

SCHEMA = json.loads((Path(opaudit.__file__).parent / "report" / "audit.schema.json").read_text())


@pytest.fixture(scope="module")
def resnet_audit(resnet_train):
    trace, _ = resnet_train
    return opaudit.audit(trace, ["ascend@2.1.0", "mps@2.2.0", "xla@2.9.0"])


def test_json_follows_its_schema_and_the_frame(resnet_audit):
    a = resnet_audit
    doc = json.loads(render(a, "json"))
    jsonschema.validate(doc, SCHEMA)
    assert [t["target"] for t in doc["targets"]] == a.selected
    assert len(doc["landscape"]) == len(a.verdicts)
    f = a.frame
    for t in doc["targets"]:
        rows = f[(f["target"] == t["target"]) & (f["kind"] != "choice")]
        # an API whose PyTorch has it is not an op anyone must provide: its decomposition's ops count
        rows = rows[(rows["kind"] != "api") | ~rows["status"].isin(["native", "composite"])]
        assert t["ops"] == {s: int(n) for s, n in rows["status"].value_counts().items() if n}
    for i, op in enumerate(doc["ops"]):
        for key, r in op["results"].items():
            assert r["status"] == a.results[key][i].status
    # the module and line each op names are resolvable in the document itself
    assert all(m in doc["modules"] for op in doc["ops"] for m in op["modules"])
    assert all(s in doc["sources"] for op in doc["ops"] for s in op["sources"])


def test_csv_is_the_frame_of_the_selected_targets(resnet_audit):
    a = resnet_audit
    rows = list(csv.DictReader(io.StringIO(render(a, "csv"))))
    f = a.frame[a.frame["selected"]]
    assert len(rows) == len(f)
    assert sum(int(r["calls"]) for r in rows) == f["calls"].sum()
    by_status = {}
    for r in rows:
        by_status[(r["target"], r["status"])] = by_status.get((r["target"], r["status"]), 0) + 1
    for (target, status), n in f.groupby(["target", "status"], observed=True).size().items():
        assert by_status[(target, status)] == n
    conv = next(r for r in rows if r["op"] == "aten::convolution_backward.default" and r["target"] == "mps@2.2.0")
    assert "layer1.0.conv1" in conv["modules"].split("; ")
    # row by row, cell by cell: the frame's rows in its order, lists joined, nothing for none
    device = [r for r in rows if r["where"] == "device"]
    assert len(device) == len(f)
    for r, (_, want) in zip(device, f.iterrows(), strict=True):
        for col, cell in r.items():
            if col == "where":
                continue
            value = want[col]  # (pandas holds a none of a text column as NaN: "nan" in the CSV once)
            none = value is None or (isinstance(value, float) and value != value)
            expected = "; ".join(value) if isinstance(value, tuple) else "" if none else str(value)
            assert cell == expected, (col, r["target"], r["op"])


def test_markdown_for_a_pull_request(resnet_audit):
    a = resnet_audit
    md = render(a, "markdown")
    assert md.startswith("### opaudit: will `a model traced through the Python API` run?")
    for v in a.selected_verdicts:
        assert f"| `{v.target}` | {v.torch} |" in md
        assert v.summary.replace("_", "\\_") in md
    assert "Oldest release that runs it" in md


def test_html_payload_matches_the_audit(resnet_audit):
    a = resnet_audit
    p = payload(a)
    strings = p["strings"]
    assert len(p["groups"]) == len(a.groups)
    for key in a.selected:
        assert [p["statuses"][r[0]] for r in p["results"][key]] == [s.status for s in a.results[key]]
        assert [strings[r[1]] or None for r in p["results"][key]] == [s.via for s in a.results[key]]


def test_reports_are_written_atomically_or_not_at_all(resnet_audit, tmp_path):
    a = resnet_audit
    keep = tmp_path / "report.md"
    keep.write_text("the previous report\n")
    blocked = tmp_path / "dir.html"
    blocked.mkdir()
    with pytest.raises(opaudit.OpauditError) as e:
        write_reports(a, {"markdown": str(keep), "html": str(blocked)})
    assert e.value.exit_code == 2 and "is a directory" in e.value.message  # refused up front: bad input
    assert keep.read_text() == "the previous report\n"  # checked before anything was written
    written = write_reports(a, {"markdown": str(keep), "csv": str(tmp_path / "new" / "audit.csv")})
    assert keep.read_text().startswith("### opaudit") and len(written) == 2
    assert not [p for p in tmp_path.rglob(".*.tmp")]
    # a new file gets the permissions of any file the user creates (not the temporary file's 0600);
    # a replaced file keeps its own
    umask = os.umask(0o022)
    os.umask(umask)
    assert (tmp_path / "new" / "audit.csv").stat().st_mode & 0o777 == 0o666 & ~umask
    keep.chmod(0o640)
    write_reports(a, {"markdown": str(keep)})
    assert keep.stat().st_mode & 0o777 == 0o640
