"""``python with_pth.py SCRIPT ARGS...``: opaudit's .pth file processed as site-packages would process it (an
editable checkout has it in the package folder, not in site-packages), then SCRIPT run as ``__main__`` with ARGS
(tests/fallback/test_autostart.py, test_install.py)."""

import runpy
import site
import sys
from pathlib import Path

site.addsitedir(str(Path(__file__).resolve().parents[2] / "opaudit" / "fallback"))
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
