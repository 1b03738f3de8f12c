"""Paths shared by the test folders (importable from any of them: tests/ is on sys.path)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
