"""What fix says it fixed, and the plugin import it adds: counted as lint counts (the import a rewrite needs
is part of the rewrite), and guarded on request (--guarded-import, guarded-import in [tool.opaudit])."""

from __future__ import annotations

import re

from helpers import run_cli, run_python

# a package of the usual kind: a trainer that picks its device, a helper that seeds every generator
TRAINER = ("import torch\n\n\nclass Trainer:\n    def __init__(self, model):\n"
           "        self.device = 'cuda' if torch.cuda.is_available() else 'cpu'\n"
           "        self.model = model.to(self.device)\n")
UTILS = ("\"\"\"Helpers.\"\"\"\nimport random\n\nimport torch\n\n\ndef set_seed(seed):\n    random.seed(seed)\n"
         "    torch.manual_seed(seed)\n    torch.cuda.manual_seed_all(seed)\n")


def _project(root):
    (root / "pkg").mkdir()
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "trainer.py").write_text(TRAINER)
    (root / "pkg" / "utils.py").write_text(UTILS)
    return root


def _count(pattern: str, text: str) -> int:
    m = re.search(pattern, text)
    assert m, text
    return int(m.group(1))


def test_fix_counts_what_lint_found(tmp_path):
    root = _project(tmp_path)
    rc, out, _ = run_cli("lint", "--target", "ascend", str(root), cwd=root)
    found = _count(r"Found (\d+) finding", out)
    rc, out, err = run_cli("fix", "--target", "ascend", str(root), cwd=root)
    assert _count(r"Fixed (\d+) finding", out) == found == 3, out + err
    assert "import torch_npu" in (root / "pkg" / "trainer.py").read_text()  # added, not counted


def test_guarded_import_from_the_option_and_from_pyproject(tmp_path):
    root = _project(tmp_path)
    rc, out, err = run_cli("fix", "--target", "ascend", "--guarded-import", str(root), cwd=root)
    assert rc == 0, out + err
    text = (root / "pkg" / "utils.py").read_text()
    assert "try:\n    import torch_npu  # noqa: F401" in text and "except ImportError:" in text
    assert text.index("import torch\n") < text.index("try:") < text.index("def set_seed")
    # the port still imports (and runs on the CPU) where torch_npu is not installed
    proc = run_python("import_modules.py", "pkg.utils", "pkg.trainer", cwd=root, timeout=120)
    assert proc.returncode == 0 and "imported" in proc.stdout, proc.stderr
    # fixing again changes nothing
    rc, out, err = run_cli("fix", "--target", "ascend", "--guarded-import", "--diff", str(root), cwd=root)
    assert rc == 0 and "0 files would be changed" in err, out + err

    other = tmp_path / "other"
    other.mkdir()
    _project(other)
    (other / "pyproject.toml").write_text('[tool.opaudit]\ntarget = "ascend"\nguarded-import = true\n')
    rc, out, err = run_cli("fix", str(other), cwd=other)
    assert rc == 0, out + err
    assert "except ImportError:" in (other / "pkg" / "trainer.py").read_text()
