"""A rehearsal after a backward on the CPU in the same process, and a CPU backward after it
(tests/rehearsal/test_rehearsal_training.py): .cpu() gives a CPU tensor, gradients through a copy to the host come
back to the device. Prints trained."""

import torch

import opaudit.rehearsal as fb

m = torch.nn.Linear(8, 4)
m(torch.randn(2, 8)).sum().backward()  # the autograd engine starts its device threads: no simulated device yet
with fb.simulate("ascend"):
    m2 = torch.nn.Linear(8, 4).to("npu")
    before = m2.weight.detach().cpu().clone()
    opt = torch.optim.AdamW(m2.parameters(), lr=1e-2)
    for _ in range(2):
        with torch.autocast("npu", dtype=torch.bfloat16):
            loss = m2(torch.randn(2, 8, device="npu")).float().sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
    after = m2.weight.detach().cpu()
    assert type(after) is torch.Tensor and after.device.type == "cpu", (type(after), after.device)
    assert not torch.equal(before, after)
    w = torch.ones(3, device="npu", requires_grad=True)
    (w * 2).cpu().sum().backward()  # a gradient through a copy to the host comes back to the device
    assert w.grad is not None and w.grad.device.type == "npu" and w.grad.tolist() == [2.0, 2.0, 2.0]
m(torch.randn(2, 8)).sum().backward()  # and the CPU after it
print("trained")
