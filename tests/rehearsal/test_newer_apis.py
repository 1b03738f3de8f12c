"""A rehearsal on a release whose PyTorch is older than the installed one (rehearsal/skew.py): the APIs that PyTorch
lacks are counted and said, with the program's line, as the audit says version_skew for the same calls; none stops
the rehearsal (the program's own checks of torch would take another path on that PyTorch)."""

from __future__ import annotations

import json

from helpers import FIXTURES, run_cli

SCRIPT = FIXTURES / "scripts" / "newer_api.py"
OLD = "ascend@2.1.0.post10"  # PyTorch 2.1.0: no rms_norm (2.4)
LINE = next(n for n, text in enumerate(SCRIPT.read_text().splitlines(), 1) if "functional.rms_norm(" in text)


def test_the_apis_the_targets_pytorch_lacks_are_counted_and_said(tmp_path):
    stats = tmp_path / "stats.json"
    code, out, err = run_cli("run", "--simulate", OLD, "--strict", "--stats", str(stats), "--", str(SCRIPT),
                             cwd=tmp_path)
    assert code == 0, err[-2000:]  # --strict too: a version the program checks would send it elsewhere there
    said = next(line for line in (out + err).splitlines() if line.startswith("needs a newer PyTorch"))
    assert "(the audit: version_skew)" in said and "torch.rms_norm (2 calls" in said
    assert f"first at {SCRIPT}:{LINE}" in said or f"first at {SCRIPT.name}:{LINE}" in said
    ops = {o["op"]: o for o in json.loads(stats.read_text())["ops"]}
    # the program's call and nn.RMSNorm's (a module of the newer torch, calling it from torch's own code)
    assert ops["rms_norm"]["status"] == "version_skew" and ops["rms_norm"]["calls"] == 2
    assert "PyTorch 2.4.0 added it" in ops["rms_norm"]["reason"]


def test_a_release_on_a_newer_pytorch_wraps_nothing(tmp_path):
    code, out, err = run_cli("run", "--simulate", "ascend", "--strict", "--", str(SCRIPT), cwd=tmp_path)
    assert code == 0, err[-2000:]
    assert "needs a newer PyTorch" not in out + err and "the target's PyTorch lacks" not in out + err


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
