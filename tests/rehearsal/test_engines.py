"""The rehearsal's two device engines (opaudit.rehearsal.native) give the same answer on the same script: the C++
device, where an op the target runs natively costs no Python, and the Python wrapper tensors, which run where
the C++ device cannot be built. Each script is rehearsed by the command line once per engine; the statistics
agree op by op (the path and status of every op, the calls of every op that did not run natively), and a
training run ends with the same parameters.

The engines differ where a real device and a tensor subclass differ in PyTorch itself, which these tests name
(ENGINE_PATHS): the C++ device's tensors are device tensors to torch, the wrapper's are subclasses
(at::isTensorSubclassLike), for which reshape views instead of calling ``_reshape_alias`` and AccumulateGrad
adds out of place instead of in place; the C++ device receives a host tensor's copy to it (model.to) as
``_to_copy``, where the wrapper's Python key never sees it; and the wrapper's parameter swap asks
``_has_compatible_shallow_copy_type`` as an op."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import FIXTURES, ROOT, rehearsed_ops, run_cli, run_python

# op -> the op the other engine runs in its place (None: nothing), native first (module doc)
ENGINE_PATHS = {"_reshape_alias": "view", "add_.Tensor": "add.Tensor", "_to_copy": None,
                "_has_compatible_shallow_copy_type": None}

SCRIPTS = {
    "gpt-bf16": ("ascend", str(FIXTURES / "fallback" / "gpt_amp_cuda.py"), "--dtype", "bfloat16", "--dropout", "0"),
    "gpt-fp32-dropout": ("musa@1.3.0", str(FIXTURES / "fallback" / "gpt_amp_cuda.py"), "--dtype", "float32",
                         "--dropout", "0.1"),
    "gru-backward-fallback": ("ascend", str(FIXTURES / "fallback" / "backward_missing.py"), "grucell"),
    "elu-backward-fallback": ("musa@1.3.0", str(FIXTURES / "fallback" / "backward_missing.py"), "elu"),
    "lstm-packed": ("cambricon", str(FIXTURES / "fallback" / "rnn_step.py"), "LSTM", "packed"),
}


def _rehearse(tmp_path, engine: str, target: str, script: str, *args: str) -> tuple[int, dict, str]:
    stats = tmp_path / f"{engine}.json"
    out = tmp_path / f"{engine}.pt"
    extra = ("--out", str(out)) if script.endswith("gpt_amp_cuda.py") else ()
    rc, stdout, stderr = run_cli("run", "--simulate", target, "--stats", str(stats), "--", script, *args, *extra,
                                 cwd=tmp_path, env={"OPAUDIT_REHEARSAL_DEVICE": engine})
    assert rc == 0, stderr[-3000:]
    data = json.loads(stats.read_text())
    assert data["engine"] == engine and f"{engine} engine" in stderr + stdout
    return rc, data, str(out) if extra else ""


def _ops(stats: dict) -> dict[str, dict]:
    return {o["op"]: o for o in stats["ops"]}


@pytest.mark.parametrize("case", list(SCRIPTS))
def test_both_engines_rehearse_a_script_alike(tmp_path, case):
    target, script, *args = SCRIPTS[case]
    _, native, native_out = _rehearse(tmp_path, "native", target, script, *args)
    _, wrapper, wrapper_out = _rehearse(tmp_path, "wrapper", target, script, *args)
    a, b = _ops(native), _ops(wrapper)
    for op in set(a) | set(b):
        if op in ENGINE_PATHS or op in ENGINE_PATHS.values() and op not in (set(a) & set(b)):
            continue  # a path PyTorch itself takes otherwise for a device tensor than for a subclass (module doc)
        assert op in a and op in b, (case, op, "native" if op in a else "wrapper")
        assert (a[op]["path"], a[op]["status"]) == (b[op]["path"], b[op]["status"]), (case, op, a[op], b[op])
        if a[op]["path"] != "native":  # what fell back: the same calls and the same bytes moved
            assert (a[op]["calls"], a[op]["to_host"], a[op]["to_device"]) == \
                   (b[op]["calls"], b[op]["to_host"], b[op]["to_device"]), (case, op, a[op], b[op])
    for op in set(a) - set(b):
        assert op in ENGINE_PATHS and a[op]["path"] == "native", (case, op, a[op])
    for op in set(b) - set(a):
        assert op in ENGINE_PATHS.values() or op in ENGINE_PATHS, (case, op, b[op])
    assert native["errors"] == wrapper["errors"]
    if native_out:
        x, y = torch.load(native_out), torch.load(wrapper_out)
        assert x["final"].keys() == y["final"].keys()
        for name in x["final"]:
            torch.testing.assert_close(x["final"][name], y["final"][name], rtol=1e-6, atol=1e-6,
                                       msg=lambda m, n=name: f"{case} {n}: {m}")


def test_an_op_the_cpp_device_hands_to_python_comes_as_a_python_kernel_gets_it():
    """The C++ device's calls of the rehearsal's handler pass a dtype, a layout and a memory format as torch's
    objects (its stack holds them as ints), so that fallbacks and decompositions compare them as they do. In a
    process of its own: a process simulates one device type."""
    proc = run_python("handler_kwargs.py", env={"PYTHONPATH": str(ROOT)}, timeout=600)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stderr[-3000:]


def test_a_cpp_device_that_does_not_build_leaves_the_wrapper_engine(tmp_path):
    """No working C++ compiler: the command says why, and the rehearsal runs on the wrapper engine."""
    script = tmp_path / "s.py"
    script.write_text("import torch\n\nx = torch.ones(3, device='cuda')\nprint((x * 2).sum().item())\n")
    rc, stdout, stderr = run_cli("run", "--simulate", "ascend", "--", str(script), cwd=tmp_path,
                                 env={"CXX": "/bin/false", "OPAUDIT_REHEARSAL_DEVICE_BUILD": str(tmp_path / "build")})
    assert rc == 0, stderr[-2000:]
    assert "6.0" in stdout
    assert "building the rehearsal's C++ device failed" in stderr and "wrapper engine instead" in stderr
    assert "(simulated, device npu, wrapper engine)" in stdout + stderr


_ADAMW = """
import torch
model = torch.nn.Linear(4, 4).to("{device}")
opt = torch.optim.AdamW(model.parameters(), lr=0.1)  # foreach chosen by the device type, as torch does
for _ in range(2):
    model(torch.randn(3, 4, device="{device}")).sum().backward()
    opt.step()
    opt.zero_grad()
