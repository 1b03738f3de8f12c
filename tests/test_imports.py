"""`import opaudit` stays light (lint and fix never import torch), every module imports as a module, and no
function shares its name with a module on any import path."""

from __future__ import annotations

import subprocess
import sys

from helpers import ROOT


def _run(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, capture_output=True,
                          text=True).stdout.strip()


def test_the_linter_and_the_command_line_do_not_import_torch():
    assert _run("import sys, opaudit, opaudit.cli, opaudit.lint, opaudit.report.lint; "
                "print('torch' in sys.modules)") == "False"


def test_every_module_is_a_module_on_its_parent():
    """`import opaudit.x.y as m` gives the module, and the attribute path opaudit.x.y reaches the same object,
    whatever was imported before (each module is checked after all of them are imported)."""
    code = """
import importlib, pkgutil, sys, types, opaudit
names = [m.name for m in pkgutil.walk_packages(opaudit.__path__, "opaudit.") if not m.name.endswith("__main__")]
for name in names:
    importlib.import_module(name)
bad = [name for name in names
       if getattr(sys.modules[name.rpartition(".")[0]], name.rpartition(".")[2], None) is not sys.modules[name]]
print(len(names), bad)
"""
    count, bad = _run(code).split(" ", 1)
    assert int(count) > 60 and bad == "[]"


def test_the_top_level_functions_stay_functions():
    code = ("import opaudit.auditing, opaudit.tracing.schema, opaudit.report.html, opaudit; "
            "print(callable(opaudit.audit), callable(opaudit.trace), opaudit.Trace.__name__, "
            "opaudit.audit.__module__, opaudit.trace.__module__)")
    assert _run(code) == "True True Trace opaudit.auditing opaudit.tracing.run"
