"""The audit: a real trace joined with real releases of coverage_db and with a user matrix."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import opaudit
from opaudit.auditing import FAIL_ON, default_targets, op_groups, retrace_advice
from opaudit.errors import InputError
from opaudit.matrix import load_database, load_matrix
from opaudit.testing import NotSupported, assert_runs_on, assert_trace_runs_on

# a chip with a short op list: matmul and a few elementwise ops, no CPU fallback
TINY = """
[release]
vendor = "tiny"
name = "0.1"
torch = "2.13.0"
device_type = "tiny"
dispatch_key = "PrivateUse1"

[cpu_fallback]
exists = true
default_on = false
switch = "TINY_CPU_FALLBACK=1 enables it"

[ops]
native = '''
mm
addmm
add.out
mul.out
empty.memory_format
empty_strided
as_strided
_copy_from
copy_
'''
"""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("matrix") / "tiny.toml"
    path.write_text(TINY)
    return str(path)


@pytest.fixture(scope="module")
def gpt2_audit(gpt2_train, tiny):
    return opaudit.audit(gpt2_train, ["ascend@2.1.0", "xla@2.9.0", "mps@2.13.0", tiny])


def test_one_row_per_op_phase_and_target(gpt2_train, gpt2_audit):
    a = gpt2_audit
    groups = op_groups(gpt2_train)
    assert len(a.frame) == len(groups) * len(a.matrices)
    assert len(a.matrices) == len(load_database().entries) + 1  # the landscape, plus the user matrix
    sel = a.frame[a.frame["selected"]]
    assert sorted(sel["target"].unique()) == sorted(a.selected)
    # calls in the frame add up to the trace's calls (choice and api rows are counted apart)
    per_target = sel[(sel["target"] == "ascend@2.1.0") & ~sel["kind"].isin(["choice", "api"])]["calls"].sum()
    assert per_target == gpt2_train.calls()


def test_the_verdicts_follow_from_the_statuses(gpt2_audit, tiny):
    a = gpt2_audit
    for key in a.selected:
        v = a.verdicts[key]
        rows = a.frame[(a.frame["target"] == key) & (a.frame["kind"] != "choice")]
        rows = rows[(rows["kind"] != "api") | ~rows["status"].isin(["native", "composite"])]
        assert v.ops.get("missing", 0) == (rows["status"] == "missing").sum()
        assert v.calls.get("cpu_fallback", 0) == rows.loc[rows["status"] == "cpu_fallback", "calls"].sum()
        expected = ("version_skew" if v.ops.get("version_skew")
                    else "fails" if v.ops.get("missing") else "uncertain" if v.ops.get("unknown")
                    else "cpu_fallback" if v.ops.get("cpu_fallback") else "runs")
        assert v.verdict == expected
    assert a.verdict("mps@2.13.0").verdict == "runs"
    tiny_v = a.verdict("tiny@0.1")
    assert tiny_v.verdict == "fails" and tiny_v.ops["missing"] > 10
    # the user's chip has a CPU fallback that is off: the advice says how to turn it on
    assert any("TINY_CPU_FALLBACK=1 enables it" in x for x in tiny_v.advice)


def test_ops_within_a_choice_take_the_targets_pick(gpt2_audit):
    a = gpt2_audit
    f = a.frame
    within = f[(f["target"] == "mps@2.13.0") & f["within"].notna()]
    assert len(within) and set(within["status"]) <= {"native", "composite"}
    sdpa = within[within["within"] == "aten::scaled_dot_product_attention.default"]
    assert sdpa["note"].str.startswith("backward of aten::scaled_dot_product_attention.default").all()


def test_missing_ops_name_their_modules_and_lines(gpt2_audit):
    f = gpt2_audit.frame
    missing = f[(f["target"] == "tiny@0.1") & (f["status"] == "missing") & (f["kind"] != "choice")]
    tanh = missing[(missing["op"] == "aten::tanh.default") & (missing["phase"] == "forward")].iloc[0]
    assert "transformer.h.0.mlp.act" in tanh["modules"]  # GPT-2's gelu_new
    assert any("activations.py" in s for s in tanh["sources"])


def test_advice_names_the_later_release_that_adds_an_op(gpt2_audit):
    v = gpt2_audit.verdict("ascend@2.1.0")
    assert v.verdict == "cpu_fallback" and "_foreach_lerp_.Scalar (optimizer)" in v.fallback
    later = [x for x in v.advice if "_foreach_lerp_.Scalar" in x]
    assert later and later[0].startswith("ascend@2.1.0.post8")
    assert load_matrix(later[0].split()[0]).resolve("aten::_foreach_lerp_.Scalar").status == "native"


def test_landscape_and_oldest_release_that_runs(gpt2_audit):
    a = gpt2_audit
    oldest = a.oldest_running()
    land = a.landscape()
    for vendor, o in oldest.items():
        rels = [v for v in land[vendor] if not v.prerelease] or land[vendor]
        if o["runs"] is not None:
            first = next(v for v in rels if v.runs)
            assert first.target == o["runs"]
            assert all(not v.runs for v in rels[:rels.index(first)])
    # MPS before 2.4 has no _foreach_ kernels, but torch steps AdamW one tensor at a time there
    assert oldest["mps"]["native"] == "mps@2.1.0"


def test_fail_on_levels(gpt2_audit):
    a = gpt2_audit
    assert a.fails_on("missing") == ["tiny@0.1"]
    assert set(a.fails_on("cpu_fallback")) == {"ascend@2.1.0", "xla@2.9.0", "tiny@0.1"}
    assert set(a.fails_on("composite")) == set(a.selected)
    with pytest.raises(InputError):
        a.fails_on("slow")
    assert FAIL_ON == ("missing", "version_skew", "unknown", "cpu_fallback", "composite")


def test_gates_never_pass_on_ops_the_data_knows_nothing_about(tmp_path):
    """A list that is only an upper bound says nothing of the ops it lacks: they are unknown. --fail-on
    missing lets them through, the levels from unknown on do not, and assert_runs_on (default
    fail_on="unknown") fails on them."""
    torch.manual_seed(0)
    trace = opaudit.trace(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.GELU()), torch.randn(2, 4), mode="real")
    target = tmp_path / "bound.toml"
    target.write_text(TINY.replace('vendor = "tiny"', 'vendor = "bound"\nexact = false\naccuracy = "a candidate list"'))
    a = opaudit.audit(trace, [str(target)], landscape=False)
    assert "unknown" in {s.status for s in a.results[a.selected[0]]} and a.worst() == "unknown"
    assert a.verdicts[a.selected[0]].verdict == "uncertain"
    assert a.fails_on("missing") == a.fails_on("version_skew") == []
    assert a.fails_on("unknown") == a.fails_on("cpu_fallback") == a.fails_on("composite") == a.selected
    with pytest.raises(NotSupported) as e:
        assert_trace_runs_on(trace, str(target))
    assert "unknown" in str(e.value) and "gelu [forward]" in str(e.value)
    assert_trace_runs_on(trace, str(target), fail_on="missing")  # the old bar passes on ignorance


def test_a_device_wide_dtype_limit_makes_the_op_missing():
    """MPS has no float64: a float64 model fails there (it runs on CUDA), a float32 one runs."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
    t32 = opaudit.trace(model, torch.randn(2, 8), train=True, mode="real")
    t64 = opaudit.trace(model.double(), torch.randn(2, 8, dtype=torch.float64), train=True, mode="real")
    a32 = opaudit.audit(t32, ["mps@2.13.0", "cuda@2.13.0"], landscape=False)
    a64 = opaudit.audit(t64, ["mps@2.13.0", "cuda@2.13.0"], landscape=False)
    assert a32.verdict("mps@2.13.0").verdict == "runs"
    v = a64.verdict("mps@2.13.0")
    assert v.verdict == "fails" and any(m.startswith("addmm (forward") for m in v.missing)
    notes = {s.note for g, s in zip(a64.groups, a64.results["mps@2.13.0"], strict=True)
             if g.op == "aten::addmm.default"}
    assert any(n.startswith("float64 on mps: the MPS framework has no 64-bit floating types") for n in notes)
    assert a64.verdict("cuda@2.13.0").verdict == "runs"
    assert a64.fails_on("missing") == ["mps@2.13.0"]


