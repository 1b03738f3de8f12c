"""An installed wheel (not only this checkout) carries the data folders and finds them."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile

from helpers import ROOT, SUBPROCESS

from opaudit.lint import load_catalogue


def test_wheel_carries_the_data_folders_and_finds_them(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(tmp_path / "dist"), str(ROOT)], check=True, capture_output=True)
    wheel = next((tmp_path / "dist").glob("opaudit-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    for folder in ("coverage_db", "rules", "reports"):
        assert any(n.startswith(f"opaudit/_data/{folder}/") for n in names), folder
    assert "opaudit/_data/coverage_db/curated/device_selected.toml" in names
    assert "opaudit/_data/coverage_db/SOURCES.md" in names  # the provenance page the notes cite
    assert "opaudit/tracing/trace.schema.json" in names
    assert "opaudit/report/audit.schema.json" in names and "opaudit/_data/reports/audit.html.j2" in names
    assert any(n.startswith("opaudit/_data/coverage_db/ascend/caveats/") for n in names)
    assert "opaudit/_data/rules/catalogue.toml" in names and "opaudit/_data/rules/targets/neutral.toml" in names
    templates = {p.relative_to(ROOT).as_posix() for p in (ROOT / "reports").iterdir() if p.is_file()}
    assert {f"opaudit/_data/{t}" for t in templates} <= set(names), "a file of reports/ is missing from pyproject"
    assert not any(n.startswith("opaudit/_data/reports/examples/") for n in names)  # the examples stay out
    for entry in {p.name for p in (ROOT / "coverage_db").iterdir()} - {"upstream"}:
        where = f"opaudit/_data/coverage_db/{entry}"
        assert any(n == where or n.startswith(where + "/") for n in names), f"coverage_db/{entry} is not in pyproject"
    assert not any(n.startswith("opaudit/_data/coverage_db/upstream/") for n in names)  # the raw lists stay out
    assert "opaudit_fallback.pth" in names  # OPAUDIT_FALLBACK=target, at the top of site-packages
    assert {"opaudit/cli/__init__.py", "opaudit/cli/options.py", "opaudit/__main__.py"} <= set(names)
    # the C++ sources compiled on first use: the CUDA stand-in and the rehearsal's device
    assert {"opaudit/native/cuda.cpp", "opaudit/native/device.cpp", "opaudit/native/recorder.cpp"} <= set(names)

    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
                   check=True, capture_output=True)
    env = {**os.environ, "PYTHONPATH": str(target)}
    done = subprocess.run([sys.executable, str(SUBPROCESS / "wheel_probe.py")], capture_output=True, text=True,
                          cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout.splitlines()
    assert out[0].startswith(str(target))
    assert all(p.startswith(str(target / "opaudit" / "_data")) for p in out[1].split())
    assert out[2] == "['aten::dropout.default']"  # the tracer read device_selected.toml from the wheel
    verdict, html, releases = out[3].split()
    assert verdict == "runs" and html == "True" and int(releases) > 150  # coverage_db and the template too
    rules = len(load_catalogue().rules)  # the checkout's catalogue: the wheel carries the same one
    assert rules > 100 and out[4] == f"{rules} torch.musa.synchronize()"  # the rule catalogue and target tables
    assert out[5] == f"{target / 'opaudit' / '_data' / 'coverage_db' / 'SOURCES.md'} True"  # what matrix show names
    cli = subprocess.run([sys.executable, "-m", "opaudit", "report", "--help"], check=True, capture_output=True,
                         text=True, cwd=tmp_path, env=env).stdout
    assert "--fail-on" in cli and "Usage: opaudit report" in cli  # the command line, from the wheel
