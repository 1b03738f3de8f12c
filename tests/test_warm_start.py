"""The test helpers' warm start (tests/subprocess/zygote.py, helpers.run_cli) is a fresh `python -m opaudit` less
torch's import: a command run both ways sees the same arguments, working folder, environment, module path and
imports, and ends alike (exit code, streams, a timeout)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest
from helpers import FIXTURES, run_cli, warm_start_differs

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the warm start forks (Linux)")

PROBE = FIXTURES / "scripts" / "process_probe.py"


def test_a_rehearsal_sees_the_same_process_warm_and_fresh(tmp_path) -> None:
    shutil.copy(PROBE, tmp_path / "probe.py")
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    (stubs / "probe_stub.py").write_text("WHERE = __file__\n")
    env = {"OPAUDIT_PROBE": "given", "PYTHONPATH": str(stubs)}
    args = ("run", "--simulate", "ascend", "--", "probe.py", "5")
    assert not warm_start_differs(list(args), {**os.environ, **env})
    warm = run_cli(*args, cwd=tmp_path, env=env)
    fresh = run_cli(*args, cwd=tmp_path, env=env, fresh=True)
    # (the script's exit status 5 is the rehearsal's "the script failed", 3)
    assert warm[0] == fresh[0] == 3 and "exited with status 5" in warm[2], (warm[2][-1500:], fresh[2][-1500:])
    seen = json.loads(warm[1].splitlines()[0])
    assert seen == json.loads(fresh[1].splitlines()[0])
    assert seen["argv"] == ["probe.py", "5"] and seen["cwd"] == str(tmp_path)
    assert seen["env"] == "given" and seen["stub"] == str(stubs / "probe_stub.py") and seen["sum"] == 6.0
    assert "opaudit.rehearsal" in seen["opaudit"]  # (the same modules of opaudit's loaded: above)
    temp = re.compile(r"opaudit-run-\w+")  # (each run's own temporary folder)
    assert warm[1] == fresh[1] and temp.sub("", warm[2]) == temp.sub("", fresh[2])


def test_a_timeout_ends_the_warm_child_as_subprocess_does(tmp_path) -> None:
    start = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        run_cli("run", "--simulate", "ascend", "--", str(FIXTURES / "scripts" / "forever.py"), cwd=tmp_path, timeout=5)
    assert time.monotonic() - start < 30
    rc, out, _ = run_cli("report", "--help")  # the warm process serves the next call
    assert rc == 0 and "trace" in out.lower()


def test_what_a_start_reads_sends_a_call_to_a_fresh_process() -> None:
    env = dict(os.environ)
    assert not warm_start_differs(["scan", "m.py", "--device", "cpu"], env)
    assert not warm_start_differs(["trace", "--device=cpu", "--", "t.py", "--device", "cuda"], env)
    assert warm_start_differs(["scan", "m.py"], env)  # cuda: the stand-in loads before torch
    assert warm_start_differs(["trace", "--device", "cuda", "--", "t.py"], env)
    assert warm_start_differs(["lint", "x.py"], env)
    rehearse = ["run", "--simulate", "ascend", "--", "t.py"]
    assert not warm_start_differs(rehearse, {**env, "OPAUDIT_PROBE": "x", "PYTHONPATH": "/elsewhere"})
    assert warm_start_differs(rehearse, {**env, "PYTORCH_NO_CUDA_MEMORY_CACHING": "1"})
    assert warm_start_differs(rehearse, {**env, "PYTHONHASHSEED": "3"})