def test_default_targets_are_each_vendors_newest_published_release():
    db = load_database()
    targets = default_targets(db)
    assert "cpu@2.14.1" not in targets and "cuda@2.14.1" in targets
    assert "ascend@2.14.0" in targets and not any("master" in t for t in targets)
    assert len(targets) == len(db.vendors) - 1


def test_assert_runs_on_passes_and_fails_readably(tiny):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8))
    x = torch.randn(2, 8)
    result = assert_runs_on(model, x, "cuda@2.13.0", train=True)
    assert result.verdict("cuda@2.13.0").verdict == "runs"
    with pytest.raises(NotSupported) as e:
        assert_runs_on(model, x, tiny, train=True)
    message = str(e.value)
    assert message.startswith("tiny@0.1 (PyTorch 2.13.0): fails:")
    assert "native_layer_norm_backward [backward]" in message and "at 1" in message  # the Sequential's "1"
    assert "TINY_CPU_FALLBACK=1 enables it" in message
    # cpu_fallback as the bar: ascend 2.1.0 runs AdamW's lerp on its CPU fallback
    with pytest.raises(NotSupported):
        assert_trace_runs_on(e.value.audit.trace, "ascend@2.1.0", fail_on="cpu_fallback")


def test_foreach_advice_where_torch_optim_would_not_pick_foreach():
    """A program that passes foreach=True asks MPS for _foreach_ ops it lacks before 2.4: the advice says the
    default would not need them (left to torch, the step is judged by its single-tensor loop on mps)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8))
    trace = opaudit.trace(model, torch.randn(2, 8), train=True,
                          optimizer=lambda p: torch.optim.AdamW(p, foreach=True))
    a = opaudit.audit(trace, ["mps@2.2.0", "ascend@2.1.0"], landscape=False)
    mps = a.verdict("mps@2.2.0")
    assert mps.verdict == "fails" and any(x.startswith("torch.optim picks its foreach path") for x in mps.advice)
    assert not any("foreach path" in x for x in a.verdict("ascend@2.1.0").advice)  # PrivateUse1: it does
    default = opaudit.trace(model, torch.randn(2, 8), train=True)
    assert opaudit.audit(default, ["mps@2.2.0"], landscape=False).verdict("mps@2.2.0").verdict == "runs"


def test_host_ops_are_held_to_no_target_and_every_format_says_so(tmp_path):
    """AdamW keeps its step counters on the host beside device parameters (a meta trace tells them apart,
    as the simulated CUDA device does): they are no target's ops, and every report lists them apart."""
    import csv
    import io
    import json

    import jsonschema

    from opaudit.report import render

    torch.manual_seed(0)
    trace = opaudit.trace(torch.nn.Sequential(torch.nn.Linear(8, 8)), torch.randn(2, 8), train=True, mode="meta")
    host = {r.op for r in trace.host_records}
    assert "aten::_foreach_add_.Scalar" in host or "aten::_foreach_add_.Tensor" in host, host
    a = opaudit.audit(trace, ["musa@1.3.0", "cuda@2.13.0"], landscape=False)
    assert a.host and {g.op for g in a.host} == host
    assert not {g.op for g in a.groups} & (host - {r.op for r in trace.device_records})
    doc = json.loads(render(a, "json"))
    schema = json.loads((Path(opaudit.__file__).parent / "report" / "audit.schema.json").read_text())
    jsonschema.validate(doc, schema)
    assert {o["op"] for o in doc["host_ops"]} == host
    rows = list(csv.DictReader(io.StringIO(render(a, "csv"))))
    assert {r["op"] for r in rows if r["where"] == "host"} == host
    assert all(r["target"] == "" and r["status"] == "" for r in rows if r["where"] == "host")
    n = len({(g.op, g.phase) for g in a.host})  # an op in and out of a device branch (the foreach step): once
    sentence = f"{n} op{'s' if n != 1 else ''} ran on host tensors only"
    assert sentence in render(a, "markdown")
    html = render(a, "html")
    assert 'id="host-ops"' in html and sentence in html


