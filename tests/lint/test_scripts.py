"""A labelled set of realistic CUDA training, inference, checkpointing and extension scripts
(tests/fixtures/lint/scripts/): each line that holds a construct says which codes it must raise
(``# expect: OA103 OA101``); every construct must be found and nothing else. Where a script has a
golden rewrite beside it (``<name>.<target>.py``, read and judged line by line), `fix` must produce
exactly that."""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

import pytest
from helpers import FIXTURES

from opaudit.lint import Settings, fix_source, lint_source

SCRIPTS = FIXTURES / "lint" / "scripts"
LABEL = re.compile(r"#\s*expect:\s*((?:OA\d{3}\s*)+)")
SOURCES = sorted(p for p in SCRIPTS.glob("*.py") if p.stem.count(".") == 0)
GOLDENS = sorted(p for p in SCRIPTS.glob("*.*.py"))


def expected(path: Path) -> Counter:
    out: Counter = Counter()
    for n, line in enumerate(path.read_text().splitlines(), 1):
        m = LABEL.search(line)
        if m:
            out.update((n, code) for code in m.group(1).split())
    return out


@pytest.mark.parametrize("path", SOURCES, ids=[p.stem for p in SOURCES])
def test_every_construct_is_found_and_nothing_else(path):
    want = expected(path)
    assert want, "a labelled script without labels"
    got = Counter((f.line, f.code) for f in lint_source(path.read_bytes(), Settings(target="ascend",
                                                                                    select=("ALL",))).findings)
    missed = sorted((want - got).elements())
    extra = sorted((got - want).elements())
    assert not missed and not extra, f"missed {missed}; not labelled {extra}"


@pytest.mark.parametrize("golden", GOLDENS, ids=[p.name for p in GOLDENS])
def test_fix_gives_the_reviewed_rewrite(golden):
    name, target = golden.name.split(".")[:2]
    source = SCRIPTS / f"{name}.py"
    settings = Settings(target=target, select=("ALL",), unsafe_fixes=True)
    new = fix_source(source.read_bytes(), settings).new
    assert new is not None
    assert new.decode() == golden.read_text()
    ast.parse(new)
    assert fix_source(new, settings).new == new


@pytest.mark.parametrize("path", SOURCES, ids=[p.stem for p in SOURCES])
@pytest.mark.parametrize("target", ["ascend", "cambricon", "musa", "xpu", "mps", "rocm", "neutral", "biren"])
def test_every_target_keeps_comments_and_parses(path, target):
    settings = Settings(target=target, select=("ALL",), unsafe_fixes=True)
    src = path.read_bytes()
    new = fix_source(src, settings).new
    assert new is not None
    ast.parse(new)
    comments = [ln.split("#", 1)[1] for ln in src.decode().splitlines() if ln.lstrip().startswith("#")]
    new_comments = [ln.split("#", 1)[1] for ln in new.decode().splitlines() if ln.lstrip().startswith("#")]
    assert comments == new_comments  # comment lines are never rewritten
    assert fix_source(new, settings).new == new
