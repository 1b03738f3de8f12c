"""Build (or find the cached build of) the C++ test backend, tests/fixtures/plugins/testdev, in a process of its
own so that the test process keeps PrivateUse1 free (tests/fallback/conftest.py)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "plugins"))

import testdev  # noqa: E402

testdev.build()
