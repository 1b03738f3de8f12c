"""torch.npu.matmul.allow_hf32 during a rehearsal on ascend, and torch.npu after it (tests/rehearsal/test_simulate.py):
prints whether torch.npu still has the flags once the rehearsal has ended."""

import torch

import opaudit.rehearsal as f

with f.simulate("ascend"):
    assert torch.npu.matmul.allow_hf32 is False  # torch_npu's default
    torch.npu.matmul.allow_hf32 = True
print(hasattr(torch.npu, "matmul"), hasattr(torch.npu, "conv"))
