"""The C++ test backend (tests/fixtures/plugins/testdev) is compiled once per machine, before the tests
that use it, so that its build time (~25 s, then cached in a temp folder) is not any one test's."""

from __future__ import annotations

import shutil

import pytest
from helpers import run_python

NO_COMPILER = "the C++ test backend (tests/fixtures/plugins/testdev) is compiled at test time and needs g++"


@pytest.fixture(scope="session")
def testdev_built() -> None:
    """Build (or find the cached build of) testdev in a subprocess: this process keeps PrivateUse1 free."""
    if shutil.which("g++") is None:
        pytest.skip(NO_COMPILER)
    proc = run_python("build_testdev.py", timeout=900)
    assert proc.returncode == 0, f"building testdev failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
