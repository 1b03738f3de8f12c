"""What is not a CUDA construct stays unreported: a library's name where nothing of the library runs,
the program's own `is_cuda` flag, flags every compiler takes, and deprecations that hold on every device."""

from __future__ import annotations

from opaudit.lint import Settings, fix_source, lint_source

NEUTRAL = Settings(target="neutral")


def lines(source: str, code: str, settings: Settings = NEUTRAL) -> list[int]:
    return [f.line for f in lint_source(source.encode(), settings).findings if f.code == code]


def test_a_library_name_is_reported_where_its_code_runs_only():
    src = (
        "import selective_scan_cuda\n"                                      # 1 import
        "from mamba_ssm.ops.selective_scan_interface import selective_scan_fn, selective_scan_ref\n"  # 2
        "def f(x: selective_scan_fn) -> selective_scan_fn:\n"              # 3 annotations
        "    if selective_scan_cuda is None:\n"                             # 4 availability test
        "        return None\n"
        "    if not selective_scan_cuda or x is None:\n"                    # 6
        "        return None\n"
        "    y = selective_scan_cuda.fwd(x)\n"                              # 8 a call into it
        "    z = selective_scan_ref(x)\n"                                   # 9 the PyTorch reference
        "    w = selective_scan_fn(x) if selective_scan_fn else None\n"     # 10 the call, not the test
        "    del selective_scan_cuda\n"                                     # 11
        "    return y, z, w\n"
    )
    assert lines(src, "OA714") == [1, 2, 8, 10]


def test_the_programs_own_is_cuda_flag_is_not_a_tensors():
    src = (
        "class Runner:\n"
        "    def __init__(self, gpu):\n"
        "        self.is_cuda = gpu\n"
        "    def run(self, x):\n"
        "        return self.is_cuda and x.is_cuda\n"
    )
    found = lint_source(src.encode(), NEUTRAL).findings
    assert [(f.line, f.col) for f in found if f.code == "OA108"] == [(5, 33)]


def test_generic_compiler_flags_given_to_nvcc_are_not_nvcc_flags():
    src = ('args = {"cxx": ["-O3"],\n'
           '        "nvcc": ["-O3", "-std=c++17", "-DNDEBUG", "-I/inc", "--ftz=false", "-DCUDA_HAS_FP16=1"]}\n')
    found = [f.message for f in lint_source(src.encode(), NEUTRAL).findings if f.code == "OA807"]
    assert len(found) == 3
    assert "'nvcc'" in found[0] and "'--ftz=false'" in found[1] and "'-DCUDA_HAS_FP16=1'" in found[2]


def test_the_deprecated_launcher_is_reported_only_when_selected():
    src = "import argparse\np = argparse.ArgumentParser()\np.add_argument('--local_rank', type=int)\n"
    assert lines(src, "OA505") == []
    assert lines(src, "OA505", Settings(target="neutral", extend_select=("OA505",))) == [3]


def test_is_cuda_of_self_is_the_programs_own_unless_the_class_is_a_tensor():
    src = (
        "import torch\n"
        "from torch import nn\n"
        "class Model(nn.Module):\n"
        "    def forward(self, x):\n"
        "        return self.is_cuda\n"      # 5: nn.Module has no is_cuda: the program sets it
        "class Wrapped(torch.Tensor):\n"
        "    def on_gpu(self):\n"
        "        return self.is_cuda\n"      # 8: a tensor's
        "def decomposition(self):\n"
        "    return self.is_cuda\n"          # 10: a parameter named self
    )
    assert lines(src, "OA108") == [8, 10]


def test_an_attribute_of_the_library_read_in_a_test_is_a_use():
    src = "from apex.multi_tensor_apply import multi_tensor_applier\nif multi_tensor_applier.available:\n    pass\n"
    assert lines(src, "OA705") == [1, 2]


def test_a_nested_annotation_is_not_a_use():
    src = "from xformers.ops import fmha\ndef f(op: type[fmha.cutlass.FwOp]) -> list[fmha.Inputs]:\n    return []\n"
    assert lines(src, "OA707") == [1]


