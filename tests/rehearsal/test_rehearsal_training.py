"""The rehearsal trains as the device would: a small GPT trained the way single-file CUDA scripts train one
(tests/fixtures/fallback/gpt_amp_cuda.py: autocast, an evaluation under no_grad + autocast before each step,
fused AdamW, GradScaler for float16, DDP) ends with the parameters of a reference run on plain CPU tensors.

The reference applies the casts the rehearsal applies: CUDA's autocast policy installed on the CPU's
autocast key (tests/fixtures/fallback/cpu_reference.py; torch's own CPU policy casts other ops). Dropout is
off under autocast: a device runs the fused native_dropout, the CPU the composite dropout, and for low
precision inputs the two draw their masks differently. Without autocast the reference is the script itself
on the CPU, dropout on. The runs agree to the bit today; the tolerance (1e-6 relative and absolute) leaves
room for a different summation order, far below what one training step moves a parameter (~1e-2).
Separately, every parameter must have moved: a rehearsal that silently leaves weights untrained (as one
that reused autocast casts made under no_grad did) would agree with a reference that shares its casts.

Checked on real code too: karpathy/nanoGPT at 3adf61e154c3fe3fca428ad6bc3818b27a3b8291, train.py with the
shakespeare_char config shrunk from its command line (2 layers, width 32, 3 iterations), rehearsed on ascend
in bf16 and on cambricon in fp16 (GradScaler), and as one DDP rank: every parameter trains (before the
cache followed torch's lifetime, the 8 linear weights of its blocks never changed, and DDP stopped on them)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import FIXTURES, ROOT, SUBPROCESS, run_cli

SCRIPT = str(FIXTURES / "fallback" / "gpt_amp_cuda.py")
REFERENCE = str(FIXTURES / "fallback" / "cpu_reference.py")
TOL = {"rtol": 1e-6, "atol": 1e-6}


def _python(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    import os

    full = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300, env=full, cwd=ROOT)


def _options(dtype: str) -> list[str]:
    return ["--dtype", dtype, "--dropout", "0.1" if dtype == "float32" else "0"]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The reference's parameters per dtype, each run once."""
    done: dict[str, dict] = {}

    def get(dtype: str) -> dict:
        if dtype not in done:
            out = tmp_path_factory.mktemp("reference") / f"{dtype}.pt"
            if dtype == "float32":  # no autocast: the script itself, on the CPU
                proc = _python(SCRIPT, "--device", "cpu", *_options(dtype), "--out", str(out))
            else:
                proc = _python(REFERENCE, SCRIPT, "--device", "cpu", *_options(dtype), "--out", str(out))
            assert proc.returncode == 0, proc.stderr[-3000:]
            assert f"trained on cpu in {dtype}" in proc.stdout
            done[dtype] = torch.load(out)
        return done[dtype]
    return get


def _rehearse(vendor: str, dtype: str, out: Path, *extra: str, env: dict | None = None) -> tuple[dict, str]:
    rc, stdout, stderr = run_cli("run", "--simulate", vendor, "--", SCRIPT, *_options(dtype), "--out", str(out),
                                 *extra, env=env)
    assert rc == 0, stderr[-3000:]
    return torch.load(out), stdout


def _same_training(run: dict, ref: dict) -> None:
    assert run["initial"].keys() == ref["initial"].keys()
    for name, before in run["initial"].items():
        assert torch.equal(before, ref["initial"][name]), name  # the same seed, the same model
        after = run["final"][name]
        assert not torch.equal(after, before), f"{name} did not change in the rehearsal"
        torch.testing.assert_close(after, ref["final"][name], **TOL, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.parametrize(("vendor", "dtype"), [("ascend", "bfloat16"), ("cambricon", "float16"),
                                               ("ascend", "float32")])
def test_a_gpt_trains_in_the_rehearsal_as_on_the_cpu(vendor, dtype, reference, tmp_path):
    run, stdout = _rehearse(vendor, dtype, tmp_path / "run.pt")
    assert f"in {dtype}" in stdout and ":0 in " in stdout and "trained on cpu" not in stdout
    _same_training(run, reference(dtype))


@pytest.mark.parametrize(("vendor", "backend"), [("ascend", "hccl"), ("cambricon", "nccl")])
def test_a_one_rank_ddp_rehearsal_trains_too(vendor, backend, reference, tmp_path):
    """As torchrun launches it, one rank; DDP reports parameters that got no gradient as an error."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    run, stdout = _rehearse(vendor, "bfloat16", tmp_path / "run.pt", "--backend", backend, env=env)
    assert "DDP over" in stdout
    _same_training(run, reference("bfloat16"))


def test_a_rehearsal_after_a_cpu_backward_in_the_same_process():
    """Also: .cpu() gives a CPU tensor, and tolist() works on a device tensor, as on a device."""
    proc = _python(str(SUBPROCESS / "after_cpu_backward.py"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "trained" in proc.stdout


def test_a_device_scalar_formats_as_its_number_as_on_a_device():
    """A training loop's meter formats 0-dim device tensors with a format spec: torch formats a plain tensor's
    number (a parameter, or a tensor of more than one element, raises TypeError), and the simulated device
    tensor, a subclass, does the same."""
    proc = _python(str(SUBPROCESS / "device_scalar_format.py"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    cpu, device = proc.stdout.splitlines()
    assert cpu == device == "[' 75.00', '5.0000e-01', '0.5', 'TypeError', 'TypeError']"
