"""``python documented_function.py PACKAGE NAME FIRST``: opaudit.PACKAGE.NAME after opaudit.PACKAGE.FIRST was used
(tests/fallback/test_install.py): prints the type of opaudit.PACKAGE.NAME."""

import importlib
import sys

package, name, first = sys.argv[1:4]
module = importlib.import_module(f"opaudit.{package}")
getattr(module, first)
print(type(getattr(module, name)).__name__)
