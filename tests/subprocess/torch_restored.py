"""torch as it was once a rehearsal ends (tests/rehearsal/test_device_names.py): the functions it wrapped, the
Tensor's attributes, no patch left standing. Prints ok."""

import torch
from torch.utils._device import DeviceContext

before = (torch.zeros, torch.fft.fftfreq, torch._C._nn._parse_to, DeviceContext.__init__, dict(vars(torch.Tensor)))

import opaudit.rehearsal as fb  # noqa: E402

with fb.simulate("ascend"):
    assert torch.zeros(1, device="cuda").device.type == "npu"
    assert torch.zeros is not before[0]
after = (torch.zeros, torch.fft.fftfreq, torch._C._nn._parse_to, DeviceContext.__init__, dict(vars(torch.Tensor)))
assert all(a is b for a, b in zip(before[:4], after[:4], strict=True)), after
renamed = {"npu", "is_npu"}  # the PrivateUse1 rename's own methods stay: a process simulates one device type
assert {k: v for k, v in after[4].items() if k not in renamed} == before[4], set(after[4]) ^ set(before[4])

from opaudit.tracing.patching import standing  # noqa: E402

assert not standing
print("ok")
