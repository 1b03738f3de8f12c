"""``opaudit ARGS`` in a Python where transformers cannot be imported, as where it is not installed
(tests/test_cli.py)."""

import sys

sys.modules["transformers"] = None  # type: ignore[assignment]  # import transformers raises ImportError

from opaudit.cli import main  # noqa: E402

main(sys.argv[1:])
