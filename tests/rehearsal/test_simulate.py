"""The CPU rehearsal, through the real command line: each run in a fresh process (a process renames
PrivateUse1 once, so it simulates one device type), on real models and real coverage_db matrices."""

from __future__ import annotations

import copy
import json
import re
import shutil

import pytest
from helpers import FIXTURES, ROOT, run_cli, run_python

from opaudit.matrix import load_database, load_matrix

GPT2 = str(FIXTURES / "fallback" / "gpt2_cuda.py")
FALLBACK_PATHS = {"decomposition", "cpu"}


def _vendors() -> list[str]:
    return [v for v in load_database().vendors if v != "cpu"]


def _stats(path) -> dict:
    return json.loads(path.read_text())


@pytest.mark.parametrize("vendor", _vendors())
def test_gpt2_train_step_on_the_newest_release_of_every_vendor(vendor, tmp_path):
    """The unported CUDA script runs with cuda mapped to the target; every op is held to the matrix."""
    out = tmp_path / "stats.json"
    rc, stdout, stderr = run_cli("run", "--simulate", vendor, "--stats", str(out), "--", GPT2)
    assert rc == 0, stderr[-2000:]
    newest = load_database().newest(vendor).key
    assert f"fallback on {newest}" in stdout
    assert "loss " in stdout
    st = _stats(out)
    assert st["target"] == newest and st["kind"] == "simulated"
    m = load_matrix(newest)
    device = m.release.device_type
    assert f"on {st['device']}:0" in stdout and st["device"].startswith(device)
    assert st["ops"], "nothing was counted"
    for o in st["ops"]:
        if "::" in o["op"]:
            continue
        if "device_selected.toml" in (o.get("reason") or ""):
            # an op of the stand-in's path that the target's own path never runs (dropout's native_dropout on
            # MPS, which draws a bernoulli_ mask): run as the target's composite (test_device_selected.py)
            assert o["status"] == "composite" and o["path"] == "decomposition", o
            continue
        status = m.resolve(o["op"]).status
        assert o["status"] == status, o
        if status == "missing":
            assert o["path"] in FALLBACK_PATHS, o
        elif status == "cpu_fallback":
            assert o["path"] == "vendor_cpu" and o["to_host"] > 0 and o["to_device"] > 0, o
        else:
            assert o["path"] == "native", o
    # the matmuls of the step ran, on the device
    assert any(o["op"] in ("mm", "addmm") and o["calls"] >= 2 for o in st["ops"])


def test_strict_fails_exactly_on_the_ops_the_matrix_calls_missing(tmp_path):
    """musa@1.2.1 lacks _foreach_lerp_.Scalar (AdamW's foreach path on the device): the rehearsal falls
    back on it alone, the audit of the same run calls it alone missing, and --strict stops on it."""
    target = "musa@1.2.1"
    stats, audit_json = tmp_path / "stats.json", tmp_path / "audit.json"
    rc, stdout, stderr = run_cli("run", "--simulate", target, "--stats", str(stats), "--audit-json", str(audit_json),
                                 "--", GPT2)
    assert rc == 0, stderr[-2000:]
    st = _stats(stats)
    fell_back = {o["op"] for o in st["ops"] if o["path"] in FALLBACK_PATHS}
    assert fell_back == {o["op"] for o in st["ops"] if o["status"] == "missing"} == {"_foreach_lerp_.Scalar"}
    report = json.loads(audit_json.read_text())
    missing = {o["op"] for o in report["ops"] if o["results"][target]["status"] == "missing"}
    assert missing == {"aten::_foreach_lerp_.Scalar"}
    assert report["fallback"][0]["target"] == target

    partial = tmp_path / "partial.json"
    rc, stdout, stderr = run_cli("run", "--simulate", target, "--strict", "--stats", str(partial), "--", GPT2)
    assert rc == 3
    assert "Could not run 'aten::_foreach_lerp_.Scalar' with arguments from the 'musa' backend" in stderr
    assert f"stopped on {target}" in stderr and "gpt2_cuda.py:23" in stderr  # optimizer.step()
    assert "Traceback" not in stderr
    saved = _stats(partial)  # what ran until then: the forward and backward passes
    assert saved["errors"] and "_foreach_lerp_.Scalar" in saved["errors"][0]
    assert sum(o["calls"] for o in saved["ops"]) > 100


