"""Fixtures of the matrix tests: the staged upstream sources, parsed once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from opaudit.matrix.build import default_sources
from opaudit.matrix.sources import Context

UPSTREAM = default_sources()


@pytest.fixture(scope="session")
def ctx() -> Context:
    """PyTorch's op tables of every staged release, and the sources folder."""
    return Context.load(UPSTREAM)


@pytest.fixture(scope="session")
def upstream() -> Path:
    return UPSTREAM
