"""``python documented_function.py NAME FIRST``: opaudit.fallback.NAME after opaudit.fallback.FIRST was used
(tests/fallback/test_install.py): prints the type of opaudit.fallback.NAME."""

import sys

import opaudit.fallback as fb

name, first = sys.argv[1:3]
getattr(fb, first)
print(type(getattr(fb, name)).__name__)
