"""``opaudit fix --verify``: the port is rehearsed on the target's device with CUDA absent and held to the original's
CPU run. Two programs of tests/fixtures/verify/: the legacy style (a CUDA flag, the code it guards, a typed tensor
alias, a conditional move, a model from another module of the folder), which must port whole and train on the
device with the CPU run's losses; and a capability probe reading `.major`, which Ascend's device properties lack,
so the group stays CUDA and verify names what is left, where, and that nothing reached the device."""

from __future__ import annotations

import shutil

import pytest
from helpers import FIXTURES, run_cli

from opaudit.errors import InputError
from opaudit.lint import Settings
from opaudit.rehearsal.verify import Verification, verify

PROGRAMS = FIXTURES / "verify"


def test_a_legacy_program_ports_whole_and_trains_on_the_device(tmp_path):
    shutil.copytree(PROGRAMS / "legacy", tmp_path / "legacy")
    folder = tmp_path / "legacy"
    code, out, err = run_cli("fix", "-t", "ascend", "--unsafe-fixes", "--verify", "--", "train.py", "--steps", "3",
                             cwd=folder)
    assert code == 0, out + err
    assert "ran to its end" in out and "parameters on npu, moved" in out, out
    assert "losses equal to the CPU run's for 3 steps" in out, out
    assert "the original on the CPU: ran, trains (3 optimizer steps)" in out
    ported = (folder / "train.py").read_text()
    # the flag, the alias and the moves changed together
    assert "cuda = torch.npu.is_available()" in ported and "Tensor = torch.npu.FloatTensor if cuda" in ported
    assert "critic.npu() if torch.npu.is_available() else critic" in ported and "generator.npu()" in ported
    assert "torch.cuda" not in ported and ".cuda()" not in ported


def test_a_probe_the_target_cannot_answer_is_left_whole_and_named(tmp_path):
    shutil.copytree(PROGRAMS / "capability", tmp_path / "capability")
    script = tmp_path / "capability" / "train.py"
    before = script.read_bytes()
    v = verify(str(script), [], Settings(target="ascend", unsafe_fixes=True), in_place=False)
    assert script.read_bytes() == before  # a copy was verified
    assert not v.ok and v.ran and not v.reached and v.reference_trains and not v.trained_on_device
    left = {(f.line, f.code) for f in v.cuda_left}
    assert {(10, "OA117"), (16, "OA106"), (16, "OA117")} <= left, left  # the probes that ran, still CUDA
    assert [(f.line, f.code) for f in v.not_reached] == [(12, "OA118")]  # `.major`: the reason, never reached
    problems = "\n".join(v.problems())
    assert "no op reached the npu device" in problems and "did not train on npu" in problems
    assert v.losses() is not None and v.losses().startswith("losses equal")  # both ran on the CPU


def test_bad_input_is_one_message(tmp_path):
    code, _, err = run_cli("fix", "-t", "ascend", "--verify", "--", "no_such_script.py", cwd=tmp_path)
    assert code == 2 and "script not found: no_such_script.py" in err and "Traceback" not in err
    code, _, err = run_cli("fix", "-t", "ascend", str(tmp_path), "--", "train.py")
    assert code == 2 and "run by --verify only" in err
    with pytest.raises(InputError, match="rehearses a vendor's device"):
        verify(str(PROGRAMS / "legacy" / "train.py"), [], Settings(target="neutral"))


def test_advice_about_the_target_is_not_cuda_left(tmp_path):
    """A finding the catalogue scopes to a target (OA613: channels_last under Ascend's auto-migration) names no
    CUDA API, device string or library: lint shows it, and a port that runs on the device with it passes."""
    script = tmp_path / "train.py"
    script.write_text(
        "import torch\n"
        "model = torch.nn.Conv2d(3, 4, 3).cuda().to(memory_format=torch.channels_last)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for _ in range(2):\n"
        "    x = torch.randn(2, 3, 8, 8).cuda().to(memory_format=torch.channels_last)\n"
        "    loss = model(x).square().mean()\n"
        "    print(f'loss {loss.item():.6f}')\n"
        "    opt.zero_grad()\n"
        "    loss.backward()\n"
        "    opt.step()\n")
    v = verify(str(script), [], Settings(target="ascend", unsafe_fixes=True), in_place=False)
    assert v.ok, "\n".join(v.lines())
    assert {f.code for f in v.fixed.findings} >= {"OA613", "OA101"}  # shown, and not held against the port
    assert not v.cuda_left and not v.not_reached


def test_a_subclass_defined_and_never_made_is_not_reached(tmp_path):
    """A class statement runs at import; a CUDA-only base in it (`class Balanced(DataParallel)`, GPT2-chitchat's
    data_parallel.py in the third held-out set) is used once an object of the class runs a method: a program that
    defines it and never makes one passes, with the finding listed as not reached. One that makes one fails."""
    (tmp_path / "parallel.py").write_text(
        "import torch\n"
        "\n"
        "\n"
        "class Balanced(torch.nn.DataParallel):\n"
        "    def forward(self, *inputs):\n"
        "        return self.module(*inputs)\n")
    train = (
        "import sys\n"
        "import torch\n"
        "from parallel import Balanced\n"
        "model = torch.nn.Linear(4, 1).cuda()\n"
        "net = Balanced(model) if sys.argv[1:] == ['dp'] else model\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for _ in range(2):\n"
        "    loss = net(torch.randn(8, 4).cuda()).square().mean()\n"
        "    print(f'loss {loss.item():.6f}')\n"
        "    opt.zero_grad()\n"
        "    loss.backward()\n"
        "    opt.step()\n")
    (tmp_path / "train.py").write_text(train)
    v = verify(str(tmp_path / "train.py"), [], Settings(target="ascend", unsafe_fixes=True), in_place=False)
    assert v.ok, "\n".join(v.lines())
    assert [(f.line, f.code) for f in v.not_reached] == [(4, "OA122")]
    v = verify(str(tmp_path / "train.py"), ["dp"], Settings(target="ascend", unsafe_fixes=True), in_place=False)
    assert (4, "OA122") in {(f.line, f.code) for f in v.cuda_left}, "\n".join(v.lines())


