"""Three simulations in a row, each with a recording (tests/rehearsal/test_device_names.py): the device-name wrappers
are the same each time, and a recording reuses the last one's plan. Prints ok."""

import torch

from opaudit.rehearsal.simulator import Simulator
from opaudit.standin import cuda_target
from opaudit.tracing import apis
from opaudit.tracing.recorder import Recording, recording

bound, plans = [], []
for _ in range(3):
    with Simulator(cuda_target()):
        with recording(Recording()):
            torch.zeros(2, device="cuda").relu()
        bound.append((torch.zeros, torch.Tensor.to, torch.Tensor.pin_memory))
        plans.append(apis._plan[1])
assert all(a is b for a, b in zip(bound[1], bound[2], strict=True)), "a simulation bound wrappers of its own"
assert plans[1] is not None and plans[2] is plans[1], "the recording resolved its bindings again"
print("ok")
