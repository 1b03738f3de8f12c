"""A star import of one of the project's own modules binds what that module's imports bind (opaudit/lint/stars.py):
``torch`` taken through ``from utils import *`` is torch, its CUDA uses found and ported; ``__all__``, a name the
module binds otherwise, a module that cannot be found and a cycle of star imports are honoured."""

from __future__ import annotations

from pathlib import Path

from opaudit.lint import Settings, fix_source, lint_source

ASCEND = Settings(target="ascend")


def project(tmp_path: Path, files: dict[str, str]) -> Path:
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


def codes(path: Path, settings: Settings = ASCEND) -> list[tuple[int, str]]:
    return [(f.line, f.code) for f in lint_source(path.read_bytes(), settings, str(path)).findings]


DRIVER = (
    "import sys\n"
    "from utils import *\n"
    "device = torch.device('cuda', 0) if torch.cuda.is_available() else torch.device('cpu')\n"  # 3
    "torch.cuda.set_device(0)\n"                                                                  # 4
    "synchronize()\n"                                                                             # 5
    "x = np.zeros(2)\n"
)


def test_torch_through_a_package_that_star_imports_a_module_of_its_own(tmp_path):
    root = project(tmp_path, {
        "utils/__init__.py": "from utils.replay import *\nfrom utils.torch import *\n",
        "utils/replay.py": "from collections import namedtuple\nMemory = namedtuple('Memory', 'a')\n",
        "utils/torch.py": "import torch\nimport numpy as np\nfrom torch.cuda import synchronize\n",
        "examples/train.py": DRIVER,
    })
    driver = root / "examples" / "train.py"
    assert codes(driver) == [(3, "OA102"), (3, "OA117"), (4, "OA114"), (5, "OA401")]
    fixed = fix_source(driver.read_bytes(), ASCEND, str(driver)).new.decode()
    assert "torch.device('npu', 0) if torch.npu.is_available()" in fixed
    assert "torch.npu.set_device(0)" in fixed and "torch.npu.synchronize()" in fixed
    assert "from utils import *" in fixed and "import torch_npu" in fixed


def test_a_relative_star_import(tmp_path):
    root = project(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/common.py": "import torch as T\n",
        "pkg/run.py": "from .common import *\nT.cuda.empty_cache()\n",
        "pkg/sub/__init__.py": "",
        "pkg/sub/x.py": "from .. import *\nfrom ..common import *\nT.cuda.empty_cache()\n",
    })
    assert codes(root / "pkg" / "run.py") == [(2, "OA402")]
    assert codes(root / "pkg" / "sub" / "x.py") == [(3, "OA402")]


def test_all_and_the_modules_own_names_are_honoured(tmp_path):
    root = project(tmp_path, {
        "listed.py": "import torch\nimport numpy as np\n__all__ = ['np']\n__all__ += ['cuda']\n"
                     "from torch import cuda\n",
        "own.py": "import torch\nfrom torch import cuda\ndef cuda():\n    pass\n_private = 1\nimport torch as _t\n",
        "a.py": "from listed import *\ntorch.cuda.synchronize()\ncuda.synchronize()\n",
        "b.py": "from own import *\ntorch.cuda.synchronize()\ncuda.synchronize()\n_t.cuda.synchronize()\n",
    })
    assert codes(root / "a.py") == [(3, "OA401")]  # torch is not in __all__: unknown
    assert codes(root / "b.py") == [(2, "OA401")]  # cuda is own.py's function; _t is not exported


def test_a_module_that_cannot_be_found_and_a_cycle(tmp_path):
    root = project(tmp_path, {
        "a.py": "from b import *\nimport torch\n",
        "b.py": "from a import *\n",
        "c.py": "from b import *\ntorch.cuda.synchronize()\n",
        "d.py": "from nowhere import *\ntorch.cuda.synchronize()\n",
    })
    assert codes(root / "c.py") == [(2, "OA401")]
    assert codes(root / "d.py") == []  # unknown, as without the star import


def test_the_later_binding_wins_and_a_local_binding_hides(tmp_path):
    root = project(tmp_path, {
        "helpers.py": "import torch\n",
        "before.py": "import numpy as torch\nfrom helpers import *\ntorch.cuda.synchronize()\n",
        "after.py": "from helpers import *\nimport numpy as torch\ntorch.cuda.synchronize()\n",
        "local.py": "from helpers import *\ndef f(torch):\n    torch.cuda.synchronize()\ntorch.cuda.synchronize()\n",
    })
    assert codes(root / "before.py") == [(3, "OA401")]
    assert codes(root / "after.py") == []
    assert codes(root / "local.py") == [(4, "OA401")]


def test_what_only_a_type_checker_runs_binds_nothing(tmp_path):
    root = project(tmp_path, {
        "helpers.py": "import torch\n",
        "guarded.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import torch\n"
                      "else:\n    torch = None\n",
        "a.py": "import typing\nif typing.TYPE_CHECKING:\n    from helpers import *\ntorch.cuda.synchronize()\n",
        "b.py": "from guarded import *\ntorch.cuda.synchronize()\n",
        "c.py": "import typing\nif typing.TYPE_CHECKING:\n    pass\nelse:\n    from helpers import *\n"
                "torch.cuda.synchronize()\n",
    })
    assert codes(root / "a.py") == codes(root / "b.py") == []
    assert codes(root / "c.py") == [(6, "OA401")]


def test_without_a_file_on_disk_nothing_is_looked_for():
    assert lint_source(b"from utils import *\ntorch.cuda.synchronize()\n", ASCEND).findings == []
