"""The conventions of DESIGN.md that a tool can check: ruff and mypy clean."""

from __future__ import annotations

import subprocess
import sys

from helpers import ROOT


def test_ruff_is_clean():
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "opaudit", "tests", "bench", "examples"],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy_is_clean():
    proc = subprocess.run([sys.executable, "-m", "mypy", "opaudit"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
