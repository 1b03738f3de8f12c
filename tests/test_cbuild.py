"""opaudit's C++ parts are built once per torch installation: the build folder's key names the installation, a build
counts only once finished, a built part loads without a build step, and ``opaudit doctor`` shows and builds them."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from helpers import ROOT, run_cli, run_python

from opaudit.native import cbuild
from opaudit.tracing import native as tracer


def _in_child(probe: str, **env: str) -> str:
    done = run_python("cbuild_child.py", probe, env={"PYTHONPATH": str(ROOT), **env})
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def test_another_torch_installation_gets_its_own_folder(tmp_path):
    """A second venv with the same torch version is another installation: its torch is found elsewhere (here,
    through a link to this one's package, which torch's extension builder would also see under the new path)."""
    import torch

    other = tmp_path / "site"
    other.mkdir()
    (other / "torch").symlink_to(Path(torch.__file__).parent, target_is_directory=True)
    env = {k: "" for k in ("OPAUDIT_CUDA_STAND_IN_BUILD", "OPAUDIT_TRACER_BUILD", "OPAUDIT_REHEARSAL_DEVICE_BUILD")}
    here_install, here_dirs = json.loads(_in_child("install", **env))
    there_install, there_dirs = json.loads(_in_child("install", PYTHONPATH=f"{other}{os.pathsep}{ROOT}", **env))
    assert there_install["torch"] == str(other / "torch") != here_install["torch"]
    assert there_install["torch_version"] == here_install["torch_version"] == torch.__version__
    assert there_install["torch_build"] == here_install["torch_build"]  # the same build, installed twice
    for here, there in zip(here_dirs, there_dirs, strict=True):
        assert here != there and Path(here).parent == Path(there).parent  # same kind, another key
        assert Path(here).name.split("-")[0] == torch.__version__.replace("+", "_")


def test_a_built_part_loads_without_a_build_step(tmp_path):
    """A finished build is loaded from its library: with the build file and the objects gone (another venv's
    ninja would rewrite them), the recorder still loads and nothing is compiled."""
    assert tracer.load() is not None, tracer.reason()
    copy = tmp_path / "tracer"
    shutil.copytree(tracer.build_dir(), copy)
    for path in copy.iterdir():
        if path.name not in (f"{tracer.NAME}.so", cbuild.MARKER):
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    before = sorted(p.name for p in copy.iterdir())
    assert _in_child("load-tracer", OPAUDIT_TRACER_BUILD=str(copy)) == "True None"
    assert sorted(p.name for p in copy.iterdir()) == before  # no build file, no object: nothing was built


def test_a_build_counts_once_finished(tmp_path, monkeypatch, capsys):
    """A folder without built.json (a build killed half-way) is cleared and built again; a finished one is not
    built twice; the first build says what, how long about, and where."""
    source = tmp_path / "part.cpp"
    source.write_text("// a part\n")
    part = cbuild.Part("opaudit_part", source, "part", "OPAUDIT_TEST_PART_BUILD", "a test part", 5)
    monkeypatch.setenv(part.env, str(tmp_path / "build"))
    calls = []

    def compile_into(directory: Path) -> str:
        calls.append(sorted(p.name for p in directory.iterdir()))
        (directory / f"{part.name}.so").write_bytes(b"library")
        return "module"

    half = tmp_path / "build"
    half.mkdir()
    (half / f"{part.name}.so").write_bytes(b"half")  # a library, but the build never finished
    (half / "part.o").write_bytes(b"object")
    assert part.built() is None
    assert cbuild.build(part, compile_into) == (part.library(), "module")
    assert calls == [[".lock"]]  # the half build was cleared first
    line = capsys.readouterr().err
    assert "compiling a test part" in line and "about 5 s" in line and str(half) in line
    record = part.built()
    assert record is not None and record["key"] == part.key() and record["install"] == cbuild.install()
    assert cbuild.build(part, compile_into) == (part.library(), None) and len(calls) == 1
    assert capsys.readouterr().err == ""

    tries = []

    def fails(directory: Path) -> None:
        tries.append(directory)
        raise RuntimeError("the compiler said no")

    source.write_text("// another part\n")  # a changed source is another key, another folder
    monkeypatch.delenv(part.env)
    monkeypatch.setenv("OPAUDIT_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(RuntimeError, match="said no"):
        cbuild.build(part, fails)
    assert part.built() is None
    # a build that failed is not tried again on every command for the same install: its error is said at once
    with pytest.raises(RuntimeError, match="said no .*an earlier build failed; remove"):
        cbuild.build(part, fails)
    assert len(tries) == 1


def test_doctor_shows_the_parts():
    code, out, err = run_cli("doctor")
    assert code == 0, err
    for part in cbuild.PARTS:
        assert part.what in out and str(part.build_dir()) in out
    assert f"for torch at {cbuild.install()['torch']}" in out