"""


@pytest.mark.parametrize(("target", "device", "foreach"), [("mps@2.13.0", "mps", False), ("ascend", "npu", True)])
def test_the_optimizer_takes_the_path_torch_takes_on_the_targets_device(target, device, foreach, tmp_path):
    """torch.optim takes its foreach path on CUDA, XPU, MTIA and any PrivateUse1 device, the single-tensor path on
    MPS; the C++ device is a PrivateUse1 device whatever the target, so on mps it must not take it."""
    script = tmp_path / "adamw.py"
    script.write_text(_ADAMW.format(device=device))
    stats = tmp_path / "stats.json"
    rc, _, stderr = run_cli("run", "--simulate", target, "--stats", str(stats), "--", str(script), cwd=tmp_path)
    assert rc == 0, stderr[-2000:]
    data = json.loads(stats.read_text())
    assert data["engine"] == "native"
    ops = {o["op"] for o in data["ops"]}
    assert any(op.startswith("_foreach_") for op in ops) == foreach, sorted(ops)
    assert any(op.startswith("addcdiv_") or op.startswith("lerp_") for op in ops) != foreach, sorted(ops)


def test_ops_counted_in_cpp_name_no_line_of_the_command_line(tmp_path):
    """Allocations, views and set_ (a checkpoint's load) are counted in C++ with no Python frame: they name no line,
    and no op names a line of the command line's own frames (typer's, click's)."""
    source = ("import torch\nm = torch.nn.Linear(4, 4).to('npu')\ntorch.save(m.state_dict(), 'm.pt')\n"
              "m.load_state_dict(torch.load('m.pt'))\nprint(m(torch.ones(2, 4, device='npu')).sum().item())\n")
    sources = {o["op"]: o["source"] for o in rehearsed_ops(tmp_path, "ckpt.py", source)}
    assert sources["set_.source_Storage_storage_offset"] is None and sources["empty.memory_format"] is None
    assert sources["addmm"] == "ckpt.py:5"
    assert all(s is None or s.startswith("ckpt.py:") for s in sources.values()), sources
