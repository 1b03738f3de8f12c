"""The installed packages that rule OA715's catalogue examples call (tests/fixtures/lint/installed/): on sys.path for
every lint test, as a package installed beside the linted code would be."""

from __future__ import annotations

import importlib
import sys

from helpers import FIXTURES

INSTALLED = FIXTURES / "lint" / "installed"
if str(INSTALLED) not in sys.path:
    sys.path.append(str(INSTALLED))
    importlib.invalidate_caches()
