"""Autocast regions on targets whose torch runs them otherwise than CUDA (tracing/variants.py): the code is traced
again as the target runs the region (off for a dtype it does not list, or in its own default dtype), and the audit
judges the target by that trace, which is what a rehearsal of the target runs."""

from __future__ import annotations

import csv
import json

import pytest
from helpers import FIXTURES, run_cli

import opaudit
from opaudit.matrix import amp, load_matrix

SCRIPT = FIXTURES / "scripts" / "autocast_outcomes.py"
MODEL = FIXTURES / "models" / "half_softmax_attention.py"
LINES = {text.strip(): n for n, text in enumerate(SCRIPT.read_text().splitlines(), 1)}
BF16 = f"{SCRIPT}:{LINES['logits = model(x)']}"  # within the region naming bfloat16
DEFAULT = f"{SCRIPT}:{LINES['scores = model(x).sigmoid()']}"  # within torch.cuda.amp.autocast()
TARGETS = ["mps@2.5.0", "xla@2.9.0", "mps@2.14.1", "cuda", "ascend@2.14.0"]


def _outcome(target: str, named: set[str]) -> dict[str, str]:
    r = load_matrix(target).release
    return amp.outcome(r.device_type, r.dispatch_key, r.torch, named)


def test_the_outcome_of_a_region_is_the_targets_torch_rule():
    # MPS lists bfloat16 from 2.6: before, torch turns a bfloat16 region off
    assert _outcome("mps@2.5.0", {"bfloat16", ""}) == {"bfloat16": "off"}
    assert _outcome("mps@2.14.1", {"bfloat16", ""}) == {}
    # XLA runs a region naming no dtype in bfloat16 (CUDA: float16), and lists float16 only from 2.2
    assert _outcome("xla@2.9.0", {"bfloat16", "", "float16"}) == {"": "bfloat16"}
    assert _outcome("xla@2.1.0", {"float16"}) == {"float16": "off"}
    # a plugin's device has its own list (not in the data): as CUDA; CUDA itself: as CUDA
    assert _outcome("ascend@2.14.0", {"bfloat16", ""}) == {} and _outcome("cuda", {"bfloat16", ""}) == {}
    for o in ({"bfloat16": "off"}, {"": "bfloat16", "float16": "off"}):
        assert amp.parse(amp.label(o)) == o
    assert amp.label({"": "bfloat16"}) == "autocast:default=bfloat16"


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("variants")
    args = [a for t in TARGETS for a in ("-t", t)]
    rc, out, err = run_cli("trace", "--json", "t.json", "--audit-json", "a.json", "--csv", "a.csv", *args, "--",
                           str(SCRIPT), cwd=tmp)
    assert rc == 0, err[-2000:]
    return opaudit.Trace.load(tmp / "t.json"), json.loads((tmp / "a.json").read_text()), tmp


def _dtypes_at(records, line: str, op: str) -> set[tuple[str, ...]]:
    return {r.dtypes for r in records if r.source == line and r.op == op}


def test_one_trace_again_per_outcome_the_targets_need(traced):
    trace, _, _ = traced
    assert set(trace.variants) == {"autocast:bfloat16=off", "autocast:default=bfloat16"}
    # the bfloat16 region: bfloat16 on CUDA, float32 where autocast is off for it; the other trace is CUDA's there
    assert _dtypes_at(trace.records, BF16, "aten::addmm.default") == {("bfloat16",) * 3}
    assert _dtypes_at(trace.variants["autocast:bfloat16=off"], BF16, "aten::addmm.default") == {("float32",) * 3}
    assert _dtypes_at(trace.variants["autocast:default=bfloat16"], BF16, "aten::addmm.default") == {("bfloat16",) * 3}
    assert _dtypes_at(trace.records, DEFAULT, "aten::addmm.default") == {("float16",) * 3}
    assert _dtypes_at(trace.variants["autocast:default=bfloat16"], DEFAULT, "aten::addmm.default") == {
        ("bfloat16",) * 3}
    # the regions themselves are recorded as the program wrote them, in every trace
    for records in (trace.records, *trace.variants.values()):
        assert sorted(r.dtypes for r in records if r.op == amp.OP) == [(), ("bfloat16",)]


