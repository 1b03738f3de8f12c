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

import helpers
import pytest
from helpers import FIXTURES, run_cli, warm_key

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the warm start forks (Linux)")

PROBE = FIXTURES / "scripts" / "process_probe.py"


def test_a_rehearsal_sees_the_same_process_warm_and_fresh(tmp_path) -> None:
    shutil.copy(PROBE, tmp_path / "probe.py")
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    (stubs / "probe_stub.py").write_text("WHERE = __file__\n")
    env = {"OPAUDIT_PROBE": "given", "PYTHONPATH": str(stubs)}
    args = ("run", "--simulate", "ascend", "--", "probe.py", "5")
    key = warm_key(list(args), {**os.environ, "COLUMNS": "200", **env})
    assert key is not None and key[0] == "torch"
    run_cli(*args, cwd=tmp_path, env=env)  # (a first use builds the rehearsal's device, and says so on stderr)
    warm = run_cli(*args, cwd=tmp_path, env=env)
    assert helpers._warm[key] is not None and helpers._warm[key].poll() is None  # (it ran warm)
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
        run_cli("run", "--simulate", "ascend", "--", str(FIXTURES / "scripts" / "forever.py"), cwd=tmp_path, timeout=2)
    assert time.monotonic() - start < 30
    rc, out, _ = run_cli("report", "--help")  # the warm process serves the next call
    assert rc == 0 and "trace" in out.lower()


def test_the_cuda_path_starts_warm_with_the_stand_in_in_place(tmp_path) -> None:
    """scan and trace on cuda load the C++ stand-in before torch: the warm process for them did so, and a trace
    started from it records what a fresh one records, on the stand-in."""
    args = ("trace", "--json", "t.json", "--", str(FIXTURES / "scripts" / "cuda_idioms.py"))
    key = warm_key(list(args), {**os.environ, "COLUMNS": "200"})
    assert key is not None and key[0] == "cuda"
    runs = []
    for fresh in (False, True):
        code, out, err = run_cli(*args, cwd=tmp_path, fresh=fresh)
        assert code == 0, err[-2000:]
        trace = json.loads((tmp_path / "t.json").read_text())
        records = [(r["op"], r["phase"], r["dtypes"], r["source"], r["calls"]) for r in trace["records"]]
        runs.append((out, records, trace["meta"]["simulated"]))
    assert runs[0] == runs[1] and runs[0][2]["engine"] == "stand-in", runs[0][2]
    assert helpers._warm[key] is not None  # (the first run was the warm process's: it did not decline)


def test_what_a_start_reads_picks_the_warm_process() -> None:
    """A command whose start does not depend on torch being unimported goes to a warm process of its kind where it
    agrees with the worker on the values a start reads (PYTHON*, TORCH*, the stand-in's switch, the compiler, ...);
    others go fresh."""
    env = dict(os.environ)
    assert warm_key(["scan", "m.py", "--device", "cpu"], env)[0] == "torch"  # type: ignore[index]
    assert warm_key(["trace", "--device=cpu", "--", "t.py", "--device", "cuda"], env)[0] == "torch"  # type: ignore
    assert warm_key(["scan", "m.py"], env)[0] == "cuda"  # type: ignore[index]  (the stand-in loads before torch)
    assert warm_key(["trace", "--device", "cuda", "--", "t.py"], env)[0] == "cuda"  # type: ignore[index]
    assert warm_key(["lint", "x.py"], env) is None and warm_key(["zoo", "hf:bert"], env) is None
    rehearse = ["run", "--simulate", "ascend", "--", "t.py"]
    same = warm_key(rehearse, env)
    assert warm_key(rehearse, {**env, "OPAUDIT_PROBE": "x", "PYTHONPATH": "/elsewhere"}) == same
    for read in ("PYTORCH_NO_CUDA_MEMORY_CACHING", "PYTHONHASHSEED", "OPAUDIT_CUDA_STAND_IN", "CXX"):
        assert warm_key(rehearse, {**env, read: "3"}) is None, read