def test_decompositions_are_checked_against_the_cpu(tmp_path):
    """A user matrix without the kernels of layer norm, softmax and tanh: what the device then lacks is
    decomposed (native_layer_norm itself still runs: PyTorch has a CompositeExplicitAutograd kernel for
    it), and --check-numerics compares every call with the CPU kernel."""
    base = copy.deepcopy(load_matrix("ascend").release)  # a copy: the database caches its releases
    dropped = {"native_layer_norm", "native_layer_norm_backward", "_softmax", "_safe_softmax",
               "_softmax_backward_data", "tanh.out", "tanh", "tanh_backward.grad_input", "tanh_backward"}
    base.ops = {k: [o for o in v if o not in dropped] for k, v in base.ops.items()}
    base.vendor, base.name = "labchip", "0.1"
    base.fallback.exists = base.fallback.default_on = False
    matrix = tmp_path / "labchip.toml"
    matrix.write_text(base.to_toml("a lab chip: the newest Ascend release without a few ops"))
    stats = tmp_path / "stats.json"
    rc, stdout, stderr = run_cli("run", "--simulate", str(matrix), "--check-numerics", "--stats", str(stats),
                                 "--", GPT2)
    assert rc == 0, stderr[-2000:]
    ops = {o["op"]: o for o in _stats(stats)["ops"]}
    assert ops["native_layer_norm"]["status"] == "composite" and ops["native_layer_norm"]["path"] == "native"
    for o in ops.values():
        assert (o["status"] == "missing") == (o["path"] in FALLBACK_PATHS), o
    for name in ("native_layer_norm_backward", "tanh_backward"):
        o = ops[name]
        assert o["status"] == "missing" and o["path"] == "decomposition", o
        assert o["checked"] == o["calls"] > 0
        assert o["max_rel_error"] < 1e-5, o  # float32 decompositions of well-conditioned ops
    assert "max rel. error" in stdout


def test_the_example_training_script_after_fix_runs_with_its_fallback_summary_in_the_html(tmp_path):
    script = tmp_path / "train_cuda.py"
    shutil.copy(ROOT / "examples" / "train_cuda.py", script)
    rc, _, stderr = run_cli("fix", "--target", "ascend", "--unsafe-fixes", str(script))  # the probe with its uses
    assert rc in (0, 1), stderr
    assert "import torch_npu" in script.read_text() and 'torch.npu.is_available()' in script.read_text()
    html, stats = tmp_path / "report.html", tmp_path / "stats.json"
    newest = load_database().newest("ascend").key
    rc, stdout, stderr = run_cli("run", "--simulate", "ascend", "--html", str(html), "--stats", str(stats), "--",
                                 str(script), "--epochs", "1", "--steps-per-epoch", "2", "--batch-size", "4",
                                 "--no-amp")
    assert rc == 0, stderr[-2000:]
    assert "epoch 0: loss" in stdout and "peak memory" in stdout  # torch.npu's runtime calls answered
    text = html.read_text()
    assert f"Fallback on {newest}" in text and "a CPU rehearsal (npu)" in text
    assert _stats(stats)["target"] == newest


def test_the_unported_cuda_script_is_rehearsed_too(tmp_path):
    """cuda is mapped onto the simulated device: torch.cuda's runtime calls, .cuda(), "cuda:0", AMP with
    torch.cuda.amp's autocast and GradScaler."""
    stats = tmp_path / "stats.json"
    rc, stdout, stderr = run_cli("run", "--simulate", "cambricon", "--stats", str(stats), "--",
                                 str(ROOT / "examples" / "train_cuda.py"), "--epochs", "1", "--steps-per-epoch", "1",
                                 "--batch-size", "2")
    assert rc == 0, stderr[-2000:]
    assert "peak memory" in stdout  # the script took its CUDA branch: torch.cuda answered as the simulated mlu
    ops = {o["op"] for o in _stats(stats)["ops"]}
    assert {"_amp_foreach_non_finite_check_and_unscale_", "_amp_update_scale_", "convolution"} <= ops


def test_a_cpu_tensor_beside_device_tensors_fails_as_on_the_device():
    rc, _, stderr = run_cli("run", "--simulate", "ascend", "--", str(FIXTURES / "fallback" / "forgot_to_move.py"))
    assert rc == 3
    assert "Expected all tensors to be on the same device, but found at least two devices, npu:0 and cpu!" in stderr
    assert "forgot_to_move.py:9" in stderr and "Traceback" not in stderr


def test_collectives_of_one_process_under_the_targets_backend_name():
    rc, stdout, stderr = run_cli("run", "--simulate", "ascend", "--", str(FIXTURES / "fallback" / "ddp_hccl.py"))
    assert rc == 0, stderr[-2000:]
    assert "world 1 backend hccl sum 3 out torch.float16" in stdout


