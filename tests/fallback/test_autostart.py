"""OPAUDIT_FALLBACK: an unmodified script opts in through the .pth file the wheel installs, on the
C++ test backend (compiled once per machine; each run in a fresh process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from helpers import FIXTURES, SUBPROCESS, run_cli


def test_the_environment_variable_installs_the_fallback_after_the_plugin(testdev_built, tmp_path):
    stats = tmp_path / "stats.json"
    plugin = FIXTURES / "fallback" / "plugin"
    env = {**os.environ, "OPAUDIT_FALLBACK": "ascend", "OPAUDIT_FALLBACK_AFTER": "fake_npu_plugin",
           "OPAUDIT_FALLBACK_STATS": str(stats),
           "PYTHONPATH": os.pathsep.join([str(FIXTURES / "plugins"), str(plugin)])}
    # the .pth as site-packages would process it (an editable checkout has it in the package folder)
    cmd = [sys.executable, str(SUBPROCESS / "with_pth.py"), str(plugin / "relu_script.py")]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert float(proc.stdout.strip().splitlines()[-1]) == 0.0
    assert "fallback on ascend@" in proc.stderr and "relu" in proc.stderr
    st = json.loads(stats.read_text())
    assert st["kind"] == "installed" and st["device"] == "npu"
    assert any(o["op"] == "relu" and o["calls"] == 1 for o in st["ops"])
    # without the variable the same script fails the way the plugin fails
    env.pop("OPAUDIT_FALLBACK")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode != 0 and "Could not run 'aten::" in proc.stderr


def test_run_with_the_fallback_on_the_live_device(testdev_built, tmp_path):
    stats = tmp_path / "stats.json"
    plugin = FIXTURES / "fallback" / "plugin"
    env = {"PYTHONPATH": os.pathsep.join([str(FIXTURES / "plugins"), str(plugin)])}
    rc, stdout, stderr = run_cli("run", "--fallback", "ascend", "--import", "fake_npu_plugin", "--stats", str(stats),
                                 "--", str(plugin / "relu_script.py"), env=env, timeout=600)
    assert rc == 0, stderr[-2000:]
    assert "fallback on ascend@" in stdout and "(installed, device npu)" in stdout
    assert any(o["op"] == "relu" for o in json.loads(stats.read_text())["ops"])
    # without the plugin the device does not exist: one message, no traceback
    rc, _, stderr = run_cli("run", "--fallback", "ascend", "--", str(plugin / "relu_script.py"))
    assert rc == 2 and "the 'npu' device does not exist in this process" in stderr and "Traceback" not in stderr


def test_a_plugin_that_fails_to_load_is_named_with_its_error(tmp_path):
    """The vendor's plugin is installed but raises while it loads (a driver too old, a build that failed): its
    error, one line and exit 2, not an internal error of opaudit's."""
    (tmp_path / "torch_npu.py").write_text("raise RuntimeError('the NPU driver is older than this torch_npu')\n")
    script = tmp_path / "s.py"
    script.write_text("import torch\nprint(torch.ones(2, device='npu'))\n")
    rc, _, stderr = run_cli("run", "--fallback", "ascend", "--", str(script), env={"PYTHONPATH": str(tmp_path)})
    assert rc == 2 and "importing the vendor's plugin torch_npu failed: RuntimeError: the NPU driver is older" \
        in stderr and "Traceback" not in stderr and "internal error" not in stderr, stderr[-2000:]
