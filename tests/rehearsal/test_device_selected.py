"""Every device-selected composite of device_selected.toml, run on the rehearsal's device for targets of three
kinds (PrivateUse1 on a recent PyTorch, PrivateUse1 on PyTorch 2.2, MPS): the ops the rehearsal ran are those
of the path the table gives the target, and ops of the stand-in's own path that the target never runs are
either run as the target's composite or stop the run with an error that names the real device's path. One
process per target (a process simulates one device type)."""

from __future__ import annotations

import json
from functools import cache

import pytest
import torch
from helpers import FIXTURES, run_cli

from opaudit.matrix import load_matrix
from opaudit.matrix.matrix import ChoicePath, ChoiceRule, choice_rules

TARGETS = ["ascend", "musa@1.3.0", "mps"]
# what the stand-in cannot show and does not stop on: the path it runs instead is generic (its ops run on
# every device); kept here so that the test says when the gap closes
KNOWN_GAPS = {
    ("mps", "scaled_dot_product_attention"): "real MPS calls _scaled_dot_product_attention_math_for_mps; the "
                                             "stand-in takes the generic math path",
}


@cache
def _run(target: str) -> dict:
    rc, stdout, stderr = run_cli("run", "--simulate", target, "--", str(FIXTURES / "fallback" / "choices.py"))
    assert rc == 0, stderr[-3000:]
    line = next(x for x in stdout.splitlines() if x.startswith("CHOICES "))
    return json.loads(line.removeprefix("CHOICES "))


def _rules() -> list[ChoiceRule]:
    seen: dict[str, ChoiceRule] = {}
    for rule in choice_rules().values():
        seen.setdefault(rule.op, rule)
    return list(seen.values())


def _expected(rule: ChoiceRule, target: str) -> ChoicePath:
    """The path the table gives the target, the plugin's own kernel for the composite aside (the stand-in runs
    PyTorch's composite): the first that applies and is forced, or whose ops the target all has natively."""
    m = load_matrix(target)
    r = m.release
    for p in rule.paths:
        if "{op}" in p.ops or not p.applies(r.dispatch_key, r.torch):
            continue
        if p.forced or all(m.resolve(o).status == "native" for o in p.ops):
            return p
    raise AssertionError(f"no path for {rule.op} on {target}")


def test_every_entry_of_the_table_is_exercised_and_cited():
    ran = _run("ascend")
    for rule in _rules():
        assert rule.op.removeprefix("aten::") in ran, f"{rule.op}: add it to tests/fixtures/fallback/choices.py"
        for p in rule.paths:
            assert p.condition and p.source, (rule.op, p.name)
            assert "{op}" in p.ops or "aten/src/ATen/native/" in p.source, (rule.op, p.name)
            assert p.applies(p.when[0] if p.when[0] != "*" else "CPU", "2.14.0") or p.versions, (rule.op, p.name)


@pytest.mark.parametrize("target", TARGETS)
def test_the_rehearsal_takes_the_path_the_table_gives_the_target(target):
    ran = _run(target)
    m = load_matrix(target)
    r = m.release
    vendor = target.split("@")[0]
    for rule in _rules():
        choice = rule.op.removeprefix("aten::")
        entry = ran[choice]
        path = _expected(rule, target)
        applicable = {o for p in rule.paths if p.applies(r.dispatch_key, r.torch) for o in p.ops}
        of_rule = {o for p in rule.paths for o in p.ops}
        # no op of another device kind's path (or another PyTorch line's) ran as such
        for op, (how, status, reason) in entry["ops"].items():
            if op in of_rule and op not in applicable:
                assert (how, status) == ("decomposition", "composite"), (target, choice, op, how, status)
                assert f"takes '{path.name}'" in reason, (target, choice, op, reason)
        gap = KNOWN_GAPS.get((vendor, choice))
        if entry["error"]:
            # only a path the stand-in cannot take stops it, and the error says which and that it is the stand-in's
            assert not path.generic, (target, choice, entry["error"])
            assert f"takes '{path.name}'" in entry["error"] and "limit of the CPU rehearsal" in entry["error"]
            assert "stand-in" in entry["error"]
        elif path.generic or gap:
            if gap:  # the gap is still there: the real path's ops did not run
                assert not set(path.ops) & set(entry["ops"]), f"{gap}: closed now? drop it from KNOWN_GAPS"
        else:
            reached = {o for o in path.ops if o in entry["ops"]}
            assert reached == set(path.ops), (target, choice, path.name, sorted(set(path.ops) - reached))


