"""OA101 and a program's own ``cuda``: only a ``.cuda()`` whose receiver may be an instance of a class of the file
that defines ``cuda`` itself (``self`` in it, an instance built from it, a receiver not known to be torch's) is left
for a person to check; a module-level function named ``cuda`` makes no ``.cuda()`` call the program's own."""

from __future__ import annotations

from opaudit.lint import Settings, fix_source, lint_source

ASCEND = Settings(target="ascend")
UNSAFE = Settings(target="ascend", unsafe_fixes=True)


def oa101(src: str) -> dict[int, str]:
    return {f.line: f.fix for f in lint_source(src.encode(), ASCEND).findings if f.code == "OA101"}


HELPER = (
    "import torch\n"
    "def cuda(tensor, uses_cuda):\n"
    "    return tensor.cuda() if uses_cuda else tensor\n"       # 3: the helper's body, a tensor's cuda()
    "net = torch.nn.Linear(2, 2).cuda()\n"                      # 4: made by torch
    "x = cuda(torch.zeros(2), True)\n"
    "y = batch.cuda()\n"                                        # 6: not known
)


def test_a_module_level_function_named_cuda_is_no_method():
    assert oa101(HELPER) == {3: "unsafe", 4: "safe", 6: "unsafe"}
    fixed = fix_source(HELPER.encode(), UNSAFE).new.decode()
    assert ".cuda()" not in fixed
    assert "return tensor.npu() if uses_cuda else tensor" in fixed
    assert "x = cuda(torch.zeros(2), True)" in fixed  # the program's function keeps its name


def test_a_function_named_cuda_in_another_function_is_no_method_either():
    src = "import torch\ndef f(t):\n    def cuda(v):\n        return v.cuda()\n    return cuda(t)\n"
    assert oa101(src) == {4: "unsafe"}


OWN_CLASS = (
    "import torch\n"
    "class Shadow:\n"
    "    def cuda(self, device=None):\n"
    "        self.w = {k: v.cuda(device) for k, v in self.w.items()}\n"   # 4: not known: may be a Shadow
    "        return self\n"
    "    def moved(self):\n"
    "        return self.cuda()\n"                                         # 7: self of the class: its own
    "class Net(torch.nn.Module):\n"
    "    if True:\n"
    "        def cuda(self, device=None):\n"
    "            return super().cuda(device)\n"
    "    def go(self):\n"
    "        return self.cuda()\n"                                         # 13: Net defines cuda (under an if)
    "s = Shadow().cuda()\n"                                                # 14: an instance of it
    "n = Net().cuda()\n"                                                   # 15: an instance of it
    "t = torch.ones(3).cuda()\n"                                           # 16: torch's
    "m = torch.nn.Linear(2, 2)\n"
    "m = m.cuda()\n"                                                       # 18: torch's
)


def test_only_what_may_be_an_instance_of_a_class_with_its_own_cuda_is_left_to_check():
    found = oa101(OWN_CLASS)
    assert {line for line, fix in found.items() if fix == "report"} == {4, 7, 11, 13, 14, 15}
    assert found[16] == found[18] == "safe"
    fixed = fix_source(OWN_CLASS.encode(), UNSAFE).new.decode().splitlines()
    assert fixed[1] == "import torch_npu"  # (the lines below move by one)
    assert fixed[16] == "t = torch.ones(3).npu()" and fixed[18] == "m = m.npu()"
    assert fixed[14] == "s = Shadow().cuda()" and fixed[7] == "        return self.cuda()"


NORMALIZER = (
    "import torch\n"
    "class Normalizer(object):\n"
    "    def __init__(self, x, scale):\n"
    "        self.mean = torch.mean(x, 0)\n"
    "        self.scale = scale\n"
    "    def cuda(self):\n"
    "        self.mean = self.mean.cuda()\n"                        # 7: every binding of self.mean is torch's
    "        self.scale = self.scale.cuda()\n"                      # 8: self.scale is a parameter's value
    "        self.mean, self.other = self.mean.cuda(), None\n"
    "class Other(object):\n"
    "    def __init__(self, x):\n"
    "        self.mean = torch.mean(x, 0)\n"
    "    def cuda(self):\n"
    "        self.mean = self.mean.cuda()\n"                        # 14: known
)


def test_an_attribute_of_self_is_known_where_every_binding_of_it_in_the_class_is():
    """FEDformer's normalizers move their own statistics in their own cuda(): self.mean is bound only to torch's
    tensors in the class's methods, so its .cuda() is a tensor's; an attribute bound to a parameter's value, or
    unpacked from a tuple somewhere in the class, stays for a person to check."""
    assert oa101(NORMALIZER) == {7: "report", 8: "report", 9: "report", 14: "safe"}
    assert oa101(NORMALIZER.replace("        self.mean, self.other = self.mean.cuda(), None\n", "")) == \
        {7: "safe", 8: "report", 13: "safe"}
