"""Device names of another type (``cuda`` in an unported script) mapped onto the simulated device: each way torch
takes a device, on both engines, through the real command line; torch as it was once the simulation ends; and
generators made for the device."""

from __future__ import annotations

import pytest
import torch
from helpers import FIXTURES, run_cli, run_python

SCRIPT = str(FIXTURES / "fallback" / "device_names.py")


@pytest.mark.parametrize("engine", ["native", "wrapper"])
def test_every_way_a_script_names_cuda_lands_on_the_simulated_device(engine, monkeypatch):
    monkeypatch.setenv("OPAUDIT_REHEARSAL_DEVICE", engine)
    rc, stdout, stderr = run_cli("run", "--simulate", "ascend", "--", SCRIPT,
                                 *(["--storages"] if engine == "native" else []))
    assert rc == 0, stderr[-2000:]
    lines = stdout.splitlines()
    placed = dict(line.split(": ", 1) for line in lines[:next(i for i, x in enumerate(lines) if "modes" in x) + 1])
    expected_cpu = {"default after reset", "stays on cpu"}
    wrong = {k: v for k, v in placed.items() if k not in expected_cpu | {"function modes"} and v != "npu:0"}
    assert not wrong and len(placed) >= (20 if engine == "native" else 18), placed
    assert {placed[k] for k in expected_cpu} == {"cpu"}
    assert placed["function modes"] == "0"  # no TorchFunctionMode left on every torch call


def test_torch_is_as_it_was_after_the_simulation():
    proc = run_python("torch_restored.py")
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


GENERATOR = """
import sys
import torch

dev = sys.argv[1]
draws = [torch.randn(3, device=dev, generator=torch.Generator(device=dev).manual_seed(0)) for _ in range(2)]
g = torch.Generator(device=dev)
print(draws[0].device, torch.equal(draws[0].cpu(), draws[1].cpu()), isinstance(g, torch.Generator), g.initial_seed())
"""


@pytest.mark.parametrize("how,device", [("run", "cuda"), ("run", "npu"), ("trace", "cuda")],
                         ids=["rehearsal-cuda", "rehearsal-ported", "trace-stand-in"])
def test_a_generator_made_for_the_device_seeds_its_random_ops(how, device, tmp_path):
    """torch.Generator(device=...) for the device (unported, ported, and on the trace's CUDA stand-in), as diffusers'
    pipelines seed with one: seeded draws repeat; the seed of a fresh one is CUDA's default, as torch's own."""
    script = tmp_path / "gen.py"
    script.write_text(GENERATOR)
    if how == "run":
        rc, stdout, stderr = run_cli("run", "--simulate", "ascend", *(["--no-map-cuda"] if device == "npu" else []),
                                     "--", str(script), device, cwd=tmp_path)
    else:
        rc, stdout, stderr = run_cli("trace", "-q", "--no-audit", "--json", str(tmp_path / "t.json"), "--",
                                     str(script), device, cwd=tmp_path)
    assert rc == 0, stderr[-2000:]
    line = next(x for x in stdout.splitlines() if x.startswith(("npu", "cuda")))
    assert line.split()[1:] == ["True", "True", str(torch.Generator().initial_seed())], line
    assert line.split()[0] == ("cuda:0" if how == "trace" else "npu:0")


def test_a_recording_in_a_later_simulation_reuses_the_last_plan():
    """Every simulation binds the same device-name wrappers, so a recording in each reuses the last recording's
    replacements instead of resolving every api binding again (its set-up, bench/tracer_overhead.py)."""
    proc = run_python("recording_reentry.py")
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]
