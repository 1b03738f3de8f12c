from opaudit.cli import entry

entry()
