"""Fixes that follow values: a device string and the device-type probes derived from it are ported
together, capability probes in one condition together or not at all, a backend name kept in a variable
with the call that takes it (tests/fixtures/lint/dataflow/)."""

from __future__ import annotations

import ast

from helpers import FIXTURES

from opaudit.lint import Settings, fix_source, lint_source

GPT = (FIXTURES / "lint" / "dataflow" / "gpt_train.py").read_bytes()


def _lines(code: bytes) -> list[str]:
    return [ln.strip() for ln in code.decode().splitlines()]


def test_safe_fix_ports_device_strings_with_their_probes():
    new = fix_source(GPT, Settings(target="ascend")).new
    ast.parse(new)
    lines = _lines(new)
    # the device, the f-string kept in it and the probes derived from it: all or nothing, here all
    assert 'device = "npu"' in lines and 'device = f"npu:{local_rank}"' in lines
    assert 'device_type = "npu" if "npu" in device else "cpu"' in lines
    assert 'if device_type == "npu":' in lines
    assert "torch.npu.set_device(device)" in lines
    assert 'backend = "hccl"' in lines  # passed as init_process_group's backend
    # is_available alone is safe, is_bf16_supported is not: one condition, so neither moves without
    # --unsafe-fixes (half a port would pick float16 on a bf16 device)
    assert any("torch.cuda.is_available() and torch.cuda.is_bf16_supported()" in ln for ln in lines)
    # a parameter compared with "cuda" gets its value from callers whose device strings the port rewrites:
    # left as it was, the fused optimizer would turn off on the target (a safe fix changing behaviour)
    assert 'use_fused = device_type == "npu"' in lines
    assert "cuda" not in new.decode().replace("torch.cuda.is_available() and torch.cuda.is_bf16_supported()", "")
    assert fix_source(new, Settings(target="ascend")).new == new


def test_unsafe_fix_takes_the_whole_condition_and_the_parameters():
    new = fix_source(GPT, Settings(target="ascend", unsafe_fixes=True)).new
    lines = _lines(new)
    assert any("torch.npu.is_available() and torch.npu.is_bf16_supported()" in ln for ln in lines)
    assert 'use_fused = device_type == "npu"' in lines
    assert "cuda" not in new.decode()


def test_probe_messages_say_why():
    found = {(f.line, f.code): f for f in lint_source(GPT, Settings(target="ascend")).findings}
    assert found[(11, "OA120")].fix == "unsafe" and found[(11, "OA117")].fix == "unsafe"
    assert "other probes of its condition" in found[(11, "OA117")].message
    assert found[(18, "OA105")].fix == "safe" and "device strings it tests" in found[(18, "OA105")].message


def test_a_probe_on_a_tensor_stays_a_suggestion():
    src = b'import torch\ndef f(x):\n    return x.device.type == "cuda"\n'
    (finding,) = lint_source(src, Settings(target="ascend")).findings
    assert finding.code == "OA105" and finding.fix == "suggestion"
    assert fix_source(src, Settings(target="ascend", unsafe_fixes=True)).new == src


def test_a_probe_without_rewrite_holds_back_its_device_string():
    # neutral: a device-type probe has no faithful rewrite (on a host without accelerator the type is "cpu")
    src = b'import torch\ndevice = "cuda"\nx = torch.ones(1).to(device)\npin = "cuda" in device\n'
    new = fix_source(src, Settings(target="neutral", unsafe_fixes=True)).new
    assert new == src


def test_a_name_of_one_function_is_not_the_same_name_of_another():
    """`device = "cuda"` in a() is not made safe by `.to(device)` in b(): names are kept apart per scope, and
    a finished scope's key was its id(), which Python gave to the next function's scope."""
    src = (b'import torch\ndef a():\n    device = "cuda"\n    return device\n'
           b'def b(m, get):\n    device = get()\n    return m.to(device)\n')
    found = [(f.line, f.code, f.fix) for f in lint_source(src, Settings(target="ascend", select=("ALL",))).findings]
    assert found == [(3, "OA103", "unsafe")]


PANNS = b"""import logging
import torch
def train(args, model):
    device = torch.device('cuda') if args.cuda and torch.cuda.is_available() else torch.device('cpu')
    if 'cuda' in str(device):
        logging.info('Using GPU.')
        device = 'cuda'
    else:
        device = 'cpu'
    if 'cuda' in str(device):
        model.to(device)
"""