def test_the_versions_of_a_path_decide_for_older_pytorch_lines():
    """musa@1.3.0 builds PyTorch 2.2, whose LSTM and GRU cells have no PrivateUse1 branch: the audit resolves
    the RNNs to the generic cells, and the rehearsal runs the fused cells the installed PyTorch reaches as those
    cells' ops, counted as composites, not as opaudit's fallback."""
    old = load_matrix("musa@1.3.0")
    assert old.release.torch == "2.2.0"
    assert old.resolve("lstm.input").via == "LSTM cells" and old.resolve("lstm.input").status == "composite"
    ran = _run("musa@1.3.0")["lstm"]["ops"]
    assert ran["_thnn_fused_lstm_cell"][:2] == ["decomposition", "composite"]
    assert {"sigmoid", "tanh", "mul.Tensor"} <= set(ran)
    mps_dropout = _run("mps")["dropout"]["ops"]  # MPS takes the bernoulli mask, with the same draws
    assert mps_dropout["native_dropout"][:2] == ["decomposition", "composite"]
    assert {"bernoulli_.float", "div_.Scalar", "mul.Tensor"} <= set(mps_dropout)
    new = load_matrix("musa@2.1.0")  # PyTorch 2.5: the fused branch, and musa 2.1.0 lacks the GRU cell
    assert new.resolve("gru.input").status == "missing" and new.resolve("gru.input").via == "_thnn_fused_gru_cell"
    assert new.resolve("lstm.input").via == "fused LSTM cells"
    assert load_matrix("mps").resolve("lstm.input").via == "MPS LSTM"


class _Packed(torch.nn.Module):
    """A recurrent model of each kind, on a padded batch and on a packed one."""

    def __init__(self, cls, **kw):
        super().__init__()
        self.rnn = cls(4, 6, **kw)

    def forward(self, x):
        out, _ = self.rnn(x)
        packed = torch.nn.utils.rnn.pack_padded_sequence(x, [3, 2], enforce_sorted=True)
        return out.sum() + self.rnn(packed)[0].data.sum()


@pytest.mark.parametrize("cls,kw,name", [(torch.nn.LSTM, {}, "lstm"), (torch.nn.GRU, {}, "gru"),
                                          (torch.nn.RNN, {"nonlinearity": "tanh"}, "rnn_tanh"),
                                          (torch.nn.RNN, {"nonlinearity": "relu"}, "rnn_relu")])
def test_rnn_choices_are_recorded_with_their_overload(cls, kw, name):
    """A padded batch calls the .input overload, a packed one .data (whose hx is argument 2 for GRU and RNN,
    argument 1 being the batch sizes): the audit resolves the overload the model called."""
    import opaudit

    trace = opaudit.trace(_Packed(cls, **kw), torch.randn(3, 2, 4))
    choices = {r.op for r in trace.records if r.kind == "choice"}
    assert choices == {f"aten::{name}.input", f"aten::{name}.data"}, choices


