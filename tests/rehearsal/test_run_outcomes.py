"""How a rehearsal ends: a run that never used the device is an error (exit 5) unless --allow-empty, and a
failed run's partial statistics and audit go next to --stats or into a temporary folder, never into the
working folder."""

from __future__ import annotations

import json
import re
from pathlib import Path

from helpers import run_cli

ON_THE_CPU = "import torch\n\nmodel = torch.nn.Linear(4, 2)\nprint(model(torch.randn(3, 4)).sum().item())\n"
MIXED = ("import torch\n\nmodel = torch.nn.Linear(4, 2).cuda()\nout = model(torch.randn(3, 4).cuda())\n"
         "out = out + torch.ones(3, 2)  # a CPU tensor beside a device one\n")


def test_no_op_on_the_device_is_an_error_unless_allowed(tmp_path):
    script = tmp_path / "forgot.py"
    script.write_text(ON_THE_CPU)
    rc, stdout, stderr = run_cli("run", "--simulate", "ascend", "--", str(script), cwd=tmp_path)
    assert rc == 5, stderr
    assert "no op reached the simulated npu device" in stderr and "--allow-empty" in stderr
    rc, stdout, stderr = run_cli("run", "--simulate", "ascend", "--allow-empty", "--", str(script), cwd=tmp_path)
    assert rc == 0 and "warning: no op reached" in stderr


def test_partial_files_go_to_a_temporary_folder_named_in_the_message(tmp_path):
    script = tmp_path / "mixed.py"
    script.write_text(MIXED)
    rc, stdout, stderr = run_cli("run", "--simulate", "ascend", "--audit-json", str(tmp_path / "audit.json"), "--",
                                 str(script), cwd=tmp_path)
    assert rc == 3, stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mixed.py"]  # nothing in the working folder
    m = re.search(r"partial fallback statistics saved to (\S+); the audit so far to (\S+)", stderr)
    assert m, stderr
    stats, audit = Path(m.group(1)), Path(m.group(2))
    assert stats.parent == audit.parent and stats.parent != tmp_path
    assert json.loads(stats.read_text())["ops"]
    trace = json.loads(audit.read_text())["trace"]
    assert trace["status"] == "partial" and "same device" in trace["error"]


def test_partial_files_go_next_to_stats(tmp_path):
    script, out = tmp_path / "mixed.py", tmp_path / "out"
    script.write_text(MIXED)
    out.mkdir()
    rc, stdout, stderr = run_cli("run", "--simulate", "ascend", "--stats", str(out / "stats.json"), "--html",
                                 str(tmp_path / "r.html"), "--", str(script), cwd=tmp_path)
    assert rc == 3, stderr
    assert sorted(p.name for p in out.iterdir()) == ["opaudit-audit.partial.html", "opaudit-audit.partial.json",
                                                     "stats.json"]
    assert not (tmp_path / "r.html").exists()
