"""One dtype truth: a rehearsal judges each call's dtypes as the audit does (Matrix.resolve_call), so a program the
audit says fails on a target for a dtype fails its strict rehearsal there, naming the op, the dtype and the line,
and runs (its calls counted on opaudit's fallback) without --strict."""

from __future__ import annotations

import json

import pytest
from helpers import FIXTURES, run_cli

import opaudit

SCRIPT = FIXTURES / "scripts" / "float64_stats.py"


def test_without_strict_the_calls_fall_back_and_are_counted(tmp_path):
    stats = tmp_path / "stats.json"
    code, out, err = run_cli("run", "--simulate", "mps", "--stats", str(stats), "--", str(SCRIPT), cwd=tmp_path)
    assert code == 0, err[-2000:]
    assert "stats tensor(" in out
    data = json.loads(stats.read_text())
    cpu = [o for o in data["ops"] if o["path"] == "cpu"]
    assert cpu and all("float64" in o["reason"] for o in cpu)
    assert any(o["op"].startswith("add") for o in cpu)  # running += ... in float64


PROGRAMS = {
    "train_cuda": (FIXTURES.parent.parent / "examples" / "train_cuda.py",
                   ["--epochs", "1", "--steps-per-epoch", "2", "--batch-size", "4"]),
    "lm-bf16-fused": (FIXTURES / "scripts" / "cuda_bf16_fused.py", []),
    "float64-stats": (SCRIPT, []),
    "grad-scaler-fp16": (FIXTURES / "scripts" / "grad_scaler_fp16.py", []),  # a device branch of torch's own
    # torch.cuda.FloatTensor and the others: run where the plugin has typed classes (ascend), refused elsewhere
    "legacy-types": (FIXTURES / "scripts" / "legacy_types.py", []),
}


@pytest.fixture(scope="module")
def program_traces(tmp_path_factory):
    out = {}
    for name, (script, args) in PROGRAMS.items():
        path = tmp_path_factory.mktemp(name) / "t.json"
        code, _, err = run_cli("trace", "-q", "--no-audit", "--json", str(path), "--", str(script), *args,
                               cwd=path.parent)
        assert code == 0, err[-2000:]
        out[name] = opaudit.load_trace(str(path))
    return out


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_the_verdict_and_the_strict_rehearsal_agree_on_every_target(program_traces, name, tmp_path):
    """Differential: for each program and target, the audit says it fails exactly where the strict rehearsal stops."""
    script, args = PROGRAMS[name]
    audit = opaudit.audit(program_traces[name], ["ascend", "musa", "mps"])
    for target in ("ascend", "musa", "mps"):
        verdict = audit.verdict(target)
        code, _, err = run_cli("run", "--simulate", target, "--strict", "--", str(script), *args, cwd=tmp_path)
        fails = verdict.verdict == "fails"
        assert (code == 3) == fails, (name, target, verdict.summary, err[-1500:])
        assert code in (0, 3), err[-1500:]
        if name == "float64-stats":  # the float64 statistics: missing on mps for their dtype alone, fine elsewhere
            frame = audit.frame
            missing = frame[(frame.target == verdict.target) & (frame.status == "missing")]
            assert fails == (target == "mps") and bool(len(missing)) == fails
            assert all("float64" in n for n in missing.note)
            if fails:  # the rehearsal names the op's dtype, the target and the user's line: torch.zeros(..., float64)
                line = next(n for n, text in enumerate(SCRIPT.read_text().splitlines(), 1) if "torch.zeros(" in text)
                assert "with float64 does not run on mps" in err and f"{SCRIPT}:{line}" in err


@pytest.mark.parametrize("engine", ["native", "python"])
def test_a_factorys_dtype_is_judged_as_the_rehearsal_judges_it(engine, tmp_path):
    """torch.zeros(..., dtype=torch.float64) has no tensor argument whose dtype the trace could read: it was recorded
    with none, so the audit held no target to it while the rehearsal on MPS stopped at that line. Each factory's
    dtype= is its call's dtype now, in both recorders, and the audit names the lines the rehearsal stops at."""
    script = FIXTURES / "scripts" / "float64_factories.py"
    path = tmp_path / "t.json"
    code, _, err = run_cli("trace", "-q", "--no-audit", "--json", str(path), "--", str(script), cwd=tmp_path,
                           env={"OPAUDIT_TRACER": engine}, fresh=True)
    assert code == 0, err[-2000:]
    audit = opaudit.audit(opaudit.load_trace(str(path)), ["mps", "ascend"])
    frame = audit.frame
    missing = frame[(frame.target == audit.verdict("mps").target) & (frame.status == "missing")]
    assert {"aten::zeros", "aten::ones", "aten::full", "aten::arange"} <= {o.split(".")[0] for o in missing.op}
    assert all("float64" in n for n in missing.note)
    assert audit.verdict("ascend").verdict != "fails"
    code, _, err = run_cli("run", "--simulate", "mps", "--strict", "--", str(script), cwd=tmp_path)
    lines = [n for n, text in enumerate(script.read_text().splitlines(), 1) if "dtype=torch.float64" in text]
    assert code == 3 and f"{script}:{lines[0]}" in err and "float64" in err, err[-1500:]


def test_an_op_failing_for_one_dtype_names_only_the_lines_of_that_dtype(program_traces):
    """``_to_copy`` runs on MPS for the model's move to the device (float32) and fails for ``.double()``: the row, its
    calls and its lines on mps are the float64 copies' alone, as the rehearsal stops there, not at the model's line."""
    a = opaudit.audit(program_traces["float64-stats"], ["mps", "ascend"])
    lines = {text.strip(): f"{SCRIPT}:{n}" for n, text in enumerate(SCRIPT.read_text().splitlines(), 1)}
    moved, doubled = lines["model = torch.nn.Linear(4, 2).to(device)"], lines["running += y.detach().double().mean(0)"]
    frame = a.frame.set_index(["target", "op", "phase"])
    mps = frame.loc[(a.verdict("mps").target, "aten::_to_copy.default", "forward")]
    whole = frame.loc[(a.verdict("ascend").target, "aten::_to_copy.default", "forward")]
    assert mps["status"] == "missing" and doubled in mps["sources"] and moved not in mps["sources"]
    assert all("float64" in d for d in mps["dtypes"]) and mps["calls"] < whole["calls"]
    assert whole["status"] in ("native", "composite") and moved in whole["sources"]
    assert "missing for its calls in float32->float64" in mps["note"]
    assert "its other calls run on the device" in mps["note"]
    # the verdict counts those calls only
    i = next(i for i, g in enumerate(a.groups) if g.op == "aten::_to_copy.default" and g.phase == "forward")
    assert a.failing[a.verdict("mps").target][i].calls == mps["calls"]


def test_no_later_release_is_said_to_run_what_fails_for_its_dtype(program_traces):
    """A later MPS release has _to_copy and abs, but no float64 either: the advice judges the failing calls there
    in their dtypes, as the verdict does, and names no release that would not run them."""
    a = opaudit.audit(program_traces["float64-stats"], ["mps@2.5.0"], landscape=False)
    v = a.verdict("mps@2.5.0")
    assert v.verdict == "fails" and not any(" runs " in x and "on the device" in x for x in v.advice), v.advice
