"""The simulated device's memory counters per device index (tests/rehearsal/test_memory.py): two lines of numbers."""

import torch

from opaudit.rehearsal import simulate

with simulate("ascend", device_count=2):
    a = torch.empty(1000, dtype=torch.uint8, device="npu:0")
    b = torch.empty(3000, dtype=torch.uint8, device="npu:1")
    c = b[10:]
    torch.npu.set_device(1)
    print(torch.npu.memory_allocated(0), torch.npu.memory_allocated(1), torch.npu.memory_allocated(),
          torch.npu.memory_allocated("npu:0"), torch.npu.max_memory_allocated(torch.device("npu", 1)))
    del b, c
    torch.npu.reset_peak_memory_stats(0)
    print(torch.npu.memory_allocated(1), torch.npu.max_memory_allocated(1), torch.npu.max_memory_allocated(0))
