"""`import opaudit` stays light (lint and fix never import torch), and the functions that share a name
with a submodule (opaudit.audit, opaudit.trace) stay functions whatever is imported first."""

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


def test_audit_and_trace_stay_functions():
    code = ("import opaudit.audit, opaudit.trace.schema, opaudit.report.html, opaudit; "
            "print(callable(opaudit.audit), callable(opaudit.trace), opaudit.Trace.__name__)")
    assert _run(code) == "True True Trace"
    assert _run("import opaudit; t = opaudit.trace; import opaudit.audit; print(opaudit.audit.__module__, "
                "opaudit.trace is t)") == "opaudit.audit True"