def test_bad_input(tmp_path):
    rc, _, stderr = run_cli("run", "--simulate", "nosuchvendor", "--", GPT2)
    assert rc == 2 and "nosuchvendor" in stderr and "Traceback" not in stderr
    rc, _, stderr = run_cli("run", "--simulate", "ascend", "--", str(tmp_path / "missing.py"))
    assert rc == 2 and "script not found" in stderr
    rc, _, stderr = run_cli("run", "--simulate", "cpu", "--", GPT2)
    assert rc == 2 and "nothing to simulate" in stderr
    rc, _, stderr = run_cli("run", "--", GPT2)
    assert rc == 2 and "--simulate" in stderr


def test_a_script_that_raises_and_a_fallback_that_fails_keep_their_statistics(tmp_path):
    partial = tmp_path / "partial.json"
    # the script's own error, after the train step: the statistics of the step are kept
    rc, _, stderr = run_cli("run", "--simulate", "ascend", "--stats", str(partial), "--", GPT2, "--bad-shapes")
    assert rc == 3 and "mat1 and mat2 shapes cannot be multiplied" in stderr and "gpt2_cuda.py" in stderr
    assert sum(o["calls"] for o in _stats(partial)["ops"]) > 100
    # an op sent through opaudit's CPU fallback that fails there: the op, the target and the line are named
    rc, _, stderr = run_cli("run", "--simulate", "ascend", "--cpu", "aten::mm", "--stats", str(partial), "--", GPT2,
                            "--bad-shapes")
    assert rc == 3
    assert "opaudit's fallback of aten::mm (cpu) on ascend@" in stderr and "gpt2_cuda.py:28" in stderr
    st = _stats(partial)
    assert any(o["op"] == "mm" and o["path"] == "cpu" and o["calls"] > 1 for o in st["ops"])
    # a forbidden fallback fails as the device would
    rc, _, stderr = run_cli("run", "--simulate", "musa@1.2.1", "--forbid", "_foreach_lerp_.Scalar", "--", GPT2)
    assert rc == 3 and "fallback is forbidden" in stderr and "_foreach_lerp_.Scalar" in stderr


@pytest.mark.parametrize("vendor,device", [("ascend", "npu"), ("cambricon", "mlu")])
def test_a_port_that_sets_the_targets_backend_flags_rehearses(vendor, device, tmp_path):
    """`fix` turns torch.backends.cuda.matmul.allow_tf32 into the target's flag (torch.npu.matmul.allow_hf32,
    torch.backends.mlu.matmul.allow_tf32); the rehearsal of the port has those flags (rules/ [surface]), and
    only during it."""
    script = tmp_path / "train.py"
    shutil.copy(FIXTURES / "fallback" / "tf32_flags_cuda.py", script)
    rc, _, stderr = run_cli("fix", "--target", vendor, "--unsafe-fixes", str(script))
    assert rc == 0, stderr[-2000:]
    ported = script.read_text()
    assert "torch.backends.cuda" not in ported and "torch.backends.cudnn" not in ported
    rc, stdout, stderr = run_cli("run", "--simulate", vendor, "--strict", "--no-map-cuda", "--", str(script),
                                 cwd=tmp_path)
    assert rc == 0, stderr[-2000:]
    assert f"trained on {device}: loss" in stdout
    proc = run_python("ascend_flags.py")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["False", "False"]


@pytest.mark.parametrize("target,kind,op", [("musa@1.3.0", "elu", "elu_backward"),
                                            ("ascend", "grucell", "_thnn_fused_gru_cell_backward")])
def test_an_op_missing_in_backward_fails_under_strict_with_its_message(target, kind, op, tmp_path):
    """Raised inside the autograd engine, the failure would unwind through the simulated device's stream
    guard and abort the process; it is raised by loss.backward() instead, with the statistics."""
    script = FIXTURES / "fallback" / "backward_missing.py"
    stats = tmp_path / "stats.json"
    rc, stdout, stderr = run_cli("run", "--simulate", target, "--strict", "--stats", str(stats), "--", str(script),
                                 kind, cwd=tmp_path)
    assert rc == 3, stderr[-2000:]
    assert f"stopped on {load_matrix(target).key} (--strict)" in stderr and f"aten::{op}" in stderr
    assert "backward_missing.py:22" in stderr and "loss.backward()" in stderr and "Traceback" not in stderr
    assert "step 0" not in stdout  # it stops at the first backward
    data = _stats(stats)
    assert any(f"aten::{op} is missing" in e for e in data["errors"])
    assert op not in {o["op"] for o in data["ops"]}  # what finished the engine's work is counted nowhere
    rc, stdout, stderr = run_cli("run", "--simulate", target, "--", str(script), kind, cwd=tmp_path)
    assert rc == 0 and "step 1" in stdout, stderr[-2000:]  # without --strict the fallback runs it


