"""The C++ device's calls of the rehearsal's handler (tests/rehearsal/test_engines.py): a dtype and a memory format
come as torch's objects, as a Python kernel gets them, and the fallback compares them as it does. Prints OK."""

import torch

from opaudit.rehearsal import native
from opaudit.rehearsal.simulator import Simulator

sim = Simulator("ascend", force_cpu=["sum", "empty_like"])
seen = []
handle = sim.handle


def watching(func, args, kwargs):
    seen.append((str(func), {k: v for k, v in kwargs.items() if k in ("dtype", "layout", "memory_format")}))
    return handle(func, args, kwargs)


sim.handle = watching  # type: ignore[method-assign]
with sim:
    assert sim.runs_on == "native", native.reason()
    x = torch.ones(3, 2, device="cuda")
    y = x.sum(0, dtype=torch.float64)
    z = torch.empty_like(x, memory_format=torch.contiguous_format)
assert y.dtype == torch.float64 and y.device == x.device and y.cpu().tolist() == [3.0, 3.0]
assert z.shape == x.shape and z.device == x.device
calls = dict(seen)
assert calls["aten.sum.dim_IntList"]["dtype"] is torch.float64, calls
assert calls["aten.empty_like.default"]["memory_format"] is torch.contiguous_format, calls
assert {o.op: o.path for o in sim.stats.fallen_back()} == {"sum.dim_IntList": "cpu", "empty_like": "cpu"}
print("OK")
