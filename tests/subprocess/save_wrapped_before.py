"""A wrapper put on torch.save and torch.load before a rehearsal, then a checkpoint saved and loaded in it
(tests/rehearsal/test_checkpoint.py): prints the wrapper's calls and the loaded tensor's device."""

import io

import torch

import opaudit.rehearsal as fb

calls = []


def counted(name, fn):
    def wrapper(*args, **kwargs):
        calls.append(name)
        return fn(*args, **kwargs)
    return wrapper


torch.save, torch.load = counted("save", torch.save), counted("load", torch.load)
with fb.simulate("ascend"):
    buf = io.BytesIO()
    torch.save({"w": torch.ones(2, device="npu")}, buf)
    buf.seek(0)
    back = torch.load(buf)
print(calls, back["w"].device)