def test_a_probe_of_str_of_a_device_goes_with_the_device():
    """`'cuda' in str(device)`, device a torch.device: ported with the device (left as it was, the port would
    never take the branch and run on the CPU)."""
    for settings in (Settings(target="ascend"), Settings(target="ascend", unsafe_fixes=True)):
        new = fix_source(PANNS, settings).new.decode()
        assert "if 'npu' in str(device):" in new and "'cuda' in" not in new
        assert "torch.device('npu')" in new and "device = 'npu'" in new
    found = [f for f in lint_source(PANNS, Settings(target="musa")).findings if f.code == "OA105"]
    assert [f.line for f in found] == [5, 10] and all(f.fix == "safe" for f in found)
    # neutral: the probe has no faithful rewrite, so the device it tests is held back with it
    new = fix_source(PANNS, Settings(target="neutral", unsafe_fixes=True)).new.decode()
    assert "torch.device('cuda')" in new and "'cuda' in str(device)" in new


def test_a_substring_test_of_text_stays_reported():
    src = (b'import torch\nsome_unrelated_text = open("log").read()\nif "cuda" in some_unrelated_text:\n    pass\n'
           b'if "cuda" in str(some_unrelated_text):\n    pass\n'
           b'def f(x):\n    return "cuda" in str(x.device)\n')
    settings = Settings(target="ascend", unsafe_fixes=True)
    assert fix_source(src, settings).new == src
    found = [f for f in lint_source(src, settings).findings if f.code == "OA105"]
    assert [f.line for f in found] == [3, 5, 8] and all(f.fix == "suggestion" for f in found)
    # the same test of a name bound to a device string is ported with it
    src = b'import torch\ndevice = "cuda"\nok = "cuda" in str(device)\n'
    expected = b'import torch\nimport torch_npu\ndevice = "npu"\nok = "npu" in str(device)\n'
    assert fix_source(src, settings).new == expected


def test_a_prefix_test_of_a_device_attribute_is_of_a_device_string():
    """`opt.device.startswith("cuda")` (allanj/pytorch_neural_crf trainer.py's set_seed): only a string has
    startswith (a tensor's .device has none), so opt.device holds a device string and the test is ported with the
    branch it guards; `str(x.device).startswith("cuda")` keeps its doubt."""
    src = (b'import torch\ndef set_seed(opt, seed):\n    if opt.device.startswith("cuda"):\n'
           b'        torch.cuda.manual_seed(seed)\n')
    new = fix_source(src, Settings(target="ascend", unsafe_fixes=True)).new
    assert b'opt.device.startswith("npu")' in new and b"torch.npu.manual_seed(seed)" in new
    doubt = b'def f(x):\n    return str(x.device).startswith("cuda")\n'
    assert fix_source(doubt, Settings(target="ascend", unsafe_fixes=True)).new == doubt


def test_the_device_type_of_a_device_name_goes_with_the_device():
    """`device.type == "cuda"` of a name bound to torch.device("cuda" ...): ported with the device (left as it was,
    the port's `use_amp = device.type == "cuda"` turns mixed precision off on the target and skips what the branch
    does); a tensor's `x.device.type` stays a judgement."""
    src = (b'import torch\ndevice = torch.device("cuda" if torch.cuda.is_available() else "cpu")\n'
           b'use_amp = device.type == "cuda"\n'
           b'def step(x):\n    return x.device.type == "cuda"\n')
    new = fix_source(src, Settings(target="ascend")).new
    assert b'use_amp = device.type == "npu"' in new and b'torch.device("npu" if torch.npu.is_available()' in new
    assert b'return x.device.type == "cuda"' in new


def test_a_test_that_guards_a_ported_move_goes_with_it():
    """`m.cuda() if self.device.type == "cuda" else m` (Time-Series-Library's wavelet layers, whose device comes
    from another file): the test guards the `.cuda()` the port rewrites, so it is ported with it, else the branch
    would be false on the target and the ported move would never run; the same attribute read in another method
    of the class goes with it. A test that guards no move, of a value nothing shows is a device, is not rewritten."""
    src = (b'import torch.nn as nn\n'
           b'class M(nn.Module):\n'
           b'    def __init__(self, device):\n'
           b'        super().__init__()\n'
           b'        self.device = device\n'
           b'        self.l = nn.Linear(2, 2).cuda() if self.device.type == "cuda" else nn.Linear(2, 2)\n'
           b'    def forward(self, x):\n'
           b'        if self.device.type == "cuda":\n'
           b'            print("gpu")\n'
           b'        return self.l(x)\n'
           b'class N(nn.Module):\n'
           b'    def forward(self, x):\n'
           b'        if self.device.type == "cuda":\n'
           b'            print("gpu")\n'
           b'        return x\n')
    new = fix_source(src, Settings(target="ascend")).new
    assert b'nn.Linear(2, 2).npu() if self.device.type == "npu" else' in new
    assert new.count(b'self.device.type == "npu"') == 2 and new.count(b'self.device.type == "cuda"') == 1
    unguarded = src.replace(b'nn.Linear(2, 2).cuda() if self.device.type == "cuda" else nn.Linear(2, 2)',
                            b'nn.Linear(2, 2)')
    assert fix_source(unguarded, Settings(target="ascend", unsafe_fixes=True)).new == unguarded