@pytest.mark.parametrize("target", ["ascend", "musa@2.1.0"])
def test_a_target_that_registers_the_composite_itself_is_not_held_to_the_stand_ins_path(target, tmp_path):
    """ascend registers gru.input itself: the real device runs its own GRU and never reaches the cells, so the
    cell's backward that ascend lacks is no reason to stop under --strict; the rehearsal runs it as a step of
    ascend's own kernel (on the CPU data, no part of it a device op), and the step matches the CPU. nn.GRUCell
    reaches the same cell outside any such kernel and still stops (test_simulate.py). musa 2.1.0 registers no
    GRU of its own and lacks the fused cell: --strict stops on it."""
    import re

    stats = tmp_path / "stats.json"
    rc, stdout, stderr = run_cli("run", "--simulate", target, "--strict", "--stats", str(stats), "--",
                                 str(FIXTURES / "fallback" / "rnn_step.py"), "GRU")
    if target.startswith("musa"):
        assert rc == 3 and "aten::_thnn_fused_gru_cell" in stderr, stderr[-2000:]
        return
    assert rc == 0, stderr[-2000:]
    assert float(re.search(r"worst relative difference (\S+)", stdout).group(1)) < 1e-5, stdout
    ops = {o["op"]: o for o in json.loads(stats.read_text())["ops"]}
    cell = ops["_thnn_fused_gru_cell_backward"]
    assert (cell["path"], cell["status"], cell["calls"]) == ("native", "native", 10), cell
    assert "registers aten::gru.input itself" in cell["reason"]
    assert ops["_thnn_fused_gru_cell"]["path"] == "native"  # what ascend has runs as it is
    assert load_matrix(target).resolve("_thnn_fused_gru_cell_backward").status == "missing"


def test_tracing_the_rehearsal_leaves_its_answer_as_it_is(tmp_path):
    """--audit-json traces the rehearsal too: the recorder's watch of the device-selected composites and the
    rehearsal's (which marks the ops inside ascend's own GRU) both run, so the cell's backward is still a step
    of ascend's own kernel, --strict still passes, and the audit of the same run agrees (it once said "runs
    natively" while the rehearsal beside it, having lost its mark, sent the cell to the CPU)."""
    stats, audit = tmp_path / "stats.json", tmp_path / "audit.json"
    rc, stdout, stderr = run_cli("run", "--simulate", "ascend", "--strict", "--stats", str(stats), "--audit-json",
                                 str(audit), "--", str(FIXTURES / "fallback" / "rnn_step.py"), "GRU")
    assert rc == 0, stderr[-2000:]
    ops = {o["op"]: o for o in json.loads(stats.read_text())["ops"]}
    cell = ops["_thnn_fused_gru_cell_backward"]
    assert (cell["path"], cell["status"], cell["calls"]) == ("native", "native", 10), cell
    (verdict,) = json.loads(audit.read_text())["targets"]
    assert verdict["verdict"] == "runs", verdict
    trace_ops = {o["op"] for o in json.loads(audit.read_text())["ops"]}
    assert "aten::gru.input" in trace_ops, sorted(trace_ops)  # the trace recorded the choice beside the rehearsal


def test_a_packed_sequence_rehearses_with_its_batch_sizes_on_the_host(tmp_path):
    """pack_padded_sequence takes its lengths, and returns the batch sizes, as CPU tensors on a device too
    (aten/src/ATen/native/PackedSequence.cpp). The packed GRU calls gru.data, which ascend does not register
    (its coverage data has gru.input only): the fused cell's backward, which ascend lacks, is held to the
    matrix there, so --strict stops on it; without --strict opaudit's fallback runs it and the step matches
    the CPU."""
    import re

    fixture = str(FIXTURES / "fallback" / "rnn_step.py")
    assert load_matrix("ascend").resolve("gru.data").status != "native"
    rc, _, stderr = run_cli("run", "--simulate", "ascend", "--strict", "--", fixture, "GRU", "packed")
    assert rc == 3 and "aten::_thnn_fused_gru_cell_backward" in stderr, stderr[-2000:]
    stats = tmp_path / "stats.json"
    rc, stdout, stderr = run_cli("run", "--simulate", "ascend", "--stats", str(stats), "--", fixture, "GRU", "packed")
    assert rc == 0, stderr[-2000:]
    assert float(re.search(r"worst relative difference (\S+)", stdout).group(1)) < 1e-5, stdout
    ops = {o["op"]: o for o in json.loads(stats.read_text())["ops"]}
    assert ops["_pack_padded_sequence"]["calls"] == 1
    assert ops["_thnn_fused_gru_cell_backward"]["path"] == "cpu"
