"""Real code from installed packages (torch and transformers, which the test environment has): the linter
does not crash on it, every file it fixes still parses, and a second fix changes nothing. A sample keeps
this quick; bench/lint_throughput.py --corpus-check runs the whole of several packages."""

from __future__ import annotations

import ast
import hashlib
import shutil
from pathlib import Path

import pytest
import torch
import transformers

from opaudit.lint import Settings, run

SAMPLE = 80  # files mentioning cuda, spread evenly over both packages


def _sample() -> list[Path]:
    files = []
    for pkg in (torch, transformers):
        root = Path(pkg.__file__).parent
        mentions = [p for p in sorted(root.rglob("*.py")) if b"cuda" in p.read_bytes()]
        step = max(1, len(mentions) // (SAMPLE // 2))
        files += mentions[::step][: SAMPLE // 2]
    return files


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    files = _sample()
    assert len(files) >= SAMPLE - 10
    return files


def _digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*.py")}


@pytest.mark.parametrize("target", ["ascend", "neutral"])
def test_fix_on_real_code_parses_and_is_idempotent(corpus, tmp_path, target):
    for i, src in enumerate(corpus):
        shutil.copyfile(src, tmp_path / f"{i:03d}_{src.name}")
    before = _digest(tmp_path)
    settings = Settings(target=target, select=("ALL",), unsafe_fixes=True)
    first = run([tmp_path], settings, fix=True, jobs=2)
    assert not first.errors, first.errors[:3]
    changed = [p for p, h in _digest(tmp_path).items() if before[p] != h]
    assert len(changed) >= SAMPLE // 3, "the sample should exercise the fixes"
    for name in changed:
        ast.parse((tmp_path / name).read_bytes(), filename=name)
    after = _digest(tmp_path)
    # idempotence: a second fix of what the first changed changes nothing (a file the first left alone is the same
    # input again, so only the changed ones are run twice)
    second = run([tmp_path / name for name in changed], settings, fix=True, jobs=2)
    assert not second.errors
    assert _digest(tmp_path) == after, "a second fix changed files"
    fixed = {str(tmp_path / name) for name in changed}
    before_count = sum(len(r.findings) for r in first.files if str(r.path) in fixed)
    assert before_count > sum(len(r.findings) for r in second.files)
