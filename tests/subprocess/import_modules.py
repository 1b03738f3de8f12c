"""``python import_modules.py NAME...``: import each module from the working folder, as a program run there would
(tests/lint/test_fix_imports.py: a port still imports where the vendor's package is not installed). Prints
imported."""

import importlib
import os
import sys

sys.path.insert(0, os.getcwd())
for name in sys.argv[1:]:
    importlib.import_module(name)
print("imported")
