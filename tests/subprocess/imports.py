"""What importing opaudit does, in one fresh process (tests/test_imports.py), printed as one JSON line:
whether the linter and the command line import torch; whether the top-level functions stay functions once the
modules that share their names are imported, before and after every module is; and which modules are not the
attribute of their parent package once all of them are imported."""

import importlib
import json
import pkgutil
import sys

import opaudit
import opaudit.cli
import opaudit.lint
import opaudit.report.lint

light = "torch" not in sys.modules

import opaudit.auditing  # noqa: E402
import opaudit.report.html  # noqa: E402
import opaudit.tracing.schema  # noqa: E402


def functions() -> list:
    return [callable(opaudit.audit), callable(opaudit.trace), opaudit.Trace.__name__, opaudit.audit.__module__,
            opaudit.trace.__module__]


before = functions()
names = [m.name for m in pkgutil.walk_packages(opaudit.__path__, "opaudit.") if not m.name.endswith("__main__")]
for name in names:
    importlib.import_module(name)
not_attributes = [name for name in names if getattr(sys.modules[name.rpartition(".")[0]], name.rpartition(".")[2],
                                                    None) is not sys.modules[name]]
print(json.dumps({"torch_imported": not light, "functions": [before, functions()], "modules": len(names),
                  "not_attributes": not_attributes}))
