"""0-dim tensors formatted with a format spec, on the CPU and on the rehearsal's device
(tests/rehearsal/test_rehearsal_training.py): prints the two lists."""

import torch

import opaudit.rehearsal as fb


def formatted(device):
    acc = torch.tensor([3.0], device=device).mul_(25.0)[0]  # a top-1 accuracy, as pytorch/examples imagenet keeps it
    loss = torch.tensor(0.5, device=device)
    out = [f"{acc:6.2f}", f"{loss:.4e}", f"{loss}"]
    for x in (torch.nn.Parameter(torch.ones((), device=device)), torch.ones(2, device=device)):
        try:
            out.append(f"{x:.2f}")
        except TypeError as e:
            out.append(type(e).__name__)
    return out


cpu = formatted("cpu")
with fb.simulate("ascend"):
    device = formatted("npu")
print(cpu)
print(device)
