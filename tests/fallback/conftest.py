"""The C++ test backend (tests/fixtures/plugins/testdev) is compiled once per machine, before the tests
that use it, so that its build time (~25 s, then cached in a temp folder) is not any one test's."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
from helpers import FIXTURES

NO_COMPILER = "the C++ test backend (tests/fixtures/plugins/testdev) is compiled at test time and needs g++"


@pytest.fixture(scope="session")
def testdev_built() -> None:
    """Build (or find the cached build of) testdev in a subprocess: this process keeps PrivateUse1 free."""
    if shutil.which("g++") is None:
        pytest.skip(NO_COMPILER)
    code = f"import sys; sys.path.insert(0, {str(FIXTURES / 'plugins')!r}); import testdev; testdev.build()"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"building testdev failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