@pytest.mark.parametrize("target,backend,device", [("ascend", "hccl", "npu"), ("xpu", "opaudit", "xpusim")])
def test_an_unported_one_rank_ddp_script_under_torchrun_variables(target, backend, device, tmp_path):
    """nccl names the target's backend; where torch knows the target's backend by name but this build lacks it
    (xccl without XPU), the one-rank group goes under opaudit's own name."""
    env = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "0"}
    rc, stdout, stderr = run_cli("run", "--simulate", target, "--", str(FIXTURES / "fallback" / "ddp_torchrun_nccl.py"),
                                 cwd=tmp_path, env=env)
    assert rc == 0, stderr[-2000:]
    assert f"world 1 backend {backend} grad {device}" in stdout


def test_strict_names_the_ops_the_data_knows_nothing_about_and_strict_unknown_stops_on_them(tmp_path):
    """Sophgo's published list says nothing about logit: --strict runs it as if native and says so in its
    summary; --strict-unknown fails on it as on a device that might lack it, with the line."""
    script = tmp_path / "logit.py"
    script.write_text("import torch\n"
                      "x = torch.rand(8, device='cuda') * 0.8 + 0.1\n"
                      "y = torch.logit(x)\n"
                      "print('done', float(y.sum()))\n")
    assert load_matrix("sophgo").resolve("aten::logit.default").status == "unknown"
    rc, stdout, stderr = run_cli("run", "--simulate", "sophgo", "--strict", "--", str(script), cwd=tmp_path)
    assert rc == 0, stderr[-2000:]
    assert "done" in stdout
    assert re.search(r"unknown to the data, run as if native \(1 op; --strict-unknown stops on them\): logit$",
                     stdout, re.M), stdout
    rc, stdout, stderr = run_cli("run", "--simulate", "sophgo", "--strict-unknown", "--", str(script), cwd=tmp_path)
    assert rc == 3 and "done" not in stdout
    assert "aten::logit" in stderr and "the data says nothing about it" in stderr, stderr[-2000:]
    assert "logit.py:3" in stderr


def test_a_cpu_round_trip_takes_python_numbers_as_wrapped_numbers(tmp_path):
    """``t * 2`` hands aten::mul.Tensor the 2 as a Python number; the CPU round trip of the native engine gave it to
    its C++ runner, which takes only a tensor there ("Unable to cast 2 to Tensor"): every op of a number and a
    tensor failed once sent to the CPU (--cpu, or the fallback of a dtype the target lacks, float64 on MPS). The
    results and their dtypes are the CPU's, a wrapped number's type promotion included (an int tensor times 2.5 is
    float32, not float64; a float16 tensor plus 1 stays float16)."""
    script = tmp_path / "numbers.py"
    script.write_text(
        "import torch\n"
        "def run(device):\n"
        "    f = torch.arange(4, device=device, dtype=torch.float32)\n"
        "    i = torch.arange(4, device=device)\n"
        "    h = f.half()\n"
        "    d = f.double()\n"
        "    out = [f * 2, f / 4, f - 1.5, i * 2.5, h + 1, d * 3, torch.div(d, 2, rounding_mode='floor'), f.mul_(3)]\n"
        "    return [(str(t.dtype), t.cpu().tolist()) for t in out]\n"
        "device = 'npu' if hasattr(torch, 'npu') else 'cpu'\n"
        "print(run(device) == run('cpu'), run(device))\n")
    ops = ["--cpu", "mul.Tensor", "--cpu", "div.Tensor", "--cpu", "sub.Tensor", "--cpu", "add.Tensor",
           "--cpu", "div.Tensor_mode", "--cpu", "mul_.Tensor"]
    rc, stdout, stderr = run_cli("run", "--simulate", "ascend", *ops, "--", str(script))
    assert rc == 0, stderr[-2000:]
    assert stdout.startswith("True ["), stdout
    assert "'torch.float32', [0.0, 2.5, 5.0, 7.5]" in stdout and "'torch.float16', [1.0, 2.0, 3.0, 4.0]" in stdout
    assert re.search(r"mul\.Tensor\s+cpu\s+\d+ calls", stdout + stderr), stdout[-2000:]
