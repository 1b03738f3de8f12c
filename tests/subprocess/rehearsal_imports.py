"""What a rehearsal imports (tests/test_imports.py): the modules `opaudit run --simulate` loads before the script
runs, and the target's data it reads (opaudit.rehearsal.device: lint.catalogue's target), in a fresh process;
prints whether the linter's engine (libcst) came with them, as one JSON line."""

import json
import sys

import opaudit.cli.run  # noqa: F401
import opaudit.rehearsal.device  # noqa: F401
import opaudit.rehearsal.script  # noqa: F401
from opaudit.lint.catalogue import load_target

load_target("ascend")
print(json.dumps({"libcst": "libcst" in sys.modules, "torch": "torch" in sys.modules}))