def test_each_target_is_judged_by_the_trace_of_its_own_autocast(traced):
    trace, doc, tmp = traced
    by = {t["target"]: t for t in doc["targets"]}
    assert by["mps@2.5.0"]["traced_as"] == "autocast:bfloat16=off"
    assert by["xla@2.9.0"]["traced_as"] == "autocast:default=bfloat16"
    assert all(by[k]["traced_as"] is None for k in ("mps@2.14.1", "cuda@2.14.1", "ascend@2.14.0"))
    never = {"mps@2.5.0": "bfloat16", "xla@2.9.0": "float16"}  # a dtype the target's regions never run in
    for key, dtype in never.items():
        ran = [o["results"][key]["ran"] for o in doc["ops"]]
        called = [r for r in ran if r is not None]
        ops = [r for o, r in zip(doc["ops"], ran, strict=True) if r is not None and o["op"] != amp.OP]
        assert ops and not any(dtype in d.replace(f"b{dtype}", "") for r in ops for d in r["dtypes"]), key
        # an op only the CUDA trace calls (a cast to the region's dtype) is no row of the target's verdict
        absent = [o for o, r in zip(doc["ops"], ran, strict=True) if r is None]
        assert all("not called on" in o["results"][key]["note"] for o in absent)
        assert bool(absent) == (key == "mps@2.5.0")  # (on xla the casts are there, to bfloat16)
        assert sum(by[key]["ops"].values()) == len(called) - sum(
            o["kind"] == "choice" or (o["kind"] == "api" and o["results"][key]["status"] in ("native", "composite"))
            for o, r in zip(doc["ops"], ran, strict=True) if r is not None)
    # the CSV's rows for mps@2.5.0: a call not made there has no calls, and the calls add up to the verdict's
    with open(tmp / "a.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["target"] == "mps@2.5.0" and r["kind"] == "op"]
    assert sum(int(r["calls"]) for r in rows) == sum(by["mps@2.5.0"]["calls"].values())
    assert all(r["calls"] == "0" and not r["dtypes"] for r in rows if "not called on" in r["note"])
    # the targets that run the regions as CUDA does see CUDA's dtypes, and no per-target calls
    assert any("bfloat16" in d for o in doc["ops"] for d in o["dtypes"])
    assert not any("ran" in o["results"]["cuda@2.14.1"] for o in doc["ops"])
    advice = " ".join(by["mps@2.5.0"]["advice"])
    assert "autocast in bfloat16 is off on mps in PyTorch 2.5.0" in advice and "traced again so" in advice


@pytest.mark.parametrize("target, label", [("mps@2.5.0", "autocast:bfloat16=off"),
                                           ("xla@2.9.0", "autocast:default=bfloat16")])
def test_the_trace_again_is_what_a_rehearsal_of_the_target_runs(traced, target, label):
    """Differential: the forward and backward ops the audit judges a target by are the ones a strict rehearsal of
    the target runs (torch turns the bfloat16 region off on mps@2.5.0; xla runs a region naming no dtype in its
    default, bfloat16); the CUDA trace's are not."""
    trace, _, tmp = traced
    rc, out, err = run_cli("run", "--simulate", target, "--strict", "--audit-json", f"r-{target}.json", "--",
                           str(SCRIPT), cwd=tmp)
    assert rc == 0, err[-2000:]
    rehearsal = json.loads((tmp / f"r-{target}.json").read_text())
    ran = {(o["op"], o["phase"], tuple(d.split("|")) if d else ()) for o in rehearsal["ops"]
           if o["kind"] == "op" and o["phase"] != "optimizer" for d in o["dtypes"]}

    def ops(records):
        return {(r.op, r.phase, r.dtypes) for r in records
                if r.kind == "op" and r.phase != "optimizer" and r.where != "host"}

    assert ops(trace.variants[label]) == ran
    assert ops(trace.records) != ran


def test_the_variants_survive_a_saved_trace(traced, tmp_path):
    trace, doc, _ = traced
    again = opaudit.Trace.load(trace.save(tmp_path / "again.json"))
    assert again.variants == trace.variants
    a = opaudit.audit(again, ["mps@2.5.0"], landscape=False)
    assert a.verdict("mps@2.5.0").traced_as == "autocast:bfloat16=off"
    # a damaged variant is said as such
    data = again.to_json()
    data["variants"]["autocast:bfloat16=off"][0]["calls"] = 0
    with pytest.raises(opaudit.OpauditError, match=r"variants\['autocast:bfloat16=off'\]\[0\]\.calls"):
        opaudit.Trace.from_json(data)


def test_no_trace_again_where_every_target_runs_autocast_as_cuda(tmp_path):
    t = opaudit.trace_script(str(SCRIPT), device="cuda", targets=["cuda", "mps@2.14.1", "ascend@2.14.0"])
    assert t.variants == {}


def test_a_trace_again_that_fails_is_said_on_its_targets(tmp_path):
    """The program checks the dtype its bfloat16 region made: traced again as mps@2.5.0 runs autocast it stops, as
    it would there. The trace keeps why and where; the target is judged by the CUDA path meanwhile, and its advice
    says the program may stop there, with the rehearsal that runs it once."""
    said = []
    t = opaudit.trace_script(str(SCRIPT), ["--strict-dtype"], device="cuda", targets=["mps@2.5.0", "cuda"],
                             on_retrace=said.append)
    assert said == ["tracing again: autocast off for regions in bfloat16 (float32), as mps@2.5.0 runs it"]
    assert t.variants == {}
    stopped = t.meta.retrace_errors["autocast:bfloat16=off"]
    assert "expected bfloat16 logits, got torch.float32" in stopped
    assert any("judged by the CUDA path's dtypes" in w for w in t.meta.warnings)
    v = opaudit.audit(t, ["mps@2.5.0"], landscape=False).verdict("mps@2.5.0")
    assert v.traced_as is None and any("as the CUDA path ran them" in x for x in v.advice)
    assert any("the code stopped: " + stopped in x and "opaudit run --simulate mps@2.5.0 --strict" in x
               for x in v.advice)
    # kept in the trace file, and said by a report of it
    again = opaudit.Trace.load(t.save(tmp_path / "t.json"))
    assert again.meta.retrace_errors == t.meta.retrace_errors


def test_a_stopped_trace_is_not_taken_again_and_says_so(tmp_path):
    t = opaudit.trace_script(str(SCRIPT), device="cuda", targets=["mps@2.5.0"], max_ops=40)
    assert t.meta.status == "stopped" and t.variants == {}
    assert any(w.startswith("not traced again as the targets run autocast, the trace being stopped")
               for w in t.meta.warnings)


def test_no_retrace_runs_the_code_once(tmp_path):
    rc, out, err = run_cli("trace", "--no-retrace", "-t", "mps@2.5.0", "--json", "t.json", "--", str(SCRIPT),
                           cwd=tmp_path)
    assert rc == 0, err[-2000:]
    assert out.count("torch.bfloat16 torch.float16") == 1 and "tracing again" not in err
    assert opaudit.Trace.load(tmp_path / "t.json").variants == {}


@pytest.mark.parametrize("mode", ["real", "meta"])
def test_scan_amp_follows_the_target_autocast(mode, tmp_path):
    """``scan --amp bf16``: opaudit's own region, on the simulated device (real) and under its CUDA policy on meta."""
    rc, out, err = run_cli("scan", str(MODEL), "--train", "--amp", "bf16", "--mode", mode, "-t", "mps@2.5.0",
                           "-t", "cuda", "--json", "t.json", "--audit-json", "a.json", "-q", cwd=tmp_path)
    assert rc == 0, err[-2000:]
    t = opaudit.Trace.load(tmp_path / "t.json")
    assert list(t.variants) == ["autocast:bfloat16=off"]

    def addmm(records):
        return {r.dtypes for r in records if r.op == "aten::addmm.default" and r.phase == "forward"}

    assert addmm(t.records) == {("bfloat16",) * 3}
    assert addmm(t.variants["autocast:bfloat16=off"]) == {("float32",) * 3}
    doc = json.loads((tmp_path / "a.json").read_text())
    assert [x["traced_as"] for x in doc["targets"]] == ["autocast:bfloat16=off", None]


def test_a_target_that_does_not_exist_is_said_before_the_code_runs(capfd):
    with pytest.raises(opaudit.OpauditError, match="unknown target vendor 'bogus'"):
        opaudit.trace_script(str(SCRIPT), device="cuda", targets=["bogus"])
    assert "torch.bfloat16" not in capfd.readouterr().out  # the script never ran
