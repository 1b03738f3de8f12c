"""Checkpoints in a rehearsal (opaudit/rehearsal/checkpoint.py): torch.save / torch.load of a model and its
optimizer mid-training, with the map_location forms real scripts use, through the real command line."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from helpers import FIXTURES, ROOT, rehearsed_ops, run_cli, run_python

RESUME = str(FIXTURES / "fallback" / "resume_training.py")


def _result(stdout: str) -> dict:
    return json.loads(next(line for line in stdout.splitlines() if line.startswith("{")))


@pytest.fixture(scope="module")
def cpu_reference(tmp_path_factory) -> dict:
    """The same script on the CPU, without opaudit."""
    cwd = tmp_path_factory.mktemp("cpu")
    proc = subprocess.run([sys.executable, RESUME, "--device", "cpu"], capture_output=True, text=True, cwd=cwd,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return _result(proc.stdout)


@pytest.mark.parametrize(("options", "loaded_on"), [
    ((), "npu:0"),                                               # no map_location: back where it was saved
    (("--map-location", "cuda"), "npu:0"),                       # 'cuda' is mapped, as everywhere in a rehearsal
    (("--map-location", "npu:0", "--weights-only", "false"), "npu:0"),
    (("--map-location", "device:cuda"), "npu:0"),                # a torch.device
    (("--map-location", "dict"), "npu:0"),                       # {'cuda:0': 'cuda'}
    (("--map-location", "fn"), "cpu"),                           # lambda storage, loc: storage
    (("--map-location", "cpu"), "cpu"),
    (("--whole", "--weights-only", "false"), "npu:0"),           # torch.save(model), parameters and all
])
def test_a_checkpoint_resumes_training_where_the_device_would_put_it(options, loaded_on, cpu_reference, tmp_path):
    rc, stdout, stderr = run_cli("run", "--simulate", "ascend", "--", RESUME, *options, cwd=tmp_path)
    assert rc == 0, stderr[-3000:]
    r = _result(stdout)
    assert r["loaded_on"] == loaded_on and r["step_on"] == loaded_on
    assert r["moved"], "the resumed parameters did not train"
    assert r["param_type"] in ("SimTensor", "Parameter")
    # the same training as on the CPU (the LSTM's cells run as references: float32 rounding apart)
    assert r["sum"] == pytest.approx(cpu_reference["sum"], rel=1e-5, abs=1e-5)
    assert r["loss"] == pytest.approx(cpu_reference["loss"], rel=1e-5)


def test_a_ported_script_loads_onto_the_target_device_by_name(tmp_path):
    rc, stdout, stderr = run_cli("run", "--simulate", "ascend", "--no-map-cuda", "--", RESUME, "--device", "npu",
                                 "--map-location", "npu", cwd=tmp_path)
    assert rc == 0, stderr[-3000:]
    assert _result(stdout)["loaded_on"] == "npu:0"


def test_the_file_is_what_the_device_writes(tmp_path):
    """Tagged with the device (npu:0): outside a rehearsal it loads with map_location='cpu', and without it
    fails as a real device's checkpoint does on a machine without the device."""
    rc, stdout, stderr = run_cli("run", "--simulate", "ascend", "--", RESUME, "--keep", "--out", "ck.pt",
                                 cwd=tmp_path)
    assert rc == 0, stderr[-3000:]
    ckpt = torch.load(tmp_path / "ck.pt", map_location="cpu")
    assert ckpt["model"]["head.weight"].device.type == "cpu" and int(ckpt["step"]) == 3
    with pytest.raises(RuntimeError, match="npu:0"):
        torch.load(tmp_path / "ck.pt")


def test_cuda_without_the_mapping_fails_as_on_the_target(tmp_path):
    """--no-map-cuda: map_location='cuda' on a machine with no CUDA raises torch's own error, with the line."""
    rc, stdout, stderr = run_cli("run", "--simulate", "ascend", "--no-map-cuda", "--", RESUME, "--device", "npu",
                                 "--map-location", "cuda", cwd=tmp_path)
    assert rc == 3
    assert "CUDA" in stderr and "torch.load" in stderr


@pytest.mark.parametrize("engine", ["native", "wrapper"])
def test_a_storage_on_the_simulated_device_is_one_or_stops_with_a_message_not_a_crash(tmp_path, engine):
    """The C++ device has storages of its own, as a device does; the wrapper engine keeps device data in tensors
    only, and a storage made on its device stops the run with a message that says so."""
    script = tmp_path / "storage.py"
    script.write_text("import torch\n\nx = torch.ones(4, device='cuda')\n"
                      "s = torch.UntypedStorage(16).to(device='cuda')\n"
                      "assert s.device == x.device and s.nbytes() == 16, s.device\n")
    rc, stdout, stderr = run_cli("run", "--simulate", "ascend", "--", str(script), cwd=tmp_path,
                                 env={"OPAUDIT_REHEARSAL_DEVICE": engine})
    if engine == "native":
        assert rc == 0, stderr[-2000:]
        return
    assert rc == 3, stderr[-2000:]
    assert "limit of the CPU rehearsal" in stderr and "storage.py" in stderr


def test_a_wrapper_put_on_torch_save_before_the_rehearsal_still_runs():
    """A program's (or a library's) wrapper of torch.save / torch.load made before the rehearsal began runs in
    it, as on the device, around the rehearsal's own checkpointing."""
    proc = run_python("save_wrapped_before.py", env={"PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "['save', 'load'] npu:0"


def test_saving_copies_each_storage_as_a_device_receives_it(tmp_path):
    """torch.save copies a device storage to the host through set_(storage) on the device: counted once, as a trace
    on a GPU records it, not with the overload PyTorch's own set_ calls through the dispatcher beneath it."""
    source = ("import io\nimport torch\n\nm = torch.nn.Linear(4, 4).to('cuda')\n"
              "torch.save(m.state_dict(), io.BytesIO())\n")
    ops = {o["op"] for o in rehearsed_ops(tmp_path, "save.py", source)}
    assert "set_.source_Storage" in ops and "set_.source_Storage_storage_offset" not in ops, ops