UTILS = b"""import warnings
import torch
import torch.backends.cudnn


def synchronize():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def setup_seed(seed, deterministic=False):
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)
    if torch.backends.cudnn.is_available() and deterministic:
        torch.backends.cudnn.deterministic = True


def check_compile():
    gpu_ok = False
    if torch.cuda.is_available():
        device_cap = torch.cuda.get_device_capability()
        if device_cap in ((7, 0), (8, 0), (9, 0)):
            gpu_ok = True
    if not gpu_ok:
        warnings.warn("GPU is not NVIDIA V100, A100, or H100")
    return gpu_ok


def warm():
    if torch.cuda.is_available():
        check_compile()
"""


def test_a_probe_that_guards_a_block_of_its_own_is_ported_beside_a_stuck_call():
    """A CUDA-only call with no port (get_device_capability, OA119) holds back the probes that reach it: the one
    that guards it, and one whose block calls the function holding it. A probe guarding only calls of its own block,
    in another function, is ported (the target there runs what it should: its own synchronize, its own seed). The
    cuDNN probe guarding only the determinism flag (info) is info, and so is the import used only by them: the rest
    of the file is what is left (RT-DETRv2's src/misc/dist_utils.py, lyuwenyu/RT-DETR at 068dfde)."""
    for target, module in (("ascend", "npu"), ("musa", "musa")):
        new = fix_source(UTILS, Settings(target=target)).new.decode()
        assert f"    if torch.{module}.is_available():\n        torch.{module}.synchronize()\n" in new
        assert f"    if torch.{module}.is_available():\n        torch.{module}.manual_seed_all(seed)\n" in new
        assert "    if torch.cuda.is_available():\n        device_cap = torch.cuda.get_device_capability()" in new
        assert "    if torch.cuda.is_available():\n        check_compile()\n" in new
    found = {(f.line, f.code): f for f in lint_source(UTILS, Settings(target="ascend")).findings}
    assert found[(15, "OA612")].severity == "info" and "only guards flags" in found[(15, "OA612")].message
    assert found[(3, "OA419")].severity == "info"
    fixed = fix_source(UTILS, Settings(target="ascend")).new
    left = [(f.line, f.code) for f in lint_source(fixed, Settings(target="ascend")).findings if f.blocking]
    assert left == [(22, "OA117"), (23, "OA119"), (32, "OA117")], left  # (one line down: import torch_npu)


def test_a_probe_whose_answer_goes_further_stays_with_the_stuck_call():
    """An assignment, a return or a jump in the guarded block carries the probe's answer past it: held back."""
    stuck = b"def cap():\n    return torch.cuda.get_device_capability()\n"
    for block in ("    use_gpu = True\n", "    return 'gpu'\n", "    raise SystemExit\n",
                  "    for _ in range(2):\n        torch.cuda.synchronize()\n"):
        src = b"import torch\n" + stuck + b"def f():\n    if torch.cuda.is_available():\n" + block.encode()
        new = fix_source(src, Settings(target="ascend", unsafe_fixes=True)).new
        assert new is None or b"torch.cuda.is_available()" in new, block
    src = b"import torch\n" + stuck + b"def f():\n    if torch.cuda.is_available():\n        torch.cuda.synchronize()\n"
    assert b"if torch.npu.is_available():" in fix_source(src, Settings(target="ascend")).new
    guard = b"import torch\nif torch.backends.cudnn.is_available():\n    torch.backends.cudnn.enabled = False\n"
    (f,) = lint_source(guard, Settings(target="ascend")).findings[:1]
    assert f.code == "OA612" and f.severity != "info"  # OA603 is no info flag: the guard is no info either
