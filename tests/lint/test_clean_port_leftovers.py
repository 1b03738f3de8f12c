"""What a port may keep without holding CUDA use: an import of a CUDA-only torch module whose every use is an info
finding (it loads on every torch build), a class test against nn.DataParallel, and a map_location function that
keeps each storage on the CPU; and what still counts."""

from __future__ import annotations

from opaudit.lint import Settings, fix_source, lint_source
from opaudit.rehearsal.verify import is_cuda_use

ASCEND = Settings(target="ascend")


def found(src: str, settings: Settings = ASCEND) -> dict[tuple[int, str], str]:
    return {(f.line, f.code): f.severity for f in lint_source(src.encode(), settings).findings}


def left_as_cuda_use(src: str) -> list[str]:
    """The findings of the fixed code that fix --verify counts as CUDA use left."""
    new = fix_source(src.encode(), ASCEND).new
    return [f.code for f in lint_source(new, ASCEND).findings if f.blocking and is_cuda_use(f.code)]


def test_an_import_used_only_by_info_flags_is_info():
    src = "import torch\nfrom torch.backends import cudnn\ncudnn.benchmark = True\ncudnn.deterministic = True\n"
    assert found(src) == {(2, "OA419"): "info", (3, "OA601"): "info", (4, "OA602"): "info"}
    assert left_as_cuda_use(src) == []
    aliased = "import torch.backends.cudnn as cudnn\ndef setup():\n    cudnn.benchmark = True\n"
    assert found(aliased)[(1, "OA419")] == "info"


def test_an_import_with_one_cuda_use_stays_blocking():
    src = "import torch.backends.cudnn as cudnn\ncudnn.benchmark = True\ncudnn.enabled = False\n"
    assert found(src)[(1, "OA419")] == "error"
    # a use before the import in the file's order (a function defined above it) counts as well
    above = "def f():\n    cudnn.enabled = False\nimport torch.backends.cudnn as cudnn\n"
    assert found(above)[(3, "OA419")] == "error"
    amp = "import torch\nfrom torch.cuda.amp import GradScaler\nscaler = GradScaler()\n"
    assert found(amp)[(2, "OA419")] == "error"
    assert found("from torch.cuda import *\n")[(1, "OA419")] == "error"  # what a star binds is not known


def test_the_run_s_info_codes_decide():
    src = "import torch\nfrom torch.backends import cudnn\ncudnn.benchmark = True\n"
    everything = Settings(target="ascend", info=("OA9",))  # no OA6 code is info in this run
    assert found(src, everything) == {(2, "OA419"): "error", (3, "OA601"): "error"}


def test_a_class_test_against_data_parallel_is_no_use():
    src = (
        "import torch\n"
        "import torch.nn as nn\n"
        "model = nn.DataParallel(model)\n"                                            # 3: a use
        "net = model.module if isinstance(model, torch.nn.DataParallel) else model\n"
        "ok = isinstance(model, (nn.DataParallel, nn.parallel.DistributedDataParallel))\n"
        "same = type(model) is nn.DataParallel or issubclass(type(model), nn.DataParallel)\n"
        "kinds = [nn.DataParallel]\n"                                                  # 7: passed on
        "def f(isinstance):\n"
        "    return isinstance(model, nn.DataParallel)\n"                              # 9: not the builtin
    )
    # (line 4's `model.module` goes with line 3's unwrap, as info: test_precision's unwrap test)
    assert [line for (line, code), severity in found(src).items() if code == "OA122" and severity != "info"] == \
        [3, 7, 9]


def test_a_map_location_that_keeps_storages_on_the_cpu_is_no_use():
    src = (
        "import torch\n"
        "a = torch.load(p, map_location=lambda storage, loc: storage)\n"
        "b = torch.load(p, map_location=lambda s, l: s.cpu())\n"
        "c = torch.load(p, map_location=lambda s, l: s.to('cpu'))\n"
        "d = torch.load(p, map_location=lambda s, l: s.cuda(0))\n"         # 5: moved to CUDA
        "e = torch.load(p, map_location=lambda s, l: l)\n"                 # 6: where it was saved
        "f = torch.load(p, map_location=lambda s, l: restore(s, l))\n"     # 7: not known
    )
    assert [line for line, code in found(src) if code == "OA111"] == [5, 6, 7]