def test_a_module_of_the_project_named_like_an_extension_is_its_own_python(tmp_path):
    """OA714 knows compiled extensions by name (selective_scan_cuda); a module of that name the project has as
    Python source, beside the file or in a folder above it up to the project's root, is not one. An
    extension built in place (a .so of that name) still is, and so is a name with no source anywhere."""
    project = tmp_path / "proj"
    (project / "pkg" / "train").mkdir(parents=True)
    (project / "pyproject.toml").write_text("")
    (project / "ops_cuda.py").write_text("def run(x):\n    return x\n")
    (project / "kernels_cuda").mkdir()
    (project / "kernels_cuda" / "__init__.py").write_text("")
    (project / "pkg" / "train" / "fused_cuda.cpython-311-x86_64-linux-gnu.so").write_bytes(b"")
    script = project / "pkg" / "train" / "main.py"
    src = ("import ops_cuda\nimport kernels_cuda\nimport fused_cuda\nimport selective_scan_cuda\nimport importlib\n"
           "y = ops_cuda.run(1)\nz = kernels_cuda.go(y)\nw = fused_cuda.fwd(z)\n"
           "m = importlib.import_module('ops_cuda')\nn = importlib.import_module('causal_conv1d_cuda')\n")
    script.write_text(src)
    found = [(f.line, f.message) for f in lint_source(src.encode(), NEUTRAL, str(script)).findings if f.code == "OA714"]
    assert [line for line, _ in found] == [3, 4, 8, 10], found
    # where the file is not on disk (stdin), nothing tells the project's modules apart: the name decides
    stdin = [f.line for f in lint_source(src.encode(), NEUTRAL).findings if f.code == "OA714"]
    assert stdin == [1, 2, 3, 4, 6, 7, 8, 9, 10]


def test_a_use_cuda_keyword_is_the_profilers_only_on_a_profiler():
    """GRU4REC passes its own `use_cuda=` to its loss and model (hungthanhpham94/GRU4REC-pytorch main.py): not the
    profiler's keyword. torch.autograd.profiler.profile's is, and is ported to use_device= (unsafe)."""
    src = (
        "import torch\n"
        "import lib\n"
        "loss_function = lib.LossFunction(loss_type='TOP1', use_cuda=args.cuda)\n"   # 3 the program's own
        "model = GRU4REC(10, 10, use_cuda=use_cuda)\n"                               # 4
        "with torch.autograd.profiler.profile(use_cuda=use_gpu) as prof:\n"          # 5 the profiler's
        "    pass\n"
        "with torch.profiler.profile(use_cuda=True):\n"                              # 7 (no use_device there)
        "    pass\n"
    )
    ascend = Settings(target="ascend", unsafe_fixes=True)
    assert lines(src, "OA414", ascend) == [5, 7]
    new = fix_source(src.encode(), ascend).new.decode()
    assert 'profile(use_device="npu" if use_gpu else None) as prof' in new and "use_cuda=args.cuda" in new
    assert "torch.profiler.profile(use_cuda=True)" in new


def test_an_unwrapped_data_parallel_takes_its_module_reads_along_and_no_other():
    """nn.DataParallel(m) becomes m on a vendor's device (--unsafe-fixes): `.module` of the names bound to it (in
    the function, or as self.X in any method of the file) becomes the name, and another object's `.module`
    stays (fifth held-out set: stargan-v2's `fan.module.get_heatmap`, PANNs' `model.module.state_dict()`)."""
    src = (
        "import torch\n"
        "from torch import nn\n"
        "def main(model, fan, other):\n"
        "    model = torch.nn.DataParallel(model)\n"
        "    fan = nn.DataParallel(fan).cuda()\n"
        "    fan.get_heatmap = fan.module.get_heatmap\n"
        "    torch.save({'model': model.module.state_dict()}, 'x.pt')\n"
        "    return other.module\n"
        "class Trainer:\n"
        "    def __init__(self, net):\n"
        "        self.parallel = nn.DataParallel(net)\n"
        "    def save(self):\n"
        "        return self.parallel.module.state_dict(), self.other.module\n"
    )
    settings = Settings(target="ascend", unsafe_fixes=True)
    found = lint_source(src.encode(), settings).findings
    # the reads go with the unwrap as info (no exit 1 of their own); the other objects' reads are not findings
    assert sorted((f.line, f.severity) for f in found if f.code == "OA122") == \
        [(4, "error"), (5, "error"), (6, "info"), (7, "info"), (11, "error"), (13, "info")]
    new = fix_source(src.encode(), settings).new.decode()
    assert "model = model\n" in new and "fan = fan.npu()" in new and "fan.get_heatmap = fan.get_heatmap" in new
    assert "model.state_dict()" in new and "self.parallel = net" in new and "self.parallel.state_dict()" in new
    assert "return other.module" in new and "self.other.module" in new and "DataParallel" not in new
    # without --unsafe-fixes nothing of it is rewritten; on the neutral target it stays DataParallel, reported
    assert "nn.DataParallel(fan)" in fix_source(src.encode(), Settings(target="ascend")).new.decode()
    assert [f.line for f in lint_source(src.encode(), NEUTRAL).findings if f.code == "OA122"] == [4, 5, 11]
