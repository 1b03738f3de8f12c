"""OA109, legacy typed CUDA tensors: a constructor called with int-literal sizes or one data literal is a safe
fix (the same tensor, dtype and device written out, as PyTorch builds it); a class test, a conversion or a
variable argument (a size or data?) stays a suggestion naming the right form; ROCm keeps them (HIP)."""

from __future__ import annotations

import torch

from opaudit.lint import Settings, fix_source, lint_source

SOURCE = (
    "import torch\n"
    "x = torch.cuda.FloatTensor(2, 3)\n"
    "ids = torch.cuda.LongTensor([4, 5, 6])\n"
    "z = torch.cuda.HalfTensor(n)\n"
    "ok = isinstance(x, torch.cuda.FloatTensor)\n"
    "w = x.type(torch.cuda.HalfTensor)\n"
)


def test_literal_constructors_are_fixed_and_the_rest_suggested():
    fixed = fix_source(SOURCE.encode(), Settings(target="musa")).new.decode().splitlines()
    assert fixed[2] == 'x = torch.empty(2, 3, dtype=torch.float32, device="musa")'
    assert fixed[3] == 'ids = torch.tensor([4, 5, 6], dtype=torch.int64, device="musa")'
    assert fixed[4:] == SOURCE.splitlines()[3:]  # not fixed: left as written
    found = {f.line: f for f in lint_source(SOURCE.encode(), Settings(target="musa")).findings if f.code == "OA109"}
    assert sorted(found) == [2, 3, 4, 5, 6]
    assert found[5].replacement == 'x.dtype == torch.float32 and x.device.type == "musa"'
    assert found[6].replacement == 'x.to("musa", torch.float16)'
    assert "torch.empty(" in found[4].replacement and {found[n].fix for n in (4, 5, 6)} == {"suggestion"}


def test_rocm_keeps_them():
    assert not [f for f in lint_source(SOURCE.encode(), Settings(target="rocm")).findings if f.code == "OA109"]


def test_the_fix_builds_what_the_typed_tensor_built():
    # the same shape, dtype and data as the legacy class on the CPU (torch.FloatTensor: the CPU twin)
    fixed = fix_source(b"import torch\na = torch.cuda.ShortTensor(3, 1)\nb = torch.cuda.ByteTensor((7, 8))\n",
                       Settings(target="neutral")).new.decode()
    ns: dict = {}
    exec(fixed.replace("torch.accelerator.current_accelerator()", '"cpu"'), ns)  # no accelerator here
    assert (ns["a"].shape, ns["a"].dtype) == (torch.ShortTensor(3, 1).shape, torch.int16)
    assert torch.equal(ns["b"], torch.ByteTensor((7, 8)))
