"""The traced forward pass's default device (opaudit/tracing/default_device.py) answers as ``with torch.device(d)``
does, without a TorchFunctionMode, and leaves torch as it found it."""

from __future__ import annotations

import types

import torch
import torch.nn.functional as F

from opaudit.tracing.default_device import DefaultDevice


def _made(ctx):
    with ctx:
        return {
            "zeros": torch.zeros(2).device,
            "arange": torch.arange(3).device,
            "tensor": torch.tensor([1.0]).device,
            "full": torch.full((2,), 1.0).device,
            "randn": torch.randn(2).device,
            "explicit": torch.ones(2, device="cpu").device,
            "device_none": torch.empty(2, device=None).device,
            "linear": torch.nn.Linear(2, 2).weight.device,
            "inner": _inner(),
            "like": torch.zeros_like(torch.ones(2, device="cpu")).device,  # from its input, not the default
            "fftfreq": torch.fft.fftfreq(4).device,
            "default": torch.get_default_device(),
        }


def _inner():
    with torch.device("cpu"):  # the traced code's own context wins inside it
        return torch.zeros(1).device


def test_factories_land_where_torch_device_puts_them():
    assert _made(DefaultDevice("meta")) == _made(torch.device("meta"))
    made = _made(DefaultDevice("meta"))
    assert made["zeros"].type == "meta" and made["explicit"].type == "cpu" and made["inner"].type == "cpu"


def test_aliases_are_covered_and_everything_is_put_back():
    holder = types.ModuleType("opaudit_test_holder")
    holder.zeros = torch.zeros  # from torch import zeros, in some library
    import sys

    sys.modules[holder.__name__] = holder
    before = (torch.zeros, torch.arange, torch.get_default_device, F.pad)
    try:
        with DefaultDevice("meta"):
            assert holder.zeros(1).device.type == "meta"
            assert torch._C._len_torch_function_stack() == 0  # no mode: nothing taxes the other calls
        assert (torch.zeros, torch.arange, torch.get_default_device, F.pad) == before
        assert holder.zeros is torch.zeros and torch.zeros(1).device.type == "cpu"
    finally:
        del sys.modules[holder.__name__]
