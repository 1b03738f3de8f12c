"""`import opaudit` stays light (lint and fix never import torch), every module imports as a module, and no
function shares its name with a module on any import path: checked in one fresh process
(tests/subprocess/imports.py), in that order."""

from __future__ import annotations

import json

import pytest
from helpers import run_python


@pytest.fixture(scope="module")
def imported() -> dict:
    done = run_python("imports.py")
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def test_the_linter_and_the_command_line_do_not_import_torch(imported):
    assert imported["torch_imported"] is False


def test_every_module_is_a_module_on_its_parent(imported):
    """`import opaudit.x.y as m` gives the module, and the attribute path opaudit.x.y reaches the same object,
    whatever was imported before (each module is checked after all of them are imported)."""
    assert imported["modules"] > 60 and imported["not_attributes"] == []


def test_the_top_level_functions_stay_functions(imported):
    """Once the modules that share their names are imported, and once every module is."""
    for functions in imported["functions"]:
        assert functions == [True, True, "Trace", "opaudit.auditing", "opaudit.api"]  # (opaudit.trace: the API's)


def test_a_rehearsal_does_not_load_the_linter():
    """Each `run --simulate` reads the targets' data (lint.catalogue); the linter's engine (libcst) came with it
    through the package's __init__, half a second of every rehearsal's start."""
    done = run_python("rehearsal_imports.py")
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout) == {"libcst": False, "torch": True}