def test_the_port_is_launched_with_the_targets_device_and_backend(tmp_path):
    """`--device cuda:0 --backend nccl`, the original's arguments: the CPU run gets cpu and gloo, the port npu:0 and
    hccl, the values its own argparse choices take once fixed (allanj/pytorch_neural_crf's trainer, in the fifth
    held-out set, failed in argparse when the port was launched with cuda:0)."""
    shutil.copytree(PROGRAMS / "device_arg", tmp_path / "p")
    code, out, err = run_cli("fix", "-t", "musa", "--unsafe-fixes", "--verify", "--", "train.py", "--device",
                             "cuda:0", "--backend=nccl", cwd=tmp_path / "p")
    assert code == 0, out + err
    assert "the port runs on musa with: --device musa:0 --backend=mccl" in out
    assert "the original runs on the CPU with: --device cpu --backend=gloo" in out
    assert "losses equal to the CPU run's for 3 steps" in out
    assert 'choices=["cpu", "musa:0", "musa:1"]' in (tmp_path / "p" / "train.py").read_text()


def test_a_reference_that_stops_after_its_steps_is_a_reference_up_to_there():
    """pytorch-GAT's CPU run trains, then stops at its last line (a git call the copy cannot answer): its losses
    are the reference, and the report says it stopped rather than that it did not run."""
    from opaudit.lint.engine import Run

    ref = {"ok": False, "error": "InvalidGitRepositoryError: /tmp/x", "losses": [0.5, 0.4], "steps": 2}
    port = {"ok": True, "losses": [0.5, 0.4], "steps": 2, "moved": True, "param_devices": ["npu"],
            "stats": {"calls": {"mm": 4}}}
    v = Verification("ascend", "train.py", [], Run(), ref, port, device="npu")
    text = "\n".join(v.lines())
    assert "the original on the CPU: stopped after 2 optimizer steps (InvalidGitRepositoryError" in text
    assert "no reference" not in text and "losses equal to the CPU run's for 2 steps" in text


def test_steps_the_port_s_grad_scaler_skipped_are_named_as_such(tmp_path):
    """YOLOv9's trainers in the seventh held-out set: under the ported AMP, the GradScaler skipped every step of a
    short run (float16 gradients past their range at the initial scale, as on a CUDA GPU), where the CPU run (no AMP)
    stepped; verify said only "no optimizer step". It now says the scaler skipped them, and what to do."""
    shutil.copytree(PROGRAMS / "amp_overflow", tmp_path / "p")
    code, out, err = run_cli("fix", "-t", "ascend", "--unsafe-fixes", "--verify", "--", "train.py", "--steps", "2",
                             cwd=tmp_path / "p")
    assert code == 1, out + err
    assert "the original on the CPU: ran, trains (2 optimizer steps)" in out, out
    assert "the port: no optimizer step (its GradScaler skipped 2)" in out, out
    assert "the port's GradScaler skipped every optimizer step (2: inf or NaN gradients, the last at scale 32768)" in \
        out + err, out + err


def test_a_library_s_own_choice_of_device_is_cuda_left_and_target_advice_is_not():
    """OA716 (PyTorch Lightning's accelerator, scoped to the targets Lightning has no device for) is what keeps the
    seventh held-out set's Lightning DDPM from the device: a port that keeps it is not done; channels_last under
    Ascend's auto-migration (OA613, also scoped) is advice, and fused=True (OA207) the rehearsal's own business."""
    from opaudit.rehearsal.verify import is_cuda_use

    assert is_cuda_use("OA716") and is_cuda_use("OA101")
    assert not is_cuda_use("OA613") and not is_cuda_use("OA207")


def test_an_import_that_raised_and_fell_back_is_no_cuda_left(tmp_path):
    """The eighth held-out set's BERT classifiers: `from apex... import FusedLayerNorm` in a try/except ImportError
    that defines torch's layer otherwise. apex is not installed, the import raised, the fallback ran: the line ran,
    but nothing of apex did. verify counted it as CUDA left; it is now listed as not used by this run, and the port
    (which trains with the CPU run's losses) passes."""
    import importlib.util

    assert importlib.util.find_spec("apex") is None  # (the environment this test describes)
    shutil.copytree(PROGRAMS / "guarded_import", tmp_path / "p")
    code, out, err = run_cli("fix", "-t", "ascend", "--unsafe-fixes", "--verify", "--", "train.py",
                             cwd=tmp_path / "p")
    assert code == 0, out + err
    assert "CUDA left, not used by this run: train.py:" in out and "apex is not installed here" in out, out
    assert "CUDA left, ran" not in out and "losses equal to the CPU run's" in out, out
