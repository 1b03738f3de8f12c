"""What `fix` writes, the rehearsal can run: every name `fix` can write for a target (its table's [api]
values, the rules' templates, torch.cuda.X mapped onto its module) resolves in a simulation of that target,
where the device module and the data-driven stand-ins of its surface (rules/surface.toml, [surface] of
rules/targets/) answer it. Each simulation in its own process (PrivateUse1 is renamed once per process)."""

from __future__ import annotations

import json

import pytest
from helpers import run_cli, run_python

from opaudit.lint import load_catalogue, load_target
from opaudit.lint.rules.apis import written_names

TARGETS = ["ascend", "biren", "cambricon", "musa", "xpu", "mps"]

@pytest.mark.parametrize("target", TARGETS)
def test_every_name_fix_writes_resolves_in_the_simulated_target(target):
    proc = run_python("surface_probe.py", target)  # tests/subprocess/: a process simulates one device type
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out["names"] >= 10 and out["under_module"] >= 5  # the check has something to check
    assert out["missing"] == [], f"{target}: fix writes names the rehearsal lacks: {out['missing']}"
    if load_target(target).package:
        assert out["device_module"] == "SimDevice"  # torch.npu and friends: the simulated device's module


def test_surface_entries_are_names_fix_writes():
    """A target's own [surface] entry is a name some fix writes (or the collective backend's, which ported
    code tests): a stale entry would hide a replacement that no longer exists."""
    for name in TARGETS:
        t = load_target(name)
        written = written_names(t, load_catalogue(), "2.13")
        mirror = {n for n in t.surface if n.startswith(t.module + ".")} - written
        stale = {n for n in set(t.surface) - written - mirror if not n.startswith("torch.distributed.")}
        assert not stale, (name, sorted(stale))


def test_a_port_using_the_vendor_surface_runs_in_the_rehearsal(tmp_path):
    """HF32 flags and mstx ranges as `fix --target ascend` writes them, and the vendor's fused optimizer, run
    under --strict."""
    script = tmp_path / "train.py"
    script.write_text(
        "import torch\n"
        "torch.backends.cuda.matmul.allow_tf32 = True\n"
        "torch.backends.cudnn.allow_tf32 = True\n"
        "model = torch.nn.Linear(4, 2).cuda()\n"
        "opt = torch.optim.AdamW(model.parameters(), lr=1e-3)\n"
        "torch.cuda.nvtx.range_push('step')\n"
        "loss = model(torch.randn(3, 4, device='cuda')).sum()\n"
        "loss.backward()\n"
        "opt.step()\n"
        "torch.cuda.nvtx.range_pop()\n"
        "print('done', loss.device.type, torch.npu.matmul.allow_hf32)\n")
    rc, _, stderr = run_cli("fix", "--target", "ascend", "--unsafe-fixes", str(script))
    assert rc in (0, 1), stderr
    text = script.read_text()
    assert "torch.npu.matmul.allow_hf32 = True" in text and "torch_npu.npu.mstx.range_push" in text
    assert "cuda" not in text
    # what fix writes for apex's FusedAdam (OA702), run as torch's AdamW by its stand-in
    script.write_text(text + "fused = torch_npu.optim.NpuFusedAdamW(model.parameters())\nfused.step()\n")
    rc, stdout, stderr = run_cli("run", "--simulate", "ascend", "--strict", "--no-map-cuda", "--", str(script))
    assert rc == 0, stderr[-3000:]
    assert "done npu True" in stdout
