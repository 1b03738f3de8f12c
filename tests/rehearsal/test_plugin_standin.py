"""The target's plugin (torch_npu) in a rehearsal: importable from any module of the program and under -m,
with the vendor names a port writes (torch_npu.npu.mstx),
while a library's probe finds it only once the program has imported it."""

from __future__ import annotations

import json

from helpers import FIXTURES, run_cli

PKG = FIXTURES / "fallback" / "portedpkg"


def _result(stdout: str) -> dict:
    return json.loads(next(line for line in stdout.splitlines() if line.startswith("{")))


def test_a_package_that_imports_the_plugin_runs_under_a_driver_that_does_not():
    rc, stdout, stderr = run_cli("run", "--simulate", "ascend", "--strict", "--no-map-cuda", "--",
                                 str(PKG / "drive.py"), cwd=PKG)
    assert rc == 0, stderr[-3000:]
    r = _result(stdout)
    assert r["device"] == "npu:0"
    assert r["probe_before"] is False and r["probe_after"] is True


def test_a_module_run_with_m_gets_the_plugin(tmp_path):
    rc, stdout, stderr = run_cli("run", "--simulate", "ascend", "--strict", "--no-map-cuda", "-m", "pkg.train",
                                 cwd=PKG)
    assert rc == 0, stderr[-3000:]
    r = _result(stdout)
    assert r["device"] == "npu:0" and r["plugin"]  # the stand-in's version is the release's
