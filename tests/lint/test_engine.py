"""The linter's guarantees: what it writes parses, fixing twice changes nothing, an untouched file stays
byte-identical, encodings / line endings / tabs / comments survive, a file that does not parse is
reported while the run goes on, writes are atomic even when the process is killed, and nothing outside
the given paths is written."""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
import time

import pytest
from helpers import ROOT

from opaudit.lint import Settings, fix_source, lint_source, run

ASCEND = Settings(target="ascend")
SRC = b"import torch\n\ndef step(x):\n    torch.cuda.synchronize()  # wait\n    return x.to('cuda:0')\n"


def test_untouched_file_is_byte_identical_and_not_rewritten(tmp_path):
    clean = tmp_path / "clean.py"
    clean.write_bytes(b"import torch\n# cuda is mentioned in a comment only\nx = torch.ones(2)\n")
    before = clean.stat()
    result = run([clean], ASCEND, fix=True)
    assert not result.findings and not result.files[0].changed
    assert clean.read_bytes() == b"import torch\n# cuda is mentioned in a comment only\nx = torch.ones(2)\n"
    assert clean.stat().st_mtime_ns == before.st_mtime_ns and clean.stat().st_ino == before.st_ino


def test_comments_tabs_and_crlf_survive():
    src = SRC.replace(b"    ", b"\t").replace(b"\n", b"\r\n")
    new = fix_source(src, ASCEND).new
    assert new is not None
    assert b"\r\n" in new and b"\n" not in new.replace(b"\r\n", b"")  # every line ending is CRLF, the new one too
    assert b"\ttorch.npu.synchronize()  # wait\r\n" in new and b"\treturn x.to('npu:0')\r\n" in new
    assert new.startswith(b"import torch\r\nimport torch_npu\r\n")


def test_utf8_bom_and_latin1_coding_cookie_survive():
    bom = b"\xef\xbb\xbf" + b"# caf\xc3\xa9\n" + SRC
    new = fix_source(bom, ASCEND).new
    assert new is not None and new.startswith(b"\xef\xbb\xbf# caf\xc3\xa9\n") and b"torch.npu.synchronize" in new
    latin = b"# -*- coding: latin-1 -*-\n# caf\xe9\n" + SRC
    new = fix_source(latin, ASCEND).new
    assert new is not None and b"# caf\xe9\n" in new and b"torch.npu.synchronize" in new
    assert new.decode("latin-1").encode("latin-1") == new


def test_nested_fixes_converge_in_one_run():
    src = b"import torch\ny = x.cuda().to(torch.device('cuda', 1)) if torch.cuda.is_available() else x\n"
    settings = Settings(target="ascend", unsafe_fixes=True)
    new = fix_source(src, settings).new
    assert new is not None
    assert b"x.npu().to(torch.device('npu', 1)) if torch.npu.is_available()" in new
    assert fix_source(new, settings).new == new
    ast.parse(new)


def test_noqa_suppresses_the_named_codes_only():
    src = (b"import torch\ntorch.cuda.synchronize()  # noqa: OA401\n"
           b"torch.cuda.empty_cache(); x.to('cuda')  # noqa: OA103\n"
           b"torch.cuda.synchronize()  # noqa\n")
    codes = [(f.line, f.code) for f in lint_source(src, ASCEND).findings]
    assert codes == [(3, "OA402")]
    assert b"torch.cuda.synchronize()  # noqa: OA401" in (fix_source(src, ASCEND).new or b"")


def test_a_file_that_does_not_parse_is_reported_and_the_run_goes_on(tmp_path):
    (tmp_path / "bad.py").write_bytes(b"import torch\ndef f(:\n    torch.cuda.synchronize()\n")
    (tmp_path / "good.py").write_bytes(SRC)
    result = run([tmp_path], ASCEND, fix=True)
    assert len(result.errors) == 1 and "bad.py:2" in result.errors[0] and "does not parse" in result.errors[0]
    assert b"torch.npu.synchronize" in (tmp_path / "good.py").read_bytes()
    assert (tmp_path / "bad.py").read_bytes().startswith(b"import torch\ndef f(:")


def test_nothing_outside_the_given_paths_is_written(tmp_path):
    outside = tmp_path / "outside.py"
    outside.write_bytes(SRC)
    project = tmp_path / "project"
    project.mkdir()
    (project / "link.py").symlink_to(outside)
    (project / "linked_dir").symlink_to(tmp_path, target_is_directory=True)
    (project / "own.py").write_bytes(SRC)
    result = run([project], ASCEND, fix=True)
    assert outside.read_bytes() == SRC and (project / "link.py").is_symlink()
    assert any("outside the given paths" in w for w in result.warnings)
    assert b"torch.npu" in (project / "own.py").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["outside.py", "project"]


def test_writes_are_atomic_when_the_run_is_killed(tmp_path):
    """Kill `opaudit fix` while it writes: every file is then its old text or its fixed text, never a mix."""
    originals = {}
    body = b"".join(b"def f%d(x):\n    torch.cuda.synchronize()\n    return x.to('cuda:%d')\n" % (i, i % 8)
                    for i in range(300))
    for i in range(400):
        p = tmp_path / f"m{i:03d}.py"
        p.write_bytes(b"import torch\n" + body)
        originals[p] = p.read_bytes()
    fixed = fix_source(b"import torch\n" + body, ASCEND).new
    proc = subprocess.Popen([sys.executable, "-m", "opaudit", "fix", "-t", "ascend", "-j", "1", str(tmp_path)],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and not any(p.read_bytes() != originals[p] for p in originals):
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    states = {"old": 0, "new": 0}
    for p, old in originals.items():
        data = p.read_bytes()
        assert data in (old, fixed), f"{p.name} is neither its old nor its fixed text"
        states["old" if data == old else "new"] += 1
    assert states["new"] >= 1 and states["old"] >= 1, states  # killed mid-run, not before or after


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the process pool test needs fork")
def test_parallel_and_serial_runs_agree(tmp_path):
    for i in range(40):
        (tmp_path / f"f{i}.py").write_bytes(SRC.replace(b"cuda:0", b"cuda:%d" % i))
    serial = run([tmp_path], ASCEND, jobs=1)
    parallel = run([tmp_path], ASCEND, jobs=2)
    assert [f.to_json() for f in serial.findings] == [f.to_json() for f in parallel.findings]
    assert len(serial.findings) == 80