def test_ops_the_data_knows_nothing_about_outweigh_the_cpu_fallback(tmp_path):
    """A release on a PyTorch without a staged op table knows nothing of the composites: with ops on its CPU
    fallback too, it is uncertain, never "runs" (so never the oldest release that runs the model)."""
    matrix = tmp_path / "old.toml"
    matrix.write_text(TINY.replace('torch = "2.13.0"', 'torch = "1.9.0"') + 'cpu = "tanh"\n')
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh())
    v = opaudit.audit(opaudit.trace(model, torch.randn(2, 4)), [str(matrix)], landscape=False).verdicts["tiny@0.1"]
    assert v.ops.get("unknown") and v.ops.get("cpu_fallback") and not v.ops.get("missing")
    assert v.verdict == "uncertain" and not v.runs
    assert "not in the data" in v.summary and "on the CPU fallback" in v.summary


def test_a_version_skew_verdict_names_the_re_trace_that_runs_under_that_pytorch():
    """rms_norm (PyTorch 2.4) against a release on PyTorch 2.1: the advice is the venv, the pins that torch needs,
    and the command that made the trace; a release older than any torch opaudit runs on says it cannot re-trace."""
    norm = torch.nn.RMSNorm(8)
    with opaudit.record() as rec:
        norm(torch.randn(2, 8))
    rec.trace.meta.source = {"kind": "model", "path": "model.py", "factory": "get_model"}
    a = opaudit.audit(rec.trace, ["ascend@2.1.0.post6"], landscape=False)
    v = a.verdict("ascend@2.1.0.post6")
    assert v.verdict == "version_skew"
    retrace = next(x for x in v.advice if x.startswith("re-trace"))
    assert "pip install torch==2.1.0 'numpy<2' 'pandas<3'" in retrace
    assert retrace.endswith("opaudit scan model.py -t ascend@2.1.0.post6")
    old = load_matrix("ascend@1.11.0.post14").release
    assert "cannot re-trace" in retrace_advice(rec.trace, old)
    # a transformers model by name: the venv gets the transformers release that takes that torch (its torch extra)
    rec.trace.meta.source = {"kind": "spec", "spec": "hf:bert?num_hidden_layers=1"}
    retrace = retrace_advice(rec.trace, load_matrix("ascend@2.1.0.post6").release)
    assert "pip install torch==2.1.0 'numpy<2' 'pandas<3' 'transformers[torch]' " in retrace
    assert retrace.endswith("opaudit scan 'hf:bert?num_hidden_layers=1' -t ascend@2.1.0.post6")
