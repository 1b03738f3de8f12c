"""lint/: what the source assumes about CUDA, and the rewrites for a target.

    from opaudit.lint import Settings, run, lint_source, fix_source

    result = run(["train.py"], Settings(target="ascend"))             # lint: findings, nothing written
    result = run(["src/"], Settings(target="ascend"), fix=True)       # fix: files rewritten atomically
    fix_source(b"x = t.cuda()\\n", Settings(target="ascend", unsafe_fixes=True)).new

The rules are data (rules/catalogue.toml, one table per code, with examples that are also tests);
what a construct becomes per target is data too (rules/targets/*.toml). ``opaudit rules`` lists the
rules, ``opaudit explain OA101`` prints one.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opaudit.lint.catalogue import Catalogue, Rule, Target, load_catalogue, load_target, target_names
    from opaudit.lint.config import Config, find_config
    from opaudit.lint.engine import Run, Settings, collect, fix_source, lint_source, run
    from opaudit.lint.findings import FileResult, Finding

# Each name from its module on first use: the rehearsal reads the targets' data (lint.catalogue) in every run,
# and importing the engine with it (libcst's parser and matchers) cost each `run --simulate` 0.7 s.
_WHERE = {
    **dict.fromkeys(("Catalogue", "Rule", "Target", "load_catalogue", "load_target", "target_names"), "catalogue"),
    **dict.fromkeys(("Config", "find_config"), "config"),
    **dict.fromkeys(("Run", "Settings", "collect", "fix_source", "lint_source", "run"), "engine"),
    **dict.fromkeys(("FileResult", "Finding"), "findings"),
}
__all__ = ["Catalogue", "Config", "FileResult", "Finding", "Rule", "Run", "Settings", "Target", "load_catalogue",
           "collect", "find_config", "fix_source", "lint_source", "load_target", "run", "target_names"]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{module}"), name)
