"""What torch itself does on a device, the simulated device does too, torch version by version: the rehearsal runs
the installed torch's own Python and C++ on a PrivateUse1 device, and nothing of opaudit's changes it."""

from __future__ import annotations

from helpers import run_cli

NEW_TENSOR = """import torch
x = torch.zeros(3, device="npu")
meta = torch.zeros(3, device="meta")  # torch's own rule for a device that is not the CPU, with nothing simulated
cpu = torch.arange(4)
print("device", x.new_tensor(cpu).device.type, "meta", meta.new_tensor(cpu).device.type,
      "list", x.new_tensor([1, 2]).device.type)
"""


def test_new_tensor_of_a_cpu_tensor_lands_where_torch_puts_it(tmp_path):
    """``x.new_tensor(cpu_tensor)`` is on x's device from torch 2.7 (pytorch/pytorch#144958) and stays on the CPU
    from torch 1.7 to 2.6 (pytorch/pytorch#73838), on CUDA as on every device: the simulated device follows the
    installed torch, so a program that relies on either is held to the torch it runs under."""
    script = tmp_path / "new_tensor_of_a_tensor.py"
    script.write_text(NEW_TENSOR)
    rc, out, err = run_cli("run", "--simulate", "ascend", "--", str(script))
    assert rc == 0, err[-2000:]
    line = next(x for x in out.splitlines() if x.startswith("device "))
    words = line.split()
    device, meta, from_list = words[1], words[3], words[5]
    assert from_list == "npu"
    assert device == ("npu" if meta == "meta" else "cpu"), line
