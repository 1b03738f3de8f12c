"""The trace file: versioned, documented by a JSON Schema, read back exactly; bad files refused."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

import opaudit
from opaudit.errors import InputError
from opaudit.tracing.schema import SCHEMA_VERSION, Trace

SCHEMA = json.loads((Path(opaudit.__file__).parent / "tracing" / "trace.schema.json").read_text())


def test_saved_trace_validates_and_round_trips(resnet_train, tmp_path):
    trace, _ = resnet_train
    path = trace.save(tmp_path / "t.json")
    data = json.loads(path.read_text())
    jsonschema.validate(data, SCHEMA)
    assert data["version"] == SCHEMA_VERSION
    back = opaudit.load_trace(path)
    assert back.records == trace.records
    assert back.meta == trace.meta
    assert back.modules == trace.modules and back.sources == trace.sources


def test_amp_and_shapes_traces_validate(tmp_path):
    import torch

    t = opaudit.trace(torch.nn.Linear(4, 4), torch.randn(2, 4), train=True, amp="fp16", shapes=True)
    data = t.to_json()
    jsonschema.validate(data, SCHEMA)
    assert all("shapes" in r for r in data["records"])


def test_to_pandas_is_one_row_per_record(resnet_train):
    trace, _ = resnet_train
    df = trace.to_pandas()
    assert len(df) == len(trace.records)
    assert list(df.columns) == ["op", "kind", "phase", "dtypes", "module", "module_type", "source", "code",
                                "within", "calls", "shapes", "where"]
    apart = sum(r.calls for r in trace.records if r.kind in ("choice", "api"))
    assert df["calls"].sum() == trace.meta.total_calls + apart
    conv = df[(df.op == "aten::convolution.default") & (df.module == "layer4.0.conv2")]
    assert conv.module_type.tolist() == ["Conv2d"] and conv.code.str.contains("conv2").all()


def test_other_schema_versions_and_damaged_files_are_refused(resnet_train, tmp_path):
    trace, _ = resnet_train
    data = trace.to_json()
    with pytest.raises(InputError, match="schema version 3"):
        Trace.from_json({**data, "version": 3}, origin="x.json")
    with pytest.raises(InputError, match=r"schema version 1; .* \(version 2 records where each op's tensors live"):
        Trace.from_json({**data, "version": 1}, origin="x.json")
    with pytest.raises(InputError, match="not an opaudit trace"):
        Trace.from_json({"records": []}, origin="x.json")
    broken = {**data, "records": [{"op": "aten::add.Tensor"}]}
    with pytest.raises(InputError, match="damaged"):
        Trace.from_json(broken, origin="x.json")


def test_save_is_atomic_and_keeps_the_old_file_on_failure(resnet_train, tmp_path, monkeypatch):
    trace, _ = resnet_train
    path = tmp_path / "t.json"
    path.write_text("previous")

    def boom(*a, **k):
        raise OSError(28, "No space left on device")

    import os

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(opaudit.OpauditError, match="No space left"):
        trace.save(path)
    assert path.read_text() == "previous"
    assert [p.name for p in tmp_path.iterdir()] == ["t.json"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(extra=1), r"damaged: extra: unknown key"),
        (lambda d: d["meta"].update(tarin=True), r"damaged: meta\.tarin: unknown key"),
        (lambda d: d["records"][2].update(call=1), r"damaged: records\[2\]\.call: unknown key"),
        (lambda d: d["records"][0].update(calls="3"), r"damaged: records\[0\]\.calls: Input should be a valid integer"),
        (lambda d: d["records"][0].update(calls=0), r"damaged: records\[0\]\.calls: 0 \(at least 1\)"),
        (lambda d: d["records"][1].update(phase="forwards"), r"records\[1\]\.phase: 'forwards' is not one of"),
        (lambda d: d["records"][1].pop("op"), r"damaged: records\[1\]\.op: missing"),
        (lambda d: d["meta"].update(train="yes"), r"damaged: meta\.train: Input should be a valid boolean"),
        (lambda d: d["meta"].update(mode="gpu"), r"meta\.mode: 'gpu' is not one of real, meta, fake"),
        (lambda d: d["registrations"].update({"x::y.default": {"keys": ["CPU"], "pyhton": []}}),
         r"registrations\.x::y\.default\.pyhton: unknown key"),
    ],
)
def test_a_trace_is_read_strictly_by_the_schema_s_rules(resnet_train, tmp_path, change, message):
    """Every key a trace has is known and typed: a misspelt key or a wrong type is refused with its path,
    never read as absent. The JSON Schema refuses the same documents."""
    trace, _ = resnet_train
    data = trace.to_json()
    change(data)
    path = tmp_path / "t.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InputError, match=message):
        opaudit.load_trace(path)
    assert not jsonschema.Draft202012Validator(SCHEMA).is_valid(data)


def test_the_schema_and_the_reader_know_the_same_keys():
    """trace.schema.json (the published contract) and the dataclasses the reader fills agree, key by key."""
    from dataclasses import MISSING, fields

    from opaudit.matrix.registrations import Registration
    from opaudit.tracing.schema import OpRecord, TraceMeta, _Document

    def keys(cls):
        return {f.name for f in fields(cls)}, {f.name for f in fields(cls)
                                               if f.default is MISSING and f.default_factory is MISSING}

    props = SCHEMA["properties"]
    for cls, sub in ((_Document, SCHEMA), (TraceMeta, props["meta"]), (OpRecord, props["records"]["items"]),
                     (Registration, props["registrations"]["additionalProperties"])):
        names, required = keys(cls)
        assert set(sub["properties"]) == names, cls.__name__
        assert sub["additionalProperties"] is False, cls.__name__
        assert required <= set(sub["required"]) <= names, cls.__name__
