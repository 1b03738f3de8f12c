"""A rehearsal on a release whose PyTorch is older than the installed one (rehearsal/skew.py): the APIs that PyTorch
lacks are counted, said, and under --strict a call of one from the program stops at its line, as the device's
torch raises AttributeError there; the audit says version_skew for the same calls."""

from __future__ import annotations

import json

from helpers import FIXTURES, run_cli

SCRIPT = FIXTURES / "scripts" / "newer_api.py"
OLD = "ascend@2.1.0.post10"  # PyTorch 2.1.0: no rms_norm (2.4)
LINE = next(n for n, text in enumerate(SCRIPT.read_text().splitlines(), 1) if "functional.rms_norm(" in text)


def test_the_apis_the_targets_pytorch_lacks_are_counted_and_said(tmp_path):
    stats = tmp_path / "stats.json"
    code, out, err = run_cli("run", "--simulate", OLD, "--stats", str(stats), "--", str(SCRIPT), cwd=tmp_path)
    assert code == 0, err[-2000:]
    assert "not in the target's PyTorch" in out + err and "rms_norm (" in out + err
    ops = {o["op"]: o for o in json.loads(stats.read_text())["ops"]}
    assert ops["rms_norm"]["status"] == "version_skew" and ops["rms_norm"]["calls"] == 2  # the program's and RMSNorm's
    assert "2.4" in ops["rms_norm"]["reason"]


def test_strict_stops_where_the_program_calls_one(tmp_path):
    code, out, err = run_cli("run", "--simulate", OLD, "--strict", "--", str(SCRIPT), cwd=tmp_path)
    assert code == 3, err[-2000:]
    assert "torch.rms_norm is not in PyTorch 2.1.0 (PyTorch 2.4.0 added it)" in err
    assert f"{SCRIPT}:{LINE}" in err and "AttributeError" in err


def test_torchs_own_call_is_counted_not_stopped(tmp_path):
    """nn.RMSNorm's forward calls rms_norm from torch's own code: counted, and a strict rehearsal goes on (a newer
    torch's module may call what the older one does otherwise)."""
    code, out, err = run_cli("run", "--simulate", OLD, "--strict", "--", str(SCRIPT), "--module-only", cwd=tmp_path)
    assert code == 0, err[-2000:]
    assert "rms_norm (1)" in out + err


def test_a_release_on_a_newer_pytorch_wraps_nothing(tmp_path):
    code, out, err = run_cli("run", "--simulate", "ascend", "--strict", "--", str(SCRIPT), cwd=tmp_path)
    assert code == 0, err[-2000:]
    assert "not in the target's PyTorch" not in out + err


def test_the_recorded_rehearsal_and_the_audit_say_the_same(tmp_path):
    """Differential: the run's own trace records the API beside the rehearsal's wrapper, and its audit says
    version_skew for it, as the audit of a trace of the same script does."""
    code, out, err = run_cli("run", "--simulate", OLD, "--audit-json", "r.json", "--", str(SCRIPT), cwd=tmp_path)
    assert code == 0, err[-2000:]
    rehearsal = json.loads((tmp_path / "r.json").read_text())
    code, out, err = run_cli("trace", "-t", OLD, "--audit-json", "t.json", "-q", "--", str(SCRIPT), cwd=tmp_path)
    assert code == 0, err[-2000:]
    traced = json.loads((tmp_path / "t.json").read_text())
    for doc in (rehearsal, traced):
        assert doc["targets"][0]["verdict"] == "version_skew"
        assert any(s.startswith("rms_norm") for s in doc["targets"][0]["version_skew"])
